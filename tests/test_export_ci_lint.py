"""The upstream's CI lint as its CI runs it: whole changed files, with its pinned tools, the base told apart.

Megatron-LM's linting job runs black, isort, pylint and ruff on every line of each changed file
(``tools/autoformat.sh``). A check with ``scope = "files"`` does the same; a finding the base has too is the
base's, and a pack whose changed files fail at the base records what its series does about them
(``[[packs.NN.lint_at_base]]``). The tests marked ``network`` install the real black from PyPI, as export does.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import CORE_BUGGY, CORE_FIXED, make_patch
from test_export_policy import TESTER, _export, _policy, _set_policy, _wheel, person  # noqa: F401
from test_git_bases import _add_git_base, _upstream

from harness.base.store import Store
from harness.errors import CheckError, ConfigError, Exit
from harness.filing import body, export, pr_template
from harness.lane.tracking import Tracking
from harness.upstream import git, linters, pins

BLACK = pins.Check(name="black", package="black==26.3.0", module="black",
                   args=("--skip-magic-trailing-comma", "--skip-string-normalization"), files=r"\.py$",
                   kind="format", scope="files")
# the base's own code that black 26.3.0 would rewrite (line 10), on a line no series below touches
UGLY = CORE_BUGGY.replace("return sum(xs)", "return sum( xs )")


def _black(scope: str = "files", bases: str = "") -> str:
    return textwrap.dedent(f'''
        [[policy.checks]]
        name = "black"
        package = "black==26.3.0"
        args = ["--skip-magic-trailing-comma", "--skip-string-normalization"]
        files = '^src/.*\\.py$'
        kind = "format"
        scope = "{scope}"
    ''') + (f"bases = {bases}\n" if bases else "")


@pytest.fixture
def upstream_at(lane_repo, tmp_path, monkeypatch):
    """Make the fake upstream's git base "main" hold ``core``, and the pack's series turn it into ``new``."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels)
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)  # black comes from PyPI, as export installs it

    def make(core: str, new: str, checks: str) -> object:
        mirrors, sha = _upstream(tmp_path, core)
        _add_git_base(lane_repo, "main", sha)
        lane_repo.mirrors, lane_repo.main_sha = mirrors, sha
        lane_repo.write_patch(make_patch(tmp_path, core, new))
        _set_policy(lane_repo, _policy(checks=checks))
        return lane_repo
    return make


def _tracking_with(repo, extra: str) -> None:
    path = repo.root / "tracking.toml"
    path.write_text(path.read_text() + textwrap.dedent(extra))


# --------------------------------------------------------------------------- the real black, as the CI pins it

@pytest.mark.network
def test_a_whole_file_failure_the_series_introduces_fails_the_export(upstream_at, tmp_path, capsys):
    # the series drops one of the two blank lines before `def total`: black would put it back. The line is gone,
    # so no added or changed line holds the failure: checking changed lines only passes it, the CI does not.
    new = CORE_FIXED.replace("\n\n\ndef total", "\n\ndef total")
    repo = upstream_at(CORE_BUGGY, new, _black("lines"))
    assert _export(repo, tmp_path / "lines", "--identity", TESTER) == Exit.OK
    _set_policy(repo, _policy(checks=_black("files")))
    capsys.readouterr()
    assert _export(repo, tmp_path / "files", "--identity", TESTER) == Exit.LINT
    err = capsys.readouterr().err
    assert "that the series introduces" in err
    assert "src/fakepkg/core.py:7: black: would insert 1 line(s) after line 7" in err
    assert not (tmp_path / "files").exists()


@pytest.mark.network
def test_a_file_that_fails_at_the_base_is_reported_as_the_bases_and_needs_a_recorded_decision(
        upstream_at, tmp_path, capsys):
    repo = upstream_at(UGLY, UGLY.replace("[x * w[0] for x in xs]", "[x * wi for x, wi in zip(xs, w)]"),
                       _black("files", '["main"]'))
    capsys.readouterr()
    assert _export(repo, tmp_path / "x", "--identity", TESTER) == Exit.LINT  # no decision recorded
    err = capsys.readouterr().err
    assert "fail at the base already on src/fakepkg/core.py" in err and "records no decision" in err
    assert "lint_at_base" in err  # the hint names the table to record
    _tracking_with(repo, '''
        [[packs.01.lint_at_base]]
        base = "main"
        files = ["src/fakepkg/core.py"]
        decision = "leave"
        reason = "the contributing guide asks for no formatting of code the change does not touch"
    ''')
    assert _export(repo, tmp_path / "x", "--identity", TESTER, "--json") == Exit.OK
    out = json.loads(capsys.readouterr().out)
    assert out["findings"] == []  # nothing of the series'
    assert [(f["path"], f["line"], f["tool"]) for f in out["at_base"]] == [("src/fakepkg/core.py", 10, "black")]
    assert out["base_fails"] == ["src/fakepkg/core.py"]
    assert out["lint_at_base"]["decision"] == "leave"
    # a record that says the series formats the file in a commit of its own, while the file still fails: refused
    path = repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('decision = "leave"', 'decision = "format-commit"'))
    assert _export(repo, tmp_path / "x", "--identity", TESTER) == Exit.LINT
    assert "formats src/fakepkg/core.py in a commit of its own" in capsys.readouterr().err


@pytest.mark.network
def test_whole_files_tells_the_bases_findings_from_the_series(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "m.py").write_text("x = [1,2]\n\n\ndef f():\n    return 1\n")
    git.init_snapshot(work, "base")
    repo = git.repo(work)
    (work / "m.py").write_text("x = [1,2]\n\n\ndef f():\n    return 1\n\ndef g(a):\n    return a\n")
    repo.run("commit", "-q", "-am", "add g")
    env = linters.tool_env(BLACK, Store(tmp_path / "store"))
    got = linters.whole_files(BLACK, env, repo, "pristine", ["m.py"], linters.touched_lines(repo, "pristine"))
    assert [(f.path, f.line) for f in got.at_base] == [("m.py", 1)]  # "[1,2]": the base's own
    assert [(f.path, f.line, f.message) for f in got.findings] == [("m.py", 6, "would insert 1 line(s) after line 6")]
    assert got.base_fails == ("m.py",) and repo.is_clean()


ISORT = pins.Check(name="isort", package="isort==5.13.2", module="isort", args=(), files=r"\.py$", kind="format",
                   scope="files")


@pytest.mark.network
def test_whole_files_lints_the_real_tree_where_isort_tells_first_party_by_what_it_holds(tmp_path):
    """isort calls a module first-party when the tree holds it. Linted in a copy of the changed files and the config
    files alone, ``helpers`` (a module at the tree's top) read as third-party and both revisions "failed"; the
    upstream's CI lints its checkout, where the file is clean (pack 12's isort finding at Megatron main)."""
    work = tmp_path / "w"
    (work / "tests").mkdir(parents=True)
    (work / "helpers.py").write_text("THING = 1\n")
    clean = "import os\n\nimport requests\n\nimport helpers\n\n\ndef f():\n    return os, requests, helpers\n"
    (work / "tests" / "test_x.py").write_text(clean)
    git.init_snapshot(work, "base")
    repo = git.repo(work)
    (work / "tests" / "test_x.py").write_text(clean + "\n\ndef g():\n    return 2\n")
    repo.run("commit", "-q", "-am", "add g")
    env = linters.tool_env(ISORT, Store(tmp_path / "store"))
    got = linters.whole_files(ISORT, env, repo, "pristine", ["tests/test_x.py"],
                              linters.touched_lines(repo, "pristine"))
    assert (got.findings, got.at_base, got.base_fails) == ((), (), ())
    assert repo.is_clean() and len(repo.run("worktree", "list").splitlines()) == 1  # the base's is gone
    (work / "helpers.py").unlink()  # without the module in the tree, isort's grouping differs: the check can fail
    repo.run("commit", "-q", "-am", "drop helpers")
    got = linters.whole_files(ISORT, env, repo, "pristine", ["tests/test_x.py"],
                              linters.touched_lines(repo, "pristine"))
    assert got.findings and got.findings[0].tool == "isort"


# --------------------------------------------------------------------------- offline: the data and the body

def test_base_lines_map_around_the_series_hunks():
    hunks = [linters._Hunk("a", "a", 3, 0, 4, 2, ()), linters._Hunk("a", "a", 10, 3, 12, 0, ())]
    assert [linters._base_line(hunks, n) for n in (1, 3, 4, 5, 6, 12, 13)] == [1, 3, None, None, 4, 10, 14]


def test_a_check_read_at_other_bases_does_not_run_here():
    check = pins.Check(name="b", package="b==1", module="b", args=(), files=".", kind="format", bases=("dev",))
    assert check.applies_at("dev") and not check.applies_at("main") and check.applies_at(None)


def test_the_real_megatron_manifest_lints_whole_files_at_main_and_dev_with_uv_locks_versions():
    from conftest import REPO

    manifest = pins.load_manifest(REPO, "megatron-lm")
    checks = {c.name: c for c in manifest.policy.checks}
    assert {n: c.package for n, c in checks.items()} == {
        "black": "black==26.3.0", "isort": "isort==5.13.2", "pylint": "pylint==3.2.6", "ruff": "ruff==0.9.10"}
    assert {c.scope for c in checks.values()} == {"files"}
    assert all(set(c.bases) == {"main", "dev"} for c in checks.values())


def test_a_decision_must_match_what_the_base_fails_on():
    report = linters.Report(at_base=(linters.Finding("a.py", 3, "black", "would reformat line 3"),),
                            base_fails=("a.py",))
    with pytest.raises(CheckError, match="records no decision"):
        export.at_base_decision("01", "fake main", report, None)
    from harness.lane.tracking.model import LintAtBase

    export.at_base_decision("01", "fake main", report, LintAtBase("main", ("a.py",), "leave", "r"))
    with pytest.raises(CheckError, match="the checks find a.py"):
        export.at_base_decision("01", "fake main", report, LintAtBase("main", ("b.py",), "leave", "r"))
    with pytest.raises(CheckError, match="the checks find none"):
        export.at_base_decision("01", "fake main", linters.Report(), LintAtBase("main", ("a.py",), "leave", "r"))
    export.at_base_decision("01", "fake main", linters.Report(), None)  # clean at the base: nothing to decide


TEMPLATE = "## What does this PR do?\n\n- [ ] I have run the autoformatter.sh on my PR\n"


def test_the_body_says_the_base_fails_and_leaves_the_autoformatter_box_unticked(lane_repo, monkeypatch):
    lane_repo.write_tracking(textwrap.dedent('''
        [[packs.01.lint_at_base]]
        base = "1.0"
        files = ["src/fakepkg/core.py"]
        decision = "leave"
        reason = "the contributing guide asks for no unrelated formatting"
    '''))
    pack = Tracking.load(lane_repo.root).pack("01")
    manifest = pins.load_manifest(lane_repo.root, "fake")
    manifest = manifest.__class__(**{**manifest.__dict__, "policy": pins.Policy(checks=(BLACK,))})
    monkeypatch.setattr(pr_template, "read_template", lambda m, b: pr_template.Lookup(TEMPLATE, None))
    base = manifest.base("1.0")
    filled = body._upstream_template(manifest, base, "The change.", "", pack, [])
    assert "- [ ] I have run the autoformatter.sh" in filled
    assert "At `1.0`, `src/fakepkg/core.py` already fail the upstream's linting job" in filled
    assert "leaves their formatting as it is (the contributing guide asks for no unrelated formatting)" in filled
    # without the record the box is ticked, as before: the export ran the formatters on the series
    plain = Tracking.load(lane_repo.root).pack("01").__class__(**{**pack.__dict__, "lint_at_base": ()})
    assert "- [x] I have run the autoformatter.sh" in body._upstream_template(manifest, base, "x", "", plain, [])
    # a decision names a base of the manifest, files and a reason
    lane_repo.write_tracking('\n[[packs.01.lint_at_base]]\nbase = "nope"\nfiles = ["a"]\ndecision = "leave"\n'
                             'reason = "r"\n')
    with pytest.raises(ConfigError, match="not a base"):
        Tracking.load(lane_repo.root)
