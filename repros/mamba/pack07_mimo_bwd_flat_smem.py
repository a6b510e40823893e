"""Pack 07: Mamba-3 MIMO backward with 2-D shared staging (qk_dot, K) -- equivalence and TMA eligibility.

Two modes, one per pair of lanes.

Gradients (default). The patch is a refactor of the TileLang bwd_bwd kernel: no math change, so the
real ``mamba3_mimo`` backward on the patched build (04+05+07 series; at main, 04+07 ported, 05
being absorbed there) must give the baseline build's gradients within bf16 rounding, dense and
varlen (default G=1, upstream's tuned case; the main lanes pass ``--groups 2``, which also covers
the flattened K staging of grouped heads and shares pack 05's main compiles, see "Compile cost"
below). One build per process: the baseline lane
saves its gradients under ``$HARNESS_RUN_DIR`` (see _mamba3.py) after checking the contract the
comparison rests on -- its own backward, run twice, is finite and reproducible to bf16 rounding ->
CONTRACT_HELD. The patched lane compares: per tensor ``rel_fro <= max(K_NOISE * control, bf16
unit roundoff)`` with control = the baseline's run-to-run distance and bf16-storage cost ->
EQUIVALENCE_VERIFIED (bitwise equality is reported per tensor as a figure; it is not required,
since the kernel's schedule may change). Both compile with the kernel's own pass configs, i.e.
TL_DISABLE_TMA_LOWER=True (today's mitigation).

Timing (``--timing``, patched lane with the unpatched build beside it: ``with_baseline``). The
baseline's ``mamba3_mimo_bwd.py`` is loaded next to the patched package, and the forward+backward of
the public entry point is timed with the dense backward taken from one file or the other
(``mamba_mimo_bwd_combined`` swapped in ``mamba3_mimo``'s namespace between calls), the two variants'
calls interleaved in one process (``_timing.compare``). The claim is "no slower": FIX_VALIDATED when
the patched kernel time is at most ``--max-slowdown`` times the baseline's, FIX_FAILED above;
SKIPPED when no kernel time could be measured (wall time alone would time the host). Run it at the
article's production shape (the lane's args); both backward variants compile there once
(``prewarm`` compiles them in parallel).

TMA probe (``--tma-probe``). Lowers ``mamba_mimo_bwd_bwd`` for sm_90 (``tilelang.lower``; no launch)
with TL_DISABLE_TMA_LOWER=False (and, with ``--also-tma-off``, also with the kernel's own pass configs;
the equivalence lanes already JIT-compile that TMA-off variant).
Figures: whether each lowering succeeded, the exception text when not (pack 13's divide-by-zero,
or 0.1.8's "Cannot detect TMA layout" for rank-3 shared buffers), and the count of TMA bulk copies
(``tma_load``) in the generated source. Verdict, on the claim that flattening makes the staging
TMA-eligible: baseline build -> BUG_REPRODUCED when the TMA-on lowering has no tma_load (fails or
falls back); patched build -> FIX_VALIDATED when the TMA-on lowering emits tma_load (and the
TMA-off one, if probed, succeeds), FIX_FAILED otherwise (the exception is a figure, never a crash).

Upstream grid (``--upstream-grid``, CPU lanes at main). Lowers ``mamba_mimo_bwd_bwd`` (dense and varlen, the
kernels the series edits) for sm_90 with the kernel's own pass configs (TMA off, as it ships) at every
parametrization of mamba's ``tests/ops/tilelang/test_mamba3_mimo.py`` that reaches that kernel: the tables
below are copied from the test file at e9594ce (CASE_GRID, FUSED_NORM_CASE_GRID, VARLEN_CASE_GRID) plus
the grouped-heads grid that 07's series adds, with the test's fixed B/S/H and bf16. Each (kernel,
N, P, R, chunk, threads, G, hasZ, reduceO, packed_dout) variant is built once and names the test ids that
use it. CONTRACT_HELD when every variant lowers, CONTRACT_BROKEN (naming the variants and ids) otherwise;
the baseline lane shows that main builds them all, so a patched-only failure is the series' fault (an
R=1 loop-variable clash did exactly that). ``--grid-stage tir`` stops after building the TIR (seconds per
variant) instead of lowering it (about a minute each); ``--jobs`` lowers variants in parallel processes.

Builds. The same reproducer runs at 2.3.2.post1 and at main (e9594ce). The entry point
``mamba3_mimo`` keeps its arguments at main (the gated-norm fusion it added defaults to off);
main's ``mamba_mimo_bwd_bwd`` factory gained a ``packed_dout`` parameter after ``reduceO``, so the
probe passes everything after the shapes and flags by keyword. At 2.3.2.post1 the runtime
compiles the kernels with symbolic B/S/H/G and the probe lowers that variant (``--probe-dims
symbolic``, the default); main's runtime specialises the dense kernels on concrete (B, S, H, G),
which ``--probe-dims static`` lowers (B, S, H, G from ``--batch/--seqlen/--heads/--groups``).

Compile cost. Equivalence lanes: one dense and one varlen variant of fwd, bwd_fwd and bwd_bwd
(~2-3 min each cold, TileLang's disk cache afterwards). At 2.3.2.post1 these variants are shared
with pack 05's lanes (symbolic shapes). At main every (B, S, H, G) is its own variant: with
``--groups 2`` (H=16, B=2, S=128, varlen 64/48/80) the baseline lane reuses exactly what pack
05's main regression lane compiled; the patched series changes bwd_bwd, so the equivalence lane
compiles the two bwd_bwd variants anew. ``prewarm`` (see _mamba3.py) compiles the dense and the
varlen case in parallel. TMA probe: lowering only, ~2-3 min of CPU per variant.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback

from _lane import figure, lane, parser, patched, require_cuda, skip, start, verdict
from _mamba3 import load_baseline_module, load_results, prewarm, save_results
from _numerics import BF16_FLOOR, K_NOISE, rel_fro
from _timing import compare, report
from pack05_mimo_gqa_backward import call, fwd_bwd, make_dout, make_inputs, mimo_gemm_flops, run_warm_case

BWD_MODULE = "mamba_ssm.ops.tilelang.mamba3.mamba3_mimo_bwd"
MAX_SLOWDOWN = 1.05  # a refactor of the staging: kernel time may move within run-to-run spread, not more

# mamba's tests/ops/tilelang/test_mamba3_mimo.py at e9594ce: (N, P, R, chunk, bb_threads) per grid, fixed B/S/H/G.
UPSTREAM_TEST_FILE = "tests/ops/tilelang/test_mamba3_mimo.py"
UPSTREAM_FIXED = {"B": 4, "S": 2048, "H": 16, "G": 1}
CASE_GRID = ((16, 64, 4, 8, 128), (32, 64, 4, 16, 256), (64, 64, 4, 16, 256), (128, 64, 4, 16, 256),
             (256, 64, 4, 8, 256), (64, 128, 4, 16, 256), (128, 32, 4, 16, 256), (128, 128, 4, 8, 256),
             (128, 64, 8, 8, 256), (128, 64, 2, 32, 256), (128, 64, 1, 64, 256))
FUSED_NORM_CASE_GRID = ((32, 64, 4, 16, 256), (128, 64, 4, 16, 256))
VARLEN_CASE_GRID = ((16, 64, 4, 8, 128), (32, 64, 4, 16, 256), (64, 64, 4, 16, 256), (128, 64, 4, 16, 256),
                    (128, 64, 2, 32, 256), (128, 64, 1, 64, 256))
GROUPED_CASE_GRID = ((64, 64, 4, 16, 256, 2), (128, 64, 2, 32, 256, 4))  # added by 07's own series
# test function -> (grid, kernel, hasZ, reduceO, packed_dout): how the test drives mamba_mimo_bwd_bwd
# (mamba_mimo_bwd_combined(_varlen): prereduce passes no z and no mimo_o; the fused norm packs dO, no z/reduce)
UPSTREAM_BWD_TESTS = {
    "test_mamba_mimo_bwd_combined_relative_errors_lt_10pct": (CASE_GRID, "dense", True, True, False),
    "test_mamba_mimo_bwd_combined_prereduce_relative_errors_lt_10pct": (CASE_GRID, "dense", False, False, False),
    "test_fused_norm_bwd_relative_errors_lt_10pct": (FUSED_NORM_CASE_GRID, "dense", False, False, True),
    "test_mamba_mimo_bwd_combined_grouped_heads_relative_errors_lt_10pct": (GROUPED_CASE_GRID, "dense", True, True,
                                                                           False),
    "test_bwd_varlen_relative_errors_lt_10pct": (VARLEN_CASE_GRID, "varlen", True, True, False),
    "test_bwd_varlen_prereduce_relative_errors_lt_10pct": (VARLEN_CASE_GRID, "varlen", False, False, False),
    "test_fused_norm_bwd_varlen_relative_errors_lt_10pct": (FUSED_NORM_CASE_GRID, "varlen", False, False, True),
}


def parse_args() -> argparse.Namespace:
    p = parser(__doc__)
    p.add_argument("--timing", action="store_true",
                   help="time baseline vs patched backward in one process (needs HARNESS_BASELINE_SITE)")
    p.add_argument("--max-slowdown", type=float, default=MAX_SLOWDOWN)
    p.add_argument("--warmup", type=int, default=2, help="timing: unmeasured calls per variant")
    p.add_argument("--repeat", type=int, default=10, help="timing: wall-clock calls per variant")
    p.add_argument("--profile-repeat", type=int, default=5, help="timing: profiled calls per variant")
    p.add_argument("--tma-probe", action="store_true", help="lowering-only TMA eligibility probe")
    p.add_argument("--also-tma-off", action="store_true",
                   help="probe: also lower with the kernel's own configs (TMA off); the equivalence lanes "
                        "already compile that variant, so it is off by default (2-3 min of CPU)")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--groups", type=int, default=1)
    p.add_argument("--rank", type=int, default=4)
    p.add_argument("--headdim-qk", type=int, default=128)
    p.add_argument("--headdim-v", type=int, default=64)
    p.add_argument("--chunk", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seqlen", type=int, default=128)
    p.add_argument("--varlen", type=int, nargs="+", default=[64, 48, 80])
    p.add_argument("--probe-dims", choices=("symbolic", "static"), default="symbolic",
                   help="probe: lower with symbolic B/S/H/G (the variant 2.3.2.post1 runs) or with the concrete "
                        "--batch/--seqlen/--heads/--groups (the variant main runs)")
    p.add_argument("--upstream-grid", action="store_true",
                   help="lower bwd_bwd at every parametrization of the upstream MIMO test file that reaches it")
    p.add_argument("--grid-stage", choices=("tir", "lower"), default="lower",
                   help="grid: stop after building the TIR, or lower it for sm_90 (default)")
    p.add_argument("--jobs", type=int, default=1, help="grid: variants lowered in parallel processes")
    p.add_argument("--grid-variant", help=argparse.SUPPRESS)  # internal: one grid variant (JSON), one process
    p.add_argument("--prewarm-jobs", type=int, default=0,
                   help="parallel compile children for the dense and varlen cases (0: both at once; 1: none)")
    p.add_argument("--warm-case", help=argparse.SUPPRESS)  # internal: a prewarm child's case (JSON)
    return p.parse_args()


def meta(a) -> dict:
    return {"heads": a.heads, "groups": a.groups, "rank": a.rank, "N": a.headdim_qk, "P": a.headdim_v,
            "chunk": a.chunk, "batch": a.batch, "seqlen": a.seqlen, "varlen": a.varlen}


def gradients(torch, mamba3_mimo, a, device) -> dict:
    """{case:tensor: grad} for dense and varlen, computed twice: (first, second)."""
    lengths = a.varlen
    cu = torch.tensor([0] + [sum(lengths[: i + 1]) for i in range(len(lengths))], dtype=torch.int32, device=device)
    cases = {
        "dense": (make_inputs(torch, a, a.batch, a.seqlen, a.groups, seed=7, device=device),
                  make_dout(torch, a.batch, a.seqlen, a, seed=8, device=device), None),
        "varlen": (make_inputs(torch, a, 1, int(cu[-1]), a.groups, seed=17, device=device),
                   make_dout(torch, 1, int(cu[-1]), a, seed=18, device=device), cu),
    }
    runs = ({}, {})
    for case, (inputs, dout, cu_seqlens) in cases.items():
        for out in runs:
            grads = fwd_bwd(torch, mamba3_mimo, a, inputs, dout, cu_seqlens)
            out.update({f"{case}:{k}": v for k, v in grads.items() if v is not None})
    return runs


def use_backward(module) -> None:
    """Make ``mamba3_mimo``'s autograd backward call ``module``'s dense ``mamba_mimo_bwd_combined``."""
    import importlib

    # the module, by its full name: a package may re-export the function under the same name
    entry = importlib.import_module("mamba_ssm.ops.tilelang.mamba3.mamba3_mimo")
    entry.mamba_mimo_bwd_combined = module.mamba_mimo_bwd_combined


def warm_case(a, case: dict) -> None:
    """A prewarm child: one forward+backward of the case, with the baseline's backward when it says so."""
    import torch
    from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo import mamba3_mimo

    if case.get("bwd") == "baseline":
        use_backward(load_baseline_module(BWD_MODULE, "p07_baseline_mimo_bwd"))
    run_warm_case(torch, mamba3_mimo, a, case)


def timing(a) -> None:
    torch = require_cuda("needs a CUDA GPU (TileLang kernels)")
    import importlib

    from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo import mamba3_mimo

    if not patched():
        raise SystemExit("--timing compares the patched backward with the baseline's: run it on the patched build")
    baseline = load_baseline_module(BWD_MODULE, "p07_baseline_mimo_bwd")
    if baseline is None:
        raise SystemExit("--timing needs the unpatched build beside the patched one (HARNESS_BASELINE_SITE; "
                         "the lane's with_baseline)")
    mine = importlib.import_module(BWD_MODULE)
    B, S, H, G = a.batch, a.seqlen, a.heads, a.groups
    figure("problem", meta(a) | {"mode": "timing", "dtype": "bfloat16"}, lane=lane())
    case = {"groups": G, "batch": B, "seqlen": S, "lengths": None}
    prewarm([case, case | {"bwd": "baseline"}], jobs=a.prewarm_jobs)
    inputs = make_inputs(torch, a, B, S, G, seed=5, device="cuda")
    dout = make_dout(torch, B, S, a, seed=6, device="cuda")
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in inputs.items()}
    params = list(leaves.values())

    def step(module):
        def run():
            use_backward(module)
            return torch.autograd.grad(call(torch, mamba3_mimo, a, leaves), params, dout, allow_unused=True)
        return run

    t = compare({"baseline": step(baseline), "patched": step(mine)}, reference="baseline", warmup=a.warmup,
                repeat=a.repeat, profile_repeat=a.profile_repeat)
    flops = mimo_gemm_flops(B, S, H, a.headdim_qk, a.headdim_v, a.rank, a.chunk)
    for name, r in t.items():
        report("fwd_bwd_timing", r, build=name, groups=G, heads=H, batch=B, seqlen=S)
        if r["kernel_ms"]:
            figure("fwd_bwd_tflops", flops["total"] / (r["kernel_ms"] * 1e-3) / 1e12, unit="TFLOP/s", build=name,
                   basis="kernel_ms", flops=flops["total"], flops_model=flops["model"])
    ratio = t["patched"]["ratio_to_baseline"]
    figure("fwd_bwd_time_ratio_patched_over_baseline", ratio, basis="kernel_ms",
           wall_ratio=t["patched"]["wall_ratio_to_baseline"], max_allowed=a.max_slowdown,
           host_bound=[t["baseline"]["host_bound"], t["patched"]["host_bound"]],
           note="both backward variants timed in this process, calls interleaved (_timing.compare)")
    if ratio is None:
        skip("kernel time not measured on this host: the no-slowdown claim cannot be judged from wall time")
    details = {"ratio": ratio, "max_allowed": a.max_slowdown, "criterion": "patched fwd+bwd kernel time <= "
               "max_allowed x baseline's, same process, interleaved calls"}
    verdict("FIX_VALIDATED" if ratio <= a.max_slowdown else "FIX_FAILED", **details)


def equivalence(a) -> None:
    torch = require_cuda("needs a CUDA GPU (TileLang kernels)")
    import os

    from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo import mamba3_mimo
    from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo_bwd import mamba_mimo_bwd_bwd

    is_patched = patched()
    # one baseline file per base, so lanes of two bases can share one HARNESS_RUN_DIR
    saved = "pack07-baseline" + (f"-{os.environ['HARNESS_BASE']}" if os.environ.get("HARNESS_BASE") else "")
    if (a.rank, a.chunk) != (4, 16):  # a second lane pair at the same base (R = 1) keeps its own baseline file
        saved += f"-R{a.rank}-C{a.chunk}"
    figure("problem", meta(a), lane=lane())
    prewarm([{"groups": a.groups, "batch": a.batch, "seqlen": a.seqlen, "lengths": None},
             {"groups": a.groups, "batch": 1, "seqlen": sum(a.varlen), "lengths": a.varlen}], jobs=a.prewarm_jobs)
    configs = getattr(mamba_mimo_bwd_bwd, "pass_configs", None) or {}
    figure("bwd_bwd_pass_configs", {str(getattr(k, "value", k)): v for k, v in configs.items()},
           note="the kernel compiles with these (TMA lowering disabled: today's mitigation)")
    first, second = gradients(torch, mamba3_mimo, a, "cuda")
    finite = {k: bool(torch.isfinite(v).all()) for k, v in first.items()}
    control = {k: max(rel_fro(second[k], v), rel_fro(v.to(torch.bfloat16), v)) for k, v in first.items()}
    if not is_patched:
        save_results(saved, meta(a), first)
        save_results(f"{saved}-control", meta(a), {k: torch.tensor(c) for k, c in control.items()})
        bad = [k for k in first if not finite[k] or rel_fro(second[k], first[k]) > BF16_FLOOR]
        for k in first:
            figure("run_to_run_rel_fro", rel_fro(second[k], first[k]), tensor=k, finite=finite[k])
        if bad:
            verdict("CONTRACT_BROKEN", contract="baseline MIMO backward finite and reproducible to bf16 rounding",
                    tensors=bad)
        else:
            verdict("CONTRACT_HELD", contract="baseline MIMO backward finite and reproducible to bf16 rounding",
                    tensors=len(first))
        return
    base = load_results(saved, meta(a))
    base_control = load_results(f"{saved}-control", meta(a))
    failures = []
    for k, v in first.items():
        b = base.get(k)
        if b is None:
            failures.append(f"{k}: missing in the baseline")
            continue
        v = v.cpu()
        c = max(control[k], float(base_control[k]))
        tol = max(K_NOISE * c, BF16_FLOOR)
        err = rel_fro(v, b)
        same = bool(torch.equal(v, b))
        figure("grad_rel_fro_vs_baseline", err, tensor=k, tolerance=tol, control=c, bitwise_equal=same,
               finite=finite[k])
        if not finite[k] or err > tol:
            failures.append(f"{k}: rel_fro {err:.3g} > {tol:.3g}" if finite[k] else f"{k}: not finite")
    missing = sorted(set(base) - set(first))
    failures += [f"{k}: missing in the patched run" for k in missing]
    figure("bitwise_equal_tensors", sum(bool(torch.equal(first[k].cpu(), base[k])) for k in first if k in base),
           of=len(first))
    if failures:
        verdict("EQUIVALENCE_BROKEN", failures=failures[:20], n_failures=len(failures))
    else:
        verdict("EQUIVALENCE_VERIFIED", tensors=len(first), criterion="within bf16 rounding of the baseline")


def tma_probe(a) -> None:
    import tilelang
    import tilelang.language as T
    from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo_bwd import mamba_mimo_bwd_bwd
    from tilelang import tvm

    target = "cuda -arch=sm_90"
    if a.probe_dims == "symbolic":
        dims = (T.dynamic("B"), T.dynamic("S"), T.dynamic("H"), T.dynamic("G"))
    else:
        dims = (a.batch, a.seqlen, a.heads, a.groups)
    # Positional: shapes and the hasZ/hasD/reduceO flags (same order at 2.3.2.post1 and main); the rest by
    # keyword, since main inserted packed_dout after reduceO.
    args = (*dims, a.headdim_qk, a.headdim_v, a.rank, True, True, True)
    kwargs = {"chunk_size": a.chunk, "rotary_dim_divisor": 4, "dtype": "bfloat16", "threads": 256, "num_stages": 0}
    figure("problem", meta(a) | {"target": target, "kernel": "mamba_mimo_bwd_bwd", "probe_dims": a.probe_dims},
           lane=lane())
    prim = mamba_mimo_bwd_bwd.get_tir(*args, **kwargs)
    own = {str(getattr(k, "value", k)): v for k, v in (getattr(mamba_mimo_bwd_bwd, "pass_configs", None) or {}).items()}
    figure("kernel_pass_configs", own)
    results = {}
    variants = (("tma_off", True), ("tma_on", False)) if a.also_tma_off else (("tma_on", False),)
    for label, tma_off in variants:
        config = own | {"tl.disable_tma_lower": tma_off}
        start = time.monotonic()
        try:
            with tvm.transform.PassContext(opt_level=3, config=config), tvm.target.Target(target):
                artifact = tilelang.lower(prim, target=target)
            source = getattr(artifact, "kernel_source", None) or ""
            results[label] = {"ok": True, "tma_load": source.count("tma_load"),
                              "bulk_copy": source.count("cp.async.bulk")}
        except Exception as exc:  # the exception is the observation
            text = f"{type(exc).__name__}: {exc}"
            results[label] = {"ok": False, "error": text[-1500:],
                              "pack13_divide_by_zero": "Divide by zero" in text,
                              "rank3_tma_layout": "Cannot detect TMA layout" in text}
            traceback.print_exc()
        results[label]["seconds"] = round(time.monotonic() - start, 1)
        figure(f"lower_{label}", results[label]["ok"], **{k: v for k, v in results[label].items() if k != "ok"})
    on, off = results["tma_on"], results.get("tma_off", {"ok": True, "note": "not probed here"})
    eligible = on["ok"] and on.get("tma_load", 0) > 0
    figure("tma_bulk_copy_emitted", eligible)
    if not patched():
        verdict("BUG_ABSENT" if eligible else "BUG_REPRODUCED", tma_on=on, tma_off_ok=off["ok"])
    elif off["ok"] and eligible:
        verdict("FIX_VALIDATED", tma_load=on["tma_load"], note="TMA stays disabled in the kernel's pass configs")
    else:
        verdict("FIX_FAILED", tma_on=on, tma_off=off)


def grid_variants() -> list[dict]:
    """Every distinct bwd_bwd build the upstream test file's backward tests ask for, with the ids using it."""
    variants: dict[tuple, dict] = {}
    for test, (grid, kernel, has_z, reduce_o, packed) in UPSTREAM_BWD_TESTS.items():
        for case in grid:
            n, p, r, c, threads = case[:5]
            g = case[5] if len(case) > 5 else UPSTREAM_FIXED["G"]
            case_id = f"N{n}_P{p}_R{r}_C{c}_BB{threads}" + (f"_G{g}" if len(case) > 5 else "")
            key = (kernel, n, p, r, c, threads, g, has_z, reduce_o, packed)
            v = variants.setdefault(key, {"kernel": kernel, "N": n, "P": p, "R": r, "chunk": c, "threads": threads,
                                          "G": g, "hasZ": has_z, "reduceO": reduce_o, "packed_dout": packed,
                                          "tests": []})
            v["tests"].append(f"{UPSTREAM_TEST_FILE}::{test}[{case_id}]")
    return list(variants.values())


def build_variant(v: dict, stage: str) -> dict:
    """Build one variant's TIR and (stage "lower") lower it for sm_90 with the kernel's own pass configs."""
    import importlib

    import tilelang
    from tilelang import tvm

    name = BWD_MODULE + ("_varlen" if v["kernel"] == "varlen" else "")
    factory = importlib.import_module(name).mamba_mimo_bwd_bwd
    flags = (v["N"], v["P"], v["R"], v["hasZ"], True, v["reduceO"], v["packed_dout"])
    kw = {"chunk_size": v["chunk"], "rotary_dim_divisor": 4, "dtype": "bfloat16", "threads": v["threads"],
          "num_stages": 0}
    began = time.monotonic()
    out: dict = {"ok": False, "stage": "tir"}
    try:
        if v["kernel"] == "varlen":  # the varlen factory takes no S (packed batch of one), isVarlen after the flags
            prim = factory.get_tir(1, UPSTREAM_FIXED["H"], v["G"], *flags, isVarlen=True, **kw)
        else:
            prim = factory.get_tir(UPSTREAM_FIXED["B"], UPSTREAM_FIXED["S"], UPSTREAM_FIXED["H"], v["G"], *flags,
                                   **kw)
        if stage == "lower":
            out["stage"] = "lower"
            own = {str(getattr(k, "value", k)): x for k, x in (getattr(factory, "pass_configs", None) or {}).items()}
            target = "cuda -arch=sm_90"
            with tvm.transform.PassContext(opt_level=3, config=own), tvm.target.Target(target):
                tilelang.lower(prim, target=target)
        out["ok"] = True
    except Exception as exc:  # the exception is the observation
        text = f"{type(exc).__name__}: {exc}"
        out["error"] = text if len(text) <= 600 else f"{text[:300]} ... {text[-300:]}"
    out["seconds"] = round(time.monotonic() - began, 1)
    return out


def grid_child(a) -> None:
    """A grid child process: one variant, its outcome as the last stdout line (a crash is the parent's to see)."""
    v = json.loads(a.grid_variant)
    print(json.dumps(build_variant(v, a.grid_stage)), flush=True)


def run_child(a, v: dict) -> dict:
    import subprocess
    import sys

    cmd = [sys.executable, __file__, "--grid-variant", json.dumps(v), "--grid-stage", a.grid_stage]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1])
    return {"ok": False, "stage": a.grid_stage, "error": f"child exited {proc.returncode}: {proc.stderr[-600:]}"}


def upstream_grid(a) -> None:
    from concurrent.futures import ThreadPoolExecutor

    variants = grid_variants()
    figure("problem", {"mode": "upstream-grid", "stage": a.grid_stage, "target": "cuda -arch=sm_90",
                       "upstream_test_file": UPSTREAM_TEST_FILE, "fixed": UPSTREAM_FIXED, "dtype": "bfloat16",
                       "variants": len(variants), "test_ids": sum(len(v["tests"]) for v in variants)}, lane=lane())
    if a.jobs > 1:
        with ThreadPoolExecutor(max_workers=a.jobs) as pool:
            results = list(pool.map(lambda v: run_child(a, v), variants))
    else:
        results = [build_variant(v, a.grid_stage) for v in variants]
    failed = []
    for v, r in zip(variants, results, strict=True):
        label = {k: v[k] for k in v if k != "tests"}
        figure("bwd_bwd_variant_builds", r["ok"], variant=label, tests=v["tests"], stage=r["stage"],
               seconds=r.get("seconds"), error=r.get("error"))
        if not r["ok"]:
            failed.append({"variant": label, "tests": v["tests"], "error": r.get("error", "")[:300]})
    contract = (f"mamba_mimo_bwd_bwd builds ({a.grid_stage}, sm_90, the kernel's pass configs) at every "
                f"parametrization of {UPSTREAM_TEST_FILE} that reaches it")
    if failed:
        verdict("CONTRACT_BROKEN", contract=contract, failed=failed, n_failed=len(failed), of=len(variants))
    else:
        verdict("CONTRACT_HELD", contract=contract, variants=len(variants),
                test_ids=sum(len(v["tests"]) for v in variants))


def main() -> None:
    a = parse_args()
    if a.warm_case:  # prewarm child: no protocol lines, one forward+backward, exit
        warm_case(a, json.loads(a.warm_case))
        return
    if a.grid_variant:  # grid child: no protocol lines
        grid_child(a)
        return
    start(a, "mamba-ssm", "mamba_ssm")
    if a.upstream_grid:
        upstream_grid(a)
    elif a.tma_probe:
        tma_probe(a)
    elif a.timing:
        timing(a)
    else:
        equivalence(a)


if __name__ == "__main__":
    main()
