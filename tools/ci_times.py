"""Read the times out of a `bash .ci/run` log into a benchmark record (issue 49: CI and `nox -s tests` cold).

    bash .ci/run 2>&1 | tee ci.log
    python tools/ci_times.py ci.log --host "2-core, idle" -o bench/results/<date>-cpu-2core-ci

Every figure comes from the log's own lines: `ci: step NAME: N s (total T s)` (what .ci/run prints per step),
`nox > SESSION: harness exit N (NAME) in S s` (a pack session) and `nox > Session NAME was successful in S
seconds` (the other sessions). Writes OUT.json (schema 1) and OUT.txt (the same as a table), nothing else.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

STEP = re.compile(r"ci: step (?P<name>\S+): (?P<s>\d+) s \(total (?P<total>\d+) s\)")
PACK = re.compile(r"nox > (?P<name>\S+): harness exit (?P<code>\d+) \((?P<exit>\w+)\) in (?P<s>\d+) s")
SESSION = re.compile(r"nox > Session (?P<name>\S+) was successful in (?:(?P<m>\d+) minutes? )?(?P<s>\d+) seconds")
DONE = re.compile(r"ci: all steps passed in (?P<s>\d+) s")


def read(text: str) -> dict:
    steps, sessions = [], []
    total = None
    for line in text.splitlines():
        if m := STEP.search(line):
            steps.append({"step": m["name"], "seconds": int(m["s"]), "total_s": int(m["total"])})
        elif m := PACK.search(line):
            sessions.append({"session": m["name"], "seconds": int(m["s"]), "exit": m["exit"]})
        elif m := SESSION.search(line):
            sessions.append({"session": m["name"], "seconds": int(m["m"] or 0) * 60 + int(m["s"]), "exit": "OK"})
        elif m := DONE.search(line):
            total = int(m["s"])
    if not steps:
        raise SystemExit("ci_times: no 'ci: step NAME: N s' line in the log: is it the output of .ci/run?")
    return {"steps": steps, "sessions": sessions, "passed": total is not None,
            "total_s": total if total is not None else steps[-1]["total_s"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", type=Path, help="the output of bash .ci/run (stdout and stderr)")
    ap.add_argument("--host", required=True, help="the machine, in words (cores, idle or not)")
    ap.add_argument("--commit", default=None, help="the commit CI ran on")
    ap.add_argument("--note", default=None, help="anything else a reader needs (what else ran meanwhile)")
    ap.add_argument("-o", "--out", type=Path, required=True, help="OUT: writes OUT.json and OUT.txt")
    args = ap.parse_args(argv)
    record = {"schema": 1, "what": "bash .ci/run on a fresh clone", "host": args.host, "commit": args.commit,
              "note": args.note, **read(args.log.read_text(errors="replace"))}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    rows = [f"# {record['what']} -- {args.host}" + (f", commit {args.commit}" if args.commit else ""),
            *([f"# {args.note}"] if args.note else []),
            f"# all steps passed: {record['passed']}; total {record['total_s']} s", "", "step\tseconds"]
    rows += [f"{s['step']}\t{s['seconds']}" for s in record["steps"]]
    rows += ["", "session\tseconds\texit"]
    rows += [f"{s['session']}\t{s['seconds']}\t{s['exit']}" for s in record["sessions"]]
    args.out.with_suffix(".txt").write_text("\n".join(rows) + "\n")
    print(args.out.with_suffix(".json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
