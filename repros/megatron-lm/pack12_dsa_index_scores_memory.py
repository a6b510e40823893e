"""Pack 12: megatron-core DSA ``_compute_index_scores`` and its [sq, b, h, sk] FP32 intermediate.

Question asked on every lane: does the installed build's
``megatron.core.transformer.experimental_attention_variant.dsa._compute_index_scores``
allocate a tensor with one score per (query, batch, head, key) -- h times the size of its
[b, sq, sk] result -- and, on patched lanes, does the head-by-head version give the same
result with only one head's scores in flight?

* ``--check cpu`` (the default; small shape): every tensor an aten op returns inside the call is
  seen through a TorchDispatchMode; the largest storage is compared with the result's size.
  Unpatched build: BUG_REPRODUCED when the largest storage holds >= h x the result.
  Patched build (lane ``with_baseline``): the real baseline function, loaded from the unpatched build
  the harness names in HARNESS_BASELINE_SITE, is run on the same inputs: max relative drift
  of outputs and of q/k/weights gradients (bf16 inputs, FP32 compute), largest intermediate
  <= the result's size, and torch.autograd.gradcheck of the patched function in float64.
* ``--check memory`` (CUDA, lane ``with_baseline``): sq = sk = 4096, b = 8, h = 32, d = 128 bf16
  (the article's shape), no grad: peak allocation above the output for baseline and patched;
  their times measured interleaved in one run by ``_timing.compare`` (kernel time from the
  profiler next to wall time); output drift. MEMORY_SAVE_VERIFIED when the patched working set
  is <= 1/8 of the baseline's and the time ratio is <= 1.1 -- the kernel-time ratio when the
  profiler measured one, else the wall-time ratio (the details say which).

    HARNESS_PATCHED=0 python pack12_dsa_index_scores_memory.py [--lane NAME] [--check cpu|memory]
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import _timing
from _lane import figure, lane, parser, patched, require_cuda, start, verdict

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
    require_cuda("no CUDA device")
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

    def call(fn):
        def run():
            with torch.no_grad():
                fn(q, w, k, use_relu=True)
        return run

    # one warm-up call each, then their calls interleaved: the ratio compares the same minute of the same GPU
    t = _timing.compare({"baseline": call(baseline._compute_index_scores), "patched": call(dsa._compute_index_scores)},
                        reference="baseline", warmup=1, repeat=5, profile_repeat=5)
    _timing.report("baseline_ms", t["baseline"], **shape)
    _timing.report("patched_ms", t["patched"], **shape)
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
    return ("MEMORY_SAVE_MISSING" if failures else "MEMORY_SAVE_VERIFIED"), details


def main() -> int:
    args = parse_args()
    start(args, "megatron-core", MODULE)

    import torch

    dsa = importlib.import_module(MODULE)
    baseline = load_baseline()
    if args.check == "memory":
        sentinel, details = gpu_lane(torch, dsa, baseline)
    else:
        sentinel, details = cpu_lane(torch, dsa, baseline)
    verdict(sentinel, lane=lane(), check=args.check,
            question="does _compute_index_scores build the [sq,b,h,sk] intermediate?", **details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
