"""Pack 08: TMA bulk-copy lowering on rank-3/4 shared memory (regression guard for tile-ai/tilelang#746).

Before #746 a T.copy between global memory and a shared buffer of rank > 2 hit
``ICHECK(shared_layout->InputDim() == 2)`` in LowerBulkCopy; since then the lowering warns and
falls back to a normal copy. This guard lowers, with TMA lowering enabled (the default, no pass
configs), three kernels that copy global -> rank-3/4 shared -> global:

* ``smem3d_bf16``   -- [C, R, N] bf16;
* ``smem4d_bf16``   -- [2, C, R, N] bf16;
* ``mimo_qk_dot``   -- the MIMO qk_dot_shared layout [chunk, R, R] (fp32), scaled in a T.Parallel.

Each kernel also reports (FIGURE ``uses_tma``) whether its generated source issues TMA copies or
took the fallback; that is informative, not part of the verdict.

``--compile-only`` (CPU lanes): each kernel must lower for sm_90. Without it (GPU lanes) each
kernel is also compiled for this GPU and run, and its output compared with torch exactly (the
kernels only move data and multiply by 2). REGRESSION_GUARD_PASSED when every kernel behaves;
REGRESSION_GUARD_FAILED names the ones that do not. Without a GPU and without --compile-only the
lane is skipped, never passed.

    python pack08_bulk_copy_rank3.py [--compile-only]
"""

from __future__ import annotations

from _lane import figure, lane, parser, require_cuda, start, verdict
from _numerics import max_abs

C, R, N = 64, 4, 64


def _kernels(T):
    def copy_nd(shape, dtype):
        @T.prim_func
        def kernel(A: T.Tensor(shape, dtype), B: T.Tensor(shape, dtype)):
            with T.Kernel(1, threads=128):
                s = T.alloc_shared(shape, dtype)
                T.copy(A, s)
                T.copy(s, B)

        return kernel

    def qk_dot(chunk, r):
        @T.prim_func
        def kernel(QK: T.Tensor((chunk, r, r), "float32"), Out: T.Tensor((chunk, r, r), "float32")):
            with T.Kernel(1, threads=128):
                qk_dot_shared = T.alloc_shared((chunk, r, r), "float32")
                out = T.alloc_shared((chunk, r, r), "float32")
                T.copy(QK, qk_dot_shared)
                for c, r1, r2 in T.Parallel(chunk, r, r):
                    out[c, r1, r2] = qk_dot_shared[c, r1, r2] * 2.0
                T.copy(out, Out)

        return kernel

    return {
        "smem3d_bf16": (lambda: copy_nd((C, R, N), "bfloat16"), (C, R, N), "bfloat16", 1.0),
        "smem4d_bf16": (lambda: copy_nd((2, C, R, N), "bfloat16"), (2, C, R, N), "bfloat16", 1.0),
        "mimo_qk_dot": (lambda: qk_dot(C, R), (C, R, R), "float32", 2.0),
    }


def _target(tvm):
    try:
        return tvm.target.Target("cuda -arch=sm_90")
    except Exception:
        return tvm.target.Target({"kind": "cuda", "arch": "sm_90"})


def _uses_tma(source: str) -> bool:
    """Whether the generated CUDA source issues TMA bulk copies (informative: the fallback is legal)."""
    return any(marker in source for marker in ("tma_load", "tma_store", "cp.async.bulk"))


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--compile-only", action="store_true", help="lower for sm_90 only (no GPU needed)")
    args = p.parse_args()
    start(args, "tilelang", "tilelang")
    import tilelang
    import tilelang.language as T
    import torch
    from tilelang import tvm

    if not args.compile_only:
        require_cuda("running the kernels needs a CUDA GPU; use --compile-only for the lowering check")
    failed = {}
    for name, (make, shape, dtype, scale) in _kernels(T).items():
        try:
            if args.compile_only:
                target = _target(tvm)
                with target, tvm.transform.PassContext(opt_level=3):
                    artifact = tilelang.lower(make(), target=target)
                figure("lowered", True, None, case=name)
                figure("uses_tma", _uses_tma(getattr(artifact, "kernel_source", "") or ""), None, case=name)
                continue
            kernel = tilelang.compile(make(), target="cuda")
            figure("uses_tma", _uses_tma(kernel.get_kernel_source() or ""), None, case=name)
            tdtype = getattr(torch, dtype)
            a = torch.randn(shape, device="cuda").to(tdtype)
            b = torch.empty_like(a)
            kernel(a, b)
            torch.cuda.synchronize()
            err = max_abs(b, a.float() * scale)
            figure("max_abs_err", err, None, case=name, shape=list(shape), dtype=dtype)
            if err != 0.0:
                failed[name] = f"max abs error {err} vs torch"
        except Exception as exc:
            text = str(exc).strip()
            failed[name] = f"{type(exc).__name__}: {text.splitlines()[-1][:300] if text else ''}"
            figure("lowered" if args.compile_only else "ran", False, None, case=name, error=failed[name])
    details = {"lane": lane(), "tilelang": tilelang.__version__,
               "mode": "compile-only" if args.compile_only else "compile+run"}
    if failed:
        verdict("REGRESSION_GUARD_FAILED", failed=failed, **details)
    else:
        verdict("REGRESSION_GUARD_PASSED", **details)


if __name__ == "__main__":
    main()
