"""Pack 10's domain, one point: which path fused linear cross entropy takes at one compute capability.

Run by repros/kit/_domain.py (a ``domain = true`` lane) once per point of ``[packs.10.domain]``:

    python repros/megatron-lm/pack10_domain_point.py --point '{"compute_capability": "8.6"}'

On the CPU host the dispatcher's capability queries are simulated (``torch.cuda.is_available / current_device /
get_device_capability / get_device_name`` report one GPU of that capability while ``Platform`` decides; tensors
stay on the CPU), and the Blackwell kernel entry is replaced by a stand-in module, so the point shows which path
the real dispatcher picks, not the hardware (the cuda lanes run an H100/H200):

* it raises ``ValueError`` (the unchanged dispatcher at every capability but 10): **declined**, the path named;
* it picks the native kernel entry (capability 10): **declined** too -- the change leaves the point to its
  previous path, which the detail names;
* it falls back to the unfused path (the change, at a capability with no entry): the mean loss over 20 %
  ignored tokens, and the gradients of hidden states and weight, are compared with ``F.cross_entropy`` on
  float64 logits; each may sit ``K_NOISE`` times the plain float32 path's own error above it -> **matched**,
  else **mismatch**. ``detail`` says how many fallback warnings the decision gave (one is the contract).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import types
import warnings

from _numerics import K_NOISE, rel_fro, tolerance

MODULE = "megatron.core.fusions.fused_linear_cross_entropy"
ENTRY = "megatron.core.fusions.linear_cross_entropy.blackwell.entry"
IGNORE = -100
TOKENS, HIDDEN, VOCAB = 128, 64, 1000


def emit(**result) -> None:
    print("DOMAIN_POINT " + json.dumps(result, sort_keys=True, default=str), flush=True)


@contextlib.contextmanager
def simulated_gpu(torch, cc: tuple[int, int]):
    """Make torch.cuda report one GPU of compute capability ``cc`` (only what the dispatcher asks)."""
    names = ("is_available", "current_device", "get_device_capability", "get_device_name")
    saved = {n: getattr(torch.cuda, n) for n in names}
    torch.cuda.is_available = lambda: True
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda device=None: cc
    torch.cuda.get_device_name = lambda device=None: f"simulated sm_{cc[0]}{cc[1]} (CPU host)"
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.cuda, n, f)


def native_entry_stand_in() -> types.ModuleType:
    """The Blackwell entry module, as the dispatcher imports it, without its CuTe kernels."""
    entry = types.ModuleType(ENTRY)

    def forward(*args, **kwargs):
        raise RuntimeError("the native kernel entry's stand-in cannot run")

    entry.forward, entry.backward = forward, forward
    sys.modules[ENTRY] = entry
    return entry


def world_of_one(torch) -> None:
    from megatron.core import parallel_state

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    torch.distributed.init_process_group("gloo")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--point", required=True, help='{"compute_capability": "9.0"}')
    p.add_argument("--expect", choices=["admit", "decline"])
    point = json.loads(p.parse_args().point)
    cc = tuple(int(x) for x in str(point["compute_capability"]).split("."))
    import importlib

    import torch
    import torch.nn.functional as F

    world_of_one(torch)
    entry = native_entry_stand_in()
    mod = importlib.import_module(MODULE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with simulated_gpu(torch, cc):
            try:
                platform = mod._get_platform()
            except ValueError as exc:
                emit(outcome="declined", detail={"path": f"raises ValueError: {exc}"})
                return 0
            mod._get_platform()  # decided once per process: a second call warns no more
    warned = sum(1 for w in caught if "linear cross entropy" in str(w.message).lower())
    if platform.forward_func is entry.forward:
        emit(outcome="declined", detail={"path": "native kernel entry (linear_cross_entropy/blackwell/entry.py)",
                                         "fallback_warnings": warned})
        return 0
    g = torch.Generator().manual_seed(10)
    x = torch.randn(TOKENS, HIDDEN, generator=g)
    w = torch.randn(VOCAB, HIDDEN, generator=g) * (4.0 / HIDDEN**0.5)
    t = torch.randint(0, VOCAB, (TOKENS,), generator=g)
    t[torch.randperm(TOKENS, generator=g)[: TOKENS // 5]] = IGNORE
    xx, ww = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    with simulated_gpu(torch, cc):  # the backward too: whatever the fallback asks of torch.cuda sees the same GPU
        loss = mod.linear_cross_entropy(xx, ww, t, tp_group=None, reduction="mean", ignore_index=IGNORE)
        loss.backward()
    got = {"loss": loss.detach(), "grad_hidden": xx.grad, "grad_weight": ww.grad}
    ref, plain = {}, {}
    for dtype, into in ((torch.float64, ref), (torch.float32, plain)):
        a = x.to(dtype).requires_grad_(True)
        b = w.to(dtype).requires_grad_(True)
        out = F.cross_entropy(a @ b.t(), t, ignore_index=IGNORE)
        out.backward()
        into.update(loss=out.detach(), grad_hidden=a.grad, grad_weight=b.grad)
    errors = {k: rel_fro(got[k], ref[k]) for k in got}
    tols = {k: tolerance(rel_fro(plain[k], ref[k]), K_NOISE * torch.finfo(torch.float32).eps) for k in got}
    ok = all(errors[k] <= tols[k] for k in got) and warned == 1
    emit(outcome="matched" if ok else "mismatch", errors=errors, tol=max(tols.values()),
         detail={"path": "unfused fallback (materialized logits, vocab_parallel_cross_entropy)",
                 "fallback_warnings": warned, "tolerances": tols})
    return 0


if __name__ == "__main__":
    sys.exit(main())
