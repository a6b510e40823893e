"""Performance claims: rows in tracking.toml, values from receipts, the base from the lane, stale when it is."""

from __future__ import annotations

import json
import textwrap

from conftest import cli

from harness.errors import Exit

CLAIM = textwrap.dedent('''
    [[packs.01.performance]]
    lane = "fix"
    figure = "max_err"
    label = "error of the fixed scale"
    show = "{value:.3f}"
''')


def _perf(repo, capsys, *extra) -> tuple[int, dict]:
    capsys.readouterr()
    code = cli("perf", "--json", *extra, *repo.args())
    return code, json.loads(capsys.readouterr().out)


def test_a_claim_reads_its_value_base_and_pin_from_the_lane_and_its_receipt(lane_repo, capsys):
    lane_repo.write_tracking(extra=CLAIM)
    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK
    code, out = _perf(lane_repo, capsys)
    assert code == Exit.OK
    (claim,) = out["claims"]
    receipt = json.loads((lane_repo.root / claim["receipt"]).read_text())
    figure = next(f for f in receipt["figures"] if f["name"] == "max_err")
    assert claim["result"] == format(figure["value"], ".3f")
    assert (claim["pack"], claim["lane"], claim["base"]) == ("01", "fix", "1.0")
    assert claim["base_pin"] == receipt["base"]["sha256"]
    assert claim["current"] is True and claim["stale"] is None and claim["problem"] is None


def test_a_claim_whose_reproducer_changed_since_is_stale(lane_repo, capsys):
    lane_repo.write_tracking(extra=CLAIM)
    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    repro.write_text(repro.read_text() + "\n# changed after the run\n")
    code, out = _perf(lane_repo, capsys)
    assert code == Exit.MISMATCH
    (claim,) = out["claims"]
    assert claim["current"] is False and "pack01.py" in claim["stale"]


def test_a_claim_without_a_receipt_or_figure_says_so(lane_repo, capsys):
    lane_repo.write_tracking(extra=CLAIM.replace('"max_err"', '"no_such_figure"'))
    code, out = _perf(lane_repo, capsys)
    assert code == Exit.MISMATCH
    assert out["claims"][0]["problem"] == "no receipt"
    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK
    code, out = _perf(lane_repo, capsys)
    assert code == Exit.MISMATCH and out["claims"][0]["problem"].startswith("no figure 'no_such_figure'")


def test_a_typed_figure_in_tracking_is_refused(lane_repo, capsys):
    lane_repo.write_tracking(extra="\n[packs.01.performance]\nratio = 0.5\n")
    assert cli("perf", *lane_repo.args()) == Exit.USAGE
    assert "performance" in capsys.readouterr().err


def test_list_reads_each_lanes_verdict_from_its_latest_receipt(lane_repo, capsys):
    lane_repo.write_tracking()
    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK
    capsys.readouterr()
    assert cli("list", "--json", *lane_repo.args()) == Exit.OK
    lanes = {ln["name"]: ln["verdict"] for ln in json.loads(capsys.readouterr().out)["packs"][0]["lanes"]}
    assert lanes == {"bug": "pass", "fix": "pass"}
    # tracking.toml's generated line is not what list reads: an edit there changes nothing, and verify names it
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace("2 lane(s): 2 pass", "2 lane(s): 1 pass, 1 mismatch (fix)", 1))
    assert cli("list", "--json", *lane_repo.args()) == Exit.OK
    lanes = {ln["name"]: ln["verdict"] for ln in json.loads(capsys.readouterr().out)["packs"][0]["lanes"]}
    assert lanes == {"bug": "pass", "fix": "pass"}
    assert cli("receipts", "verify", *lane_repo.args()) == Exit.TAMPERED
    assert "tracking.toml [verdicts] 01: says '2 lane(s): 1 pass, 1 mismatch (fix)" in capsys.readouterr().out
    assert cli("receipts", "sync", *lane_repo.args()) == Exit.OK
    assert cli("receipts", "verify", *lane_repo.args()) == Exit.OK


def test_markdown_table_has_one_row_per_claim(lane_repo, capsys):
    lane_repo.write_tracking(extra=CLAIM + CLAIM.replace('lane = "fix"', 'lane = "bug"'))
    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK
    capsys.readouterr()
    assert cli("perf", "--markdown", *lane_repo.args()) == Exit.OK
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| 01 |")]
    assert [r.split(" | ")[-1].strip(" `|").rsplit("-", 1)[-1] for r in rows] == ["fix", "bug"]


def test_a_row_can_read_the_runs_sentinel_and_its_details(lane_repo, capsys):
    claim = CLAIM.replace('"max_err"', '"@verdict"').replace('"{value:.3f}"', '"{value} ({got})"')
    lane_repo.write_tracking(extra=claim)
    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK
    code, out = _perf(lane_repo, capsys)
    receipt = json.loads((lane_repo.root / out["claims"][0]["receipt"]).read_text())
    (sentinel,) = receipt["sentinels"]
    assert code == Exit.OK
    got = receipt["sentinel_details"][sentinel]["got"]  # the details' keys are the row's placeholders
    assert out["claims"][0]["result"] == f"{sentinel} ({', '.join(format(v, 'g') for v in got)})"


def test_latest_by_lane_is_latest_for_every_lane(lane_repo, capsys):
    from harness.lane import receipts

    lane_repo.write_tracking()
    for _ in range(2):  # two receipts per lane: the newer one must win
        assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK
    by_lane = receipts.latest_by_lane(lane_repo.root, "fake", "01")
    assert sorted(by_lane) == ["bug", "fix"]
    for lane, rec in by_lane.items():
        assert rec.path == receipts.latest(lane_repo.root, "fake", "01", lane).path
