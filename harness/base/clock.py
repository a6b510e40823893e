"""The harness's one wall clock: every date or timestamp the harness records or compares is read here.

Standard library only (layer 0). ``$PATCHLANE_CLOCK_SHIFT`` moves the *date* the harness sees, not time
itself: ``+365d``, ``-2h``, ``+90m`` or ``+30s`` are added to the wall clock. Durations, timeouts, sleeps and
progress intervals are measured with ``time.monotonic``/``time.time`` differences and do not move. CI runs
the quick suite once more with the clock a year ahead (``.ci/run``), so a test that reads today's date to
decide what it asserts fails before it lands. Child processes inherit the variable: a lane run under a
shifted clock stamps its receipt with the shifted date, as the process that reads it back expects.
"""

from __future__ import annotations

import os
import re
import time
from datetime import UTC, date, datetime, timedelta

from harness.errors import UsageError

SHIFT_ENV = "PATCHLANE_CLOCK_SHIFT"
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
_SHIFT = re.compile(r"([+-]?)(\d+)([dhms])")


def parse_shift(text: str) -> timedelta:
    """``+365d`` -> 365 days; ``''`` -> no shift. Anything else is UsageError naming the variable."""
    text = text.strip()
    if not text:
        return timedelta(0)
    m = _SHIFT.fullmatch(text)
    if m is None:
        raise UsageError(f"${SHIFT_ENV}={text!r}: expected a signed whole number and a unit, such as +365d, "
                         "-2h, +90m or +30s")
    sign, amount, unit = m.groups()
    delta = timedelta(**{_UNITS[unit]: int(amount)})
    return -delta if sign == "-" else delta


def shift() -> timedelta:
    """The shift in effect now (read on every call: a test may set the variable)."""
    return parse_shift(os.environ.get(SHIFT_ENV, ""))


def now() -> datetime:
    """The current UTC time, timezone-aware, to the second, with the shift applied."""
    return (datetime.now(UTC) + shift()).replace(microsecond=0)


def today() -> date:
    """Today's UTC date, with the shift applied."""
    return now().date()


def timestamp() -> float:
    """Seconds since the epoch, with the shift applied (for records that store a POSIX time)."""
    return time.time() + shift().total_seconds()


def iso(t: datetime | None = None) -> str:
    """``t`` (default: now) as ISO 8601 UTC with a ``Z``, to the second."""
    t = now() if t is None else t
    return t.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
