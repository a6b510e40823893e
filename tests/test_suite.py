"""A pack's upstream suite: derived from the series, recorded with reasons, run base vs patched, compared."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from conftest import CORE_BUGGY, CORE_FIXED, REPO, cli, make_patch
from test_upstream_tests import upstream_repo  # noqa: F401  (the fixture: a fake upstream with a tests/ tree)

from harness.base import pyimports
from harness.errors import ConfigError, Exit
from harness.lane import suite, suite_reasons, upstream_tests
from harness.lane.receipts import find


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


TREE = {
    "pkg/__init__.py": "",
    "pkg/ops/__init__.py": "from .kern import run\n",  # re-exports the touched module
    "pkg/ops/kern.py": "def run(): return 1\n",
    "pkg/ops/other.py": "def other(): return 2\n",
    "pkg/block.py": "from pkg.ops.kern import run\n",  # a library module using it: one library hop
    "tests/__init__.py": "",
    "tests/conftest.py": "import tests.shared\n",
    "tests/shared.py": "X = 1\n",
    "tests/ops/__init__.py": "",
    "tests/ops/conftest.py": "",
    "tests/ops/util.py": "from pkg.ops import kern\n",  # a helper of the tests tree
    "tests/ops/test_direct.py": "import pkg.ops.kern as k\n\ndef test_a():\n    assert k.run() == 1\n",
    "tests/ops/test_from.py": "def test_b():\n    from pkg.ops.kern import run\n    assert run()\n",
    "tests/ops/test_package.py": "from pkg.ops import run\n\ndef test_c():\n    assert run()\n",
    "tests/ops/test_helper.py": "from .util import kern\n\ndef test_d():\n    assert kern.run()\n",
    "tests/ops/test_other.py": "from pkg.ops.other import other\n\ndef test_e():\n    assert other()\n",
    "tests/ops/test_block.py": "from pkg.block import run\n\ndef test_f():\n    assert run()\n",
    "tests/ops/test_top.py": "import pkg\n\ndef test_g():\n    pass\n",
    "tests/big/test_unrelated.py": "def test_h():\n    pass\n",
}


def test_derivation_follows_direct_imports_reexports_test_helpers_and_library_modules(tmp_path):
    tree = _tree(tmp_path, TREE)
    derived = {d.path: d.reasons for d in suite.derive(tree, {"pkg/ops/kern.py": ["0001-x.patch"],
                                                               "tests/ops/test_other.py": ["0002-t.patch"]})}
    assert sorted(derived) == ["tests/ops/test_block.py", "tests/ops/test_direct.py", "tests/ops/test_from.py",
                               "tests/ops/test_helper.py", "tests/ops/test_other.py", "tests/ops/test_package.py"]
    assert derived["tests/ops/test_block.py"] == (
        "reaches pkg.ops.kern through library imports: tests/ops/test_block.py:1 -> pkg.block:1 -> pkg.ops.kern",)
    assert derived["tests/ops/test_direct.py"] == ("imports pkg.ops.kern",)
    assert derived["tests/ops/test_other.py"] == ("changed by the series (0002-t.patch)",)
    assert "its __init__ imports the touched code" in derived["tests/ops/test_package.py"][0]
    assert derived["tests/ops/test_helper.py"] == ("imports helper tests.ops.util, which imports pkg.ops.kern",)


LIBRARY = {
    "lib/__init__.py": "from lib.models.net import Net\n",  # every test imports lib: not a way in by itself
    "lib/utils.py": textwrap.dedent("""\
        def _check_fast():
            from lib.kernels import fast  # a lazy import, made only where the switch says "fast"
            return fast


        def validate(backend):
            if backend == "fast":
                _check_fast()
        """),
    "lib/modules/__init__.py": "",
    "lib/modules/block.py": "from lib.kernels.combined import combined\n",  # hop 1 of a module-level test
    "lib/kernels/__init__.py": "",
    "lib/kernels/combined.py": "from lib.kernels.bwd import bwd\n\ndef combined(): return bwd()\n",  # hop 2
    "lib/kernels/bwd.py": "def bwd(): return 1\n",  # the touched kernel
    "lib/kernels/fast.py": "from lib.kernels import bwd\n",
    "lib/attn/__init__.py": "",
    "lib/attn/backends.py": textwrap.dedent("""\
        from importlib import import_module

        _BY_NAME = {
            "fast": "lib.attn.fast_backend",
            "slow": "lib.attn.slow_backend",
        }


        def load(config):
            return import_module(_BY_NAME[config.backend])
        """),
    "lib/attn/fast_backend.py": "from lib.kernels.bwd import bwd\n",
    "lib/attn/slow_backend.py": "def run(): return 0\n",
    "lib/models/__init__.py": "",
    "lib/models/net.py": "from lib.modules.block import Block\n",  # hop 3: beyond the bound
    "tests/__init__.py": "",
    "tests/modules/test_block_varlen.py": "import pytest\n\nfrom lib.modules.block import Block\n",
    "tests/attn/test_fast_backend.py": "from lib.attn.backends import load\n\nCONFIG = dict(backend=\"fast\")\n",
    "tests/attn/test_slow_backend.py": "from lib.attn.backends import load\n\nCONFIG = dict(backend=\"slow\")\n",
    "tests/test_config.py": "from lib.utils import validate\n\ndef test_v():\n    validate(\"none\")\n",
    "tests/test_config_fast.py": "from lib.utils import validate\n\ndef test_v():\n    validate(\"fast\")\n",
    "tests/models/test_net.py": "from lib.models.net import Net\n",
    "tests/test_top.py": "import lib\n",
}


def test_derivation_follows_library_modules_two_hops_and_modules_named_by_a_switch(tmp_path):
    tree = _tree(tmp_path, LIBRARY)
    found = suite.derive(tree, {"lib/kernels/bwd.py": ["0001-bwd.patch"]})
    derived = {d.path: d.reasons for d in found}
    # in: two library hops; a backend named in a dict that the test's switch value picks; a lazy import made
    # under that switch. Out: the other switch values, three hops (the model), the top package alone.
    assert sorted(derived) == ["tests/attn/test_fast_backend.py", "tests/modules/test_block_varlen.py",
                               "tests/test_config_fast.py"]
    assert derived["tests/modules/test_block_varlen.py"] == (
        "reaches lib.kernels.bwd through library imports: tests/modules/test_block_varlen.py:3 -> "
        "lib.modules.block:1 -> lib.kernels.combined:1 -> lib.kernels.bwd",)
    assert derived["tests/attn/test_fast_backend.py"] == (
        "reaches lib.kernels.bwd through module named in a string: tests/attn/test_fast_backend.py:1 -> "
        "lib.attn.backends:4 (by name, when a switch is 'fast') -> lib.attn.fast_backend:1 -> lib.kernels.bwd",)
    assert derived["tests/test_config_fast.py"] == (
        "reaches lib.kernels.bwd through library imports: tests/test_config_fast.py:1 -> "
        "lib.utils:2 (when a switch is 'fast') -> lib.kernels.fast:1 -> lib.kernels.bwd",)
    chain = next(d for d in found if d.path == "tests/attn/test_fast_backend.py").chains[0].as_json()
    assert chain["rule"] == "module named in a string"
    assert [(k["file"], k["line"], k["module"], k["by"], k["switches"]) for k in chain["links"]] == [
        ("tests/attn/test_fast_backend.py", 1, "lib.attn.backends", "import", []),
        ("lib/attn/backends.py", 4, "lib.attn.fast_backend", "name", ["fast"]),
        ("lib/attn/fast_backend.py", 1, "lib.kernels.bwd", "import", [])]
    counts = suite.rule_counts(found)
    assert counts["library imports"] == {"selects": 2, "adds": 2}
    assert counts["module named in a string"] == {"selects": 1, "adds": 1}
    assert counts["direct import"] == {"selects": 0, "adds": 0}
    # the bound: at three hops the model test comes in too (why the bound is two: docs/upstream-tests.md)
    assert "tests/models/test_net.py" in {d.path for d in suite.derive(tree, {"lib/kernels/bwd.py": ["p"]}, hops=3)}


def test_a_library_module_many_tests_enter_through_is_not_followed_unless_a_switch_guards_the_chain(tmp_path):
    files = dict(LIBRARY)
    files.update({f"tests/models/test_m{i}.py": "from lib.models.net import Net\n" for i in range(suite.HUB_LIMIT)})
    files["lib/models/net.py"] = "from lib.kernels.combined import combined\n"  # now two hops: in reach
    tree = _tree(tmp_path, files)
    hubs: dict[str, int] = {}
    derived = {d.path for d in suite.derive(tree, {"lib/kernels/bwd.py": ["p"]}, dropped=hubs)}
    assert hubs == {"lib.models.net": suite.HUB_LIMIT + 1}  # test_net.py and the ten test_m*.py
    assert not any(p.startswith("tests/models/") for p in derived)
    assert {"tests/modules/test_block_varlen.py", "tests/attn/test_fast_backend.py",
            "tests/test_config_fast.py"} <= derived
    few = {d.path for d in suite.derive(_tree(tmp_path / "few", {**files, **{
        f"tests/models/test_m{i}.py": "" for i in range(suite.HUB_LIMIT)}}), {"lib/kernels/bwd.py": ["p"]})}
    assert "tests/models/test_net.py" in few  # one test through it: followed


def test_suite_select_json_gives_each_added_file_its_chain_and_the_rule_counts(upstream_repo, monkeypatch,  # noqa: F811
                                                                                  capsys):
    import test_upstream_tests

    monkeypatch.setitem(test_upstream_tests.UPSTREAM_TESTS, "src/fakepkg/layer.py",
                        "from fakepkg.core import scale\n")
    monkeypatch.setitem(test_upstream_tests.UPSTREAM_TESTS, "tests/test_layer.py",
                        "from fakepkg.layer import scale\n\ndef test_layer():\n    assert scale\n")
    upstream_repo.sdist.unlink()
    upstream_repo.sdist = test_upstream_tests._sdist(upstream_repo.sdist.parent)
    upstream_repo.write_manifest()
    capsys.readouterr()
    assert cli("suite", "select", "01", "--base", "1.0", "--json", *upstream_repo.args()) == Exit.OK
    out = json.loads(capsys.readouterr().out)
    files = {f["path"]: f for f in out["files"]}
    assert files["tests/test_layer.py"]["chains"] == [{
        "rule": "library imports", "touched": "fakepkg.core",
        "links": [{"file": "tests/test_layer.py", "line": 1, "module": "fakepkg.layer", "by": "import",
                   "switches": []},
                  {"file": "src/fakepkg/layer.py", "line": 1, "module": "fakepkg.core", "by": "import",
                   "switches": []}]}]
    assert files["tests/test_layer.py"]["reasons"] == [
        "reaches fakepkg.core through library imports: tests/test_layer.py:1 -> fakepkg.layer:1 -> fakepkg.core"]
    assert files["tests/test_core.py"]["chains"] == []  # it imports the touched module itself
    assert out["rules"]["library imports"] == {"selects": 1, "adds": 1}
    assert out["rules"]["direct import"] == {"selects": 1, "adds": 1}
    sel = suite.load(upstream_repo.root / "suites" / "01" / "1.0.toml")
    assert sel.files[1].reasons == tuple(files["tests/test_layer.py"]["reasons"])  # the chain, in the file too


def test_the_exported_tree_holds_the_files_their_conftest_chain_and_helpers(tmp_path):
    tree = _tree(tmp_path / "src", TREE)
    (tree / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    files = upstream_tests.tree_files(tree, ("tests/ops/test_helper.py::test_d",))
    assert files == ["pyproject.toml", "tests/__init__.py", "tests/conftest.py", "tests/ops/__init__.py",
                     "tests/ops/conftest.py", "tests/ops/test_helper.py", "tests/ops/util.py", "tests/shared.py"]
    assert "tests/big/test_unrelated.py" not in files


def test_relative_imports_resolve_against_the_files_package():
    assert pyimports.imported_names("from ..a import b\n", "tests.x.y", False) == {"tests.a", "tests.a.b"}
    assert pyimports.imported_names("from . import c\n", "tests.x", True) == {"tests.x", "tests.x.c"}


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


GOOD = '''\
    schema = 1
    pack = "01"
    base = "1.0"
    series = ["0001-a.patch"]
    [[files]]
    path = "tests/test_a.py"
    reasons = ["imports pkg.a"]
    cases = 3
    '''


@pytest.mark.parametrize(("extra", "message"), [
    ('[[exclude]]\nid = "tests/test_a.py::test_x"\n', "has no 'reason'"),
    ('[[exclude]]\nid = "tests/test_a.py::test_x"\nreason = "  "\n', "has no 'reason'"),
    ('[[add]]\nid = "tests/test_b.py::test_y"\n', "added only with a recorded reason"),
    ('[[exclude]]\nid = "tests/test_z.py::test_x"\nreason = "needs 8 GPUs"\n', "not inside a selected file"),
    ('[[files]]\npath = "tests/test_b.py"\nreasons = []\n', "must list how the file was derived"),
    ('colour = "red"\n', "unknown key 'colour'"),
])
def test_a_selection_refuses_ids_without_reasons_and_unknown_keys(tmp_path, extra, message):
    text = GOOD.replace('series = ["0001-a.patch"]\n', f'series = ["0001-a.patch"]\n{extra}') \
        if extra.startswith("colour") else GOOD + textwrap.indent(extra, "    ")
    path = _write(tmp_path / "suites" / "01" / "1.0.toml", text)
    with pytest.raises(ConfigError, match=message):
        suite.load(path)


def test_a_selection_round_trips_and_keeps_what_a_person_recorded(tmp_path):
    path = _write(tmp_path / "s.toml", GOOD + '    [[exclude]]\n    id = "tests/test_a.py::test_x[8]"\n'
                                              '    reason = "needs 8 GPUs"\n')
    sel = suite.load(path)
    again = suite.refreshed(sel, "01", "1.0", ["0001-a.patch"], sel.derived())
    assert suite.dump(again) == suite.dump(sel) and again.exclude == sel.exclude and again.cases == 3
    assert suite.differences(sel, sel.derived(), ["0001-a.patch"]) == []
    dropped = suite.differences(sel, [suite.Derived("tests/test_a.py", ("imports pkg.a",)),
                                      suite.Derived("tests/test_b.py", ("imports pkg.a",))], ["0001-a.patch"])
    assert dropped == ["tests/test_b.py: derived (imports pkg.a) but not recorded"]


def test_a_case_the_base_run_never_recorded_is_not_ok():
    result = suite.compare({}, {"t.py::test_a": "failed", "t.py::test_b": "passed"}, {}, claims_fix=False)
    assert {c.id: c.verdict for c in result.cases} == {"t.py::test_a": "not run on the base",
                                                       "t.py::test_b": "not run on the base"}


def test_compare_blames_only_what_fails_when_patched():
    base = {"t.py::test_ok": "passed", "t.py::test_broken": "passed", "t.py::test_old": "failed",
            "t.py::test_both": "error", "t.py::test_new[1]": "failed", "t.py::test_hang": "passed"}
    patched = {"t.py::test_ok": "passed", "t.py::test_broken": "failed", "t.py::test_old": "failed",
               "t.py::test_both": "error", "t.py::test_new[1]": "passed", "t.py::test_hang": "not run"}
    result = suite.compare(base, patched, {"t.py": {"test_new"}}, claims_fix=True)
    verdicts = {c.id: c.verdict for c in result.cases}
    assert verdicts == {"t.py::test_ok": "ok", "t.py::test_broken": "patched-only failure",
                        "t.py::test_old": "fails on both", "t.py::test_both": "fails on both",
                        "t.py::test_new[1]": "fixed", "t.py::test_hang": "patched-only failure"}
    assert not result.ok and len(result.patched_only) == 2
    clean = suite.compare({"t.py::test_new[1]": "passed"}, {"t.py::test_new[1]": "passed"}, {"t.py": {"test_new"}},
                          claims_fix=True)
    assert not clean.ok and clean.cases[0].verdict == "added test passes on the base"
    # An added test whose control parametrization (a shape that already worked) passes on both is fine as
    # long as another case of it fails on the base and passes with the change.
    control = suite.compare({"t.py::test_new[576]": "passed", "t.py::test_new[128]": "failed"},
                            {"t.py::test_new[576]": "passed", "t.py::test_new[128]": "passed"},
                            {"t.py": {"test_new"}}, claims_fix=True)
    assert control.ok and {c.id: c.verdict for c in control.cases} == {
        "t.py::test_new[128]": "fixed", "t.py::test_new[576]": "control"}
    only_controls = suite.compare({"t.py::test_new[576]": "passed"}, {"t.py::test_new[576]": "passed"},
                                  {"t.py": {"test_new"}}, claims_fix=False)
    assert only_controls.ok and only_controls.cases[0].verdict == "control"


SUITE = '''
[[packs.01.suites]]
base = "1.0"
requires = "cpu"
shards = 2
timeout = 120
'''


@pytest.fixture
def suite_repo(upstream_repo, monkeypatch):  # noqa: F811
    shutil.copy(REPO / "repros" / "upstream_suite.py", upstream_repo.root / "repros" / "upstream_suite.py")
    return upstream_repo


def _lanes(side: str) -> list[str]:
    return [a for i in (1, 2) for a in ("--lane", f"suite-1.0-{side}-{i}of2")]


def test_suite_lanes_run_base_and_patched_and_compare_every_case(suite_repo, capsys):
    args = suite_repo.args()
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    sel = suite.load(suite_repo.root / "suites" / "01" / "1.0.toml")
    assert [f.path for f in sel.files] == ["tests/test_core.py"]  # test_broken.py imports no touched module
    suite_repo.write_tracking(SUITE)
    assert cli("check", "--apply", *args) == Exit.OK
    assert cli("run", "01", "--quiet", *args, *_lanes("base"), *_lanes("patched")) == Exit.OK
    recs = {r.lane: r for r in find(suite_repo.root, "fake", "01")}
    assert len(recs) == 4 and {r.reproducer.path for r in recs.values()} == {upstream_tests.SUITE_RUNNER}
    capsys.readouterr()
    assert cli("suite", "compare", "01", "--base", "1.0", "--json", *args) == Exit.OK
    out = json.loads(capsys.readouterr().out)
    cases = {c["id"]: (c["base"], c["patched"], c["verdict"]) for c in out["cases"]}
    assert out["collected"] == 5 and out["ran"] == 5 and out["missing"] == []  # a skip ran (and is recorded)
    assert cases["tests/test_core.py::test_scale_uses_each_weight"] == ("failed", "passed", "fixed")
    assert cases["tests/test_core.py::test_total"] == ("passed", "passed", "ok")
    assert out["schema"] == 1
    # piped: the cases left out are counted, and the verdict line is data (stdout), not a note on stderr
    assert cli("suite", "compare", "01", "--base", "1.0", *args) == Exit.OK
    piped = capsys.readouterr()
    ok = sum(1 for c in out["cases"] if c["verdict"] == "ok")
    assert f"{ok} case(s) ok on both builds, not listed (--json lists every case)" in piped.out
    assert piped.out.rstrip("\n").splitlines()[-1] == out["line"] and out["line"] not in piped.err


def test_a_patch_that_breaks_a_passing_case_fails_the_suite(suite_repo, tmp_path, capsys):
    args = suite_repo.args()
    broken = CORE_FIXED + "\n\ndef total(xs):\n    return 0\n"
    suite_repo.write_patch(make_patch(tmp_path, CORE_BUGGY, broken))
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    suite_repo.write_tracking(SUITE)
    assert cli("run", "01", "--quiet", *args, *_lanes("base"), *_lanes("patched")) == Exit.OK
    capsys.readouterr()
    assert cli("suite", "compare", "01", "--base", "1.0", "--json", *args) == Exit.MISMATCH
    out = json.loads(capsys.readouterr().out)
    assert out["counts"]["patched-only failure"] == 1
    assert [c["id"] for c in out["cases"] if c["verdict"] == "patched-only failure"] == \
        ["tests/test_core.py::test_total"]
    why = next(c["why"] for c in out["cases"] if c["verdict"] == "patched-only failure")
    assert why["base"] is None and why["patched"].startswith("assert 0 == ")  # the exception, from the log
    from harness.base.store import Store
    from harness.filing import readiness
    from harness.lane.context import Context
    from harness.lane.tracking import Tracking

    ctx = Context(root=suite_repo.root, tracking=Tracking.load(suite_repo.root), store=Store(suite_repo.cache))
    state = readiness.readiness(ctx, ctx.tracking.pack("01"))
    suite_reasons = [r.text for r in state.reasons if r.code == readiness.ReasonCode.SUITE]
    assert suite_reasons == ["suite at 1.0: tests/test_core.py::test_total: patched-only failure (base passed, "
                             "patched failed)"]
    assert state.suite is not None and len(state.suite.comparison.patched_only) == 1
    from harness.filing import evidence
    from harness.lane import receipts

    pack = ctx.tracking.pack("01")
    row = evidence._suite_row(pack, receipts.latest_by_lane(ctx.root, pack.target, pack.id, None), "this PR")
    assert row is not None and row.label.startswith("the upstream's own tests of the touched code (1 file)")
    assert row.result == ("5 of 5 cases: 2 ran and passed on both; 1 fixed by the change; 1 fail only with the change; "
                          "1 skipped by the tests themselves")


def test_a_shard_starved_of_host_resources_is_not_current_and_runs_again(suite_repo, tmp_path, capsys):
    """A case that ran out of GPU memory on a shared GPU says nothing about the change: readiness does not count
    the shard's receipt, and the sweep plans the shard again (without --rerun)."""
    args = suite_repo.args()
    starved = (CORE_FIXED + "\n\ndef total(xs):\n"
               "    raise RuntimeError('CUDA out of memory. Tried to allocate 2.00 GiB')\n")
    suite_repo.write_patch(make_patch(tmp_path, CORE_BUGGY, starved))
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    suite_repo.write_tracking(SUITE)
    assert cli("run", "01", "--quiet", *args, *_lanes("base"), *_lanes("patched")) == Exit.OK
    from harness.base.store import Store
    from harness.filing import readiness
    from harness.lane.context import Context
    from harness.lane.tracking import Tracking

    ctx = Context(root=suite_repo.root, tracking=Tracking.load(suite_repo.root), store=Store(suite_repo.cache))
    state = readiness.readiness(ctx, ctx.tracking.pack("01"))
    starved_lanes = {r.text.split(":", 1)[0] for r in state.reasons if "host's resources" in r.text}
    shard = next(r.lane for r in find(suite_repo.root, "fake", "01") if r.lane.startswith("suite-1.0-patched")
                 and "CUDA out of memory" in (r.path.parent / "output.log").read_text())
    assert starved_lanes == {f"lane {shard}"}
    capsys.readouterr()
    assert cli("sweep", "01", "--plan", "--json", "--lane", "suite-*", *args) == Exit.OK
    plan = json.loads(capsys.readouterr().out)
    states = {lane: t["state"] for t in plan["tasks"] for lane in t["lanes"]}
    assert states[shard] == "run" and sum(1 for s in states.values() if s == "current") == 3


def test_cases_failing_without_the_change_are_grouped_by_file_and_exception():
    cases = {"a/test_x.py::test_1": ("failed", "failed"), "a/test_x.py::test_2": ("failed", "failed"),
             "a/test_y.py::test_3": ("error", "passed"), "a/test_y.py::test_4": ("failed", "skipped"),
             "a/test_y.py::test_5": ("passed", "passed")}
    comparison = suite.compare({k: b for k, (b, _) in cases.items()}, {k: p for k, (_, p) in cases.items()}, {},
                               claims_fix=False)
    why = {"a/test_x.py::test_1": "KeyError: 'module'", "a/test_x.py::test_2": "KeyError: 'module'",
           "a/test_y.py::test_4": "torch.OutOfMemoryError: CUDA out of memory"}
    explained = comparison.explained(why, {})
    assert suite_reasons.failing_without_change(explained) == (
        "2 in test_x.py (KeyError: 'module'), 1 in test_y.py (torch.OutOfMemoryError: CUDA out of memory)")
    assert suite_reasons.failing_without_change(explained, most=1) == "2 in test_x.py (KeyError: 'module'), 1 more"
    assert suite_reasons.failing_without_change(comparison) == (
        "2 in test_x.py (no exception in the log), 1 in test_y.py (no exception in the log)")


def test_failure_reasons_come_from_each_tracebacks_first_error_line(tmp_path):
    """Read from a real pytest log: a class, a long parametrized name (pytest's one-underscore header), an
    error in a fixture, and a test name two files share (left out: the header does not name the file)."""
    tests = tmp_path / "tests"
    tests.mkdir()
    long = "test_" + "x" * 90
    (tests / "test_a.py").write_text(textwrap.dedent(f'''
        import pytest

        class TestGroup:
            def test_in_class(self):
                raise MemoryError("out of memory on the shared GPU")

        @pytest.mark.parametrize("n", [1, 2])
        def {long}(n):
            assert n == 1, "n is not one"

        @pytest.fixture
        def broken():
            raise RuntimeError("fixture broke")

        def test_uses_fixture(broken):
            pass

        def test_twin():
            assert False
    '''))
    (tests / "test_b.py").write_text("def test_twin():\n    assert False\n")
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests"], cwd=tmp_path,
                         capture_output=True, text=True, check=False)
    nodes = ["tests/test_a.py::TestGroup::test_in_class", f"tests/test_a.py::{long}[1]",
             f"tests/test_a.py::{long}[2]", "tests/test_a.py::test_uses_fixture", "tests/test_a.py::test_twin",
             "tests/test_b.py::test_twin"]
    why = suite_reasons.failure_reasons(run.stdout, nodes)
    assert why == {"tests/test_a.py::TestGroup::test_in_class": "MemoryError: out of memory on the shared GPU",
                   f"tests/test_a.py::{long}[2]": "AssertionError: n is not one",
                   "tests/test_a.py::test_uses_fixture": "RuntimeError: fixture broke"}


def test_a_dropped_file_fails_check(suite_repo, capsys):
    args = suite_repo.args()
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    path = suite_repo.root / "suites" / "01" / "1.0.toml"
    text = path.read_text()
    path.write_text(text[:text.index("[[files]]")])
    assert cli("check", "--apply", *args) == Exit.USAGE
    assert "derived (imports fakepkg.core) but not recorded" in capsys.readouterr().err
    assert cli("suite", "select", "01", "--base", "1.0", "--check", *args) == Exit.USAGE


def _runner():
    import importlib.util
    import sys

    sys.path.insert(0, str(REPO / "repros"))
    spec = importlib.util.spec_from_file_location("upstream_suite_under_test", REPO / "repros" / "upstream_suite.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_progress_resumes_decided_cases_and_a_case_that_hangs_twice_is_timed_out(tmp_path):
    runner = _runner()
    state = tmp_path / "state.jsonl"
    lines = [{"id": "t.py::a", "started": True}, {"id": "t.py::a", "outcome": "passed", "when": "call"},
             {"id": "t.py::a", "done": True},
             {"id": "t.py::b", "started": True}, {"id": "t.py::b", "outcome": "error", "when": "setup"},
             {"id": "t.py::slow", "started": True}]
    state.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"id": "t.py::c", "sta')  # cut by a kill
    assert runner.read_state(state) == {"t.py::a": "passed", "t.py::b": "error"}  # slow: run once more
    with state.open("a") as fh:
        fh.write("\n" + json.dumps({"id": "t.py::slow", "started": True}) + "\n")
    assert runner.read_state(state)["t.py::slow"] == "timed out"
    assert runner.shard_of(list("abcdefg"), 1, 3) == ["a", "b"] and runner.shard_of(list("abcdefg"), 3, 3) == \
        ["e", "f", "g"]


def test_a_second_run_of_a_shard_resumes_and_rerun_forgets(suite_repo, monkeypatch):
    args = suite_repo.args()
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    suite_repo.write_tracking(SUITE)
    lane = ["--lane", "suite-1.0-base-1of2"]
    runs = []

    def run_once():  # the receipt each run wrote (three runs may start within one second)
        seen = {r.path for r in find(suite_repo.root, "fake", "01")}
        assert cli("run", "01", "--quiet", *args, *lane) == Exit.OK
        [new] = [r for r in find(suite_repo.root, "fake", "01") if r.path not in seen]
        runs.append(new.sentinel_details[upstream_tests.SENTINEL_SUITE_RAN])

    run_once()
    run_once()
    monkeypatch.setenv(upstream_tests.SUITE_RERUN_ENV, "1")
    run_once()
    first, second, third = runs
    assert first["resumed"] == 0 and second["resumed"] == first["shard_cases"] > 0 and third["resumed"] == 0
    assert first["cases"] == second["cases"] == third["cases"]


def test_every_commit_is_checked_and_a_commit_that_breaks_a_passing_case_fails(suite_repo, tmp_path, capsys):
    args = suite_repo.args()
    broken = CORE_BUGGY.replace("def total(xs):\n    return sum(xs)", "def total(xs):\n    return 0")
    assert broken != CORE_BUGGY
    (suite_repo.root / "patches" / "fake" / "01" / "0001-use-own-weight.patch").unlink()
    suite_repo.write_patch(make_patch(tmp_path, CORE_BUGGY, broken, subject="core: break total"),
                           name="0001-break-total.patch")
    suite_repo.write_patch(make_patch(tmp_path, broken, CORE_FIXED, subject="core: mend total, fix scale"),
                           name="0002-mend.patch")
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    suite_repo.write_tracking(SUITE)
    capsys.readouterr()
    assert cli("suite", "commits", "01", "--base", "1.0", "--json", *args) == Exit.MISMATCH
    [check] = json.loads(capsys.readouterr().out)["checks"]
    assert [s["broken"] for s in check["steps"]] == [[], ["tests/test_core.py::test_total"], []]
    assert check["steps"][0]["cases"]["tests/test_core.py::test_total"] == "passed"
    # reordered (mend first), every commit passes what the base passes
    (suite_repo.root / "patches" / "fake" / "01" / "0001-break-total.patch").unlink()
    (suite_repo.root / "patches" / "fake" / "01" / "0002-mend.patch").unlink()
    suite_repo.write_patch(make_patch(tmp_path, CORE_BUGGY, CORE_FIXED), name="0001-use-own-weight.patch")
    assert cli("suite", "commits", "01", "--base", "1.0", *args) == Exit.OK


def test_select_records_case_counts_from_the_suite_receipts(suite_repo):
    args = suite_repo.args()
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    assert suite.load(suite_repo.root / "suites" / "01" / "1.0.toml").files[0].cases is None
    suite_repo.write_tracking(SUITE)
    assert cli("run", "01", "--quiet", *args, *_lanes("base")) == Exit.OK
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    assert suite.load(suite_repo.root / "suites" / "01" / "1.0.toml").files[0].cases == 5


def test_an_excluded_id_is_deselected_and_recorded(suite_repo):
    args = suite_repo.args()
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    path = suite_repo.root / "suites" / "01" / "1.0.toml"
    path.write_text(path.read_text() + '\n[[exclude]]\nid = "tests/test_core.py::test_total"\n'
                                       'reason = "needs 8 GPUs"\n')
    suite_repo.write_tracking(SUITE)
    assert cli("run", "01", "--quiet", *args, *_lanes("base")) == Exit.OK
    details = [r.sentinel_details[upstream_tests.SENTINEL_SUITE_RAN] for r in find(suite_repo.root, "fake", "01")]
    assert all(d["deselected"] == ["tests/test_core.py::test_total"] for d in details)
    cases = {node for d in details for node in d["cases"]}
    assert "tests/test_core.py::test_total" not in cases and sum(d["collected"] for d in details[:1]) == 4
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK  # a refresh keeps the exclusion
    assert [e.reason for e in suite.load(path).exclude] == ["needs 8 GPUs"]


@pytest.mark.parametrize("kind", ["fifo", "link-out", "directory"])
def test_derivation_reads_only_regular_files_inside_the_tree(tmp_path, kind):
    """Issue 45, item 14: a FIFO named like a test would block the derivation's read forever, a link would read
    a file outside the tree, a directory named like a module is none: each is refused, naming it."""
    import os

    tree = _tree(tmp_path / "tree", LIBRARY)
    odd = tree / "tests" / "test_odd.py"
    if kind == "fifo":
        os.mkfifo(odd)
    elif kind == "link-out":
        (tmp_path / "outside.py").write_text("from lib.kernels.bwd import bwd\n")
        odd.symlink_to(tmp_path / "outside.py")
    else:
        odd.mkdir()
        (odd / "x.py").write_text("")
    with pytest.raises(suite.SuiteError, match=r"tests/test_odd\.py is (a FIFO|a symbolic link|a directory)"):
        suite.derive(tree, {"lib/kernels/bwd.py": ["p"]})
