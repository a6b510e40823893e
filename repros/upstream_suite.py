"""Run one shard of a pack's upstream suite against the lane's build and record every case's outcome.

The harness starts this runner for a suite lane (``[[packs.NN.suites]]``, docs/upstream-tests.md): the test
tree (the base with the pack's series applied) is ``HARNESS_UPSTREAM_TESTS_ROOT``, the build is on
``PYTHONPATH``. The runner

1. collects the selected files and ids (``pytest --collect-only -q``, with the recorded exclusions as
   ``--deselect``); a file that fails to collect is a case of its own, outcome ``error``;
2. takes its shard: the collected node ids in collection order, cut into N contiguous parts (neighbouring
   parametrisations share compiled kernels), part I;
3. runs those ids with ``--junitxml`` and reads each case's outcome from it (the junit parsing of
   ``repros/upstream_tests.py``); an id of the shard that pytest never reported is ``not run``;
4. prints one sentinel: ``UPSTREAM_SUITE_RECORDED`` when pytest ran the shard to its end (exit 0 or 1),
   ``UPSTREAM_SUITE_INCOMPLETE`` otherwise (budget, usage error, no junit XML). Failures are not judged here:
   the verdict compares the base's outcomes with the patched build's (``harness suite compare``).

The sentinel's details hold ``cases`` (node id -> outcome, this shard), ``collected`` (cases of the whole
selection), ``shard``, ``collection_errors``, ``deselected``, pytest's ``summary`` and ``pytest_exit``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _lane import parser, skip, start
from upstream_tests import ROOT_ENV, read_junit, run_pytest

VERDICTS = ("UPSTREAM_SUITE_RECORDED", "UPSTREAM_SUITE_INCOMPLETE")


def verdict(sentinel: str, **details) -> None:
    assert sentinel in VERDICTS, sentinel
    print(f"{sentinel} {json.dumps(details, sort_keys=True, default=str)}", flush=True)


def collect(root: Path, ids: list[str], deselect: list[str], budget_s: int) -> tuple[list[str], list[str], int]:
    """(node ids in collection order, files that failed to collect, pytest's exit code)."""
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "--rootdir", str(root),
           *[a for d in deselect for a in ("--deselect", d)], *ids]
    print("+ " + " ".join(cmd[1:]), flush=True)
    try:
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, errors="replace", timeout=budget_s)
    except subprocess.TimeoutExpired:
        return [], ["collection: ran past its budget"], -1
    sys.stdout.write(proc.stdout[-20000:])
    nodes, errors = [], []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if "::" in line and not line.startswith(("ERROR", "FAILED", "=")) and " " not in line.split("::", 1)[0]:
            nodes.append(line)
        elif line.startswith("ERROR ") and ".py" in line:
            errors.append(line[6:].split(" ", 1)[0])
    return nodes, sorted(set(errors)), proc.returncode


def shard_of(nodes: list[str], index: int, count: int) -> list[str]:
    """Part ``index`` (1-based) of ``count`` contiguous parts of ``nodes``."""
    lo, hi = (index - 1) * len(nodes) // count, index * len(nodes) // count
    return nodes[lo:hi]


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--distribution", required=True, help="the target's distribution, for the host stamp")
    p.add_argument("--module", required=True, help="the target's import name, for the host stamp")
    p.add_argument("--requires", choices=("cuda", "cpu"), default="cpu")
    p.add_argument("--timeout", type=int, default=600, help="seconds collection and pytest may run together")
    p.add_argument("--tests-tree", help="the harness's key of the test tree (which series the tests came from)")
    p.add_argument("--shard", default="1/1", help="I/N: run part I of N of the collected cases")
    p.add_argument("--deselect", action="append", default=[], metavar="ID", help="an id excluded with a reason")
    p.add_argument("ids", nargs="+", help="test files and node ids, relative to the upstream root")
    args = p.parse_args()
    start(args, args.distribution, args.module)
    index, _, count = args.shard.partition("/")
    if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise SystemExit(f"--shard {args.shard}: expected I/N with 1 <= I <= N")
    if args.requires == "cuda":
        import torch

        if not torch.cuda.is_available():
            skip("the suite lane needs a CUDA device")
    root = Path(os.environ.get(ROOT_ENV, ""))
    if not (root / args.ids[0].split("::")[0]).is_file():
        raise SystemExit(f"{ROOT_ENV}={root!s}: not an upstream test tree holding {args.ids[0]}")
    budget = args.timeout
    nodes, errors, collect_exit = collect(root, args.ids, args.deselect, max(30, budget // 3))
    mine = shard_of(nodes, int(index), int(count))
    details = {"shard": args.shard, "collected": len(nodes), "collection_errors": errors,
               "collect_exit": collect_exit, "deselected": args.deselect, "selected": args.ids,
               "tests_tree": args.tests_tree}
    cases = {f: "error" for f in errors} if int(index) == 1 else {}  # a file that does not collect: once
    pytest_exit, summary = 0, None
    if mine:
        with tempfile.TemporaryDirectory(prefix="upstream-suite-") as tmp:
            xml = Path(tmp) / "junit.xml"
            listing = Path(tmp) / "ids.txt"  # many ids: passed through a file, not the command line
            listing.write_text("\n".join(mine) + "\n")
            pytest_exit, summary = run_pytest(root, [f"@{listing}"], xml, budget)
            found, problems = read_junit(xml) if xml.is_file() else ({}, ["pytest wrote no junit XML"])
        cases.update({node: found.get(node, "not run") for node in mine})
        details["problems"] = problems
    incomplete = pytest_exit not in (0, 1) or collect_exit not in (0, 1, 2, 5)
    verdict("UPSTREAM_SUITE_INCOMPLETE" if incomplete else "UPSTREAM_SUITE_RECORDED", cases=cases,
            summary=summary, pytest_exit=pytest_exit, shard_cases=len(mine), **details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
