"""Faults injected for real, round 5 (issue 45, items 1-8 and 21): wrong verdicts and trusted data. A receipt
that contradicts its log, suite progress that outlives its interpreter or is edited by hand, a compare with every
shard missing, skips and ``::`` in the suite verdict, receipts whose own date decides "latest", a linter that
crashes after one finding, a recorded template that links out of the tree, a mirror's state that is not the
pinned tree's, and one long template line."""

from __future__ import annotations

import json
import shutil
import tarfile

import pytest
from conftest import cli
from test_export_policy import filed, person  # noqa: F401  (fixtures: an upstream with a [policy], a HOME)
from test_suite import SUITE, _lanes, suite_repo  # noqa: F401  (the fixture: a fake upstream with a suite)
from test_upstream_tests import upstream_repo  # noqa: F401  (the fixture suite_repo stands on)

from harness.errors import Exit
from harness.lane import suite, upstream_tests
from harness.lane.receipts import find, write_manifest

# --------------------------------------------------------------------------- 1. a receipt that contradicts its log


@pytest.fixture
def suite_run(suite_repo):  # noqa: F811
    """The suite of pack 01 selected, declared and run on both builds (four shard receipts)."""
    args = suite_repo.args()
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    suite_repo.write_tracking(SUITE)
    assert cli("run", "01", "--quiet", *args, *_lanes("base"), *_lanes("patched")) == Exit.OK
    return suite_repo


def _forge_base_pass(repo) -> str:
    """Rewrite the base shard whose log says a case failed to say it passed, every digest recomputed (the log
    itself untouched). Returns the forged case's id."""
    for rec in find(repo.root, "fake", "01"):
        cases = rec.sentinel_details[upstream_tests.SENTINEL_SUITE_RAN]["cases"]
        failed = [c for c, o in cases.items() if o == "failed"]
        if not rec.patched and failed:
            data = json.loads(rec.path.read_text())
            data["sentinel_details"][upstream_tests.SENTINEL_SUITE_RAN]["cases"][failed[0]] = "passed"
            rec.path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
            write_manifest(rec.dir)
            return failed[0]
    raise AssertionError("no base shard recorded a failing case")


def test_a_suite_receipt_saying_other_cases_than_its_log_fails_verify_import_and_compare(suite_run, tmp_path, capsys):
    args = suite_run.args()
    forged = _forge_base_pass(suite_run)
    capsys.readouterr()
    assert cli("receipts", "verify", "--json", *args) == Exit.TAMPERED
    bad = json.loads(capsys.readouterr().out)["bad"]
    assert len(bad) == 1 and "'sentinel_details'" in bad[0]["problems"][0] and forged in bad[0]["problems"][0]
    assert cli("suite", "compare", "01", "--base", "1.0", "--json", *args) == Exit.TAMPERED
    err = capsys.readouterr().err
    assert "the suite verdict reads no such receipt" in err and "'sentinel_details'" in err
    # the same directory brought back from a GPU host: nothing is imported
    [rec] = [r for r in find(suite_run.root, "fake", "01") if not r.patched and forged in
             r.sentinel_details[upstream_tests.SENTINEL_SUITE_RAN]["cases"]]
    archive = tmp_path / "back.tar"
    with tarfile.open(archive, "w") as tf:
        tf.add(rec.dir, arcname=f"receipts/fake/01/{rec.dir.name}")
    shutil.rmtree(rec.dir)
    before = (suite_run.root / "tracking.toml").read_text()
    assert cli("receipts", "import", str(archive), *args) == Exit.TAMPERED
    assert not rec.dir.exists() and (suite_run.root / "tracking.toml").read_text() == before


# --------------------------------------------------------------------------- 3. every shard missing


def test_compare_json_with_every_shard_missing_says_not_ok(suite_repo, capsys):  # noqa: F811
    args = suite_repo.args()
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    suite_repo.write_tracking(SUITE)
    capsys.readouterr()
    assert cli("suite", "compare", "01", "--base", "1.0", "--json", *args) == Exit.MISMATCH
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and len(out["missing"]) == 4 and out["cases"] == []


# --------------------------------------------------------------------------- 4. and 5. the case comparison


def test_a_change_that_turns_base_passing_cases_into_skips_fails_the_suite():
    base = {"t.py::test_a": "passed", "t.py::test_b": "passed", "t.py::test_c": "skipped"}
    patched = {"t.py::test_a": "skipped", "t.py::test_b": "passed", "t.py::test_c": "skipped"}
    result = suite.compare(base, patched, {}, claims_fix=False)
    verdicts = {c.id: c.verdict for c in result.cases}
    assert not result.ok and verdicts["t.py::test_a"] == "patched-only failure"
    assert result.reasons == ("t.py::test_a: patched-only failure (base passed, patched skipped)",)
    assert verdicts["t.py::test_c"] == "skipped"  # skipped on both: nothing to say


@pytest.mark.parametrize("node", ["t.py::test_new[a::b]", "t.py::TestX::test_new[x::y::z]", "t.py::test_new[::]"])
def test_an_added_test_whose_parameters_hold_colons_is_recognised_as_added(node):
    added = {"t.py": {"test_new"}}
    passes_on_base = suite.compare({node: "passed"}, {node: "passed"}, added, claims_fix=True)
    [case] = passes_on_base.cases
    assert case.added and case.verdict == "added test passes on the base" and not passes_on_base.ok
    fixed = suite.compare({node: "failed"}, {node: "passed"}, added, claims_fix=True)
    assert fixed.ok and fixed.cases[0].added and fixed.cases[0].verdict == "fixed"


# --------------------------------------------------------------------------- 7. a linter that crashes midway

CRASHES = (  # one finding, then the tool dies: its report is not whole
    "import sys\n"
    "for path in sys.argv[1:]:\n"
    "    print(f'{path}:1:0: W0611: Unused import os (unused-import)', flush=True)\n"
    "raise RuntimeError('the checker fell over on the second file')\n")


def _tool_wheel(dest, name: str, main: str) -> None:
    import base64
    import hashlib
    import zipfile

    files = {f"{name}/__init__.py": "", f"{name}/__main__.py": main,
             f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
             f"{name}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                                           "Tag: py3-none-any\n"}
    record = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(t.encode())}" for n, t in files.items()] + [f"{name}-1.0.dist-info/RECORD,,"]
    with zipfile.ZipFile(dest / f"{name}-1.0-py3-none-any.whl", "w") as zf:
        for n, text in files.items():
            zf.writestr(n, text)
        zf.writestr(f"{name}-1.0.dist-info/RECORD", "\n".join(record) + "\n")


def test_a_linter_that_crashes_after_one_finding_is_a_failure_not_zero_findings(filed, tmp_path, capsys):  # noqa: F811
    from test_export_policy import TESTER, _check, _export, _policy, _set_policy

    _tool_wheel(filed.wheels, "fakecrash", CRASHES)
    _set_policy(filed, _policy(checks=_check("pylint", "fakecrash", "lint").replace("fakelint==1.0",
                                                                                     "fakecrash==1.0")))
    out = tmp_path / "filed"
    assert _export(filed, out, "--identity", TESTER, "--report-only") == Exit.LINT
    err = capsys.readouterr().err
    assert "pylint (fakecrash==1.0) crashed (exit 1)" in err and "after reporting 1 finding(s)" in err
    assert "RuntimeError: the checker fell over" in err and not out.exists()


USAGE = (  # one finding, then a complaint about its own command line, exit 2: pylint would read 2 as "an error"
    "import sys\n"
    "for path in sys.argv[1:]:\n"
    "    print(f'{path}:1:0: W0611: Unused import os (unused-import)', flush=True)\n"
    "print('usage: fakeusage [options] files', file=sys.stderr)\n"
    "print('fakeusage: error: unrecognized arguments: --rcfile-typo', file=sys.stderr)\n"
    "raise SystemExit(2)\n")


def test_a_linter_that_stops_on_a_usage_error_after_a_finding_is_a_failure(filed, tmp_path, capsys):  # noqa: F811
    """Round 6, item 10: exit 2 after one finding read as a report of that one finding."""
    from test_export_policy import TESTER, _check, _export, _policy, _set_policy

    _tool_wheel(filed.wheels, "fakeusage", USAGE)
    _set_policy(filed, _policy(checks=_check("pylint", "fakeusage", "lint").replace("fakelint==1.0",
                                                                                     "fakeusage==1.0")))
    out = tmp_path / "filed"
    assert _export(filed, out, "--identity", TESTER, "--report-only") == Exit.LINT
    err = capsys.readouterr().err
    assert "pylint (fakeusage==1.0) stopped on a usage error (exit 2)" in err
    assert "after reporting 1 finding(s): fakeusage: error: unrecognized arguments: --rcfile-typo" in err
    assert not out.exists()


# --------------------------------------------------------------------------- 8. templates: links and a mirror's state

BUG_MD = "---\nname: Bug report\nlabels: bug\n---\n\n**Describe the bug**\n\nWhat happened.\n"
SECRET = "host-secret-45-not-for-bodies"


def _recorded_tree(tmp_path):
    """templates/upstream/fake/ of a repository, with its SOURCE.toml, and a manifest pointing at it."""
    from types import SimpleNamespace

    d = tmp_path / "templates" / "upstream" / "fake"
    (d / ".github" / "ISSUE_TEMPLATE").mkdir(parents=True)
    (d / "SOURCE.toml").write_text('repo = "https://github.com/acme/fake"\ncommit = "' + "e" * 40 + '"\n')
    (tmp_path / "upstream").mkdir()
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "bug.md").write_text(BUG_MD.replace("What happened.", SECRET))
    manifest = SimpleNamespace(target="fake", path=tmp_path / "upstream" / "fake.toml",
                               policy=SimpleNamespace(pr_template=".github/PULL_REQUEST_TEMPLATE.md"))
    return d, outside, manifest


def test_a_recorded_issue_form_that_links_out_of_the_tree_is_refused(tmp_path):
    from types import SimpleNamespace

    from harness.errors import ConfigError
    from harness.filing import forms

    d, outside, manifest = _recorded_tree(tmp_path)
    link = d / ".github" / "ISSUE_TEMPLATE" / "bug_report.md"
    link.symlink_to(outside / "bug.md")
    with pytest.raises(ConfigError, match="bug_report.md: a symbolic link in the recorded upstream tree"):
        forms.read_forms(manifest, SimpleNamespace(git=None))
    link.unlink()  # the form directory itself a link out of the tree
    (d / ".github" / "ISSUE_TEMPLATE").rmdir()
    (d / ".github" / "ISSUE_TEMPLATE").symlink_to(outside)
    with pytest.raises(ConfigError, match="ISSUE_TEMPLATE: a symbolic link"):
        forms.read_forms(manifest, SimpleNamespace(git=None))


def test_a_recorded_pr_template_that_links_out_of_the_tree_is_refused(tmp_path):
    from types import SimpleNamespace

    from harness.errors import ConfigError
    from harness.filing import pr_template

    d, outside, manifest = _recorded_tree(tmp_path)
    (d / ".github" / "PULL_REQUEST_TEMPLATE.md").symlink_to(outside / "bug.md")
    with pytest.raises(ConfigError, match="PULL_REQUEST_TEMPLATE.md: a symbolic link"):
        pr_template.read_template(manifest, SimpleNamespace(git=None))
    (d / ".github" / "PULL_REQUEST_TEMPLATE.md").unlink()
    (d / ".github" / "PULL_REQUEST_TEMPLATE.md").write_text("# Description\n\nSay it.\n")
    assert pr_template.read_template(manifest, SimpleNamespace(git=None)).text == "# Description\n\nSay it.\n"


def _git(cwd, *args: str, **kw) -> str:
    import subprocess

    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True,
                          **kw).stdout.strip()


def test_forms_and_pr_template_are_read_from_exactly_the_pinned_tree(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from harness.filing import forms, pr_template
    from harness.upstream import pins

    work = tmp_path / "work"
    (work / ".github" / "ISSUE_TEMPLATE").mkdir(parents=True)
    (work / ".github" / "ISSUE_TEMPLATE" / "bug_report.md").write_text(BUG_MD)
    (work / ".github" / "pull_request_template.md").write_text("# Description\n\nSay it.\n")
    (work / "secret.md").write_text(BUG_MD.replace("What happened.", SECRET))
    (work / ".github" / "ISSUE_TEMPLATE" / "linked.md").symlink_to("../../secret.md")  # a link the tree holds
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "forms")
    commit = _git(work, "rev-parse", "HEAD")
    mirror = tmp_path / "mirrors" / "acme+fake.git"
    _git(tmp_path, "clone", "-q", "--bare", str(work), str(mirror))
    # state of the mirror that is not the pinned tree's: replacement objects for the form and the template
    for path, evil in ((".github/ISSUE_TEMPLATE/bug_report.md", BUG_MD.replace("What happened.", SECRET)
                        .replace("Describe the bug", "Describe the feature")),
                       (".github/pull_request_template.md", f"# Description\n\n{SECRET}\n")):
        blob = _git(mirror, "--git-dir", str(mirror), "rev-parse", f"{commit}:{path}")
        forged = _git(mirror, "--git-dir", str(mirror), "hash-object", "-w", "--stdin", input=evil)
        _git(mirror, "--git-dir", str(mirror), "replace", blob, forged)
    monkeypatch.setenv(pins.MIRRORS_ENV, str(tmp_path / "mirrors"))
    base = SimpleNamespace(git=pins.GitPin("https://github.com/acme/fake", commit, "refs/heads/main", "2026-01-01"))
    manifest = SimpleNamespace(target="fake", policy=SimpleNamespace(pr_template=""))
    found = forms.read_forms(manifest, base)
    assert found.forms is not None
    assert [(f.path, [s.label for s in f.sections]) for f in found.forms.issue_forms] == [
        (".github/ISSUE_TEMPLATE/bug_report.md", ["Describe the bug"])]  # the link is not a form of the tree
    assert pr_template.read_template(manifest, base).text == "# Description\n\nSay it.\n"
    assert SECRET not in pr_template.tree_text(manifest, base, [".github/pull_request_template.md",
                                                                ".github/ISSUE_TEMPLATE/linked.md"])
    # round 6, item 10: the body's anchors and the names check read the same way (no replacement objects)
    files = pr_template.tree_files(manifest, base, [".github/pull_request_template.md"])
    assert files == {".github/pull_request_template.md": "# Description\n\nSay it.\n"}
    assert pr_template.tree_has(manifest, base, {"feature", "Say"}) == {"Say"}  # "feature": forged blobs only


# --------------------------------------------------------------------------- 21. one long template line

LONG = 2 * 1024 * 1024


@pytest.mark.parametrize("line", ["## a" + " " * LONG + "b", "Fixes issue:" + " " * LONG + "x",
                                  "<!--" * (LONG // 4), "**" + "a " * (LONG // 2)])
def test_one_long_template_line_is_read_in_linear_time(line):
    import subprocess
    import sys
    import time

    code = ("import sys\nfrom harness.filing import forms, pr_template\nline = sys.stdin.read()\n"
            "forms.parse_forms('c', {'bug.md': '---\\nname: Bug\\n---\\n' + line + '\\n', 'bug.yml': "
            "'name: Bug\\nbody:\\n  - type: textarea\\n    attributes:\\n      label: ' + line + '\\n'})\n"
            "template = '## What does this PR do\\n\\n' + line + '\\n- [ ] unit tests\\n'\n"
            "pr_template.section_lines(template)\npr_template.fill(template, 'body', pr_template.Facts())\n"
            "pr_template.asks_linked_issue(template, False)\n")
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], input=line, text=True, timeout=60, capture_output=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert time.monotonic() - began < 15  # linear: well under a second of work; the old regexes took hours


# --------------------------------------------------------------------------- 6. what "latest" is


@pytest.fixture
def remote(lane_repo, tmp_path):
    """Receipts of both lanes written elsewhere, as on a GPU host (tracking.toml untouched)."""
    out = tmp_path / "remote"
    assert cli("run", "01", "--quiet", "--no-tracking", "--receipts-dir", str(out), *lane_repo.args()) == Exit.OK
    return {d.name.split("-", 1)[1]: d for d in (out / "fake" / "01").iterdir()}


def _redated(d, when: str, tmp_path, **changes):
    """A copy of receipt directory ``d`` that says it started at ``when`` (``YYYYmmddTHHMMSSZ``), re-sealed."""
    from datetime import datetime

    from harness.lane import receipts

    iso = datetime.strptime(when, "%Y%m%dT%H%M%SZ").strftime("%Y-%m-%dT%H:%M:%SZ")
    lane = changes.get("lane", d.name.split("-", 1)[1])
    copy = tmp_path / "redated" / when / "fake" / "01" / f"{when}-{lane}"
    shutil.copytree(d, copy)
    data = json.loads((copy / "receipt.json").read_text())
    data.update(started=iso, **changes)
    (copy / "receipt.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    (copy / "SHA256SUMS").unlink()
    receipts.write_manifest(copy)
    return copy


def _archive(tmp_path, dirs, name: str = "receipts.tar"):
    out = tmp_path / name
    with tarfile.open(out, "w") as tf:
        for d in dirs:
            tf.add(d, arcname=f"{d.parent.parent.name}/{d.parent.name}/{d.name}")
    return out


def _tracked(repo) -> str:
    """Pack 01's line of tracking.toml's generated [verdicts]."""
    from harness.lane.tracking import Tracking

    return Tracking.load(repo.root).verdicts()["01"]


def test_an_older_receipt_imported_later_does_not_replace_the_latest(lane_repo, remote, tmp_path, capsys):
    args = lane_repo.args()
    assert cli("receipts", "import", str(_archive(tmp_path, remote.values())), *args) == Exit.OK
    before = _tracked(lane_repo)
    made = json.loads((remote["bug"] / "receipt.json").read_text())["started"][:10]  # the run's own date, not today's
    january = _redated(remote["bug"], "20260115T100000Z", tmp_path)
    assert cli("receipts", "import", str(_archive(tmp_path, [january], "january.tar")), *args) == Exit.OK
    assert (lane_repo.root / "receipts" / "fake" / "01" / january.name).is_dir()  # kept, as history
    assert _tracked(lane_repo) == before and f"latest run {made}" in before
    capsys.readouterr()
    assert cli("receipts", "show", "01", *args) == Exit.OK
    assert f"[receipts/fake/01/{remote['bug'].name}]" in capsys.readouterr().out


def test_a_receipt_dated_2099_is_refused_and_never_counts_as_latest(lane_repo, remote, tmp_path, capsys):
    from harness.lane import receipts

    args = lane_repo.args()
    future = _redated(remote["bug"], "20990101T000000Z", tmp_path)
    assert cli("receipts", "import", str(_archive(tmp_path, [future])), *args) == Exit.USAGE
    assert "started 2099-01-01T00:00:00Z, after now" in capsys.readouterr().err
    assert receipts.run_dirs(lane_repo.root) == []
    # one put there by hand (a commit, a copy): status, receipts show and the next import all pass it over
    shutil.copytree(future, lane_repo.root / "receipts" / "fake" / "01" / future.name)
    assert cli("receipts", "import", str(_archive(tmp_path, remote.values(), "now.tar")), *args) == Exit.OK
    assert "2099" not in _tracked(lane_repo) and _tracked(lane_repo).startswith("2 lane(s): 2 pass; ")
    latest = receipts.latest_by_lane(lane_repo.root, "fake", "01")
    assert latest["bug"].dir.name == remote["bug"].name
    assert receipts.latest(lane_repo.root, "fake", "01", "bug").dir.name == remote["bug"].name
    capsys.readouterr()
    assert cli("status", "01", "--json", *args) in (Exit.OK, Exit.MISMATCH)
    out = capsys.readouterr()
    lanes = {e["name"]: e["receipt"] for e in json.loads(out.out)["packs"][0]["lanes"]}
    assert lanes["bug"]["path"] == f"receipts/fake/01/{remote['bug'].name}"
    # passed over, but not without a word (#55: a host clock an hour ahead lost a receipt silently)
    said = " ".join(out.err.split())
    assert f"receipts/fake/01/{future.name} says it started 2099-01-01T00:00:00Z, after this host's now" in said
    assert cli("receipts", "verify", "--json", *args) == Exit.OK
    report = json.loads(capsys.readouterr().out)
    assert report["future"] == [{"path": f"receipts/fake/01/{future.name}", "started": "2099-01-01T00:00:00Z"}]


def test_a_receipt_an_import_stopped_midway_copied_is_recorded_by_the_next(lane_repo, remote, tmp_path, monkeypatch):
    import os
    import signal

    from harness.lane import receipts

    args = lane_repo.args()
    archive = _archive(tmp_path, remote.values())
    real, calls = shutil.copytree, []

    def copy_then_stop(src, dst, *a, **kw):  # SIGTERM while the second receipt is being copied
        calls.append(dst)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(src, dst, *a, **kw)

    monkeypatch.setattr(shutil, "copytree", copy_then_stop)
    assert cli("receipts", "import", str(archive), *args) == Exit.TERMINATED
    monkeypatch.setattr(shutil, "copytree", real)
    assert len(receipts.run_dirs(lane_repo.root)) == 1  # one receipt in place, tracking.toml never saved
    assert cli("receipts", "import", str(archive), *args) == Exit.OK
    assert _tracked(lane_repo).startswith("2 lane(s): 2 pass; ")  # both lanes counted, the one copied before too
    assert cli("receipts", "verify", *args) == Exit.OK


def test_a_fix_run_relabelled_as_the_bug_lane_is_refused(lane_repo, remote, tmp_path, capsys):
    from harness.lane import receipts

    stamp = remote["fix"].name.split("-", 1)[0]
    relabelled = _redated(remote["fix"], stamp, tmp_path, lane="bug")
    assert cli("receipts", "import", str(_archive(tmp_path, [relabelled])), *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert "does not describe a run of pack 01's lane bug" in err
    assert "patched True (the lane: False)" in err and "expect 'FIX_VALIDATED' (the lane: 'BUG_REPRODUCED')" in err
    assert receipts.run_dirs(lane_repo.root) == []


# --------------------------------------------------------------------------- 2. suite progress: its key and its seal


def _fake_smi(directory, driver: str) -> None:
    """An nvidia-smi on PATH that reports one H100 on ``driver`` (a host whose driver was upgraded meanwhile)."""
    smi = directory / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 9.0, {driver}'\n")
    smi.chmod(0o755)


def _shard_run(repo, lane: str) -> dict:
    """Run one suite shard; its receipt's suite details."""
    seen = {r.path for r in find(repo.root, "fake", "01")}
    assert cli("run", "01", "--quiet", *repo.args(), "--lane", lane) == Exit.OK
    [new] = [r for r in find(repo.root, "fake", "01") if r.path not in seen]
    return new.sentinel_details[upstream_tests.SENTINEL_SUITE_RAN]


def test_suite_progress_decided_under_another_driver_is_not_resumed(suite_repo, tmp_path, monkeypatch):  # noqa: F811
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    args = suite_repo.args()
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    suite_repo.write_tracking(SUITE)
    lane = "suite-1.0-base-1of2"
    _fake_smi(bin_dir, "550.54.15")
    first = _shard_run(suite_repo, lane)
    _fake_smi(bin_dir, "560.35.03")
    second = _shard_run(suite_repo, lane)
    third = _shard_run(suite_repo, lane)
    assert first["resumed"] == 0 and first["shard_cases"] > 0
    assert second["resumed"] == 0  # decided under 550: nothing of it is this run's evidence
    assert third["resumed"] == third["shard_cases"]  # the same host again resumes


def test_a_progress_line_edited_by_hand_is_not_resumed(suite_repo, capsys):  # noqa: F811
    args = suite_repo.args()
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    suite_repo.write_tracking(SUITE)
    runs = {lane: _shard_run(suite_repo, lane) for lane in ("suite-1.0-base-1of2", "suite-1.0-base-2of2")}
    [(lane, case)] = [(lane, c) for lane, d in runs.items() for c, o in d["cases"].items() if o == "failed"]
    [progress] = [p for p in suite_repo.cache.rglob(f"01-{lane}-*.jsonl")]
    text = progress.read_text()
    assert '"outcome": "failed"' in text
    progress.write_text(text.replace('"outcome": "failed"', '"outcome": "passed"'))
    capsys.readouterr()
    again = _shard_run(suite_repo, lane)
    assert again["resumed"] == 0 and again["cases"][case] == "failed"
    assert "is not as its last run sealed it" in capsys.readouterr().err


def test_receipts_import_takes_the_directory_a_host_wrote_and_names_a_missing_path(lane_repo, remote, tmp_path,
                                                                                   capsys):
    """A newcomer's round 4, item 3: a directory was refused with "Is a directory" and no hint."""
    args = lane_repo.args()
    out = remote["bug"].parent.parent.parent  # the --receipts-dir of the host: <target>/<pack>/<run>/ below it
    assert cli("receipts", "import", str(out), *args) == Exit.OK
    assert sorted(d.name for d in (lane_repo.root / "receipts" / "fake" / "01").iterdir()) == sorted(
        d.name for d in remote.values())
    assert out.is_dir() and all(d.is_dir() for d in remote.values())  # the source is read, never moved
    capsys.readouterr()
    assert cli("receipts", "import", str(tmp_path / "nope.tar"), *args) == Exit.USAGE
    err = capsys.readouterr().err
    assert "nope.tar: no such file or directory" in err and "receipts.tar" in err


def test_a_bundle_of_chosen_lanes_prints_a_host_command_that_names_them():
    """A newcomer's round 4, item 3: a bundle made with --lane printed '-- run PACK', which asks for lanes it lacks."""
    from pathlib import Path

    from harness.commands.bundle import host_command

    index = {"packs": ["02", "11"], "lanes": {"02": ["bug-main", "fix-main"], "11": ["fix-dev"]}}
    cmd = host_command(Path("dist/b.tar.xz"), index, selected=True)
    assert cmd == ("python3 -m harness.bootstrap dist/b.tar.xz -- sweep 02 11 --lane 02:bug-main --lane 02:fix-main "
                   "--lane 11:fix-dev")
    whole = host_command(Path("dist/b.tar.xz"), {"packs": ["09"], "lanes": {"09": ["bug"]}}, selected=False)
    assert whole == "python3 -m harness.bootstrap dist/b.tar.xz -- run 09"
    staged = host_command(Path("dist/b.tar.xz"), {"packs": ["03"], "lanes": {}, "payloads": [{}]}, selected=False)
    assert staged == "python3 -m harness.bootstrap dist/b.tar.xz --stage dist/b.tar.xz.parts -- run 03"
