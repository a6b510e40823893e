"""Run chosen upstream pytest ids against the lane's build and report them in the lane protocol.

The harness starts this runner for a lane with ``upstream_tests`` (see docs/upstream-tests.md): the
upstream's test tree (with the pack's series applied on a patched lane) is ``HARNESS_UPSTREAM_TESTS_ROOT``,
the build is on ``PYTHONPATH``. The runner stamps the host, runs ``python -m pytest`` on exactly the ids
after ``--``, reads each id's outcome from pytest's ``--junitxml`` file (never from the terminal), and
prints one sentinel:

* ``UPSTREAM_TESTS_PASSED``: every id ran and passed (no id is expected to fail);
* ``UPSTREAM_TESTS_FAILED_AS_EXPECTED``: the ids given with ``--expect-failed`` failed, every other id passed;
* ``UPSTREAM_TESTS_UNEXPECTED``: anything else. A skip is never a pass; an id that pytest did not run (not
  found, not collected, a collection error), an error in a fixture, an expected failure that passed, or
  pytest stopping on its own (usage error, interrupted, time budget) all land here.

Each id's outcome is also a ``FIGURE upstream_test`` line; the sentinel's details hold the ids as selected,
the outcome of each, the outcome of every test case pytest reported, and pytest's own summary line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from _lane import figure, parser, skip, start

VERDICTS = ("UPSTREAM_TESTS_PASSED", "UPSTREAM_TESTS_FAILED_AS_EXPECTED", "UPSTREAM_TESTS_UNEXPECTED")


def verdict(sentinel: str, **details) -> None:
    """Print the verdict line (the runner's sentinels are the harness's, harness/upstream_tests.py SENTINELS)."""
    assert sentinel in VERDICTS, sentinel
    print(f"{sentinel} {json.dumps(details, sort_keys=True, default=str)}", flush=True)

RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}  # a selected id that matches several cases: the worst
SUMMARY = re.compile(r"^=+ (.+ in [0-9.]+s.*) =+$")
ROOT_ENV = "HARNESS_UPSTREAM_TESTS_ROOT"


def node_id(case: ET.Element) -> str | None:
    """The pytest node id of one xunit1 ``testcase`` (its ``file``, the class path, its ``name``)."""
    path, name, classname = case.get("file"), case.get("name"), case.get("classname") or ""
    if not path or not name:
        return None
    module = path[:-3].replace("/", ".") if path.endswith(".py") else path
    rest = classname[len(module) + 1:] if classname.startswith(module + ".") else ""
    return "::".join([path, *[p for p in rest.split(".") if p], name])


def case_outcome(case: ET.Element) -> str:
    tags = {child.tag for child in case}
    if "error" in tags:
        return "error"
    if "failure" in tags:
        return "failed"
    if "skipped" in tags:
        return "skipped"
    return "passed"


def read_junit(path: Path) -> tuple[dict[str, str], list[str]]:
    """(node id -> outcome, collection problems) from pytest's junit XML."""
    cases: dict[str, str] = {}
    problems: list[str] = []
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        node = node_id(case)
        outcome = case_outcome(case)
        if node is None:  # a collection error is a testcase without a file
            problems.append(f"{case.get('classname', '')} {case.get('name', '')}: {outcome}".strip())
            continue
        if RANK[outcome] >= RANK.get(cases.get(node, "passed"), 0):
            cases[node] = outcome
    return cases, problems


def selected_outcome(node: str, cases: dict[str, str]) -> str:
    """The outcome of one selected id: the worst of the cases it selects, or 'not run'."""
    found = [o for case, o in cases.items() if case == node or case.startswith((node + "[", node + "::"))]
    return max(found, key=RANK.__getitem__) if found else "not run"


def judge(ids: list[str], expect_failed: list[str], outcomes: dict[str, str], pytest_exit: int | None,
          problems: list[str]) -> tuple[str, list[str]]:
    """The sentinel for these outcomes and the reasons it is not the expected one."""
    reasons = [f"{node}: {outcomes[node]}, expected "
               + ("failed" if node in expect_failed else "passed")
               for node in ids if outcomes[node] != ("failed" if node in expect_failed else "passed")]
    reasons += [f"collection: {p}" for p in problems]
    if pytest_exit not in (0, 1):  # 1: some tests failed; anything else is pytest not running them as asked
        reasons.append(f"pytest exited with {pytest_exit}")
    if reasons:
        return "UPSTREAM_TESTS_UNEXPECTED", reasons
    return ("UPSTREAM_TESTS_FAILED_AS_EXPECTED" if expect_failed else "UPSTREAM_TESTS_PASSED"), []


def run_pytest(root: Path, ids: list[str], xml: Path, budget_s: int) -> tuple[int | None, str | None]:
    """Run pytest in its own process group, echoing its output; (exit code or None on timeout, summary line)."""
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "junit_family=xunit1",
           f"--junitxml={xml}", "--rootdir", str(root), *ids]
    print("+ " + " ".join(cmd[1:]), flush=True)
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    summary = None
    timer_fired = []

    def kill() -> None:
        timer_fired.append(True)
        os.killpg(proc.pid, signal.SIGKILL)

    import threading

    timer = threading.Timer(budget_s, kill)
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            match = SUMMARY.match(line.strip())
            if match:
                summary = match.group(1)
        code = proc.wait()
    finally:
        timer.cancel()
    sys.stdout.flush()
    return (None if timer_fired else code), summary


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--distribution", required=True, help="the target's distribution, for the host stamp")
    p.add_argument("--module", required=True, help="the target's import name, for the host stamp")
    p.add_argument("--requires", choices=("cuda", "cpu"), default="cpu")
    p.add_argument("--timeout", type=int, default=600, help="seconds pytest may run")
    p.add_argument("--expect-failed", action="append", default=[], metavar="ID")
    p.add_argument("--tests-tree", help="the harness's key of the test tree (which series the tests came from)")
    p.add_argument("ids", nargs="+", help="pytest node ids, relative to the upstream root")
    args = p.parse_args()
    start(args, args.distribution, args.module)
    if args.requires == "cuda":
        import torch

        if not torch.cuda.is_available():
            skip("the lane's upstream tests need a CUDA device")
    unknown = [node for node in args.expect_failed if node not in args.ids]
    if unknown:
        raise SystemExit(f"--expect-failed {unknown[0]} is not one of the selected ids")
    root = Path(os.environ.get(ROOT_ENV, ""))
    if not (root / args.ids[0].split("::")[0]).is_file():
        raise SystemExit(f"{ROOT_ENV}={root!s}: not an upstream test tree holding {args.ids[0]}")
    with tempfile.TemporaryDirectory(prefix="upstream-tests-") as tmp:
        xml = Path(tmp) / "junit.xml"
        pytest_exit, summary = run_pytest(root, args.ids, xml, args.timeout)
        cases, problems = read_junit(xml) if xml.is_file() else ({}, ["pytest wrote no junit XML"])
    outcomes = {node: selected_outcome(node, cases) for node in args.ids}
    for node in args.ids:
        figure("upstream_test", outcomes[node], None, id=node, expected="failed" if node in args.expect_failed
               else "passed")
    sentinel, reasons = judge(args.ids, args.expect_failed, outcomes, pytest_exit, problems)
    if pytest_exit is None:
        reasons.append(f"pytest ran past its budget of {args.timeout} s and was killed")
        sentinel = "UPSTREAM_TESTS_UNEXPECTED"
    verdict(sentinel, selected=args.ids, expect_failed=args.expect_failed, outcomes=outcomes, cases=cases,
            summary=summary, pytest_exit=pytest_exit, reasons=reasons, tests_tree=args.tests_tree)
    return 0


if __name__ == "__main__":
    sys.exit(main())
