"""The reproducer kit (repros/_lane.py, _numerics.py, _timing.py) on its own, without torch.

Which build a process holds comes from HARNESS_PATCHED ("1"/"0") or --patched/--unpatched, never
from a lane name; observed() turns "the bug shows" into the sentinel of that build; a tolerance
comes from a control and refuses a broken one; compare() times callables interleaved and gives
ratios to a reference, saying so when it could not measure kernel time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REPROS = ROOT / "repros"


@pytest.fixture(scope="module")
def lane(load_reproducer):
    return load_reproducer(REPROS / "_lane.py", "kit_lane")


@pytest.fixture(scope="module")
def numerics(load_reproducer):
    return load_reproducer(REPROS / "_numerics.py", "kit_numerics")


@pytest.fixture(scope="module")
def timing(load_reproducer):
    return load_reproducer(REPROS / "_timing.py", "kit_timing")


@pytest.fixture
def env(monkeypatch):
    """A process environment with neither HARNESS_PATCHED nor HARNESS_LANE set."""
    monkeypatch.delenv("HARNESS_PATCHED", raising=False)
    monkeypatch.delenv("HARNESS_LANE", raising=False)
    return monkeypatch


def lines(out: str) -> dict[str, dict]:
    """The protocol lines of captured stdout, by tag."""
    found = {}
    for line in out.splitlines():
        tag, _, payload = line.partition(" ")
        found[tag] = json.loads(payload)
    return found


# ------------------------------------------------------------------------------------------ patched()

def test_patched_reads_one_and_zero(lane, env):
    env.setenv("HARNESS_PATCHED", "1")
    assert lane.patched() is True
    env.setenv("HARNESS_PATCHED", "0")
    assert lane.patched() is False


@pytest.mark.parametrize("value", [None, "", "true", "yes", "2", " 1"])
def test_patched_refuses_anything_else(lane, env, value):
    if value is not None:
        env.setenv("HARNESS_PATCHED", value)
    with pytest.raises(SystemExit) as exc:
        lane.patched()
    assert "HARNESS_PATCHED" in str(exc.value) and "--patched" in str(exc.value)


def test_patched_ignores_the_lane_name(lane, env):
    env.setenv("HARNESS_LANE", "fix-0.19.2")  # a name that looks patched decides nothing
    with pytest.raises(SystemExit):
        lane.patched()
    env.setenv("HARNESS_PATCHED", "0")
    assert lane.patched() is False


# ------------------------------------------------------------------------------------------ start()

def start(lane, capsys, argv):
    args = lane.parser("Kit test.\n\nMore text.").parse_args(argv)
    lane.start(args, "no-such-distribution-for-the-kit-test", "json")
    return lines(capsys.readouterr().out)


def test_start_applies_lane_and_patched(lane, env, capsys):
    import os

    got = start(lane, capsys, ["--lane", "some-label", "--patched"])
    assert os.environ["HARNESS_LANE"] == "some-label" and os.environ["HARNESS_PATCHED"] == "1"
    stamp = got["HOST_STAMP"]
    assert stamp["lane"] == "some-label" and stamp["patched"] == "1"
    assert stamp["target_version"] is None and stamp["target_module_file"].endswith("json/__init__.py")
    assert lane.patched() is True and lane.lane() == "some-label"


def test_start_unpatched_overrides_the_environment(lane, env, capsys):
    env.setenv("HARNESS_PATCHED", "1")
    got = start(lane, capsys, ["--unpatched"])
    assert got["HOST_STAMP"]["patched"] == "0" and lane.patched() is False
    assert lane.lane() == "manual"  # no --lane, no HARNESS_LANE


def test_start_without_flags_leaves_the_environment(lane, env, capsys):
    env.setenv("HARNESS_PATCHED", "0")
    env.setenv("HARNESS_LANE", "from-the-harness")
    got = start(lane, capsys, [])
    assert got["HOST_STAMP"]["patched"] == "0" and got["HOST_STAMP"]["lane"] == "from-the-harness"


def test_parser_patched_and_unpatched_exclude_each_other(lane):
    with pytest.raises(SystemExit) as exc:
        lane.parser(None).parse_args(["--patched", "--unpatched"])
    assert exc.value.code == 2


def test_parser_takes_the_first_doc_line(lane):
    assert lane.parser("Pack 99: one line.\n\nDetails.").description == "Pack 99: one line."
    assert lane.parser(None).description is None


# ------------------------------------------------------------------------------------------ observed()

@pytest.mark.parametrize(("patched", "bad", "sentinel"), [
    ("0", True, "BUG_REPRODUCED"),
    ("0", False, "BUG_ABSENT"),
    ("1", True, "FIX_FAILED"),
    ("1", False, "FIX_VALIDATED"),
])
def test_observed_picks_the_sentinel_of_the_build(lane, env, capsys, patched, bad, sentinel):
    env.setenv("HARNESS_PATCHED", patched)
    assert lane.observed(bad, note="x", n=3) == sentinel
    got = lines(capsys.readouterr().out)
    assert list(got) == [sentinel] and got[sentinel] == {"note": "x", "n": 3}


def test_observed_needs_to_know_the_build(lane, env, capsys):
    with pytest.raises(SystemExit):
        lane.observed(True)
    assert capsys.readouterr().out == ""  # no sentinel printed on a guess


# ------------------------------------------------------------------------------------------ _numerics

def test_tolerance_from_a_control(numerics):
    assert numerics.tolerance(0.01, 0.001) == pytest.approx(numerics.K_NOISE * 0.01)
    assert numerics.tolerance(0.0, numerics.BF16_FLOOR) == numerics.BF16_FLOOR  # a lucky control never asks for 0
    assert numerics.tolerance(0.01, 0.0, k=2.0) == pytest.approx(0.02)


@pytest.mark.parametrize("control", [float("nan"), -1e-6])
def test_tolerance_refuses_a_broken_control(numerics, control):
    with pytest.raises(ValueError, match="control error"):
        numerics.tolerance(control, numerics.BF16_FLOOR)


def test_rel_fro_and_max_abs(numerics):
    torch = pytest.importorskip("torch")
    ref = torch.tensor([3.0, 4.0])
    got = torch.tensor([3.0, 4.5], dtype=torch.bfloat16)
    assert numerics.rel_fro(got, ref) == pytest.approx(0.5 / 5.0)
    assert numerics.max_abs(got, ref) == pytest.approx(0.5)
    assert numerics.rel_fro(torch.zeros(2), torch.zeros(2)) == 0.0  # zero reference: no division by zero


# ------------------------------------------------------------------------------------------ _timing.compare

def test_compare_interleaves_and_gives_wall_ratios(timing):
    calls: list[str] = []

    def fast():
        calls.append("fast")
        return sum(range(10))

    def slow():
        calls.append("slow")
        return sum(range(20000))

    t = timing.compare({"fast": fast, "slow": slow}, reference="fast", warmup=2, repeat=6, profile_repeat=2)
    assert set(t) == {"fast", "slow"}
    assert calls[:4] == ["fast", "slow", "fast", "slow"]  # interleaved, warm-up included
    assert calls.count("fast") == calls.count("slow") >= 8
    for name, r in t.items():
        assert r["repeat"] == 6 and r["warmup"] == 2 and r["wall_ms"] > 0
        assert r["kernel_ms"] is None and r["host_bound"] is None and r["note"], name  # said, not zeroed
        assert r["ratio_to_fast"] is None
    assert t["fast"]["wall_ratio_to_fast"] == 1.0
    assert t["slow"]["wall_ratio_to_fast"] == pytest.approx(t["slow"]["wall_ms"] / t["fast"]["wall_ms"])
    assert t["slow"]["wall_ratio_to_fast"] > 1.0


def test_compare_without_reference_has_no_ratios(timing):
    t = timing.compare({"a": lambda: None}, warmup=0, repeat=2, profile_repeat=1)
    assert not any(k.startswith(("ratio_to_", "wall_ratio_to_")) for k in t["a"])


def test_compare_rejects_an_unknown_reference_and_nothing(timing):
    with pytest.raises(ValueError, match="reference 'c'"):
        timing.compare({"a": lambda: None, "b": lambda: None}, reference="c")
    with pytest.raises(ValueError, match="nothing to time"):
        timing.compare({})
