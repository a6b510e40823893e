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


# ---------------------------------------------------------------------------------------------- the interpreter

def _other_python() -> tuple[str, str] | None:
    """An installed interpreter of another X.Y than this one (PATH or pyenv), if the host has one."""
    from harness.interpreters import find_interpreter

    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for version in ("3.12", "3.11", "3.13", "3.10"):
        if version != here and (exe := find_interpreter(version)):
            return version, exe
    return None


def test_a_wheel_bundle_for_a_python_not_installed_stops_and_says_so(lane_repo, tmp_path, capsys):
    lane_repo.write_manifest(build="wheel")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    out = tmp_path / "dist" / "b.tar.xz"
    code = cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), "--python-version", "3.99", *lane_repo.args())
    assert code == Exit.PIN and not out.exists()
    err = capsys.readouterr().err
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert "the bundle is for Python 3.99" in err and f"is Python {here}" in err and "no python3.99 was found" in err
    assert "fake build(s) wheels" in err
    # overlays do not depend on the interpreter: that bundle is made
    lane_repo.write_manifest(build="overlay")
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), "--python-version", "3.99",
               *lane_repo.args()) == Exit.OK


def test_a_wheel_bundle_is_built_with_an_interpreter_of_its_python(lane_repo, tmp_path, capsys):
    other = _other_python()
    if other is None:
        pytest.skip("needs a second Python X.Y on PATH or under pyenv")
    version, exe = other
    lane_repo.write_manifest(build="wheel")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    out = tmp_path / "dist" / "b.tar.xz"
    code = cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), "--python-version", version,
               *lane_repo.args())
    assert code == Exit.OK, capsys.readouterr().err
    assert f"building with {exe} (Python {version}" in capsys.readouterr().err
    with tarfile.open(out) as tf:
        index = json.load(tf.extractfile("patchlane-bundle/bundle.json"))
    assert index["python"] == version
    tag = "cp" + version.replace(".", "")
    assert all(tag in b["file"] or "py3-none-any" in b["file"] for b in index["builds"].values()), index["builds"]
    # run under this interpreter, the bundle has no build for it: the message names both interpreters
    bundle_dir = unpack(out, tmp_path / "unpacked")
    code = cli("run", "01", "--lane", "bug", "--bundle-dir", str(bundle_dir), *lane_repo.args())
    assert code == Exit.PIN
    err = capsys.readouterr().err
    assert f"made for Python {version}" in err and sys.executable in err and "--python" in err
