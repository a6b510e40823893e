"""Pack 13: TileLang layout inference, `% R` / `// R` on a closed-over int, TMA lowering on vs off.

Claim under test (from the pack): a ``T.Parallel`` body that indexes with ``% R`` / ``// R`` on a
Python int the kernel closes over -- the shape pack 07's flatten produces ([chunk, R*R] and
[chunk*R, N] buffers, index ``r1 * R + r2``) -- aborts compilation with TVM's
``Check failed: ... Divide by zero`` when TMA lowering is enabled, and compiles with
``TL_DISABLE_TMA_LOWER`` (+ ``TL_DISABLE_WARP_SPECIALIZED``, the mitigation pack 07 runs with).

The crash is host-side, so every case is only *lowered* (``tilelang.lower`` for an sm_90 target);
no GPU is needed. Each case is compiled twice, TMA off (the control) and TMA on:

* BUG_REPRODUCED -- some case hits the divide-by-zero check with TMA on AND compiles with TMA off;
* BUG_ABSENT     -- no case does (any other outcome of each compile is reported as a FIGURE; a case that
  fails only with TMA on, with another error, is listed in the verdict's ``tma_only_other_crash``).

A related, TMA-independent layout-inference divide-by-zero (tile-ai/tilelang#2394: column broadcast
into a 2-D T.Parallel whose width is not a power of two) is compiled too, as context: it shows
whether this build still carries that class of crash. It never decides the verdict.

Kernels live in this file on purpose: TileLang's frontend reads kernel source with ``inspect``.

    python pack13_floormod_tma.py [--lane NAME]
"""

from __future__ import annotations

import time

from _lane import figure, lane, parser, start, verdict

DBZ = "Divide by zero"


def _kernels(T):
    """Kernel factories, keyed by case name. R, CHUNK, N are Python ints the prim_funcs close over."""

    def flat_gather(CHUNK, R, N=64, dtype="bfloat16"):
        # pack 07 layout: Q tiles flattened to [CHUNK*R, N]; the per-position R x R block read back
        # with r1 = rr // R, r2 = rr % R from a TMA-loaded shared tile.
        @T.prim_func
        def kernel(Q: T.Tensor((CHUNK * R, N), dtype), QKD: T.Tensor((CHUNK, R * R), "float32")):
            with T.Kernel(1, threads=128):
                q_s = T.alloc_shared((CHUNK * R, N), dtype)
                qkd = T.alloc_fragment((CHUNK, R * R), "float32")
                T.copy(Q, q_s)
                for c, rr in T.Parallel(CHUNK, R * R):
                    qkd[c, rr] = T.cast(q_s[c * R + rr // R, rr % R], "float32")
                T.copy(qkd, QKD)

        return kernel

    def flat_scatter(CHUNK, R, dtype="float32"):
        # qk_dot_shared flattened to [CHUNK, R*R], written through r2 * R + r1 and stored with TMA.
        @T.prim_func
        def kernel(X: T.Tensor((CHUNK, R * R), dtype), QKD: T.Tensor((CHUNK, R * R), dtype)):
            with T.Kernel(1, threads=128):
                x_s = T.alloc_shared((CHUNK, R * R), dtype)
                qk_s = T.alloc_shared((CHUNK, R * R), dtype)
                T.copy(X, x_s)
                for c, rr in T.Parallel(CHUNK, R * R):
                    qk_s[c, (rr % R) * R + rr // R] = x_s[c, rr]
                T.copy(qk_s, QKD)

        return kernel

    def row_scale(CHUNK, R, N=64, dtype="bfloat16"):
        # [CHUNK*R, N] rows scaled by a [CHUNK, R] table read as d[i // R, i % R].
        @T.prim_func
        def kernel(Q: T.Tensor((CHUNK * R, N), dtype), D: T.Tensor((CHUNK, R), "float32"),
                   Out: T.Tensor((CHUNK * R, N), "float32")):
            with T.Kernel(1, threads=128):
                q_s = T.alloc_shared((CHUNK * R, N), dtype)
                d_s = T.alloc_shared((CHUNK, R), "float32")
                o_f = T.alloc_fragment((CHUNK * R, N), "float32")
                T.copy(Q, q_s)
                T.copy(D, d_s)
                for i, j in T.Parallel(CHUNK * R, N):
                    o_f[i, j] = T.cast(q_s[i, j], "float32") * d_s[i // R, i % R]
                T.copy(o_f, Out)

        return kernel

    def narrow_store(CHUNK, R, N=64, dtype="bfloat16"):
        # a per-position [CHUNK, R] table built with k % R from the flattened tile, then stored with TMA:
        # its rows are R * 2 bytes wide, under the 16 bytes a TMA box row needs.
        @T.prim_func
        def kernel(Q: T.Tensor((CHUNK * R, N), dtype), D: T.Tensor((CHUNK, R), dtype)):
            with T.Kernel(1, threads=128):
                q_s = T.alloc_shared((CHUNK * R, N), dtype)
                d_s = T.alloc_shared((CHUNK, R), dtype)
                T.copy(Q, q_s)
                for c, k in T.Parallel(CHUNK, R):
                    d_s[c, k] = q_s[c * R + k, k % R]
                T.copy(d_s, D)

        return kernel

    def broadcast_2394(BM, BN):
        @T.prim_func
        def kernel(D: T.Tensor((BN,), "float32"), X: T.Tensor((BM, BN), "float32")):
            with T.Kernel(1, threads=128):
                d = T.alloc_fragment((BN,), "float32")
                x = T.alloc_fragment((BM, BN), "float32")
                T.copy(D, d)
                for i, j in T.Parallel(BM, BN):
                    x[i, j] = d[j] * 2.0
                T.copy(x, X)

        return kernel

    cases = {}
    for chunk, r in ((16, 4), (64, 4), (64, 2)):
        cases[f"flat_gather_c{chunk}_r{r}"] = (lambda c=chunk, r=r: flat_gather(c, r), True)
        cases[f"flat_scatter_c{chunk}_r{r}"] = (lambda c=chunk, r=r: flat_scatter(c, r), True)
        cases[f"row_scale_c{chunk}_r{r}"] = (lambda c=chunk, r=r: row_scale(c, r), True)
    cases["narrow_store_c16_r4"] = (lambda: narrow_store(16, 4), True)
    cases["related_2394_broadcast_bn48"] = (lambda: broadcast_2394(64, 48), False)
    return cases


def _target(tvm):
    # 0.1.8 takes the CLI string; later releases only the JSON-dict form.
    try:
        return tvm.target.Target("cuda -arch=sm_90")
    except Exception:
        return tvm.target.Target({"kind": "cuda", "arch": "sm_90"})


def _compile(tilelang, tvm, make, tma: bool) -> tuple[str, str]:
    """('ok' | 'dbz' | 'error', last line of the error)."""
    key = tilelang.PassConfigKey
    config = {} if tma else {key.TL_DISABLE_TMA_LOWER: True, key.TL_DISABLE_WARP_SPECIALIZED: True}
    target = _target(tvm)
    try:
        with target, tvm.transform.PassContext(opt_level=3, config=config):
            tilelang.lower(make(), target=target)
    except Exception as exc:  # the compiler raises tvm InternalError / TVMError / ValueError
        text = str(exc).strip()
        last = text.splitlines()[-1][:300] if text else type(exc).__name__
        return ("dbz" if DBZ in text else "error"), f"{type(exc).__name__}: {last}"
    return "ok", ""


def main() -> None:
    start(parser(__doc__).parse_args(), "tilelang", "tilelang")
    import tilelang
    import tilelang.language as T
    from tilelang import tvm

    reproduced, absent_but_dbz, tma_only_other, related = [], [], {}, {}
    for name, (make, decides) in _kernels(T).items():
        outcome, errors = {}, {}
        for tma in (False, True):
            t0 = time.perf_counter()
            status, err = _compile(tilelang, tvm, make, tma)
            outcome["tma_on" if tma else "tma_off"] = status
            errors[tma] = err
            figure("compile", status, None, case=name, tma=tma, error=err,
                   seconds=round(time.perf_counter() - t0, 2))
        if not decides:
            related[name] = outcome
        elif outcome["tma_on"] == "dbz" and outcome["tma_off"] == "ok":
            reproduced.append(name)
        elif "dbz" in outcome.values():
            absent_but_dbz.append({name: outcome})
        elif outcome == {"tma_off": "ok", "tma_on": "error"}:
            tma_only_other[name] = errors[True]  # a TMA-only crash, but not the claimed one
    details = {"lane": lane(), "tilelang": tilelang.__version__, "related_2394": related}
    if reproduced:
        verdict("BUG_REPRODUCED", cases=reproduced, **details)
    else:
        verdict("BUG_ABSENT", note="no case hits the divide-by-zero with TMA on while compiling with it off",
                dbz_not_tma_specific=absent_but_dbz, tma_only_other_crash=tma_only_other, **details)


if __name__ == "__main__":
    main()
