"""Helpers shared by the Mamba-3 reproducers (packs 04, 05, 07). Test plumbing only: no upstream code.

Cross-lane comparison. A lane process holds one build, so an equivalence claim ("the patched
build gives the same gradients as the baseline") is checked across two lanes: the baseline
lane saves its results with ``save_results`` under ``$HARNESS_RUN_DIR`` (a directory the
harness shares between the lanes of one ``harness run``; set it yourself to run the lanes by
separate commands) and the patched lane loads them with ``load_results``. The file records
the problem it was computed on (``meta``); the loader refuses results of another problem.
Each tensor's sha256 is also printed as a FIGURE, so the receipts alone show bitwise equality.

Parallel compile warm-up (``prewarm``). TileLang compiles each kernel variant on its first call
(2-3 minutes for the MIMO backward) and caches it on disk (``~/.tilelang/cache``, shared by
processes). From mamba-ssm main (after 2.3.2.post1) the dense MIMO kernels are specialised on
batch, seqlen, heads and groups (the varlen ones on batch, heads and groups), so every shape a
lane touches is its own compile; a lane that checks several shapes would spend most of its time
compiling one variant after the other. ``prewarm`` runs one child process of the reproducer per
case (``--warm-case``), all at once: each child calls the real public entry point on that case's
shapes and exits, so the compiles overlap and the lane's own calls then load them from the cache.
A child's failure is only reported as a figure: the lane's own call of the same case meets the
same error and reports it properly. On 2.3.2.post1, whose kernels take symbolic shapes, every
child compiles the same variant; that costs CPU, not wall time.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _lane import figure


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


def load_baseline_module(module: str, alias: str):
    """``module`` as the unpatched build has it (``HARNESS_BASELINE_SITE``), imported as ``alias``; or None.

    The patched lane of a pair that times both kernels in one process loads the baseline's copy of the
    kernel's file beside the patched package: its own imports resolve to the patched package, so only
    the code in that one file differs -- which is where the series changes it."""
    import importlib.util

    site = os.environ.get("HARNESS_BASELINE_SITE")
    if not site:
        return None
    path = Path(site) / (module.replace(".", "/") + ".py")
    if not path.is_file():
        raise SystemExit(f"HARNESS_BASELINE_SITE={site}: no {path.name} for {module} there")
    spec = importlib.util.spec_from_file_location(alias, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[alias] = mod  # dataclasses and decorators look their module up by name
    spec.loader.exec_module(mod)
    figure("baseline_module_file", str(path), module=module)
    return mod


def prewarm(cases: list[dict], jobs: int = 0, timeout_s: float = 540.0) -> None:
    """Run ``<this script> <its argv> --warm-case <case>`` for every case, ``jobs`` at a time (0: all)."""
    if len(cases) < 2 or jobs == 1:
        return
    jobs = jobs or len(cases)
    logdir = Path(tempfile.mkdtemp(prefix="prewarm-"))
    argv = [sys.executable, sys.argv[0], *sys.argv[1:]]
    pending = list(enumerate(cases))
    running: list[tuple[int, dict, subprocess.Popen, float]] = []
    done: list[dict] = []
    start = time.monotonic()
    while pending or running:
        while pending and len(running) < jobs:
            i, case = pending.pop(0)
            with open(logdir / f"{i}.log", "w") as log:
                proc = subprocess.Popen([*argv, "--warm-case", json.dumps(case, sort_keys=True)],
                                        stdout=log, stderr=subprocess.STDOUT)
            running.append((i, case, proc, time.monotonic()))
        time.sleep(1.0)
        for entry in list(running):
            i, case, proc, t0 = entry
            over = time.monotonic() - start > timeout_s
            if proc.poll() is None and not over:
                continue
            if proc.poll() is None:  # out of time: stop this child (started here, killed by its own pid)
                proc.kill()
                proc.wait()
            running.remove(entry)
            rec = {"case": case, "rc": proc.returncode, "seconds": round(time.monotonic() - t0, 1)}
            if proc.returncode != 0:
                rec["log_tail"] = (logdir / f"{i}.log").read_text(errors="replace")[-600:]
            done.append(rec)
    figure("prewarm_s", round(time.monotonic() - start, 1), unit="s", jobs=jobs, children=done,
           note="parallel first calls in child processes to fill TileLang's kernel cache; "
                "a child failure is reported by the lane's own call of that case")
