"""CI's own checks (.ci/): a missing nox session fails, never passes as skipped; commit subjects."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO

from harness.errors import Exit

FAKE_NOX = textwrap.dedent('''\
    #!/usr/bin/env bash
    # stands in for nox: lists two sessions; 'nox ... -s NAME' exits as nox does (3: "Sessions not found")
    if [ "$1" = "--list-sessions" ]; then
        printf '%s\\n' 'Sessions defined in noxfile.py:' '' '* tests -> the suite' \\
            '- mamba_pack05 [mamba] -> pack 05' '- mamba_pack050 [mamba] -> a longer name'
        exit 0
    fi
    echo "nox $*" >> "${FAKE_LOG:-/dev/null}"
    while [ "$1" != "-s" ]; do shift; done
    case "$2" in mamba_pack05) exit "${FAKE_RC:-3}" ;; *) echo "Sessions not found: $2" >&2; exit 3 ;; esac
''')


def _expect(tmp_path: Path, *args: str, rc: int = 3) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    nox = bin_dir / "nox"
    nox.write_text(FAKE_NOX)
    nox.chmod(0o755)
    script = f"set -euo pipefail; . {REPO / '.ci' / 'expect.sh'}; expect {' '.join(args)}"
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", FAKE_RC=str(rc))
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, check=False)


def test_expect_fails_for_a_session_nox_does_not_have(tmp_path):
    """nox exits 3 for a missing session, the code a skipped pack session exits with: expect must not accept it."""
    done = _expect(tmp_path, str(int(Exit.SKIPPED)), "mamba_pack99")
    assert done.returncode == 1
    assert "nox has no session 'mamba_pack99'" in done.stderr
    # a name that is only the prefix of an existing one is missing too
    assert _expect(tmp_path, "3", "mamba_pack0").returncode == 1


def test_expect_checks_the_exit_code_of_a_session_that_exists(tmp_path):
    done = _expect(tmp_path, "3", "mamba_pack05")
    assert done.returncode == 0 and "exited 3 as expected" in done.stdout
    done = _expect(tmp_path, "3", "mamba_pack05", rc=0)  # a pack session that passed where it should skip
    assert done.returncode == 1 and "expected 'nox -s mamba_pack05' to exit 3, got 0" in done.stderr
    assert _expect(tmp_path, "0", "mamba_pack05", "--", "--lane", "x", rc=0).returncode == 0


def test_ci_run_uses_the_checked_expect():
    run = (REPO / ".ci" / "run").read_text()
    assert ". .ci/expect.sh" in run and "expect() {" not in run


def test_every_test_file_that_needs_torch_runs_in_the_torch_session():
    """'tests' has no torch, so these skip there; 'tests_torch' (CI) must list every file that imports it."""
    import re

    noxfile = (REPO / "noxfile.py").read_text()
    listed = set(re.findall(r'"(tests/test_\w+\.py)"', noxfile[noxfile.index("TORCH_TESTS"):]))
    needs = {f"tests/{p.name}" for p in (REPO / "tests").glob("test_*.py")
             if re.search(r"importorskip\(\s*[\"']torch[\"']", p.read_text())}
    assert needs and needs <= listed, sorted(needs - listed)
    assert "nox -s tests_torch" in (REPO / ".ci" / "run").read_text()


def test_the_packaging_pin_satisfies_what_virtualenv_installed_beside_nox_needs():
    """'pip install -e .' into nox's environment must not downgrade packaging below virtualenv's requirement."""
    import tomllib
    from importlib import metadata

    from packaging.requirements import Requirement

    pins = [Requirement(d) for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]]
    [pin] = [r for r in pins if r.name == "packaging"]
    version = next(iter(pin.specifier)).version
    for dist in ("virtualenv", "nox"):
        for req in map(Requirement, metadata.requires(dist) or []):
            if req.name == "packaging" and (req.marker is None or req.marker.evaluate()):
                assert req.specifier.contains(version), f"{dist} needs {req}; pyproject.toml pins {pin}"
    lanes = {p.name: p.read_text() for p in (REPO / "requirements").glob("lane-*.txt")}
    for name, text in lanes.items():  # the lane environments install the harness too: one packaging for both
        for line in text.splitlines():
            if line.startswith("packaging=="):
                assert line == f"packaging=={version}", name


def test_the_forge_workflow_runs_the_same_ci():
    workflow = (REPO / ".github" / "workflows" / "ci.yml").read_text()
    assert "run: bash .ci/run" in workflow and "shared" in workflow and "fetch-depth: 0" in workflow


def _git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.invalid", GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env,
                          check=True).stdout.strip()


def _subjects(tmp_path: Path, *subjects: str, base_subject: str = "tracking: a long old-style subject " * 4):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "commit", "-q", "--allow-empty", "-m", base_subject)
    base = _git(repo, "rev-parse", "HEAD")
    for s in subjects:
        _git(repo, "commit", "-q", "--allow-empty", "-m", s)
    return subprocess.run([sys.executable, str(REPO / ".ci" / "commit_subjects.py"), "--repo", str(repo),
                           "--base", base], capture_output=True, text=True, check=False)


def test_commit_subjects_after_the_base_are_checked_and_those_before_are_not(tmp_path):
    done = _subjects(tmp_path, "Add a check", "Fix the apply cache key", "Process receipts once")
    assert done.returncode == 0, done.stderr  # the long old subject at the base is not judged
    assert "3 commit(s)" in done.stdout


def test_commit_subjects_name_each_bad_commit(tmp_path):
    long = ("Add " + "a very long subject " * 4).rstrip()
    done = _subjects(tmp_path, "Added a check", "adds things", "Fixes the key", long, "Add a period.",
                     "Remove the stale table")
    assert done.returncode == 1
    err = done.stderr
    assert "'Added' is not the imperative" in err and "'Fixes' is not the imperative" in err
    assert "starts with 'adds'" in err and f"{len(long)} characters (at most 72)" in err
    assert "ends with a period" in err and "Remove the stale table" not in err


def test_commit_subjects_refuse_a_clone_without_the_base(tmp_path):
    done = _subjects(tmp_path, "Add a check")
    other = subprocess.run([sys.executable, str(REPO / ".ci" / "commit_subjects.py"), "--repo",
                            str(tmp_path / "repo"), "--base", "f" * 40], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and other.returncode == 1 and "not in this clone's history" in other.stderr


def test_the_base_commit_is_the_recorded_one():
    text = (REPO / ".ci" / "commit_subjects.py").read_text()
    assert 'BASE = "83c85edb402d43e440a897bda4304efcb18a4c77"' in text
    assert "python3 .ci/commit_subjects.py" in (REPO / ".ci" / "run").read_text()


def test_with_ci_receipts_a_pack_session_writes_its_receipts_elsewhere(tmp_path, monkeypatch):
    """CI's pack sessions must not rewrite the clone's receipts (docs/filings re-render from them): with
    CI_RECEIPTS, expect hands the session --receipts-dir, --no-tracking and --skip-current (a lane whose committed
    receipt is current is answered by it), after any lane arguments."""
    log = tmp_path / "nox.log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("CI_RECEIPTS", str(tmp_path / "r"))
    assert _expect(tmp_path, "3", "mamba_pack05").returncode == 0
    assert _expect(tmp_path, "0", "mamba_pack05", "--", "--lane", "x", rc=0).returncode == 0
    calls = [line for line in log.read_text().splitlines() if "-s" in line.split()]
    r = tmp_path / "r"
    assert calls == [f"nox --error-on-missing-interpreters -s mamba_pack05 -- --receipts-dir {r} --no-tracking "
                     "--skip-current",
                     f"nox --error-on-missing-interpreters -s mamba_pack05 -- --lane x --receipts-dir {r} "
                     "--no-tracking --skip-current"]


def _ci_lines() -> list[str]:
    """.ci/run's lines without comments (what runs)."""
    return [line.split(" #", 1)[0].strip() for line in (REPO / ".ci" / "run").read_text().splitlines()
            if line.strip() and not line.strip().startswith("#")]


def _ci_top_level() -> list[str]:
    """.ci/run's lines that run in order, outside the functions it defines (``name() {`` ... ``}``)."""
    out, inside = [], False
    for raw in (REPO / ".ci" / "run").read_text().splitlines():
        if inside:
            inside = raw != "}"
            continue
        if raw.rstrip().endswith("() {"):
            inside = True
            continue
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def test_ci_checks_cheapest_first_and_each_once():
    """Fail fast: subjects, lint and types before any environment is built; nothing run twice."""
    lines = _ci_top_level()
    first_pack = next(i for i, line in enumerate(lines) if line.startswith(("beside ", "step packs-")))
    for check in ("python3 .ci/commit_subjects.py", "nox -s lint", "nox -s typecheck"):
        where = [i for i, line in enumerate(lines) if line.endswith(check)]
        assert len(where) == 1 and where[0] < first_pack, check
    # the quick suite once as it is, and once (only) with the harness's clock a year ahead: no test reads the calendar
    suites = [line for line in _ci_lines() if line.endswith("nox -s tests")]
    assert len(suites) == 2 and sum("PATCHLANE_CLOCK_SHIFT=+365d" in line for line in suites) == 1, suites
    workflow = (REPO / ".github" / "workflows" / "ci.yml").read_text()
    assert "commit_subjects.py" not in "\n".join(lines[first_pack:])
    assert "run: python3 .ci/commit_subjects" not in workflow


def test_ci_runs_the_torch_tests_in_the_megatron_lane_environment_before_dropping_it():
    """tests_torch reuses the megatron lane environment's torch (one CUDA torch per run, not two)."""
    lines = _ci_lines()
    torch = lines.index("nox -s tests_torch")
    assert torch < lines.index("drop_lane megatron-lm")
    assert all(lines.index(f"expect 3 megatron_pack{p}") < torch for p in ("16", "10", "22"))
    noxfile = (REPO / "noxfile.py").read_text()
    body = noxfile[noxfile.index("def tests_torch"):noxfile.index("@nox.session", noxfile.index("def tests_torch"))]
    assert "_lane_env(session, spec)" in body and "session.install" not in body


def test_ci_still_runs_the_slow_tests_and_tests_leaves_them_out():
    lines = _ci_lines()
    assert any(line.endswith("nox -s tests_slow") for line in lines)
    noxfile = (REPO / "noxfile.py").read_text()
    assert '"-m", "not slow and not serial and not slurm"' in noxfile and '"-m", "slow and not serial"' in noxfile
    assert '"-m", "serial and not slow"' in noxfile and '"-rs"' in noxfile


def test_ci_runs_the_slurm_tests_against_a_slurm_it_starts_and_requires():
    """The Slurm test must not pass in CI by skipping: .ci/run starts Slurm and requires it."""
    text = (REPO / ".ci" / "run").read_text()
    assert "bash .ci/slurm-up.sh" in text and "PATCHLANE_REQUIRE_SLURM=1 nox -s tests_slurm" in text
    assert any(line.startswith("step slurm ") for line in _ci_lines())


def test_every_slow_entry_names_a_test_that_exists():
    """conftest.SLOW (and tests/slow.txt, read into it) moves tests out of 'nox -s tests' by node id: a renamed test
    must not fall back in silently."""
    from conftest import SERIAL, SLOW

    for entry in SLOW + SERIAL:
        path, _, name = entry.partition("::")
        assert (REPO / path).is_file(), entry
        assert not name or f"def {name.split('[')[0]}(" in (REPO / path).read_text(), entry


def test_ci_downloads_the_lane_environments_wheels_once_and_drops_them_after_the_last():
    """Four lane environments each installed PyPI's CUDA torch (~5 GB) with no pip cache: four downloads."""
    lines = _ci_lines()
    assert 'export PIP_CACHE_DIR="$PWD/.ci-pip-cache"' in lines and "export PIP_NO_CACHE_DIR=1" not in lines
    # after every chain of pack sessions: the last one run here and the one run beside
    top = _ci_top_level()
    last_packs = max(i for i, line in enumerate(top) if line.startswith(("step packs-", "joined ")))
    removal = next(i for i, line in enumerate(top) if line.startswith('rm -rf "$PIP_CACHE_DIR"'))
    assert removal > last_packs
    assert ".ci-pip-cache/" in (REPO / ".gitignore").read_text().splitlines()


def test_ci_joins_every_chain_it_starts_beside_before_it_says_all_passed():
    """A chain run beside the others (.ci/beside.sh) counts only once joined: its failure fails the run."""
    lines = _ci_top_level()
    started = [line.split()[1] for line in lines if line.startswith("beside ")]
    assert started, "no chain runs beside the others"
    done = next(i for i, line in enumerate(lines) if line.startswith('echo "ci: all steps passed'))
    for name in started:
        assert any(line == f"joined {name}" for line in lines[:done]), name
    assert ".ci-logs/" in (REPO / ".gitignore").read_text().splitlines()


def test_ci_times_reads_steps_and_sessions_from_the_log_and_refuses_another_file(tmp_path):
    """bench/results' CI records come from .ci/run's own lines (tools/ci_times.py), never typed."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("ci_times", REPO / "tools" / "ci_times.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    log = tmp_path / "ci.log"
    log.write_text("ci: step lint\nnox > Session lint was successful in 3 seconds.\nci: step lint: 5 s (total 17 s)\n"
                   "nox > mamba_pack07: harness exit 3 (SKIPPED) in 1324 s\n"
                   "nox > Session tests was successful in 2 minutes 5 seconds.\n"
                   "ci: step tests: 130 s (total 147 s)\nci: all steps passed in 150 s\n")
    assert mod.main([str(log), "--host", "2-core, idle", "-o", str(tmp_path / "out")]) == 0
    record = json.loads((tmp_path / "out.json").read_text())
    assert [(s["step"], s["seconds"]) for s in record["steps"]] == [("lint", 5), ("tests", 130)]
    assert [(s["session"], s["seconds"], s["exit"]) for s in record["sessions"]] == [
        ("lint", 3, "OK"), ("mamba_pack07", 1324, "SKIPPED"), ("tests", 125, "OK")]
    assert record["passed"] is True and record["total_s"] == 150
    (tmp_path / "other.log").write_text("nothing of CI here\n")
    with pytest.raises(SystemExit, match="no 'ci: step NAME: N s' line"):
        mod.main([str(tmp_path / "other.log"), "--host", "h", "-o", str(tmp_path / "x")])


def test_slow_tests_lists_what_took_seconds_and_keeps_what_the_run_could_not_time(tmp_path):
    """tests/slow.txt comes from a measured run (tools/slow_tests.py), never typed; a listed test is slow, so the next
    run does not time it, and a list made again must not drop it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("slow_tests", REPO / "tools" / "slow_tests.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "slow.txt"
    out.write_text("# made before\n9.00\ttests/test_b.py::test_listed_before\n")
    log = tmp_path / "tests.log"
    log.write_text("12:00:01 ==== slowest durations ====\n"
                   "12:00:01 2.50s call     tests/test_a.py::test_slow[x y]\n"
                   "12:00:01 0.60s setup    tests/test_a.py::test_slow[x y]\n"
                   "12:00:01 2.90s call     tests/test_a.py::test_quick\n"
                   "12:00:01 ==== 3 passed in 9.00s ====\n"
                   "12:00:02 ==== slowest durations ====\n12:00:02 8.00s call     tests/test_c.py::test_serial\n")
    assert mod.main([str(log), "--at-least", "3", "--host", "h", "-o", str(out)]) == 0
    assert mod.entries(out) == [(9.0, "tests/test_b.py::test_listed_before"), (3.1, "tests/test_a.py::test_slow[x y]")]
    assert "3 passed in 9.00s" in out.read_text() and "1 kept from before" in out.read_text()
    (tmp_path / "other.log").write_text("no table\n")
    with pytest.raises(SystemExit, match="no 'slowest durations' table"):
        mod.main([str(tmp_path / "other.log"), "--host", "h", "-o", str(tmp_path / "x.txt")])
