"""Many lanes of many packs on one host at once: the plan, the scheduler and the runner of ``harness sweep``.

A sweep turns the selected lanes into **tasks**. A task is one ``harness run PACK --lane A [--lane B]``: a
patched lane and the unpatched lanes of its pack with the same base and arguments run in one task, in
declaration order, because a paired reproducer compares against what its baseline lane left in the run's
``HARNESS_RUN_DIR`` (the mamba equivalence packs). Each task says what it needs (``Need``): GPUs (a cuda lane's
``nproc``), whether its GPUs must be its own (a time or memory figure: ``exclusive``; no ``gpu_memory_gib``
declared), the memory it declares when it may share, and CPU slots. A task whose lanes all have a current
passing receipt (readiness's test: same pin, series, reproducer and helpers) is not run again unless asked.

``schedule`` is a pure function of the tasks that are ready and the free resources: it says which to start now
and on which GPUs. ``run`` starts each as a child process (``python -m harness run ...``) in its own process
group, with ``CUDA_VISIBLE_DEVICES`` set to the GPUs it was given; a GPU task is first prepared (built and
import-checked) by a child that holds no GPU, so builds overlap other tasks' GPU time. One child's failure
never stops the others; Ctrl-C or SIGTERM ends every child (each cleans up as a single run does) and removes
the sweep's own scratch directory. The plan is also data (``Plan.as_json``, schema ``PLAN_SCHEMA``) so that
another engine (a CI matrix, a Slurm array) can run the tasks instead (docs/sweep.md).
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from harness.base import fingerprint, guard, ui
from harness.errors import ConfigError, Exit, HarnessError, UsageError, worst
from harness.filing import readiness
from harness.lane import receipts, runs
from harness.lane.lanes import sweep_stale_temp
from harness.lane.tracking import Lane, Pack, Tracking

PLAN_SCHEMA = 1
PLAN_KIND = "patchlane-sweep-plan"
RESULT_SCHEMA = 1
# args that make a reproducer measure time or memory (repros/_lane.py: a lane says so in its args)
_MEASURING_FLAGS = ("--timing", "--production-timing", "--memory")
_MEASURING_VALUES = {"--check": ("memory", "timing"), "--stage": ("memory", "timing")}
STOP_GRACE_S = 30.0  # how long a child may take to clean up after SIGTERM before its group is killed
HEARTBEAT_S = ui.HEARTBEAT_S


class SweepError(HarnessError):
    """A sweep plan file that cannot be read or does not fit tracking.toml; a selection that selects nothing."""

    exit_code = Exit.USAGE


# ---------------------------------------------------------------------------------------------- what a task needs

@dataclass(frozen=True)
class Need:
    """The resources a task holds while it runs."""

    gpus: int = 0  # how many GPUs (0: a CPU task)
    whole: bool = True  # its GPUs are its own; False: it may share them within ``memory_gib``
    memory_gib: float | None = None  # GPU memory one rank uses at most (declared by every cuda lane of the task)
    slots: int = 1  # CPU slots (of --jobs); an exclusive CPU task takes them all


def exclusive_reason(pack: Pack, lane: Lane) -> str | None:
    """Why ``lane`` runs with its GPU(s) to itself: a time or memory figure; None when it may share."""
    if lane.exclusive is not None:
        return "exclusive = true" if lane.exclusive else None
    if any(row.lane == lane.name for row in pack.performance):
        return f"a [[packs.{pack.id}.performance]] row reads its figures"
    if lane.expect.startswith("MEMORY_"):
        return f"its verdict ({lane.expect}) is a memory measurement"
    for i, arg in enumerate(lane.args):
        value = lane.args[i + 1] if i + 1 < len(lane.args) else ""
        if arg in _MEASURING_FLAGS or value in _MEASURING_VALUES.get(arg, ()):
            return f"its args ask for a measurement ({' '.join(lane.args[i:i + 2]) if value else arg})"
    return None


def lane_gpus(pack: Pack, lane: Lane) -> int:
    """A cuda lane needs one GPU per rank; a cpu lane none (its ranks run on the CPU)."""
    return lane.nproc if pack.lane_requires(lane) == "cuda" else 0


def pairs(pack: Pack) -> list[list[Lane]]:
    """The pack's lanes grouped into what runs as one task: a patched lane with every unpatched lane of the same
    base, args and script (its baseline, whose results it may read from the shared run directory), in declaration
    order. Upstream-test lanes run alone."""
    parent = {lane.name: lane.name for lane in pack.lanes}

    def root(name: str) -> str:
        while parent[name] != name:
            name = parent[name]
        return name

    def reproducer(lane: Lane) -> tuple:  # what a baseline lane must share with its patched lane
        return (lane.base, lane.args, lane.minimal)

    for lane in pack.lanes:
        if lane.patched and not lane.upstream_tests:  # upstream tests are pytest runs: no run directory between them
            for other in pack.lanes:
                if not other.patched and not other.upstream_tests and reproducer(other) == reproducer(lane):
                    parent[root(other.name)] = root(lane.name)
    groups: dict[str, list[Lane]] = {}
    for lane in pack.lanes:
        groups.setdefault(root(lane.name), []).append(lane)
    return sorted(groups.values(), key=lambda g: pack.lanes.index(g[0]))


# ---------------------------------------------------------------------------------------------- the plan

@dataclass(frozen=True)
class Task:
    index: int
    pack: str
    target: str
    lanes: tuple[str, ...]
    requires: str  # "cuda" when any lane needs a GPU, else "cpu"
    need: Need
    why: tuple[str, ...]  # why it holds its GPUs alone (or may share), why lanes were pulled in
    timeout_s: int  # the sum of its lanes' time limits (an engine's time limit for the task)
    state: str  # "run": to run; "current": every lane has a current passing receipt
    current: tuple[str, ...] = ()  # lanes whose latest receipt is current and passed

    @property
    def label(self) -> str:
        return f"{self.pack} {','.join(self.lanes)}"

    def command(self) -> list[str]:
        """The ``harness`` arguments that run this task (an engine adds its own options: --receipts-dir ...)."""
        return ["run", self.pack, *(a for lane in self.lanes for a in ("--lane", lane))]

    def as_json(self) -> dict:
        return {"index": self.index, "pack": self.pack, "target": self.target, "lanes": list(self.lanes),
                "requires": self.requires, "gpus": self.need.gpus, "gpu_exclusive": self.need.whole,
                "gpu_memory_gib": self.need.memory_gib, "cpu_slots": self.need.slots, "why": list(self.why),
                "timeout_s": self.timeout_s, "state": self.state, "current": list(self.current),
                "command": ["harness", *self.command()]}


TASK_KEYS = frozenset({"index", "pack", "target", "lanes", "requires", "gpus", "gpu_exclusive", "gpu_memory_gib",
                       "cpu_slots", "why", "timeout_s", "state", "current", "command"})
PLAN_KEYS = frozenset({"schema", "kind", "generated", "tasks"})


@dataclass(frozen=True)
class Plan:
    tasks: tuple[Task, ...]
    generated: str = ""

    def as_json(self) -> dict:
        return {"schema": PLAN_SCHEMA, "kind": PLAN_KIND, "generated": self.generated,
                "tasks": [t.as_json() for t in self.tasks]}

    @classmethod
    def load(cls, path: Path, tracking: Tracking) -> Plan:
        """A plan written by ``harness sweep --plan --json``: closed schema, and every task must name lanes
        tracking.toml still has (a stale plan is refused, naming the task)."""
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SweepError(f"{path}: cannot read the plan: {exc}") from None
        if not isinstance(doc, dict) or doc.get("kind") != PLAN_KIND:
            raise SweepError(f"{path}: not a sweep plan (no \"kind\": \"{PLAN_KIND}\")")
        if doc.get("schema") != PLAN_SCHEMA:
            raise SweepError(f"{path}: plan schema {doc.get('schema')!r}; this harness reads schema {PLAN_SCHEMA}",
                             hint="write the plan again with this harness: harness sweep --plan --json")
        unknown = sorted(set(doc) - PLAN_KEYS)
        if unknown or not isinstance(doc.get("tasks"), list):
            raise SweepError(f"{path}: " + (f"unknown key '{unknown[0]}'" if unknown else "'tasks' must be a list"))
        tasks = []
        for i, t in enumerate(doc["tasks"]):
            where = f"{path} tasks[{i}]"
            if not isinstance(t, dict):
                raise SweepError(f"{where}: must be an object")
            extra, missing = sorted(set(t) - TASK_KEYS), sorted(TASK_KEYS - set(t))
            if extra or missing:
                what = f"unknown key '{extra[0]}'" if extra else f"missing key '{missing[0]}'"
                raise SweepError(f"{where}: {what}")
            try:
                pack = tracking.pack(str(t["pack"]))
                for name in t["lanes"]:
                    pack.lane(str(name))
                need = Need(int(t["gpus"]), bool(t["gpu_exclusive"]),
                            None if t["gpu_memory_gib"] is None else float(t["gpu_memory_gib"]), int(t["cpu_slots"]))
                tasks.append(Task(int(t["index"]), pack.id, pack.target, tuple(str(n) for n in t["lanes"]),
                                  str(t["requires"]), need, tuple(str(w) for w in t["why"]), int(t["timeout_s"]),
                                  str(t["state"]), tuple(str(c) for c in t["current"])))
            except ConfigError as exc:
                raise SweepError(f"{where}: {exc}", hint="the plan is older than tracking.toml: write it again") \
                    from None
            except (TypeError, ValueError) as exc:
                raise SweepError(f"{where}: a value of the wrong type ({exc})") from None
        return cls(tuple(tasks), str(doc.get("generated", "")))

    def task(self, index: int) -> Task:
        for t in self.tasks:
            if t.index == index:
                return t
        raise SweepError(f"the plan has no task {index} (tasks 0 to {len(self.tasks) - 1})")


@dataclass(frozen=True)
class Selection:
    packs: tuple[str, ...] = ()  # none: every pack
    targets: tuple[str, ...] = ()
    bases: tuple[str, ...] = ()
    lanes: tuple[str, ...] = ()  # lane names or shell patterns (fix-*), or PACK:PATTERN for one pack's lanes


def lane_matches(pack: Pack, lane: Lane, pattern: str) -> bool:
    """``pattern`` is a lane name or shell pattern, for every pack; ``PACK:PATTERN`` only for that pack's lanes."""
    pack_id, sep, lane_pat = pattern.rpartition(":")
    if sep and pack_id != pack.id:
        return False
    return fnmatch.fnmatchcase(lane.name, lane_pat)


def select(tracking: Tracking, sel: Selection) -> list[tuple[Pack, list[Lane]]]:
    """The packs and lanes a selection names (tracking.toml order); a filter that matches nothing is an error."""
    packs = [tracking.pack(p) for p in sel.packs] if sel.packs else list(tracking.packs.values())
    for name, values, known in (("--target", sel.targets, {p.target for p in tracking.packs.values()}),
                                ("--base", sel.bases, {lane.base for p in packs for lane in p.lanes})):
        stray = [v for v in values if v not in known]
        if stray:
            raise UsageError(f"{name} {stray[0]}: no selected lane has it ({', '.join(sorted(known)) or 'none'})")
    out = []
    for pack in packs:
        if sel.targets and pack.target not in sel.targets:
            continue
        chosen = [lane for lane in pack.lanes if (not sel.bases or lane.base in sel.bases)
                  and (not sel.lanes or any(lane_matches(pack, lane, pat) for pat in sel.lanes))]
        if chosen:
            out.append((pack, chosen))
    if not out:
        raise UsageError("the selection names no lane" + (f" (--lane {' '.join(sel.lanes)})" if sel.lanes else ""))
    return out


def current_lanes(root: Path, tracking: Tracking, pack: Pack, manifest, receipts_dir: Path | None) -> set[str]:
    """The pack's lanes whose latest receipt passed and still counts (``readiness.lane_problem``)."""
    latest = receipts.latest_by_lane(root, pack.target, pack.id, receipts_dir)
    out = set()
    series_at: dict[str, list | None] = {}
    for lane in pack.lanes:
        base = manifest.bases.get(lane.base)
        if base is None or lane.name not in latest:
            continue
        if lane.base not in series_at:
            try:
                series_at[lane.base] = readiness.series_at(root, tracking, pack, lane.base)
            except ConfigError:
                series_at[lane.base] = None
        patches = series_at[lane.base]
        if patches is None and (lane.patched or lane.upstream_tests):
            continue
        if readiness.lane_problem(root, pack, lane, latest[lane.name], base, patches or []) is None:
            out.add(lane.name)
    return out


def make_plan(ctx, sel: Selection, rerun: bool = False, jobs: int | None = None) -> Plan:
    """Every selected lane in a task with what it needs (``ctx``: harness.lane.context.Context)."""
    jobs = jobs or cpu_count()
    tasks: list[Task] = []
    for pack, chosen in select(ctx.tracking, sel):
        current = set() if rerun else current_lanes(ctx.root, ctx.tracking, pack, ctx.manifest(pack.target),
                                                    ctx.receipts_dir)
        names = {lane.name for lane in chosen}
        for group in pairs(pack):
            if not names & {lane.name for lane in group}:
                continue
            tasks.append(_task(len(tasks), pack, group, names, current, jobs))
    return Plan(tuple(tasks), generated=_now())


def _task(index: int, pack: Pack, group: list[Lane], chosen: set[str], current: set[str], jobs: int) -> Task:
    gpus = max(lane_gpus(pack, lane) for lane in group)
    why = []
    reasons = [(lane.name, exclusive_reason(pack, lane)) for lane in group]
    exclusive = [f"{name}: {r}" for name, r in reasons if r]
    gpu_lanes = [lane for lane in group if lane_gpus(pack, lane)]
    declared = [lane.gpu_memory_gib for lane in gpu_lanes]
    memory = max(d for d in declared if d is not None) if declared and None not in declared else None
    if gpus:
        if exclusive:
            why += [f"GPU to itself: {e}" for e in exclusive]
        elif memory is None:
            why.append("GPU to itself: no gpu_memory_gib declared")
        else:
            why.append(f"may share a GPU: declares gpu_memory_gib = {memory:g}")
    pulled = [lane.name for lane in group if lane.name not in chosen]
    if pulled:
        why.append(f"runs with {', '.join(pulled)}: paired lanes share one run directory")
    slots = max(lane.nproc if not lane_gpus(pack, lane) else 1 for lane in group)
    if not gpus and exclusive:
        slots = jobs
        why += [f"CPU to itself: {e}" for e in exclusive]
    whole = bool(gpus) and (bool(exclusive) or memory is None)  # a CPU task holds no GPU at all
    done = tuple(lane.name for lane in group if lane.name in current)
    return Task(index=index, pack=pack.id, target=pack.target, lanes=tuple(lane.name for lane in group),
                requires="cuda" if gpus else "cpu",
                need=Need(gpus=gpus, whole=whole, memory_gib=memory if gpus and not whole else None,
                          slots=min(slots, jobs)),
                why=tuple(why), timeout_s=sum(lane.timeout for lane in group),
                state="current" if len(done) == len(group) else "run", current=done)


# ---------------------------------------------------------------------------------------------- the host

@dataclass(frozen=True)
class Gpu:
    id: str  # as CUDA_VISIBLE_DEVICES names it (an index or a UUID)
    memory_gib: float | None = None  # total; None: unknown (then nothing shares it)


@dataclass(frozen=True)
class Host:
    gpus: tuple[Gpu, ...]
    jobs: int
    gpu_source: str  # where the GPU list came from, for the summary

    def as_json(self) -> dict:
        return {"gpus": [{"id": g.id, "memory_gib": g.memory_gib} for g in self.gpus], "jobs": self.jobs,
                "gpu_source": self.gpu_source}


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def discover_gpus(python: str, memo_dir: Path | None, given: str | None = None) -> tuple[list[str], str]:
    """The GPU ids lanes may use, and where they came from: ``given`` (--gpus), ``CUDA_VISIBLE_DEVICES``, the
    kernel's list of NVIDIA GPUs, else as many as torch sees (``runs.cuda_devices``)."""
    for source, value in (("--gpus", given), ("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))):
        if value is not None:
            ids = [d.strip() for d in value.split(",") if d.strip()]
            return ([] if ids == ["-1"] else ids), source
    driver = fingerprint.gpu_driver()["gpus"]
    if driver:
        return [str(i) for i in range(len(driver))], "the NVIDIA driver"
    n, desc = runs.cuda_devices(python, memo_dir)
    return [str(i) for i in range(n)], f"torch ({desc})"


def gpu_memory(ids: Sequence[str]) -> dict[str, float]:
    """Total memory per GPU id (GiB) as ``nvidia-smi`` reports it; empty when it cannot be asked."""
    if not ids or shutil.which("nvidia-smi") is None:
        return {}
    try:
        proc = guard.run(["nvidia-smi", "--query-gpu=index,uuid,memory.total", "--format=csv,noheader,nounits"],
                         timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found: dict[str, float] = {}
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            try:
                mib = float(parts[2])
            except ValueError:
                continue
            found[parts[0]] = found[parts[1]] = round(mib / 1024, 1)
    return {i: found[i] for i in ids if i in found}


# ---------------------------------------------------------------------------------------------- the scheduler

@dataclass
class GpuUse:
    """One GPU as the scheduler sees it: taken whole, or shared by tasks that declared their memory."""

    id: str
    memory_gib: float | None
    whole: bool = False
    used_gib: float = 0.0
    sharers: int = 0

    @property
    def idle(self) -> bool:
        return not self.whole and self.sharers == 0

    def fits(self, need: Need) -> bool:
        if need.whole:
            return self.idle
        assert need.memory_gib is not None  # a task that may share declares its memory
        return not self.whole and self.memory_gib is not None and self.used_gib + need.memory_gib <= self.memory_gib


@dataclass
class Free:
    slots: int
    gpus: list[GpuUse] = field(default_factory=list)

    def take(self, need: Need, ids: Sequence[str]) -> None:
        self.slots -= need.slots
        for g in self.gpus:
            if g.id in ids:
                if need.whole:
                    g.whole = True
                else:
                    g.used_gib += need.memory_gib or 0.0
                    g.sharers += 1

    def give(self, need: Need, ids: Sequence[str]) -> None:
        self.slots += need.slots
        for g in self.gpus:
            if g.id in ids:
                if need.whole:
                    g.whole = False
                else:
                    g.used_gib = max(0.0, g.used_gib - (need.memory_gib or 0.0))
                    g.sharers -= 1


@dataclass(frozen=True)
class Job:
    """A unit the scheduler places: a task's prepare step (CPU only) or its run."""

    key: str
    need: Need


def fits_host(need: Need, host_gpus: Sequence[GpuUse]) -> bool:
    """Whether the host could ever run it (enough GPUs; memory where it shares)."""
    return need.gpus <= len([g for g in host_gpus if need.whole or g.memory_gib is not None
                             and (need.memory_gib or 0) <= g.memory_gib])


def schedule(ready: Sequence[Job], free: Free) -> list[tuple[Job, tuple[str, ...]]]:
    """Which of the ``ready`` jobs start now, and on which GPUs (pure: ``free`` is not changed).

    Jobs that need more GPUs are placed first (a 4-GPU task is not starved by 1-GPU ones), then in the given
    order. A job that holds its GPUs whole gets idle GPUs; one that shares gets the fullest GPUs its memory
    still fits on (idle GPUs stay free for whole ones). Every job needs its CPU slots free.
    """
    sim = Free(free.slots, [replace(g) for g in free.gpus])
    started = []
    for job in sorted(ready, key=lambda j: -j.need.gpus):  # sorted() is stable: the given order within a size
        if job.need.slots > sim.slots:
            continue
        ids: tuple[str, ...] = ()
        if job.need.gpus:
            fit = [g for g in sim.gpus if g.fits(job.need)]
            if len(fit) < job.need.gpus:
                continue
            if not job.need.whole:
                fit.sort(key=lambda g: (g.idle, -g.used_gib))  # the fullest shared GPUs first, idle ones last
            ids = tuple(g.id for g in fit[:job.need.gpus])
        sim.take(job.need, ids)
        started.append((job, ids))
    return started


# ---------------------------------------------------------------------------------------------- estimate

ESTIMATE_SCHEMA = 1
ESTIMATE_KIND = "patchlane-sweep-estimate"


@dataclass(frozen=True)
class Estimate:
    """What a sweep of ``plan`` would take on a host, replayed with the scheduler over recorded durations."""

    host: Host
    serial_s: float  # one task after another: the sum of the known durations
    makespan_s: float  # the scheduler's replay: when the last task would end
    longest_s: float  # no schedule ends before its longest task (the critical path of independent tasks)
    tasks: tuple[dict, ...]  # index, pack, lanes, gpus, duration_s, start_s, end_s, gpu_ids
    unknown: tuple[str, ...]  # tasks with a lane that has no receipt to take a duration from (left out)
    too_big: tuple[str, ...]  # tasks needing more GPUs than the host has (skipped there, left out)

    def as_json(self) -> dict:
        return {"schema": ESTIMATE_SCHEMA, "kind": ESTIMATE_KIND, "host": self.host.as_json(),
                "serial_s": round(self.serial_s, 3), "makespan_s": round(self.makespan_s, 3),
                "longest_s": round(self.longest_s, 3),
                "makespan_over_serial": round(self.makespan_s / self.serial_s, 4) if self.serial_s else None,
                "tasks": list(self.tasks), "unknown": list(self.unknown), "too_big": list(self.too_big),
                "source": "each task's duration is the sum of its lanes' latest receipts' duration_s (the "
                          "reproducer's run; builds, import checks and harness start-up are not in it)"}


def by_length(tasks: Sequence[Task], durations: dict[int, float | None] | None) -> list[Task]:
    """``tasks`` longest recorded duration first (a task never run counts as longest: it may well be); ties in
    plan order. Offering long tasks first keeps one from starting last and setting the sweep's end."""
    known = durations or {}

    def length(task: Task) -> float:
        took = known.get(task.index)
        return float("inf") if took is None else took

    return sorted(tasks, key=lambda t: -length(t))


def recorded_durations(root: Path, tracking: Tracking, plan: Plan, receipts_dir: Path | None = None
                       ) -> dict[int, float | None]:
    """Task index -> the sum of its lanes' latest receipt durations; None when a lane has no receipt."""
    out: dict[int, float | None] = {}
    latest_of: dict[str, dict] = {}
    for task in plan.tasks:
        if task.pack not in latest_of:
            latest_of[task.pack] = receipts.latest_by_lane(root, task.target, task.pack, receipts_dir)
        recs = [latest_of[task.pack].get(lane) for lane in task.lanes]
        out[task.index] = None if any(r is None for r in recs) else sum(r.duration_s for r in recs if r)
    return out


def estimate(plan: Plan, durations: dict[int, float | None], host: Host) -> Estimate:
    """Replay ``schedule`` over ``plan``'s tasks as if each took its recorded duration, on ``host``.

    Pure: nothing runs. Tasks are offered longest first, as ``run`` offers them, and each frees its GPUs and
    CPU slots when its duration has passed. Tasks without a duration, or needing more GPUs than ``host`` has,
    are left out and named."""
    gpus = [GpuUse(g.id, g.memory_gib) for g in host.gpus]
    jobs, unknown, too_big = [], [], []
    for task in by_length(plan.tasks, durations):
        if durations.get(task.index) is None:
            unknown.append(task.label)
        elif not fits_host(task.need, gpus):
            too_big.append(task.label)
        else:
            jobs.append(Job(str(task.index), task.need))
    by_key = {str(t.index): t for t in plan.tasks}
    free = Free(host.jobs, gpus)
    now, pending = 0.0, list(jobs)
    running: list[tuple[float, Job, tuple[str, ...]]] = []
    rows: list[dict] = []
    while pending or running:
        for job, ids in schedule(pending, free):
            free.take(job.need, ids)
            pending.remove(job)
            took = float(durations[int(job.key)] or 0.0)
            running.append((now + took, job, ids))
            task = by_key[job.key]
            rows.append({"index": task.index, "pack": task.pack, "lanes": list(task.lanes), "gpus": list(ids),
                         "duration_s": round(took, 3), "start_s": round(now, 3), "end_s": round(now + took, 3)})
        if not running:  # nothing fits even on an idle host: cannot happen after fits_host, but never loop
            break
        running.sort(key=lambda r: r[0])
        now, job, ids = running.pop(0)
        free.give(job.need, ids)
    known = [float(durations[int(j.key)] or 0.0) for j in jobs]
    return Estimate(host, sum(known), max((float(r["end_s"]) for r in rows), default=0.0), max(known, default=0.0),
                    tuple(sorted(rows, key=lambda r: r["index"])), tuple(unknown), tuple(too_big))


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


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


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
