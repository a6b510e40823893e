"""Pack 14: SparseMLA backward precision -- does dKV error grow with context, and does a hi/lo split close it?

The claim under test (article 002): megatron-core's TileLang SparseMLA backward rounds P and dP to
bf16 (``P_shared_cast`` / ``dP_shared_cast``) before the GEMMs that form dKV, and dKV drifts from a
full-precision backward, worse at long context. Shape: the DeepSeek dims the kernels support (D = 512
value channels + 64 rope tail = 576), top-k 2048, 32 heads (the backward's 32-head tile), one KV group,
batch 1, bf16 inputs.

Lanes (``--check``):

* ``sweep`` (CUDA). Per context length S (KV length = query length, causal; default 1k, 4k, 16k, 64k,
  128k) the real ``SparseMLA.apply`` forward and backward run on the same bf16 inputs and top-k
  indices as a float64 reference of the same sparse attention written here from the math (softmax of
  q.k * scale over each query's valid top-k keys, value = first 512 channels, dQ / dKV by the chain
  rule, dKV scattered over the indices). Indices are DSA-like: 64 sink keys every query selects, the 512
  most recent keys, and 1472 keys stratified over the rest (all earlier keys while S <= 2048), so the
  sink rows of dKV sum contributions from every query: the accumulation the claim is about grows with S.
  Error = ||got - ref||_F / ||ref||_F on dQ, on dKV (all rows) and on dKV's 64 sink rows ("hot"), also
  for the fp32 dKV accumulator the kernel hands to its bf16 cast (captured at the real postprocess
  kernel). Controls per point: the floor = the same error of the reference itself rounded to bf16 (the
  cost of storing any answer in bf16), and the run-to-run spread (two runs; dKV uses atomics); at the
  shortest S a second input seed gives the input-to-input spread. x = error / floor.

  Unpatched: BUG_REPRODUCED when, for dKV (all rows or sink rows), x at the longest S over x at the
  shortest S exceeds 1 + max(0.10, 4 * (run spread + seed spread)); BUG_ABSENT otherwise (an error above
  the floor that does not grow with context is reported, but is not the claim).
  Patched (``with_baseline``: the unpatched ops from HARNESS_BASELINE_SITE run in the same process on the
  same inputs): FIX_VALIDATED when at the longest S patched dKV (all rows) is within 1.10 x the floor,
  the baseline was not (x > 1.10) and at least half of its excess over the floor is gone; patched dKV is
  no worse than baseline at any S (all and sink rows, within 4 x the run spread); patched dQ error <=
  baseline dQ error x 1.01 at every S; and the backward's GPU kernel time (torch.profiler: every kernel
  SparseMLA.backward launches) is at most 1.15 x the baseline's at the longest S (median of interleaved
  pairs; the spread, the backward kernel alone and CUDA-event wall time are reported next to it).

* ``lower`` (any host, no GPU): the backward kernel the interface asks for at this shape, built and lowered
  for sm_90 with tilelang.lower; its TileLang program is read for the GEMMs that accumulate dKV and the
  buffers that feed them. Unpatched: BUG_REPRODUCED when every such GEMM takes P or dP only as one bf16
  copy of the fp32 fragment (the rounding the claim is about); the article's literal fix (those two
  buffers in accum_dtype), applied to the pinned source text, is lowered too and reported as a FIGURE.
  Patched (``with_baseline``): FIX_VALIDATED when the kernel lowers, every dKV GEMM pair now takes two bf16
  parts of its fp32 source, the dQ GEMMs are as at the pin, the generated CUDA keeps the bf16 -> fp32
  round trip that forms the residual (the baseline has none), and shared memory stays within sm_90's
  232448-byte limit.

    HARNESS_LANE=sweep-bug-0.19.2 python pack14_sparse_mla_bwd_precision.py --check sweep [--points 1024,4096]
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import re
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

from _lane import figure, lane, parser, patched, require_cuda, start, verdict

OPS = "megatron.core.transformer.experimental_attention_variant.ops"
D, D_TAIL = 512, 64
D_TOTAL = D + D_TAIL
TOPK = 2048
HEADS = 32
SINKS, LOCAL = 64, 512                 # index pattern: sink keys, most recent keys, rest stratified
POINTS = (1024, 4096, 16384, 65536, 131072)
MIN_SPAN = 16                          # the sweep must cover at least 16x in context to decide
GROWTH_MIN = 0.10                      # growth below 10 % over the sweep is not drift, whatever the noise
NOISE_K = 4                            # thresholds sit 4 spreads above the measured noise
SANITY_X = 16.0                        # error > 16 x floor at the shortest S: the comparison itself is broken
FLOOR_FACTOR = 1.10                    # "at the floor": patched dKV error <= 1.10 x the bf16 floor
CLOSURE_MIN = 0.5                      # the fix must remove at least half of the baseline's excess
DQ_SLACK = 0.01
TIME_RATIO_MAX = 1.15
SMEM_LIMIT_SM90 = 232448               # max dynamic shared memory per block on sm_90 (227 KiB)
DKV_VIEWS = ("dkv_all", "dkv_hot")
DEVICE = "cuda"
ROUNDTRIP_RE = re.compile(r"__bfloat1622float2\(|__bfloat162float\(|\(float\)\(\(bfloat16_t\)")


def parse_args():
    p = parser(__doc__)
    p.add_argument("--check", choices=["sweep", "lower"], default="sweep")
    p.add_argument("--points", default=",".join(map(str, POINTS)), help="context lengths, comma separated")
    p.add_argument("--heads", type=int, default=HEADS)
    p.add_argument("--reps", type=int, default=5, help="timed backward passes per variant and point")
    p.add_argument("--budget-s", type=float, default=300.0,
                   help="stop adding longer points once the projected sweep time passes this")
    p.add_argument("--chunk", type=int, default=512, help="queries per float64 reference chunk")
    return p.parse_args()


# --------------------------------------------------------------------------------------------------
# Decisions: plain numbers in, (sentinel, details) out. No torch here (tests/test_pack14.py feeds them).
# --------------------------------------------------------------------------------------------------

def _spread(a: float, b: float) -> float:
    return abs(a - b) / a if a else math.inf


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys on xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def growth_decision(points, err, floor, seed_x):
    """Does dKV error, in units of its bf16 floor, grow with context?

    points: context lengths, ascending. err[S][view]: [run0, run1] errors of the build under test.
    floor[S][view]: the reference's own bf16 storage error. seed_x[view]: x at points[0] for a second
    input seed. Raises ValueError when the sweep cannot decide (too short a span, broken comparison)."""
    if len(points) < 2 or points[-1] < MIN_SPAN * points[0]:
        raise ValueError(f"sweep {points} spans less than {MIN_SPAN}x in context: nothing to decide")
    s0, s1 = points[0], points[-1]
    views, grew = {}, []
    for v in DKV_VIEWS:
        x = {s: err[s][v][0] / floor[s][v] for s in points}
        if not x[s0] <= SANITY_X:
            raise ValueError(f"{v}: error {x[s0]:.3g} x the bf16 floor at S={s0}: kernel and reference disagree "
                             "about more than rounding (inputs, indices or scale), so no trend means anything")
        run_spread = max(_spread(*err[s][v][:2]) for s in points)
        seed_spread = _spread(x[s0], seed_x[v])
        threshold = 1 + max(GROWTH_MIN, NOISE_K * (run_spread + seed_spread))
        growth = x[s1] / x[s0]
        slope = _slope([math.log2(s) for s in points], [math.log(x[s]) for s in points])
        views[v] = {"x": {str(s): x[s] for s in points}, "growth": growth, "threshold": threshold,
                    "run_spread": run_spread, "seed_spread": seed_spread,
                    "log_x_per_doubling": slope, "grew": growth > threshold}
        if growth > threshold:
            grew.append(v)
    details = {"views": views, "grew": grew, "points": list(points),
               "rule": (f"BUG_REPRODUCED iff for dKV (all rows or sink rows) x(S={s1}) / x(S={s0}) > "
                        f"1 + max({GROWTH_MIN}, {NOISE_K} * (run spread + seed spread)), x = error / bf16 floor")}
    return ("BUG_REPRODUCED" if grew else "BUG_ABSENT"), details


def fix_decision(points, err_p, err_b, floor, timing):
    """Did the patch bring dKV to the floor, keep dQ, and stay within the time bound?

    err_p[S][view]: [run0, run1] patched; err_b[S][view]: [run0, ...] baseline (same inputs).
    timing: {"ratios": [patched / baseline backward kernel time per interleaved pair at the longest S]}."""
    failures = []
    s1 = points[-1]
    noise = max(_spread(*err_p[s][v][:2]) for s in points for v in DKV_VIEWS)
    xp = err_p[s1]["dkv_all"][0] / floor[s1]["dkv_all"]
    xb = err_b[s1]["dkv_all"][0] / floor[s1]["dkv_all"]
    closure = (xb - xp) / (xb - 1) if xb > 1 else 0.0
    if not xp <= FLOOR_FACTOR:
        failures.append(f"dKV at S={s1}: {xp:.3f} x the bf16 floor, above {FLOOR_FACTOR}")
    if not xb > FLOOR_FACTOR:
        failures.append(f"baseline dKV at S={s1} is already {xb:.3f} x the floor (<= {FLOOR_FACTOR}): no gap to close")
    elif not closure >= CLOSURE_MIN:
        failures.append(f"the patch removes {closure:.0%} of the baseline's excess over the floor at S={s1} "
                        f"(needs {CLOSURE_MIN:.0%})")
    per_point = {}
    for s in points:
        row = {}
        for v in DKV_VIEWS:
            p, b = err_p[s][v][0], err_b[s][v][0]
            row[v] = {"patched_x": p / floor[s][v], "baseline_x": b / floor[s][v]}
            if not p <= b * (1 + NOISE_K * noise):
                failures.append(f"{v} at S={s}: patched error {p:.4g} > baseline {b:.4g}")
        p, b = err_p[s]["dq"][0], err_b[s]["dq"][0]
        row["dq"] = {"patched": p, "baseline": b}
        if not p <= b * (1 + DQ_SLACK):
            failures.append(f"dQ at S={s}: patched error {p:.4g} > baseline {b:.4g} x {1 + DQ_SLACK}")
        per_point[str(s)] = row
    ratios = list(timing.get("ratios", []))
    ratio = statistics.median(ratios) if ratios else math.inf
    if not ratio <= TIME_RATIO_MAX:
        failures.append(f"backward kernel time at S={s1}: {ratio:.3f} x baseline (max {TIME_RATIO_MAX})"
                        if ratios else "no backward timing")
    details = {"failures": failures, "dkv_x_patched": xp, "dkv_x_baseline": xb, "closure": closure,
               "noise": noise, "time_ratio_median": ratio,
               "time_ratio_range": [min(ratios), max(ratios)] if ratios else None, "per_point": per_point,
               "rule": (f"at S={s1}: patched dKV <= {FLOOR_FACTOR} x floor, baseline > {FLOOR_FACTOR} x floor and >= "
                        f"{CLOSURE_MIN:.0%} of its excess removed; dKV no worse and dQ <= baseline x {1 + DQ_SLACK} "
                        f"at every S; median backward kernel time ratio <= {TIME_RATIO_MAX}")}
    return ("FIX_FAILED" if failures else "FIX_VALIDATED"), details


def gemm_groups(gemms, writes, dtypes):
    """For each GEMM accumulator: which buffers carry each fp32 source into it, per B operand.

    gemms: [(A, B, C)] buffer names; writes[dst]: names read to produce dst (copies and stores);
    dtypes[name]: dtype string. Key "C <- src x B" -> sorted A buffers derived from fp32 ``src``."""
    groups: dict[str, set] = {}
    for a, b, c in gemms:
        for src in sorted(writes.get(a, ())):
            if dtypes.get(src) == "float32" and src != c:
                groups.setdefault(f"{c} <- {src} x {b}", set()).add(a)
    return {k: sorted(v) for k, v in sorted(groups.items())}


def structure_decision(is_patched, facts, baseline_facts=None):
    """Lower lanes. facts: {"lowered", "groups", "a_dtypes", "roundtrips", "smem_bytes", "error"}."""
    failures = []
    if not facts.get("lowered"):
        failures.append(f"the backward kernel did not lower for sm_90: {facts.get('error')}")
    groups = facts.get("groups", {})
    dkv = {k: v for k, v in groups.items() if k.startswith("acc_dkv")}
    dq = {k: v for k, v in groups.items() if k.startswith("acc_dq")}
    sources = {k.split(" <- ")[1].split(" x ")[0] for k in dkv}
    if not dkv or len(sources) < 2:
        failures.append(f"no dKV GEMMs fed from both P and dP found (groups: {groups}): not the kernel this "
                        "check knows")
    not_bf16 = sorted(a for v in dkv.values() for a in v if facts.get("a_dtypes", {}).get(a) != "bfloat16")
    if not_bf16:
        failures.append(f"dKV GEMM operands not bf16: {not_bf16}")
    if not is_patched:
        single = bool(dkv) and all(len(v) == 1 for v in dkv.values())
        bug = single and not failures
        return ("BUG_REPRODUCED" if bug else "BUG_ABSENT"), {
            "failures": failures, "dkv_groups": dkv, "dq_groups": dq,
            "finding": ("P and dP reach every dKV GEMM only as one bf16 copy of the fp32 fragment"
                        if bug else "the dKV GEMMs do not match the single-bf16-copy structure")}
    two = [k for k, v in dkv.items() if len(v) != 2]
    if two:
        failures.append(f"dKV GEMMs without exactly two bf16 parts of their source: {two}")
    if baseline_facts is None:
        failures.append("no baseline kernel to compare with (HARNESS_BASELINE_SITE unset): lane needs with_baseline")
    else:
        base_dkv = {k for k in baseline_facts.get("groups", {}) if k.startswith("acc_dkv")}
        base_dq = {k: v for k, v in baseline_facts.get("groups", {}).items() if k.startswith("acc_dq")}
        if set(dkv) != base_dkv:
            failures.append(f"dKV GEMM pairs changed: baseline {sorted(base_dkv)}, patched {sorted(dkv)}")
        if dq != base_dq:
            failures.append(f"dQ GEMMs changed: baseline {base_dq}, patched {dq}")
        if not facts.get("roundtrips", 0) > baseline_facts.get("roundtrips", 0):
            failures.append("the generated CUDA has no more bf16 -> fp32 round trips than the baseline's: the "
                            "residual was folded away")
    if not facts.get("smem_bytes", math.inf) <= SMEM_LIMIT_SM90:
        failures.append(f"dynamic shared memory {facts.get('smem_bytes')} B > sm_90 limit {SMEM_LIMIT_SM90}")
    return ("FIX_FAILED" if failures else "FIX_VALIDATED"), {"failures": failures, "dkv_groups": dkv,
                                                               "dq_groups": dq}


# --------------------------------------------------------------------------------------------------
# Module loading
# --------------------------------------------------------------------------------------------------

def load_ops(prefix: str):
    """(sparse_mla, tilelang_sparse_mla_bwd) of the ops package importable as ``prefix``."""
    return (importlib.import_module(f"{prefix}.sparse_mla"),
            importlib.import_module(f"{prefix}.tilelang_sparse_mla_bwd"))


def load_baseline_ops():
    """The unpatched ops package from HARNESS_BASELINE_SITE as ``p14_baseline_ops`` (None without it)."""
    site = os.environ.get("HARNESS_BASELINE_SITE")
    if not site:
        return None
    path = Path(site) / OPS.replace(".", "/")
    pkg = types.ModuleType("p14_baseline_ops")
    pkg.__path__ = [str(path)]
    sys.modules["p14_baseline_ops"] = pkg
    figure("baseline_ops_dir", str(path), None)
    return load_ops("p14_baseline_ops")


# --------------------------------------------------------------------------------------------------
# lower: the kernel's structure, without a GPU
# --------------------------------------------------------------------------------------------------

def requested_bwd_args(torch, bwd, heads):
    """The arguments sparse_mla_bwd passes to _get_bwd_kernel at this shape (CPU tensors, no launch)."""
    seen = {}

    class Stop(Exception):
        pass

    def recorder(*args, **kwargs):
        seen["args"] = args
        raise Stop

    s = 256
    q = torch.zeros(1, s, heads, D_TOTAL, dtype=torch.bfloat16)
    kv = torch.zeros(1, s, 1, D_TOTAL, dtype=torch.bfloat16)
    do = torch.zeros(1, s, heads, D, dtype=torch.bfloat16)
    idx = torch.full((1, s, 1, TOPK), -1, dtype=torch.int32)
    lse = torch.zeros(1, s, heads)
    real, bwd._get_bwd_kernel = bwd._get_bwd_kernel, recorder
    try:
        bwd.sparse_mla_bwd(q, kv, None, do, idx, lse, sm_scale=D_TOTAL**-0.5, delta=torch.zeros(1, s, heads))
    except Stop:
        pass
    finally:
        bwd._get_bwd_kernel = real
    h, d, dt, topk, kv_group, sm_scale, max_block_h = seen["args"]
    return (h, d, dt, topk, kv_group, sm_scale), {"max_block_h": bwd._normalize_block_h(max_block_h)}


def tir_facts(tvm, func):
    """GEMM operand buffers, what each buffer is written from, and buffer dtypes, from the TileLang program."""
    gemms, writes, dtypes = [], {}, {}

    def note(buf):
        dtypes[buf.name] = str(buf.dtype)
        return buf.name

    def region(call):
        return note(call.args[0].buffer)

    def visit(node):
        if isinstance(node, tvm.tir.Call) and hasattr(node.op, "name"):
            name = node.op.name
            if name.endswith("gemm_py") or name.endswith("tileop.gemm"):
                gemms.append(tuple(region(a) for a in node.args[:3]))
            elif name.endswith("tileop.copy"):
                writes.setdefault(region(node.args[1]), set()).add(region(node.args[0]))
        elif isinstance(node, tvm.tir.BufferStore):
            reads = set()

            def load(n):
                if isinstance(n, tvm.tir.BufferLoad):
                    reads.add(note(n.buffer))
            tvm.tir.stmt_functor.post_order_visit(node.value, load)
            writes.setdefault(note(node.buffer), set()).update(reads)

    tvm.tir.stmt_functor.post_order_visit(func.body, visit)
    return gemms, writes, dtypes


def lower_bwd(tilelang, tvm, impl, args, kwargs):
    """Build the program, read its structure, lower it for sm_90; facts for structure_decision."""
    facts = {"lowered": False}
    t0 = time.perf_counter()
    try:
        func = impl.get_tir(*args, **kwargs)
        gemms, writes, dtypes = tir_facts(tvm, func)
        facts["groups"] = gemm_groups(gemms, writes, dtypes)
        facts["a_dtypes"] = {a: dtypes[a] for a, _, _ in gemms}
        facts["gemms"] = len(gemms)
        target = tvm.target.Target("cuda -arch=sm_90")
        with target, tvm.transform.PassContext(opt_level=3, config=impl.pass_configs or {}):
            art = tilelang.lower(func, target=target)
        src = art.kernel_source or ""
        dev = art.device_mod.script() if hasattr(art.device_mod, "script") else str(art.device_mod)
        smem = [int(n) for n in re.findall(r'T\.allocate\(\[(\d+)\], "uint8", "shared\.dyn"\)', dev)]
        facts.update(lowered=True, smem_bytes=sum(smem) if smem else None,
                     roundtrips=len(ROUNDTRIP_RE.findall(src)), mma_calls=src.count("tl::mma_sync<"),
                     source_chars=len(src))
    except Exception as exc:  # noqa: BLE001 - a lowering failure is a finding, reported with its message
        facts["error"] = f"{type(exc).__name__}: {str(exc)[-400:]}"
    facts["seconds"] = round(time.perf_counter() - t0, 1)
    return facts


def literal_fix(tilelang, tvm, bwd, args, kwargs):
    """The article's fix applied to the pinned source text (P/dP buffers in accum_dtype), then lowered."""
    text = Path(bwd.__file__).read_text()
    pattern = re.compile(r"^(\s*d?P_shared_cast = T\.alloc_shared\(\[block_H, BS\], )dtype\)$", re.M)
    new, n = pattern.subn(r"\1accum_dtype)", text)
    if n != 2:
        figure("article_literal_fix_lowers", None, None, note=f"expected 2 allocation lines, found {n}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p14_literal_fix.py"
        path.write_text(new)
        spec = importlib.util.spec_from_file_location(f"{bwd.__package__}.p14_literal_fix", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        facts = lower_bwd(tilelang, tvm, mod.bwd, args, kwargs)
    figure("article_literal_fix_lowers", facts["lowered"], None, error=facts.get("error"),
           change="P_shared_cast, dP_shared_cast: T.alloc_shared([block_H, BS], accum_dtype)")


def lower_check(torch, bwd, baseline_bwd, heads):
    import tilelang
    from tilelang import tvm

    args, kwargs = requested_bwd_args(torch, bwd, heads)
    figure("bwd_kernel_args", [str(a) for a in args], None, **{k: str(v) for k, v in kwargs.items()})
    facts = lower_bwd(tilelang, tvm, bwd.bwd, args, kwargs)
    figure("bwd_lowered", facts["lowered"], None, **{k: v for k, v in facts.items() if k != "lowered"})
    base = None
    if patched() and baseline_bwd is not None:
        base = lower_bwd(tilelang, tvm, baseline_bwd.bwd, args, kwargs)
        figure("baseline_bwd_lowered", base["lowered"], None, **{k: v for k, v in base.items() if k != "lowered"})
    if not patched():
        literal_fix(tilelang, tvm, bwd, args, kwargs)
    sentinel, details = structure_decision(patched(), facts, base)
    details.update(smem_bytes=facts.get("smem_bytes"), roundtrips=facts.get("roundtrips"),
                   baseline_smem_bytes=(base or {}).get("smem_bytes"),
                   baseline_roundtrips=(base or {}).get("roundtrips"))
    return sentinel, details


# --------------------------------------------------------------------------------------------------
# sweep: the numbers (CUDA)
# --------------------------------------------------------------------------------------------------

def make_indices(torch, s, gen, device):
    """[s, TOPK] int32 causal top-k: all earlier keys while i < TOPK, else sinks + stratified far + local."""
    ar = torch.arange(TOPK, device=device)
    idx = torch.full((s, TOPK), -1, dtype=torch.int32, device=device)
    n_dense = min(s, TOPK)
    rows = torch.arange(n_dense, device=device)[:, None]
    idx[:n_dense] = torch.where(ar[None, :] <= rows, ar[None, :], -1).to(torch.int32)
    n_far = TOPK - SINKS - LOCAL
    b = torch.arange(n_far, device=device, dtype=torch.float64)[None, :]
    for r0 in range(TOPK, s, 8192):
        i = torch.arange(r0, min(s, r0 + 8192), device=device)[:, None]
        width = (i - LOCAL + 1 - SINKS).double()                  # far keys: [SINKS, i - LOCAL + 1)
        lo = SINKS + torch.floor(b * width / n_far).long()
        hi = SINKS + torch.floor((b + 1) * width / n_far).long()   # width >= n_far + 1: every bin non-empty
        u = torch.rand(lo.shape, generator=gen, device=device, dtype=torch.float64)
        far = torch.minimum(lo + torch.floor(u * (hi - lo)).long(), hi - 1)
        local = i - LOCAL + 1 + torch.arange(LOCAL, device=device)[None, :]
        sinks = torch.arange(SINKS, device=device)[None, :].expand(i.size(0), SINKS)
        idx[r0:r0 + i.size(0)] = torch.cat([sinks, far, local], 1).to(torch.int32)
    return idx


def check_indices(torch, idx):
    """Every valid index is causal (<= its query) and unique within its row."""
    s = idx.size(0)
    pos = torch.arange(s, device=idx.device)[:, None]
    if bool((idx > pos).any()):
        raise RuntimeError("index generator produced a non-causal index")
    srt = torch.sort(idx.long(), dim=1).values
    dup = (srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)
    if bool(dup.any()):
        raise RuntimeError("index generator produced a duplicate index in a row")


class Inputs:
    def __init__(self, torch, s, heads, seed):
        g = torch.Generator(device=DEVICE).manual_seed(seed)
        self.s, self.heads, self.seed = s, heads, seed
        self.q = torch.randn(1, s, heads, D_TOTAL, generator=g, device=DEVICE, dtype=torch.bfloat16)
        self.kv = torch.randn(1, s, 1, D_TOTAL, generator=g, device=DEVICE, dtype=torch.bfloat16)
        self.do = torch.randn(1, s, heads, D, generator=g, device=DEVICE, dtype=torch.bfloat16)
        idx = make_indices(torch, s, g, DEVICE)
        check_indices(torch, idx)
        hits = torch.bincount(idx[idx >= 0].long(), minlength=s)
        self.hits = {"all_mean": float(hits.double().mean()), "hot_mean": float(hits[:SINKS].double().mean()),
                     "hot_min": int(hits[:SINKS].min())}
        self.idx = idx.view(1, s, 1, TOPK).contiguous()
        self.scale = D_TOTAL**-0.5


class Capture:
    """Wraps a bwd module's postprocess kernel getter to keep the fp32 dKV accumulator it casts to bf16."""

    def __init__(self, bwd):
        self.on, self.last = False, None
        real = bwd._get_postprocess_kernel

        def get(*args, **kwargs):
            kernel = real(*args, **kwargs)

            def run(dkv):
                if self.on:
                    self.last = dkv.clone()
                return kernel(dkv)
            return run
        bwd._get_postprocess_kernel = get


def run_once(torch, variant, inp):
    sm, cap = variant
    q = inp.q.detach().requires_grad_(True)
    kv = inp.kv.detach().requires_grad_(True)
    cap.on, cap.last = True, None
    out, _ = sm.SparseMLA.apply(q, kv, inp.idx, inp.scale)
    out.backward(inp.do)
    cap.on = False
    if cap.last is None:
        raise RuntimeError("the postprocess capture saw no fp32 dKV: sparse_mla_bwd no longer calls it")
    dkv32 = cap.last[:, : inp.s]
    same = bool(torch.equal(dkv32.to(torch.bfloat16), kv.grad))
    return {"out": out.detach(), "dq": q.grad, "dkv": kv.grad, "dkv32": dkv32, "cast_matches": same}


def time_backward(torch, variants, inp, reps):
    """GPU kernel time of SparseMLA.backward per variant, interleaved; rep 0 is a dropped warm-up."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    rows = {name: [] for name in variants}
    for rep in range(reps + 1):
        for name, (sm, _) in variants.items():
            q = inp.q.detach().requires_grad_(True)
            kv = inp.kv.detach().requires_grad_(True)
            out, _ = sm.SparseMLA.apply(q, kv, inp.idx, inp.scale)
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                e0.record()
                out.backward(inp.do)
                e1.record()
                torch.cuda.synchronize()
            kernels = [(ev.name, ev.time_range.elapsed_us()) for ev in prof.events()
                       if ev.device_type == DeviceType.CUDA]
            total = sum(us for _, us in kernels)
            main = sum(us for n, us in kernels if "sparse_mla_bwd" in n)
            if not kernels or not main:
                raise RuntimeError(f"profiler saw {len(kernels)} GPU events and no sparse_mla_bwd kernel: "
                                   "timing would be meaningless")
            if rep:
                rows[name].append({"kernel_us": total, "bwd_kernel_us": main, "wall_us": e0.elapsed_time(e1) * 1e3,
                                   "gpu_events": len(kernels)})
            del out, q, kv
    return rows


def summarize_timing(rows):
    out = {}
    for name, reps in rows.items():
        out[name] = {k: {"median": statistics.median(r[k] for r in reps), "min": min(r[k] for r in reps),
                         "max": max(r[k] for r in reps)} for k in ("kernel_us", "bwd_kernel_us", "wall_us")}
    if "patched" in rows and "baseline" in rows:
        pairs = list(zip(rows["patched"], rows["baseline"], strict=True))
        for k in ("kernel_us", "bwd_kernel_us", "wall_us"):
            out[f"ratio_{k}"] = [p[k] / b[k] for p, b in pairs]
    return out


def evaluate(torch, inp, runs, chunk):
    """Errors of every run against the float64 reference, and the reference's bf16 floor."""
    s, scale = inp.s, inp.scale
    kv64 = inp.kv[0, :, 0].double()
    dkv_ref = torch.zeros_like(kv64)
    sums = {key: {"dq": [0.0, 0.0], "out": [0.0, 0.0]} for key in runs}     # sum sq diff, max |diff|
    ref = {"dq": [0.0, 0.0], "out": [0.0, 0.0]}
    flo = {"dq": [0.0, 0.0], "out": [0.0, 0.0]}

    def add(acc, d):
        acc[0] += float((d * d).sum())
        acc[1] = max(acc[1], float(d.abs().max()))

    with torch.no_grad():
        for c0 in range(0, s, chunk):
            c1 = min(s, c0 + chunk)
            q = inp.q[0, c0:c1].double()                                   # [C, H, 576]
            do = inp.do[0, c0:c1].double()                                 # [C, H, 512]
            ind = inp.idx[0, c0:c1, 0].long()                              # [C, K]
            valid = ind >= 0
            safe = ind.clamp(min=0)
            g = kv64[safe]                                                 # [C, K, 576]
            sc = torch.bmm(q, g.transpose(1, 2)) * scale                   # [C, H, K]
            sc = sc.masked_fill(~valid[:, None, :], float("-inf"))
            p = torch.softmax(sc, dim=-1)
            o = torch.bmm(p, g[..., :D])
            dp = torch.bmm(do, g[..., :D].transpose(1, 2))
            ds = p * (dp - (o * do).sum(-1, keepdim=True)) * scale
            dq = torch.bmm(ds, g)
            contrib = torch.bmm(ds.transpose(1, 2), q)                     # [C, K, 576]
            contrib[..., :D] += torch.bmm(p.transpose(1, 2), do)
            if bool(valid.all()):
                dkv_ref.index_add_(0, safe.reshape(-1), contrib.reshape(-1, D_TOTAL))
            else:
                sel = valid.reshape(-1).nonzero().squeeze(1)
                dkv_ref.index_add_(0, safe.reshape(-1)[sel], contrib.reshape(-1, D_TOTAL)[sel])
            for name, r in (("dq", dq), ("out", o)):
                add(ref[name], r)
                add(flo[name], r.to(torch.bfloat16).double() - r)
                for key, res in runs.items():
                    add(sums[key][name], res[name][0, c0:c1].double() - r)
            del g, sc, p, o, dp, ds, dq, contrib

    def fro(d_sq, r_sq):
        return math.sqrt(d_sq / r_sq) if r_sq else math.inf

    err = {key: {n: fro(sums[key][n][0], ref[n][0]) for n in ("dq", "out")} for key in runs}
    err_max = {key: {n: sums[key][n][1] / ref[n][1] for n in ("dq", "out")} for key in runs}
    floor = {n: fro(flo[n][0], ref[n][0]) for n in ("dq", "out")}
    views = {"all": slice(None), "hot": slice(0, SINKS)}
    for v, sl in views.items():
        r = dkv_ref[sl]
        r_sq = float((r * r).sum())
        fd = r.to(torch.bfloat16).double() - r
        floor[f"dkv_{v}"] = fro(float((fd * fd).sum()), r_sq)
        for key, res in runs.items():
            for name in ("dkv", "dkv32"):
                d = res[name][0, :, 0][sl].double() - r
                err[key][f"{name}_{v}"] = fro(float((d * d).sum()), r_sq)
                if v == "all":
                    err_max[key][name] = float(d.abs().max()) / float(r.abs().max())
    return err, err_max, floor


def sweep_check(torch, variants, points, heads, reps, budget_s, chunk):
    """Run the sweep; return (points reached, err[variant][S][view] = [runs], floor[S][view], seed_x, timing)."""
    test = "patched" if "patched" in variants else "pin"
    plan = [(name, 2 if name == test else 1) for name in variants]
    err = {name: {} for name in variants}
    floor, timing, reached = {}, {}, []
    t_start, last = time.perf_counter(), None
    warm = Inputs(torch, points[0], heads, seed=0)   # compiles every kernel before any point is timed
    for variant in variants.values():
        run_once(torch, variant, warm)
    figure("compile_and_warm_up", round(time.perf_counter() - t_start, 1), "s")
    del warm
    for s in points:
        if last is not None:
            projected = (time.perf_counter() - t_start) + last[1] * s / last[0] * 1.2
            if projected > budget_s:
                figure("sweep_truncated", s, "kv_len", projected_s=round(projected, 1), budget_s=budget_s)
                break
        t0 = time.perf_counter()
        inp = Inputs(torch, s, heads, seed=s)
        runs = {}
        for name, n in plan:
            for r in range(n):
                runs[(name, r)] = run_once(torch, variants[name], inp)
        rows = time_backward(torch, variants, inp, reps)
        e, emax, fl = evaluate(torch, inp, runs, chunk)
        for name, n in plan:
            err[name][s] = {v: [e[(name, r)][v] for r in range(n)] for v in e[(name, 0)]}
        floor[s] = fl
        timing[s] = summarize_timing(rows)
        cast_ok = all(res["cast_matches"] for res in runs.values())
        r0, r1 = runs[(test, 0)], runs[(test, 1)]
        rerun = {name: {"bitwise_equal": bool(torch.equal(r0[name], r1[name])),
                        "rel_diff": float((r0[name].double() - r1[name].double()).norm() / r0[name].double().norm())}
                 for name in ("dq", "dkv", "dkv32")}
        figure("point", s, "kv_len", heads=heads, topk=TOPK, seconds=round(time.perf_counter() - t0, 1),
               hits=inp.hits, floor=fl, errors={name: err[name][s] for name in variants},
               x={name: {v: err[name][s][v][0] / fl[v] for v in ("dq", "out", *DKV_VIEWS)} for name in variants},
               max_abs_rel={f"{k[0]}#{k[1]}": v for k, v in emax.items()}, timing=timing[s],
               dkv_bf16_is_cast_of_captured_fp32=cast_ok, run_to_run=rerun,
               gpu_mem_peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 1))
        reached.append(s)
        last = (s, time.perf_counter() - t0)
        del inp, runs
        torch.cuda.empty_cache()
    # seed control at the shortest point: the build under test, one run, another input seed
    s0 = reached[0]
    inp = Inputs(torch, s0, heads, seed=s0 + 1)
    e, _, fl = evaluate(torch, inp, {"seed": run_once(torch, variants[test], inp)}, chunk)
    seed_x = {v: e["seed"][v] / fl[v] for v in DKV_VIEWS}
    figure("seed_control", s0, "kv_len", x=seed_x, seed=s0 + 1)
    return reached, err, floor, seed_x, timing


def main() -> int:
    args = parse_args()
    start(args, "megatron-core", "megatron.core")
    import torch

    if args.check == "sweep":
        require_cuda("the SparseMLA TileLang kernels need a CUDA GPU (the 'lower' lanes check the kernel on any host)")
    sparse_mla, bwd = load_ops(OPS)
    if sparse_mla.SparseMLA is None:
        verdict("FIX_FAILED" if patched() else "BUG_ABSENT", lane=lane(),
                failures=["tilelang is not importable: SparseMLA is None (lane needs with_builds tilelang)"])
        return 0
    baseline = load_baseline_ops() if patched() else None
    shape = {"D": D, "D_tail": D_TAIL, "topk": TOPK, "heads": args.heads, "kv_group": 1, "batch": 1,
             "sinks": SINKS, "local": LOCAL}
    if args.check == "lower":
        sentinel, details = lower_check(torch, bwd, baseline[1] if baseline else None, args.heads)
        verdict(sentinel, lane=lane(), shape=shape, question=(
            "does the dKV path take P/dP only as bf16 roundings (pin), and as bf16 hi + lo (patched), "
            "in a kernel that lowers for sm_90?"), **details)
        return 0
    points = sorted({int(p) for p in args.points.split(",") if p.strip()})
    variants = {"patched" if patched() else "pin": (sparse_mla, Capture(bwd))}
    if patched():
        if baseline is None:
            verdict("FIX_FAILED", lane=lane(), failures=["no baseline build (HARNESS_BASELINE_SITE unset): "
                                                         "the lane needs with_baseline = true"])
            return 0
        variants["baseline"] = (baseline[0], Capture(baseline[1]))
    reached, err, floor, seed_x, timing = sweep_check(torch, variants, points, args.heads, args.reps,
                                                      args.budget_s, args.chunk)
    question = "does SparseMLA's dKV error vs float64 grow with context beyond the bf16 floor?"
    if patched():
        s1 = reached[-1]
        sentinel, details = fix_decision(reached, err["patched"], err["baseline"], floor,
                                         {"ratios": timing[s1]["ratio_kernel_us"]})
        if s1 != points[-1]:
            details["failures"].append(f"the sweep stopped at S={s1} (time budget), before S={points[-1]}")
            sentinel = "FIX_FAILED"
        details["time_ratio_bwd_kernel_only"] = timing[s1]["ratio_bwd_kernel_us"]
        details["time_ratio_wall"] = timing[s1]["ratio_wall_us"]
        details["timing_us"] = {k: v for k, v in timing[s1].items() if not k.startswith("ratio")}
        question = "does the bf16 hi/lo split bring dKV to the bf16 floor at no dQ or material time cost?"
    else:
        sentinel, details = growth_decision(reached, err["pin"], floor, seed_x)
        details["timing_us"] = timing[reached[-1]]["pin"]
    verdict(sentinel, lane=lane(), shape=shape, question=question, requested_points=points, reached_points=reached,
            **details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
