"""The harness's one wall clock (harness/base/clock.py): a shift moves every date, and nothing else reads it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harness.base import clock
from harness.errors import UsageError

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("text, delta", [("+365d", timedelta(days=365)), ("-2h", timedelta(hours=-2)),
                                         ("90m", timedelta(minutes=90)), ("+30s", timedelta(seconds=30)),
                                         ("", timedelta(0))])
def test_a_shift_reads_a_signed_amount_and_a_unit(text, delta):
    assert clock.parse_shift(text) == delta


@pytest.mark.parametrize("text", ["1y", "+1.5d", "tomorrow", "+d", "365"])
def test_a_shift_it_cannot_read_is_a_usage_error_naming_the_variable(text):
    with pytest.raises(UsageError, match=clock.SHIFT_ENV):
        clock.parse_shift(text)


def test_the_shift_moves_now_today_and_the_timestamp_together(monkeypatch):
    monkeypatch.delenv(clock.SHIFT_ENV, raising=False)
    plain = clock.now()
    monkeypatch.setenv(clock.SHIFT_ENV, "+365d")
    ahead = clock.now()
    assert timedelta(days=365) <= ahead - plain < timedelta(days=365, seconds=5)
    assert clock.today() == ahead.date() and ahead.tzinfo is not None and ahead.microsecond == 0
    assert clock.timestamp() - datetime.now(UTC).timestamp() == pytest.approx(365 * 86400, abs=5)
    assert clock.iso(ahead).endswith("Z") and clock.iso(ahead)[:10] == ahead.date().isoformat()


def test_a_lane_run_under_a_shifted_clock_stamps_its_receipt_with_the_shifted_date(lane_repo, monkeypatch):
    """Children inherit the shift: a receipt written a year ahead is no receipt "dated in the future" to the
    process that reads it under the same clock, and its date is a year from the real one."""
    from harness.lane import receipts
    from harness.lane.tracking import Tracking
    from tests.conftest import cli

    monkeypatch.setenv(clock.SHIFT_ENV, "+400d")
    assert cli("run", "01", "--quiet", *lane_repo.args()) == 0
    found = receipts.latest_by_lane(lane_repo.root, "fake", "01")
    assert found and all(r.started_at.date() == clock.today() for r in found.values())
    assert (clock.today() - datetime.now(UTC).date()).days >= 399
    assert f"latest run {clock.today().isoformat()}" in Tracking.load(lane_repo.root).verdicts()["01"]


def test_no_harness_module_reads_the_wall_clock_itself():
    """Dates come from harness.base.clock alone, so PATCHLANE_CLOCK_SHIFT moves them all (a date bomb in CI's
    year-ahead run would otherwise hide in a module that asks the system)."""
    # formatting a time it was given (a file's mtime) is no read of the clock: time.gmtime(t) passes
    reads = re.compile(r"\b(?:datetime\.now|datetime\.utcnow|date\.today|datetime\.date\.today)\(|"
                       r"time\.(?:gmtime|localtime)\(\)|time\.strftime\(\"[^\"]*\"\)")
    offenders = [f"{p.relative_to(REPO)}:{n}" for p in sorted((REPO / "harness").rglob("*.py"))
                 if p.name != "clock.py"
                 for n, line in enumerate(p.read_text().splitlines(), 1) if reads.search(line.split("#")[0])]
    assert offenders == []


def test_tests_take_today_from_the_clock_not_the_system():
    reads = re.compile(r"\b(?:date\.today|datetime\.date\.today|datetime\.now|datetime\.utcnow)\(")
    offenders = [f"{p.relative_to(REPO)}:{n}" for p in sorted((REPO / "tests").glob("*.py"))
                 if p.name != "test_clock.py"
                 for n, line in enumerate(p.read_text().splitlines(), 1) if reads.search(line.split("#")[0])]
    assert offenders == []


def test_a_bad_shift_reaches_the_command_line_as_one_line(tmp_path):
    env = {"PATH": "/usr/bin:/bin", clock.SHIFT_ENV: "next week", "PATCHLANE_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "harness", "status", "--json", "--root", str(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert clock.SHIFT_ENV in proc.stderr and "Traceback" not in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) <= 2
    json.dumps(proc.stderr)  # printable
