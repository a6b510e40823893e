"""The offline bootstrap: one cache location, its exit codes, and reuse of an unpacked bundle."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import REPO, cli
from test_runtime import _wheel

from harness.errors import BundleError, Exit
from harness.host.unpacked import OpenBundle, unpack


@pytest.fixture
def bundled(lane_repo, tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "tinydep", "1.0")  # stands for the harness's dependency wheels
    out = tmp_path / "dist" / "bundle-01.tar.xz"
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), *lane_repo.args()) == Exit.OK
    return out


def bootstrap(archive: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.bootstrap", str(archive), "--", *args],
                          capture_output=True, text=True, env=env, cwd=REPO)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PATCHLANE_HOME", "XDG_CACHE_HOME")}
    return env | extra


def test_bootstrap_imports_with_the_standard_library_only():
    # -S: no site-packages at all, so filelock, rich, tomlkit ... cannot be found
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import harness.bootstrap as b; "
            "print(b.default_root())")
    proc = subprocess.run([sys.executable, "-S", "-c", code, str(REPO)], capture_output=True, text=True,
                          env=_env(XDG_CACHE_HOME="/x/cache"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "/x/cache/patchlane"


def test_bootstrap_uses_the_harness_cache_location_and_reuses_the_unpacked_bundle(lane_repo, bundled, tmp_path):
    xdg = tmp_path / "xdg"
    env = _env(XDG_CACHE_HOME=str(xdg))
    args = ("prepare", "01", "--root", str(lane_repo.root))
    first = bootstrap(bundled, *args, env=env)
    assert first.returncode == 0, first.stderr
    [dest] = (xdg / "patchlane" / "bundles").iterdir()  # the harness's default_root, XDG honoured
    assert "> unpacking" in first.stderr and "installing 1 wheel(s) offline" in first.stderr
    assert (dest / f"site-{sys.implementation.cache_tag}" / "tinydep" / "__init__.py").is_file()
    assert (xdg / "patchlane" / "builds").is_dir()  # the harness it started used the same cache
    again = bootstrap(bundled, *args, env=env)
    assert again.returncode == 0, again.stderr
    assert "> unpacking" not in again.stderr and "installing" not in again.stderr
    # another bundle (other bytes): another directory, unpacked afresh
    other = tmp_path / "other.tar.xz"
    with tarfile.open(bundled) as src, tarfile.open(other, "w:xz") as dst:
        for m in src.getmembers():
            dst.addfile(m, src.extractfile(m) if m.isfile() else None)
        extra = tarfile.TarInfo("patchlane-bundle/NOTE")
        extra.size = 2
        dst.addfile(extra, io.BytesIO(b"hi"))
    third = bootstrap(other, *args, env=env)
    assert third.returncode == 0, third.stderr
    assert "> unpacking" in third.stderr
    assert len(list((xdg / "patchlane" / "bundles").iterdir())) == 2
    assert dest.name in {p.name for p in (xdg / "patchlane" / "bundles").iterdir()}


def test_array_tasks_starting_together_on_one_node_unpack_the_bundle_once(lane_repo, bundled, tmp_path):
    """Slurm array tasks of one sweep arrive at a node at once: the first unpacks and installs under a lock, the
    others wait and find it done (docs/sweep.md, "Slurm")."""
    env = _env(PATCHLANE_HOME=str(tmp_path / "home"))
    procs = [subprocess.Popen([sys.executable, "-m", "harness.bootstrap", str(bundled), "--", "prepare", "01",
                               "--root", str(lane_repo.root)], stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
             for _ in range(4)]
    errs = [p.communicate()[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errs
    said = "".join(errs)
    assert said.count(f"> unpacking {bundled} into") == 1, said
    assert said.count("installing 1 wheel(s) offline") == 1, said


def test_bootstrap_failures_exit_pin(lane_repo, bundled, tmp_path):
    env = _env(PATCHLANE_HOME=str(tmp_path / "home"))
    assert bootstrap(tmp_path / "missing.tar.xz", "list", env=env).returncode == Exit.PIN
    foreign = tmp_path / "foreign.tar.xz"
    with tarfile.open(foreign, "w:xz") as tf:
        info = tarfile.TarInfo("elsewhere/file")
        info.size = 1
        tf.addfile(info, io.BytesIO(b"x"))
    proc = bootstrap(foreign, "list", env=env)
    assert proc.returncode == Exit.PIN and "unexpected member" in proc.stderr
    damaged = tmp_path / "damaged.tar.xz"
    with tarfile.open(bundled) as src, tarfile.open(damaged, "w:xz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None
            if data is not None and m.name.startswith("patchlane-bundle/builds/"):
                data = data[:-1] + bytes([data[-1] ^ 1])
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    proc = bootstrap(damaged, "list", env=env)
    assert proc.returncode == Exit.PIN and "fails its sha256" in proc.stderr
    assert not any((tmp_path / "home" / "bundles").glob("*/.complete"))
    assert bootstrap(bundled, env=env).returncode == Exit.USAGE  # no "--"


def test_open_rehashes_only_files_touched_since_they_matched(bundled, tmp_path, monkeypatch):
    bundle_dir = unpack(bundled, tmp_path / "unpacked")
    OpenBundle.open(bundle_dir)
    memo = json.loads((bundle_dir / ".verified.json").read_text())
    index = json.loads((bundle_dir / "bundle.json").read_text())
    assert sorted(memo) == sorted(e["file"] for e in [*index["builds"].values(), *index["wheels"]])
    assert len(index["wheels"]) == 1
    from harness.base import hashing

    hashed: list[Path] = []
    real = hashing.sha256_file
    monkeypatch.setattr(hashing, "sha256_file", lambda p: hashed.append(Path(p)) or real(p))
    OpenBundle.open(bundle_dir)
    assert hashed == []  # nothing changed: nothing read
    victim = bundle_dir / next(name for name in memo if name.startswith("builds/"))
    st = victim.stat()
    data = victim.read_bytes()
    victim.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # same size ...
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and mtime put back: ctime still moves
    with pytest.raises(BundleError, match="does not match its sha256"):
        OpenBundle.open(bundle_dir)
    assert hashed == [victim]
    victim.write_bytes(data)
    OpenBundle.open(bundle_dir)  # repaired: hashed again, accepted, remembered
    hashed.clear()
    OpenBundle.open(bundle_dir)
    assert hashed == []


def test_bootstrap_installs_only_the_harness_wheels_not_a_base_runtime_pin(tmp_path, monkeypatch):
    """A base may pin a distribution the harness's lock pins at another version (mamba's packaging 26.0 beside
    the lock's 26.3): one pip run over both fails (ResolutionImpossible). The harness's site gets the lock's
    wheels only; runtime wheels stay for the lanes' runtime sites."""
    from harness import bootstrap as bs

    bundle_dir = tmp_path / "patchlane-bundle"
    (bundle_dir / "wheels").mkdir(parents=True)
    files = ["wheels/packaging-26.3-py3-none-any.whl", "wheels/packaging-26.0-py3-none-any.whl",
             "wheels/tomlkit-0.15.2-py3-none-any.whl"]
    index = {"wheels": [{"file": f, "sha256": "0" * 64} for f in files],
             "harness_wheels": [files[0], files[2]]}
    (bundle_dir / "bundle.json").write_text(json.dumps(index))
    seen: list[list[str]] = []
    monkeypatch.setattr(bs.subprocess, "run", lambda cmd, check: seen.append(cmd))
    bs.install_site(bundle_dir, tmp_path / "site")
    installed = [Path(a).name for a in seen[0] if a.endswith(".whl")]
    assert installed == ["packaging-26.3-py3-none-any.whl", "tomlkit-0.15.2-py3-none-any.whl"]


@pytest.mark.network
def test_a_real_bundle_lists_the_lock_as_its_harness_wheels(tmp_path):
    from harness.host import wheels as host_wheels
    wheels = host_wheels.download_wheels([["packaging==26.0"]], tmp_path / "w", "3.12", REPO / host_wheels.LOCK_FILE)
    harness_side = {w.name for w in wheels if w.parent.name == host_wheels.HARNESS_WHEELS}
    runtime_side = {w.name for w in wheels if w.parent.name != host_wheels.HARNESS_WHEELS}
    assert "packaging-26.0-py3-none-any.whl" in runtime_side
    assert any(n.startswith("packaging-26.3") for n in harness_side)
