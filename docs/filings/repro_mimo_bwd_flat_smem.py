"""Mamba-3 MIMO backward: flatten rank-3 shared buffers to 2-D: a self-contained reproducer.

Needs mamba-ssm (the package under test) importable, torch, a CUDA GPU, with tilelang==0.1.8,
apache-tvm-ffi==0.1.9. Nothing else: every helper it uses is copied in below.

Run it once per build, from one directory:

  1. state-spaces/mamba main@e9594ce at e9594ce1c7 unchanged (CUDA GPU):
       python repro_mimo_bwd_flat_smem.py --unpatched --groups 2
  2. state-spaces/mamba main@e9594ce at e9594ce1c7 with this PR (CUDA GPU):
       python repro_mimo_bwd_flat_smem.py --patched --groups 2
  3. state-spaces/mamba main@e9594ce at e9594ce1c7 with this PR (CUDA GPU):
       python repro_mimo_bwd_flat_smem.py --patched --baseline-site $RELEASED_SITE --timing --heads 128 --groups 8 --batch 2 --seqlen 4096
  4. state-spaces/mamba main@e9594ce at e9594ce1c7 unchanged (CPU is enough):
       python repro_mimo_bwd_flat_smem.py --unpatched --tma-probe --probe-dims static --groups 2
  5. state-spaces/mamba main@e9594ce at e9594ce1c7 with this PR (CPU is enough):
       python repro_mimo_bwd_flat_smem.py --patched --tma-probe --probe-dims static --groups 2
  6. state-spaces/mamba main@e9594ce at e9594ce1c7 unchanged (CUDA GPU):
       python repro_mimo_bwd_flat_smem.py --unpatched
  7. state-spaces/mamba main@e9594ce at e9594ce1c7 with this PR (CUDA GPU):
       python repro_mimo_bwd_flat_smem.py --patched

RELEASED_SITE is a directory holding state-spaces/mamba main@e9594ce at e9594ce1c7 unchanged, e.g.
made with 'pip install --no-deps --target DIR .' in a checkout of state-spaces/mamba main@e9594ce at
e9594ce1c7: the run compares the changed function with that one in one process.

Each run prints one JSON line per measurement and ends with a line naming what it observed.

Method notes:

This change: Mamba-3 MIMO backward with 2-D shared staging (qk_dot, K) -- equivalence and TMA eligibility.

Two modes, one per pair of jobs.

Gradients (default). The patch is a refactor of the TileLang bwd_bwd kernel: no math change, so the
real ``mamba3_mimo`` backward on the patched build (04+05+07 series; at main, 04+07 ported, 05
being absorbed there) must give the baseline build's gradients within bf16 rounding, dense and
varlen (default G=1, upstream's tuned case; the main jobs pass ``--groups 2``, which also covers
the flattened K staging of grouped heads and shares an earlier change main compiles, see "Compile cost"
below). One build per process: the baseline job
saves its gradients under ``$REPRO_RUN_DIR`` (see _mamba3.py) after checking the contract the
comparison rests on -- its own backward, run twice, is finite and reproducible to bf16 rounding ->
contract-held. The patched job compares: per tensor ``rel_fro <= max(K_NOISE * control, bf16
unit roundoff)`` with control = the baseline's run-to-run distance and bf16-storage cost ->
equivalence-verified (bitwise equality is reported per tensor as a figure; it is not required,
since the kernel's schedule may change). Both compile with the kernel's own pass configs, i.e.
TL_DISABLE_TMA_LOWER=True (today's mitigation).

Timing (``--timing``, patched job with the unpatched build beside it: ``with_baseline``). The
baseline's ``mamba3_mimo_bwd.py`` is loaded next to the patched package, and the forward+backward of
the public entry point is timed with the dense backward taken from one file or the other
(``mamba_mimo_bwd_combined`` swapped in ``mamba3_mimo``'s namespace between calls), the two variants'
calls interleaved in one process (``_timing.compare``). The claim is "no slower": fix-validated when
the patched kernel time is at most ``--max-slowdown`` times the baseline's, fix-failed above;
SKIPPED when no kernel time could be measured (wall time alone would time the host). Run it at the
article's production shape (the job's args); both backward variants compile there once
(``prewarm`` compiles them in parallel).

TMA probe (``--tma-probe``). Lowers ``mamba_mimo_bwd_bwd`` for sm_90 (``tilelang.lower``; no launch)
with TL_DISABLE_TMA_LOWER=False (and, with ``--also-tma-off``, also with the kernel's own pass configs;
the equivalence jobs already JIT-compile that TMA-off variant).
Figures: whether each lowering succeeded, the exception text when not (an earlier change divide-by-zero,
or 0.1.8's "Cannot detect TMA layout" for rank-3 shared buffers), and the count of TMA bulk copies
(``tma_load``) in the generated source. Verdict, on the claim that flattening makes the staging
TMA-eligible: baseline build -> bug-reproduced when the TMA-on lowering has no tma_load (fails or
falls back); patched build -> fix-validated when the TMA-on lowering emits tma_load (and the
TMA-off one, if probed, succeeds), fix-failed otherwise (the exception is a figure, never a crash).

Builds. The same reproducer runs at 2.3.2.post1 and at main (e9594ce). The entry point
``mamba3_mimo`` keeps its arguments at main (the gated-norm fusion it added defaults to off);
main's ``mamba_mimo_bwd_bwd`` factory gained a ``packed_dout`` parameter after ``reduceO``, so the
probe passes everything after the shapes and flags by keyword. At 2.3.2.post1 the runtime
compiles the kernels with symbolic B/S/H/G and the probe lowers that variant (``--probe-dims
symbolic``, the default); main's runtime specialises the dense kernels on concrete (B, S, H, G),
which ``--probe-dims static`` lowers (B, S, H, G from ``--batch/--seqlen/--heads/--groups``).

Compile cost. Equivalence jobs: one dense and one varlen variant of fwd, bwd_fwd and bwd_bwd
(~2-3 min each cold, TileLang's disk cache afterwards). At 2.3.2.post1 these variants are shared
with an earlier change jobs (symbolic shapes). At main every (B, S, H, G) is its own variant: with
``--groups 2`` (H=16, B=2, S=128, varlen 64/48/80) the baseline job reuses exactly what change
05's main regression job compiled; the patched series changes bwd_bwd, so the equivalence job
compiles the two bwd_bwd variants anew. ``prewarm`` (see _mamba3.py) compiles the dense and the
varlen case in parallel. TMA probe: lowering only, ~2-3 min of CPU per variant.
"""

from __future__ import annotations

# Command-line flags: --patched / --unpatched (which build this process holds), --run-dir DIR (the
# directory the runs of one comparison share; default ./repro-run), --baseline-site DIR (a directory
# holding the unchanged release, for the runs that compare against it in one process).
import os as _os
import sys as _sys

_FLAG_ENV = {"--run-dir": "REPRO_RUN_DIR", "--baseline-site": "REPRO_BASELINE_SITE"}


def _take_flags(argv):
    rest, args = [], iter(argv)
    for arg in args:
        flag, eq, value = arg.partition("=")
        if flag in _FLAG_ENV:
            _os.environ[_FLAG_ENV[flag]] = value if eq else next(args, "")
        elif arg in ("--patched", "--unpatched"):
            _os.environ["REPRO_PATCHED"] = "1" if arg == "--patched" else "0"
        else:
            rest.append(arg)
    return rest


_sys.argv[1:] = _take_flags(_sys.argv[1:])
_os.environ.setdefault("REPRO_RUN_DIR", "./repro-run")


import argparse
import json
import time
import traceback


# ---- from _lane.py (verbatim) ----
import os
import platform
import sys
from importlib import metadata


OUTCOMES = {
    "bug-reproduced": "the bug shows on this build",
    "bug-absent": "the bug does not show on this build (regression coverage)",
    "fix-validated": "the patched build behaves correctly",
    "fix-failed": "the patched build still misbehaves",
    "memory-save-verified": "the patched build saves the claimed memory",
    "memory-save-missing": "the claimed memory saving is not there",
    "equivalence-verified": "patched and baseline results are identical",
    "equivalence-broken": "patched and baseline results differ",
    "regression-guard-passed": "an upstream fix still holds",
    "regression-guard-failed": "an upstream fix regressed",
    "contract-held": "a boundary contract holds",
    "contract-broken": "a boundary contract is violated",
    "contract-violation-detected": "a deliberately wrong job was caught, and identified, by the contract check",
    "contract-violation-missed": "a deliberately wrong job passed the contract check (the check is blind)",
}


def _emit(tag: str, payload: dict) -> None:
    print(f"{tag} {json.dumps(payload, sort_keys=True, default=str)}", flush=True)


def _cuda_facts() -> dict:
    facts: dict = {}
    try:
        import torch
    except ImportError:
        return {"torch": None}
    facts["torch"] = torch.__version__
    facts["torch_cuda"] = torch.version.cuda
    facts["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        if "LOCAL_RANK" in os.environ:
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        idx = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        facts["gpu"] = props.name
        facts["compute_capability"] = f"{props.major}.{props.minor}"
        facts["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        facts["gpu_count"] = torch.cuda.device_count()
        try:
            drv = torch.cuda.driver_version() if hasattr(torch.cuda, "driver_version") else None
        except Exception:  # pragma: no cover - depends on the driver
            drv = None
        facts["driver"] = drv or _nvidia_smi_driver()
    try:
        import triton

        facts["triton"] = triton.__version__
    except ImportError:
        facts["triton"] = None
    return facts


def _nvidia_smi_driver() -> str | None:
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.strip()
        return out.splitlines()[0] if out else None
    except Exception:
        return None


def stamp(distribution: str, module: str) -> dict:
    """Print the HOST_INFO line. Call it before anything else prints."""
    facts = {
        "host_python": platform.python_version(),
        "platform": platform.platform(),
        "change": os.environ.get("REPRO_PACK"),
        "job": os.environ.get("REPRO_LANE"),
        "target": os.environ.get("REPRO_TARGET"),
        "base": os.environ.get("REPRO_BASE"),
        "base_commit": os.environ.get("REPRO_BASE_COMMIT"),
        "patched": os.environ.get("REPRO_PATCHED"),
        "build_key": os.environ.get("REPRO_BUILD_KEY"),
    }
    if "WORLD_SIZE" in os.environ:  # one stamp per rank under torch.distributed.run
        facts["rank"] = int(os.environ.get("RANK", "0"))
        facts["local_rank"] = int(os.environ.get("LOCAL_RANK", "0"))
        facts["world_size"] = int(os.environ["WORLD_SIZE"])
    try:
        facts["target_version"] = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        facts["target_version"] = None
    facts.update(_cuda_facts())
    mod = __import__(module, fromlist=["_"])
    facts["target_module_file"] = getattr(mod, "__file__", None)
    _emit("HOST_INFO", facts)
    return facts


def figure(name: str, value, unit: str | None = None, **context) -> None:
    """Report one measured number; it lands in the result's ``figures``."""
    _emit("FIGURE", {"name": name, "value": value, "unit": unit, **context})


def verdict(outcome: str, **details) -> None:
    """Report the job's observation. Call it once, last."""
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}; known: {sorted(OUTCOMES)}")
    _emit(outcome, details)


def skip(reason: str) -> None:
    """Say the reproducer cannot run on this host and exit with the skip code."""
    _emit("SKIPPED", {"reason": reason})
    sys.exit(3)


def job() -> str:
    """The job name the runner is running (``REPRO_LANE``), or 'manual'."""
    return os.environ.get("REPRO_LANE", "manual")


def patched() -> bool:
    """Whether this process holds the patched build: ``REPRO_PATCHED`` is "1" or "0".

    The runner always sets it; a manual run sets it, or passes ``--patched``/``--unpatched``
    through ``start``. Anything else stops the run: guessing the build from a job name is how
    a baseline gets reported as a fix."""
    value = os.environ.get("REPRO_PATCHED")
    if value not in ("0", "1"):
        raise SystemExit(f"REPRO_PATCHED is {value!r}: set it to 1 (patched build) or 0 (unpatched), "
                         "or pass --patched / --unpatched")
    return value == "1"


def parser(doc: str | None) -> argparse.ArgumentParser:
    """The argument parser every reproducer starts from: ``--job`` and ``--patched``/``--unpatched``."""
    p = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
    p.add_argument("--job", help="job label for the stamp and details; overrides REPRO_LANE")
    build = p.add_mutually_exclusive_group()
    build.add_argument("--patched", dest="patched_build", action="store_const", const="1",
                       help="this process holds the patched build (overrides REPRO_PATCHED)")
    build.add_argument("--unpatched", dest="patched_build", action="store_const", const="0",
                       help="this process holds the unpatched build (overrides REPRO_PATCHED)")
    return p


def start(args: argparse.Namespace, distribution: str, module: str) -> dict:
    """Apply ``--job``/``--patched`` to the environment, then print the stamp (the first line)."""
    if getattr(args, "job", None):
        os.environ["REPRO_LANE"] = args.job
    if getattr(args, "patched_build", None) is not None:
        os.environ["REPRO_PATCHED"] = args.patched_build
    return stamp(distribution, module)


def require_cuda(reason: str):
    """torch, when a CUDA device is there; otherwise ``skip(reason)``."""
    import torch

    if not torch.cuda.is_available():
        skip(reason)
    return torch


# ---- from _mamba3.py (verbatim) ----
import hashlib
import subprocess
import tempfile
from pathlib import Path


def run_dir() -> Path:
    path = os.environ.get("REPRO_RUN_DIR")
    if not path:
        raise SystemExit("REPRO_RUN_DIR is not set: run the jobs through 'runner run', or set it to a "
                         "directory shared by the baseline and the patched job")
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
        raise SystemExit(f"{path}: no baseline results; run the baseline job first in the same REPRO_RUN_DIR")
    data = torch.load(path, map_location="cpu")
    if data["meta"] != meta:
        raise SystemExit(f"{path}: baseline results are for another problem: {data['meta']} != {meta}")
    return data["tensors"]


def load_baseline_module(module: str, alias: str):
    """``module`` as the unpatched build has it (``REPRO_BASELINE_SITE``), imported as ``alias``; or None.

    The patched job of a pair that times both kernels in one process loads the baseline's copy of the
    kernel's file beside the patched package: its own imports resolve to the patched package, so only
    the code in that one file differs -- which is where the series changes it."""
    import importlib.util

    site = os.environ.get("REPRO_BASELINE_SITE")
    if not site:
        return None
    path = Path(site) / (module.replace(".", "/") + ".py")
    if not path.is_file():
        raise SystemExit(f"REPRO_BASELINE_SITE={site}: no {path.name} for {module} there")
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
                "a child failure is reported by the job's own call of that case")


# ---- from _numerics.py (verbatim) ----
K_NOISE = 4.0  # a result may sit this many times above its control's error


BF16_FLOOR = 2.0**-8  # bf16 unit roundoff: the smallest bf16 tolerance ever used


def rel_fro(a, ref) -> float:
    """Relative Frobenius error ||a - ref|| / ||ref||, in float64 (a zero reference divides by 1e-300)."""
    a, ref = a.double(), ref.double()
    return ((a - ref).norm() / ref.norm().clamp_min(1e-300)).item()


# ---- from _timing.py (verbatim) ----
import statistics
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


def headline(t: dict) -> tuple[float, str]:
    """The number a FIGURE leads with: kernel time when measured, else wall time; and which it is."""
    return (t["kernel_ms"], "kernel_ms") if t["kernel_ms"] is not None else (t["wall_ms"], "wall_ms")


def report(name: str, t: dict, **context) -> None:
    """One FIGURE line for a ``measure`` result: value = ``headline``; every field of ``t`` alongside."""
    from _lane import figure

    value, which = headline(t)
    figure(name, value, unit="ms", value_is=which, **t, **context)


# ---- from repro_mimo_gqa_backward.py (verbatim) ----
import math


GRADS = ("Q", "K", "V", "ADT", "DT", "Trap", "Q_bias", "K_bias", "MIMO_V", "MIMO_Z", "MIMO_Out", "Angles", "D", "Z")


def make_inputs(torch, a, batch, seqlen, groups, seed, device):
    """Inputs of mamba3_mimo in the dtypes Mamba3 (modules/mamba3.py) feeds it."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    H, R, N, P = a.heads, a.rank, a.headdim_qk, a.headdim_v
    bf16, f32 = torch.bfloat16, torch.float32

    def rnd(*shape, scale=1.0, dtype=f32):
        return (torch.randn(*shape, generator=g) * scale).to(dtype).to(device)

    dt = torch.nn.functional.softplus(torch.randn(batch, H, seqlen, generator=g) - 2.0)
    A = -(0.5 + torch.rand(batch, H, seqlen, generator=g))
    return {
        "Q": rnd(batch, seqlen, R, groups, N, scale=N**-0.5, dtype=bf16),
        "K": rnd(batch, seqlen, R, groups, N, scale=N**-0.5, dtype=bf16),
        "V": rnd(batch, seqlen, H, P, dtype=bf16),
        "ADT": (A * dt).to(device),
        "DT": dt.to(device),
        "Trap": rnd(batch, H, seqlen, dtype=bf16),
        "Q_bias": rnd(H, R, N, scale=0.1),
        "K_bias": rnd(H, R, N, scale=0.1),
        "MIMO_V": 1.0 / R + rnd(H, R, P, scale=0.1),
        "MIMO_Z": 1.0 + rnd(H, R, P, scale=0.1),
        "MIMO_Out": 1.0 / R + rnd(H, R, P, scale=0.1),
        "Angles": rnd(batch, seqlen, H, N // 4, scale=0.5),
        "D": rnd(H),
        "Z": rnd(batch, seqlen, H, P, dtype=bf16),
    }


def make_dout(torch, batch, seqlen, a, seed, device):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(batch, seqlen, a.heads, a.headdim_v, generator=g).to(torch.bfloat16).to(device)


def cu_seqlens(torch, lengths, device):
    return torch.tensor([0] + [sum(lengths[: i + 1]) for i in range(len(lengths))], dtype=torch.int32, device=device)


def call(torch, mamba3_mimo, a, leaves, cu_seqlens=None):
    """The public entry point, with the arguments both 2.3.2.post1 and main accept (main's gated-norm
    fusion, ``fuse_pregate_headwise_rms_norm``, defaults to off: the same computation as 2.3.2.post1)."""
    return mamba3_mimo(**leaves, chunk_size=a.chunk, rotary_dim_divisor=4, dtype=torch.bfloat16,
                       cu_seqlens=cu_seqlens)


def fwd_bwd(torch, mamba3_mimo, a, inputs, dout, cu_seqlens=None):
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in inputs.items()}
    out = call(torch, mamba3_mimo, a, leaves, cu_seqlens)
    out.backward(dout)
    torch.cuda.synchronize()
    return {k: leaves[k].grad for k in GRADS}


def mimo_gemm_flops(batch, seqlen, heads, n, p, rank, chunk) -> dict:
    """Tensor-core GEMM FLOPs of mamba3_mimo forward+backward, counted from the kernels' T.gemm calls.

    Per (batch, head, chunk) with L = chunk * R fused rows (the same GEMMs at 2.3.2.post1 and main;
    GQA and G=H do identical arithmetic: every value head runs its own GEMMs on its group's Q/K):

    * forward kernel: Q K^T twice (once for the diagonal qk_dot blocks, once for the intra-chunk
      scores) 2 x 2*L*L*N; scores @ PsiV 2*L*L*P; Q @ state 2*L*N*P; state update K^T @ PsiV 2*L*N*P.
    * backward, first kernel (bwd_fwd): recomputes the same five GEMMs.
    * backward, second kernel (bwd_bwd): K Q^T, dKQ @ Q, dKQ^T @ K: 3 x 2*L*L*N; masked KQ @ dPhiO,
      dPhiO PsiV^T, PsiV dPhiO^T: 3 x 2*L*L*P; K @ dstates, PsiV dstates^T, dPhiO states^T,
      Q^T dPhiO: 4 x 2*L*N*P.

    Chunks are counted whole (ceil(S / chunk), padding included) and causal masks are not
    discounted: this is the arithmetic the GPU executes, not the minimal algorithmic count.
    Element-wise work (exp, rotary, gating), the Triton helper kernels and the dQ/dK reduction are
    not counted.
    """
    L = chunk * rank
    units = batch * heads * math.ceil(seqlen / chunk)
    llN, llP, lNP = 2 * L * L * n, 2 * L * L * p, 2 * L * n * p
    fwd = 2 * llN + llP + 2 * lNP
    bwd_fwd = fwd
    bwd_bwd = 3 * llN + 3 * llP + 4 * lNP
    return {"fwd": units * fwd, "bwd": units * (bwd_fwd + bwd_bwd), "total": units * (fwd + bwd_fwd + bwd_bwd),
            "model": "per (b, h, chunk), L=chunk*R: fwd 4L^2N+2L^2P+4LNP; bwd (recompute + gradients) "
                     "4L^2N+2L^2P+4LNP + 6L^2N+6L^2P+8LNP; chunks counted whole, masks not discounted"}


def run_warm_case(torch, mamba3_mimo, a, case) -> None:
    """A prewarm child: one forward+backward of the case's shapes (compiles and caches its kernels)."""
    cu = cu_seqlens(torch, case["lengths"], "cuda") if case["lengths"] else None
    inputs = make_inputs(torch, a, case["batch"], case["seqlen"], case["groups"], seed=1, device="cuda")
    dout = make_dout(torch, case["batch"], case["seqlen"], a, seed=2, device="cuda")
    fwd_bwd(torch, mamba3_mimo, a, inputs, dout, cu)


# ---- the reproducer ----

BWD_MODULE = "mamba_ssm.ops.tilelang.mamba3.mamba3_mimo_bwd"
MAX_SLOWDOWN = 1.05  # a refactor of the staging: kernel time may move within run-to-run spread, not more


def parse_args() -> argparse.Namespace:
    p = parser(__doc__)
    p.add_argument("--timing", action="store_true",
                   help="time baseline vs patched backward in one process (needs REPRO_BASELINE_SITE)")
    p.add_argument("--max-slowdown", type=float, default=MAX_SLOWDOWN)
    p.add_argument("--warmup", type=int, default=2, help="timing: unmeasured calls per variant")
    p.add_argument("--repeat", type=int, default=10, help="timing: wall-clock calls per variant")
    p.add_argument("--profile-repeat", type=int, default=5, help="timing: profiled calls per variant")
    p.add_argument("--tma-probe", action="store_true", help="lowering-only TMA eligibility probe")
    p.add_argument("--also-tma-off", action="store_true",
                   help="probe: also lower with the kernel's own configs (TMA off); the equivalence jobs "
                        "already compile that variant, so it is off by default (2-3 min of CPU)")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--groups", type=int, default=1)
    p.add_argument("--rank", type=int, default=4)
    p.add_argument("--headdim-qk", type=int, default=128)
    p.add_argument("--headdim-v", type=int, default=64)
    p.add_argument("--chunk", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seqlen", type=int, default=128)
    p.add_argument("--varlen", type=int, nargs="+", default=[64, 48, 80])
    p.add_argument("--probe-dims", choices=("symbolic", "static"), default="symbolic",
                   help="probe: lower with symbolic B/S/H/G (the variant 2.3.2.post1 runs) or with the concrete "
                        "--batch/--seqlen/--heads/--groups (the variant main runs)")
    p.add_argument("--prewarm-jobs", type=int, default=0,
                   help="parallel compile children for the dense and varlen cases (0: both at once; 1: none)")
    p.add_argument("--warm-case", help=argparse.SUPPRESS)  # internal: a prewarm child's case (JSON)
    return p.parse_args()


def meta(a) -> dict:
    return {"heads": a.heads, "groups": a.groups, "rank": a.rank, "N": a.headdim_qk, "P": a.headdim_v,
            "chunk": a.chunk, "batch": a.batch, "seqlen": a.seqlen, "varlen": a.varlen}


def gradients(torch, mamba3_mimo, a, device) -> dict:
    """{case:tensor: grad} for dense and varlen, computed twice: (first, second)."""
    lengths = a.varlen
    cu = torch.tensor([0] + [sum(lengths[: i + 1]) for i in range(len(lengths))], dtype=torch.int32, device=device)
    cases = {
        "dense": (make_inputs(torch, a, a.batch, a.seqlen, a.groups, seed=7, device=device),
                  make_dout(torch, a.batch, a.seqlen, a, seed=8, device=device), None),
        "varlen": (make_inputs(torch, a, 1, int(cu[-1]), a.groups, seed=17, device=device),
                   make_dout(torch, 1, int(cu[-1]), a, seed=18, device=device), cu),
    }
    runs = ({}, {})
    for case, (inputs, dout, cu_seqlens) in cases.items():
        for out in runs:
            grads = fwd_bwd(torch, mamba3_mimo, a, inputs, dout, cu_seqlens)
            out.update({f"{case}:{k}": v for k, v in grads.items() if v is not None})
    return runs


def use_backward(module) -> None:
    """Make ``mamba3_mimo``'s autograd backward call ``module``'s dense ``mamba_mimo_bwd_combined``."""
    import importlib

    # the module, by its full name: a package may re-export the function under the same name
    entry = importlib.import_module("mamba_ssm.ops.tilelang.mamba3.mamba3_mimo")
    entry.mamba_mimo_bwd_combined = module.mamba_mimo_bwd_combined


def warm_case(a, case: dict) -> None:
    """A prewarm child: one forward+backward of the case, with the baseline's backward when it says so."""
    import torch
    from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo import mamba3_mimo

    if case.get("bwd") == "baseline":
        use_backward(load_baseline_module(BWD_MODULE, "p07_baseline_mimo_bwd"))
    run_warm_case(torch, mamba3_mimo, a, case)


def timing(a) -> None:
    torch = require_cuda("needs a CUDA GPU (TileLang kernels)")
    import importlib

    from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo import mamba3_mimo

    if not patched():
        raise SystemExit("--timing compares the patched backward with the baseline's: run it on the patched build")
    baseline = load_baseline_module(BWD_MODULE, "p07_baseline_mimo_bwd")
    if baseline is None:
        raise SystemExit("--timing needs the unpatched build beside the patched one (REPRO_BASELINE_SITE; "
                         "the job's with_baseline)")
    mine = importlib.import_module(BWD_MODULE)
    B, S, H, G = a.batch, a.seqlen, a.heads, a.groups
    figure("problem", meta(a) | {"mode": "timing", "dtype": "bfloat16"}, job=job())
    case = {"groups": G, "batch": B, "seqlen": S, "lengths": None}
    prewarm([case, case | {"bwd": "baseline"}], jobs=a.prewarm_jobs)
    inputs = make_inputs(torch, a, B, S, G, seed=5, device="cuda")
    dout = make_dout(torch, B, S, a, seed=6, device="cuda")
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in inputs.items()}
    params = list(leaves.values())

    def step(module):
        def run():
            use_backward(module)
            return torch.autograd.grad(call(torch, mamba3_mimo, a, leaves), params, dout, allow_unused=True)
        return run

    t = compare({"baseline": step(baseline), "patched": step(mine)}, reference="baseline", warmup=a.warmup,
                repeat=a.repeat, profile_repeat=a.profile_repeat)
    flops = mimo_gemm_flops(B, S, H, a.headdim_qk, a.headdim_v, a.rank, a.chunk)
    for name, r in t.items():
        report("fwd_bwd_timing", r, build=name, groups=G, heads=H, batch=B, seqlen=S)
        if r["kernel_ms"]:
            figure("fwd_bwd_tflops", flops["total"] / (r["kernel_ms"] * 1e-3) / 1e12, unit="TFLOP/s", build=name,
                   basis="kernel_ms", flops=flops["total"], flops_model=flops["model"])
    ratio = t["patched"]["ratio_to_baseline"]
    figure("fwd_bwd_time_ratio_patched_over_baseline", ratio, basis="kernel_ms",
           wall_ratio=t["patched"]["wall_ratio_to_baseline"], max_allowed=a.max_slowdown,
           host_bound=[t["baseline"]["host_bound"], t["patched"]["host_bound"]],
           note="both backward variants timed in this process, calls interleaved (_timing.compare)")
    if ratio is None:
        skip("kernel time not measured on this host: the no-slowdown claim cannot be judged from wall time")
    details = {"ratio": ratio, "max_allowed": a.max_slowdown, "criterion": "patched fwd+bwd kernel time <= "
               "max_allowed x baseline's, same process, interleaved calls"}
    verdict("fix-validated" if ratio <= a.max_slowdown else "fix-failed", **details)


def equivalence(a) -> None:
    torch = require_cuda("needs a CUDA GPU (TileLang kernels)")
    import os

    from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo import mamba3_mimo
    from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo_bwd import mamba_mimo_bwd_bwd

    is_patched = patched()
    # one baseline file per base, so jobs of two bases can share one REPRO_RUN_DIR
    saved = "repro-baseline" + (f"-{os.environ['REPRO_BASE']}" if os.environ.get("REPRO_BASE") else "")
    figure("problem", meta(a), job=job())
    prewarm([{"groups": a.groups, "batch": a.batch, "seqlen": a.seqlen, "lengths": None},
             {"groups": a.groups, "batch": 1, "seqlen": sum(a.varlen), "lengths": a.varlen}], jobs=a.prewarm_jobs)
    configs = getattr(mamba_mimo_bwd_bwd, "pass_configs", None) or {}
    figure("bwd_bwd_pass_configs", {str(getattr(k, "value", k)): v for k, v in configs.items()},
           note="the kernel compiles with these (TMA lowering disabled: today's mitigation)")
    first, second = gradients(torch, mamba3_mimo, a, "cuda")
    finite = {k: bool(torch.isfinite(v).all()) for k, v in first.items()}
    control = {k: max(rel_fro(second[k], v), rel_fro(v.to(torch.bfloat16), v)) for k, v in first.items()}
    if not is_patched:
        save_results(saved, meta(a), first)
        save_results(f"{saved}-control", meta(a), {k: torch.tensor(c) for k, c in control.items()})
        bad = [k for k in first if not finite[k] or rel_fro(second[k], first[k]) > BF16_FLOOR]
        for k in first:
            figure("run_to_run_rel_fro", rel_fro(second[k], first[k]), tensor=k, finite=finite[k])
        if bad:
            verdict("contract-broken", contract="baseline MIMO backward finite and reproducible to bf16 rounding",
                    tensors=bad)
        else:
            verdict("contract-held", contract="baseline MIMO backward finite and reproducible to bf16 rounding",
                    tensors=len(first))
        return
    base = load_results(saved, meta(a))
    base_control = load_results(f"{saved}-control", meta(a))
    failures = []
    for k, v in first.items():
        b = base.get(k)
        if b is None:
            failures.append(f"{k}: missing in the baseline")
            continue
        v = v.cpu()
        c = max(control[k], float(base_control[k]))
        tol = max(K_NOISE * c, BF16_FLOOR)
        err = rel_fro(v, b)
        same = bool(torch.equal(v, b))
        figure("grad_rel_fro_vs_baseline", err, tensor=k, tolerance=tol, control=c, bitwise_equal=same,
               finite=finite[k])
        if not finite[k] or err > tol:
            failures.append(f"{k}: rel_fro {err:.3g} > {tol:.3g}" if finite[k] else f"{k}: not finite")
    missing = sorted(set(base) - set(first))
    failures += [f"{k}: missing in the patched run" for k in missing]
    figure("bitwise_equal_tensors", sum(bool(torch.equal(first[k].cpu(), base[k])) for k in first if k in base),
           of=len(first))
    if failures:
        verdict("equivalence-broken", failures=failures[:20], n_failures=len(failures))
    else:
        verdict("equivalence-verified", tensors=len(first), criterion="within bf16 rounding of the baseline")


def tma_probe(a) -> None:
    import tilelang
    import tilelang.language as T
    from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo_bwd import mamba_mimo_bwd_bwd
    from tilelang import tvm

    target = "cuda -arch=sm_90"
    if a.probe_dims == "symbolic":
        dims = (T.dynamic("B"), T.dynamic("S"), T.dynamic("H"), T.dynamic("G"))
    else:
        dims = (a.batch, a.seqlen, a.heads, a.groups)
    # Positional: shapes and the hasZ/hasD/reduceO flags (same order at 2.3.2.post1 and main); the rest by
    # keyword, since main inserted packed_dout after reduceO.
    args = (*dims, a.headdim_qk, a.headdim_v, a.rank, True, True, True)
    kwargs = {"chunk_size": a.chunk, "rotary_dim_divisor": 4, "dtype": "bfloat16", "threads": 256, "num_stages": 0}
    figure("problem", meta(a) | {"target": target, "kernel": "mamba_mimo_bwd_bwd", "probe_dims": a.probe_dims},
           job=job())
    prim = mamba_mimo_bwd_bwd.get_tir(*args, **kwargs)
    own = {str(getattr(k, "value", k)): v for k, v in (getattr(mamba_mimo_bwd_bwd, "pass_configs", None) or {}).items()}
    figure("kernel_pass_configs", own)
    results = {}
    variants = (("tma_off", True), ("tma_on", False)) if a.also_tma_off else (("tma_on", False),)
    for label, tma_off in variants:
        config = own | {"tl.disable_tma_lower": tma_off}
        start = time.monotonic()
        try:
            with tvm.transform.PassContext(opt_level=3, config=config), tvm.target.Target(target):
                artifact = tilelang.lower(prim, target=target)
            source = getattr(artifact, "kernel_source", None) or ""
            results[label] = {"ok": True, "tma_load": source.count("tma_load"),
                              "bulk_copy": source.count("cp.async.bulk")}
        except Exception as exc:  # the exception is the observation
            text = f"{type(exc).__name__}: {exc}"
            results[label] = {"ok": False, "error": text[-1500:],
                              "repro_divide_by_zero": "Divide by zero" in text,
                              "rank3_tma_layout": "Cannot detect TMA layout" in text}
            traceback.print_exc()
        results[label]["seconds"] = round(time.monotonic() - start, 1)
        figure(f"lower_{label}", results[label]["ok"], **{k: v for k, v in results[label].items() if k != "ok"})
    on, off = results["tma_on"], results.get("tma_off", {"ok": True, "note": "not probed here"})
    eligible = on["ok"] and on.get("tma_load", 0) > 0
    figure("tma_bulk_copy_emitted", eligible)
    if not patched():
        verdict("bug-absent" if eligible else "bug-reproduced", tma_on=on, tma_off_ok=off["ok"])
    elif off["ok"] and eligible:
        verdict("fix-validated", tma_load=on["tma_load"], note="TMA stays disabled in the kernel's pass configs")
    else:
        verdict("fix-failed", tma_on=on, tma_off=off)


def main() -> None:
    a = parse_args()
    if a.warm_case:  # prewarm child: no protocol lines, one forward+backward, exit
        warm_case(a, json.loads(a.warm_case))
        return
    start(a, "mamba-ssm", "mamba_ssm")
    if a.tma_probe:
        tma_probe(a)
    elif a.timing:
        timing(a)
    else:
        equivalence(a)


if __name__ == "__main__":
    main()
