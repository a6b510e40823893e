"""Many lanes of many packs on one host at once: the runner of ``harness sweep``.

The sweep is four modules, each a step: ``sweep_plan`` turns the selected lanes into tasks (data, schema
``PLAN_SCHEMA``, so another engine can run them instead: docs/sweep.md); ``sweep_schedule`` knows the host's GPUs
and CPU slots and places ready jobs on them (a pure function); ``sweep_estimate`` replays the scheduler over the
lanes' recorded durations without running anything; this module runs the plan.

``run`` starts each task as a child process (``python -m harness run ...``) in its own process group, with
``CUDA_VISIBLE_DEVICES`` set to the GPUs it was given; a GPU task is first prepared (built and import-checked)
by a child that holds no GPU, so builds overlap other tasks' GPU time. One child's failure never stops the
others; Ctrl-C or SIGTERM ends every child (each cleans up as a single run does) and removes the sweep's own
scratch directory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from harness.base import guard, ui
from harness.errors import Exit, HarnessError, worst
from harness.host.sweep_estimate import by_length
from harness.host.sweep_plan import Plan, Task
from harness.host.sweep_schedule import Free, GpuUse, Host, Job, Need, fits_host, schedule
from harness.lane import receipts, runs
from harness.lane.lanes import sweep_stale_temp

RESULT_SCHEMA = 1
STOP_GRACE_S = 30.0  # how long a child may take to clean up after SIGTERM before its group is killed
HEARTBEAT_S = ui.HEARTBEAT_S


# ---------------------------------------------------------------------------------------------- running

@dataclass
class LaneOutcome:
    pack: str
    lane: str
    task: int
    verdict: str  # a receipt's verdict, "skipped", "current" (not run: its receipt counts), "error", "not-run"
    exit: Exit
    reason: str
    receipt: str | None = None
    gpus: tuple[str, ...] = ()
    started: str | None = None  # the task's run: UTC ISO times
    ended: str | None = None
    duration_s: float | None = None
    reproducer_started: str | None = None  # from the receipt
    reproducer_s: float | None = None

    def as_json(self) -> dict:
        return {"pack": self.pack, "lane": self.lane, "task": self.task, "verdict": self.verdict,
                "exit": int(self.exit), "exit_name": self.exit.name, "reason": self.reason, "receipt": self.receipt,
                "gpus": list(self.gpus), "started": self.started, "ended": self.ended, "duration_s": self.duration_s,
                "reproducer_started": self.reproducer_started, "reproducer_s": self.reproducer_s}


@dataclass
class TaskRecord:
    task: Task
    phase: str = "waiting"  # waiting, prepare, run, done
    gpus: tuple[str, ...] = ()
    started: float | None = None  # wall clock of the run phase
    ended: float | None = None
    prepare_s: float | None = None


@dataclass
class Result:
    host: Host
    plan: Plan
    lanes: list[LaneOutcome]
    tasks: list[TaskRecord]
    started: float
    ended: float
    stopped: str | None = None  # "interrupted" / "terminated" when a signal ended the sweep

    @property
    def exit(self) -> Exit:
        return worst(o.exit for o in self.lanes)

    def as_json(self) -> dict:
        return {"schema": RESULT_SCHEMA, "exit": int(self.exit), "exit_name": self.exit.name,
                "started": _iso(self.started), "ended": _iso(self.ended),
                "wall_s": round(self.ended - self.started, 3), "stopped": self.stopped, "host": self.host.as_json(),
                "tasks": [{"index": r.task.index, "pack": r.task.pack, "lanes": list(r.task.lanes),
                           "gpus": list(r.gpus), "state": r.task.state, "prepare_s": r.prepare_s,
                           "started": _iso(r.started), "ended": _iso(r.ended),
                           "duration_s": round(r.ended - r.started, 3) if r.started and r.ended else None}
                          for r in self.tasks],
                "lanes": [o.as_json() for o in self.lanes]}


@dataclass(frozen=True)
class ChildSpec:
    """How to start a child harness: its interpreter per target and the options every child gets."""

    python: Callable[[str], str]  # target -> the interpreter whose harness runs its lanes
    options: tuple[str, ...]  # --root, --cache, --receipts-dir, ... (after the command's own arguments)
    env: dict[str, str] = field(default_factory=dict)


class _Child:
    def __init__(self, record: TaskRecord, phase: str, argv: list[str], env: dict[str, str], log: Path,
                 result: Path | None):
        self.record, self.phase, self.log, self.result = record, phase, log, result
        self.started = time.time()
        with open(log, "wb") as fh:
            # guarded: a sweep killed outright (SIGKILL) takes its children down with it
            self.proc = guard.popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT)

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is not None:
            self._wait_group()
            guard.release(self.proc)
        return code

    def stop(self) -> None:
        """SIGTERM to the child's group (the harness cleans up as a single run does), then SIGKILL after the grace."""
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass

    def _wait_group(self, within: float = STOP_GRACE_S) -> None:
        """The guard has ended; wait until nothing of its group (the child harness) is left, killing it late."""
        deadline = time.time() + within
        while guard.group_alive(self.proc.pid):
            if time.time() > deadline:
                guard.kill_pgid(self.proc.pid)
                break
            time.sleep(0.05)


def _iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


def _error_line(log: Path) -> str:
    """The child's own one-line error (``harness: error: ...``), else its last line."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no output"
    errors = [ln for ln in lines if ln.startswith("harness: error:") or ln.startswith("harness: internal error:")]
    return (errors or lines or ["no output"])[-1].removeprefix("harness: ")


def _exit_of(code: int) -> Exit:
    """A child's exit status as an exit code; one killed by a signal (the OOM killer) is INTERNAL."""
    return Exit(code) if code in {int(c) for c in Exit} else Exit.INTERNAL


def _killed(code: int) -> str:
    return f"the child harness was killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"


SCRATCH_PREFIX = "patchlane-sweep-"  # + the sweep's pid: a later sweep removes those of sweeps that are gone


def run(plan: Plan, host: Host, spec: ChildSpec, root: Path, scratch_parent: Path | None = None,
        durations: dict[int, float | None] | None = None) -> Result:
    """Run the plan's tasks that are to run, concurrently; every task ends with a result, whatever its neighbours do.

    With ``durations`` (``recorded_durations``) tasks are offered to the scheduler longest first (``by_length``),
    so the longest do not start last; without, in plan order.

    Ctrl-C / SIGTERM (raised here as KeyboardInterrupt / ``errors.Terminated`` by the error handler) stop every
    child and remove the sweep's scratch directory before the exception goes on.
    """
    t0 = time.time()
    records = [TaskRecord(t) for t in plan.tasks]
    outcomes: dict[int, list[LaneOutcome]] = {}
    for r in records:
        if r.task.state == "current":
            r.phase = "done"
            outcomes[r.task.index] = [LaneOutcome(r.task.pack, lane, r.task.index, "current", Exit.OK,
                                                  "latest receipt passed and is current (--rerun runs it again)")
                                      for lane in r.task.lanes]
    order = {t.index: i for i, t in enumerate(by_length(plan.tasks, durations))} if durations is not None else {}
    todo = sorted((r for r in records if r.phase == "waiting"), key=lambda r: order.get(r.task.index, 0))
    total = len(todo)
    free = Free(host.jobs, [GpuUse(g.id, g.memory_gib) for g in host.gpus])
    for stale in sweep_stale_temp(scratch_parent, (SCRATCH_PREFIX,)):  # of sweeps killed outright
        ui.info(f"removed {stale}, left by a sweep that was killed")
    scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=scratch_parent))
    children: list[_Child] = []
    held: dict[int, tuple[Need, tuple[str, ...]]] = {}
    done = 0
    stopped = None
    last_beat = time.time()
    if not todo:
        ui.info("every selected lane has a current passing receipt: nothing to run (--rerun runs them again)")

    def start(rec: TaskRecord, phase: str, ids: tuple[str, ...]) -> None:
        task = rec.task
        verb = "prepare" if phase == "prepare" else "run"
        argv = [spec.python(task.target), "-m", "harness", "-q", verb, task.pack,
                *(a for lane in task.lanes for a in ("--lane", lane))]
        result = None
        if phase == "run":
            result = scratch / f"task-{task.index}.json"
            argv += ["--result-file", str(result)]
        argv += list(spec.options) if phase == "run" else [o for o in _prepare_options(spec.options)]
        env = dict(os.environ) | spec.env
        env["CUDA_VISIBLE_DEVICES"] = ",".join(ids)  # none for a CPU task or a prepare step: never a GPU by chance
        rec.phase, rec.gpus = phase, ids
        if phase == "run":
            rec.started = time.time()
        children.append(_Child(rec, phase, argv, env, scratch / f"task-{task.index}-{phase}.log", result))
        where = f" on GPU {','.join(ids)}" if ids else ""
        ui.info(f"{'prepare' if phase == 'prepare' else 'start'} {task.label}{where}")

    def finish(child: _Child, code: int) -> None:
        nonlocal done
        rec, task = child.record, child.record.task
        if child.phase == "prepare":
            rec.prepare_s = round(time.time() - child.started, 3)
            if code == 0:
                rec.phase = "waiting-run"
                return
            outcomes[task.index] = [LaneOutcome(task.pack, lane, task.index, "error", _exit_of(code),
                                                f"prepare failed: {_error_line(child.log)}") for lane in task.lanes]
        else:
            rec.ended = time.time()
            outcomes[task.index] = _read_result(task, code, child, rec, root)
        rec.phase = "done"
        done += 1
        verdicts = ", ".join(f"{o.lane}: {o.verdict}" for o in outcomes[task.index])
        took = f" ({rec.ended - rec.started:.1f} s)" if rec.started and rec.ended else ""
        ui.info(f"[{done}/{total}] done {task.pack}: {verdicts}{took}")

    try:
        # a GPU task the host can never hold: prepared (built, import-checked) like a single run, then skipped
        host_gpus = [GpuUse(g.id, g.memory_gib) for g in host.gpus]
        while any(r.phase != "done" for r in todo):
            ready: list[Job] = []
            for r in todo:
                if r.phase == "waiting":
                    ready.append(Job(f"{r.task.index}:prepare" if r.task.need.gpus else f"{r.task.index}:run",
                                     Need(slots=1) if r.task.need.gpus else r.task.need))
                elif r.phase == "waiting-run":
                    if not fits_host(r.task.need, host_gpus):
                        _skip_unplaceable(r, host, outcomes)
                        done += 1
                        ui.info(f"[{done}/{total}] skipped {r.task.label}: {outcomes[r.task.index][0].reason}")
                        continue
                    ready.append(Job(f"{r.task.index}:run", r.task.need))
            starts = schedule(ready, free)
            if ready and not starts and not children:  # nothing runs and nothing can start: a harness bug
                raise AssertionError(f"sweep: {len(ready)} job(s) fit the host but none can start on it idle")
            for job, ids in starts:
                index, _, phase = job.key.partition(":")
                rec = records[int(index)]
                free.take(job.need, ids)
                held[rec.task.index] = (job.need, ids)
                start(rec, phase, ids)
            for child in list(children):
                code = child.poll()
                if code is None:
                    continue
                children.remove(child)
                need, ids = held.pop(child.record.task.index)
                free.give(need, ids)
                finish(child, code)
            if children and not ui.interactive() and time.time() - last_beat >= HEARTBEAT_S:
                last_beat = time.time()
                ui.info("running: " + "; ".join(
                    f"{c.record.task.label} ({c.phase}{' GPU ' + ','.join(c.record.gpus) if c.record.gpus else ''}, "
                    f"{time.time() - c.started:.0f} s)" for c in children))
            time.sleep(0.1)
    except BaseException as exc:
        stopped = "interrupted" if type(exc) is KeyboardInterrupt else "terminated"
        _stop_all(children)
        for child in children:
            r = child.record
            outcomes[r.task.index] = [LaneOutcome(r.task.pack, lane, r.task.index, "not-run",
                                                  Exit.INTERRUPT if stopped == "interrupted" else Exit.TERMINATED,
                                                  f"the sweep was {stopped}") for lane in r.task.lanes]
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    lanes = [o for r in records for o in outcomes.get(r.task.index, [])]
    return Result(host, plan, lanes, records, t0, time.time(), stopped)


def _prepare_options(options: Sequence[str]) -> Iterable[str]:
    """The options of a run that ``harness prepare`` takes too (it writes no receipt and no tracking)."""
    skip_next = False
    for opt in options:
        if skip_next:
            skip_next = False
            continue
        if opt == "--no-tracking":
            continue
        if opt == "--receipts-dir":
            skip_next = True
            continue
        yield opt


def _skip_unplaceable(rec: TaskRecord, host: Host, outcomes: dict[int, list[LaneOutcome]]) -> None:
    task = rec.task
    have = f"this host has {len(host.gpus)} ({host.gpu_source})" if host.gpus else f"no GPU ({host.gpu_source})"
    if task.need.gpus <= len(host.gpus):
        have += f"; none with {task.need.memory_gib:g} GiB known free"
    why = f"needs {task.need.gpus} CUDA GPU(s); {have}"
    rec.phase = "done"
    outcomes[task.index] = [LaneOutcome(task.pack, lane, task.index, "skipped", Exit.SKIPPED, why)
                            for lane in task.lanes]


def _read_result(task: Task, code: int, child: _Child, rec: TaskRecord, root: Path) -> list[LaneOutcome]:
    """The child's ``--result-file`` per lane; a child that wrote none failed as a whole (its error line)."""
    duration = round(rec.ended - rec.started, 3) if rec.started and rec.ended else None

    def outcome(lane: str, verdict: str, code_: Exit, why: str) -> LaneOutcome:
        return LaneOutcome(task.pack, lane, task.index, verdict, code_, why, gpus=rec.gpus, started=_iso(rec.started),
                           ended=_iso(rec.ended), duration_s=duration)

    try:
        doc = json.loads(child.result.read_text()) if child.result is not None else None
    except (OSError, ValueError):
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("lanes"), list):
        why = _killed(code) if code < 0 else _error_line(child.log)
        return [outcome(lane, "error", _exit_of(code), why) for lane in task.lanes]
    out = []
    by_lane = {e.get("lane"): e for e in doc["lanes"] if isinstance(e, dict)}
    for lane in task.lanes:
        e = by_lane.get(lane)
        if e is None:  # the child stopped before this lane (an error in an earlier one's build, say)
            out.append(outcome(lane, "error", _exit_of(code), _error_line(child.log)))
            continue
        verdict = str(e.get("verdict"))
        lane_exit = runs.VERDICT_EXIT.get(runs.Verdict(verdict), Exit.INTERNAL) \
            if verdict in {v.value for v in runs.Verdict} else Exit.INTERNAL
        got = outcome(lane, verdict, lane_exit, str(e.get("reason", "")))
        if e.get("receipt"):
            path = Path(e["receipt"])
            got.receipt = receipts.display_path(path, root)
            try:
                written = receipts.load(path)
                got.reproducer_started, got.reproducer_s = written.started, written.duration_s
            except HarnessError:
                pass
        out.append(got)
    return out


def _stop_all(children: list[_Child]) -> None:
    """SIGTERM every child's group, give them ``STOP_GRACE_S`` together to clean up, then SIGKILL what is left.
    A second Ctrl-C meanwhile does not cut this short (the error handler already ignores a second SIGTERM)."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        previous = None
    try:
        _stop_children(children)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _stop_children(children: list[_Child]) -> None:
    for child in children:
        child.stop()
    deadline = time.time() + STOP_GRACE_S
    for child in children:
        try:
            child.proc.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            pass
        child._wait_group(within=max(0.1, deadline - time.time()))
        guard.kill_pgid(child.proc.pid)
        try:
            child.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        guard.release(child.proc)


def python_for(per_target: dict[str, str], default: str = sys.executable) -> Callable[[str], str]:
    """The interpreter whose harness runs a target's lanes: ``per_target``'s (a nox lane environment), else ours."""
    return lambda target: per_target.get(target, default)
