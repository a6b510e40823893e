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

**Ranks** (``--ranks N``, the upstream CI's processes per node): pytest runs under ``python -m
torch.distributed.run --standalone --nproc-per-node R``, R = N capped at the GPUs torch sees (a ``cpu`` lane: at
``--cpu-ranks``, over gloo), each rank writing its own junit XML (this file in ``--rank-worker`` mode). A case's
outcome is merged over the ranks that reported it: failed or error if any rank says so, passed only if every rank
that ran it passed (ranks that skipped it aside), skipped if all skipped. Ranks that disagree are listed in
``rank_disagreements``. A case declared to need more ranks than R, or a distribution the environment does not hold
(``--needs`` JSON: ``id``, ``ranks`` or ``package``, ``reason``), is not run: it goes to ``not_here`` (node id ->
why), never to ``cases``. ``environment`` records what ran: every distribution importable here (``name==version``,
sorted), the ranks, the backend and the GPU architecture; ``harness suite compare`` refuses to pair a base and a
patched receipt whose environments differ.
"""

from __future__ import annotations

import fnmatch
import json
import os
import signal
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


MERGE = {"passed": 0, "skipped": -1, "failed": 2, "error": 3}  # across ranks: a skip gives way to a pass


def merge_ranks(per_rank: list[dict[str, str]]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """(node id -> merged outcome, node id -> {rank: outcome} where the ranks disagree) from each rank's cases."""
    merged: dict[str, str] = {}
    seen: dict[str, dict[str, str]] = {}
    for rank, cases in enumerate(per_rank):
        for node, outcome in cases.items():
            seen.setdefault(node, {})[str(rank)] = outcome
            if node not in merged or MERGE.get(outcome, 3) > MERGE.get(merged[node], 3):
                merged[node] = outcome
    return merged, {n: o for n, o in seen.items() if len(set(o.values())) > 1}


def _matches(node: str, pattern: str) -> bool:
    return (node == pattern or node.startswith((pattern + "::", pattern + "[")) or fnmatch.fnmatchcase(node, pattern))


def not_here(nodes: list[str], needs: list[dict], ranks: int, have) -> dict[str, str]:
    """The collected ``nodes`` this run cannot run, node id -> why: declared (``needs``) to need more ranks than
    ``ranks`` or a distribution ``have(name)`` says is absent."""
    out: dict[str, str] = {}
    for need in needs:
        why = None
        if need.get("ranks") and int(need["ranks"]) > ranks:
            why = f"needs {need['ranks']} ranks, ran with {ranks}"
        elif need.get("package") and not have(need["package"]):
            why = f"needs {need['package']}, which this environment does not have"
        if why is None:
            continue
        why += f" ({need['reason']})" if need.get("reason") else ""
        for node in nodes:
            if node not in out and _matches(node, need["id"]):
                out[node] = why
    return out


def environment(backend: str, ranks: int, upstream_ranks: int) -> dict:
    """What this run ran with: every distribution importable here (the first on sys.path of each name, as import
    finds it), the ranks, the backend and the GPU architecture."""
    from importlib import metadata

    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name and name not in found:
            found[name] = dist.version
    arch = None
    if backend == "nccl":
        import torch

        major, minor = torch.cuda.get_device_capability(0)
        arch = f"sm_{major}{minor}"
    return {"packages": sorted(f"{n}=={v}" for n, v in found.items()), "ranks": ranks,
            "upstream_ranks": upstream_ranks, "backend": backend, "gpu_arch": arch}


def _have(name: str) -> bool:
    from importlib import metadata

    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def rank_state(state: Path | None, ranks: int, rank: int) -> Path | None:
    """A rank's own progress file (one per world size: a run at 2 ranks never resumes one at 1)."""
    return None if state is None else state.with_name(f"{state.name}.r{ranks}-{rank}")


def read_rank_states(state: Path | None, ranks: int) -> dict[str, str]:
    """Cases decided by every rank of an earlier run at the same ranks, merged as the ranks' junit XML are."""
    per_rank = [read_state(rank_state(state, ranks, r)) for r in range(ranks)]
    decided = set.intersection(*(set(c) for c in per_rank)) if per_rank else set()
    merged, _ = merge_ranks([{n: o for n, o in c.items() if n in decided} for c in per_rank])
    return merged


def rank_worker(argv: list[str]) -> int:
    """One rank under torch.distributed.run: pytest with its own junit XML (``XMLDIR/rank-<RANK>.xml``) and its
    own progress file."""
    xml_dir, pytest_args = argv[0], argv[argv.index("--") + 1:]
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    state = os.environ.get(STATE_ENV)
    if state:
        os.environ[STATE_ENV] = str(rank_state(Path(state), world, rank))
    if os.environ.get("CUDA_VISIBLE_DEVICES") != "":  # each rank on its own GPU, as Megatron's Utils sets it
        import torch

        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    import pytest

    return int(pytest.main(["-p", "no:cacheprovider", "-o", "junit_family=xunit1",
                            f"--junitxml={Path(xml_dir) / f'rank-{rank}.xml'}", *pytest_args]))


def run_ranks(root: Path, ranks: int, pytest_args: list[str], xml_dir: Path, budget_s: int,
              env: dict[str, str]) -> tuple[int | None, str | None]:
    """pytest under torch.distributed.run at ``ranks`` processes, in its own process group, echoing its output;
    (exit code or None on timeout, the last summary line a rank printed)."""
    import threading

    from upstream_tests import SUMMARY

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
           str(Path(__file__).resolve()), "--rank-worker", str(xml_dir), "--", "--rootdir", str(root), *pytest_args]
    print("+ " + " ".join(cmd[1:]), flush=True)
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True, env=env)
    summary, fired = None, []

    def kill() -> None:
        fired.append(True)
        os.killpg(proc.pid, signal.SIGKILL)

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
    return (None if fired else code), summary


def world(requires: str, upstream_ranks: int, cpu_ranks: int) -> tuple[int, str]:
    """(ranks, backend): the upstream's ranks capped at the GPUs torch sees; a CPU lane at ``cpu_ranks`` (gloo)."""
    if requires == "cuda":
        import torch

        return max(1, min(upstream_ranks, torch.cuda.device_count())), "nccl"
    return max(1, min(upstream_ranks, cpu_ranks or 1)), "gloo"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--rank-worker":
        return rank_worker(sys.argv[2:])
    p = parser(__doc__)
    p.add_argument("--distribution", required=True, help="the target's distribution, for the host stamp")
    p.add_argument("--module", required=True, help="the target's import name, for the host stamp")
    p.add_argument("--requires", choices=("cuda", "cpu"), default="cpu")
    p.add_argument("--timeout", type=int, default=600, help="seconds collection and pytest may run together")
    p.add_argument("--tests-tree", help="the harness's key of the test tree (which series the tests came from)")
    p.add_argument("--shard", default="1/1", help="I/N: run part I of N of the collected cases")
    p.add_argument("--deselect", action="append", default=[], metavar="ID", help="an id excluded with a reason")
    p.add_argument("--ranks", type=int, default=0,
                   help="the upstream CI's processes per node: run under torch.distributed.run at that many, capped")
    p.add_argument("--cpu-ranks", type=int, default=0, help="gloo ranks a CPU run may use (with --ranks)")
    p.add_argument("--needs", default="[]", help="JSON list of {id, ranks or package, reason}: may not run here")
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
    ranks, backend = world(args.requires, args.ranks, args.cpu_ranks) if args.ranks else (1, "")
    skipped_here = not_here(nodes, json.loads(args.needs), ranks, _have)
    # what is left for the run: the runner itself ends within --timeout, so the harness's kernel cache is sealed
    budget = max(10, int(args.timeout - (time.monotonic() - began)))
    mine = shard_of(nodes, int(index), int(count))
    details = {"shard": args.shard, "collected": len(nodes), "collection_errors": errors,
               "collect_exit": collect_exit, "deselected": args.deselect, "selected": args.ids,
               "tests_tree": args.tests_tree}
    if args.ranks:
        details["environment"] = environment(backend, ranks, args.ranks)
        details["not_here"] = {n: why for n, why in skipped_here.items() if n in set(mine)}
        mine = [n for n in mine if n not in skipped_here]
    cases = {f: "error" for f in errors} if int(index) == 1 else {}  # a file that does not collect: once
    state = Path(os.environ[STATE_ENV]) if os.environ.get(STATE_ENV) else None
    earlier = {n: o for n, o in (read_rank_states(state, ranks) if args.ranks else read_state(state)).items()
               if n in set(mine)}
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
            if args.ranks:
                env = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": ""} if backend == "gloo" else {}))
                pytest_exit, summary = run_ranks(root, ranks, [*plugin, f"@{listing}"], Path(tmp), budget, env)
                per_rank, problems = [], []
                for r in range(ranks):
                    path = Path(tmp) / f"rank-{r}.xml"
                    got, trouble = read_junit(path) if path.is_file() else ({}, [f"rank {r} wrote no junit XML"])
                    per_rank.append(got)
                    problems += [f"rank {r}: {t}" for t in trouble]
                found, disagree = merge_ranks(per_rank)
                details["rank_disagreements"] = disagree
                if pytest_exit is not None and any(p.startswith("rank ") and "no junit" in p for p in problems):
                    pytest_exit = -1  # a rank that never finished: torch.distributed.run's exit 1 says no more
            else:
                pytest_exit, summary = run_pytest(root, [*plugin, f"@{listing}"], xml, budget)
                found, problems = read_junit(xml) if xml.is_file() else ({}, ["pytest wrote no junit XML"])
        details["problems"] = problems
        if pytest_exit is None:  # killed at its budget: what the plugin saw before is still worth keeping
            saw = read_rank_states(state, ranks) if args.ranks else read_state(state)
            found = {**{n: o for n, o in saw.items() if n in set(todo)}, **found}
    cases.update({node: earlier.get(node) or found.get(node, "not run") for node in mine})
    incomplete = pytest_exit not in (0, 1) or collect_exit not in (0, 1, 2, 5)
    verdict("UPSTREAM_SUITE_INCOMPLETE" if incomplete else "UPSTREAM_SUITE_RECORDED", cases=cases,
            summary=summary, pytest_exit=pytest_exit, shard_cases=len(mine), **details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
