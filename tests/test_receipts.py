"""Receipts are tamper-evident as a whole; importing them never writes outside receipts/ (issue 15, #8 and #9)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from conftest import REPO, cli, isolated_env, make_lane_repo

from harness.errors import Exit
from harness.lane import receipts
from harness.lane.tracking import Tracking


@pytest.fixture(scope="session")
def _ran_once(tmp_path_factory):
    """Both lanes of pack 01 run once for the whole session (a real CPU run)."""
    with isolated_env():
        repo = make_lane_repo(tmp_path_factory.mktemp("receipts-ran"))
        assert cli("run", "01", "--quiet", *repo.args()) == Exit.OK
    return repo


@pytest.fixture
def ran(_ran_once, lane_repo):
    """Both lanes of pack 01 run once; their receipts (the shared run, copied over this test's repository)."""
    shutil.rmtree(lane_repo.root)
    shutil.copytree(_ran_once.root, lane_repo.root, symlinks=True)
    shutil.rmtree(lane_repo.cache, ignore_errors=True)
    shutil.copytree(_ran_once.cache, lane_repo.cache, symlinks=True)
    return {r.lane: r for r in receipts.find(lane_repo.root, "fake", "01")}


def _verify(lane_repo, capsys) -> tuple[int, str]:
    code = cli("receipts", "verify", *lane_repo.args())
    return code, capsys.readouterr().out


def test_a_new_receipt_carries_a_manifest_sha256sum_accepts(ran):
    rec = ran["bug"]
    assert rec.schema == 2
    listed = sorted(line.split()[1] for line in (rec.dir / "SHA256SUMS").read_text().splitlines())
    assert listed == ["output.log", "output.log.sha256", "receipt.json"]
    if shutil.which("sha256sum"):
        assert subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=rec.dir).returncode == 0


def _edit_verdict(d: Path) -> None:
    data = json.loads((d / "receipt.json").read_text())
    data["verdict"] = "mismatch"
    (d / "receipt.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


@pytest.mark.parametrize(
    ("tamper", "finding"),
    [
        (_edit_verdict, "receipt.json: sha256"),
        (lambda d: (d / "output.log.sha256").write_text("0" * 64 + "  output.log\n"), "output.log.sha256: sha256"),
        (lambda d: (d / "receipt.json").unlink(), "receipt.json missing"),
        (lambda d: (d / "SHA256SUMS").unlink(), "SHA256SUMS missing"),
        (lambda d: (d / "notes.txt").write_text("added later\n"), "not covered by SHA256SUMS: notes.txt"),
        (lambda d: (d / "output.log").write_text("edited\n"), "output.log: sha256"),
    ],
    ids=["verdict-edited", "log-digest-zeroed", "receipt-deleted", "manifest-deleted", "file-added", "log-edited"],
)
def test_any_change_to_a_receipt_directory_fails_verify(lane_repo, ran, capsys, tamper, finding):
    tamper(ran["bug"].dir)
    code, out = _verify(lane_repo, capsys)
    assert code == Exit.TAMPERED
    bad = [line for line in out.splitlines() if line.startswith("BAD")]
    assert any(ran["bug"].dir.name in line and finding in line for line in bad), out
    assert "1 receipt(s) verified" in out  # the fix lane's receipt is still checked


def test_an_unreadable_receipt_does_not_stop_the_check(lane_repo, ran, capsys):
    (ran["bug"].dir / "receipt.json").write_text("{ not json")
    code, out = _verify(lane_repo, capsys)
    assert code == Exit.TAMPERED and "receipt.json unreadable" in out
    assert "1 receipt(s) verified" in out


def test_a_deleted_receipt_that_the_verdicts_count_fails_verify(lane_repo, ran, capsys):
    shutil.rmtree(ran["fix"].dir)
    code, out = _verify(lane_repo, capsys)
    assert code == Exit.TAMPERED
    assert "tracking.toml [verdicts] 01: says '2 lane(s): 2 pass; " in out
    assert "receipts/ say '2 lane(s): 1 pass, 1 not run (fix); " in out


def test_committed_legacy_receipts_verify_as_log_only_and_an_edit_still_shows(lane_repo, capsys):
    src = REPO / "receipts" / "liger-kernel" / "09"
    dest = lane_repo.root / "receipts" / "liger-kernel" / "09"
    shutil.copytree(src, dest)
    code, out = _verify(lane_repo, capsys)
    assert code == Exit.OK, out
    # counted in the summary, one line; listed one per receipt only with -v (on stderr: detail, not data)
    [summary] = out.splitlines()
    assert summary.endswith(", 3 legacy: log-only (-v lists them)), 0 bad"), summary
    assert cli("receipts", "verify", "-v", *lane_repo.args()) == Exit.OK
    assert len([line for line in capsys.readouterr().err.splitlines() if "legacy: log-only" in line]) == 3
    assert cli("receipts", "verify", "--json", *lane_repo.args()) == Exit.OK
    doc = json.loads(capsys.readouterr().out)
    assert (doc["ok"], len(doc["legacy"]), doc["bad"]) == (True, 3, [])
    assert doc["verified"] == doc["with_manifest"] + 3 == int(summary.split()[0])
    # no digest covers a legacy receipt.json, but what it says must still be what its log says
    [first] = sorted(dest.iterdir())[:1]
    data = json.loads((first / "receipt.json").read_text())
    data["sentinels"] = ["FIX_VALIDATED"] if data["sentinels"] != ["FIX_VALIDATED"] else ["BUG_REPRODUCED"]
    (first / "receipt.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    code, out = _verify(lane_repo, capsys)
    assert code == Exit.TAMPERED and "receipt.json: 'sentinels' has 1 entries, the log 1; they part at entry 1" in out
    assert cli("receipts", "verify", "--json", *lane_repo.args()) == Exit.TAMPERED
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and [b["path"] for b in doc["bad"]] == [str(first.relative_to(lane_repo.root))]


# --------------------------------------------------------------------------- import (#8)

def _archive(tmp_path: Path, dirs: list[Path], name: str = "receipts.tar") -> Path:
    """A tar of receipt directories laid out as <target>/<pack>/<run>/, as a GPU host sends them back."""
    out = tmp_path / name
    with tarfile.open(out, "w") as tf:
        for d in dirs:
            tf.add(d, arcname=f"{d.parent.parent.name}/{d.parent.name}/{d.name}")
    return out


@pytest.fixture
def remote(lane_repo, tmp_path):
    """Receipts of both lanes written elsewhere, as on a GPU host (tracking.toml untouched)."""
    out = tmp_path / "remote"
    assert cli("run", "01", "--quiet", "--no-tracking", "--receipts-dir", str(out), *lane_repo.args()) == Exit.OK
    return sorted((out / "fake" / "01").iterdir())


def _forge(d: Path, **changes) -> None:
    """Change receipt.json and re-seal the directory, as someone who knows the format would."""
    data = json.loads((d / "receipt.json").read_text())
    data.update(changes)
    (d / "receipt.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    (d / "SHA256SUMS").unlink()
    receipts.write_manifest(d)


def _nothing_imported(lane_repo) -> bool:
    return receipts.run_dirs(lane_repo.root) == [] and Tracking.load(lane_repo.root).verdicts() == {}


def test_import_copies_verified_receipts_and_records_them(lane_repo, remote, tmp_path, capsys):
    assert cli("receipts", "import", str(_archive(tmp_path, remote)), *lane_repo.args()) == Exit.OK
    assert [d.name for d in receipts.run_dirs(lane_repo.root)] == [d.name for d in remote]
    assert Tracking.load(lane_repo.root).verdicts()["01"].startswith("2 lane(s): 2 pass; latest run ")
    assert _verify(lane_repo, capsys)[0] == Exit.OK


def test_import_refuses_a_target_that_escapes_receipts(lane_repo, remote, tmp_path, capsys):
    _forge(remote[0], target="../../../../tmp/x" + tmp_path.name)
    # refused as it is checked: its JSON names another target than the directory it came in (verify's finding)
    assert cli("receipts", "import", str(_archive(tmp_path, remote)), *lane_repo.args()) == Exit.TAMPERED
    assert "receipt.json says target ../../../../tmp/x" in capsys.readouterr().err
    assert not list(Path("/tmp").glob(f"x{tmp_path.name}*")) and _nothing_imported(lane_repo)


def test_import_refuses_an_unknown_lane_before_copying_anything(lane_repo, remote, tmp_path, capsys):
    d = remote[1]
    _forge(d, lane="nope")
    d.rename(d.with_name(d.name.rsplit("-", 1)[0] + "-nope"))
    archive = _archive(tmp_path, sorted(d.parent.iterdir()))
    assert cli("receipts", "import", str(archive), *lane_repo.args()) == Exit.USAGE
    assert "pack 01 has no lane 'nope'" in capsys.readouterr().err
    assert _nothing_imported(lane_repo)


def test_import_refuses_a_tampered_receipt_and_imports_nothing(lane_repo, remote, tmp_path, capsys):
    (remote[1] / "output.log").write_text("FIX_VALIDATED {}\n")
    assert cli("receipts", "import", str(_archive(tmp_path, remote)), *lane_repo.args()) == Exit.TAMPERED
    assert "nothing was imported" in capsys.readouterr().err
    assert _nothing_imported(lane_repo)


def test_verify_says_in_one_line_where_a_receipt_parts_from_its_log(remote):
    """A receipt whose figures part from its log at one entry: verify names the entry and the log line it stands
    on, and does not print both lists whole (a committed receipt once printed two ~4 KB lists and no line)."""
    d = remote[0]
    data = json.loads((d / "receipt.json").read_text())
    assert data["figures"], "the fake reproducer prints a figure"
    figures = [dict(data["figures"][0], value="x" * 4000), *data["figures"][1:]]
    _forge(d, figures=figures)
    (problem,) = receipts.check_dir(d, {"BUG_REPRODUCED", "FIX_VALIDATED"}).problems
    first = next(n for n, line in enumerate((d / "output.log").read_text().splitlines(), 1)
                 if line.startswith("FIGURE "))
    assert problem.startswith(f"receipt.json: 'figures' has {len(figures)} entries, the log {len(figures)}; they "
                              f"part at entry 1 (log line {first}): receipt ")
    assert len(problem) < 600


def test_a_withdrawn_receipt_counts_for_no_lane_and_verify_lists_it(lane_repo, ran, capsys):
    """A receipt whose log breaks verification is withdrawn, never edited: verify lists it as withdrawn (exit OK once
    the verdicts are synced), its lane has no latest receipt, and the entry pins the log it was written for."""
    bad = ran["fix"].dir
    with (bad / "output.log").open("a") as fh:  # the receipt no longer agrees with its log: verify fails
        fh.write("FIGURE {\"name\": \"late\", \"value\": 1}\n")
    code, out = _verify(lane_repo, capsys)
    assert code == Exit.TAMPERED and f"BAD receipts/fake/01/{bad.name}" in out
    rel = f"receipts/fake/01/{bad.name}"
    assert cli("receipts", "withdraw", str(lane_repo.root / rel), "--reason", "  its log was  appended to  ",
               *lane_repo.args()) == Exit.OK
    [entry] = receipts.withdrawn.load(lane_repo.root / "receipts")
    assert (entry.receipt, entry.reason) == (f"fake/01/{bad.name}", "its log was appended to")
    assert entry.log_sha256 == hashlib.sha256((bad / "output.log").read_bytes()).hexdigest()
    assert sorted(r.lane for r in receipts.find(lane_repo.root, "fake", "01")) == ["bug"]
    assert (bad / "output.log").exists()  # the directory stays as it was
    capsys.readouterr()
    assert cli("receipts", "sync", *lane_repo.args()) == Exit.OK
    capsys.readouterr()
    assert cli("receipts", "verify", "--json", *lane_repo.args()) == Exit.OK
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["bad"] == []
    assert report["withdrawn"] == [{"path": rel, "reason": "its log was appended to", "date": entry.date}]
    # withdrawing twice is refused, naming the file; the file is unchanged
    text = (lane_repo.root / "receipts" / "withdrawn.toml").read_text()
    assert cli("receipts", "withdraw", str(lane_repo.root / rel), "--reason", "again", *lane_repo.args()) \
        == Exit.USAGE
    assert "withdrawn already" in capsys.readouterr().err
    assert (lane_repo.root / "receipts" / "withdrawn.toml").read_text() == text
    # the entry pins the log: a log changed after the withdrawal makes the entry, and verify, fail
    with (bad / "output.log").open("a") as fh:
        fh.write("more\n")
    code, out = _verify(lane_repo, capsys)
    assert code == Exit.TAMPERED and "the entry names another run" in out


@pytest.mark.parametrize(("text", "finding"), [
    ('[[withdrawn]]\nreceipt = "fake/01/x"\nlog_sha256 = "{sha}"\nreason = "r"\ndate = "2026-12-07"\nreasn = "x"\n',
     ":6: unknown key 'reasn' (did you mean 'reason'?)"),
    ('\n[[withdrawn]]\nreceipt = "fake/01/x"\nlog_sha256 = "abc"\nreason = "r"\ndate = "2026-12-07"\n',
     ":4: key 'log_sha256' must be 64 lowercase hex digits"),
    ('[[withdrawn]]\nreceipt = "fake/01/nowhere"\nlog_sha256 = "{sha}"\nreason = "r"\ndate = "2026-12-07"\n',
     ":1: fake/01/nowhere is withdrawn but no such receipt directory exists"),
    ('[withdrawn]\nreceipt = "x"\n', "must be an array of tables"),
], ids=["misspelt-key", "short-sha", "no-such-dir", "not-an-array"])
def test_a_wrong_withdrawn_file_is_named_with_its_line(lane_repo, ran, capsys, text, finding):
    (lane_repo.root / "receipts" / "withdrawn.toml").write_text(text.replace("{sha}", "0" * 64))
    code = cli("receipts", "verify", *lane_repo.args())
    captured = capsys.readouterr()
    assert code in (Exit.TAMPERED, Exit.USAGE)
    assert finding in captured.out + captured.err


def test_withdraw_refuses_what_is_not_a_receipt_directory(lane_repo, ran, capsys):
    assert cli("receipts", "withdraw", str(lane_repo.root / "receipts" / "fake"), "--reason", "x",
               *lane_repo.args()) == Exit.USAGE
    assert "not a receipt directory" in capsys.readouterr().err
    assert not (lane_repo.root / "receipts" / "withdrawn.toml").exists()
