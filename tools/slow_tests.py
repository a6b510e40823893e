"""Write tests/slow.txt, the tests that take seconds, from a measured run of the quick suite (issue 49).

    nox -s tests -- --durations=0 2>&1 | tee tests.log          # on an idle 2-core host, fresh clone
    python tools/slow_tests.py tests.log --at-least 3 --host "2-core, idle, fresh clone"

tests/conftest.py marks every node id listed in tests/slow.txt ``slow``: ``nox -s tests`` (the edit loop, at most
5 minutes cold on a 2-core host) leaves them out and ``nox -s tests_slow`` (and CI) runs them. A test's time is the
sum of its setup, call and teardown as pytest reported them. The file keeps each test's measured seconds and where
they came from. A test it lists is marked slow, so the next measured run does not time it: made again, the list keeps
such entries as they were (a renamed test is caught by tests/test_ci.py). Writes the file and nothing else.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^(?P<s>\d+(?:\.\d+)?)s (?P<phase>setup|call|teardown)\s+(?P<node>tests/\S.*?)\s*$")
SUMMARY = re.compile(r"(?P<passed>\d+) passed.* in (?P<s>\d+(?:\.\d+)?)s")


def read(text: str) -> tuple[dict[str, float], str]:
    """Seconds per node id (phases summed) of the log's first durations table, and the run's summary line."""
    seconds: dict[str, float] = {}
    tables = text.split("slowest durations")
    if len(tables) < 2:
        raise SystemExit("slow_tests: no 'slowest durations' table in the log: run pytest with --durations=0")
    first = tables[1]
    for raw in first.splitlines():
        line = raw.split(" ", 1)[1] if re.match(r"^\d\d:\d\d:\d\d ", raw) else raw  # a log with time stamps
        if m := LINE.match(line.strip()):
            seconds[m["node"]] = seconds.get(m["node"], 0.0) + float(m["s"])
    summary = next((line.strip(" =") for line in first.splitlines() if SUMMARY.search(line)), "")
    if not seconds:
        raise SystemExit("slow_tests: the durations table lists no test")
    return seconds, summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", type=Path, help="the output of 'nox -s tests -- --durations=0'")
    ap.add_argument("--at-least", type=float, default=3.0, help="seconds from which a test is slow (default 3)")
    ap.add_argument("--host", required=True, help="where it was measured, in words (cores, idle or not)")
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "tests" / "slow.txt")
    args = ap.parse_args(argv)
    seconds, summary = read(args.log.read_text(errors="replace"))
    kept = {n: s for s, n in entries(args.out) if n not in seconds}  # slow already: not in this run
    slow = sorted([(s, n) for n, s in seconds.items() if s >= args.at_least] + [(s, n) for n, s in kept.items()],
                  key=lambda x: (-x[0], x[1]))
    measured = sum(s for s, n in slow if n not in kept)
    rows = [f"# The tests of 'nox -s tests' that took {args.at_least:g} s or more ({host_line(args.host, summary)}):",
            "# tests/conftest.py marks them slow. Made by tools/slow_tests.py from a --durations=0 run; do not edit.",
            f"# {len(slow) - len(kept)} of the {len(seconds)} tests the run timed (pytest hides those under 5 ms), "
            f"{measured:.0f} of its {sum(seconds.values()):.0f} worker-seconds"
            + (f"; {len(kept)} kept from before" if kept else "") + ".", *(f"{s:.2f}\t{n}" for s, n in slow)]
    args.out.write_text("\n".join(rows) + "\n")
    print(f"slow_tests: {len(slow)} test(s) of {len(seconds)} written to {args.out}", file=sys.stderr)
    return 0


def host_line(host: str, summary: str) -> str:
    return f"{host}; the run: {summary}" if summary else host


def entries(path: Path = ROOT / "tests" / "slow.txt") -> list[tuple[float, str]]:
    """(seconds, node id) of each test tests/slow.txt lists (tests/conftest.py reads the node ids)."""
    if not path.is_file():
        return []
    rows = (line.split("\t", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))
    return [(float(s), n) for s, n in rows]


if __name__ == "__main__":
    sys.exit(main())
