"""Helpers shared by the Mamba-3 reproducers (packs 04, 05, 07). Test plumbing only: no upstream code.

Cross-lane comparison. A lane process holds one build, so an equivalence claim ("the patched
build gives the same gradients as the baseline") is checked across two lanes: the baseline
lane saves its results with ``save_results`` under ``$HARNESS_RUN_DIR`` (a directory the
harness shares between the lanes of one ``harness run``; set it yourself to run the lanes by
separate commands) and the patched lane loads them with ``load_results``. The file records
the problem it was computed on (``meta``); the loader refuses results of another problem.
Each tensor's sha256 is also printed as a FIGURE, so the receipts alone show bitwise equality.
"""

from __future__ import annotations

import hashlib
import os
import statistics
from pathlib import Path

from _lane import figure

K_NOISE = 4.0  # a result may sit this many times above its control's error
BF16_FLOOR = 2.0**-8  # bf16 unit roundoff: the smallest tolerance ever used


def run_dir() -> Path:
    path = os.environ.get("HARNESS_RUN_DIR")
    if not path:
        raise SystemExit("HARNESS_RUN_DIR is not set: run the lanes through 'harness run', or set it to a "
                         "directory shared by the baseline and the patched lane")
    Path(path).mkdir(parents=True, exist_ok=True)
    return Path(path)


def digest(t) -> str:
    """sha256 of a tensor's bytes (dtype and shape included)."""
    import torch

    h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
    # reshape(-1): a 0-dim tensor (a scalar control) cannot be viewed as bytes directly
    h.update(t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def save_results(name: str, meta: dict, tensors: dict) -> Path:
    import torch

    path = run_dir() / f"{name}.pt"
    tmp = path.with_suffix(".partial")
    torch.save({"meta": meta, "tensors": {k: v.detach().cpu() for k, v in tensors.items() if v is not None}}, tmp)
    tmp.replace(path)
    for k, v in tensors.items():
        if v is not None:
            figure("grad_sha256", digest(v), case=name, tensor=k)
    return path


def load_results(name: str, meta: dict) -> dict:
    import torch

    path = run_dir() / f"{name}.pt"
    if not path.is_file():
        raise SystemExit(f"{path}: no baseline results; run the baseline lane first in the same HARNESS_RUN_DIR")
    data = torch.load(path, map_location="cpu")
    if data["meta"] != meta:
        raise SystemExit(f"{path}: baseline results are for another problem: {data['meta']} != {meta}")
    return data["tensors"]


def rel_fro(a, ref) -> float:
    a, ref = a.double(), ref.double()
    return ((a - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def max_abs(a, ref) -> float:
    return (a.double() - ref.double()).abs().max().item()


def time_ms(torch, fn, warmup: int = 3, repeat: int = 15) -> dict:
    """Median and spread of ``fn`` in milliseconds (CUDA events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
            "stdev_ms": statistics.stdev(times) if len(times) > 1 else 0.0, "repeat": repeat}
