"""Pack 10: megatron-core (dev branch) fused linear cross entropy on a GPU without a native kernel.

Question asked on every lane: what does the REAL ``linear_cross_entropy`` of
``megatron.core.fusions.fused_linear_cross_entropy`` (and ``LinearCrossEntropyModule``, the
output layer that calls it) do on a GPU whose compute capability has no kernel entry? At dev
d48bd6b its dispatcher (``Platform``) knows compute capability 10 only and raises
``ValueError("Unsupported architecture: <major>")`` for anything else; the patch warns once
and computes the loss through the unfused vocab-parallel path (materialized logits + megatron's
``vocab_parallel_cross_entropy``).

Stage ``numerics`` (default):

* unpatched build (``HARNESS_PATCHED=0``): the first call raises ``ValueError`` naming the architecture ->
  BUG_REPRODUCED; a result instead -> BUG_ABSENT; any other exception crashes the lane.
* patched build (``HARNESS_PATCHED=1``): the dispatcher still raising ``ValueError`` -> FIX_FAILED;
  otherwise exactly one RuntimeWarning over the whole run, naming the compute capability
  and the device and saying that the fallback materializes the logits; then, in float32 and
  bfloat16, for reductions mean / sum / none (none: weighted by a random upstream gradient),
  with ~20 % ``ignore_index`` tokens and targets at the vocab partition edges, through
  (a) ``linear_cross_entropy`` without a TP group, (b) with megatron's TP group, (c) the same
  with ``sequence_parallel=True`` where the world size allows it on this device and (d)
  ``LinearCrossEntropyModule.forward(output_cross_entropy_loss=True)``: the loss and both
  gradients (hidden states and this rank's weight shard) are compared with
  ``F.cross_entropy`` on float64 logits materialized from the full weight. The control is the
  plain path in the lane's dtype (``hidden @ weight.T`` then ``F.cross_entropy``): each tensor
  may sit at most ``K_NOISE * max(plain_err, eps(dtype))`` from float64 (relative Frobenius;
  ``_numerics``).
  Exact checks: float32 loss of shape () / (tokens,), 0 loss and all-zero hidden-gradient rows
  for ignored tokens, gradient dtypes equal to the input dtypes, identical loss and hidden
  gradient on every TP rank. -> FIX_VALIDATED / FIX_FAILED.

Devices (``--device``):

* ``cuda``: the real GPU. The lanes run on H100/H200 (compute capability 9.0); a GPU of
  compute capability 10 has a native kernel, so the lane skips (exit 3).
* ``cpu``: no GPU, so the dispatcher's capability queries are SIMULATED: while the platform is
  created, ``torch.cuda.is_available / current_device / get_device_capability /
  get_device_name`` report a compute capability 9.0 device (``--simulate-cc``); every tensor
  stays on the CPU. This exercises the real dispatcher's decision and the real fallback
  numerics; it is not hardware evidence (the cuda lanes are). Patched CPU lanes also check
  that on 8.0 and 12.1 the dispatcher no longer raises, warns once, and the mean loss matches
  a float64 reference. Under torchrun (WORLD_SIZE = TP > 1, gloo) the
  sequence-parallel case is left out: megatron's sequence-parallel all-gather allocates on
  ``torch.cuda.current_device()``.

Stage ``memory`` (cuda, patched): peak allocated memory above the inputs during one
forward+backward of ``linear_cross_entropy`` at tokens=8192, hidden=2048, vocab=65536 bf16,
against the bf16 logits ([tokens, vocab], 1 GiB). A fused kernel keeps its working set far
below the logits; the fallback materializes them (and a float32 softmax), so on a GPU without
a kernel the truthful sentinel is MEMORY_SAVE_MISSING (working set > 1/4 of the logits);
MEMORY_SAVE_VERIFIED would mean the working set stayed under that.

    HARNESS_PATCHED=1 python pack10_flce_unfused_fallback.py --device cpu
    torchrun --standalone --nproc_per_node=2 pack10_flce_unfused_fallback.py --device cpu
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import warnings

from _lane import figure, lane, parser, patched, require_cuda, skip, start, verdict
from _numerics import K_NOISE, rel_fro, tolerance

MODULE = "megatron.core.fusions.fused_linear_cross_entropy"
IGNORE = -100
IGNORE_FRACTION = 0.2
SEED = 10
SHAPES = {"cpu": (64, 2, 64, 1000), "cuda": (256, 2, 512, 16384)}  # seqlen, batch, hidden, vocab
MEMORY_SHAPE = (4096, 2, 2048, 65536)
MEMORY_FRACTION = 0.25  # a working set above this share of the bf16 logits is "materialized"
EXTRA_SIMULATED = ((8, 0), (12, 1))  # further architectures without a kernel (cpu lanes)


def parse_args():
    p = parser(__doc__)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda",
                   help="cuda: the real GPU; cpu: CPU tensors, dispatcher capability simulated")
    p.add_argument("--stage", choices=("numerics", "memory"), default="numerics")
    p.add_argument("--simulate-cc", default="9.0", help="device cpu: the compute capability the dispatcher sees")
    return p.parse_args()


def init_process_group(torch, dist, device: str) -> tuple[int, int]:
    """torchrun's group when launched by it, else a world of one; megatron's TP group spans the world."""
    from megatron.core import parallel_state

    if "WORLD_SIZE" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    else:
        dist.init_process_group("gloo")
    world = dist.get_world_size()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=world)
    return dist.get_rank(), world


@contextlib.contextmanager
def simulated_gpu(torch, cc: tuple[int, int], active: bool):
    """Make torch.cuda report one GPU of compute capability ``cc`` (only what the dispatcher asks)."""
    if not active:
        yield
        return
    names = ("is_available", "current_device", "get_device_capability", "get_device_name")
    saved = {n: getattr(torch.cuda, n) for n in names}
    torch.cuda.is_available = lambda: True
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda device=None: cc
    torch.cuda.get_device_name = lambda device=None: f"simulated sm_{cc[0]}{cc[1]} (CPU host)"
    # A CPU-only torch has no NVTX, whose ranges the fused path opens: make them no-ops there, as they are on
    # a CUDA build of torch without a GPU.
    nvtx = torch.cuda.nvtx
    no_nvtx = not hasattr(torch._C, "_nvtx")
    saved_nvtx = {n: getattr(nvtx, n) for n in ("range_push", "range_pop")}
    if no_nvtx:
        nvtx.range_push = lambda msg: 0
        nvtx.range_pop = lambda: 0
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.cuda, n, f)
        for n, f in saved_nvtx.items():
            setattr(nvtx, n, f)


def reset_platform(mod) -> None:
    """Forget the dispatcher's singleton so the next call decides again."""
    mod.Platform._instance = None
    mod._get_platform.cache_clear()


def dispatch(torch, mod, cc: tuple[int, int], simulated: bool) -> str | None:
    """Let the real dispatcher decide for compute capability ``cc``: None when it returned a platform (it has a
    kernel or falls back), else the message of the ValueError it raised (what the unpatched build does)."""
    with simulated_gpu(torch, cc, simulated):
        try:
            mod._get_platform()
        except ValueError as exc:
            return str(exc)
    return None


def fallback_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught
            if issubclass(w.category, Warning) and "linear cross entropy" in str(w.message).lower()]


def check_warning(messages: list[str], cc: tuple[int, int], device_name: str, failures: list[str], where: str):
    figure("fallback_warnings", len(messages), None, where=where, messages=messages)
    if len(messages) != 1:
        failures.append(f"{where}: {len(messages)} fallback warnings, expected exactly 1")
    for msg in messages[:1]:
        low = msg.lower()
        for what, ok in (("the compute capability", f"{cc[0]}.{cc[1]}" in msg),
                         ("the device name", device_name in msg),
                         ("that it falls back", "falling back" in low or "falls back" in low),
                         ("that the fallback materializes the logits", "materializ" in low and "logits" in low)):
            if not ok:
                failures.append(f"{where}: the warning does not state {what}: {msg!r}")


def problem(torch, s, b, h, v, tp):
    """Same seed on every rank: hidden [s, b, h], full weight [v, h], labels [s, b] with ignored tokens and edges."""
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(s, b, h, generator=g)
    w = torch.randn(v, h, generator=g) * (4.0 / h**0.5)
    t = torch.randint(0, v, (s, b), generator=g)
    flat = t.view(-1)
    n = flat.numel()
    flat[torch.randperm(n, generator=g)[:round(IGNORE_FRACTION * n)]] = IGNORE
    part = v // tp
    edges = [e for r in range(tp) for e in (r * part, (r + 1) * part - 1)]
    kept = (flat != IGNORE).nonzero().squeeze(1)
    flat[kept[torch.randperm(kept.numel(), generator=g)[:len(edges)]]] = torch.tensor(edges)
    upstream = torch.randn(n, generator=g)  # weights of the per-token losses for reduction "none"
    return x, w, t, upstream


def objective(loss, reduction, upstream):
    return (loss.float() * upstream).sum() if reduction == "none" else loss


def reference(torch, F, x, w, t, reduction, upstream, dtype, device):
    """Plain path: materialized logits in ``dtype`` and F.cross_entropy (float64: the reference)."""
    xx = x.to(device=device, dtype=dtype).detach().clone().requires_grad_(True)
    ww = w.to(device=device, dtype=dtype).detach().clone().requires_grad_(True)
    logits = xx.reshape(-1, xx.shape[-1]) @ ww.t()
    loss = F.cross_entropy(logits, t.reshape(-1).to(device), ignore_index=IGNORE, reduction=reduction)
    objective(loss, reduction, upstream.to(device)).backward()
    return {"loss": loss.detach(), "grad_hidden": xx.grad, "grad_weight": ww.grad}


def under_test(torch, mod, path, x, w, t, reduction, upstream, dtype, device, rank, tp):
    """One call of the real megatron function (or module) on this rank's shard (no TP group: the full weight)."""
    s, b, h = x.shape
    v = w.shape[0]
    if path == "no_tp_group":
        rank, tp = 0, 1
    part, shard = v // tp, s // tp
    sp = path == "tp_group_sp"
    xin = (x[rank * shard:(rank + 1) * shard] if sp else x).to(device=device, dtype=dtype)
    xin = xin.detach().clone().requires_grad_(True)
    w_shard = w[rank * part:(rank + 1) * part].to(device=device, dtype=dtype)
    labels = t.to(device)
    from megatron.core import parallel_state

    group = parallel_state.get_tensor_model_parallel_group()
    if path == "module":
        from megatron.core.model_parallel_config import ModelParallelConfig
        from megatron.core.transformer.linear_cross_entropy import LinearCrossEntropyModule

        cfg = ModelParallelConfig(tensor_model_parallel_size=tp, params_dtype=dtype,
                                  use_cpu_initialization=device == "cpu", perform_initialization=False,
                                  cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="linear")
        layer = LinearCrossEntropyModule(h, v, config=cfg, init_method=torch.nn.init.zeros_, bias=False,
                                         gather_output=False, tp_group=group)
        if device == "cuda":
            layer = layer.cuda()
        with torch.no_grad():
            layer.weight.copy_(w_shard)
        # the module takes labels [b, s] and returns the per-token loss [b, s] for reduction "none"
        loss = layer(xin, output_cross_entropy_loss=True, labels=labels.t(), reduction=reduction)
        if reduction == "none":
            loss = loss.t().reshape(-1)
        weight = layer.weight
    else:
        weight = w_shard.detach().clone().requires_grad_(True)
        loss = mod.linear_cross_entropy(xin, weight, labels, tp_group=None if path == "no_tp_group" else group,
                                        reduction=reduction, ignore_index=IGNORE, sequence_parallel=sp)
    objective(loss, reduction, upstream.to(device)).backward()
    return {"loss": loss.detach(), "grad_hidden": xin.grad, "grad_weight": weight.grad,
            "hidden_dtype": xin.dtype, "weight_dtype": weight.dtype, "sp": sp, "shard": shard, "part": part}


def compare(torch, F, dist, mod, path, dtype, reduction, x, w, t, upstream, device, rank, tp):
    """Findings of this rank for one case; loss and hidden grad also checked equal across ranks."""
    name = str(dtype).replace("torch.", "")
    case = f"{name}/{reduction}/{path}"
    got = under_test(torch, mod, path, x, w, t, reduction, upstream, dtype, device, rank, tp)
    ref = reference(torch, F, x, w, t, reduction, upstream, torch.float64, device)
    plain = reference(torch, F, x, w, t, reduction, upstream, dtype, device)
    rows = slice(rank * got["shard"], (rank + 1) * got["shard"]) if got["sp"] else slice(None)
    cols = slice(rank * got["part"], (rank + 1) * got["part"]) if path != "no_tp_group" else slice(None)
    h = x.shape[-1]
    pairs = {
        "loss": (got["loss"], plain["loss"], ref["loss"]),
        "grad_hidden": (got["grad_hidden"].reshape(-1, h), plain["grad_hidden"][rows].reshape(-1, h),
                        ref["grad_hidden"][rows].reshape(-1, h)),
        "grad_weight": (got["grad_weight"], plain["grad_weight"][cols], ref["grad_weight"][cols]),
    }
    failures = []
    eps = torch.finfo(dtype).eps
    for tensor, (value, plain_value, ref_value) in pairs.items():
        if value is None or value.shape != ref_value.shape:
            failures.append(f"{case}: {tensor} is {None if value is None else tuple(value.shape)}, "
                            f"expected {tuple(ref_value.shape)}")
            continue
        noise = rel_fro(plain_value, ref_value)
        err = rel_fro(value, ref_value)
        tol = tolerance(noise, K_NOISE * eps)  # K_NOISE * max(noise, eps)
        finite = bool(torch.isfinite(value.float()).all())
        figure("rel_err_vs_float64", err, None, case=case, tensor=tensor, rank=rank, world_size=tp,
               plain_rel_err=noise, tolerance=tol, ok=finite and err <= tol)
        if not finite or err > tol:
            failures.append(f"{case}: {tensor} rel err {err:.3g} > {tol:.3g} (plain {noise:.3g})"
                            if finite else f"{case}: {tensor} not finite")
    # exact parts of the contract
    loss = got["loss"]
    want_shape = (t.numel(),) if reduction == "none" else ()
    if loss.dtype != torch.float32 or tuple(loss.shape) != want_shape:
        failures.append(f"{case}: loss {loss.dtype} {tuple(loss.shape)}, expected float32 {want_shape}")
    ignored = (t.reshape(-1) == IGNORE).to(loss.device)
    if reduction == "none" and loss.shape == ignored.shape and bool((loss[ignored] != 0).any()):
        failures.append(f"{case}: non-zero loss on ignore_index tokens")
    gh = got["grad_hidden"]
    ignored_rows = ignored.reshape(t.shape)[rows].reshape(-1)
    if gh is not None and bool((gh.reshape(-1, h)[ignored_rows] != 0).any()):
        failures.append(f"{case}: non-zero hidden gradient rows for ignore_index tokens")
    if gh is not None and gh.dtype != got["hidden_dtype"]:
        failures.append(f"{case}: hidden grad {gh.dtype}, hidden {got['hidden_dtype']}")
    if got["grad_weight"] is not None and got["grad_weight"].dtype != got["weight_dtype"]:
        failures.append(f"{case}: weight grad {got['grad_weight'].dtype}, weight {got['weight_dtype']}")
    if tp > 1:  # every rank must hold the same loss, and the same hidden grad unless sequence parallel
        same = [loss.double().reshape(-1)] + ([] if got["sp"] else [gh.double().reshape(-1)])
        for i, tensor in enumerate(same):
            parts = [torch.empty_like(tensor) for _ in range(tp)]
            dist.all_gather(parts, tensor.contiguous())
            if not all(torch.equal(p, parts[0]) for p in parts):
                failures.append(f"{case}: {('loss', 'grad_hidden')[i]} differs between TP ranks")
    return failures


def stage_numerics(args, device: str, simulate: tuple[int, int] | None) -> int:
    import importlib

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    mod = importlib.import_module(MODULE)
    rank, tp = init_process_group(torch, dist, device)
    is_patched = patched()
    if device == "cuda":
        cc = torch.cuda.get_device_capability()
        name = torch.cuda.get_device_name()
        if cc[0] == 10:
            skip(f"compute capability {cc[0]}.{cc[1]} has a native kernel; the question needs a GPU without one")
    else:
        cc, name = simulate, f"simulated sm_{simulate[0]}{simulate[1]} (CPU host)"
    if rank == 0:
        figure("dispatch", None, None, device=device, compute_capability=f"{cc[0]}.{cc[1]}", device_name=name,
               simulated=simulate is not None, world_size=tp, patched=is_patched)
    s, b, h, v = SHAPES[device]
    x, w, t, upstream = problem(torch, s, b, h, v, tp)

    if not is_patched:
        error = None
        with simulated_gpu(torch, cc, simulate is not None):
            try:
                xin = x.to(device).requires_grad_(True)
                mod.linear_cross_entropy(xin, w[: v // tp].to(device), t.to(device), tp_group=None,
                                         reduction="mean", ignore_index=IGNORE)
            except ValueError as exc:
                error = str(exc)
        dist.destroy_process_group()
        if rank == 0:
            details = {"lane": lane(), "compute_capability": f"{cc[0]}.{cc[1]}", "simulated": simulate is not None,
                       "error": error}
            if simulate is not None:
                details["note"] = ("capability queries simulated on a CPU host: the dispatcher's decision, not "
                                   "hardware evidence")
            if error is not None and "unsupported architecture" in error.lower():
                verdict("BUG_REPRODUCED", observed=f"linear_cross_entropy raised ValueError: {error}", **details)
            else:
                verdict("BUG_ABSENT", observed="linear_cross_entropy returned a loss", **details)
        return 0

    failures: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        raised = dispatch(torch, mod, cc, simulate is not None)  # decides (and warns) on the real or simulated GPU
        figure("dispatcher_raised", raised is not None, None, rank=rank, error=raised)
        if raised is not None:  # the build in hand still raises: nothing falls back, so nothing to compare
            dist.destroy_process_group()
            if rank == 0:
                verdict("FIX_FAILED", lane=lane(), observed=f"the dispatcher raised ValueError: {raised}",
                        compute_capability=f"{cc[0]}.{cc[1]}", simulated=simulate is not None,
                        failures=[f"dispatcher raised ValueError: {raised}"], n_failures=1)
            return 0
        paths = ["no_tp_group", "tp_group", "module"]
        if tp == 1 or device == "cuda":
            paths.insert(2, "tp_group_sp")
        cases = 0
        for dtype in (torch.float32, torch.bfloat16):
            for reduction in ("mean", "sum", "none"):
                for path in paths:
                    failures += compare(torch, F, dist, mod, path, dtype, reduction, x, w, t, upstream, device,
                                        rank, tp)
                    cases += 1
        check_warning(fallback_warnings(caught), cc, name, failures, "whole run")
    if simulate is not None and rank == 0:  # other architectures without a kernel take the same path
        for other in EXTRA_SIMULATED:
            reset_platform(mod)
            where = f"simulated {other[0]}.{other[1]}"
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                raised = dispatch(torch, mod, other, True)
                if raised is None:
                    dispatch(torch, mod, other, True)  # decided once per process: a second call warns no more
            if raised is not None:
                failures.append(f"{where}: the dispatcher raised ValueError: {raised}")
                continue
            check_warning(fallback_warnings(caught), other, f"simulated sm_{other[0]}{other[1]}", failures, where)
            with simulated_gpu(torch, other, True):  # the loss itself, through whatever the dispatcher chose
                loss = mod.linear_cross_entropy(x.clone().requires_grad_(True), w, t, tp_group=None,
                                                reduction="mean", ignore_index=IGNORE)
            want = F.cross_entropy(x.reshape(-1, h).double() @ w.double().t(), t.reshape(-1), ignore_index=IGNORE)
            plain = F.cross_entropy(x.reshape(-1, h) @ w.t(), t.reshape(-1), ignore_index=IGNORE)
            err, noise = rel_fro(loss.detach().double(), want), rel_fro(plain.double(), want)
            tol = tolerance(noise, K_NOISE * torch.finfo(torch.float32).eps)
            figure("fallback_loss_rel_err", err, None, where=where, plain_rel_err=noise, tolerance=tol)
            if not err <= tol:
                failures.append(f"{where}: mean loss {float(loss):.6g}, float64 reference {float(want):.6g}")
    gathered = [None] * tp
    dist.all_gather_object(gathered, failures)
    dist.destroy_process_group()
    if rank == 0:
        every = [f for rank_failures in gathered for f in rank_failures]
        shape = dict(zip("sbhv", SHAPES[device], strict=True))
        ignored = int((t == IGNORE).sum())
        verdict("FIX_FAILED" if every else "FIX_VALIDATED", lane=lane(), cases=cases, world_size=tp, shape=shape,
                ignored_tokens=ignored, tokens=t.numel(), k_noise=K_NOISE, simulated=simulate is not None,
                failures=every[:30], n_failures=len(every))
    return 0


def stage_memory(args) -> int:
    import importlib

    import torch.distributed as dist

    torch = require_cuda("the memory stage measures GPU memory")
    mod = importlib.import_module(MODULE)
    rank, tp = init_process_group(torch, dist, "cuda")
    cc = torch.cuda.get_device_capability()
    s, b, h, v = MEMORY_SHAPE
    dtype = torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(SEED)
    x = torch.randn(s, b, h, generator=g, device="cuda").to(dtype).requires_grad_(True)
    w = (torch.randn(v, h, generator=g, device="cuda") * (4.0 / h**0.5)).to(dtype).requires_grad_(True)
    t = torch.randint(0, v, (s, b), generator=g, device="cuda")
    from megatron.core import parallel_state

    group = parallel_state.get_tensor_model_parallel_group()
    logits_bytes = s * b * v * torch.finfo(dtype).bits // 8

    def working_set(fn) -> int:
        x.grad = w.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn().backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        working_set(lambda: mod.linear_cross_entropy(x, w, t, tp_group=group, reduction="mean"))  # warm-up
        fused = working_set(lambda: mod.linear_cross_entropy(x, w, t, tp_group=group, reduction="mean"))
    plain = working_set(lambda: torch.nn.functional.cross_entropy(
        (x.reshape(-1, h) @ w.t()).float(), t.reshape(-1), reduction="mean"))
    messages = fallback_warnings(caught)
    figure("memory_shape", None, None, seqlen=s, batch=b, hidden=h, vocab=v, dtype="bfloat16",
           compute_capability=f"{cc[0]}.{cc[1]}", device_name=torch.cuda.get_device_name())
    figure("logits_bytes_bf16", logits_bytes, "bytes")
    figure("working_set_linear_cross_entropy", fused, "bytes", ratio_to_logits=fused / logits_bytes,
           fallback_warning=messages[:1])
    figure("working_set_plain_materialized", plain, "bytes", ratio_to_logits=plain / logits_bytes)
    dist.destroy_process_group()
    details = {"lane": lane(), "working_set_bytes": fused, "logits_bytes": logits_bytes,
               "ratio": round(fused / logits_bytes, 3), "threshold": MEMORY_FRACTION,
               "fallback_warning_seen": bool(messages), "compute_capability": f"{cc[0]}.{cc[1]}"}
    if fused <= MEMORY_FRACTION * logits_bytes:
        verdict("MEMORY_SAVE_VERIFIED", **details)
    else:
        verdict("MEMORY_SAVE_MISSING", observed="the working set holds the materialized logits"
                + (" (the unfused fallback warned)" if messages else ""), **details)
    return 0


def main() -> int:
    args = parse_args()
    start(args, "megatron-core", MODULE)
    if args.stage == "memory":
        return stage_memory(args)
    if args.device == "cuda":
        require_cuda("no CUDA device; the cpu lanes simulate the dispatcher's capability query")
        return stage_numerics(args, "cuda", None)
    major, minor = (int(p) for p in args.simulate_cc.split("."))
    return stage_numerics(args, "cpu", (major, minor))


if __name__ == "__main__":
    sys.exit(main())
