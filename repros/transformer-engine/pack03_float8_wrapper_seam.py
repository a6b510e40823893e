"""Pack 03: what a raw kernel sees when handed a TransformerEngine Float8Tensor.

A Float8Tensor is a wrapper subclass: it reports the logical dtype (bf16 here) while its bytes sit in an
inner uint8 buffer (``_data``). The reproducer makes a real one with TE's current-scaling quantizer and
shows, each as a FIGURE: ``.dtype`` against the storage dtype; what ``data_ptr()`` gives against the
storage's pointer; what ``.to``, ``.contiguous``, ``.reshape``, ``.view`` and ``.permute`` return (still a
Float8Tensor, or a plain tensor silently dequantized); what a Triton kernel reads through the wrapper; and,
when megatron-core is on the path, what Megatron's fused SparseMLA dispatch (``fused_sparse_mla_absorbed``,
the seam of pack 02) passes to the kernel: the bf16 guard there checks ``.dtype`` only.

BUG_REPRODUCED when ``.dtype`` disagrees with the storage and a raw consumer is handed something other than
the FP8 bytes (a null or refused pointer, a silent dequantize, or a wrong read). Needs a CUDA GPU and
``transformer_engine.pytorch`` with its compiled ``transformer_engine_torch``; otherwise SKIPPED.
"""

from __future__ import annotations

import importlib

from _lane import figure, observed, parser, skip, start

SEAM = "megatron.core.transformer.experimental_attention_variant.ops.tilelang_dsa"


def _try(fn):
    """``fn()``, or the exception it raised as 'Type: message' (a hazard is an outcome, not a crash)."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - every outcome is reported
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"


def _kind(t, qt) -> dict:
    """What a consumer of ``t`` is given: type, logical dtype, bytes per element, whether still quantized."""
    if isinstance(t, str):
        return {"error": t}
    return {"type": type(t).__name__, "dtype": str(t.dtype), "quantized": isinstance(t, qt),
            "element_size": t.element_size(), "data_ptr": _try(t.data_ptr)}


def triton_read(torch, x):
    """A raw kernel: copy ``x.numel()`` elements through the pointer Triton takes from ``x`` (its ``.dtype``)."""
    import triton
    import triton.language as tl

    @triton.jit
    def copy(src, dst, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)

    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    copy[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
    return out


def megatron_seam(torch, q8, qt):
    """Call Megatron's fused SparseMLA dispatch with a Float8Tensor query; record what the kernel is given."""
    seam = importlib.import_module(SEAM)
    seen = {}

    class Recorder:  # stands in for the TileLang kernel: records its inputs, returns a well-shaped output
        @staticmethod
        def apply(q, kv, indices, scale):
            seen.update(_kind(q, qt))
            return torch.zeros(*q.shape[:3], 512, dtype=torch.bfloat16, device=q.device), None

    sq, b, h, d = q8.shape
    key = torch.randn(sq, b, 1, d, dtype=torch.bfloat16, device=q8.device)
    topk = torch.randint(0, sq, (b, sq, 64), device=q8.device)
    real, seam.SparseMLA = getattr(seam, "SparseMLA", None), Recorder
    try:
        out = seam.fused_sparse_mla_absorbed(q8, key, topk, d ** -0.5, 512)
    finally:
        seam.SparseMLA = real
    seen["dispatched"] = out is not None  # None: the seam fell back to the unfused path
    seen["guard_bf16_saw"] = str(q8.dtype)
    return seen


def main() -> int:
    args = parser(__doc__).parse_args()
    try:
        import torch
    except ImportError:
        skip("torch is not installed")
    if not torch.cuda.is_available():
        skip("needs a CUDA GPU: a Float8Tensor is made by TE's CUDA quantize kernel")
    try:
        from transformer_engine.pytorch import Float8CurrentScalingQuantizer, Float8Tensor, QuantizedTensor
        tex = importlib.import_module("transformer_engine_torch")  # only after TE: it loads it from wheel_lib/
    except (ImportError, RuntimeError, OSError) as exc:  # TE's sanity check raises RuntimeError without its core
        skip(f"transformer_engine.pytorch does not import here: {type(exc).__name__}: {str(exc)[:200]}")
    start(args, "transformer-engine", "transformer_engine")
    qt = QuantizedTensor
    torch.manual_seed(0)
    x = torch.randn(64, 1, 16, 576, dtype=torch.bfloat16, device="cuda")
    q8 = Float8CurrentScalingQuantizer(tex.DType.kFloat8E4M3, device=x.device)(x)
    data = q8._data
    figure("float8tensor_type", type(q8).__name__, is_float8tensor=isinstance(q8, Float8Tensor))
    figure("dtype_logical_vs_storage", str(q8.dtype), storage_dtype=str(data.dtype),
           logical_bytes=q8.numel() * q8.element_size(), storage_bytes=data.numel() * data.element_size())
    wrapper_ptr = _try(q8.data_ptr)
    figure("data_ptr", wrapper_ptr, storage_data_ptr=data.data_ptr(),
           untyped_storage_bytes=_try(lambda: q8.untyped_storage().nbytes()))
    ops = {"to_cuda": lambda: q8.to("cuda"), "to_bf16": lambda: q8.to(torch.bfloat16),
           "contiguous": lambda: q8.contiguous(), "reshape": lambda: q8.reshape(64, 16, 576),
           "view": lambda: q8.view(64, 16, 576), "permute": lambda: q8.permute(1, 0, 2, 3)}
    results = {name: _kind(_try(op), qt) for name, op in ops.items()}
    for name, got in results.items():
        figure(f"op_{name}", got.get("type", got.get("error")), **got)
    dequantized = [n for n, g in results.items() if not g.get("quantized", True) and n != "to_bf16"]
    raw = _try(lambda: triton_read(torch, q8))
    if isinstance(raw, str):
        kernel = {"outcome": raw}
    else:
        ref = q8.dequantize()
        kernel = {"outcome": "ran", "matches_dequantized": bool(torch.equal(raw, ref)),
                  "max_abs_diff": float((raw.float() - ref.float()).abs().max())}
    figure("raw_kernel_read", kernel["outcome"], **kernel)
    seam = _try(lambda: megatron_seam(torch, q8, qt))
    figure("megatron_seam", "not importable" if isinstance(seam, str) else seam.get("type"),
           **({"error": seam} if isinstance(seam, str) else seam))
    misreports = str(q8.dtype) != str(data.dtype)
    ptr_bad = not isinstance(wrapper_ptr, int) or wrapper_ptr != data.data_ptr()
    kernel_bad = kernel["outcome"] != "ran" or not kernel["matches_dequantized"]
    seam_bad = isinstance(seam, dict) and seam.get("dispatched") and not seam.get("quantized", False)
    bad = misreports and (ptr_bad or kernel_bad or bool(dequantized) or bool(seam_bad))
    observed(bad, logical_dtype=str(q8.dtype), storage_dtype=str(data.dtype), data_ptr=wrapper_ptr,
             silently_dequantized=dequantized, raw_kernel=kernel["outcome"], seam_dequantized=bool(seam_bad))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
