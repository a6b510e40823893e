#!/usr/bin/env python3
"""Check the subjects of the commits made since the convention started (docs/contributing.md).

    python3 .ci/commit_subjects.py [--base COMMIT] [--repo DIR]

Every commit after BASE (merges excepted) must have a subject of at most 72 characters, in the
imperative ("Add ...", "Fix ..."): a capital first word that is not a past tense, a gerund or a
third person ("Added", "Adding", "Adds"), and no final period. Commits up to BASE are history and
are not judged. Exit 1 naming each commit at fault; standard library only.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

# the last commit made before the convention; everything after it is checked
BASE = "83c85edb402d43e440a897bda4304efcb18a4c77"
LIMIT = 72
NOT_IMPERATIVE = re.compile(r"^[A-Z][a-z]*(ed|ing|[^su]s)$")  # Added, Adding, Adds (Address, Focus, Bias pass)


def problems(subject: str) -> list[str]:
    out = []
    if len(subject) > LIMIT:
        out.append(f"{len(subject)} characters (at most {LIMIT})")
    first = subject.split(" ", 1)[0]
    if not first[:1].isupper():
        out.append(f"starts with {first!r}: begin with a capitalized verb in the imperative ('Add', 'Fix')")
    elif NOT_IMPERATIVE.match(first) and first not in ("Embed", "Feed", "Need", "Proceed", "Seed", "Shed", "Speed",
                                                        "Bring"):
        out.append(f"{first!r} is not the imperative: write it as a command ('Add', not 'Added' or 'Adds')")
    if subject.endswith("."):
        out.append("ends with a period")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=BASE, help="the last commit not judged (default: %(default)s)")
    ap.add_argument("--repo", default=".", help="the repository (default: here)")
    args = ap.parse_args()
    have = subprocess.run(["git", "-C", args.repo, "cat-file", "-e", f"{args.base}^{{commit}}"],
                          capture_output=True)
    if have.returncode != 0:
        print(f"commit-subjects: base {args.base} is not in this clone's history (a shallow clone? fetch it "
              "whole: git fetch --unshallow)", file=sys.stderr)
        return 1
    log = subprocess.run(["git", "-C", args.repo, "log", "--no-merges", "--format=%H%x00%s", f"{args.base}..HEAD"],
                         capture_output=True, text=True, check=True).stdout
    bad = 0
    checked = 0
    for line in filter(None, log.splitlines()):
        sha, subject = line.split("\0", 1)
        checked += 1
        for why in problems(subject):
            bad += 1
            print(f"{sha[:12]} {subject!r}: {why}", file=sys.stderr)
    print(f"commit-subjects: {checked} commit(s) since {args.base[:12]}, {bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
