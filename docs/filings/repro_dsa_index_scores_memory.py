"""DSA index scores: avoid the [sq,b,h,sk] fp32 einsum intermediate: a self-contained reproducer.

Needs megatron-core (the package under test) importable, torch. Nothing else: every helper it uses
is copied in below.


Method notes:

Pack 12: megatron-core DSA ``_compute_index_scores`` and its [sq, b, h, sk] FP32 intermediate.

Question asked on every lane: does the installed build's
``megatron.core.transformer.experimental_attention_variant.dsa._compute_index_scores``
allocate a tensor with one score per (query, batch, head, key) -- h times the size of its
[b, sq, sk] result -- and, on patched lanes, does the head-by-head version give the same
result with only one head's scores in flight?

* CPU lanes (small shape): every tensor an aten op returns inside the call is seen through a
  TorchDispatchMode; the largest storage is compared with the result's size.
  ``bug``: BUG_REPRODUCED when the largest storage holds >= h x the result.
  ``fix`` (``with_baseline``): the real baseline function, loaded from the unpatched build
  the harness names in HARNESS_BASELINE_SITE, is run on the same inputs: max relative drift
  of outputs and of q/k/weights gradients (bf16 inputs, FP32 compute), largest intermediate
  <= the result's size, and torch.autograd.gradcheck of the patched function in float64.
* CUDA lane (``memory``, ``with_baseline``): sq = sk = 4096, b = 8, h = 32, d = 128 bf16 (the
  article's shape), no grad: peak allocation above the output for baseline and patched, median
  time of each, output drift. MEMORY_SAVE_VERIFIED when the patched working set is <= 1/8 of the
  baseline's and the time ratio is <= 1.1.

    HARNESS_LANE=bug-0.19.2-cpu python pack12_dsa_index_scores_memory.py [--lane NAME]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
from pathlib import Path


# ---- from _lane.py (verbatim) ----
import json
import platform
from importlib import metadata


SENTINELS = {
    "BUG_REPRODUCED": "the bug shows on this build",
    "BUG_ABSENT": "the bug does not show on this build (regression coverage)",
    "FIX_VALIDATED": "the patched build behaves correctly",
    "FIX_FAILED": "the patched build still misbehaves",
    "MEMORY_SAVE_VERIFIED": "the patched build saves the claimed memory",
    "MEMORY_SAVE_MISSING": "the claimed memory saving is not there",
    "EQUIVALENCE_VERIFIED": "patched and baseline results are identical",
    "EQUIVALENCE_BROKEN": "patched and baseline results differ",
    "REGRESSION_GUARD_PASSED": "an upstream fix still holds",
    "REGRESSION_GUARD_FAILED": "an upstream fix regressed",
    "CONTRACT_HELD": "a boundary contract holds",
    "CONTRACT_BROKEN": "a boundary contract is violated",
    "CONTRACT_VIOLATION_DETECTED": "a deliberately wrong lane was caught, and identified, by the contract check",
    "CONTRACT_VIOLATION_MISSED": "a deliberately wrong lane passed the contract check (the check is blind)",
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
    """Print the HOST_STAMP line. Call it before anything else prints."""
    facts = {
        "host_python": platform.python_version(),
        "platform": platform.platform(),
        "pack": os.environ.get("HARNESS_PACK"),
        "lane": os.environ.get("HARNESS_LANE"),
        "target": os.environ.get("HARNESS_TARGET"),
        "base": os.environ.get("HARNESS_BASE"),
        "base_commit": os.environ.get("HARNESS_BASE_COMMIT"),
        "patched": os.environ.get("HARNESS_PATCHED"),
        "build_key": os.environ.get("HARNESS_BUILD_KEY"),
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
    _emit("HOST_STAMP", facts)
    return facts


def figure(name: str, value, unit: str | None = None, **context) -> None:
    """Report one measured number; it lands in the receipt's ``figures``."""
    _emit("FIGURE", {"name": name, "value": value, "unit": unit, **context})


def verdict(sentinel: str, **details) -> None:
    """Report the lane's observation. Call it once, last."""
    if sentinel not in SENTINELS:
        raise ValueError(f"unknown sentinel {sentinel!r}; known: {sorted(SENTINELS)}")
    _emit(sentinel, details)


def skip(reason: str) -> None:
    """Say the reproducer cannot run on this host and exit with the skip code."""
    _emit("SKIPPED", {"reason": reason})
    sys.exit(3)


def lane() -> str:
    """The lane name the harness is running (``HARNESS_LANE``), or 'manual'."""
    return os.environ.get("HARNESS_LANE", "manual")


# ---- the reproducer ----

MODULE = "megatron.core.transformer.experimental_attention_variant.dsa"
CPU_SHAPE = (64, 48, 2, 8, 16)  # sq, sk, b, h, d
GRADCHECK_SHAPE = (5, 4, 2, 3, 4)
GPU_SHAPE = (4096, 4096, 8, 32, 128)  # the article's: ~16 GiB einsum intermediate
DRIFT_MAX = 1e-5  # FP32 accumulation order only
MEMORY_RATIO_MAX = 1 / 8
TIME_RATIO_MAX = 1.1


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lane", help="lane name; overrides HARNESS_LANE")
    return p.parse_args()


def load_baseline():
    """The unpatched dsa module, from the build the harness names (same megatron otherwise)."""
    site = os.environ.get("HARNESS_BASELINE_SITE")
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


def cpu_lane(torch, dsa, baseline, name):
    sq, sk, b, h, d = CPU_SHAPE
    q, w, k = inputs(torch, CPU_SHAPE, torch.bfloat16, "cpu", seed=12)
    out, (big, big_shape) = largest_storage(torch, dsa._compute_index_scores, q, w, k, use_relu=True)
    result_bytes = out.untyped_storage().nbytes()
    figure("largest_intermediate_bytes", big, "B", shape=big_shape, result_bytes=result_bytes,
           heads=h, sq=sq, sk=sk, b=b, d=d)
    materializes = big >= h * result_bytes
    failures = []
    if not name.startswith("fix"):
        return ("BUG_REPRODUCED" if materializes else "BUG_ABSENT"), {
            "largest_intermediate_bytes": big, "result_bytes": result_bytes, "heads": h}
    if big > result_bytes:
        failures.append(f"largest intermediate {big} B > result {result_bytes} B")
    if baseline is None:
        failures.append("no baseline build (HARNESS_BASELINE_SITE unset): lane needs with_baseline = true")
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
    return ("FIX_FAILED" if failures else "FIX_VALIDATED"), {"failures": failures}


def gpu_lane(torch, dsa, baseline):
    if not torch.cuda.is_available():
        skip("no CUDA device")
    if baseline is None:
        return "MEMORY_SAVE_MISSING", {"failures": ["lane needs with_baseline = true"]}
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

    def median_ms(fn, repeat=5):
        times = []
        with torch.no_grad():
            fn(q, w, k, use_relu=True)
            for _ in range(repeat):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                s.record()
                fn(q, w, k, use_relu=True)
                e.record()
                torch.cuda.synchronize()
                times.append(s.elapsed_time(e))
        return statistics.median(times)

    t_base = median_ms(baseline._compute_index_scores)
    t_new = median_ms(dsa._compute_index_scores)
    figure("baseline_ms", t_base, "ms", **shape)
    figure("patched_ms", t_new, "ms", **shape)
    figure("time_ratio_patched_over_baseline", t_new / t_base, None, **shape)
    mem_ratio = work["patched"] / max(work["baseline"], 1)
    figure("working_set_ratio_patched_over_baseline", mem_ratio, None, **shape)
    failures = []
    if mem_ratio > MEMORY_RATIO_MAX:
        failures.append(f"working set ratio {mem_ratio:.3g} > {MEMORY_RATIO_MAX}")
    if t_new / t_base > TIME_RATIO_MAX:
        failures.append(f"time ratio {t_new / t_base:.3g} > {TIME_RATIO_MAX}")
    if drift > DRIFT_MAX:
        failures.append(f"output drift {drift:.3g} > {DRIFT_MAX}")
    details = {"failures": failures, "baseline_working_set_gib": work["baseline"] / gib,
               "patched_working_set_gib": work["patched"] / gib, "time_ratio": t_new / t_base}
    return ("MEMORY_SAVE_MISSING" if failures else "MEMORY_SAVE_VERIFIED"), details


def main() -> int:
    args = parse_args()
    if args.lane:
        os.environ["HARNESS_LANE"] = args.lane
    stamp("megatron-core", MODULE)

    import torch

    dsa = importlib.import_module(MODULE)
    baseline = load_baseline()
    name = lane()
    if name.startswith("memory"):
        sentinel, details = gpu_lane(torch, dsa, baseline)
    else:
        sentinel, details = cpu_lane(torch, dsa, baseline, name)
    verdict(sentinel, lane=name, question="does _compute_index_scores build the [sq,b,h,sk] intermediate?",
            **details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
