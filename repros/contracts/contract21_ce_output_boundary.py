"""Contract 21: the output layer's logits-to-loss boundary, fused vs plain (single GPU).

Two lanes, chosen with ``--check``:

* ``parity`` -- the fused linear+cross-entropy path (the installed Liger) against a
  plain output layer (``hidden @ W.T`` materialized, then ``F.cross_entropy``), with
  ignore_index tokens and the mean taken over the non-padding tokens, in float32 and
  bfloat16. Both are compared with a float64 reference; the fused path may sit at most
  ``K_NOISE`` times further from it than the plain path does (the plain path's own error is
  the dtype's noise on this very problem). Loss, grad of the input and grad of the
  weight are all checked. -> CONTRACT_HELD / CONTRACT_BROKEN.
* ``memory`` -- peak device memory of fused vs plain forward+backward at
  B=4, S=4096, V=151936 (bf16 logits alone: 4.98 GB). The fused path must stay below
  one [B*S, V] logits slab, i.e. it never materializes the logits; the plain path
  necessarily holds at least that. -> MEMORY_SAVE_VERIFIED / MEMORY_SAVE_MISSING.
"""

from __future__ import annotations

import sys

from _lane import figure, lane, parser, require_cuda, start, verdict
from _numerics import K_NOISE, rel_fro, tolerance

IGNORE = -100
PARITY_SHAPE = (4, 1024, 1024, 32000)  # B, S, H, V
MEMORY_SHAPE = (4, 4096, 4096, 151936)


def problem(torch, b, s, h, v, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b * s, h, generator=g)
    w = torch.randn(v, h, generator=g) * (4.0 / h**0.5)
    t = torch.randint(0, v, (b * s,), generator=g)
    t[torch.rand(b * s, generator=g) < 0.2] = IGNORE  # padding / ignored positions
    return x.to(dtype).to(device), w.to(dtype).to(device), t.to(device)


def run_path(torch, F, path, x, w, t):
    x = x.detach().clone().requires_grad_(True)
    w = w.detach().clone().requires_grad_(True)
    if path == "fused":
        from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction

        loss = LigerFusedLinearCrossEntropyFunction.apply(x, w, t, None, None, IGNORE, 0.0, 0.0, "mean")[0]
    else:  # plain output layer: materialized logits, then CE over non-padding tokens
        logits = x @ w.t()
        loss = F.cross_entropy(logits.float() if x.dtype == torch.float64 else logits, t,
                               ignore_index=IGNORE, reduction="mean")
    loss.backward()
    return loss.detach(), x.grad, w.grad


def parity(torch, F, device) -> None:
    b, s, h, v = PARITY_SHAPE
    broken = []
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).replace("torch.", "")
        x, w, t = problem(torch, b, s, h, v, dtype, device, seed=21)
        ref = run_path(torch, F, "plain", x.double(), w.double(), t)
        plain = run_path(torch, F, "plain", x, w, t)
        fused = run_path(torch, F, "fused", x, w, t)
        eps = torch.finfo(dtype).eps
        for i, what in enumerate(("loss", "grad_input", "grad_weight")):
            noise = rel_fro(plain[i], ref[i])
            err = rel_fro(fused[i], ref[i])
            # K_NOISE * max(noise, eps): a single scalar (the loss) can sit near zero error by chance
            tol = tolerance(noise, K_NOISE * eps)
            figure("fused_rel_err", err, None, dtype=name, tensor=what, plain_rel_err=noise, tolerance=tol,
                   over_tolerance=err > tol)
            if err > tol:
                broken.append(f"{name} {what}: {err:.3g} > {tol:.3g}")
    shape = dict(zip("bshv", PARITY_SHAPE, strict=True))
    details = {"lane": lane(), "shape": shape, "ignore_fraction": 0.2, "normalization": "mean over non-padding tokens",
               "k_noise": K_NOISE, "broken": broken}
    verdict("CONTRACT_BROKEN" if broken else "CONTRACT_HELD", **details)


def peak(torch, fn) -> int | None:
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    try:
        fn()
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError:
        return None
    return torch.cuda.max_memory_allocated() - base


def memory(torch, F, device) -> None:
    b, s, h, v = MEMORY_SHAPE
    x, w, t = problem(torch, b, s, h, v, torch.bfloat16, device, seed=22)
    slab = b * s * v * 2  # one bf16 [B*S, V] logits tensor
    peaks = {}
    for path in ("fused", "plain"):
        peaks[path] = peak(torch, lambda path=path: run_path(torch, F, path, x, w, t))  # grads freed on return
        figure(f"{path}_peak_bytes", peaks[path], "B", oom=peaks[path] is None)
    figure("logits_slab_bytes", slab, "B", b=b, s=s, v=v, dtype="bfloat16")
    fused, plain = peaks["fused"], peaks["plain"]
    saved = fused is not None and fused < slab and (plain is None or plain >= slab)
    if fused is not None and plain is not None:
        figure("fused_over_plain_peak_ratio", fused / plain, None)
    verdict("MEMORY_SAVE_VERIFIED" if saved else "MEMORY_SAVE_MISSING", lane=lane(),
            fused_gb=None if fused is None else fused / 1e9, plain_gb=None if plain is None else plain / 1e9,
            slab_gb=slab / 1e9, plain_oom=plain is None)


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--check", choices=("parity", "memory"), required=True)
    args = p.parse_args()
    start(args, "liger-kernel", "liger_kernel.ops.fused_linear_cross_entropy")
    torch = require_cuda("no CUDA device")
    import torch.nn.functional as F

    (parity if args.check == "parity" else memory)(torch, F, "cuda")
    return 0


if __name__ == "__main__":
    sys.exit(main())
