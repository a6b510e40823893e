"""What would make packs ready: the lane runs each one lacks, their estimated minutes, fitted to a device budget.

``status`` says *why* a pack is not ready; this says *what to run*. For each pack its readiness (harness.filing.
readiness) names the lanes on the filing base without a current passing receipt; those lanes, with the lanes they
run with (``sweep_plan.pairs``), are the pack's tasks. Each task's minutes come from its lanes' latest receipts,
whatever their verdict (``duration_s``: the reproducer's run, not the build or the harness's start; a lane never
run is a guess, said so). What runs cannot clear (the body's word budget, an undecided related PR, a held state)
is listed as the pack's blocker, and a pack with one is not counted as made ready.

``fit`` chooses, cheapest first by device minutes per pack made ready, the packs whose GPU tasks (and those of the
packs they depend on) still fit in the budget on the given host; the minutes of a set of tasks are the sweep
scheduler replayed over their recorded durations (``sweep_estimate.estimate``: lanes that may share a GPU do), plus
a fixed start-up per bundle (the bootstrap: unpacking, installing, import checks). CPU tasks run here, outside the
budget. Then every chosen GPU task is grouped by target and base into one bundle, with its commands.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from harness.filing import readiness
from harness.filing.readiness import Readiness, ReasonCode
from harness.host.sweep_estimate import estimate
from harness.host.sweep_plan import Plan, Task, _task, pairs
from harness.host.sweep_schedule import Gpu, Host, cpu_count
from harness.lane import receipts

PLAN_SCHEMA = 1
PLAN_KIND = "patchlane-ready-plan"
# reasons that running lanes clears: a lane's receipt, the domain's, the suite's shards, evidence read from receipts
RUN_FIXABLE = frozenset({ReasonCode.LANE, ReasonCode.DOMAIN, ReasonCode.SUITE, ReasonCode.EVIDENCE})
GUESS_MAX_S = 15 * 60  # a lane never run: its time limit, at most this (a guess, marked so)
START_S = 90.0  # per bundle on a GPU host: unpack, install, builds' import checks (docs/gpu-hosts.md)


@dataclass(frozen=True)
class Step:
    """One task of a pack's plan: a sweep task and its estimated seconds."""

    task: Task
    base: str
    seconds: float
    guessed: tuple[str, ...]  # lanes with no receipt to take a duration from

    @property
    def gpu(self) -> bool:
        return self.task.requires == "cuda"

    def as_json(self) -> dict:
        return {"pack": self.task.pack, "target": self.task.target, "base": self.base,
                "lanes": [lane for lane in self.task.lanes if lane not in self.task.current],
                "with": list(self.task.current), "requires": self.task.requires, "gpus": self.task.need.gpus,
                "minutes": round(self.seconds / 60, 1), "guessed": list(self.guessed),
                "command": ["harness", *self.task.command()]}


@dataclass(frozen=True)
class PackPlan:
    pack: str
    target: str
    ready: bool  # ready now
    steps: tuple[Step, ...]
    blockers: tuple[str, ...]  # what runs cannot clear, each "[code] text"
    depends_on: tuple[str, ...]  # packs this one waits on that are not ready now

    def as_json(self) -> dict:
        return {"pack": self.pack, "target": self.target, "ready": self.ready,
                "tasks": [s.as_json() for s in self.steps], "blockers": list(self.blockers),
                "depends_on": list(self.depends_on)}


@dataclass
class Fit:
    """The packs a budget makes ready, and the tasks that do it."""

    host: Host
    budget_s: float | None
    chosen: list[str] = field(default_factory=list)  # packs made ready, in the order chosen
    steps: list[Step] = field(default_factory=list)  # every task to run for them (GPU and CPU), once each
    device_s: float = 0.0  # the GPU tasks' replayed minutes plus the bundles' start-up
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (pack, why not chosen)


def pack_plan(ctx, state: Readiness) -> PackPlan:
    """``state``'s pack: the tasks that give each lane on its filing base a current passing receipt."""
    pack = state.pack
    stale = {e.lane.name for e in state.lanes if e.on_filing_base and e.problem is not None}
    durations = _durations(ctx, pack)
    steps = []
    for group in pairs(pack):
        names = {lane.name for lane in group}
        if not names & stale:
            continue
        current = {lane.name for lane in group if lane.name not in stale}
        task = _task(0, pack, group, names, current, cpu_count())
        seconds, guessed = 0.0, []
        for lane in group:
            if lane.name in current:
                continue
            took = durations.get(lane.name)
            if took is None:
                guessed.append(lane.name)
                took = float(min(lane.timeout, GUESS_MAX_S))
            seconds += took
        steps.append(Step(task, group[0].base, seconds, tuple(guessed)))
    blockers = tuple(f"[{r.code}] {r.text}" for r in state.reasons
                     if r.code not in RUN_FIXABLE and r.code != ReasonCode.DEPENDENCY)
    waits = tuple(d for d in pack.depends_on
                  if any(r.code == ReasonCode.DEPENDENCY and f"depends on {d}," in r.text for r in state.reasons))
    return PackPlan(pack.id, pack.target, state.ready, tuple(steps), blockers, waits)


def _durations(ctx, pack) -> dict[str, float]:
    """Lane -> its latest receipt's run time, any verdict (a failed or stale run took as long)."""
    latest = receipts.latest_by_lane(ctx.root, pack.target, pack.id)
    return {name: float(rec.duration_s) for name, rec in latest.items()}


def plans(ctx, packs: Iterable, allow_download: bool = True) -> dict[str, PackPlan]:
    """Every pack's plan (readiness computed once per pack, dependencies shared)."""
    memo: dict = {}
    return {p.id: pack_plan(ctx, readiness.readiness(ctx, p, allow_download=allow_download, _memo=memo))
            for p in packs}


def closure(pid: str, by_pack: dict[str, PackPlan]) -> tuple[list[str], list[str]]:
    """The packs whose tasks make ``pid`` ready (itself and what it waits on, recursively), and the blockers among
    them (a pack waited on that is not in ``by_pack`` is one)."""
    seen, order, blocked = set(), [], []

    def visit(p: str) -> None:
        if p in seen:
            return
        seen.add(p)
        plan = by_pack.get(p)
        if plan is None:
            blocked.append(f"{p}: not planned")
            return
        blocked.extend(f"{p}: {b}" for b in plan.blockers)  # its own first, then what it waits on
        if not plan.ready and not plan.steps and not plan.blockers and not plan.depends_on:
            blocked.append(f"{p}: not ready, and no run would change that")
        for d in plan.depends_on:
            visit(d)
        order.append(p)

    visit(pid)
    return order, blocked


def device_seconds(steps: list[Step], host: Host) -> float:
    """The GPU steps' time on ``host`` (the scheduler replayed), plus the start-up of one bundle per target/base."""
    gpu = [s for s in steps if s.gpu]
    if not gpu:
        return 0.0
    tasks = tuple(replace(s.task, index=i) for i, s in enumerate(gpu))
    est = estimate(Plan(tasks), {i: s.seconds for i, s in enumerate(gpu)}, host)
    if est.too_big:
        return float("inf")
    return est.makespan_s + START_S * len({(s.task.target, s.base) for s in gpu})


NOT_FILED = ("[state] ", "[kind] ")  # blockers of packs that are not to be filed at all


def filed(plan: PackPlan) -> bool:
    return not any(b.startswith(NOT_FILED) for b in plan.blockers)


def fit(by_pack: dict[str, PackPlan], host: Host, budget_s: float | None, every: bool = False) -> Fit:
    """Greedy: the pack that adds the fewest device seconds per pack made ready first, while the total fits.
    Packs whose state or kind keeps them from being filed are left out of the choice (``every``: not even
    named among those left out)."""
    out = Fit(host, budget_s)
    candidates = [p for p in by_pack.values() if not p.ready and (every or filed(p))]
    taken: dict[tuple[str, tuple[str, ...]], Step] = {}
    while True:
        best = None
        for plan in candidates:
            if plan.pack in out.chosen:
                continue
            order, blocked = closure(plan.pack, by_pack)
            if blocked:
                continue
            new = {(s.task.pack, s.task.lanes): s for p in order for s in by_pack[p].steps}
            steps = list({**taken, **new}.values())
            cost = device_seconds(steps, host)
            gain = len([p for p in order if p not in out.chosen and not by_pack[p].ready])
            added = cost - out.device_s
            if cost == float("inf") or (budget_s is not None and cost > budget_s) or gain == 0:
                continue
            key = (added / gain, plan.pack)
            if best is None or key < best[0]:
                best = (key, order, new, cost)
        if best is None:
            break
        _, order, new, cost = best
        taken.update(new)
        out.device_s = cost
        out.chosen += [p for p in order if p not in out.chosen and not by_pack[p].ready]
    out.steps = list(taken.values())
    for plan in candidates:
        if plan.pack in out.chosen:
            continue
        order, blocked = closure(plan.pack, by_pack)
        if blocked:
            out.left_out.append((plan.pack, "runs alone cannot make it ready: " + blocked[0]))
        else:
            steps = list({**taken, **{(s.task.pack, s.task.lanes): s for p in order for s in by_pack[p].steps}}
                         .values())
            cost = device_seconds(steps, host)
            why = (f"needs more GPUs than the host has ({len(host.gpus)})" if cost == float("inf") else
                   f"over the budget: {cost / 60:.1f} device minutes with the packs chosen")
            out.left_out.append((plan.pack, why))
    return out


def bundles(steps: list[Step], out_dir: str = "dist") -> list[dict]:
    """One bundle per (target, base) of the GPU steps, with the commands that make it, run it and bring it back."""
    groups: dict[tuple[str, str], list[Step]] = {}
    for s in steps:
        if s.gpu:
            groups.setdefault((s.task.target, s.base), []).append(s)
    out = []
    for (target, base), group in sorted(groups.items()):
        packs = sorted({s.task.pack for s in group})
        lanes = [f"{s.task.pack}:{lane}" for s in group for lane in s.task.lanes]
        archive = f"{out_dir}/plan-{target}-{base}.tar.xz"
        selection = [a for lane in lanes for a in ("--lane", lane)]
        out.append({
            "target": target, "base": base, "packs": packs, "lanes": lanes,
            "minutes": round(sum(s.seconds for s in group) / 60, 1),
            "bundle": ["harness", "bundle", *packs, "--base", base, *selection, "--kernel-cache", "-o", archive],
            "bootstrap": ["python3", "-m", "harness.bootstrap", archive, "--", "sweep", *packs, *selection,
                          "--receipts-dir", "/tmp/receipts", "--no-tracking"],
            "import": ["harness", "receipts", "import", "receipts.tar"],
        })
    return out


def render(fit_result: Fit, by_pack: dict[str, PackPlan]) -> list[str]:
    """The plan in plain lines: packs made ready, each task with minutes, the bundles and their commands."""
    f = fit_result
    lines = []
    gpus = f"{len(f.host.gpus)} GPU(s)" if f.host.gpus else "no GPU"
    budget = "no budget" if f.budget_s is None else f"a budget of {f.budget_s / 60:g} device minutes"
    lines.append(f"ready-making plan on a host with {gpus}, {budget}: {len(f.chosen)} pack(s) made ready "
                 f"({', '.join(f.chosen) or 'none'}), {f.device_s / 60:.1f} device minutes estimated")
    lines += step_lines(sorted(f.steps, key=lambda s: (not s.gpu, s.task.pack, s.task.lanes)), "  ", name_pack=True)
    for pack, why in f.left_out:
        lines.append(f"not made ready: {pack}: {why}")
    idle = sorted(p for p, plan in by_pack.items() if not plan.ready and not filed(plan))
    if idle:
        lines.append(f"not to be filed (their state or kind), not planned: {', '.join(idle)}")
    return lines


def step_lines(steps: list[Step], indent: str = "", name_pack: bool = False) -> list[str]:
    """Each task with its host and minutes, then the commands: one bundle per target and base for the GPU tasks
    (made here, run on the GPU host, brought back), and the CPU tasks to run here. ``plan`` and ``status PACK``."""
    out = []
    for s in steps:
        lanes = ",".join(lane for lane in s.task.lanes if lane not in s.task.current)
        where = f"GPU x{s.task.need.gpus}" if s.gpu else "CPU (here)"
        guess = f"; guessed: {', '.join(s.guessed)} never ran" if s.guessed else ""
        who = f"{s.task.pack} " if name_pack else ""
        out.append(f"{indent}run {who}{lanes} on {s.base} [{where}, {s.seconds / 60:.1f} min{guess}]")
    for b in bundles(steps):
        out += [f"{indent}bundle {b['target']} {b['base']} ({b['minutes']} min of lanes):",
                f"{indent}  here:     {shlex.join(b['bundle'])}",
                f"{indent}  GPU host: {shlex.join(b['bootstrap'])}",
                f"{indent}  back:     {shlex.join(b['import'])}"]
    cpu = [s for s in steps if not s.gpu]
    if cpu:
        out.append(f"{indent}here (no GPU): " + "; ".join(shlex.join(["harness", *s.task.command()]) for s in cpu))
    return out


def as_json(f: Fit, by_pack: dict[str, PackPlan]) -> dict:
    return {"schema": PLAN_SCHEMA, "kind": PLAN_KIND, "host": f.host.as_json(),
            "budget_min": None if f.budget_s is None else round(f.budget_s / 60, 2),
            "device_min": round(f.device_s / 60, 2), "ready": f.chosen,
            "tasks": [s.as_json() for s in f.steps], "bundles": bundles(f.steps),
            "left_out": [{"pack": p, "why": w} for p, w in f.left_out],
            "packs": {p: plan.as_json() for p, plan in by_pack.items()},
            "source": "minutes are the lanes' latest receipts' duration_s, replayed by the sweep scheduler on the "
                      f"host; plus {START_S:g} s per bundle for the bootstrap"}


def host_of(gpus: int, memory_gib: float | None, jobs: int) -> Host:
    return Host(tuple(Gpu(str(i), memory_gib) for i in range(gpus)), jobs, "--gpus (as asked)")
