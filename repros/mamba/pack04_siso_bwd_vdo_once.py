"""Mamba-3 SISO backward: V @ dO^T computed once per chunk -- equivalence check.

The change is a cleanup of ``mamba3_siso_bwd_kernel_dqkv`` (Triton): the masked V @ dO^T product is
computed once instead of three times. Claim: every output of ``compute_dqkv`` -- dQ, dK, dV, dADT,
dQK_dot, dD, d_issm_state -- is bitwise identical to the unchanged kernel's, dense and varlen.

Each process holds one build, so the check takes two runs sharing one run directory:

* the unchanged build runs ``compute_dqkv`` twice on fixed inputs. The kernel must be deterministic
  from run to run (a bitwise comparison means nothing otherwise) -> CONTRACT_HELD, else
  CONTRACT_BROKEN. It saves the outputs, prints their sha256, and times ``compute_dqkv`` (kernel
  time from the profiler, wall time, spreads).
* the changed build takes the same inputs and launch config; every output bitwise equal to the
  unchanged run's -> EQUIVALENCE_VERIFIED, else EQUIVALENCE_BROKEN. Given the unchanged build as
  well, it loads that ``mamba3_siso_bwd.py`` beside the changed one and times both
  ``compute_dqkv`` in this one process, calls interleaved, so a time ratio never spans two processes.

``compute_dqkv`` and its kernel differ between 2.3.2.post1 and main (e9594ce) only in whitespace,
and the change applies to both. The kernel compiles once per run (one pinned launch config), about
a minute cold; varlen is another specialisation of it.

Autotuning is bounded: the autotuner gets one launch config (``--config``) in both runs, so both
compile the same variant and follow the same schedule (another warp count could change the order
of the reductions, which would not be the change's doing).
"""

from __future__ import annotations

from _lane import figure, lane, parser, patched, require_cuda, start, verdict
from _mamba3 import load_baseline_module, load_results, save_results
from _timing import compare, report

OUTPUTS = ("dQ", "dK", "dV", "dADT", "dQK_dot", "dD", "d_issm_state")


def parse_args(argv=None):
    p = parser(__doc__)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--headdim-qk", type=int, default=128)
    p.add_argument("--headdim-v", type=int, default=64)
    p.add_argument("--chunk", type=int, default=64)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seqlen", type=int, default=512)
    p.add_argument("--varlen", type=int, nargs="+", default=[192, 320, 256])
    p.add_argument("--config", default="2,4", help="num_stages,num_warps of the single launch config")
    p.add_argument("--perf-batch", type=int, default=4)
    p.add_argument("--perf-seqlen", type=int, default=4096)
    p.add_argument("--no-perf", action="store_true")
    return p.parse_args(argv)


def pin_config(triton, module, spec: str) -> dict:
    stages, warps = (int(x) for x in spec.split(","))
    kernel = module.mamba3_siso_bwd_kernel_dqkv
    if not hasattr(kernel, "configs"):
        raise SystemExit("mamba3_siso_bwd_kernel_dqkv is not an autotuned kernel in this build")
    kernel.configs = [triton.Config({}, num_stages=stages, num_warps=warps)]
    return {"num_stages": stages, "num_warps": warps}


def make_inputs(torch, a, batch, seqlen, cu_seqlens, seed, device):
    """Inputs shaped as mamba3_siso_combined's backward passes them to compute_dqkv."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    H, N, P, C = a.heads, a.headdim_qk, a.headdim_v, a.chunk
    if cu_seqlens is None:
        nseq, nchunks = batch, (seqlen + C - 1) // C
        starts = torch.zeros(seqlen, dtype=torch.long)
        pos = torch.arange(seqlen)
    else:
        bounds = cu_seqlens.tolist()
        nseq, nchunks = len(bounds) - 1, len(bounds) - 1 + seqlen // C
        pos = torch.cat([torch.arange(e - s) for s, e in zip(bounds[:-1], bounds[1:], strict=True)])
        starts = None
    step = -(0.02 + 0.1 * torch.rand(batch, H, seqlen, generator=g))  # log2 decay per token
    # within-chunk cumulative decay (chunks restart at each sequence start in varlen)
    chunk_id = pos // C
    da_cs = torch.empty_like(step)
    key = chunk_id if starts is not None else torch.cumsum((pos == 0).long(), 0) * 10**6 + chunk_id
    for k in key.unique():
        idx = (key == k).nonzero().squeeze(1)
        da_cs[..., idx] = torch.cumsum(step[..., idx], dim=-1)
    bf16, f32 = torch.bfloat16, torch.float32

    def rnd(*shape, scale=1.0, dtype=f32):
        return (torch.randn(*shape, generator=g) * scale).to(dtype).to(device)

    return {
        "q": rnd(batch, seqlen, H, N, scale=N**-0.5, dtype=bf16),
        "k": rnd(batch, seqlen, H, N, scale=N**-0.5, dtype=bf16),
        "v": rnd(batch, seqlen, H, P, dtype=bf16),
        "da_cs": da_cs.to(device),
        "da_cs_sum": -(0.5 + torch.rand(batch, H, nchunks, generator=g)).to(device),
        "qk_dot": rnd(batch, H, seqlen),
        "SSM_States": rnd(batch, H, P, nchunks * N, scale=0.5, dtype=bf16),
        "do": rnd(batch, seqlen, H, P, dtype=bf16),
        "d_ossm_state": rnd(nseq, H, P, N, scale=0.1),
        "d_ov_state": rnd(nseq, H, P, scale=0.1),
        "D": rnd(H),
    }


def run(compute_dqkv, inputs, a, cu_seqlens):
    out = compute_dqkv(**inputs, chunk_size=a.chunk, has_input_state=True, Cu_Seqlens=cu_seqlens)
    return dict(zip(OUTPUTS, out, strict=True))


def main() -> None:
    a = parse_args()
    start(a, "mamba-ssm", "mamba_ssm")
    torch = require_cuda("needs a CUDA GPU (Triton kernels with TMA descriptors)")
    import triton
    from mamba_ssm.ops.triton.mamba3 import mamba3_siso_bwd
    from mamba_ssm.ops.triton.mamba3.mamba3_siso_combined import _triton_alloc_fn

    triton.set_allocator(_triton_alloc_fn)  # what the autograd backward does before launching
    device = "cuda"
    is_patched = patched()
    config = pin_config(triton, mamba3_siso_bwd, a.config)
    meta = {"heads": a.heads, "N": a.headdim_qk, "P": a.headdim_v, "chunk": a.chunk, "batch": a.batch,
            "seqlen": a.seqlen, "varlen": a.varlen, "config": config}
    figure("problem", meta, lane=lane())

    lengths = a.varlen
    cu = torch.tensor([0] + [sum(lengths[: i + 1]) for i in range(len(lengths))], dtype=torch.int32, device=device)
    cases = {
        "dense": (make_inputs(torch, a, a.batch, a.seqlen, None, seed=4, device=device), None),
        "varlen": (make_inputs(torch, a, 1, int(cu[-1]), cu.cpu(), seed=14, device=device), cu),
    }
    results, deterministic = {}, True
    for case, (inputs, cu_seqlens) in cases.items():
        first = run(mamba3_siso_bwd.compute_dqkv, inputs, a, cu_seqlens)
        second = run(mamba3_siso_bwd.compute_dqkv, inputs, a, cu_seqlens)
        for name in OUTPUTS:
            same = torch.equal(first[name], second[name])
            deterministic &= same
            if not same:
                figure("run_to_run_differs", True, case=case, tensor=name)
            results[f"{case}:{name}"] = first[name]

    if not a.no_perf:
        perf_inputs = make_inputs(torch, a, a.perf_batch, a.perf_seqlen, None, seed=24, device=device)
        timed = {"this_build": mamba3_siso_bwd}
        baseline = load_baseline_module("mamba_ssm.ops.triton.mamba3.mamba3_siso_bwd", "p04_baseline_siso_bwd") \
            if is_patched else None
        if baseline is not None:
            pin_config(triton, baseline, a.config)
            timed = {"baseline": baseline, "patched": mamba3_siso_bwd}
        timings = compare({name: (lambda m=m: run(m.compute_dqkv, perf_inputs, a, None)) for name, m in timed.items()},
                          reference="baseline" if baseline is not None else None, warmup=3, repeat=30,
                          profile_repeat=10)
        for name, t in timings.items():
            report("compute_dqkv_timing", t, build=name, batch=a.perf_batch, seqlen=a.perf_seqlen, heads=a.heads)
        if baseline is not None:
            p, b = timings["patched"], timings["baseline"]
            kernel = p["ratio_to_baseline"] is not None
            figure("bwd_time_ratio_patched_over_baseline",
                   p["ratio_to_baseline"] if kernel else p["wall_ratio_to_baseline"],
                   basis="kernel_ms" if kernel else "wall_ms", wall_ratio=p["wall_ratio_to_baseline"],
                   patched_kernel_ms=p["kernel_ms"], baseline_kernel_ms=b["kernel_ms"],
                   patched_wall_ms=p["wall_ms"], baseline_wall_ms=b["wall_ms"],
                   host_bound=[b["host_bound"], p["host_bound"]],
                   note="both kernels timed in this process, calls interleaved (_timing.compare)")

    if not is_patched:
        save_results("pack04-baseline", meta, results)
        if deterministic:
            verdict("CONTRACT_HELD", contract="baseline compute_dqkv is bitwise deterministic run to run",
                    outputs=len(results))
        else:
            verdict("CONTRACT_BROKEN", contract="baseline compute_dqkv is bitwise deterministic run to run")
        return

    base = load_results("pack04-baseline", meta)
    save_results("pack04-patched", meta, results)
    differ = []
    for key, t in results.items():
        b = base.get(key)
        same = b is not None and torch.equal(t.cpu(), b)
        figure("bitwise_equal", same, output=key)
        if not same:
            differ.append(key)
    if differ or not deterministic:
        verdict("EQUIVALENCE_BROKEN", differ=differ, patched_deterministic=deterministic)
    else:
        verdict("EQUIVALENCE_VERIFIED", outputs=sorted(results), cases=list(cases))

if __name__ == "__main__":
    main()
