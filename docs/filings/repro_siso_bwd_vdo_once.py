"""Mamba-3 SISO backward: compute V @ dO^T once: a self-contained reproducer.

Needs mamba-ssm (the package under test) importable, a CUDA GPU. Nothing else: every helper it uses
is copied in below.

Run it once per build, from one directory:

  1. state-spaces/mamba main at e9594ce1c7 unchanged (CUDA GPU):
       python repro_siso_bwd_vdo_once.py --unpatched
  2. state-spaces/mamba main at e9594ce1c7 with this PR (CUDA GPU):
       python repro_siso_bwd_vdo_once.py --patched --baseline-site $RELEASED_SITE

RELEASED_SITE is a directory holding state-spaces/mamba main at e9594ce1c7 unchanged, e.g. made with
'pip install --no-deps --target DIR .' in a checkout of state-spaces/mamba main at e9594ce1c7: the
run compares the changed function with that one in one process.

Each run prints one JSON line per measurement and ends with a line naming what it observed.

Method notes:

Mamba-3 SISO backward: V @ dO^T computed once per chunk -- equivalence check.

The change is a cleanup of ``mamba3_siso_bwd_kernel_dqkv`` (Triton): the masked V @ dO^T product is
computed once instead of three times. Claim: every output of ``compute_dqkv`` -- dQ, dK, dV, dADT,
dQK_dot, dD, d_issm_state -- is bitwise identical to the unchanged kernel's, dense and varlen.

Each process holds one build, so the check takes two runs sharing one run directory:

* the unchanged build runs ``compute_dqkv`` twice on fixed inputs. The kernel must be deterministic
  from run to run (a bitwise comparison means nothing otherwise) -> contract-held, else
  contract-broken. It saves the outputs, prints their sha256, and times ``compute_dqkv`` (kernel
  time from the profiler, wall time, spreads).
* the changed build takes the same inputs and launch config; every output bitwise equal to the
  unchanged run's -> equivalence-verified, else equivalence-broken. Given the unchanged build as
  well, it loads that ``mamba3_siso_bwd.py`` beside the changed one and times both
  ``compute_dqkv`` in this one process, calls interleaved, so a time ratio never spans two processes.

``compute_dqkv`` and its kernel differ between 2.3.2.post1 and main (e9594ce) only in whitespace,
and the change applies to both. The kernel compiles once per run (one pinned launch config), about
a minute cold; varlen is another specialisation of it.

Autotuning is bounded: the autotuner gets one launch config (``--config``) in both runs, so both
compile the same variant and follow the same schedule (another warp count could change the order
of the reductions, which would not be the change's doing).
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


# ---- from kit.py (verbatim) ----
import argparse
import json
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


# ---- from mamba3_kit.py (verbatim) ----
import hashlib
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


# ---- from timing_kit.py (verbatim) ----
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


def headline(t: dict) -> tuple[float, str]:
    """The number a FIGURE leads with: kernel time when measured, else wall time; and which it is."""
    return (t["kernel_ms"], "kernel_ms") if t["kernel_ms"] is not None else (t["wall_ms"], "wall_ms")


def report(name: str, t: dict, **context) -> None:
    """One FIGURE line for a ``measure`` result: value = ``headline``; every field of ``t`` alongside."""
    pass

    value, which = headline(t)
    figure(name, value, unit="ms", value_is=which, **t, **context)


# ---- the reproducer ----

OUTPUTS = ("dQ", "dK", "dV", "dADT", "dQK_dot", "dD", "d_issm_state")


def parse_args(argv=None):
    p = parser(__doc__)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--headdim-qk", type=int, default=128)
    p.add_argument("--headdim-v", type=int, default=64)
    p.add_argument("--chunk", type=int, default=64)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seqlen", type=int, default=512)
    p.add_argument("--varlen", type=int, nargs="+", default=[192, 320, 256])
    p.add_argument("--config", default="2,4", help="num_stages,num_warps of the single launch config")
    p.add_argument("--perf-batch", type=int, default=4)
    p.add_argument("--perf-seqlen", type=int, default=4096)
    p.add_argument("--no-perf", action="store_true")
    return p.parse_args(argv)


def pin_config(triton, module, spec: str) -> dict:
    stages, warps = (int(x) for x in spec.split(","))
    kernel = module.mamba3_siso_bwd_kernel_dqkv
    if not hasattr(kernel, "configs"):
        raise SystemExit("mamba3_siso_bwd_kernel_dqkv is not an autotuned kernel in this build")
    kernel.configs = [triton.Config({}, num_stages=stages, num_warps=warps)]
    return {"num_stages": stages, "num_warps": warps}


def make_inputs(torch, a, batch, seqlen, cu_seqlens, seed, device):
    """Inputs shaped as mamba3_siso_combined's backward passes them to compute_dqkv."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    H, N, P, C = a.heads, a.headdim_qk, a.headdim_v, a.chunk
    if cu_seqlens is None:
        nseq, nchunks = batch, (seqlen + C - 1) // C
        starts = torch.zeros(seqlen, dtype=torch.long)
        pos = torch.arange(seqlen)
    else:
        bounds = cu_seqlens.tolist()
        nseq, nchunks = len(bounds) - 1, len(bounds) - 1 + seqlen // C
        pos = torch.cat([torch.arange(e - s) for s, e in zip(bounds[:-1], bounds[1:], strict=True)])
        starts = None
    step = -(0.02 + 0.1 * torch.rand(batch, H, seqlen, generator=g))  # log2 decay per token
    # within-chunk cumulative decay (chunks restart at each sequence start in varlen)
    chunk_id = pos // C
    da_cs = torch.empty_like(step)
    key = chunk_id if starts is not None else torch.cumsum((pos == 0).long(), 0) * 10**6 + chunk_id
    for k in key.unique():
        idx = (key == k).nonzero().squeeze(1)
        da_cs[..., idx] = torch.cumsum(step[..., idx], dim=-1)
    bf16, f32 = torch.bfloat16, torch.float32

    def rnd(*shape, scale=1.0, dtype=f32):
        return (torch.randn(*shape, generator=g) * scale).to(dtype).to(device)

    return {
        "q": rnd(batch, seqlen, H, N, scale=N**-0.5, dtype=bf16),
        "k": rnd(batch, seqlen, H, N, scale=N**-0.5, dtype=bf16),
        "v": rnd(batch, seqlen, H, P, dtype=bf16),
        "da_cs": da_cs.to(device),
        "da_cs_sum": -(0.5 + torch.rand(batch, H, nchunks, generator=g)).to(device),
        "qk_dot": rnd(batch, H, seqlen),
        "SSM_States": rnd(batch, H, P, nchunks * N, scale=0.5, dtype=bf16),
        "do": rnd(batch, seqlen, H, P, dtype=bf16),
        "d_ossm_state": rnd(nseq, H, P, N, scale=0.1),
        "d_ov_state": rnd(nseq, H, P, scale=0.1),
        "D": rnd(H),
    }


def run(compute_dqkv, inputs, a, cu_seqlens):
    out = compute_dqkv(**inputs, chunk_size=a.chunk, has_input_state=True, Cu_Seqlens=cu_seqlens)
    return dict(zip(OUTPUTS, out, strict=True))


def main() -> None:
    a = parse_args()
    start(a, "mamba-ssm", "mamba_ssm")
    torch = require_cuda("needs a CUDA GPU (Triton kernels with TMA descriptors)")
    import triton
    from mamba_ssm.ops.triton.mamba3 import mamba3_siso_bwd
    from mamba_ssm.ops.triton.mamba3.mamba3_siso_combined import _triton_alloc_fn

    triton.set_allocator(_triton_alloc_fn)  # what the autograd backward does before launching
    device = "cuda"
    is_patched = patched()
    config = pin_config(triton, mamba3_siso_bwd, a.config)
    meta = {"heads": a.heads, "N": a.headdim_qk, "P": a.headdim_v, "chunk": a.chunk, "batch": a.batch,
            "seqlen": a.seqlen, "varlen": a.varlen, "config": config}
    figure("problem", meta, job=job())

    lengths = a.varlen
    cu = torch.tensor([0] + [sum(lengths[: i + 1]) for i in range(len(lengths))], dtype=torch.int32, device=device)
    cases = {
        "dense": (make_inputs(torch, a, a.batch, a.seqlen, None, seed=4, device=device), None),
        "varlen": (make_inputs(torch, a, 1, int(cu[-1]), cu.cpu(), seed=14, device=device), cu),
    }
    results, deterministic = {}, True
    for case, (inputs, cu_seqlens) in cases.items():
        first = run(mamba3_siso_bwd.compute_dqkv, inputs, a, cu_seqlens)
        second = run(mamba3_siso_bwd.compute_dqkv, inputs, a, cu_seqlens)
        for name in OUTPUTS:
            same = torch.equal(first[name], second[name])
            deterministic &= same
            if not same:
                figure("run_to_run_differs", True, case=case, tensor=name)
            results[f"{case}:{name}"] = first[name]

    if not a.no_perf:
        perf_inputs = make_inputs(torch, a, a.perf_batch, a.perf_seqlen, None, seed=24, device=device)
        timed = {"this_build": mamba3_siso_bwd}
        baseline = load_baseline_module("mamba_ssm.ops.triton.mamba3.mamba3_siso_bwd", "p04_baseline_siso_bwd") \
            if is_patched else None
        if baseline is not None:
            pin_config(triton, baseline, a.config)
            timed = {"baseline": baseline, "patched": mamba3_siso_bwd}
        timings = compare({name: (lambda m=m: run(m.compute_dqkv, perf_inputs, a, None)) for name, m in timed.items()},
                          reference="baseline" if baseline is not None else None, warmup=3, repeat=30,
                          profile_repeat=10)
        for name, t in timings.items():
            report("compute_dqkv_timing", t, build=name, batch=a.perf_batch, seqlen=a.perf_seqlen, heads=a.heads)
        if baseline is not None:
            p, b = timings["patched"], timings["baseline"]
            kernel = p["ratio_to_baseline"] is not None
            figure("bwd_time_ratio_patched_over_baseline",
                   p["ratio_to_baseline"] if kernel else p["wall_ratio_to_baseline"],
                   basis="kernel_ms" if kernel else "wall_ms", wall_ratio=p["wall_ratio_to_baseline"],
                   patched_kernel_ms=p["kernel_ms"], baseline_kernel_ms=b["kernel_ms"],
                   patched_wall_ms=p["wall_ms"], baseline_wall_ms=b["wall_ms"],
                   host_bound=[b["host_bound"], p["host_bound"]],
                   note="both kernels timed in this process, calls interleaved (timing_kit.compare)")

    if not is_patched:
        save_results("repro-baseline", meta, results)
        if deterministic:
            verdict("contract-held", contract="baseline compute_dqkv is bitwise deterministic run to run",
                    outputs=len(results))
        else:
            verdict("contract-broken", contract="baseline compute_dqkv is bitwise deterministic run to run")
        return

    base = load_results("repro-baseline", meta)
    save_results("repro-patched", meta, results)
    differ = []
    for key, t in results.items():
        b = base.get(key)
        same = b is not None and torch.equal(t.cpu(), b)
        figure("bitwise_equal", same, output=key)
        if not same:
            differ.append(key)
    if differ or not deterministic:
        verdict("equivalence-broken", differ=differ, patched_deterministic=deterministic)
    else:
        verdict("equivalence-verified", outputs=sorted(results), cases=list(cases))

if __name__ == "__main__":
    main()
