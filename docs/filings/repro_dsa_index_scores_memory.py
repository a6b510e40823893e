"""DSA: compute indexer scores head by head instead of one einsum: a self-contained reproducer.

Needs megatron-core (the package under test) importable, torch, a CUDA GPU. Nothing else: every
helper it uses is copied in below.

Run it once per build, from one directory:

  1. NVIDIA/Megatron-LM main at d98e8a64dd unchanged (CPU is enough):
       python repro_dsa_index_scores_memory.py --unpatched
  2. NVIDIA/Megatron-LM main at d98e8a64dd with this PR (CPU is enough):
       python repro_dsa_index_scores_memory.py --patched --baseline-site $RELEASED_SITE
  3. NVIDIA/Megatron-LM main at d98e8a64dd with this PR (CUDA GPU):
       python repro_dsa_index_scores_memory.py --patched --baseline-site $RELEASED_SITE --check memory

RELEASED_SITE is a directory holding NVIDIA/Megatron-LM main at d98e8a64dd unchanged, e.g. made with
'pip install --no-deps --target DIR .' in a checkout of NVIDIA/Megatron-LM main at d98e8a64dd: the
run compares the changed function with that one in one process.

Each run prints one JSON line per measurement and ends with a line naming what it observed.

Method notes:

This change: megatron-core DSA ``_compute_index_scores`` and its [sq, b, h, sk] FP32 intermediate.

Question asked on every job: does the installed build's
``megatron.core.transformer.experimental_attention_variant.dsa._compute_index_scores``
allocate a tensor with one score per (query, batch, head, key) -- h times the size of its
[b, sq, sk] result -- and, on patched jobs, does the head-by-head version give the same
result with only one head's scores in flight?

* ``--check cpu`` (the default; small shape): every tensor an aten op returns inside the call is
  seen through a TorchDispatchMode; the largest storage is compared with the result's size.
  Unpatched build: bug-reproduced when the largest storage holds >= h x the result.
  Patched build (job ``with_baseline``): the real baseline function, loaded from the unpatched build
  the runner names in REPRO_BASELINE_SITE, is run on the same inputs: max relative drift
  of outputs and of q/k/weights gradients (bf16 inputs, FP32 compute), largest intermediate
  <= the result's size, and torch.autograd.gradcheck of the patched function in float64.
* ``--check memory`` (CUDA, job ``with_baseline``): sq = sk = 4096, b = 8, h = 32, d = 128 bf16
  (the article's shape), no grad: peak allocation above the output for baseline and patched;
  their times measured interleaved in one run by ``timing_kit.compare`` (kernel time from the
  profiler next to wall time); output drift. memory-save-verified when the patched working set
  is <= 1/8 of the baseline's and the time ratio is <= 1.1 -- the kernel-time ratio when the
  profiler measured one, else the wall-time ratio (the details say which).

    python repro_dsa_index_scores_memory.py [--job NAME] [--check cpu|memory] --unpatched
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


import importlib.util
import os
import sys
from pathlib import Path


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


# ---- from kit.py (verbatim) ----
import argparse
import json
import platform
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


import types as _types

timing_kit = _types.SimpleNamespace(compare=compare, report=report)


# ---- the reproducer ----

MODULE = "megatron.core.transformer.experimental_attention_variant.dsa"
CPU_SHAPE = (64, 48, 2, 8, 16)  # sq, sk, b, h, d
GRADCHECK_SHAPE = (5, 4, 2, 3, 4)
GPU_SHAPE = (4096, 4096, 8, 32, 128)  # the article's: ~16 GiB einsum intermediate
DRIFT_MAX = 1e-5  # FP32 accumulation order only
MEMORY_RATIO_MAX = 1 / 8
TIME_RATIO_MAX = 1.1


def parse_args():
    p = parser(__doc__)
    p.add_argument("--check", choices=("cpu", "memory"), default="cpu",
                   help="cpu: intermediates and drift at a small shape; memory: the article's shape on a GPU")
    return p.parse_args()


def load_baseline():
    """The unpatched dsa module, from the build the runner names (same megatron otherwise)."""
    site = os.environ.get("REPRO_BASELINE_SITE")
    if not site:
        return None
    path = Path(site) / (MODULE.replace(".", "/") + ".py")
    spec = importlib.util.spec_from_file_location("baseline_dsa", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    figure("baseline_module_file", str(path), None)
    return mod


def inputs(torch, shape, dtype, device, seed, requires_grad=False):
    sq, sk, b, h, d = shape
    g = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(sq, b, h, d, generator=g, device=device).to(dtype)
    k = torch.randn(sk, b, d, generator=g, device=device).to(dtype)
    w = (torch.randn(sq, b, h, generator=g, device=device) / h**0.5).to(dtype)
    return [t.requires_grad_(requires_grad) for t in (q, w, k)]


def largest_storage(torch, fn, *args, **kwargs):
    """Bytes of the largest storage any aten op returned while ``fn`` ran, and its shape.

    Views of the inputs (slices, permutes) share the inputs' storage and are not counted."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    given = {t.untyped_storage().data_ptr() for t in args if isinstance(t, torch.Tensor)}

    class Watch(TorchDispatchMode):
        biggest = (0, None)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in given:
                    n = t.untyped_storage().nbytes()
                    if n > self.biggest[0]:
                        self.biggest = (n, list(t.shape))
            return out

    with Watch() as w:
        result = fn(*args, **kwargs)
    return result, w.biggest


def rel_drift(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-300)).item()


def cpu_lane(torch, dsa, baseline):
    sq, sk, b, h, d = CPU_SHAPE
    q, w, k = inputs(torch, CPU_SHAPE, torch.bfloat16, "cpu", seed=12)
    out, (big, big_shape) = largest_storage(torch, dsa._compute_index_scores, q, w, k, use_relu=True)
    result_bytes = out.untyped_storage().nbytes()
    figure("largest_intermediate_bytes", big, "B", shape=big_shape, result_bytes=result_bytes,
           heads=h, sq=sq, sk=sk, b=b, d=d)
    materializes = big >= h * result_bytes
    failures = []
    if not patched():
        return ("bug-reproduced" if materializes else "bug-absent"), {
            "largest_intermediate_bytes": big, "result_bytes": result_bytes, "heads": h}
    if big > result_bytes:
        failures.append(f"largest intermediate {big} B > result {result_bytes} B")
    if baseline is None:
        failures.append("no baseline build (REPRO_BASELINE_SITE unset): job needs with_baseline = true")
    else:
        for relu in (True, False):
            qs, ws, ks = inputs(torch, CPU_SHAPE, torch.bfloat16, "cpu", seed=13, requires_grad=True)
            qb, wb, kb = (t.detach().clone().requires_grad_(True) for t in (qs, ws, ks))
            new = dsa._compute_index_scores(qs, ws, ks, use_relu=relu)
            old = baseline._compute_index_scores(qb, wb, kb, use_relu=relu)
            g = torch.randn(old.shape, generator=torch.Generator().manual_seed(14))
            new.backward(g)
            old.backward(g)
            drifts = {"output": rel_drift(new, old), "dtype_equal": new.dtype == old.dtype,
                      "shape_equal": new.shape == old.shape}
            for nm, a, ref in (("grad_q", qs.grad, qb.grad), ("grad_weights", ws.grad, wb.grad),
                               ("grad_k", ks.grad, kb.grad)):
                drifts[nm] = rel_drift(a.float(), ref.float())
            figure("max_rel_drift_vs_baseline", drifts, None, use_relu=relu, inputs="bfloat16")
            if not (drifts["dtype_equal"] and drifts["shape_equal"]):
                failures.append(f"use_relu={relu}: dtype/shape differ from baseline")
            if drifts["output"] > DRIFT_MAX:
                failures.append(f"use_relu={relu}: output drift {drifts['output']:.3g} > {DRIFT_MAX}")
            # bf16 grads: the rounding of the final cast dominates; allow a couple of bf16 ulps
            for nm in ("grad_q", "grad_weights", "grad_k"):
                if drifts[nm] > 2 * torch.finfo(torch.bfloat16).eps:
                    failures.append(f"use_relu={relu}: {nm} drift {drifts[nm]:.3g}")
    for relu in (True, False):
        args = inputs(torch, GRADCHECK_SHAPE, torch.float64, "cpu", seed=15, requires_grad=True)
        try:
            ok = torch.autograd.gradcheck(lambda q, w, k, r=relu: dsa._compute_index_scores(q, w, k, use_relu=r),
                                          args, eps=1e-6, atol=1e-7)
        except RuntimeError as exc:
            ok = False
            figure("gradcheck_error", str(exc)[:400], None, use_relu=relu)
        figure("gradcheck_float64", ok, None, use_relu=relu, shape=list(GRADCHECK_SHAPE))
        if not ok:
            failures.append(f"gradcheck failed (use_relu={relu})")
    return ("fix-failed" if failures else "fix-validated"), {"failures": failures}


def gpu_lane(torch, dsa, baseline):
    require_cuda("no CUDA device")
    if baseline is None:
        return "memory-save-missing", {"failures": ["job needs with_baseline = true"]}
    sq, sk, b, h, d = GPU_SHAPE
    shape = {"sq": sq, "sk": sk, "b": b, "h": h, "d": d, "dtype": "bfloat16"}
    q, w, k = inputs(torch, GPU_SHAPE, torch.bfloat16, "cuda", seed=12)
    result_bytes = b * sq * sk * 4
    gib = 2.0**30

    def measure(fn):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        with torch.no_grad():
            out = fn(q, w, k, use_relu=True)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - start
        return out, peak - result_bytes

    outs, work = {}, {}
    for label, mod in (("baseline", baseline), ("patched", dsa)):
        outs[label], work[label] = measure(mod._compute_index_scores)
        figure(f"{label}_working_set_gib", work[label] / gib, "GiB", excludes="the [b,sq,sk] fp32 result", **shape)
        if label == "baseline":
            outs[label] = outs[label].cpu()
    drift = rel_drift(outs["patched"].cpu(), outs["baseline"])
    figure("max_rel_drift_vs_baseline", drift, None, **shape)
    del outs
    torch.cuda.empty_cache()

    def call(fn):
        def run():
            with torch.no_grad():
                fn(q, w, k, use_relu=True)
        return run

    # one warm-up call each, then their calls interleaved: the ratio compares the same minute of the same GPU
    t = timing_kit.compare({"baseline": call(baseline._compute_index_scores), "patched": call(dsa._compute_index_scores)},
                        reference="baseline", warmup=1, repeat=5, profile_repeat=5)
    timing_kit.report("baseline_ms", t["baseline"], **shape)
    timing_kit.report("patched_ms", t["patched"], **shape)
    kernel_ratio, wall_ratio = t["patched"]["ratio_to_baseline"], t["patched"]["wall_ratio_to_baseline"]
    time_ratio, clock = (kernel_ratio, "kernel") if kernel_ratio is not None else (wall_ratio, "wall")
    figure("time_ratio_patched_over_baseline", time_ratio, None, clock=clock, kernel_ratio=kernel_ratio,
           wall_ratio=wall_ratio, note=t["patched"]["note"], **shape)
    mem_ratio = work["patched"] / max(work["baseline"], 1)
    figure("working_set_ratio_patched_over_baseline", mem_ratio, None, **shape)
    failures = []
    if mem_ratio > MEMORY_RATIO_MAX:
        failures.append(f"working set ratio {mem_ratio:.3g} > {MEMORY_RATIO_MAX}")
    if time_ratio > TIME_RATIO_MAX:
        failures.append(f"{clock}-time ratio {time_ratio:.3g} > {TIME_RATIO_MAX}")
    if drift > DRIFT_MAX:
        failures.append(f"output drift {drift:.3g} > {DRIFT_MAX}")
    details = {"failures": failures, "baseline_working_set_gib": work["baseline"] / gib,
               "patched_working_set_gib": work["patched"] / gib, "time_ratio": time_ratio,
               "time_ratio_clock": clock, "kernel_time_ratio": kernel_ratio, "wall_time_ratio": wall_ratio}
    return ("memory-save-missing" if failures else "memory-save-verified"), details


def main() -> int:
    args = parse_args()
    start(args, "megatron-core", MODULE)

    import torch

    dsa = importlib.import_module(MODULE)
    baseline = load_baseline()
    if args.check == "memory":
        outcome, details = gpu_lane(torch, dsa, baseline)
    else:
        outcome, details = cpu_lane(torch, dsa, baseline)
    verdict(outcome, job=job(), check=args.check,
            question="does _compute_index_scores build the [sq,b,h,sk] intermediate?", **details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
