"""Pack 09: liger-kernel fused linear cross entropy, reduction='none', per-token grad_output.

Question asked on every lane: does LigerFusedLinearCrossEntropyFunction give the right
grad_input / grad_weight when the upstream gradient of its per-token loss is not the
same for every token (a loss mask with zeros, or per-token weights)?

How "right" is judged without guessing a tolerance:

* reference: the same (already rounded) inputs in float64, eager ``x @ W.T`` and
  ``F.cross_entropy(reduction='none')``, the same per-token upstream gradient, autograd;
* control: the installed Liger with a *uniform* upstream gradient (``loss.sum()``) on
  the very same problem. Its distance to the reference is what this dtype costs on this
  problem, bugs aside;
* the non-uniform run is wrong when its relative Frobenius error exceeds
  ``max(K * control, floor)``; ``floor`` is the dtype's machine epsilon. Max abs errors are
  reported next to the control's but do not decide: one extreme element is a noisy statistic.

Also measured (figures, not the verdict): the "mean x n_valid" mitigation, the time of
reduction='none' forward+backward against reduction='mean' (GPU; both timed in this process,
calls interleaved, kernel time next to wall time: ``_timing.compare``), and, with ``--memory``,
the peak memory of the fused path against materialized logits (GPU).

    python pack09_flce_none_backward.py --unpatched [--lane NAME] [--quick] [--memory]
"""

from __future__ import annotations

import argparse
import os
import sys

from _lane import figure, lane, observed, parser, skip, start
from _numerics import K_NOISE, max_abs, rel_fro
from _timing import compare as time_compare
from _timing import report

IGNORE = -100
CONTROL_SANE = 0.05  # a uniform-grad_output run further off than this is broken in its own right
LOGIT_STD = 4.0  # logits std of several units: bf16 rounding of grads is far from negligible
ACCURACY_SHAPE = (4096, 1024, 32000)  # (BT, H, V): 32 token chunks inside Liger
QUICK_SHAPE = (96, 32, 512)  # 12 token chunks, a few seconds under TRITON_INTERPRET=1
PERF_SHAPE = (8192, 4096, 128256)  # bf16, Llama-3 vocabulary
MEMORY_SHAPE = (16384, 4096, 128256)  # bf16; eager logits alone are 4.2 GB


def parse_args() -> argparse.Namespace:
    p = parser(__doc__)
    p.add_argument("--quick", action="store_true", help="tiny shapes, no timing or memory (CPU / interpreter)")
    p.add_argument("--memory", action="store_true",
                   help="GPU: also measure peak memory of the fused path against materialized logits")
    return p.parse_args()


# --------------------------------------------------------------------------- problem


def make_problem(torch, bt, h, v, dtype, device, seed):
    """hidden [bt,h], weight [v,h] scaled so logits have std ~LOGIT_STD, targets with ignores."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(bt, h, generator=g)
    w = torch.randn(v, h, generator=g) * (LOGIT_STD / h**0.5)
    t = torch.randint(0, v, (bt,), generator=g)
    t[torch.rand(bt, generator=g) < 0.15] = IGNORE
    t[0] = 1  # token 0 is the only one the scalar read sees; keep it a normal token
    # (a) loss mask with zeros, independent of the labels (e.g. document boundaries)
    mask = (torch.rand(bt, generator=g) > 0.35).float()
    mask[0] = 1.0
    # (b) positive per-token weights
    weights = 0.25 + 1.75 * torch.rand(bt, generator=g)
    return {
        "x": x.to(dtype).to(device),
        "w": w.to(dtype).to(device),
        "t": t.to(device),
        "mask": mask.to(device),
        "weights": weights.to(device),
    }


def liger_run(torch, flce, p, reduction, combine):
    """Liger forward+backward; ``combine`` turns Liger's loss output into the scalar to differentiate."""
    x = p["x"].detach().clone().requires_grad_(True)
    w = p["w"].detach().clone().requires_grad_(True)
    loss = flce.apply(x, w, p["t"], None, None, IGNORE, 0.0, 0.0, reduction)[0]
    obj = combine(loss)
    obj.backward()
    return obj.detach().double(), x.grad.double(), w.grad.double()


def reference_run(torch, F, p, token_grad):
    """float64 eager reference of sum_i token_grad[i] * ce_i."""
    x = p["x"].detach().double().requires_grad_(True)
    w = p["w"].detach().double().requires_grad_(True)
    per_token = F.cross_entropy(x @ w.t(), p["t"], ignore_index=IGNORE, reduction="none")
    obj = (per_token * token_grad.double()).sum()
    obj.backward()
    return obj.detach(), x.grad, w.grad


def compare(got, ref):
    (lg, xg, wg), (lr, xr, wr) = got, ref
    return {
        "loss_rel_err": abs((lg - lr).item()) / max(abs(lr.item()), 1e-300),
        "grad_input_rel_fro": rel_fro(xg, xr),
        "grad_weight_rel_fro": rel_fro(wg, wr),
        "grad_input_max_abs": max_abs(xg, xr),
        "grad_weight_max_abs": max_abs(wg, wr),
    }


# --------------------------------------------------------------------------- accuracy


def accuracy(torch, F, flce, shape, dtype, device, eps):
    """Control, the two non-uniform cases and the mitigation for one dtype. Returns case verdicts."""
    bt, h, v = shape
    name = str(dtype).replace("torch.", "")
    p = make_problem(torch, bt, h, v, dtype, device, seed=9)
    valid = (p["t"] != IGNORE).float()
    n_valid = valid.sum()
    ones = torch.ones(bt, device=device)

    control = compare(
        liger_run(torch, flce, p, "none", lambda loss: loss.sum()),
        reference_run(torch, F, p, ones),
    )
    tol = {}
    for tensor in ("grad_input", "grad_weight"):
        c = control[f"{tensor}_rel_fro"]
        tol[tensor] = max(K_NOISE * c, eps)
        figure("control_rel_fro", c, dtype=name, tensor=tensor)
        figure("control_max_abs", control[f"{tensor}_max_abs"], dtype=name, tensor=tensor)
        figure("tolerance_rel_fro", tol[tensor], dtype=name, tensor=tensor, k=K_NOISE, floor=eps)
    figure("control_loss_rel_err", control["loss_rel_err"], dtype=name)

    results = []
    if max(control["grad_input_rel_fro"], control["grad_weight_rel_fro"]) > CONTROL_SANE:
        results.append(
            {
                "dtype": name,
                "case": "control",
                "wrong": True,
                "why": f"uniform grad_output already off by more than {CONTROL_SANE}",
            }
        )

    cases = {"loss_mask": p["mask"], "token_weights": p["weights"]}
    for case, g in cases.items():
        got = compare(
            liger_run(torch, flce, p, "none", lambda loss, g=g: (loss * g).sum()),
            reference_run(torch, F, p, g),
        )
        wrong = False
        for tensor in ("grad_input", "grad_weight"):
            err = got[f"{tensor}_rel_fro"]
            over = err > tol[tensor]
            wrong |= over
            figure(
                "grad_rel_fro", err, dtype=name, case=case, tensor=tensor, tolerance=tol[tensor], over_tolerance=over
            )
            figure(
                "grad_max_abs",
                got[f"{tensor}_max_abs"],
                dtype=name,
                case=case,
                tensor=tensor,
                control=control[f"{tensor}_max_abs"],
            )
        figure("loss_rel_err", got["loss_rel_err"], dtype=name, case=case)
        results.append(
            {
                "dtype": name,
                "case": case,
                "wrong": wrong,
                "grad_input_rel_fro": got["grad_input_rel_fro"],
                "grad_weight_rel_fro": got["grad_weight_rel_fro"],
                "tol_grad_input": tol["grad_input"],
                "tol_grad_weight": tol["grad_weight"],
            }
        )

    # Mitigation: stay on reduction='mean' and multiply back. With the mask equal to
    # (labels != ignore_index) that is exactly the masked sum ...
    mit = compare(
        liger_run(torch, flce, p, "mean", lambda loss: loss * n_valid),
        reference_run(torch, F, p, valid),
    )
    mit_err = max(mit["grad_input_rel_fro"], mit["grad_weight_rel_fro"])
    exact = (
        mit["grad_input_rel_fro"] <= tol["grad_input"]
        and mit["grad_weight_rel_fro"] <= tol["grad_weight"]
        and mit["loss_rel_err"] <= max(K_NOISE * control["loss_rel_err"], eps)
    )
    figure(
        "mitigation_mask_rel_err",
        mit_err,
        dtype=name,
        loss_rel_err=mit["loss_rel_err"],
        grad_input_rel_fro=mit["grad_input_rel_fro"],
        grad_weight_rel_fro=mit["grad_weight_rel_fro"],
    )
    figure("MITIGATION_EXACT", exact, dtype=name, mask="labels != ignore_index")
    # ... with arbitrary per-token weights the best it can do is give every valid token the
    # average weight: report how far that is from the weighted objective.
    wsum = (p["weights"] * valid).sum()
    gap = compare(
        liger_run(torch, flce, p, "mean", lambda loss: loss * wsum),
        reference_run(torch, F, p, p["weights"]),
    )
    figure(
        "mitigation_weights_rel_err",
        max(gap["grad_input_rel_fro"], gap["grad_weight_rel_fro"]),
        dtype=name,
        loss_rel_err=gap["loss_rel_err"],
        grad_input_rel_fro=gap["grad_input_rel_fro"],
        grad_weight_rel_fro=gap["grad_weight_rel_fro"],
        approximation="mean x sum(weights)",
    )
    return results


# --------------------------------------------------------------------------- GPU only


def perf(torch, flce, device):
    """Median fwd+bwd time of reduction='none' (non-uniform grad_output) over reduction='mean'."""
    bt, h, v = PERF_SHAPE
    dtype = torch.bfloat16
    g = torch.Generator(device=device).manual_seed(0)
    x = (torch.randn(bt, h, device=device, generator=g)).to(dtype).requires_grad_(True)
    w = (torch.randn(v, h, device=device, generator=g) * (LOGIT_STD / h**0.5)).to(dtype).requires_grad_(True)
    t = torch.randint(0, v, (bt,), device=device, generator=g)
    t[::7] = IGNORE
    token_grad = 0.25 + 1.75 * torch.rand(bt, device=device, generator=g)

    def step_none():
        loss = flce.apply(x, w, t, None, None, IGNORE, 0.0, 0.0, "none")[0]
        (loss * token_grad).sum().backward()

    def step_mean():
        flce.apply(x, w, t, None, None, IGNORE, 0.0, 0.0, "mean")[0].backward()

    def fresh(step):
        def run():
            x.grad = w.grad = None  # every call starts from no gradient, as a training step does
            step()
        return run

    shape = {"bt": bt, "h": h, "v": v, "dtype": "bfloat16"}
    t = time_compare({"mean": fresh(step_mean), "none": fresh(step_none)}, reference="mean", warmup=2, repeat=7,
                     profile_repeat=5)
    report("mean_fwd_bwd_ms", t["mean"], **shape)
    report("none_fwd_bwd_ms", t["none"], grad_output="per-token weights", **shape)
    none = t["none"]
    kernel = none["ratio_to_mean"] is not None
    figure("none_over_mean_fwd_bwd_time_ratio", none["ratio_to_mean"] if kernel else none["wall_ratio_to_mean"], None,
           basis="kernel_ms" if kernel else "wall_ms", wall_ratio=none["wall_ratio_to_mean"],
           note="both timed in this process, calls interleaved (_timing.compare)", **shape)


def peak_bytes(torch, fn):
    """Peak allocation above the starting point while ``fn`` runs; None when it runs out of memory."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    try:
        fn()
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None
    return torch.cuda.max_memory_allocated() - base


def memory(torch, F, flce, device):
    """Peak memory of the fused path vs materialized logits, both forward+backward with reduction='none'."""
    bt, h, v = MEMORY_SHAPE
    dtype = torch.bfloat16
    g = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(bt, h, device=device, generator=g).to(dtype).requires_grad_(True)
    w = (torch.randn(v, h, device=device, generator=g) * (LOGIT_STD / h**0.5)).to(dtype).requires_grad_(True)
    t = torch.randint(0, v, (bt,), device=device, generator=g)
    t[::7] = IGNORE
    token_grad = 0.25 + 1.75 * torch.rand(bt, device=device, generator=g)

    def fused():
        loss = flce.apply(x, w, t, None, None, IGNORE, 0.0, 0.0, "none")[0]
        (loss * token_grad).sum().backward()

    def eager():
        logits = x @ w.t()
        loss = F.cross_entropy(logits, t, ignore_index=IGNORE, reduction="none")
        (loss * token_grad).sum().backward()

    shape = {"bt": bt, "h": h, "v": v, "dtype": "bfloat16", "grad_output": "per-token weights"}
    gib = 2.0**30
    results = {}
    for label, fn in (("liger", fused), ("eager", eager)):
        x.grad = w.grad = None
        peak = peak_bytes(torch, fn)
        x.grad = w.grad = None
        results[label] = peak
        if peak is None:
            figure(f"{label}_peak_mem_gib", None, "GiB", oom=True, **shape)
        else:
            figure(f"{label}_peak_mem_gib", peak / gib, "GiB", oom=False, **shape)
    if results["liger"] is not None and results["eager"] is not None:
        figure("liger_over_eager_peak_mem_ratio", results["liger"] / results["eager"], None, **shape)
    else:
        figure("liger_over_eager_peak_mem_ratio", None, None, oom=True, **shape)


# --------------------------------------------------------------------------- main


def main() -> int:
    args = parse_args()
    start(args, "liger-kernel", "liger_kernel.ops.fused_linear_cross_entropy")

    import torch
    import torch.nn.functional as F
    from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction as flce

    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if not torch.cuda.is_available() and not interpreted:
        skip("no CUDA device")
    on_gpu = torch.cuda.is_available() and not interpreted
    device = "cuda" if on_gpu else "cpu"
    quick = args.quick or not on_gpu
    name = lane()

    # several token chunks per call, so the per-token factor has to follow the chunking
    shape = QUICK_SHAPE if quick else ACCURACY_SHAPE
    figure(
        "accuracy_shape",
        list(shape),
        None,
        bt=shape[0],
        h=shape[1],
        v=shape[2],
        logit_std=LOGIT_STD,
        device=device,
        interpreted=interpreted,
    )

    results = []
    for dtype in (torch.float32, torch.bfloat16):
        results += accuracy(torch, F, flce, shape, dtype, device, eps=torch.finfo(dtype).eps)

    if on_gpu and not quick:
        perf(torch, flce, device)
        torch.cuda.empty_cache()
        if args.memory:
            memory(torch, F, flce, device)

    wrong = [r for r in results if r["wrong"]]
    details = {
        "lane": name,
        "question": "is the gradient wrong for a non-uniform per-token grad_output (reduction='none')?",
        "answer": "yes" if wrong else "no",
        "k_noise": K_NOISE,
        "results": results,
    }
    observed(bool(wrong), **details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
