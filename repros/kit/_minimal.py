"""Runs a minimal reproducer as a lane, unchanged.

A minimal reproducer is the plain script an issue shows (``python repro.py``): upstream's public API
and torch only, printing what it expected and what it got, exiting 1 while the bug shows and 0 when it
does not. This kit prints the host stamp, runs the script with this interpreter, passes its output
through, and reports its exit status as the sentinel that fits the build: 1 -> BUG_REPRODUCED (unpatched)
or FIX_FAILED (patched), 0 -> BUG_ABSENT or FIX_VALIDATED. Any other status is a crash: no sentinel,
the script's own status is this process's.

    HARNESS_PATCHED=0 python repros/kit/_minimal.py SCRIPT --distribution megatron-core --module megatron.core
"""

from __future__ import annotations

import subprocess
import sys

from _lane import observed, parser, start


def main() -> int:
    p = parser(__doc__)
    p.add_argument("script", help="the minimal reproducer, run unchanged")
    p.add_argument("--distribution", required=True, help="the package under test, for the stamp")
    p.add_argument("--module", required=True, help="its import name, for the stamp")
    args = p.parse_args()
    start(args, args.distribution, args.module)
    done = subprocess.run([sys.executable, args.script], capture_output=True, text=True)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    sys.stdout.flush()
    if done.returncode not in (0, 1):
        print(f"{args.script} exited {done.returncode}: neither 0 (no bug) nor 1 (the bug shows)", file=sys.stderr)
        return done.returncode or 2
    said = {}
    for line in done.stdout.splitlines():
        key, sep, text = line.partition(": ")
        if sep and key in ("expected", "got"):
            said[key] = text.strip()
    observed(done.returncode == 1, **said)
    return 0


if __name__ == "__main__":
    sys.exit(main())
