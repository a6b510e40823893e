"""Timing for reproducers: wall-clock and GPU kernel time of one callable, as a FIGURE-ready dict.

Why two clocks. Wall time (host clock around the call, the GPU synchronized before and after)
is what a training step pays; kernel time (the sum of the durations of the CUDA kernels the
call launched, from ``torch.profiler``) is what the GPU spent computing. When the host is the
bottleneck -- e.g. a JIT wrapper that re-elaborates its kernels on every call -- wall time
measures the host, not the kernels, and the two differ by orders of magnitude. Reporting both,
and their ratio, keeps a figure from claiming kernel speed it did not measure.

``measure(fn)`` returns (all times in milliseconds per call):

* ``wall_ms`` -- median over ``repeat`` calls; ``wall_spread_ms`` [min, max]; ``wall_stdev_ms``.
* ``kernel_ms`` -- median over ``profile_repeat`` calls, each profiled in its own
  ``torch.profiler`` session; per call, the sum of the durations of its CUDA kernels
  (memcpy/memset excluded, reported apart as ``memcpy_ms``); ``kernel_spread_ms``,
  ``kernel_stdev_ms``, ``kernels_per_call``. Kernels on concurrent streams are summed, so this
  is GPU work, not GPU busy time; the reproducers here launch on one stream.
* ``wall_over_kernel`` and ``host_bound`` -- ``host_bound`` is true when wall time exceeds
  ``host_bound_ratio`` (default 1.5: more than a third of the wall time is not kernel time)
  times the kernel time.

Without CUDA (or when the profiler records no CUDA kernel, e.g. CUPTI unavailable) the kernel
fields are ``None``, ``host_bound`` is ``None`` and ``note`` says why: a figure never shows a
zero or a guess in place of a measurement it could not take.

``compare({"a": fa, "b": fb}, reference="a")`` measures several callables in one run, their
calls interleaved round by round (so clock drift and thermal state hit them alike), and adds
``ratio_to_<reference>`` (kernel and wall) to each result: a ratio is only ever taken between
numbers measured in the same process, on the same GPU, in the same minute.

The profiler adds some host overhead to the profiled calls; that is why wall time is taken from
separate, unprofiled calls. Warm-up calls (``warmup``) run first and are not measured: the first
call of a JIT kernel compiles it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable

HOST_BOUND_RATIO = 1.5
WALL_METHOD = "host perf_counter around each call, CUDA synchronized before and after"
KERNEL_METHOD = ("torch.profiler, one session per call: sum of the durations of the call's CUDA kernels "
                 "(memcpy/memset excluded)")


def summarize(samples: Iterable[float]) -> dict:
    """Median, [min, max] and standard deviation of samples (ms)."""
    xs = [float(x) for x in samples]
    if not xs:
        raise ValueError("no samples")
    return {"median": statistics.median(xs), "spread": [min(xs), max(xs)],
            "stdev": statistics.stdev(xs) if len(xs) > 1 else 0.0, "n": len(xs)}


def is_copy(name: str) -> bool:
    """CUDA activity that moves or fills memory rather than computing (profiler naming)."""
    return name.startswith(("Memcpy", "Memset", "memcpy", "memset"))


def device_totals(records: Iterable[tuple[str, float]]) -> dict:
    """Per-call sums from (name, duration_us) of one call's device activities."""
    kernel_us = copy_us = 0.0
    kernels = 0
    for name, dur_us in records:
        if is_copy(name):
            copy_us += dur_us
        else:
            kernel_us += dur_us
            kernels += 1
    return {"kernel_ms": kernel_us / 1e3, "memcpy_ms": copy_us / 1e3, "kernels": kernels}


def host_bound(wall_ms: float | None, kernel_ms: float | None, ratio: float = HOST_BOUND_RATIO) -> bool | None:
    """Wall time above ``ratio`` x kernel time; ``None`` when either is unknown or the kernel time is zero."""
    if wall_ms is None or not kernel_ms:
        return None
    return wall_ms > ratio * kernel_ms


def assemble(wall: list[float], per_call: list[dict] | None, *, warmup: int,
             host_bound_ratio: float = HOST_BOUND_RATIO, note: str | None = None) -> dict:
    """The result dict from wall samples and per-call device totals (``None``: not measured)."""
    w = summarize(wall)
    out = {
        "wall_ms": w["median"], "wall_spread_ms": w["spread"], "wall_stdev_ms": w["stdev"], "repeat": w["n"],
        "warmup": warmup, "wall_method": WALL_METHOD, "kernel_method": KERNEL_METHOD,
        "host_bound_threshold": host_bound_ratio,
        "kernel_ms": None, "kernel_spread_ms": None, "kernel_stdev_ms": None, "kernels_per_call": None,
        "memcpy_ms": None, "profile_repeat": 0, "wall_over_kernel": None, "host_bound": None, "note": note,
    }
    if per_call and any(c["kernels"] for c in per_call):
        k = summarize(c["kernel_ms"] for c in per_call)
        out.update(kernel_ms=k["median"], kernel_spread_ms=k["spread"], kernel_stdev_ms=k["stdev"],
                   profile_repeat=k["n"], kernels_per_call=statistics.median(c["kernels"] for c in per_call),
                   memcpy_ms=statistics.median(c["memcpy_ms"] for c in per_call))
        out["wall_over_kernel"] = out["wall_ms"] / k["median"] if k["median"] else None
        out["host_bound"] = host_bound(out["wall_ms"], k["median"], host_bound_ratio)
    elif per_call is not None and note is None:
        out["note"] = "the profiler recorded no CUDA kernel for the call (CUPTI unavailable?): kernel time not measured"
    return out


def _profile_once(torch, fn: Callable[[], object]) -> dict:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    records = [(e.name, e.time_range.elapsed_us()) for e in prof.events() if e.device_type == DeviceType.CUDA]
    return device_totals(records)


def _torch():
    try:
        import torch
    except ImportError:  # a CPU-only check of a pure-Python callable
        return None
    return torch


def compare(fns: dict[str, Callable[[], object]], *, reference: str | None = None, warmup: int = 3,
            repeat: int = 20, profile_repeat: int = 5, host_bound_ratio: float = HOST_BOUND_RATIO) -> dict:
    """``measure`` for several callables, interleaved round by round; ratios to ``reference``.

    Returns ``{name: result}``; with a reference, every result also has ``ratio_to_<reference>``
    (kernel time when both kernel times were measured, else ``None``) and
    ``wall_ratio_to_<reference>``."""
    if not fns:
        raise ValueError("nothing to time")
    if reference is not None and reference not in fns:
        raise ValueError(f"reference {reference!r} is not one of {sorted(fns)}")
    torch = _torch()
    cuda = torch is not None and torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    sync()
    wall: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            sync()
            start = time.perf_counter()
            fn()
            sync()
            wall[name].append((time.perf_counter() - start) * 1e3)
    if cuda:
        per_call: dict[str, list[dict]] = {name: [] for name in fns}
        for _ in range(profile_repeat):
            for name, fn in fns.items():
                per_call[name].append(_profile_once(torch, fn))
        out = {name: assemble(wall[name], per_call[name], warmup=warmup, host_bound_ratio=host_bound_ratio)
               for name in fns}
    else:
        note = "CUDA absent: wall time only (host clock, no GPU); kernel time not measured"
        out = {name: assemble(wall[name], None, warmup=warmup, host_bound_ratio=host_bound_ratio, note=note)
               for name in fns}
    if reference is not None:
        ref = out[reference]
        for r in out.values():
            r[f"ratio_to_{reference}"] = (r["kernel_ms"] / ref["kernel_ms"]
                                          if r["kernel_ms"] is not None and ref["kernel_ms"] else None)
            r[f"wall_ratio_to_{reference}"] = r["wall_ms"] / ref["wall_ms"] if ref["wall_ms"] else None
    return out


def measure(fn: Callable[[], object], *, warmup: int = 3, repeat: int = 20, profile_repeat: int = 5,
            host_bound_ratio: float = HOST_BOUND_RATIO) -> dict:
    """Warm up, then time ``fn`` by wall clock (``repeat`` calls) and by profiled kernel time."""
    return compare({"fn": fn}, warmup=warmup, repeat=repeat, profile_repeat=profile_repeat,
                   host_bound_ratio=host_bound_ratio)["fn"]


def headline(t: dict) -> tuple[float, str]:
    """The number a FIGURE leads with: kernel time when measured, else wall time; and which it is."""
    return (t["kernel_ms"], "kernel_ms") if t["kernel_ms"] is not None else (t["wall_ms"], "wall_ms")


def report(name: str, t: dict, **context) -> None:
    """One FIGURE line for a ``measure`` result: value = ``headline``; every field of ``t`` alongside."""
    from _lane import figure

    value, which = headline(t)
    figure(name, value, unit="ms", value_is=which, **t, **context)
