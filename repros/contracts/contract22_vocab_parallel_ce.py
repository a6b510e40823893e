"""Contract 22: vocab-parallel (tensor-parallel) cross-entropy at the output boundary, under torchrun.

Contract 21's parity -- same loss, same grad of the input hidden states and of the output
weight as a plain full-vocab output layer + CE, with ignore_index tokens, the mean over
non-padding tokens, tolerance derived from the dtype's own noise -- with the output layer
split over TP = WORLD_SIZE ranks, on the REAL megatron-core pieces of the installed build:

* ``megatron.core.tensor_parallel.ColumnParallelLinear`` (bias-free, ``gather_output=False``),
  the GPT output layer: each rank holds the weight rows ``[r*V/TP, (r+1)*V/TP)`` and produces
  logits ``[S, B, V/TP]``; its backward all-reduces (``--layout tp``) or reduce-scatters
  (``--layout sp``) the input gradient over the TP group;
* ``megatron.core.tensor_parallel.vocab_parallel_cross_entropy``: targets outside the rank's
  vocab slice are masked per rank, the row max is all-reduced with MAX, the target logit and
  the sum of exponentials with SUM; it returns the per-token loss ``[S, B]`` (no reduction, no
  ignore_index of its own: ``-100`` targets are outside every rank's slice, and the loss mask
  removes them, as Megatron's loss function does);
* the loss is ``sum(loss * mask) / mask.sum()`` over the GLOBAL non-padding token count.

Layouts (``--layout``):

* ``tp``: hidden states ``[S, B, H]`` replicated on every rank, logits ``[S, B, V/TP]``;
* ``sp``: sequence parallel, hidden states ``[S/TP, B, H]`` per rank; the layer all-gathers the
  sequence, so the logits are still ``[S, B, V/TP]`` (the CE's MAX/SUM all-reduces combine the
  same token across ranks, so logits sharded over both S and V could not be reduced this way)
  and the input gradient comes back reduce-scattered, ``[S/TP, B, H]``. Megatron allocates the
  all-gather buffer and the reduce-scatter output with ``torch.cuda.current_device()``
  (``GlobalMemoryBuffer.get_tensor`` in core/utils.py, ``sub_grad_input`` in
  tensor_parallel/layers.py), so this layout needs CUDA.

Reference: the same problem, generated from the same seed on every rank (rank 0 checks that
all ranks hold identical data), run on rank 0 through a plain full-vocab output layer with
``F.cross_entropy(ignore_index=-100)`` in float64. The plain path in the lane's dtype gives
the noise: for every compared tensor (each rank's loss, each rank's input grad -- its slice
under ``sp`` -- and each rank's weight-grad shard against the reference's rows, plus the
assembled grads), the TP result may sit at most ``K_NOISE * max(plain_err, eps)`` from the
float64 reference. float32 and bfloat16. -> CONTRACT_HELD / CONTRACT_BROKEN.

``--norm local`` is the deliberately wrong lane: each rank divides by the non-padding count of
its own sequence shard ``[S/TP]`` instead of the global count. The problem puts the same
number of padding tokens in every shard, so every loss and gradient comes out exactly TP
times too large. The reproducer must see that: every compared tensor fails parity, and
every one matches the reference once divided by the predicted rank factor N_global/N_local.
-> CONTRACT_VIOLATION_DETECTED; if parity holds anyway -> CONTRACT_VIOLATION_MISSED (the check
is blind); anything else -> CONTRACT_BROKEN.

    torchrun --standalone --nproc_per_node=2 contract22_vocab_parallel_ce.py --device cpu
"""

from __future__ import annotations

import os
import sys

from _lane import figure, lane, parser, require_cuda, skip, start, verdict
from _numerics import K_NOISE, rel_fro, tolerance

IGNORE = -100
IGNORE_FRACTION = 0.2
SEED = 22
SHAPES = {"cpu": (256, 2, 512, 16000), "cuda": (1024, 2, 1024, 50304)}  # S, B, H, V (V: GPT-2's padded vocab)


def parse_args():
    p = parser(__doc__)
    p.add_argument("--device", choices=("cpu", "cuda"), required=True, help="cpu: gloo; cuda: NCCL, one GPU per rank")
    p.add_argument("--layout", choices=("tp", "sp"), default="tp", help="sp: sequence-parallel input [S/TP, B, H]")
    p.add_argument("--norm", choices=("global", "local"), default="global",
                   help="local: the deliberately wrong normalization by the rank's own token count")
    return p.parse_args()


def init(torch, dist, device: str) -> tuple[int, int]:
    if "WORLD_SIZE" not in os.environ:
        raise SystemExit("run under torch.distributed.run (torchrun) with --nproc_per_node >= 2")
    if device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    else:
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world < 2:
        raise SystemExit(f"world size {world}: the contract is about TP >= 2")
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=world)
    assert parallel_state.get_tensor_model_parallel_world_size() == world
    assert parallel_state.get_tensor_model_parallel_rank() == rank
    return rank, world


def problem(torch, s, b, h, v, tp):
    """Same seed on every rank. Padding: the same count in every sequence shard; partition edges as targets."""
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(s, b, h, generator=g)
    w = torch.randn(v, h, generator=g) * (4.0 / h**0.5)
    t = torch.randint(0, v, (s, b), generator=g)
    shard = s // tp
    k = round(IGNORE_FRACTION * shard * b)
    for r in range(tp):
        t[r * shard:(r + 1) * shard].view(-1)[torch.randperm(shard * b, generator=g)[:k]] = IGNORE
    part = v // tp
    edges = [e for p in range(tp) for e in (p * part, (p + 1) * part - 1)]
    kept = (t.view(-1) != IGNORE).nonzero().squeeze(1)
    t.view(-1)[kept[torch.randperm(kept.numel(), generator=g)[:len(edges)]]] = torch.tensor(edges)
    return x, w, t


def tp_path(torch, x, w, t, dtype, device, rank, tp, sp, norm):
    """The real megatron output layer + vocab-parallel CE on this rank."""
    from megatron.core import tensor_parallel
    from megatron.core.model_parallel_config import ModelParallelConfig

    s, b, h = x.shape
    v = w.shape[0]
    part, shard = v // tp, s // tp
    cfg = ModelParallelConfig(tensor_model_parallel_size=tp, sequence_parallel=sp, params_dtype=dtype,
                              use_cpu_initialization=device.type == "cpu", perform_initialization=False)
    layer = tensor_parallel.ColumnParallelLinear(h, v, config=cfg, init_method=torch.nn.init.zeros_, bias=False,
                                                 gather_output=False)
    assert tuple(layer.weight.shape) == (part, h)
    with torch.no_grad():
        layer.weight.copy_(w[rank * part:(rank + 1) * part].to(dtype))
    inp = (x[rank * shard:(rank + 1) * shard] if sp else x).detach().clone().to(device=device, dtype=dtype)
    inp.requires_grad_(True)
    logits, _ = layer(inp)
    assert tuple(logits.shape) == (s, b, part), tuple(logits.shape)
    target = t.to(device)
    per_token = tensor_parallel.vocab_parallel_cross_entropy(logits, target)  # [S, B], float32
    assert tuple(per_token.shape) == (s, b)
    mask = (target != IGNORE).float()
    denom = mask.sum() if norm == "global" else mask[rank * shard:(rank + 1) * shard].sum()
    loss = (per_token * mask).sum() / denom
    loss.backward()
    return {"loss": loss.detach().reshape(1), "grad_input": inp.grad, "grad_weight": layer.weight.grad,
            "logits_shape": list(logits.shape), "input_shape": list(inp.shape), "denominator": int(denom.item())}


def plain_path(torch, F, x, w, t, dtype, device):
    """A plain full-vocab output layer: materialized [S*B, V] logits, F.cross_entropy over non-padding tokens."""
    x = x.detach().clone().to(device=device, dtype=dtype).requires_grad_(True)
    w = w.detach().clone().to(device=device, dtype=dtype).requires_grad_(True)
    logits = x.reshape(-1, x.shape[-1]) @ w.t()
    loss = F.cross_entropy(logits, t.reshape(-1).to(device), ignore_index=IGNORE, reduction="mean")
    loss.backward()
    return {"loss": loss.detach().reshape(1), "grad_input": x.grad, "grad_weight": w.grad}


def gather(torch, dist, tensor):
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return parts


def scale(a, ref):
    a, ref = a.double().reshape(-1), ref.double().reshape(-1)
    return (a @ ref / (ref @ ref).clamp_min(1e-300)).item()


def check_dtype(torch, F, dist, dtype, x, w, t, device, rank, tp, sp, norm, factor):
    """Run the TP path on every rank, compare on rank 0. Returns rank 0's per-tensor findings."""
    name = str(dtype).replace("torch.", "")
    s, _, _ = x.shape
    v = w.shape[0]
    part, shard = v // tp, s // tp
    out = tp_path(torch, x, w, t, dtype, device, rank, tp, sp, norm)
    got = {key: gather(torch, dist, out[key].double()) for key in ("loss", "grad_input", "grad_weight")}
    if rank != 0:
        return []
    ref = plain_path(torch, F, x, w, t, torch.float64, device)
    plain = plain_path(torch, F, x, w, t, dtype, device)
    items = []  # (tensor, rank or None, tp value, plain value, reference value)
    for r in range(tp):
        items.append(("loss", r, got["loss"][r], plain["loss"], ref["loss"]))
        rows = slice(r * shard, (r + 1) * shard) if sp else slice(None)
        items.append(("grad_input", r, got["grad_input"][r], plain["grad_input"][rows], ref["grad_input"][rows]))
        cols = slice(r * part, (r + 1) * part)
        items.append(("grad_weight", r, got["grad_weight"][r], plain["grad_weight"][cols], ref["grad_weight"][cols]))
    assembled_input = torch.cat(got["grad_input"]) if sp else got["grad_input"][0]
    items.append(("grad_input_assembled", None, assembled_input, plain["grad_input"], ref["grad_input"]))
    items.append(("grad_weight_assembled", None, torch.cat(got["grad_weight"]), plain["grad_weight"],
                  ref["grad_weight"]))
    eps = torch.finfo(dtype).eps
    findings = []
    for what, r, tp_val, plain_val, ref_val in items:
        noise = rel_fro(plain_val, ref_val)
        err = rel_fro(tp_val, ref_val)
        # K_NOISE * max(noise, eps): a single scalar (the loss) can sit near zero error by chance
        tol = tolerance(noise, K_NOISE * eps)
        g = scale(tp_val, ref_val)
        rescaled = rel_fro(tp_val / factor, ref_val)
        figure("tp_rel_err", err, None, dtype=name, tensor=what, rank=r, world_size=tp, layout="sp" if sp else "tp",
               norm=norm, plain_rel_err=noise, tolerance=tol, over_tolerance=err > tol, grad_scale=g,
               rel_err_after_rank_factor=rescaled if norm == "local" else None)
        findings.append({"dtype": name, "tensor": what, "rank": r, "err": err, "tol": tol, "scale": g,
                         "rescaled_err": rescaled})
    figure("layout", None, None, dtype=name, world_size=tp, logits_per_rank=out["logits_shape"],
           input_per_rank=out["input_shape"], denominator_rank0=out["denominator"])
    return findings


def counts(torch, t, tp, v):
    """Token bookkeeping: global non-padding count, each rank's shard count, out-of-partition targets per rank."""
    s = t.shape[0]
    shard, part = s // tp, v // tp
    keep = t != IGNORE
    per_rank = []
    for r in range(tp):
        lo, hi = r * part, (r + 1) * part
        inside = keep & (t >= lo) & (t < hi)
        per_rank.append({"rank": r, "vocab_range": [lo, hi], "local_tokens": int(keep[r * shard:(r + 1) * shard].sum()),
                         "in_partition_targets": int(inside.sum()),
                         "out_of_partition_targets": int((keep & ~inside).sum()),
                         "edge_targets": int(((t == lo) | (t == hi - 1)).sum())})
    return int(keep.sum()), int((~keep).sum()), per_rank


def main() -> int:
    args = parse_args()
    if args.device == "cuda":
        os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")  # what Megatron's TP overlap assumes
    start(args, "megatron-core", "megatron.core.tensor_parallel.cross_entropy")  # every rank stamps
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    if args.device == "cuda":
        require_cuda("no CUDA device")
    if args.layout == "sp" and args.device != "cuda":
        skip("the sequence-parallel layout needs CUDA: megatron allocates its all-gather buffer and the "
             "reduce-scattered input grad with torch.cuda.current_device()")
    rank, tp = init(torch, dist, args.device)
    device = torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    s, b, h, v = SHAPES[args.device]
    assert s % tp == 0 and v % tp == 0, (s, v, tp)
    x, w, t = problem(torch, s, b, h, v, tp)
    digest = torch.stack([x.double().sum(), w.double().sum(), t.double().sum()]).to(device)
    digests = gather(torch, dist, digest)
    n_global, n_ignored, per_rank = counts(torch, t, tp, v)
    locals_ = {p["local_tokens"] for p in per_rank}
    assert len(locals_) == 1, f"padding not balanced over the sequence shards: {per_rank}"
    factor = n_global / locals_.pop() if args.norm == "local" else 1.0
    findings = []
    for dtype in (torch.float32, torch.bfloat16):
        findings += check_dtype(torch, F, dist, dtype, x, w, t, device, rank, tp, args.layout == "sp", args.norm,
                                factor)
    dist.barrier()
    if rank == 0:
        same_data = all(torch.equal(d, digests[0]) for d in digests)
        figure("world_size", tp, None, backend=dist.get_backend(), device=args.device, layout=args.layout,
               norm=args.norm)
        figure("tokens", n_global, None, ignored=n_ignored, per_rank=per_rank, ignore_index=IGNORE)
        if args.norm == "local":
            figure("rank_factor", factor, None, meaning="N_global / N_local: the predicted scale of loss and grads")
        shape = dict(zip("sbhv", SHAPES[args.device], strict=True))
        over = [f"{f['dtype']} {f['tensor']}" + (f" rank {f['rank']}" if f["rank"] is not None else "")
                + f": {f['err']:.3g} > {f['tol']:.3g}" for f in findings if f["err"] > f["tol"]]
        exercised = all(p["out_of_partition_targets"] > 0 and p["edge_targets"] >= 2 for p in per_rank)
        details = {"lane": lane(), "shape": shape, "world_size": tp, "layout": args.layout, "norm": args.norm,
                   "k_noise": K_NOISE,
                   "normalization": "sum over non-padding tokens / global non-padding count"
                   if args.norm == "global" else "sum over non-padding tokens / this rank's shard count (WRONG)",
                   "same_data_on_every_rank": same_data, "partitions_exercised": exercised, "over_tolerance": over}
        if not same_data or not exercised:
            verdict("CONTRACT_BROKEN", **details, why="the problem is not what the contract needs")
        elif args.norm == "global":
            verdict("CONTRACT_BROKEN" if over else "CONTRACT_HELD", **details)
        else:
            caught = all(f["err"] > f["tol"] and f["rescaled_err"] <= f["tol"]
                         and abs(f["scale"] / factor - 1.0) <= f["tol"] for f in findings)
            scales = sorted({round(f["scale"], 6) for f in findings})
            if caught:
                verdict("CONTRACT_VIOLATION_DETECTED", **details, rank_factor=factor, measured_scales=scales)
            elif not over:
                verdict("CONTRACT_VIOLATION_MISSED", **details, rank_factor=factor, measured_scales=scales)
            else:
                verdict("CONTRACT_BROKEN", **details, rank_factor=factor, measured_scales=scales,
                        why="the wrong lane fails parity, but not only by the rank factor")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
