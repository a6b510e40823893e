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

TMA probe (``--tma-probe``). Lowers ``mamba_mimo_bwd_bwd`` for sm_90 (``tilelang.lower``; no launch)
with TL_DISABLE_TMA_LOWER=False (and, with ``--also-tma-off``, also with the kernel's own pass configs;
the equivalence lanes already JIT-compile that TMA-off variant).
Figures: whether each lowering succeeded, the exception text when not (pack 13's divide-by-zero,
or 0.1.8's "Cannot detect TMA layout" for rank-3 shared buffers), and the count of TMA bulk copies
(``tma_load``) in the generated source. Verdict, on the claim that flattening makes the staging
TMA-eligible: baseline build -> BUG_REPRODUCED when the TMA-on lowering has no tma_load (fails or
falls back); patched build -> FIX_VALIDATED when the TMA-on lowering emits tma_load (and the
TMA-off one, if probed, succeeds), FIX_FAILED otherwise (the exception is a figure, never a crash).

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
import os
import time
import traceback

from _lane import figure, lane, skip, stamp, verdict
from _mamba3 import BF16_FLOOR, K_NOISE, load_results, prewarm, rel_fro, save_results
from pack05_mimo_gqa_backward import fwd_bwd, make_dout, make_inputs, run_warm_case


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lane", help="lane name; overrides HARNESS_LANE")
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


def equivalence(a) -> None:
    import torch

    if not torch.cuda.is_available():
        skip("needs a CUDA GPU (TileLang kernels)")
    from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo import mamba3_mimo
    from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo_bwd import mamba_mimo_bwd_bwd

    patched = os.environ.get("HARNESS_PATCHED") == "1"
    # one baseline file per base, so lanes of two bases can share one HARNESS_RUN_DIR
    saved = "pack07-baseline" + (f"-{os.environ['HARNESS_BASE']}" if os.environ.get("HARNESS_BASE") else "")
    figure("problem", meta(a), lane=lane())
    prewarm([{"groups": a.groups, "batch": a.batch, "seqlen": a.seqlen, "lengths": None},
             {"groups": a.groups, "batch": 1, "seqlen": sum(a.varlen), "lengths": a.varlen}], jobs=a.prewarm_jobs)
    configs = getattr(mamba_mimo_bwd_bwd, "pass_configs", None) or {}
    figure("bwd_bwd_pass_configs", {str(getattr(k, "value", k)): v for k, v in configs.items()},
           note="the kernel compiles with these (TMA lowering disabled: today's mitigation)")
    first, second = gradients(torch, mamba3_mimo, a, "cuda")
    finite = {k: bool(torch.isfinite(v).all()) for k, v in first.items()}
    control = {k: max(rel_fro(second[k], v), rel_fro(v.to(torch.bfloat16), v)) for k, v in first.items()}
    if not patched:
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

    patched = os.environ.get("HARNESS_PATCHED") == "1"
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
    if not patched:
        verdict("BUG_ABSENT" if eligible else "BUG_REPRODUCED", tma_on=on, tma_off_ok=off["ok"])
    elif off["ok"] and eligible:
        verdict("FIX_VALIDATED", tma_load=on["tma_load"], note="TMA stays disabled in the kernel's pass configs")
    else:
        verdict("FIX_FAILED", tma_on=on, tma_off=off)


def main() -> None:
    a = parse_args()
    if a.warm_case:  # prewarm child: no protocol lines, one forward+backward, exit
        import torch
        from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo import mamba3_mimo

        run_warm_case(torch, mamba3_mimo, a, json.loads(a.warm_case))
        return
    if a.lane:
        os.environ["HARNESS_LANE"] = a.lane
    stamp("mamba-ssm", "mamba_ssm")
    if a.tma_probe:
        tma_probe(a)
    else:
        equivalence(a)


if __name__ == "__main__":
    main()
