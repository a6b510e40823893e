"""Suites at the upstream CI's ranks, in its environment: per-rank outcomes merged, cases that cannot run here
reported with their reason, receipts of two environments never paired, and the body's row per reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO
from test_suite import suite_repo  # noqa: F401  (the fixture)
from test_upstream_tests import upstream_repo  # noqa: F401  (the fixture suite_repo builds on)

from harness.lane import suite, suite_env

# A stand-in for `python -m torch.distributed.run --standalone --nproc-per-node=N SCRIPT ARGS...`: N processes of
# SCRIPT with RANK, LOCAL_RANK and WORLD_SIZE set, exit status the worst of theirs (the real launcher's contract).
FAKE_LAUNCHER = '''
import os, subprocess, sys
args = sys.argv[1:]
n = 1
while args[0].startswith("--"):
    flag = args.pop(0)
    if flag.startswith("--nproc-per-node="):
        n = int(flag.split("=", 1)[1])
procs = [subprocess.Popen([sys.executable, *args],
                          env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n))) for r in range(n)]
sys.exit(max(p.wait() for p in procs))
'''

UPSTREAM_TESTS = '''
import os

import pytest


def test_same_everywhere():
    pass


def test_fails_on_rank_one():
    assert os.environ["RANK"] != "1"


def test_skips_on_rank_zero():
    if os.environ["RANK"] == "0":
        pytest.skip("rank 0 has nothing to check")


def test_tp2_cp2():
    pass


def test_needs_a_kernel_package():
    pass
'''

NEEDS = [{"id": "tests/test_x.py::test_tp2_cp2", "ranks": 4, "reason": "TP2+CP2"},
         {"id": "tests/test_x.py::test_needs_*", "package": "surely-not-installed-dist", "reason": "its kernels"}]


def fake_launcher(where: Path) -> Path:
    (where / "torch" / "distributed").mkdir(parents=True)
    (where / "torch" / "__init__.py").write_text(  # what the host stamp reads of torch: no CUDA here
        "__version__ = '0+fake'\n\n\nclass version:\n    cuda = None\n\n\nclass cuda:\n"
        "    @staticmethod\n    def is_available():\n        return False\n")
    (where / "torch" / "distributed" / "__init__.py").write_text("")
    (where / "torch" / "distributed" / "run.py").write_text(FAKE_LAUNCHER)
    return where


def run_suite(tmp_path: Path, *args: str) -> dict:
    root = tmp_path / "upstream"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_x.py").write_text(textwrap.dedent(UPSTREAM_TESTS))
    fake = fake_launcher(tmp_path / "fake")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), str(REPO / "repros")]),
               HARNESS_UPSTREAM_TESTS_ROOT=str(root), PYTEST_ADDOPTS="--maxfail=1000000000")
    env.pop("HARNESS_SUITE_STATE", None)
    proc = subprocess.run([sys.executable, str(REPO / "repros" / "upstream_suite.py"), "--distribution", "pytest",
                           "--module", "pytest", "--requires", "cpu", *args, "--", "tests/test_x.py"],
                          env=env, capture_output=True, text=True, timeout=300)
    found = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines()
             if line.startswith("UPSTREAM_SUITE_RECORDED ")]
    assert found, proc.stdout[-3000:] + proc.stderr[-3000:]
    return found[-1]


def test_each_rank_reports_and_a_case_fails_when_any_rank_fails_it(tmp_path):
    details = run_suite(tmp_path, "--ranks", "8", "--cpu-ranks", "2", "--needs", json.dumps(NEEDS))
    assert details["cases"] == {"tests/test_x.py::test_same_everywhere": "passed",
                                "tests/test_x.py::test_fails_on_rank_one": "failed",
                                "tests/test_x.py::test_skips_on_rank_zero": "passed"}  # rank 1 ran it and passed
    assert details["rank_disagreements"] == {
        "tests/test_x.py::test_fails_on_rank_one": {"0": "passed", "1": "failed"},
        "tests/test_x.py::test_skips_on_rank_zero": {"0": "skipped", "1": "passed"}}
    # declared needs: more ranks than this run has, a distribution the environment lacks; never run, never failed
    assert details["not_here"] == {
        "tests/test_x.py::test_tp2_cp2": "needs 4 ranks, ran with 2 (TP2+CP2)",
        "tests/test_x.py::test_needs_a_kernel_package":
            "needs surely-not-installed-dist, which this environment does not have (its kernels)"}
    env = details["environment"]
    assert (env["ranks"], env["upstream_ranks"], env["backend"], env["gpu_arch"]) == (2, 8, "gloo", None)
    assert any(p.startswith("pytest==") for p in env["packages"]) and env["packages"] == sorted(env["packages"])
    assert details["collected"] == 5 and details["pytest_exit"] == 1


def test_at_one_rank_the_multi_rank_case_is_not_run_here_and_the_rest_runs(tmp_path):
    details = run_suite(tmp_path, "--ranks", "8", "--cpu-ranks", "1", "--needs", json.dumps(NEEDS[:1]))
    assert details["environment"]["ranks"] == 1
    assert details["cases"]["tests/test_x.py::test_fails_on_rank_one"] == "passed"  # rank 0 alone
    assert details["cases"]["tests/test_x.py::test_skips_on_rank_zero"] == "skipped"
    assert list(details["not_here"]) == ["tests/test_x.py::test_tp2_cp2"]


def test_not_run_here_is_a_column_of_its_own_never_a_failure_of_the_base():
    details = {"base": {"cases": {"t.py::a": "passed", "t.py::b": "failed"}, "collected": 4,
                        "not_here": {"t.py::c": "needs 4 ranks, ran with 2 (TP2+CP2)",
                                     "t.py::d": "needs 4 ranks, ran with 2 (TP2+CP2)"}},
               "patched": {"cases": {"t.py::a": "passed", "t.py::b": "passed"},
                           "not_here": {"t.py::c": "needs 4 ranks, ran with 2 (TP2+CP2)",
                                        "t.py::d": "needs 4 ranks, ran with 2 (TP2+CP2)"}}}
    merged = suite.merge([("base", False), ("patched", True)], details)
    comparison = suite.compare(merged.base, merged.patched, {}, claims_fix=False, not_here=merged.not_here)
    assert comparison.ok and comparison.counts() == {"ok": 1, "fixed": 1, "not run here": 2}
    rows = {c["id"]: c for c in comparison.as_json()["cases"]}
    assert rows["t.py::c"]["not_here"] == "needs 4 ranks, ran with 2 (TP2+CP2)" and rows["t.py::a"]["not_here"] is None
    assert (rows["t.py::c"]["base"], rows["t.py::c"]["patched"]) == ("not run here", "not run here")
    assert suite.summary_line(merged, comparison).endswith(
        "0 fail without it too; 2 not run here (2: needs 4 ranks, ran with 2 (TP2+CP2))")


ENV = {"packages": ["megatron-core==0.19.0", "pytest==9.1.1", "transformer-engine==2.17.1"], "ranks": 2,
       "upstream_ranks": 8, "backend": "nccl", "gpu_arch": "sm_90"}


def test_receipts_from_two_environments_are_never_paired():
    same = dict(ENV, packages=["megatron-core==0.19.0+patched", "pytest==9.1.1", "transformer-engine==2.17.1"])
    suite_env.check_pairing([("r/base", False, ENV), ("r/patched", True, same)], ignore=("megatron-core",))
    for other, difference in ((dict(ENV, ranks=1), "ranks 2 vs 1"),
                              (dict(ENV, packages=["megatron-core==0.19.0", "pytest==9.1.1"]),
                               "transformer-engine 2.17.1 vs absent"),
                              (None, "one records no environment")):
        with pytest.raises(suite_env.EnvironmentMismatch) as exc:
            suite_env.check_pairing([("r/base", False, ENV), ("r/patched", True, other)], ignore=("megatron-core",))
        assert "r/base (base) and r/patched (patched)" in str(exc.value) and difference in str(exc.value)


def test_ci_gaps_name_what_the_run_lacked_of_the_upstream_ci():
    wanted = ("pytest==9.1.1", "transformer-engine==2.17.1", "transformer-engine-torch==2.17.1")
    assert suite_env.ci_gaps(dict(ENV, packages=[*ENV["packages"], "transformer-engine-torch==2.17.1"]), wanted) == []
    assert suite_env.ci_gaps(ENV, wanted) == ["transformer-engine-torch absent (its CI: 2.17.1)"]


def _fails_on_both() -> tuple[suite.Merged, suite.Comparison]:
    details = {"base": {"cases": {"t.py::a": "passed", "t.py::b": "failed", "t.py::c": "failed"}, "collected": 4,
                        "not_here": {"t.py::d": "needs 4 ranks, ran with 2 (TP2+CP2)"}},
               "patched": {"cases": {"t.py::a": "passed", "t.py::b": "passed", "t.py::c": "failed"}}}
    merged = suite.merge([("base", False), ("patched", True)], details)
    return merged, suite.compare(merged.base, merged.patched, {}, claims_fix=False, not_here=merged.not_here)


def test_the_body_row_calls_a_case_broken_at_the_base_only_in_the_upstreams_environment():
    from harness.filing.evidence import suite_reasons_text

    merged, comparison = _fails_on_both()
    wanted = ("pytest==9.1.1", "transformer-engine==2.17.1")
    theirs = suite_reasons_text(merged, comparison, ENV, wanted, "receipts/x/02/T-suite-main-base")
    assert theirs == ("4 of 4 cases: 1 ran and passed on both; 1 fixed by the change; 0 fail only with the change; "
                      "1 not run here (1: needs 4 ranks, ran with 2 (TP2+CP2)); 1 fail on both in the upstream's own "
                      "environment (2 of its 8 ranks, sm_90; shown by receipts/x/02/T-suite-main-base), broken at the "
                      "base: 1 in t.py (no exception in the log)")
    ours = suite_reasons_text(merged, comparison, dict(ENV, packages=["pytest==9.1.1"]), wanted, "r")
    assert "broken at the base:" not in ours and ours.endswith(
        "1 fail on both here, in an environment that is not the upstream CI's (transformer-engine absent (its CI: "
        "2.17.1)), so not shown to fail in the upstream's CI: 1 in t.py (no exception in the log)")
    unknown = suite_reasons_text(merged, comparison, None, (), None)  # no CI recorded for the base: never "broken"
    assert "broken" not in unknown and "the upstream's CI environment is not recorded" in unknown


def test_megatron_suites_run_in_the_ci_environment_and_suite_commits_in_ours():
    from harness.lane.tracking import Tracking
    from harness.upstream import pins

    manifest = pins.load_manifest(REPO, "megatron-lm")
    ci = manifest.base("main").ci
    assert ci is not None and ci.ranks == 8 and ci.pinned[0].release == "2.17.1"
    assert pins.load_manifest(REPO, "transformer-engine").base(ci.pinned[0].release).host_builds
    lanes = [lane for lane in Tracking.load(REPO).pack("02").lanes if lane.suite]
    assert lanes and all(("transformer-engine", "2.17.1") in lane.extra_builds and lane.ranks == 8
                         and "pytest==9.1.1" in lane.test_requires for lane in lanes)
    builds, requires = lanes[0].ours()
    assert builds == (("tilelang", "0.1.8"),) and not any(r.startswith("pytest==") for r in requires)


@pytest.mark.parametrize("ci, message", [
    ('ranks = 8\nsource = "x"\nlauncher = "y"\n', "unknown key 'launcher'"),
    ('ranks = 8\nsource = "x"\n[[bases."1.0".ci.pinned]]\npackage = "a"\nrev = "' + "a" * 40
     + '"\ndeclares = "1+a"\nnearest = "1"\nrelease = "1"\nwhy = " "\n', "'why' must say"),
    ('ranks = 0\nsource = "x"\n', "ranks must be at least 1"),
    ('ranks = 8\nsource = "x"\nrequires = ["pytest>=9"]\n', "must be an exact pin"),
])
def test_the_ci_environment_has_a_closed_schema(tmp_path, ci, message):
    import tomlkit

    from harness.errors import ConfigError
    from harness.upstream.pins.load import _load_ci

    doc = tomlkit.parse('[bases."1.0".ci]\n' + ci)
    with pytest.raises(ConfigError, match=message):
        _load_ci(doc["bases"]["1.0"], '/x.toml [bases."1.0"]')


def test_suite_lanes_run_at_the_cis_ranks_and_compare_refuses_two_environments(suite_repo, tmp_path, monkeypatch,  # noqa: F811
                                                                                 capsys):
    from conftest import cli
    from test_suite import SUITE, _lanes

    from harness.errors import Exit
    from harness.lane import upstream_tests
    from harness.lane.receipts import find

    with (suite_repo.root / "upstream" / "fake.toml").open("a") as fh:
        fh.write('\n[bases."1.0".ci]\nranks = 8\ncpu_ranks = 2\nsource = "the fake upstream\'s CI"\n')
    monkeypatch.setenv("PYTHONPATH", str(fake_launcher(tmp_path / "fake")))
    args = suite_repo.args()
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    suite_repo.write_tracking(SUITE)
    assert cli("run", "01", "--quiet", *args, *_lanes("base"), *_lanes("patched")) == Exit.OK
    recs = {r.lane: r for r in find(suite_repo.root, "fake", "01")}
    for rec in recs.values():
        env = rec.sentinel_details[upstream_tests.SENTINEL_SUITE_RAN]["environment"]
        assert (env["ranks"], env["upstream_ranks"], env["backend"]) == (2, 8, "gloo")
        assert "--ranks" in rec.reproducer.args
    capsys.readouterr()
    assert cli("suite", "compare", "01", "--base", "1.0", "--ranks", "2", "--json", *args) == Exit.OK
    assert json.loads(capsys.readouterr().out)["ran"] == 5
    # one patched shard's receipt from a run at one rank: never paired with the others
    # (written consistently, receipt, log and digests, as a run at one rank writes them: the verifier refuses a
    # receipt.json that says other than its log)
    moved = recs["suite-1.0-patched-1of2"].path
    data = json.loads(moved.read_text())
    data["sentinel_details"][upstream_tests.SENTINEL_SUITE_RAN]["environment"]["ranks"] = 1
    from harness.base.hashing import sha256_file
    from harness.lane.receipts import LOG
    from harness.lane.receipts.writer import write_manifest

    log = moved.parent / LOG
    lines = []
    for line in log.read_text().splitlines(keepends=True):
        tag, _, rest = line.partition(" ")
        if tag == upstream_tests.SENTINEL_SUITE_RAN:
            details = json.loads(rest)
            details["environment"]["ranks"] = 1
            line = f"{tag} {json.dumps(details, sort_keys=True)}\n"
        lines.append(line)
    log.write_text("".join(lines))
    data["log"]["sha256"] = sha256_file(log)
    (moved.parent / f"{LOG}.sha256").write_text(f"{data['log']['sha256']}  {LOG}\n")
    moved.write_text(json.dumps(data))
    write_manifest(moved.parent)
    assert cli("suite", "compare", "01", "--base", "1.0", *args) == Exit.USAGE
    err = capsys.readouterr().err
    assert "suite receipts from different environments" in err and "ranks 2 vs 1" in err
    assert moved.parent.name in err and recs["suite-1.0-base-1of2"].path.parent.name in err
    # --ranks 2 reads only the runs at two ranks: that shard has none, so the suite is short of it
    assert cli("suite", "compare", "01", "--base", "1.0", "--ranks", "2", "--json", *args) == Exit.MISMATCH
    assert json.loads(capsys.readouterr().out)["missing"] == ["suite-1.0-patched-1of2"]
