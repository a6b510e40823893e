"""Pack 02's domain, one point: the fused SparseMLA dispatcher at (heads, v_channels, rope), in a process of its own.

Run by repros/kit/_domain.py (a ``domain = true`` lane) once per point of ``[packs.02.domain]``:

    python repros/megatron-lm/pack02_domain_point.py --point '{"heads": 64, "v_channels": 512, "rope": 128}'

The point: query width ``v_channels + rope`` (``v_channels`` value channels, which are also the key's "nope" part,
plus a rope tail), ``heads`` query heads, one KV head, batch 1, 128 tokens, top-k 64 causal indices (-1 where a
row has fewer keys), bf16 -- the call megatron's DSA makes (``dsa.py``: ``fused_sparse_mla_absorbed(...)``, and
the unfused path when it returns None).

* The build's dispatcher returns None: the point is **declined** (the caller's unfused fallback runs).
* It returns an output: the backward runs too, and out, dq and dkv are compared with a float64 sparse-attention
  reference written here from the math (softmax over the valid top-k keys of q.k * scale, value = the first
  v_channels of the gathered kv, a row with no valid key gives 0); **matched** when every tensor's max
  |got - ref| / max |ref| is within 8 bf16 units, else **mismatch**.
* Anything that raises (a compile, launch or shared-memory error, an illegal address) is left uncaught: the
  kit records the point as crashed, with the error line.

``--probe`` (the kit's ``--probe-declines``): the change's own guards lifted -- its dims rule
(``_is_supported_sparse_mla_dims``) and its shared-memory bound (``_sparse_mla_shared_memory_limit``) -- so the
kernels build and launch at a point the change declines; what they then do (a build or launch error, a wrong
result, a match) is what backs the decline or refutes it. The rules the unchanged dispatcher already had (head
count, dtypes, top-k) stay.

``base``: what the unchanged dispatcher does at the point, asked of the baseline build
(``HARNESS_BASELINE_SITE``, a ``with_baseline`` lane) with its kernel replaced by a recorder -- its shape checks
only, nothing launched. On the unpatched build it is the build's own answer.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import types
from pathlib import Path

from _numerics import BF16_FLOOR

OPS = "megatron.core.transformer.experimental_attention_variant.ops"
B, S, TOPK = 1, 128, 64
TOL = 8 * BF16_FLOOR  # max |got - ref| / max |ref| per tensor: 8 bf16 units of the tensor's scale


def emit(**result) -> None:
    print("DOMAIN_POINT " + json.dumps(result, sort_keys=True, default=str), flush=True)


def make_inputs(torch, heads: int, d_total: int, seed: int = 0):
    """q [B,S,H,Dt], kv [B,S,1,Dt] (bf16, CUDA) and causal top-k indices [B,S,1,K] (-1 = no key)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(B, S, heads, d_total, generator=g).to(torch.bfloat16)
    kv = torch.randn(B, S, 1, d_total, generator=g).to(torch.bfloat16)
    idx = torch.full((B, S, 1, TOPK), -1, dtype=torch.int32)
    for b in range(B):
        for i in range(S):
            pick = torch.randperm(i + 1, generator=g)[:TOPK]
            idx[b, i, 0, : pick.numel()] = pick.to(torch.int32)
    return q.cuda(), kv.cuda(), idx.cuda()


def reference(torch, q, kv, idx, d_v: int, scale: float):
    """float64 sparse attention over the gathered top-k keys (autograd gives dq, dkv)."""
    q = q.double().detach().requires_grad_(True)
    kv = kv.double().detach().requires_grad_(True)
    valid = idx[:, :, 0, :] >= 0
    safe = idx[:, :, 0, :].clamp(min=0).long()
    gathered = torch.stack([kv[b, safe[b], 0, :] for b in range(kv.size(0))])  # [B,S,K,Dt]
    scores = torch.einsum("bshd,bskd->bshk", q, gathered) * scale
    scores = scores.masked_fill(~valid[:, :, None, :], float("-inf"))
    p = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return q, kv, torch.einsum("bshk,bskd->bshd", p, gathered[..., :d_v])


def rel_err(torch, got, ref) -> float:
    return float((got.double() - ref.double()).abs().max() / ref.double().abs().max().clamp(min=1e-30))


def baseline_dispatcher():
    """The unchanged ops.tilelang_dsa, imported from HARNESS_BASELINE_SITE as a package of its own (or None)."""
    site = os.environ.get("HARNESS_BASELINE_SITE")
    if not site:
        return None
    pkg = types.ModuleType("p02_baseline_ops")
    pkg.__path__ = [str(Path(site) / OPS.replace(".", "/"))]
    sys.modules["p02_baseline_ops"] = pkg
    return importlib.import_module("p02_baseline_ops.tilelang_dsa")


def decision(torch, dsa, query, key, idx2, scale: float, d_v: int) -> str:
    """Whether ``dsa``'s dispatcher takes the fused path here: its kernel replaced by a recorder, nothing launched."""
    class Recorder:
        @staticmethod
        def apply(q, kv, indices, softmax_scale, *rest):
            return torch.zeros(*q.shape[:3], d_v, dtype=q.dtype, device=q.device), None

    real, dsa.SparseMLA = dsa.SparseMLA, Recorder
    try:
        out = dsa.fused_sparse_mla_absorbed(query.detach(), key.detach(), idx2, scale, d_v)
    finally:
        dsa.SparseMLA = real
    return "declined" if out is None else "admitted"


def lift(dsa) -> None:
    """Lift the guards the change adds (a probe): every width passes the dims rule and no device limit is read."""
    missing = [name for name in ("_is_supported_sparse_mla_dims", "_sparse_mla_shared_memory_limit")
               if not hasattr(dsa, name)]
    if missing:  # the kit reads this line: a crash here backs nothing
        print(f"PROBE_UNAVAILABLE this build has no {', '.join(missing)} (an unpatched build has no bound to lift)",
              flush=True)
        raise SystemExit(3)
    dsa._is_supported_sparse_mla_dims = lambda dim_plus_tail_dim, v_channels: True
    dsa._sparse_mla_shared_memory_limit = lambda device: None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--point", required=True, help='{"heads": H, "v_channels": D, "rope": R}')
    p.add_argument("--expect", choices=["admit", "decline"], help="what the declaration says (for the log only)")
    p.add_argument("--probe", action="store_true", help="lift the change's dims rule and shared-memory bound")
    args = p.parse_args()
    point = json.loads(args.point)
    heads, d_v, rope = int(point["heads"]), int(point["v_channels"]), int(point["rope"])
    d_total = d_v + rope
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("pack 02's domain points need a CUDA device")
    dsa = importlib.import_module(OPS + ".tilelang_dsa")
    if dsa.SparseMLA is None:
        raise SystemExit("TileLang SparseMLA did not import: a decline would prove nothing")
    scale = d_total**-0.5
    q, kv, idx = make_inputs(torch, heads, d_total)
    query = q.permute(1, 0, 2, 3).contiguous().requires_grad_(True)  # [S,B,H,Dt], the dispatcher's layout
    key = kv.permute(1, 0, 2, 3).contiguous().requires_grad_(True)  # [S,B,1,Dt]
    idx2 = idx[:, :, 0, :].contiguous()
    baseline = baseline_dispatcher()
    base = decision(torch, baseline, query, key, idx2, scale, d_v) if baseline is not None else None
    detail = {}
    need = getattr(dsa, "_sparse_mla_shared_memory_bytes", None)
    if need is not None:  # the change's own estimate, next to what this device lets a block use
        detail["shared_memory_bytes"] = need(max(heads, 16), d_v, rope)
        detail["shared_memory_limit"] = torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    if args.probe:
        lift(dsa)
    out = dsa.fused_sparse_mla_absorbed(query, key, idx2, scale, d_v)
    if out is None:
        emit(outcome="declined", base=base or "declined", detail=detail or None)
        return 0
    g = torch.Generator(device="cpu").manual_seed(1)
    dout = torch.randn(out.shape, generator=g).to(torch.bfloat16).cuda()
    out.backward(dout)
    torch.cuda.synchronize()
    rq, rkv, rout = reference(torch, q, kv, idx, d_v, scale)
    rout.backward(dout.permute(1, 0, 2, 3).double())
    errors = {"out": rel_err(torch, out.permute(1, 0, 2, 3), rout),
              "dq": rel_err(torch, query.grad.permute(1, 0, 2, 3), rq.grad),
              "dkv": rel_err(torch, key.grad.permute(1, 0, 2, 3), rkv.grad)}
    ok = all(e <= TOL for e in errors.values())
    emit(outcome="matched" if ok else "mismatch", errors=errors, tol=TOL, base=base or "admitted",
         detail=detail or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
