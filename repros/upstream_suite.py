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
   Each case's start and outcome are also appended to ``HARNESS_SUITE_STATE`` (a JSON-lines file the harness
   keeps per lane, test tree and build) by this module loaded as a pytest plugin, so a run killed midway
   resumes: a case decided earlier is not run again, a case that started and never ended is ``timed out``
   (a hang is not retried forever);
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
import time
from pathlib import Path

from _lane import parser, skip, start
from upstream_tests import ROOT_ENV, read_junit, run_pytest

VERDICTS = ("UPSTREAM_SUITE_RECORDED", "UPSTREAM_SUITE_INCOMPLETE")
STATE_ENV = "HARNESS_SUITE_STATE"


def _record(entry: dict) -> None:
    path = os.environ.get(STATE_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def pytest_runtest_logstart(nodeid, location) -> None:  # the plugin half: loaded by pytest with -p upstream_suite
    _record({"id": nodeid, "started": True})


def pytest_runtest_logreport(report) -> None:
    if report.when == "call" or report.outcome != "passed":
        outcome = {"passed": "passed", "skipped": "skipped"}.get(report.outcome,
                                                                 "failed" if report.when == "call" else "error")
        _record({"id": report.nodeid, "outcome": outcome, "when": report.when})
    elif report.when == "teardown":
        _record({"id": report.nodeid, "done": True})


RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def read_state(path: Path | None) -> dict[str, str]:
    """Cases decided by earlier runs of this lane: node id -> outcome (the worst seen). A case that started and
    never finished in two runs is "timed out" (a hang); after one such run it is run again (the run may have
    been stopped from outside while the case was merely slow)."""
    if path is None or not path.is_file():
        return {}
    out: dict[str, str] = {}
    starts: dict[str, int] = {}
    finished: set[str] = set()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill
        node = entry.get("id")
        if not isinstance(node, str):
            continue
        if entry.get("started"):
            starts[node] = starts.get(node, 0) + 1
        if entry.get("done") or entry.get("when") == "teardown":
            finished.add(node)
        outcome = entry.get("outcome")
        if outcome in RANK:
            if outcome in ("failed", "error", "skipped") and entry.get("when") in ("setup", "call"):
                finished.add(node)
            if RANK[outcome] >= RANK.get(out.get(node, "passed"), 0):
                out[node] = outcome
    for node, count in starts.items():
        if node not in finished and count >= 2:
            out[node] = "timed out"
    return {n: o for n, o in out.items() if n in finished or o == "timed out"}


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
    began = time.monotonic()
    nodes, errors, collect_exit = collect(root, args.ids, args.deselect, max(30, args.timeout // 3))
    # what is left for the run: the runner itself ends within --timeout, so the harness's kernel cache is sealed
    budget = max(10, int(args.timeout - (time.monotonic() - began)))
    mine = shard_of(nodes, int(index), int(count))
    details = {"shard": args.shard, "collected": len(nodes), "collection_errors": errors,
               "collect_exit": collect_exit, "deselected": args.deselect, "selected": args.ids,
               "tests_tree": args.tests_tree}
    cases = {f: "error" for f in errors} if int(index) == 1 else {}  # a file that does not collect: once
    state = Path(os.environ[STATE_ENV]) if os.environ.get(STATE_ENV) else None
    earlier = {n: o for n, o in read_state(state).items() if n in set(mine)}
    todo = [n for n in mine if n not in earlier]
    details["resumed"] = len(earlier)
    pytest_exit, summary = 0, None
    found: dict[str, str] = {}
    if todo:
        with tempfile.TemporaryDirectory(prefix="upstream-suite-") as tmp:
            xml = Path(tmp) / "junit.xml"
            listing = Path(tmp) / "ids.txt"  # many ids: passed through a file, not the command line
            listing.write_text("\n".join(todo) + "\n")
            plugin = ["-p", "upstream_suite"] if state is not None else []
            pytest_exit, summary = run_pytest(root, [*plugin, f"@{listing}"], xml, budget)
            found, problems = read_junit(xml) if xml.is_file() else ({}, ["pytest wrote no junit XML"])
        details["problems"] = problems
        if pytest_exit is None:  # killed at its budget: what the plugin saw before is still worth keeping
            found = {**{n: o for n, o in read_state(state).items() if n in set(todo)}, **found}
    cases.update({node: earlier.get(node) or found.get(node, "not run") for node in mine})
    incomplete = pytest_exit not in (0, 1) or collect_exit not in (0, 1, 2, 5)
    verdict("UPSTREAM_SUITE_INCOMPLETE" if incomplete else "UPSTREAM_SUITE_RECORDED", cases=cases,
            summary=summary, pytest_exit=pytest_exit, shard_cases=len(mine), **details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
