"""``harness new``: a pack's tracking entry, series directory and reproducer, all or nothing."""

from __future__ import annotations

import json

from conftest import cli

from harness.errors import Exit
from harness.receipts import find
from harness.tracking import Tracking


def test_new_scaffolds_a_pack_that_loads_checks_and_runs_its_reproducer(lane_repo, capsys):
    before = (lane_repo.root / "tracking.toml").read_text()
    code = cli("new", "24", "--target", "fake", "--title", "scale drops the last weight", "--requires", "cpu",
               *lane_repo.args())
    assert code == Exit.OK, capsys.readouterr().err
    out = capsys.readouterr()
    repro = lane_repo.root / out.out.strip()
    assert repro == lane_repo.root / "repros" / "fake" / "pack24_scale_drops_the_last_weight.py"
    assert "next: write check()" in out.err
    pack = Tracking.load(lane_repo.root).pack("24")
    assert (pack.title, pack.target, pack.kind, pack.state, pack.base) == (
        "scale drops the last weight", "fake", "pr", "planned", "1.0")
    assert [(ln.name, ln.patched, ln.expect) for ln in pack.lanes] == [
        ("bug-1.0", False, "BUG_REPRODUCED"), ("fix-1.0", True, "FIX_VALIDATED")]
    assert (lane_repo.root / "patches" / "fake" / "24").is_dir()
    text = (lane_repo.root / "tracking.toml").read_text()
    assert text.startswith(before.rstrip("\n"))  # appended: the comments and packs before it untouched
    assert cli("check", *lane_repo.args()) == Exit.OK
    # the reproducer is the kit's: it prints the host stamp, then stops until its check is written
    capsys.readouterr()
    assert cli("run", "24", "--lane", "bug-1.0", "--no-tracking", *lane_repo.args()) == Exit.CRASH
    [rec] = find(lane_repo.root, "fake", "24")
    log = (rec.dir / "output.log").read_text()
    assert log.lstrip().startswith("HOST_STAMP") and "NotImplementedError: pack 24: write the check" in log
    assert json.loads((rec.dir / "receipt.json").read_text())["verdict"] == "crash"


def test_new_changes_nothing_when_it_cannot_finish(lane_repo, capsys, monkeypatch):
    before = (lane_repo.root / "tracking.toml").read_text()
    assert cli("new", "01", "--target", "fake", *lane_repo.args()) == Exit.USAGE  # taken
    assert "pack 01 is already in tracking.toml" in capsys.readouterr().err
    assert cli("new", "25", "--target", "nope", *lane_repo.args()) == Exit.USAGE
    assert cli("new", "25", "--target", "fake", "--base", "9.9", *lane_repo.args()) == Exit.USAGE
    assert "has no base '9.9'" in capsys.readouterr().err
    # the save fails after the reproducer and the series directory were written: both are removed again
    def full_disk(self):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Tracking, "save", full_disk)
    assert cli("new", "25", "--target", "fake", *lane_repo.args()) == Exit.INTERNAL
    assert (lane_repo.root / "tracking.toml").read_text() == before
    assert not (lane_repo.root / "patches" / "fake" / "25").exists()
    assert not list((lane_repo.root / "repros" / "fake").glob("pack25_*"))
