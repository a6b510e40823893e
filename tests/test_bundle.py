from __future__ import annotations

import json
import subprocess
import sys
import tarfile

import pytest
from conftest import CORE_BUGGY, CORE_FIXED, cli, make_patch

from harness.bundle import OpenBundle, unpack
from harness.errors import BundleError, Exit
from harness.receipts import find


@pytest.fixture
def bundled(lane_repo, tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    out = tmp_path / "dist" / "bundle-01.tar.xz"
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), *lane_repo.args()) == Exit.OK
    return out


def test_bundle_holds_both_builds_with_hashes(bundled, tmp_path):
    with tarfile.open(bundled) as tf:
        index = json.load(tf.extractfile("patchlane-bundle/bundle.json"))
    assert index["packs"] == ["01"]
    assert sorted(lane for b in index["builds"].values() for lane in b["lanes"]) == ["01/bug", "01/fix"]
    assert all(len(b["sha256"]) == 64 for b in index["builds"].values())


def test_run_from_bundle_uses_only_the_bundle(lane_repo, bundled, tmp_path, monkeypatch):
    fresh_cache = tmp_path / "device-cache"
    monkeypatch.setenv("PATCHLANE_HOME", str(fresh_cache))
    lane_repo.sdist.unlink()  # no artefact, no network: only the bundle can provide builds
    proc = subprocess.run(
        [sys.executable, "-m", "harness.bootstrap", str(bundled), "--", "run", "01", "--quiet",
         "--root", str(lane_repo.root), "--cache", str(fresh_cache)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr
    recs = find(lane_repo.root, "fake", "01")
    assert sorted(r.lane for r in recs) == ["bug", "fix"]
    assert {r.build.source for r in recs} == {"bundle"}
    assert not (fresh_cache / "bases").exists()


def test_changed_series_is_not_in_the_bundle(lane_repo, bundled, tmp_path):
    lane_repo.write_patch(make_patch(tmp_path, CORE_BUGGY, CORE_FIXED.replace("weight", "own weight")))
    bundle_dir = unpack(bundled, tmp_path / "unpacked")
    code = cli("run", "01", "--lane", "fix", "--bundle-dir", str(bundle_dir), *lane_repo.args())
    assert code == 4


def test_tampered_bundle_member_is_rejected(bundled, tmp_path):
    bundle_dir = unpack(bundled, tmp_path / "unpacked")
    victim = next(bundle_dir.glob("builds/*/*"))
    victim.write_bytes(victim.read_bytes() + b"x")
    with pytest.raises(BundleError, match="does not match its sha256"):
        OpenBundle.open(bundle_dir)


def test_bundle_base_filter_keeps_only_those_lanes(lane_repo, tmp_path, capsys):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    out = tmp_path / "dist" / "bundle-01-base.tar.xz"
    assert cli("bundle", "01", "--base", "1.0", "-o", str(out), "--wheels", str(wheels), *lane_repo.args()) == Exit.OK
    with tarfile.open(out) as tf:
        index = json.load(tf.extractfile("patchlane-bundle/bundle.json"))
    assert sorted(lane for b in index["builds"].values() for lane in b["lanes"]) == ["01/bug", "01/fix"]
    capsys.readouterr()
    assert cli("bundle", "01", "--base", "2.0", "-o", str(out), "--wheels", str(wheels), *lane_repo.args()) == Exit.PIN
    assert "pack 01 has no lane on base(s) 2.0" in capsys.readouterr().err
