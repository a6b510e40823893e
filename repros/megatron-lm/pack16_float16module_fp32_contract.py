"""Pack 16: megatron-core Float16Module and parameters that must stay fp32.

Question asked on every lane: when a module declares that some of its parameters keep
fp32 (Mamba-3's dt_bias, D, B_bias, C_bias and MIMO biases are the real case), does the
REAL ``megatron.core.transformer.module.Float16Module`` of the installed build leave them
in fp32 -- after wrapping, and after training steps -- without re-casting them each step?

The wrapped module is a small stand-in with Mamba-3's parameter names: it declares
``keep_fp32_params = ("dt_bias", "D", "B_bias", "C_bias")`` (the class attribute the patch
adds) and, where the build offers it, marks a MIMO-style bias with ``keep_fp32(param)``.
On the baseline both declarations have no effect, which is the bug.

Checks (patched lanes):

* after the wrap: every declared parameter is fp32, the same Parameter object as before,
  on the same storage (data_ptr) and bitwise equal to its pre-wrap value; every other
  floating parameter is bf16 (the wrapper still does its job);
* over several forward/backward/SGD steps through the wrapper: declared parameters stay
  fp32, keep their object and data_ptr (nothing re-cast per step), get fp32 grads and do
  move; the bf16 parameters keep their data_ptr too;
* a ``keep_fp32_params`` entry that names no parameter is rejected.

Runs on CPU: torch.distributed gloo with world size 1 and megatron's own
``parallel_state.initialize_model_parallel()`` (Float16Module.forward asks it for the
pipeline group).

    HARNESS_LANE=bug-0.19.2 python pack16_float16module_fp32_contract.py [--lane NAME]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

from _lane import figure, lane, stamp, verdict

CONTRACT = ("dt_bias", "D", "B_bias", "C_bias")  # declared through keep_fp32_params
MARKED = "mimo_x_bias"  # declared through keep_fp32(param) where the build has it
HIDDEN, NHEADS, HEADDIM, DSTATE, RANK = 64, 4, 16, 8, 2
STEPS = 3


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lane", help="lane name; overrides HARNESS_LANE")
    return p.parse_args()


def init_single_process(parallel_state, dist) -> None:
    """A real (gloo, world size 1) process group and megatron's model-parallel groups over it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)


def standin_class(torch, keep_fp32):
    """A Mamba-3-shaped toy: bf16-friendly projections around fp32-contract SSM parameters."""
    nn = torch.nn

    class Mamba3Standin(nn.Module):
        keep_fp32_params = CONTRACT

        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(16)
            self.in_proj = nn.Linear(HIDDEN, NHEADS * (1 + 2 * DSTATE + HEADDIM), bias=False)
            # dt in [1e-3, 1e-1], stored as softplus^-1(dt): values bf16 cannot hold exactly
            dt = torch.exp(torch.rand(NHEADS, generator=g) * (torch.log(torch.tensor(0.1)) - torch.log(
                torch.tensor(1e-3))) + torch.log(torch.tensor(1e-3)))
            self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
            self.D = nn.Parameter(1.0 + 1e-3 * torch.randn(NHEADS, generator=g))
            self.B_bias = nn.Parameter(1e-3 * torch.randn(NHEADS, DSTATE, generator=g))
            self.C_bias = nn.Parameter(1e-3 * torch.randn(NHEADS, DSTATE, generator=g))
            mimo = nn.Parameter(1.0 + 1e-3 * torch.randn(NHEADS, RANK, HEADDIM, generator=g))
            self.mimo_x_bias = keep_fp32(mimo) if keep_fp32 is not None else mimo
            self.out_proj = nn.Linear(NHEADS * HEADDIM, HIDDEN, bias=False)

        def forward(self, x):  # x: [b, s, HIDDEN] in the model dtype
            b, s, _ = x.shape
            z = self.in_proj(x).view(b, s, NHEADS, 1 + 2 * DSTATE + HEADDIM)
            dt_raw, B, C, xh = torch.split(z, [1, DSTATE, DSTATE, HEADDIM], dim=-1)
            # the "kernel": fp32 SSM arithmetic, the way Mamba-3's kernels consume these
            dt = torch.nn.functional.softplus(dt_raw.squeeze(-1).float() + self.dt_bias.float())
            B = B.float() + self.B_bias.float()
            C = C.float() + self.C_bias.float()
            xh = xh.float() * self.mimo_x_bias.float().mean(1)
            gate = (B * C).sum(-1) * dt  # [b, s, h]
            y = gate.unsqueeze(-1) * xh + self.D.float()[:, None] * xh
            return self.out_proj(y.to(x.dtype).reshape(b, s, NHEADS * HEADDIM))

    return Mamba3Standin


def main() -> int:
    args = parse_args()
    if args.lane:
        os.environ["HARNESS_LANE"] = args.lane
    stamp("megatron-core", "megatron.core.transformer.module")

    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.transformer import module as mcore_module
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    torch.manual_seed(0)
    init_single_process(parallel_state, dist)
    config = TransformerConfig(num_layers=1, hidden_size=HIDDEN, num_attention_heads=NHEADS, bf16=True,
                               params_dtype=torch.float32)
    keep_fp32 = getattr(mcore_module, "keep_fp32", None)
    figure("keep_fp32_marker_api", keep_fp32 is not None, None)
    declared = CONTRACT + (MARKED,)

    inner = standin_class(torch, keep_fp32)()
    before = {n: p for n, p in inner.named_parameters()}
    snap = {n: (p.data_ptr(), p.detach().clone()) for n, p in before.items()}

    wrapped = Float16Module(config, inner)
    after = dict(wrapped.module.named_parameters())
    failures: list[str] = []
    dtypes = {n: str(p.dtype).replace("torch.", "") for n, p in after.items()}
    figure("dtypes_after_wrap", dtypes, None)
    cast_declared = [n for n in declared if after[n].dtype != torch.float32]
    for n in declared:
        p = after[n]
        if p.dtype == torch.float32:
            if p is not before[n]:
                failures.append(f"{n}: Parameter object replaced by the wrap")
            if p.data_ptr() != snap[n][0]:
                failures.append(f"{n}: storage moved by the wrap")
            if not torch.equal(p.detach(), snap[n][1]):
                failures.append(f"{n}: value changed by the wrap")
        else:
            err = (p.detach().double() - snap[n][1].double()).abs().max().item()
            figure("cast_rounding_max_abs", err, None, param=n, dtype=dtypes[n])
    if cast_declared:
        failures.append(f"cast to 16 bits by Float16Module: {', '.join(cast_declared)}")
    not_cast = [n for n, p in after.items() if n not in declared and p.dtype != torch.bfloat16]
    if not_cast:
        failures.append(f"undeclared parameters not cast to bf16: {', '.join(not_cast)}")

    # training steps through the real wrapper (fp32 input -> bf16 on the first stage)
    opt = torch.optim.SGD(wrapped.parameters(), lr=1e-2)
    ptrs = {n: p.data_ptr() for n, p in after.items()}
    objs = dict(after)
    x = torch.randn(2, 8, HIDDEN)
    out_dtype = None
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        out = wrapped(x)
        out_dtype = str(out.dtype).replace("torch.", "")
        out.float().pow(2).mean().backward()
        opt.step()
        now = dict(wrapped.module.named_parameters())
        for n in declared:
            p = now[n]
            if p.dtype != torch.float32:
                failures.append(f"step {step}: {n} is {p.dtype}")
            if p.grad is None or p.grad.dtype != torch.float32:
                failures.append(f"step {step}: {n}.grad is {None if p.grad is None else p.grad.dtype}")
        for n, p in now.items():
            if p is not objs[n]:
                failures.append(f"step {step}: {n} Parameter object replaced")
            if p.data_ptr() != ptrs[n]:
                failures.append(f"step {step}: {n} storage moved (re-cast?)")
    moved = {n: not torch.equal(after[n].detach().float(), snap[n][1].float()) for n in declared}
    figure("declared_params_updated", moved, None, steps=STEPS)
    figure("output_dtype", out_dtype, None, fp32_output=True)
    if not all(moved.values()):
        failures.append(f"declared parameters not updated by {STEPS} SGD steps: "
                        + ", ".join(n for n, m in moved.items() if not m))

    # a declaration that names no parameter must not pass silently (patched API only)
    if keep_fp32 is not None:
        class Typo(torch.nn.Module):
            keep_fp32_params = ("dt_bais",)

            def __init__(self):
                super().__init__()
                self.dt_bias = torch.nn.Parameter(torch.zeros(2))

        try:
            Float16Module(config, Typo())
            failures.append("keep_fp32_params naming no parameter was accepted")
            figure("typo_rejected", False, None)
        except ValueError as exc:
            figure("typo_rejected", True, None, error=str(exc))

    dist.destroy_process_group()
    name = lane()
    details = {
        "lane": name,
        "question": "does Float16Module keep declared fp32-contract parameters in fp32, without re-casting?",
        "declared": list(declared),
        "cast_declared": cast_declared,
        "failures": failures,
    }
    if name.startswith("fix"):
        verdict("FIX_FAILED" if failures else "FIX_VALIDATED", **details)
    else:
        verdict("BUG_REPRODUCED" if cast_declared else "BUG_ABSENT", **details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
