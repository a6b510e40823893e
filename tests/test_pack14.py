"""Pack 14 (SparseMLA backward precision): the reproducer's decisions can fail, and tracking.toml declares the lanes.

The evidence needs megatron-core's TileLang kernels on a CUDA GPU (sweep) or tilelang on the host (lower);
what is checked here is the pure decision logic, fed synthetic numbers, and the pack's declaration.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.lane.tracking import Tracking

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "repros" / "megatron-lm" / "pack14_sparse_mla_bwd_precision.py"
POINTS = [1024, 4096, 16384, 65536]
FLOOR = 1e-3


@pytest.fixture(scope="module")
def p14(load_reproducer):
    return load_reproducer(SCRIPT, "pack14")


def _err(xs, spread=0.0, dq=2e-3, views=("dkv_all", "dkv_hot")):
    """err[S][view] = [run0, run1] for the given x (error / floor) per point."""
    return {s: {**{v: [x * FLOOR, x * FLOOR * (1 + spread)] for v in views}, "dq": [dq, dq]}
            for s, x in zip(POINTS, xs, strict=True)}


def _floor():
    return {s: {"dkv_all": FLOOR, "dkv_hot": FLOOR, "dq": FLOOR} for s in POINTS}


# growth (unpatched sweep)

def test_flat_error_above_the_floor_is_not_growth(p14):
    sentinel, details = p14.growth_decision(POINTS, _err([1.4, 1.42, 1.41, 1.43]), _floor(),
                                            {"dkv_all": 1.41, "dkv_hot": 1.41})
    assert sentinel == "BUG_ABSENT"
    assert details["grew"] == []
    assert details["views"]["dkv_all"]["threshold"] == pytest.approx(1 + p14.GROWTH_MIN)


def test_error_growing_with_context_reproduces(p14):
    sentinel, details = p14.growth_decision(POINTS, _err([1.2, 1.5, 2.0, 3.0]), _floor(),
                                            {"dkv_all": 1.2, "dkv_hot": 1.2})
    assert sentinel == "BUG_REPRODUCED"
    assert details["grew"] == ["dkv_all", "dkv_hot"]
    assert details["views"]["dkv_all"]["growth"] == pytest.approx(2.5)
    assert details["views"]["dkv_all"]["log_x_per_doubling"] > 0


def test_growth_in_the_sink_rows_alone_counts(p14):
    err = _err([1.4, 1.4, 1.4, 1.4])
    for s, x in zip(POINTS, [1.4, 1.6, 1.9, 2.3], strict=True):
        err[s]["dkv_hot"] = [x * FLOOR, x * FLOOR]
    sentinel, details = p14.growth_decision(POINTS, err, _floor(), {"dkv_all": 1.4, "dkv_hot": 1.4})
    assert sentinel == "BUG_REPRODUCED"
    assert details["grew"] == ["dkv_hot"]


def test_threshold_follows_the_measured_noise(p14):
    # the second seed moves x by 10 %: 4 x that puts the bar at 1.4, so a 30 % rise is within noise
    sentinel, details = p14.growth_decision(POINTS, _err([1.4, 1.5, 1.7, 1.82]), _floor(),
                                            {"dkv_all": 1.54, "dkv_hot": 1.54})
    assert details["views"]["dkv_all"]["threshold"] == pytest.approx(1.4)
    assert sentinel == "BUG_ABSENT"
    # the same rise with a quiet control reproduces
    assert p14.growth_decision(POINTS, _err([1.4, 1.5, 1.7, 1.82]), _floor(),
                               {"dkv_all": 1.4, "dkv_hot": 1.4})[0] == "BUG_REPRODUCED"


def test_run_to_run_spread_raises_the_threshold(p14):
    sentinel, details = p14.growth_decision(POINTS, _err([1.4, 1.5, 1.7, 1.82], spread=0.1), _floor(),
                                            {"dkv_all": 1.4, "dkv_hot": 1.4})
    assert details["views"]["dkv_all"]["run_spread"] == pytest.approx(0.1)
    assert sentinel == "BUG_ABSENT"


def test_too_short_a_sweep_decides_nothing(p14):
    with pytest.raises(ValueError, match="spans less than"):
        p14.growth_decision(POINTS[:2], _err([1.4, 1.4, 1.4, 1.4]), _floor(), {"dkv_all": 1.4, "dkv_hot": 1.4})


def test_a_broken_comparison_decides_nothing(p14):
    with pytest.raises(ValueError, match="disagree"):
        p14.growth_decision(POINTS, _err([40.0, 40.0, 40.0, 40.0]), _floor(), {"dkv_all": 40.0, "dkv_hot": 40.0})


# fix (patched sweep)

def _fix(p14, xp=1.02, xb=1.4, dq_p=2e-3, ratios=(1.05, 1.06, 1.04), xp_short=None):
    err_p = _err([xp_short or xp, xp, xp, xp], dq=dq_p)
    err_b = _err([xb, xb, xb, xb])
    return p14.fix_decision(POINTS, err_p, err_b, _floor(), {"ratios": list(ratios)})


def test_fix_at_the_floor_within_time_validates(p14):
    sentinel, details = _fix(p14)
    assert sentinel == "FIX_VALIDATED", details["failures"]
    assert details["closure"] == pytest.approx(0.95)
    assert details["time_ratio_median"] == pytest.approx(1.05)


def test_fix_above_the_floor_fails(p14):
    sentinel, details = _fix(p14, xp=1.2)
    assert sentinel == "FIX_FAILED"
    assert any("above 1.1" in f for f in details["failures"])


def test_no_gap_to_close_fails(p14):
    sentinel, details = _fix(p14, xp=1.01, xb=1.05)
    assert sentinel == "FIX_FAILED"
    assert any("no gap to close" in f for f in details["failures"])


def test_small_closure_fails(p14):
    sentinel, details = _fix(p14, xp=1.10, xb=1.15)
    assert sentinel == "FIX_FAILED"
    assert any("removes 33%" in f for f in details["failures"])


def test_worse_dq_fails(p14):
    sentinel, details = _fix(p14, dq_p=2.1e-3)
    assert sentinel == "FIX_FAILED"
    assert any(f.startswith("dQ at S=") for f in details["failures"])


def test_worse_dkv_at_a_shorter_context_fails(p14):
    sentinel, details = _fix(p14, xp_short=1.6)
    assert sentinel == "FIX_FAILED"
    assert any("dkv_all at S=1024" in f for f in details["failures"])


def test_slow_fix_fails(p14):
    sentinel, details = _fix(p14, ratios=(1.2, 1.18, 1.25))
    assert sentinel == "FIX_FAILED"
    assert any("1.200 x baseline" in f for f in details["failures"])
    assert _fix(p14, ratios=())[1]["failures"] == ["no backward timing"]


# lower lanes (kernel structure)

PIN_GEMMS = [("Q_shared", "KV_shared", "acc_p"), ("dO_shared", "KV_shared", "acc_dp"),
             ("dP_shared_cast", "KV_shared", "acc_dq"), ("dP_shared_cast", "Q_shared", "acc_dkv"),
             ("P_shared_cast", "dO_shared", "acc_dkv"), ("dP_shared_cast", "Q_tail_shared", "acc_dkv_tail")]
LO_GEMMS = [("dP_lo_shared", "Q_shared", "acc_dkv"), ("P_lo_shared", "dO_shared", "acc_dkv"),
            ("dP_lo_shared", "Q_tail_shared", "acc_dkv_tail")]
WRITES = {"P_shared_cast": {"acc_p"}, "dP_shared_cast": {"acc_dp"}, "P_lo_shared": {"acc_p"},
          "dP_lo_shared": {"acc_dp"}, "Q_shared": {"Q"}, "dO_shared": {"dO"}, "acc_dp": {"acc_p", "acc_dp", "Delta"}}
DTYPES = {"acc_p": "float32", "acc_dp": "float32", "Delta": "float32", "Q": "bfloat16", "dO": "bfloat16",
          **{n: "bfloat16" for n in ("P_shared_cast", "dP_shared_cast", "P_lo_shared", "dP_lo_shared", "Q_shared",
                                     "dO_shared", "KV_shared", "Q_tail_shared")}}


def _facts(p14, gemms, roundtrips=0, smem=184320, lowered=True):
    return {"lowered": lowered, "groups": p14.gemm_groups(gemms, WRITES, DTYPES),
            "a_dtypes": {a: DTYPES[a] for a, _, _ in gemms}, "roundtrips": roundtrips, "smem_bytes": smem}


def test_gemm_groups_follow_the_fp32_source(p14):
    groups = p14.gemm_groups(PIN_GEMMS + LO_GEMMS, WRITES, DTYPES)
    assert groups["acc_dkv <- acc_p x dO_shared"] == ["P_lo_shared", "P_shared_cast"]
    assert groups["acc_dq <- acc_dp x KV_shared"] == ["dP_shared_cast"]
    assert not any(k.startswith("acc_p ") for k in groups)     # Q_shared comes from bf16 Q, not from a fragment


def test_pin_structure_reproduces(p14):
    sentinel, details = p14.structure_decision(False, _facts(p14, PIN_GEMMS))
    assert sentinel == "BUG_REPRODUCED"
    assert len(details["dkv_groups"]) == 3


def test_unknown_structure_is_absent(p14):
    no_dp = [g for g in PIN_GEMMS if g[0] != "dP_shared_cast"]
    assert p14.structure_decision(False, _facts(p14, no_dp))[0] == "BUG_ABSENT"
    assert p14.structure_decision(False, _facts(p14, PIN_GEMMS, lowered=False))[0] == "BUG_ABSENT"
    assert p14.structure_decision(False, _facts(p14, PIN_GEMMS + LO_GEMMS))[0] == "BUG_ABSENT"


def test_patched_structure_validates(p14):
    base = _facts(p14, PIN_GEMMS)
    sentinel, details = p14.structure_decision(True, _facts(p14, PIN_GEMMS + LO_GEMMS, roundtrips=6, smem=188416),
                                               base)
    assert sentinel == "FIX_VALIDATED", details["failures"]


@pytest.mark.parametrize("case, expect", [
    ("one_part", "without exactly two bf16 parts"),
    ("dq_changed", "dQ GEMMs changed"),
    ("folded", "folded away"),
    ("smem", "sm_90 limit"),
    ("no_baseline", "HARNESS_BASELINE_SITE"),
    ("not_lowered", "did not lower"),
])
def test_patched_structure_failures(p14, case, expect):
    gemms = PIN_GEMMS + LO_GEMMS
    kw = {"roundtrips": 6, "smem": 188416}
    base = _facts(p14, PIN_GEMMS)
    if case == "one_part":
        gemms = PIN_GEMMS + LO_GEMMS[:2]
    elif case == "dq_changed":
        gemms = gemms + [("dP_lo_shared", "KV_shared", "acc_dq")]
    elif case == "folded":
        kw["roundtrips"] = 0
    elif case == "smem":
        kw["smem"] = p14.SMEM_LIMIT_SM90 + 1
    elif case == "no_baseline":
        base = None
    elif case == "not_lowered":
        kw["lowered"] = False
    sentinel, details = p14.structure_decision(True, _facts(p14, gemms, **kw), base)
    assert sentinel == "FIX_FAILED"
    assert any(expect in f for f in details["failures"]), details["failures"]


# declaration

def test_tracking_declares_the_lanes():
    tracking = Tracking.load(ROOT)
    pack = tracking.packs["14"]
    # retired on its own sweep receipt (no error growth with context); the reason names that lane
    assert pack.state == "retired" and "sweep-bug-0.19.2" in str(tracking.doc["packs"]["14"]["filing"])
    assert pack.reproducer == "repros/megatron-lm/pack14_sparse_mla_bwd_precision.py"
    lanes = {lane.name: lane for lane in pack.lanes}
    assert set(lanes) == {"lower-bug-0.19.2-cpu", "lower-fix-0.19.2-cpu", "sweep-bug-0.19.2", "sweep-fix-0.19.2"}
    for name, lane in lanes.items():
        assert lane.extra_builds == (("tilelang", "0.1.8"),)
        assert pack.lane_requires(lane) == ("cpu" if name.endswith("-cpu") else "cuda")
        assert lane.with_baseline == lane.patched
        assert lane.expect == ("FIX_VALIDATED" if lane.patched else "BUG_REPRODUCED")
        assert lane.args == ("--check", "lower" if name.startswith("lower") else "sweep")
        if name.startswith("sweep"):
            assert lane.timeout < 8 * 60
    series = sorted((ROOT / "patches" / "megatron-lm" / "14").glob("*.patch"))
    assert [p.name[:5] for p in series] == ["0001-"]
    assert "Upstream-Status: Pending" in series[0].read_text()
