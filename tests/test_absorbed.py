"""harness absorbed: absorbed / differs / untracked drift, and the retire flow."""

from __future__ import annotations

import json

import pytest
from conftest import CORE_FIXED, cli

from harness.errors import Exit
from harness.lane.tracking import Tracking


@pytest.mark.parametrize(
    "make",
    [
        (lambda root: (root / "patches" / "fake" / "07").mkdir(), "patches/fake/07"),  # pack not in tracking.toml
        (lambda root: (root / "patches" / "fake" / "01" / "notes.txt").write_text("x"), "patches/fake/01/notes.txt"),
        (lambda root: (root / "patches" / "fake" / "01" / "fix.diff").write_text("x"), "patches/fake/01/fix.diff"),
        (lambda root: (root / "overlays" / "fake" / "src").mkdir(parents=True)
         or (root / "overlays" / "fake" / "src" / "core.py").write_text("x"), "overlays/fake/src/core.py"),
    ],
    ids=["unknown-pack", "stray-file", "badly-named-patch", "overlay"],
)
def test_untracked_drift_is_an_error_with_the_path(lane_repo, capsys, make):
    make, path = make
    make(lane_repo.root)
    assert cli("absorbed", "fake", *lane_repo.args()) == Exit.DRIFT
    captured = capsys.readouterr()
    assert "untracked drift" in captured.err and "untracked drift" in captured.out
    assert path in captured.out
    assert cli("absorbed", "fake", "--json", *lane_repo.args()) == Exit.DRIFT
    assert [d["path"] for d in _json(capsys)["drift"]] == [path]


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def _result(capsys, pack: str = "01") -> dict:
    return next(r for r in _json(capsys)["results"] if r["pack"] == pack)


def test_a_tracked_pack_that_still_differs_is_listed(lane_repo, capsys):
    assert cli("absorbed", "fake", "--json", *lane_repo.args()) == Exit.OK
    result = _result(capsys)
    assert result["state"] == "differs" and result["series"] == "clean"


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
    assert "no passing BUG_ABSENT lane" in capsys.readouterr().out
    assert cli("absorbed", "fake", "--to", "1.1", "--json", *lane_repo.args()) == Exit.OK
    result = _result(capsys)
    assert result["state"] == "differs" and result["evidence"] is None
    assert cli("run", "01", "--lane", "regression", "--quiet", *lane_repo.args()) == Exit.OK  # its receipt
    capsys.readouterr()
    assert cli("absorbed", "fake", "--to", "1.1", "--json", *lane_repo.args()) == Exit.OK
    result = _result(capsys)
    assert result["state"] == "superseded" and result["series"] == "conflict"
    assert "lane regression saw BUG_ABSENT on cpu (" in result["evidence"]
    assert "(receipts/fake/01/" in result["evidence"]
