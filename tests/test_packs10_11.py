"""Packs 10 and 11 (megatron-lm dev branch): what can be checked without megatron-core or a GPU.

The tracking entries and their lanes as the harness reads them, the lane arguments against each
reproducer's own parser, pack 10's warning check against wrong messages, and, where torch is
installed, the problem the reproducers build and the capability simulation of the CPU lanes.
The lanes themselves run through ``harness run 10`` / ``harness run 11``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.lane.tracking import Tracking

ROOT = Path(__file__).resolve().parent.parent
REPRO10 = ROOT / "repros" / "megatron-lm" / "pack10_flce_unfused_fallback.py"
REPRO11 = ROOT / "repros" / "megatron-lm" / "pack11_hybrid_linear_ce_output_layer.py"


@pytest.fixture(scope="module")
def tracking():
    return Tracking.load(ROOT)


@pytest.fixture(scope="module")
def repro10(load_reproducer):
    return load_reproducer(REPRO10, "pack10")  # imports only _lane at module level


@pytest.fixture(scope="module")
def repro11(load_reproducer):
    return load_reproducer(REPRO11, "pack11")


def test_entries_are_planned_on_the_dev_base(tracking):
    p10, p11 = tracking.pack("10"), tracking.pack("11")
    for pack, repro in ((p10, REPRO10), (p11, REPRO11)):
        assert pack.target == "megatron-lm" and pack.base == "dev" and pack.state == "planned"
        assert pack.blocked is None and pack.reproducer == str(repro.relative_to(ROOT))
        assert all(lane.base == "dev" for lane in pack.lanes)
    assert p10.files == ("megatron/core/fusions/fused_linear_cross_entropy.py",
                         "tests/unit_tests/fusions/test_fused_linear_cross_entropy.py") and p10.depends_on == ()
    assert p11.files == ("megatron/core/models/hybrid/hybrid_model.py",) and p11.depends_on == ("10",)


def test_pack10_lanes(tracking, repro10, monkeypatch):
    pack = tracking.pack("10")
    want = {  # name: (requires, patched, nproc, expect, stage)
        "bug-dev-cpu": ("cpu", False, 1, "BUG_REPRODUCED", "numerics"),
        "fix-dev-cpu": ("cpu", True, 1, "FIX_VALIDATED", "numerics"),
        "fix-dev-cpu-tp2": ("cpu", True, 2, "FIX_VALIDATED", "numerics"),
        "fix-dev-tp2": ("cuda", True, 2, "FIX_VALIDATED", "numerics"),  # NCCL, one GPU per rank (issue 27)
        "bug-dev": ("cuda", False, 1, "BUG_REPRODUCED", "numerics"),
        "fix-dev": ("cuda", True, 1, "FIX_VALIDATED", "numerics"),
        "memory-dev": ("cuda", True, 1, "MEMORY_SAVE_MISSING", "memory"),
    }
    got = {}
    for lane in pack.lanes:
        if lane.upstream_tests or lane.domain:  # run by the kit's runners (upstream tests, domain), not the reproducer
            continue
        monkeypatch.setattr(sys, "argv", [str(REPRO10), *lane.args])
        args = repro10.parse_args()
        assert args.device == pack.lane_requires(lane), lane.name
        got[lane.name] = (pack.lane_requires(lane), lane.patched, lane.nproc, lane.expect, args.stage)
    assert got == want
    tests = {lane.name: (pack.lane_requires(lane), lane.patched, bool(lane.expect_failed))
             for lane in pack.lanes if lane.upstream_tests and not lane.suite}
    assert tests == {"upstream-tests-bug-dev-cpu": ("cpu", False, True),
                     "upstream-tests-fix-dev-cpu": ("cpu", True, False),
                     "upstream-tests-bug-dev": ("cuda", False, True), "upstream-tests-fix-dev": ("cuda", True, False)}


def test_pack11_lanes(tracking, repro11, monkeypatch):
    pack = tracking.pack("11")
    want = {  # name: (requires, patched, expect, layer pattern, extra builds)
        "bug-dev-cpu": ("cpu", False, "BUG_REPRODUCED", None, ()),
        "fix-dev-cpu": ("cpu", True, "FIX_VALIDATED", None, ()),
        "bug-dev": ("cuda", False, "BUG_REPRODUCED", "M*-", (("mamba", "2.3.2.post1"),)),
        "fix-dev": ("cuda", True, "FIX_VALIDATED", "M*-", (("mamba", "2.3.2.post1"),)),
    }
    got = {}
    minimal = {lane.name: (pack.lane_requires(lane), lane.patched, lane.expect) for lane in pack.lanes if lane.minimal}
    assert minimal == {"minimal-bug-dev": ("cuda", False, "BUG_REPRODUCED"),  # the inline script, unchanged
                       "minimal-fix-dev": ("cuda", True, "FIX_VALIDATED")}
    for lane in pack.lanes:
        if lane.minimal or lane.domain:  # the script; the domain kit's runner
            continue
        monkeypatch.setattr(sys, "argv", [str(REPRO11), *lane.args])
        args = repro11.parse_args()
        assert args.device == pack.lane_requires(lane), lane.name
        got[lane.name] = (pack.lane_requires(lane), lane.patched, lane.expect, args.pattern, lane.extra_builds)
    assert got == want


GOOD = ("Fused linear cross entropy has no kernel for compute capability 9.0 (NVIDIA H100 80GB HBM3). Falling back "
        "to the unfused path: the output layer materializes the logits ([tokens, vocab / TP] per rank) and applies "
        "vocab_parallel_cross_entropy to them, so this run does not get the memory saving the fusion exists for.")


def test_warning_check_accepts_the_statement_it_asks_for(repro10, monkeypatch):
    monkeypatch.setattr(repro10, "figure", lambda *a, **k: None)
    failures = []
    repro10.check_warning([GOOD], (9, 0), "NVIDIA H100 80GB HBM3", failures, "run")
    assert failures == []


@pytest.mark.parametrize("messages, missing", [
    ([], "0 fallback warnings"),
    ([GOOD, GOOD], "2 fallback warnings"),  # warned more than once
    ([GOOD.replace("9.0", "9")], "the compute capability"),
    ([GOOD.replace(" (NVIDIA H100 80GB HBM3)", "")], "the device name"),
    ([GOOD.replace("Falling back to", "Using")], "that it falls back"),
    ([GOOD.replace("materializes the logits", "computes the loss")], "materializes the logits"),
])
def test_warning_check_names_what_a_message_lacks(repro10, monkeypatch, messages, missing):
    monkeypatch.setattr(repro10, "figure", lambda *a, **k: None)
    failures = []
    repro10.check_warning(messages, (9, 0), "NVIDIA H100 80GB HBM3", failures, "run")
    assert len(failures) >= 1 and any(missing in f for f in failures), failures


@pytest.mark.parametrize("tp", [1, 2])
def test_pack10_problem_has_ignored_tokens_and_partition_edges(repro10, tp):
    torch = pytest.importorskip("torch")
    s, b, h, v = repro10.SHAPES["cpu"]
    x, w, t, upstream = repro10.problem(torch, s, b, h, v, tp)
    assert x.shape == (s, b, h) and w.shape == (v, h) and t.shape == (s, b) and upstream.shape == (s * b,)
    ignored = int((t == repro10.IGNORE).sum())
    assert 0 < ignored < t.numel()
    part = v // tp
    for r in range(tp):
        assert int((t == r * part).sum()) >= 1 and int((t == (r + 1) * part - 1).sum()) >= 1
    x2, w2, t2, u2 = repro10.problem(torch, s, b, h, v, tp)  # same data on every rank
    assert torch.equal(x, x2) and torch.equal(w, w2) and torch.equal(t, t2) and torch.equal(upstream, u2)


def test_simulated_gpu_reports_the_capability_and_restores_torch(repro10):
    torch = pytest.importorskip("torch")
    before = (torch.cuda.is_available, torch.cuda.get_device_capability)
    with repro10.simulated_gpu(torch, (8, 0), True):
        assert torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (8, 0)
        assert "sm_80" in torch.cuda.get_device_name(0)
    assert (torch.cuda.is_available, torch.cuda.get_device_capability) == before
    with repro10.simulated_gpu(torch, (8, 0), False):  # inactive: torch untouched
        assert (torch.cuda.is_available, torch.cuda.get_device_capability) == before
