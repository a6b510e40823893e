"""Pack 01 (regression guard): megatron-core DSA helpers under CUDA-graph capture.

Pack 01 described host syncs in the DSA helpers that abort CUDA-graph capture
(cudaErrorStreamCaptureUnsupported): a ``torch.equal`` cross-batch validation of
``position_ids`` and a Python branch on ``torch.any(idx < 0)`` in the top-k scatter. The
first release that has these files (0.19.0) already gates the validation off CUDA tensors and
scatters branch-free, so the pack is absorbed; this reproducer keeps that fix honest on the
current pin.

Guard (the verdict), on CUDA, plain path (no context parallelism, no packed sequences),
b = 2, sq = skv = 320 (two 256-row chunks of the scatter), top-k 16, the real helpers of the
installed build, called with the arguments dsa.py passes:

* graph 1: ``dsa_layout.extract_query_positions_from_position_ids(position_ids [b, sq] on CUDA,
  sq, device)`` (the cross-batch validation, dsa_layout.py:371, with b > 1), its result fed to
  ``dsa_masking.build_dsattention_forward_mask(...)`` as ``nonpacked_query_positions`` (as
  dsa.py:1868/1901 do), plus the plain causal call (``nonpacked_query_positions=None``);
* graph 2: ``index_mask = torch.full((b, sq, skv), -inf)`` then
  ``dsa_masking.scatter_topk_into_index_mask(index_mask, topk_indices, seq_chunk_size=256)``
  (dsa_masking.py:309; int64 top-k with -1 slots, as ``index_scores.topk`` + masked_fill give,
  and an int32 copy), then ``apply_sparse_validity_to_index_mask`` with the plain varlen bounds
  (as ``_unfused_absorbed_dsa_fn`` does).

Each graph is captured with ``torch.cuda.graph``, replayed on new inputs copied into the static
ones, and compared with an eager call on the same inputs: exactly (positions, bounds, masks).
REGRESSION_GUARD_PASSED when both capture and match; REGRESSION_GUARD_FAILED, with the capture
error, otherwise. A canary (the pre-fix forms, ``torch.equal`` on CUDA and ``if torch.any(..)``,
written here, not megatron's code) must fail to capture, or the guard is blind and fails too.

FIGUREs only (not the verdict): whether the context-parallel / packed-sequence paths that still
call ``.item()`` in 0.19.2 (dsa_masking.py:61, dsa_layout.py:242, 282; dsa_layout.py:217 and
dsa.py:244 need a CP process group and are not probed) can be captured, plus neighbours that
do not sync, and a capture of the whole ``_unfused_absorbed_dsa_fn`` (tolerance compare).

Without CUDA: SKIPPED (exit 3). ``--dry-run-cpu`` runs every call eagerly on the CPU (no
capture, no verdict: it ends SKIPPED) to check the calls against the build's signatures.

    HARNESS_LANE=guard-0.19.2 python pack01_dsa_graph_capture.py [--lane NAME] [--dry-run-cpu]
"""

from __future__ import annotations

import importlib
import sys

from _lane import figure, lane, parser, require_cuda, skip, start, verdict

PKG = "megatron.core.transformer.experimental_attention_variant"
B, SQ, TOPK = 2, 320, 16
SKV = SQ
CHUNK = 256  # dsa.py passes seq_chunk_size=256
SYNC_MARKERS = ("capturing", "capture", "cudaErrorStreamCapture", "not permitted")


def parse_args():
    p = parser(__doc__)
    p.add_argument("--dry-run-cpu", action="store_true",
                   help="call everything eagerly on the CPU (signature check); never prints a verdict")
    return p.parse_args()


def error_text(exc: BaseException) -> str:
    """The exception and whatever it replaced (capture_end's error hides the sync's)."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
        exc = exc.__cause__ or exc.__context__
    return " <- ".join(parts)[:600]


class Capturer:
    """capture(fn, *static) -> (replay, outputs) on CUDA; an eager stand-in with --dry-run-cpu."""

    def __init__(self, torch, device: str):
        self.torch, self.device = torch, device
        self.real = device == "cuda"

    def capture(self, fn, *static):
        torch = self.torch
        if not self.real:
            box = {"out": fn(*static)}

            def replay():
                box["out"] = fn(*static)
                return box["out"]
            return replay, box["out"]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the graph, as torch recommends
            for _ in range(2):
                fn(*static)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn(*static)

        def replay():
            graph.replay()
            torch.cuda.synchronize()
            return out
        return replay, out

    def try_capture(self, fn, *static):
        """(replay, outputs, None) or (None, None, error text); the device is left usable."""
        try:
            replay, out = self.capture(fn, *static)
            return replay, out, None
        except Exception as exc:  # a sync under capture surfaces as RuntimeError (or a chain of them)
            text = error_text(exc)
            if self.real:
                try:
                    self.torch.cuda.synchronize()
                except Exception as again:  # pragma: no cover - depends on the driver
                    text += f" | after: {error_text(again)}"
            return None, None, text


def flat(out):
    if out is None:
        return []
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat(o)]
    return [out]


def exact(torch, a, b) -> bool:
    fa, fb = flat(a), flat(b)
    return len(fa) == len(fb) and all(x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y)
                                      for x, y in zip(fa, fb, strict=True))


def position_ids(torch, device, seed):
    """[b, sq] positions, identical across the batch (the dataloader contract), seed-dependent."""
    g = torch.Generator().manual_seed(seed)
    offset = int(torch.randint(0, 4 * SQ, (1,), generator=g))
    row = torch.arange(SQ, dtype=torch.int64) + offset
    return row.unsqueeze(0).expand(B, SQ).contiguous().to(device)


def topk_indices(torch, device, seed, dtype):
    """Causal top-k of random scores, -inf slots as -1 (what dsa.py's naive top-k returns)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(B, SQ, SKV, generator=g)
    scores = scores.masked_fill(torch.ones(SQ, SKV, dtype=torch.bool).triu(1), float("-inf"))
    vals, idx = scores.topk(TOPK, dim=-1)
    idx = idx.masked_fill(vals == float("-inf"), -1)
    return idx.to(dtype).to(device)


def guard(torch, lay, msk, enums, cap, device):
    """The two graphs of the verdict; returns a list of failures."""
    failures = []
    causal = enums.AttnMaskType.causal

    def mask_kwargs(pos_ids, nonpacked):
        return dict(sq=SQ, skv=SKV, b=B, device=torch.device(device), cp_size=1, cp_rank=0,
                    cp_comm_type="allgather", cp_group=None, attn_mask_type=causal, attention_mask=None,
                    position_ids=pos_ids, packed_seq_params=None, packed_query_positions=None,
                    nonpacked_query_positions=nonpacked)

    def positions_and_bounds(pos_ids):
        query_pos = lay.extract_query_positions_from_position_ids(pos_ids, SQ, pos_ids.device)
        _, (s1, e1, k1), plain1 = msk.build_dsattention_forward_mask(**mask_kwargs(pos_ids, query_pos))
        _, (s0, e0, k0), plain0 = msk.build_dsattention_forward_mask(**mask_kwargs(pos_ids, None))
        assert k1 is None and k0 is None and plain0 and not plain1
        return query_pos, s1, e1, s0, e0

    static_pos = position_ids(torch, device, seed=1)
    replay, out, err = cap.try_capture(positions_and_bounds, static_pos)
    result = {"helper": "dsa_layout.extract_query_positions_from_position_ids + "
                        "dsa_masking.build_dsattention_forward_mask (plain causal)",
              "position_ids_shape": list(static_pos.shape), "captured": err is None}
    if err is not None:
        result["error"] = err
        failures.append(f"position_ids validation path did not capture: {err}")
    else:
        matches = []
        for seed in (2, 3):
            new = position_ids(torch, device, seed)
            static_pos.copy_(new)
            got = [t.clone() for t in replay()]
            matches.append(exact(torch, got, positions_and_bounds(new)))
        result["replay_matches_eager"] = matches
        if not all(matches):
            failures.append(f"position_ids graph replay differs from eager: {matches}")
    figure("guard_position_ids_capture", result["captured"], None, **result)

    def scatter(idx64, idx32):
        outs = []
        for idx in (idx64, idx32):
            index_mask = torch.full((B, SQ, SKV), float("-inf"), dtype=torch.float32, device=idx.device)
            msk.scatter_topk_into_index_mask(index_mask, idx, seq_chunk_size=CHUNK)
            outs.append(index_mask)
        starts = torch.zeros(SQ, dtype=torch.int64, device=idx64.device)
        ends = torch.arange(1, SQ + 1, dtype=torch.int64, device=idx64.device).clamp(max=SKV)
        outs.append(msk.apply_sparse_validity_to_index_mask(
            outs[0].clone(), row_mask=None, varlen_starts=starts, varlen_ends=ends, key_positions=None))
        return tuple(outs)

    s64, s32 = topk_indices(torch, device, 11, torch.int64), topk_indices(torch, device, 11, torch.int32)
    replay, out, err = cap.try_capture(scatter, s64, s32)
    result = {"helper": "dsa_masking.scatter_topk_into_index_mask (+ apply_sparse_validity_to_index_mask)",
              "shape": {"b": B, "sq": SQ, "skv": SKV, "topk": TOPK, "seq_chunk_size": CHUNK},
              "invalid_slots": int((s64 < 0).sum()), "captured": err is None}
    if err is not None:
        result["error"] = err
        failures.append(f"top-k scatter did not capture: {err}")
    else:
        matches = []
        for seed in (12, 13):
            n64, n32 = topk_indices(torch, device, seed, torch.int64), topk_indices(torch, device, seed, torch.int32)
            s64.copy_(n64)
            s32.copy_(n32)
            got = [t.clone() for t in replay()]
            ref = scatter(n64, n32)
            ok = exact(torch, got, ref)
            # the mask itself: 0 exactly at the valid top-k keys, -inf elsewhere
            want = torch.full((B, SQ, SKV), float("-inf"), device=n64.device)
            valid = n64 >= 0
            bi, qi = torch.nonzero(valid, as_tuple=True)[:2]
            want[bi, qi, n64[valid]] = 0.0
            matches.append(bool(ok and torch.equal(got[0], want) and torch.equal(got[1], want)))
        result["replay_matches_eager"] = matches
        if not all(matches):
            failures.append(f"top-k scatter graph replay differs from eager/expected mask: {matches}")
    figure("guard_topk_scatter_capture", result["captured"], None, **result)
    return failures


def canary(torch, cap, device):
    """The pre-fix forms (written here from the pack's summary) must fail to capture."""
    pos = position_ids(torch, device, 1)
    idx = topk_indices(torch, device, 11, torch.int64)

    def prefix_validation(p):
        assert torch.equal(p[0], p[-1])
        return p[0].clone()

    def prefix_branch(i):
        out = torch.full((B, SQ, SKV), float("-inf"), device=i.device)
        if torch.any(i < 0):
            i = i.clamp_min(0)
        return out.scatter_(-1, i, 0.0)

    caught = {}
    for name, fn, arg in (("torch_equal_validation", prefix_validation, pos),
                          ("any_branch_scatter", prefix_branch, idx)):
        _, _, err = cap.try_capture(fn, arg)
        caught[name] = err is not None
        figure(f"canary_{name}_capture_fails", err is not None, None, error=err)
    return caught


def probes(torch, lay, msk, dsa, enums, packed_cls, cap, device):
    """FIGUREs only: what 0.19.2 can and cannot capture off the plain path."""
    dev = torch.device(device)
    cu = torch.tensor([0, 64, 192, 320], dtype=torch.int64, device=device)  # 3 packed sequences, 320 tokens
    causal = enums.AttnMaskType.causal

    def fwd_mask(**kw):
        base = dict(sq=SQ, skv=SKV, b=1, device=dev, cp_size=1, cp_rank=0, cp_comm_type="allgather",
                    cp_group=None, attn_mask_type=causal, attention_mask=None, position_ids=None,
                    packed_seq_params=None, packed_query_positions=None, nonpacked_query_positions=None)
        base.update(kw)
        _, bounds, _ = msk.build_dsattention_forward_mask(**base)
        return tuple(t for t in bounds if t is not None)

    pos1 = torch.arange(SQ, dtype=torch.int64, device=device).unsqueeze(0)
    cases = [
        ("generate_varlen_mask_params", "dsa_masking.py:61 (.item())",
         lambda c: msk.generate_varlen_mask_params(c), (cu,)),
        ("packed_local_positions_cp1_no_output_size", "dsa_layout.py:242 (.item())",
         lambda c: lay.build_packed_allgather_cp_local_positions(c, 1, 0, dev), (cu,)),
        ("packed_local_positions_cp2_no_output_size", "dsa_layout.py:282 (.item())",
         lambda c: lay.build_packed_allgather_cp_local_positions(c, 2, 0, dev), (cu,)),
        ("packed_cp2_query_positions_and_key_reorder", "dsa_layout.py:282 via the key reorder (.item())",
         lambda c: lay.build_packed_allgather_cp_query_positions_and_key_reorder(c, c, 2, 0, dev), (cu,)),
        ("packed_local_positions_cp2_with_output_size", "dsa_layout.py:282 avoided (output_size given)",
         lambda c: lay.build_packed_allgather_cp_local_positions(c, 2, 0, dev, output_size=SQ // 2), (cu,)),
        ("forward_mask_packed_thd_cp1", "build_dsattention_forward_mask, packed thd, cp_size=1",
         lambda c: fwd_mask(packed_seq_params=packed_cls(qkv_format="thd", cu_seqlens_q=c, cu_seqlens_kv=c)),
         (cu,)),
        ("forward_mask_cp2_position_ids", "build_dsattention_forward_mask, cp_size=2, position_ids given",
         lambda p: fwd_mask(cp_size=2, skv=2 * SQ, position_ids=p), (pos1,)),
        ("forward_mask_cp2_zigzag_layout", "build_dsattention_forward_mask, cp_size=2, zigzag (no position_ids)",
         lambda c: fwd_mask(cp_size=2, skv=2 * SQ), (cu,)),
    ]
    for name, where, fn, args in cases:
        replay, out, err = cap.try_capture(fn, *args)
        info = {"where": where, "captured": err is None}
        if err is None:
            eager = fn(*args)
            info["replay_matches_eager"] = exact(torch, [t.clone() for t in flat(replay())], flat(eager))
        else:
            info["error"] = err
            info["sync_error"] = any(m in err for m in SYNC_MARKERS)
        figure(f"probe_{name}", err is None, None, **info)
    for name, where in (("cp_positions_uneven_fallback", "dsa_layout.py:217"),
                        ("validate_nonpacked_cp_uniform_length", "dsa.py:244")):
        figure(f"probe_{name}", None, None, where=where,
               not_probed="needs an initialized CP process group of cp_size > 1 ranks (single-GPU lane)")

    # the whole unfused absorbed-MLA attention of the plain path (mask=None -> causal additive mask)
    g = torch.Generator().manual_seed(21)
    hn, v, heads = 64, 48, 4
    q = torch.randn(SQ, B, heads, hn, generator=g).to(device)
    k = torch.randn(SKV, B, 1, hn, generator=g).to(device)
    idx = topk_indices(torch, device, 22, torch.int64)

    def unfused(q, k, idx):
        return dsa._unfused_absorbed_dsa_fn(q, k, idx, hn**-0.5, v)

    replay, out, err = cap.try_capture(unfused, q, k, idx)
    info = {"where": "dsa._unfused_absorbed_dsa_fn (mask=None)", "captured": err is None}
    if err is None:
        q.copy_(torch.randn(SQ, B, heads, hn, generator=g).to(device))
        idx.copy_(topk_indices(torch, device, 23, torch.int64))
        got = replay().clone()
        ref = unfused(q, k, idx)
        info["max_abs_diff_vs_eager"] = float((got - ref).abs().max())
    else:
        info["error"] = err
    figure("probe_unfused_absorbed_dsa_fn", err is None, None, **info)


def main() -> int:
    args = parse_args()
    start(args, "megatron-core", f"{PKG}.dsa_masking")

    import torch

    lay = importlib.import_module(f"{PKG}.dsa_layout")
    msk = importlib.import_module(f"{PKG}.dsa_masking")
    dsa = importlib.import_module(f"{PKG}.dsa")
    enums = importlib.import_module("megatron.core.transformer.enums")
    packed_cls = importlib.import_module("megatron.core.packed_seq_params").PackedSeqParams
    figure("helper_files", {"dsa_layout": lay.__file__, "dsa_masking": msk.__file__}, None)

    if args.dry_run_cpu:
        cap = Capturer(torch, "cpu")
        failures = guard(torch, lay, msk, enums, cap, "cpu")
        probes(torch, lay, msk, dsa, enums, packed_cls, cap, "cpu")
        figure("dry_run_cpu_failures", failures, None)
        skip("--dry-run-cpu: eager calls on the CPU only; nothing was captured")
    require_cuda("no CUDA device: CUDA-graph capture needs one")

    cap = Capturer(torch, "cuda")
    failures = guard(torch, lay, msk, enums, cap, "cuda")
    caught = canary(torch, cap, "cuda")
    if not all(caught.values()):
        failures.append(f"canary: a pre-fix sync form captured without error ({caught}); the guard is blind")
    try:
        probes(torch, lay, msk, dsa, enums, packed_cls, cap, "cuda")
    except Exception as exc:  # figures only: never the verdict
        figure("probes_error", error_text(exc), None)
    verdict("REGRESSION_GUARD_FAILED" if failures else "REGRESSION_GUARD_PASSED", lane=lane(),
            question="do 0.19.2's DSA position_ids validation and top-k scatter capture into a CUDA graph "
                     "and replay exactly?",
            failures=failures, canary_caught=caught)
    return 0


if __name__ == "__main__":
    sys.exit(main())
