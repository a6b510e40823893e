"""mamba3 mimo bwd: support grouped Q/K heads (1 < G < H): a self-contained reproducer.

Needs mamba-ssm (the package under test) importable, torch, a CUDA GPU, with tilelang==0.1.8,
apache-tvm-ffi==0.1.9, z3-solver==4.15.4.0, einops==0.8.2, psutil==7.2.2, tqdm==4.67.3,
cloudpickle==3.1.2, packaging==26.0. Nothing else: every helper it uses is copied in below.

Run it once per build, from one directory:

  1. mamba-ssm 2.3.2.post1 as published (CUDA GPU):
       HARNESS_LANE=bug-2.3.2.post1 HARNESS_PATCHED=0 HARNESS_RUN_DIR=./repro-run python repro_mimo_gqa_backward.py
  2. mamba-ssm 2.3.2.post1 with this PR (CUDA GPU):
       HARNESS_LANE=fix-2.3.2.post1 HARNESS_PATCHED=1 HARNESS_RUN_DIR=./repro-run python repro_mimo_gqa_backward.py

Each run prints one JSON line per measurement and ends with a line naming what it observed.

Method notes:

Pack 05: Mamba-3 MIMO backward with grouped Q/K heads (1 < G < H).

Question asked on every lane: does the real ``mamba3_mimo`` (TileLang forward/backward kernels of
the installed build) give gradients when Q/K (Mamba-3's C/B) have G groups shared by H heads,
1 < G < H, and are they right?

* bug lane (pristine 2.3.2.post1): backward at H=16, G=2 raises ``ValueError("G value of 2 is not
  currently supported!")`` -> BUG_REPRODUCED. The lane also saves the gradients of the supported
  cases G=1 and G=H (small shape) under ``$HARNESS_RUN_DIR`` for the fix lane.
* fix lane (04 + 05 series): every gradient of the GQA run, dense and varlen, is finite and agrees
  with an independent reference that never takes the new branch: the G=H path on the same problem
  with Q/K repeated per head (``repeat_interleave``: head h reads group h // (H/G), as the kernels
  do); the reference's dQ/dK are its per-head gradients summed over the heads of each group in
  float32. The Q/K biases are per head ([H, R, N]) in this API, so they need no repeating.
  -> FIX_VALIDATED. G=1 and G=H must give the baseline lane's gradients (the patch must not
  touch them).

Tolerance from a control, not a guess: per tensor, ``max(K_NOISE * control, bf16 unit roundoff)``
where control = the larger of the reference's run-to-run distance (a second G=H run: atomics) and
what storing the reference in bf16 costs it. Distances are relative Frobenius norms.

Performance (fix lane, figures only): backward time of the GQA run against the G=H run at a
moderate shape, with a model FLOP estimate (both runs do the same arithmetic, so the ratio is
what matters).

    HARNESS_RUN_DIR=/tmp/r05 HARNESS_PATCHED=0 python pack05_mimo_gqa_backward.py   # then =1
"""

from __future__ import annotations

import argparse
import math
import os


# ---- from _lane.py (verbatim) ----
import json
import platform
import sys
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


# ---- from _mamba3.py (verbatim) ----
import hashlib
import statistics
from pathlib import Path


K_NOISE = 4.0  # a result may sit this many times above its control's error


BF16_FLOOR = 2.0**-8  # bf16 unit roundoff: the smallest tolerance ever used


def run_dir() -> Path:
    path = os.environ.get("HARNESS_RUN_DIR")
    if not path:
        raise SystemExit("HARNESS_RUN_DIR is not set: run the lanes through 'harness run', or set it to a "
                         "directory shared by the baseline and the patched lane")
    Path(path).mkdir(parents=True, exist_ok=True)
    return Path(path)


def digest(t) -> str:
    """sha256 of a tensor's bytes (dtype and shape included)."""
    import torch

    h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
    # reshape(-1): a 0-dim tensor (a scalar control) cannot be viewed as bytes directly
    h.update(t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def save_results(name: str, meta: dict, tensors: dict) -> Path:
    import torch

    path = run_dir() / f"{name}.pt"
    tmp = path.with_suffix(".partial")
    torch.save({"meta": meta, "tensors": {k: v.detach().cpu() for k, v in tensors.items() if v is not None}}, tmp)
    tmp.replace(path)
    for k, v in tensors.items():
        if v is not None:
            figure("grad_sha256", digest(v), case=name, tensor=k)
    return path


def load_results(name: str, meta: dict) -> dict:
    import torch

    path = run_dir() / f"{name}.pt"
    if not path.is_file():
        raise SystemExit(f"{path}: no baseline results; run the baseline lane first in the same HARNESS_RUN_DIR")
    data = torch.load(path, map_location="cpu")
    if data["meta"] != meta:
        raise SystemExit(f"{path}: baseline results are for another problem: {data['meta']} != {meta}")
    return data["tensors"]


def rel_fro(a, ref) -> float:
    a, ref = a.double(), ref.double()
    return ((a - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def max_abs(a, ref) -> float:
    return (a.double() - ref.double()).abs().max().item()


def time_ms(torch, fn, warmup: int = 3, repeat: int = 15) -> dict:
    """Median and spread of ``fn`` in milliseconds (CUDA events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
            "stdev_ms": statistics.stdev(times) if len(times) > 1 else 0.0, "repeat": repeat}


# ---- the reproducer ----

UNSUPPORTED = "is not currently supported"
GRADS = ("Q", "K", "V", "ADT", "DT", "Trap", "Q_bias", "K_bias", "MIMO_V", "MIMO_Z", "MIMO_Out", "Angles", "D", "Z")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lane", help="lane name; overrides HARNESS_LANE")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--rank", type=int, default=4, help="MIMO rank R")
    p.add_argument("--headdim-qk", type=int, default=128, help="N (d_state)")
    p.add_argument("--headdim-v", type=int, default=64, help="P")
    p.add_argument("--chunk", type=int, default=16, help="chunk size (64 / R recommended upstream)")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seqlen", type=int, default=128)
    p.add_argument("--varlen", type=int, nargs="+", default=[64, 48, 80], help="sequence lengths of the varlen case")
    p.add_argument("--perf-batch", type=int, default=2)
    p.add_argument("--perf-seqlen", type=int, default=2048)
    p.add_argument("--no-perf", action="store_true")
    return p.parse_args()


# --------------------------------------------------------------------------- problem


def make_inputs(torch, a, batch, seqlen, groups, seed, device):
    """Inputs of mamba3_mimo in the dtypes Mamba3 (modules/mamba3.py) feeds it."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    H, R, N, P = a.heads, a.rank, a.headdim_qk, a.headdim_v
    bf16, f32 = torch.bfloat16, torch.float32

    def rnd(*shape, scale=1.0, dtype=f32):
        return (torch.randn(*shape, generator=g) * scale).to(dtype).to(device)

    dt = torch.nn.functional.softplus(torch.randn(batch, H, seqlen, generator=g) - 2.0)
    A = -(0.5 + torch.rand(batch, H, seqlen, generator=g))
    return {
        "Q": rnd(batch, seqlen, R, groups, N, scale=N**-0.5, dtype=bf16),
        "K": rnd(batch, seqlen, R, groups, N, scale=N**-0.5, dtype=bf16),
        "V": rnd(batch, seqlen, H, P, dtype=bf16),
        "ADT": (A * dt).to(device),
        "DT": dt.to(device),
        "Trap": rnd(batch, H, seqlen, dtype=bf16),
        "Q_bias": rnd(H, R, N, scale=0.1),
        "K_bias": rnd(H, R, N, scale=0.1),
        "MIMO_V": 1.0 / R + rnd(H, R, P, scale=0.1),
        "MIMO_Z": 1.0 + rnd(H, R, P, scale=0.1),
        "MIMO_Out": 1.0 / R + rnd(H, R, P, scale=0.1),
        "Angles": rnd(batch, seqlen, H, N // 4, scale=0.5),
        "D": rnd(H),
        "Z": rnd(batch, seqlen, H, P, dtype=bf16),
    }


def fwd_bwd(torch, mamba3_mimo, a, inputs, dout, cu_seqlens=None):
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in inputs.items()}
    out = mamba3_mimo(**leaves, chunk_size=a.chunk, rotary_dim_divisor=4, dtype=torch.bfloat16,
                      cu_seqlens=cu_seqlens)
    out.backward(dout)
    torch.cuda.synchronize()
    return {k: leaves[k].grad for k in GRADS}


def repeat_qk(inputs, per_group):
    out = dict(inputs)
    out["Q"] = inputs["Q"].repeat_interleave(per_group, dim=3)
    out["K"] = inputs["K"].repeat_interleave(per_group, dim=3)
    return out


def group_sum(grad, groups):
    B, S, R, H, N = grad.shape
    return grad.float().view(B, S, R, groups, H // groups, N).sum(dim=4)


# --------------------------------------------------------------------------- checks


def reference(torch, mamba3_mimo, a, inputs, dout, cu_seqlens, groups):
    """G=H path with Q/K repeated per head, twice (run-to-run control); dQ/dK summed per group."""
    per_group = a.heads // groups
    rep = repeat_qk(inputs, per_group)
    runs = []
    for _ in range(2):
        r = fwd_bwd(torch, mamba3_mimo, a, rep, dout, cu_seqlens)
        r["Q"], r["K"] = group_sum(r["Q"], groups), group_sum(r["K"], groups)
        runs.append(r)
    return runs


def compare_to_reference(torch, got, refs, case):
    ref, ref2 = refs
    failures = []
    for name in GRADS:
        g, r = got[name], ref[name]
        if g is None or r is None:
            failures.append(f"{case}:{name} missing")
            continue
        finite = bool(torch.isfinite(g).all())
        control = max(rel_fro(ref2[name], r), rel_fro(r.to(torch.bfloat16), r))
        tol = max(K_NOISE * control, BF16_FLOOR)
        err = rel_fro(g, r) if g.shape == r.shape else float("inf")
        ok = finite and err <= tol
        figure("grad_rel_fro", err, case=case, tensor=name, tolerance=tol, control=control, finite=finite,
               max_abs=max_abs(g, r) if g.shape == r.shape else None, shape=list(g.shape), ok=ok)
        if not ok:
            failures.append(f"{case}:{name} rel_fro {err:.3g} > {tol:.3g}" if finite else f"{case}:{name} not finite")
    return failures


def supported_cases(torch, mamba3_mimo, a, device):
    """Gradients of G=1 and G=H on the small dense shape (unchanged by the patch)."""
    out = {}
    for groups in (1, a.heads):
        inputs = make_inputs(torch, a, a.batch, a.seqlen, groups, seed=50 + groups, device=device)
        dout = make_dout(torch, a.batch, a.seqlen, a, seed=60 + groups, device=device)
        out[groups] = fwd_bwd(torch, mamba3_mimo, a, inputs, dout)
    return out


def make_dout(torch, batch, seqlen, a, seed, device):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(batch, seqlen, a.heads, a.headdim_v, generator=g).to(torch.bfloat16).to(device)


def problem_meta(a) -> dict:
    return {"heads": a.heads, "rank": a.rank, "N": a.headdim_qk, "P": a.headdim_v, "chunk": a.chunk,
            "batch": a.batch, "seqlen": a.seqlen}


def perf(torch, mamba3_mimo, a, device):
    """Backward time, GQA (G=groups) against the G=H path, same shape and arithmetic."""
    B, S, H, N, P, L = a.perf_batch, a.perf_seqlen, a.heads, a.headdim_qk, a.headdim_v, a.chunk * a.rank
    nchunks = math.ceil(S / a.chunk)
    # Model count of the chunked algorithm's GEMMs per (batch, head, chunk) of L = chunk*R rows: QK^T (L*L*N),
    # masked scores @ V (L*L*P), C @ state and the state update (2 * L*N*P); backward ~ 3x forward (recompute
    # + gradient GEMMs). An estimate for scale, not a measured count.
    fwd_flops = 2 * B * H * nchunks * (L * L * (N + P) + 2 * L * N * P)
    bwd_flops = 3 * fwd_flops
    dout = make_dout(torch, B, S, a, seed=7, device=device)
    times = {}
    for label, groups in (("gqa", a.groups), ("g_eq_h", H)):
        inputs = make_inputs(torch, a, B, S, groups, seed=5, device=device)
        leaves = {k: v.detach().clone().requires_grad_(True) for k, v in inputs.items()}
        out = mamba3_mimo(**leaves, chunk_size=a.chunk, rotary_dim_divisor=4, dtype=torch.bfloat16)
        params = list(leaves.values())
        times[label] = time_ms(torch, lambda o=out, p=params: torch.autograd.grad(o, p, dout, retain_graph=True))
        t = times[label]
        figure("bwd_time_ms", t["median_ms"], unit="ms", case=label, groups=groups, heads=H, batch=B, seqlen=S,
               spread_ms=[t["min_ms"], t["max_ms"]], stdev_ms=t["stdev_ms"], repeat=t["repeat"])
        figure("bwd_tflops_est", bwd_flops / (t["median_ms"] * 1e-3) / 1e12, unit="TFLOP/s", case=label,
               flops_model="3 x 2*B*H*nchunks*(L^2*(N+P) + 2*L*N*P), L=chunk*R")
        del out, leaves
    figure("bwd_time_ratio_gqa_over_g_eq_h", times["gqa"]["median_ms"] / times["g_eq_h"]["median_ms"],
           groups=a.groups, heads=H, batch=B, seqlen=S)


# --------------------------------------------------------------------------- main


def main() -> None:
    a = parse_args()
    if a.lane:
        os.environ["HARNESS_LANE"] = a.lane
    stamp("mamba-ssm", "mamba_ssm")
    import torch

    if not torch.cuda.is_available():
        skip("needs a CUDA GPU (TileLang kernels)")
    from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo import mamba3_mimo

    if a.heads % a.groups or not 1 < a.groups < a.heads:
        raise SystemExit(f"--groups {a.groups} must satisfy 1 < G < H and H % G == 0 (H={a.heads})")
    device = "cuda"
    patched = os.environ.get("HARNESS_PATCHED") == "1"
    figure("problem", problem_meta(a) | {"groups": a.groups, "varlen": a.varlen}, lane=lane())

    inputs = make_inputs(torch, a, a.batch, a.seqlen, a.groups, seed=5, device=device)
    dout = make_dout(torch, a.batch, a.seqlen, a, seed=6, device=device)
    try:
        got = fwd_bwd(torch, mamba3_mimo, a, inputs, dout)
        raised = None
    except ValueError as exc:
        if UNSUPPORTED not in str(exc):
            raise
        got, raised = None, str(exc)
    figure("gqa_backward_dense", "ValueError" if raised else "ok", message=raised, heads=a.heads, groups=a.groups)

    supported = supported_cases(torch, mamba3_mimo, a, device)
    if not patched:
        for groups, grads in supported.items():
            save_results(f"pack05-g{groups}", problem_meta(a) | {"groups": groups}, grads)
        if raised:
            verdict("BUG_REPRODUCED", heads=a.heads, groups=a.groups, error=raised)
        else:
            verdict("BUG_ABSENT", heads=a.heads, groups=a.groups, note="GQA backward ran on the baseline build")
        return

    if raised:
        verdict("FIX_FAILED", error=raised, case="dense")
        return
    failures = compare_to_reference(torch, got, reference(torch, mamba3_mimo, a, inputs, dout, None, a.groups),
                                    "dense")

    lengths = a.varlen
    cu = torch.tensor([0] + [sum(lengths[: i + 1]) for i in range(len(lengths))], dtype=torch.int32, device=device)
    total = int(cu[-1])
    v_inputs = make_inputs(torch, a, 1, total, a.groups, seed=15, device=device)
    v_dout = make_dout(torch, 1, total, a, seed=16, device=device)
    try:
        v_got = fwd_bwd(torch, mamba3_mimo, a, v_inputs, v_dout, cu)
        figure("gqa_backward_varlen", "ok", lengths=lengths)
        failures += compare_to_reference(torch, v_got, reference(torch, mamba3_mimo, a, v_inputs, v_dout, cu, a.groups),
                                         "varlen")
    except ValueError as exc:
        if UNSUPPORTED not in str(exc):
            raise
        figure("gqa_backward_varlen", "ValueError", message=str(exc), lengths=lengths)
        failures.append(f"varlen: {exc}")

    for groups, grads in supported.items():
        base = load_results(f"pack05-g{groups}", problem_meta(a) | {"groups": groups})
        for name in GRADS:
            g, b = grads[name], base.get(name)
            if g is None or b is None:
                continue
            g = g.cpu()
            same = bool(torch.equal(g, b))
            err = rel_fro(g, b)
            figure("unchanged_vs_baseline", err, groups=groups, tensor=name, bitwise_equal=same, tolerance=BF16_FLOOR)
            if err > BF16_FLOOR:
                failures.append(f"G={groups}:{name} differs from the baseline build (rel_fro {err:.3g})")

    if not a.no_perf:
        perf(torch, mamba3_mimo, a, device)

    if failures:
        verdict("FIX_FAILED", failures=failures[:20], n_failures=len(failures))
    else:
        verdict("FIX_VALIDATED", heads=a.heads, groups=a.groups, cases=["dense", "varlen", "G=1 unchanged",
                                                                         "G=H unchanged"])


if __name__ == "__main__":
    main()
