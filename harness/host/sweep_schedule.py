"""Where a sweep's tasks can run: what a task needs, the host's GPUs and CPU slots, and the scheduler.

``schedule`` is a pure function of the jobs that are ready and the free resources: it says which to start now
and on which GPUs (``sweep.run`` starts them, ``sweep_estimate.estimate`` replays it over recorded durations).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.base import fingerprint, guard
from harness.lane import runs


@dataclass(frozen=True)
class Need:
    """The resources a task holds while it runs."""

    gpus: int = 0  # how many GPUs (0: a CPU task)
    whole: bool = True  # its GPUs are its own; False: it may share them within ``memory_gib``
    memory_gib: float | None = None  # GPU memory one rank uses at most (declared by every cuda lane of the task)
    slots: int = 1  # CPU slots (of --jobs); an exclusive CPU task takes them all


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


