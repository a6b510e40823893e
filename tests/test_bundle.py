from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import textwrap

import pytest
from conftest import CORE_BUGGY, CORE_FIXED, cli, make_patch

from harness.errors import BundleError, Exit
from harness.host.unpacked import OpenBundle, unpack
from harness.lane.receipts import find


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
    from harness.base.interpreters import find_interpreter

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


# ---------------------------------------------------------------------------------------------- what is carried

def _wheel_file(path, package: str, version: str, files: dict[str, bytes]) -> None:
    """A minimal wheel of ``package`` holding ``files`` (paths under the package directory)."""
    import zipfile

    info = f"{package}-{version}.dist-info"
    members = {f"{package}/{name}": data for name, data in files.items()}
    members[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode()
    members[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    members[f"{info}/RECORD"] = ("".join(f"{m},,\n" for m in members) + f"{info}/RECORD,,\n").encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


@pytest.fixture
def wheel_helper(lane_repo, tmp_path):
    """Target ``tl``: an overlay build whose one base (0.1) is a published wheel (as tilelang's are); lane ``bug``
    takes it through ``with_builds`` and imports it, and the same wheel sits among the runtime wheels (as
    mamba's base pins tilelang==0.1.8). Returns the wheel."""
    import hashlib
    import textwrap

    whl = tmp_path / "published" / "tlpkg-0.1-py3-none-any.whl"
    whl.parent.mkdir()
    _wheel_file(whl, "tlpkg", "0.1", {"__init__.py": b"VERSION = '0.1'\n", "lib/libtl.so": b"\x7fELF" + b"\0" * 4096})
    (lane_repo.root / "upstream" / "tl.toml").write_text(textwrap.dedent(f'''\
        target = "tl"
        repo = "https://example.invalid/tl"
        distribution = "tlpkg"
        import_names = ["tlpkg"]
        build = "overlay"
        default_base = "0.1"
        [bases."0.1"]
        version = "0.1"
        commit = ""
        runtime_requires = []
        [bases."0.1".artifact]
        kind = "wheel"
        filename = "{whl.name}"
        url = "{whl.as_uri()}"
        sha256 = "{hashlib.sha256(whl.read_bytes()).hexdigest()}"
    '''))
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('patched = false', 'patched = false\nwith_builds = ["tl@0.1"]', 1))
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    repro.write_text("import tlpkg\nassert tlpkg.VERSION == '0.1'\n" + repro.read_text())
    return whl


def _index(out) -> dict:
    with tarfile.open(out) as tf:
        return json.load(tf.extractfile("patchlane-bundle/bundle.json"))


def test_a_published_wheel_build_and_its_runtime_wheel_are_one_member(lane_repo, wheel_helper, tmp_path, capsys):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / wheel_helper.name).write_bytes(wheel_helper.read_bytes())  # the runtime pin of the same wheel
    out = tmp_path / "dist" / "bundle-01.tar.xz"
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), "--json", *lane_repo.args()) == Exit.OK
    report = json.loads(capsys.readouterr().out)
    index = _index(out)
    arc = f"wheels/{wheel_helper.name}"
    [tl] = [b for b in index["builds"].values() if b.get("from_wheel")]
    assert tl["file"] == arc and tl["lanes"] == ["01/bug"]
    with tarfile.open(out) as tf:
        names = [m.name.removeprefix("patchlane-bundle/") for m in tf.getmembers()]
    assert names.count(arc) == 1 and len([n for n in names if n.endswith("site.tar")]) == 2  # fake's two overlays
    assert [w["file"] for w in index["wheels"]] == [arc]
    row = next(r for r in report["members"] if r["file"] == arc)
    assert "as its published wheel" in row["for"] and "runtime wheel" in row["for"]
    assert {r["file"] for r in report["members"]} == set(names) - {"bundle.json"}

    # the GPU host lays the build out from that wheel and the lane imports it
    fresh = tmp_path / "device-cache"
    proc = subprocess.run([sys.executable, "-m", "harness.bootstrap", str(out), "--", "run", "01", "--quiet",
                           "--root", str(lane_repo.root), "--cache", str(fresh)],
                          capture_output=True, text=True, env={**os.environ, "PATCHLANE_HOME": str(fresh)})
    assert proc.returncode == 0, proc.stderr
    bug = next(r for r in find(lane_repo.root, "fake", "01") if r.lane == "bug")
    assert bug.verdict.value == "pass" and bug.extra_builds[0].kind == "overlay" and bug.build.source == "bundle"


def test_a_wheel_that_would_not_give_the_build_is_carried_as_the_build(lane_repo, wheel_helper, tmp_path,
                                                                       monkeypatch, capsys):
    from harness.lane import builds

    real = builds.overlay_from_wheel

    def one_file_more(wheel, manifest, site, label, scratch):
        stubs = real(wheel, manifest, site, label, scratch)
        (site / "tlpkg" / "extra.py").write_text("# not in the cached build\n")
        return stubs

    monkeypatch.setattr(builds, "overlay_from_wheel", one_file_more)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    out = tmp_path / "dist" / "bundle-01.tar.xz"
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), *lane_repo.args()) == Exit.OK
    assert "site/tlpkg/extra.py" in capsys.readouterr().err
    index = _index(out)
    assert not any(b.get("from_wheel") for b in index["builds"].values())
    assert len(index["builds"]) == 3 and all(b["file"].endswith("site.tar") for b in index["builds"].values())


def test_lane_selection_carries_only_what_those_lanes_need(lane_repo, wheel_helper, tmp_path, capsys):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    out = tmp_path / "dist" / "b.tar.xz"
    # fix alone: the sweep runs it with its baseline (bug), which brings tl along
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), "--lane", "01:fix", *lane_repo.args()) == 0
    index = _index(out)
    assert index["lanes"] == {"01": ["bug", "fix"]} and len(index["builds"]) == 3
    # a lane that is no one's baseline, alone: only its build; tl (bug's with_builds) stays out
    tracking = lane_repo.root / "tracking.toml"
    tracking.write_text(tracking.read_text() + textwrap.dedent('''
        [[packs.01.lanes]]
        name = "probe"
        base = "1.0"
        patched = false
        expect = "BUG_REPRODUCED"
        args = ["--probe"]
        timeout = 60
    '''))
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), "--lane", "probe", *lane_repo.args()) == 0
    index = _index(out)
    assert index["lanes"] == {"01": ["probe"]}
    assert [b["lanes"] for b in index["builds"].values()] == [["01/probe"]]
    assert not any(b.get("from_wheel") for b in index["builds"].values())
    capsys.readouterr()
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), "--lane", "nothing-*",
               *lane_repo.args()) == Exit.USAGE
    assert "names no lane" in capsys.readouterr().err


def test_the_carry_estimate_counts_the_checkout_and_warns_past_one_carry(lane_repo, tmp_path, capsys):
    from conftest import git

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    git(lane_repo.root, "init", "-q")
    (lane_repo.root / "big.bin").write_bytes(os.urandom(1000))  # untracked, not ignored: it travels
    (lane_repo.root / ".gitignore").write_text("dist/\nignored.bin\n")
    (lane_repo.root / "ignored.bin").write_bytes(os.urandom(5000))  # ignored: stays
    out = lane_repo.root / "dist" / "b.tar.xz"
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), "--json", *lane_repo.args()) == Exit.OK
    report = json.loads(capsys.readouterr().out)
    tracked = sum(p.stat().st_size for p in lane_repo.root.rglob("*")
                  if p.is_file() and ".git" not in p.relative_to(lane_repo.root).parts
                  and p.name != "ignored.bin" and "dist" not in p.relative_to(lane_repo.root).parts
                  and "__pycache__" not in p.parts)
    assert report["checkout_bytes"] == tracked
    assert report["carry_bytes"] == tracked + out.stat().st_size and report["fits_one_carry"] is True
    (lane_repo.root / "big.bin").write_bytes(os.urandom(65 * 2**20))  # now the checkout alone is over
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), "--json", *lane_repo.args()) == Exit.OK
    captured = capsys.readouterr()
    assert json.loads(captured.out)["fits_one_carry"] is False
    assert "over the 64 MiB one device call carries" in captured.err


def test_two_bundles_on_one_cache_at_once_both_succeed(lane_repo, tmp_path):
    # Two calls shared one scratch directory (bundle-wheels-stored): the second, starting while the first was
    # writing its archive, emptied it and put its own wheels there, and the first, finding the wheels it had
    # yet to add gone, died (exit 70). Here the second starts once the first is writing (its partial archive
    # exists); the first's many incompressible wheels keep it writing for seconds after that.
    import time

    wheels, other = tmp_path / "wheels", tmp_path / "other-wheels"
    wheels.mkdir()
    other.mkdir()
    for n in range(24):
        _wheel_file(wheels / f"pad{n:02d}-1.0-py3-none-any.whl", f"pad{n:02d}", "1.0", {"blob.bin": os.urandom(2**20)})
    _wheel_file(other / "tiny-1.0-py3-none-any.whl", "tiny", "1.0", {"__init__.py": b""})
    assert cli("prepare", "01", *lane_repo.args()) == Exit.OK  # builds cached: both calls go straight to packing
    env = {**os.environ, "PATCHLANE_HOME": str(lane_repo.cache)}
    outs = [tmp_path / "dist" / f"bundle-{n}.tar.xz" for n in (1, 2)]
    outs[0].parent.mkdir(parents=True, exist_ok=True)

    def start(out, deps):
        return subprocess.Popen([sys.executable, "-m", "harness", "bundle", "01", "-o", str(out), "--wheels",
                                 str(deps), "--quiet", *lane_repo.args()], env=env, stderr=subprocess.PIPE, text=True)

    first = start(outs[0], wheels)
    deadline = time.monotonic() + 120
    while not list(outs[0].parent.glob(f"{outs[0].name}.partial*")) and first.poll() is None:
        assert time.monotonic() < deadline, "the first bundle never started writing"
        time.sleep(0.05)
    assert first.poll() is None, "the first bundle ended before the second started: no overlap to test"
    second = start(outs[1], other)
    for proc in (first, second):
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == Exit.OK, err
    assert [len(_index(out)["wheels"]) for out in outs] == [24, 1]
    for out in outs:
        OpenBundle.open(unpack(out, tmp_path / f"unpacked-{out.name}"))  # every member as bundle.json says
    assert not list((lane_repo.cache / "tmp").glob("bundle-*"))  # each call's scratch is gone
    assert not list(outs[0].parent.glob("*.partial*"))


def test_a_killed_bundles_scratch_is_removed_by_the_next(lane_repo, tmp_path):
    # a bundle killed outright (SIGKILL) leaves its scratch directory; the next call removes it, never a live one's
    import signal
    import time

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel_file(wheels / "pad-1.0-py3-none-any.whl", "pad", "1.0", {"blob.bin": os.urandom(8 * 2**20)})
    env = {**os.environ, "PATCHLANE_HOME": str(lane_repo.cache)}
    out = tmp_path / "dist" / "b.tar.xz"
    victim = subprocess.Popen([sys.executable, "-m", "harness", "bundle", "01", "-o", str(out), "--wheels",
                               str(wheels), "--quiet", *lane_repo.args()], env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list((lane_repo.cache / "tmp").glob(f"bundle-{victim.pid}-*/stored/*.whl")):
        assert victim.poll() is None and time.monotonic() < deadline, "the bundle ended before it could be killed"
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    [left] = (lane_repo.cache / "tmp").glob(f"bundle-{victim.pid}-*")
    live = lane_repo.cache / "tmp" / f"bundle-{os.getpid()}-live"  # this test's own process: alive
    live.mkdir()
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), *lane_repo.args()) == Exit.OK
    assert not left.exists() and live.is_dir()


def test_the_sweep_benchmark_runs_from_a_bundle_on_a_bare_host(lane_repo, bundled, tmp_path):
    # what the GPU host runs: bench/sweep.py --bundle, with a store that has nothing but what the bundle brings
    from pathlib import Path

    device = tmp_path / "device-cache"
    lane_repo.sdist.unlink()  # no artefact, no network: only the bundle can provide builds
    kept, out = tmp_path / "kc-sweep", tmp_path / "out"
    bench = Path(__file__).resolve().parent.parent / "bench" / "sweep.py"
    proc = subprocess.run([sys.executable, str(bench), "--lane", "01:bug", "--lane", "01:fix", "--bundle", str(bundled),
                           "--root", str(lane_repo.root), "--sweep-cache", str(kept), "--out-dir", str(out),
                           "--tag", "test"], capture_output=True, text=True,
                          env={**os.environ, "PATCHLANE_HOME": str(device)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [result] = out.glob("*-test-sweep-lanes.json")
    doc = json.loads(result.read_text())
    assert set(doc["arms"]) == {"serial", "sweep-cold", "sweep-warm"}
    assert {(ln["lane"], ln["verdict"]) for ln in doc["arms"]["sweep-warm"]["sweep"]["lanes"]} == {
        ("bug", "pass"), ("fix", "pass")}
    assert list((device / "bundles").iterdir())  # unpacked where harness.bootstrap unpacks it
    assert not (device / "bases").exists()  # every build from the bundle
    assert list(kept.glob("*/kernel-cache.json"))  # the sweep arms' kernel-cache entries stay, to export
    proc = subprocess.run([sys.executable, str(bench), "--lane", "01:bug", "--bundle", str(bundled), "--root",
                           str(lane_repo.root), "--sweep-cache", str(kept), "--out-dir", str(out)],
                          capture_output=True, text=True, env={**os.environ, "PATCHLANE_HOME": str(device)})
    assert proc.returncode == 1 and "not empty" in proc.stderr  # a second run on that cache would not start cold
