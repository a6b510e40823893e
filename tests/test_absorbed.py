"""harness absorbed: absorbed / differs / untracked drift, and the retire flow."""

from __future__ import annotations

import pytest
from conftest import CORE_FIXED, cli

from harness.errors import Exit
from harness.tracking import Tracking


@pytest.mark.parametrize(
    "make",
    [
        lambda root: (root / "patches" / "fake" / "07").mkdir(),  # pack not in tracking.toml
        lambda root: (root / "patches" / "fake" / "01" / "notes.txt").write_text("x"),
        lambda root: (root / "patches" / "fake" / "01" / "fix.diff").write_text("x"),
        lambda root: (root / "overlays" / "fake" / "src").mkdir(parents=True)
        or (root / "overlays" / "fake" / "src" / "core.py").write_text("x"),
    ],
    ids=["unknown-pack", "stray-file", "badly-named-patch", "overlay"],
)
def test_untracked_drift_is_an_error_with_the_path(lane_repo, capsys, make):
    make(lane_repo.root)
    assert cli("absorbed", "fake", *lane_repo.args()) == Exit.DRIFT
    captured = capsys.readouterr()
    assert "untracked drift" in captured.err and "untracked drift" in captured.out
    assert "patches/fake/" in captured.out or "overlays/fake/src/core.py" in captured.out


def test_a_tracked_pack_that_still_differs_is_listed(lane_repo, capsys):
    assert cli("absorbed", "fake", *lane_repo.args()) == Exit.OK
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("│ 01"))
    assert "differs" in row and "clean" in row


def test_retire_flow_proposes_then_writes_keeping_comments_and_lanes(lane_repo, capsys):
    lane_repo.add_base("1.1", CORE_FIXED)
    path = lane_repo.root / "tracking.toml"
    before = path.read_text()
    assert cli("absorbed", "fake", "--to", "1.1", *lane_repo.args()) == Exit.OK
    captured = capsys.readouterr()
    out = captured.out
    assert '-state = "ready"' in out and '+state = "absorbed"' in out and '+version = "1.1"' in out
    assert "--retire" in captured.err and path.read_text() == before  # never silently
    assert cli("absorbed", "fake", "--to", "1.1", "--retire", *lane_repo.args()) == Exit.OK
    after = path.read_text()
    assert "# tracking for tests: comments must survive" in after and 'kind = "pr"  # a pull request' in after
    t = Tracking.load(lane_repo.root)
    pack = t.pack("01")
    assert pack.state == "absorbed" and pack.absorbed["version"] == "1.1"
    assert [lane.name for lane in pack.lanes] == ["bug", "fix"]
    capsys.readouterr()
    assert cli("absorbed", "fake", "--to", "1.1", *lane_repo.args()) == Exit.OK
    assert "already retired" in capsys.readouterr().out


def test_absorbed_pack_whose_series_conflicts_is_superseded_only_with_lane_evidence(lane_repo, capsys):
    lane_repo.add_base("1.1", CORE_FIXED.replace("zip(xs, w)", "zip(xs, w, strict=True)"))
    regression = '''
[[packs.01.lanes]]
name = "regression"
base = "1.1"
patched = false
expect = "BUG_ABSENT"

[packs.01.absorbed]
version = "1.1"
'''
    lane_repo.write_tracking(regression)
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('state = "ready"', 'state = "absorbed"'))
    assert cli("absorbed", "fake", "--to", "1.1", *lane_repo.args()) == Exit.OK
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("│ 01"))
    assert "differs" in row and "no passing BUG_ABSENT lane" in row
    path.write_text(path.read_text() + '\n[packs.01.validation.regression]\nverdict = "pass"\nhost = "h"\n'
                    'receipt = "receipts/x.json"\n')
    assert cli("absorbed", "fake", "--to", "1.1", *lane_repo.args()) == Exit.OK
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("│ 01"))
    assert "superseded" in row and "conflict" in row and "lane regression saw BUG_ABSENT on h" in row
