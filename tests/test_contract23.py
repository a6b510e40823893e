"""Contract 23 (Mamba-3 pre-projection RMSNorm seam): the lane decisions can fail, and tracking.toml states it.

The reproducer's evidence needs the real Mamba3 on a CUDA GPU; what is checked here is only its pure
decision logic (fed synthetic numbers) and the pack's declaration. No torch needed.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from harness.lane.tracking import Tracking

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "repros" / "contracts" / "contract23_mamba3_prenorm_seam.py"
SCALES = (0.1, 1.0, 10.0, 100.0)


@pytest.fixture(scope="module")
def c23(load_reproducer):
    return load_reproducer(SCRIPT, "contract23")


def _drift(c23, rms_id, rms_pn=None, dist_pn=None, finite_id=None, tol=0.01):
    rms_pn = rms_pn or dict.fromkeys(SCALES, 0.5)
    dist_pn = dist_pn or {s: (0.0 if s == 1.0 else 0.002) for s in SCALES}
    finite_id = finite_id or dict.fromkeys(SCALES, True)
    return c23.drift_decision(dict(zip(SCALES, rms_id, strict=True)), rms_pn, dist_pn, tol, finite_id)


def test_drift_detected_when_identity_moves_and_prenorm_holds(c23):
    sentinel, details = _drift(c23, [0.01, 0.5, 40.0, 3000.0])
    assert sentinel == "BUG_REPRODUCED"
    assert details["drifted_scales"] == [0.1, 10.0, 100.0]
    assert details["uses_identity_norm"] and details["explicit_pre_norm"]


def test_drift_absent_below_threshold(c23):
    # 5 % moves: under the 10 % floor and under 10 x tolerance (0.1)
    sentinel, details = _drift(c23, [0.475, 0.5, 0.52, 0.51])
    assert sentinel == "BUG_ABSENT"
    assert details["threshold"] == pytest.approx(0.1)


def test_threshold_follows_the_prenorm_spread(c23):
    # the RMSNorm host itself moves 3 % (within a loose tolerance): identity needs > 30 % to count
    rms_pn = {0.1: 0.515, 1.0: 0.5, 10.0: 0.5, 100.0: 0.5}
    sentinel, details = _drift(c23, [0.4, 0.5, 0.6, 0.6], rms_pn=rms_pn, tol=0.05)
    assert details["threshold"] == pytest.approx(0.5)
    assert sentinel == "BUG_ABSENT"


def test_prenorm_not_invariant_breaks_the_contract(c23):
    dist = {0.1: 0.002, 1.0: 0.0, 10.0: 0.2, 100.0: 0.002}
    sentinel, details = _drift(c23, [0.01, 0.5, 40.0, 3000.0], dist_pn=dist)
    assert sentinel == "CONTRACT_BROKEN"
    assert any("s=10" in f for f in details["failures"])


def test_non_finite_identity_output_counts_as_drift(c23):
    sentinel, details = _drift(c23, [0.5, 0.5, 0.5, math.nan],
                               finite_id={0.1: True, 1.0: True, 10.0: True, 100.0: False})
    assert sentinel == "BUG_REPRODUCED"
    assert details["drifted_scales"] == [100.0]


@pytest.mark.parametrize("err, finite, negatives, want", [
    (0.001, True, {"identity_host": 50.0, "rmsnorm_without_weight": 0.1}, "CONTRACT_HELD"),
    (0.02, True, {"identity_host": 50.0, "rmsnorm_without_weight": 0.1}, "CONTRACT_BROKEN"),
    (0.001, False, {"identity_host": 50.0, "rmsnorm_without_weight": 0.1}, "CONTRACT_BROKEN"),
    (0.001, True, {"identity_host": 50.0, "rmsnorm_without_weight": 0.003}, "CONTRACT_BROKEN"),  # blind check
])
def test_parity_decision(c23, err, finite, negatives, want):
    sentinel, details = c23.parity_decision(err, finite, c23.tolerance(0.001), negatives)
    assert sentinel == want
    assert details["tolerance"] == pytest.approx(max(4 * 0.001, 2**-8))


def test_tracking_states_the_contract(c23):
    tracking = Tracking.load(ROOT)
    pack = tracking.pack("23")
    assert (pack.kind, pack.target, pack.base, pack.requires) == ("contract", "mamba", "2.3.2.post1", "cuda")
    raw = tomllib.loads(Path(ROOT / pack.declared_in).read_text())
    assert raw["uses_identity_norm"] is True and raw["explicit_pre_norm"] is True
    assert {lane.name: lane.expect for lane in pack.lanes} == {"identity-drift": "BUG_REPRODUCED",
                                                              "prenorm-parity": "CONTRACT_HELD"}
    assert all(not lane.patched for lane in pack.lanes)
    for lane in pack.lanes:  # every lane's args parse, and name a check
        assert c23.parse_args(list(lane.args)).check in ("drift", "parity")
