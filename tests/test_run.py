from __future__ import annotations

import json

import pytest
from conftest import cli

from harness.receipts import find, verify
from harness.tracking import Tracking


def _run(lane_repo, *extra):
    return cli("run", "01", "--quiet", *lane_repo.args(), *extra)


def test_paired_run_writes_receipts_and_updates_tracking(lane_repo, capsys):
    code = _run(lane_repo)
    assert code == 0, capsys.readouterr()
    recs = find(lane_repo.root, "fake", "01")
    assert sorted(r.data["lane"] for r in recs) == ["bug", "fix"]
    for rec in recs:
        d = rec.data
        assert verify(rec) is None
        assert d["verdict"] == "pass" and d["exit_code"] == 0
        assert d["host"]["target_version"] is None or d["host"]["target_module_file"]
        assert d["host"]["target_module_file"].startswith(str(lane_repo.cache))  # the build, not elsewhere
        assert d["base"]["sha256"] and d["reproducer"]["sha256"]
        assert (rec.dir / "output.log.sha256").read_text().split()[0] == d["log"]["sha256"]
        assert (rec.dir / "output.log").read_text().startswith("HOST_STAMP ")
    fix = next(r for r in recs if r.data["lane"] == "fix")
    assert fix.data["patches"][0]["upstream_status"] == "Submitted"
    assert fix.data["figures"] == [{"name": "max_err", "value": 0.0, "unit": None}]
    bug = next(r for r in recs if r.data["lane"] == "bug")
    assert bug.data["sentinels"] == ["BUG_REPRODUCED"] and bug.data["patches"] == []
    validation = Tracking.load(lane_repo.root).doc["packs"]["01"]["validation"]
    assert validation["fix"]["verdict"] == "pass" and validation["bug"]["seen"] == "BUG_REPRODUCED"
    assert "# a pull request" in (lane_repo.root / "tracking.toml").read_text()


def test_second_run_rebuilds_nothing(lane_repo, capsys):
    assert _run(lane_repo) == 0
    builds = sorted(p.name for p in (lane_repo.cache / "builds").iterdir())
    capsys.readouterr()
    assert _run(lane_repo) == 0
    assert sorted(p.name for p in (lane_repo.cache / "builds").iterdir()) == builds
    assert "cached" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("mode", "code", "verdict"),
    [("crash", 7, "crash"), ("silent", 7, "crash"), ("hang", 8, "timeout")],
)
def test_crash_and_hang_are_never_a_pass(lane_repo, monkeypatch, mode, code, verdict):
    lane_repo.write_tracking(timeout=3)
    monkeypatch.setenv("FAKE_MODE", mode)
    assert _run(lane_repo, "--lane", "bug") == code
    [rec] = find(lane_repo.root, "fake", "01")
    assert rec.data["verdict"] == verdict


def test_wrong_sentinel_is_a_mismatch(lane_repo):
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('expect = "BUG_REPRODUCED"', 'expect = "BUG_ABSENT"'))
    assert _run(lane_repo, "--lane", "bug") == 1
    [rec] = find(lane_repo.root, "fake", "01")
    assert rec.data["verdict"] == "mismatch" and "expected BUG_ABSENT" in rec.data["reason"]


def test_gpu_lane_without_gpu_is_skipped_after_build_and_import_check(lane_repo, monkeypatch, capsys):
    lane_repo.write_tracking(requires="cuda")
    from harness import runs

    monkeypatch.setattr(runs, "cuda_available", lambda python: (False, "no CUDA device visible to torch"))
    assert _run(lane_repo) == 3
    out = capsys.readouterr()
    assert "import check ok" in out.err
    assert "skipped" in out.out and "no receipt yet" in out.out
    assert find(lane_repo.root, "fake", "01") == []


def test_unknown_pack_and_lane_are_one_line_usage_errors(lane_repo, capsys):
    assert cli("run", "42", *lane_repo.args()) == 2
    assert capsys.readouterr().err.strip().startswith("harness: error: no pack '42'")
    assert _run(lane_repo, "--lane", "nope") == 2
    assert "no lane 'nope' (lanes: bug, fix)" in capsys.readouterr().err


def test_receipt_tampering_is_detected(lane_repo, capsys):
    assert _run(lane_repo, "--lane", "bug") == 0
    [rec] = find(lane_repo.root, "fake", "01")
    (rec.dir / "output.log").write_text("edited\n")
    assert cli("receipts", "verify", *lane_repo.args()) == 1
    assert "differs from the receipt" in capsys.readouterr().out
    json.loads((rec.dir / "receipt.json").read_text())


def test_lane_requires_overrides_the_pack(lane_repo, monkeypatch, capsys):
    """A cuda pack may carry a cpu lane: that lane runs, the other is skipped, the worst code wins (3)."""
    lane_repo.write_tracking(requires="cuda")
    path = lane_repo.root / "tracking.toml"
    text = path.read_text()
    i = text.index('name = "bug"')
    path.write_text(text[:i] + 'requires = "cpu"\n' + text[i:])
    from harness import runs

    monkeypatch.setattr(runs, "cuda_available", lambda python: (False, "no CUDA device visible to torch"))
    assert _run(lane_repo) == 3
    [rec] = find(lane_repo.root, "fake", "01")
    assert rec.data["lane"] == "bug" and rec.data["verdict"] == "pass"


def test_bad_lane_requires_and_baseline_on_unpatched_lane_are_config_errors(lane_repo, capsys):
    path = lane_repo.root / "tracking.toml"
    good = path.read_text()
    i = good.index('name = "bug"')
    path.write_text(good[:i] + 'requires = "tpu"\n' + good[i:])
    assert _run(lane_repo) == 2
    assert "key 'requires' is 'tpu'" in capsys.readouterr().err
    path.write_text(good[:i] + "with_baseline = true\n" + good[i:])
    assert _run(lane_repo) == 2
    assert "key 'with_baseline' needs a patched lane" in capsys.readouterr().err


def test_with_baseline_lane_gets_the_unpatched_build(lane_repo):
    path = lane_repo.root / "tracking.toml"
    text = path.read_text()
    i = text.index('name = "fix"')
    path.write_text(text[:i] + "with_baseline = true\n" + text[i:])
    assert _run(lane_repo, "--lane", "fix") == 0
    [rec] = find(lane_repo.root, "fake", "01")
    assert rec.data["baseline_build"]["key"] != rec.data["build"]["key"]
    from harness.tracking import Tracking

    assert Tracking.load(lane_repo.root).pack("01").lane("fix").with_baseline
