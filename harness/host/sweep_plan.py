"""A sweep's plan: the selected lanes grouped into tasks, each with what it needs, as data.

A task is one ``harness run PACK --lane A [--lane B]``: a patched lane and the unpatched lanes of its pack with
the same base and arguments run in one task, in declaration order, because a paired reproducer compares against
what its baseline lane left in the run's ``HARNESS_RUN_DIR`` (the mamba equivalence packs). Each task says what
it needs (``sweep_schedule.Need``): GPUs (a cuda lane's ``nproc``), whether its GPUs must be its own (a time or
memory figure: ``exclusive``; no ``gpu_memory_gib`` declared), the memory it declares when it may share, and
CPU slots. A task whose lanes all have a current passing receipt (readiness's test: same pin, series,
reproducer and what it imported) is not run again unless asked. The plan is also data (``Plan.as_json``, schema
``PLAN_SCHEMA``) so that another engine (a CI matrix, a Slurm array) can run the tasks instead (docs/sweep.md).
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path

from harness.base import clock
from harness.errors import ConfigError, Exit, HarnessError, UsageError
from harness.filing import readiness
from harness.host.sweep_schedule import Need, cpu_count
from harness.lane import receipts
from harness.lane.tracking import Lane, Pack, Tracking

PLAN_SCHEMA = 1
PLAN_KIND = "patchlane-sweep-plan"
# args that make a reproducer measure time or memory (repros/_lane.py: a lane says so in its args)
_MEASURING_FLAGS = ("--timing", "--production-timing", "--memory")
_MEASURING_VALUES = {"--check": ("memory", "timing"), "--stage": ("memory", "timing")}


class SweepError(HarnessError):
    """A sweep plan file that cannot be read or does not fit tracking.toml; a selection that selects nothing."""

    exit_code = Exit.USAGE


def exclusive_reason(pack: Pack, lane: Lane) -> str | None:
    """Why ``lane`` runs with its GPU(s) to itself: a time or memory figure; None when it may share."""
    if lane.exclusive is not None:
        return "exclusive = true" if lane.exclusive else None
    if any(row.lane == lane.name for row in pack.performance):
        return f"a [[performance]] row of {pack.declared_in} reads its figures"
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
    order. Upstream-test lanes run alone, and lanes of different ranks never pair."""
    parent = {lane.name: lane.name for lane in pack.lanes}

    def root(name: str) -> str:
        while parent[name] != name:
            name = parent[name]
        return name

    def reproducer(lane: Lane) -> tuple:  # what a baseline lane must share with its patched lane (its ranks too:
        # a two-rank patched lane and a one-process baseline share no run, and would hold two GPUs together)
        return (lane.base, lane.args, lane.minimal, lane.domain, lane.nproc)

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


def current_lanes(root: Path, tracking: Tracking, pack: Pack, manifest,
                  receipts_dir: Path | None) -> dict[str, receipts.Receipt]:
    """The pack's lanes whose latest receipt passed and still counts (``readiness.lane_problem``), each with that
    receipt.

    With ``receipts_dir`` (``--receipts-dir``, a GPU host's scratch) the latest of the checkout's receipts and
    that directory's: a lane the checkout already holds a current receipt of is not run again there, so a
    fresh host given an empty directory runs only what is missing."""
    latest = receipts.latest_by_lane(root, pack.target, pack.id, receipts_dir, with_checkout=True)
    out = {}
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
        if readiness.lane_problem(root, pack, lane, latest[lane.name], base, patches or [], manifest) is None:
            out[lane.name] = latest[lane.name]
    return out


def make_plan(ctx, sel: Selection, rerun: bool = False, jobs: int | None = None) -> Plan:
    """Every selected lane in a task with what it needs (``ctx``: harness.lane.context.Context)."""
    jobs = jobs or cpu_count()
    tasks: list[Task] = []
    for pack, chosen in select(ctx.tracking, sel):
        current = set() if rerun else set(current_lanes(ctx.root, ctx.tracking, pack, ctx.manifest(pack.target),
                                                        ctx.receipts_dir))
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


def _now() -> str:
    return clock.iso()


