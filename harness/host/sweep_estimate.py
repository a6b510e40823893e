"""What a sweep would take on a host: the scheduler replayed over the lanes' recorded durations, nothing run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.host.sweep_plan import Plan, Task
from harness.host.sweep_schedule import Free, GpuUse, Host, Job, fits_host, schedule
from harness.lane import receipts
from harness.lane.tracking import Tracking

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


