"""Contract 22 (vocab-parallel CE): what can be checked without megatron-core or a process group.

The tracking entry and its lanes as the harness reads them, the lane arguments against the
reproducer's own parser, the sentinel pair of the wrong lane and, where torch is installed,
the problem the reproducer builds (balanced padding, partition edges, out-of-partition
targets on every rank). The lanes themselves run through ``harness run 22``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.lane.runs import launch_command
from harness.lane.tracking import Tracking, sentinels

ROOT = Path(__file__).resolve().parent.parent
REPRO = ROOT / "repros" / "contracts" / "contract22_vocab_parallel_ce.py"


@pytest.fixture(scope="module")
def pack():
    return Tracking.load(ROOT).pack("22")


@pytest.fixture(scope="module")
def repro(load_reproducer):
    return load_reproducer(REPRO, "contract22")  # imports only _lane at module level


def test_entry_is_a_megatron_contract_on_the_pin(pack):
    assert pack.kind == "contract" and pack.target == "megatron-lm" and pack.base == "0.19.2"
    assert pack.reproducer == "repros/contracts/contract22_vocab_parallel_ce.py" and REPRO.is_file()
    assert "21" in pack.depends_on
    assert all(lane.base == "0.19.2" and not lane.patched for lane in pack.lanes)


def test_lanes_world_sizes_and_hardware(pack):
    want = {  # name: (nproc, requires)
        "cpu-gloo-tp2": (2, "cpu"), "cpu-gloo-tp4": (4, "cpu"), "wrong-local-norm-cpu": (2, "cpu"),
        "tp2": (2, "cuda"), "tp2-sp": (2, "cuda"), "wrong-local-norm": (2, "cuda"),
        "tp4": (4, "cuda"), "tp4-sp": (4, "cuda"),
    }
    assert {lane.name: (lane.nproc, pack.lane_requires(lane)) for lane in pack.lanes} == want
    for lane in pack.lanes:  # every lane is a torchrun launch
        cmd = launch_command("python3", lane.nproc, REPRO, list(lane.args), Path("rank-lines.lock"))
        assert cmd[1:3] == ["-m", "torch.distributed.run"] and f"--nproc_per_node={lane.nproc}" in cmd


def test_lane_args_parse_and_match_the_lane(pack, repro, monkeypatch):
    for lane in pack.lanes:
        monkeypatch.setattr(sys, "argv", [str(REPRO), *lane.args])
        args = repro.parse_args()
        assert args.device == pack.lane_requires(lane), lane.name
        assert (args.norm == "local") == lane.name.startswith("wrong-local-norm"), lane.name
        assert (args.layout == "sp") == (lane.name.endswith("-sp") or lane.name == "wrong-local-norm"), lane.name
        wrong = args.norm == "local"
        assert lane.expect == ("CONTRACT_VIOLATION_DETECTED" if wrong else "CONTRACT_HELD"), lane.name


def test_wrong_lane_sentinel_has_its_negative_twin():
    vocab = sentinels(ROOT)
    assert "CONTRACT_VIOLATION_DETECTED" in vocab and "CONTRACT_VIOLATION_MISSED" in vocab


@pytest.mark.parametrize("tp", [2, 4])
def test_problem_exercises_every_partition_and_balances_padding(repro, tp):
    torch = pytest.importorskip("torch")
    s, b, h, v = repro.SHAPES["cpu"]
    x, w, t = repro.problem(torch, s, b, h, v, tp)
    assert x.shape == (s, b, h) and w.shape == (v, h) and t.shape == (s, b)
    n_global, n_ignored, per_rank = repro.counts(torch, t, tp, v)
    assert n_ignored > 0 and n_global + n_ignored == s * b
    assert len({p["local_tokens"] for p in per_rank}) == 1  # the wrong lane's factor is exactly tp
    assert n_global / per_rank[0]["local_tokens"] == tp
    for p in per_rank:
        assert p["out_of_partition_targets"] > 0 and p["in_partition_targets"] > 0 and p["edge_targets"] >= 2
    x2, w2, t2 = repro.problem(torch, s, b, h, v, tp)  # same seed, same data on every rank
    assert torch.equal(x, x2) and torch.equal(w, w2) and torch.equal(t, t2)
