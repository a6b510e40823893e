"""Kernel-compile caches kept per key in the store (issue 28, part 2).

The fake reproducer "compiles" like Triton does: it looks for its kernel in ``$TRITON_CACHE_DIR`` and writes
it when it is not there, reporting what it found as a figure. Faults are injected for real: a fake
``nvidia-smi`` and fake compiler dist-info on the paths, files of an entry edited, truncated or removed, a
harness killed with SIGKILL mid-lane, a lane killed at its time limit, two harnesses at once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest
from conftest import REPO, cli

from harness.base.hashing import SEAL
from harness.errors import ConfigError, Exit
from harness.lane import kernel_cache, kernel_key
from harness.lane.receipts import Receipt, find, verify

COMPILE = textwrap.dedent('''\
    import os, pathlib, time
    kernel = pathlib.Path(os.environ["TRITON_CACHE_DIR"]) / "0123abcd" / "kernel.cubin"
    cached = kernel.is_file()
    if not cached:
        kernel.parent.mkdir(parents=True, exist_ok=True)
        kernel.write_bytes(b"\\x7fELF fake cubin " * 64)
    _lane.figure("kernel_cached", int(cached))
    index = pathlib.Path(os.environ["CUDA_CACHE_PATH"]) / "index"  # changed in place on every run, like the JIT's
    index.write_text(str(int(index.read_text()) + 1) if index.is_file() else "1")
    if os.environ.get("FAKE_MODE") == "compile-hang":
        triton = pathlib.Path(os.environ["TRITON_CACHE_DIR"])
        (triton / "4567cdef").mkdir(exist_ok=True)  # a second kernel, written whole as Triton writes (renamed in)
        (triton / "4567cdef" / "kernel.cubin.part").write_bytes(b"\x7fELF second " * 64)
        os.replace(triton / "4567cdef" / "kernel.cubin.part", triton / "4567cdef" / "kernel.cubin")
        (triton / "tmp.pid_77_0").mkdir(exist_ok=True)  # Triton's scratch of a write in flight
        (triton / "tmp.pid_77_0" / "kernel.ptx").write_text("half")
        ext = pathlib.Path(os.environ["TORCH_EXTENSIONS_DIR"], "ext")  # a torch extension mid-link (in place)
        ext.mkdir(parents=True, exist_ok=True)
        (ext / "ext.so").write_bytes(b"half")
        pathlib.Path(os.environ["TRITON_CACHE_DIR"], "0123abcd", "half.so").write_bytes(b"half")
        print("COMPILED-SO-FAR", flush=True)
        time.sleep(60)
''')


@pytest.fixture
def kc_repo(lane_repo, monkeypatch):
    """``lane_repo`` whose reproducer compiles a kernel into Triton's cache (or finds it there)."""
    path = lane_repo.root / "repros" / "fake" / "pack01.py"
    text = path.read_text()
    marker = '_lane.stamp("fakepkg", "fakepkg.core")\n'
    path.write_text(text.replace(marker, marker + COMPILE))
    monkeypatch.delenv(kernel_cache.ROOT_ENV, raising=False)
    monkeypatch.delenv("FAKE_MODE", raising=False)
    kernel_key._interpreters.clear()  # the faked compiler versions below change between runs of one process
    return lane_repo


def _run(repo, *extra) -> int:
    return cli("run", "01", "--quiet", *repo.args(), *extra)


def _latest(repo, lane: str) -> Receipt:
    return max((r for r in find(repo.root, "fake", "01") if r.lane == lane), key=lambda r: r.path.parent.name)


def _receipts(repo, lane: str) -> list[Receipt]:
    return sorted((r for r in find(repo.root, "fake", "01") if r.lane == lane), key=lambda r: r.path.parent.name)


def _figure(rec: Receipt, name: str):
    return next(f.value for f in rec.figures if f.name == name)


def _entry(repo, rec: Receipt) -> Path:
    assert rec.kernel_cache is not None
    return repo.cache / "kernel-cache" / rec.kernel_cache.key[:20]


def _ls(repo) -> list[dict]:
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert cli("cache", "ls", "--json", *repo.args()) == Exit.OK
    return json.loads(buf.getvalue())


def _runs_twice(repo, lane="bug") -> tuple[Receipt, Receipt]:
    assert _run(repo, "--lane", lane) == Exit.OK
    time.sleep(1.1)  # receipt directories are named by the second
    assert _run(repo, "--lane", lane) == Exit.OK
    first, second = _receipts(repo, lane)[-2:]
    return first, second


def test_a_second_run_of_an_unchanged_build_finds_its_kernels(kc_repo, capsys):
    first, second = _runs_twice(kc_repo)
    assert first.kernel_cache.to_dict() == {"key": first.kernel_cache.key, "mode": "store", "warm": False,
                                            "files": 0}
    assert (second.kernel_cache.mode, second.kernel_cache.warm, second.kernel_cache.files) == ("store", True, 2)
    assert second.kernel_cache.key == first.kernel_cache.key
    assert (_figure(first, "kernel_cached"), _figure(second, "kernel_cached")) == (0, 1)
    assert verify(first) is None and verify(second) is None
    assert "kernel_cache" in json.loads(second.path.read_text())
    sealed = json.loads((_entry(kc_repo, second) / SEAL).read_text())
    assert sorted(sealed) == ["cuda-jit/index", "kernel-cache.json", "triton/0123abcd/kernel.cubin"]
    [listed] = _ls(kc_repo)
    assert listed["key"] == first.kernel_cache.key and listed["files"] == 2
    assert listed["facts"]["gpu"] is None  # this host has no NVIDIA GPU: the key says so
    assert listed["facts"]["builds"] == [first.build.key]
    time.sleep(1.1)
    capsys.readouterr()
    assert _run(kc_repo, "--lane", "bug") == Exit.OK  # a file the libraries change in place was sealed anew
    assert "discarding" not in capsys.readouterr().err
    assert _latest(kc_repo, "bug").kernel_cache.warm


def test_the_child_gets_every_cache_directory_inside_the_entry(kc_repo):
    path = kc_repo.root / "repros" / "fake" / "pack01.py"
    names = sorted(kernel_cache.DIRS)
    path.write_text(path.read_text().replace(
        "_lane.figure(\"kernel_cached\"", f"_lane.figure('dirs', {{n: os.environ[n] for n in {names!r}}})\n"
                                          "_lane.figure(\"kernel_cached\""))
    assert _run(kc_repo, "--lane", "bug") == Exit.OK
    rec = _latest(kc_repo, "bug")
    entry = _entry(kc_repo, rec)
    assert _figure(rec, "dirs") == {var: str(entry / sub) for var, sub in kernel_cache.DIRS.items()}


def test_each_build_has_its_own_entry(kc_repo):
    assert _run(kc_repo) == Exit.OK
    bug, fix = _latest(kc_repo, "bug"), _latest(kc_repo, "fix")
    assert bug.build.key != fix.build.key and bug.kernel_cache.key != fix.kernel_cache.key
    assert not bug.kernel_cache.warm and not fix.kernel_cache.warm  # the patched build never reuses the base's
    assert len(_ls(kc_repo)) == 2


def _fake_triton(site: Path, version: str) -> None:
    for old in site.glob("triton-*.dist-info"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    info = site / f"triton-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: triton\nVersion: {version}\n")


def test_another_compiler_version_gets_another_entry(kc_repo, monkeypatch, tmp_path):
    site = tmp_path / "site"
    _fake_triton(site, "3.1.0")
    monkeypatch.setenv("PYTHONPATH", str(site))
    first, again = _runs_twice(kc_repo)
    assert again.kernel_cache.warm and again.kernel_cache.key == first.kernel_cache.key
    _fake_triton(site, "3.2.0")
    kernel_key._interpreters.clear()  # a new process would ask again; this one remembers per paths
    time.sleep(1.1)
    assert _run(kc_repo, "--lane", "bug") == Exit.OK
    upgraded = _latest(kc_repo, "bug")
    assert upgraded.kernel_cache.key != first.kernel_cache.key and not upgraded.kernel_cache.warm
    assert _figure(upgraded, "kernel_cached") == 0
    versions = sorted(e["facts"]["interpreter"]["dists"]["triton"] for e in _ls(kc_repo))
    assert versions == ["3.1.0", "3.2.0"]


def _fake_smi(bin_dir: Path, line: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho '{line}'\n")
    smi.chmod(0o755)


def test_another_driver_or_gpu_gets_another_entry(kc_repo, monkeypatch, tmp_path):
    bin_dir = tmp_path / "bin"
    _fake_smi(bin_dir, "NVIDIA H100 80GB HBM3, 9.0, 550.54.15")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    first, again = _runs_twice(kc_repo)
    assert again.kernel_cache.warm and again.kernel_cache.key == first.kernel_cache.key
    keys = {first.kernel_cache.key}
    for line in ("NVIDIA H100 80GB HBM3, 9.0, 560.35.03.1", "NVIDIA H200, 9.0, 560.35.03.1"):
        time.sleep(1.1)
        _fake_smi(bin_dir, line)
        assert _run(kc_repo, "--lane", "bug") == Exit.OK
        rec = _latest(kc_repo, "bug")
        assert rec.kernel_cache.key not in keys and not rec.kernel_cache.warm
        keys.add(rec.kernel_cache.key)
    gpus = sorted((e["facts"]["gpu"]["driver"], e["facts"]["gpu"]["devices"][0][0]) for e in _ls(kc_repo))
    assert gpus == [("550.54.15", "NVIDIA H100 80GB HBM3"), ("560.35.03.1", "NVIDIA H100 80GB HBM3"),
                    ("560.35.03.1", "NVIDIA H200")]


def test_off_gives_every_lane_an_empty_throwaway_cache(kc_repo, monkeypatch):
    monkeypatch.setenv(kernel_cache.ROOT_ENV, "off")
    first, second = _runs_twice(kc_repo)
    for rec in (first, second):
        assert (rec.kernel_cache.mode, rec.kernel_cache.warm, rec.kernel_cache.files) == ("off", False, 0)
        assert _figure(rec, "kernel_cached") == 0
    assert first.kernel_cache.key == second.kernel_cache.key  # the key is still said
    assert not (kc_repo.cache / "kernel-cache").exists()
    import tempfile

    assert not list(Path(tempfile.gettempdir()).glob(f"patchlane-run-{os.getpid()}-kcache-*"))


def test_the_root_can_be_moved(kc_repo, monkeypatch, tmp_path):
    monkeypatch.setenv(kernel_cache.ROOT_ENV, str(tmp_path / "kernels"))
    assert _run(kc_repo, "--lane", "bug") == Exit.OK
    rec = _latest(kc_repo, "bug")
    assert (tmp_path / "kernels" / rec.kernel_cache.key[:20] / "triton" / "0123abcd" / "kernel.cubin").is_file()


def test_a_root_that_cannot_be_written_is_exit_io(kc_repo, monkeypatch, capsys):
    monkeypatch.setenv(kernel_cache.ROOT_ENV, "/dev/null/kernels")
    assert _run(kc_repo, "--lane", "bug") == Exit.IO
    assert "/dev/null/kernels" in capsys.readouterr().err
    assert find(kc_repo.root, "fake", "01") == []


@pytest.mark.parametrize("fault", ["edit", "truncate", "remove", "metadata"])
def test_a_tampered_entry_is_found_by_verify_and_removed(kc_repo, capsys, fault):
    assert _run(kc_repo, "--lane", "bug") == Exit.OK
    entry = _entry(kc_repo, _latest(kc_repo, "bug"))
    victim = entry / ("kernel-cache.json" if fault == "metadata" else "triton/0123abcd/kernel.cubin")
    if fault == "edit":
        victim.write_bytes(victim.read_bytes().replace(b"fake", b"evil"))
    elif fault == "truncate":
        with open(victim, "r+b") as fh:
            fh.truncate(10)
    elif fault == "remove":
        victim.unlink()
    else:
        victim.write_text(victim.read_text().replace('"version": "1"', '"version": "0"'))
    capsys.readouterr()
    assert cli("cache", "verify", "--json", *kc_repo.args()) == Exit.TAMPERED
    [report] = json.loads(capsys.readouterr().out)
    assert report["removed"] and report["problems"] and not entry.exists()
    assert cli("cache", "verify", *kc_repo.args()) == Exit.OK  # nothing bad is left


def test_a_lane_discards_a_tampered_entry_and_compiles_again(kc_repo, capsys):
    assert _run(kc_repo, "--lane", "bug") == Exit.OK
    entry = _entry(kc_repo, _latest(kc_repo, "bug"))
    with open(entry / "triton" / "0123abcd" / "kernel.cubin", "r+b") as fh:
        fh.truncate(3)
    capsys.readouterr()
    time.sleep(1.1)
    assert _run(kc_repo, "--lane", "bug") == Exit.OK
    err = capsys.readouterr().err
    assert "not as it was sealed (triton/0123abcd/kernel.cubin: missing or not as sealed); discarding it" in err
    rec = _latest(kc_repo, "bug")
    assert (rec.kernel_cache.warm, _figure(rec, "kernel_cached")) == (False, 0)
    assert kernel_cache.damage(entry) == []  # made again, and sealed with the new kernel


def test_a_damaged_entry_another_lane_uses_is_left_alone(kc_repo, capsys):
    from harness.base.store import Store

    assert _run(kc_repo, "--lane", "bug") == Exit.OK
    first = _latest(kc_repo, "bug")
    entry = _entry(kc_repo, first)
    facts = kernel_key.Facts.from_dict(json.loads((entry / "kernel-cache.json").read_text())["facts"])
    with kernel_cache.lane(Store(kc_repo.cache), facts, "patchlane-test-") as other:  # a lane running meanwhile
        assert other.mode == "store" and other.warm
        (entry / "triton" / "0123abcd" / "kernel.cubin").write_bytes(b"changed")
        time.sleep(1.1)
        capsys.readouterr()
        assert _run(kc_repo, "--lane", "bug") == Exit.OK
        assert "another lane uses it; this lane gets an empty throwaway cache" in capsys.readouterr().err
        rec = _latest(kc_repo, "bug")
        assert (rec.kernel_cache.mode, rec.kernel_cache.warm) == ("throwaway", False)
        assert entry.is_dir()  # not removed under the other lane
        assert cli("cache", "verify", *kc_repo.args()) == Exit.TAMPERED  # reported, kept: in use
        assert entry.is_dir()
        other.seal()  # the other lane ends: it must not bless the changed file
    assert cli("cache", "verify", *kc_repo.args()) == Exit.TAMPERED  # now no one uses it: removed
    assert not entry.exists()


def test_files_a_lane_running_beside_it_writes_are_never_removed(kc_repo):
    from harness.base.store import Store

    assert _run(kc_repo, "--lane", "bug") == Exit.OK
    entry = _entry(kc_repo, _latest(kc_repo, "bug"))
    facts = kernel_key.Facts.from_dict(json.loads((entry / "kernel-cache.json").read_text())["facts"])
    with kernel_cache.lane(Store(kc_repo.cache), facts, "patchlane-test-") as other:
        fresh = other.path / "triton" / "feedbeef" / "other.cubin"
        fresh.parent.mkdir(parents=True)
        fresh.write_bytes(b"compiled by the other lane")
        time.sleep(1.1)
        assert _run(kc_repo, "--lane", "bug") == Exit.OK
        assert cli("cache", "verify", *kc_repo.args()) == Exit.OK
        assert fresh.is_file()
        other.seal()
    assert "triton/feedbeef/other.cubin" in json.loads((entry / SEAL).read_text())


def test_unsealed_files_a_lane_left_are_removed_before_the_next_uses_the_entry(kc_repo, capsys):
    assert _run(kc_repo, "--lane", "bug") == Exit.OK
    entry = _entry(kc_repo, _latest(kc_repo, "bug"))
    left = entry / "torch-extensions" / "ext" / "ext.so"
    left.parent.mkdir(parents=True)
    left.write_bytes(b"half a shared object")
    (left.parent / "lock").write_text("")  # torch's build baton: left, it would make the next build wait forever
    capsys.readouterr()
    time.sleep(1.1)
    assert cli("run", "01", "--lane", "bug", *kc_repo.args()) == Exit.OK
    assert "removed 1 unsealed file(s) a lane that did not finish left (torch-extensions/ext/ext.so)" in (
        capsys.readouterr().err)
    assert not left.exists() and not (left.parent / "lock").exists()
    assert _latest(kc_repo, "bug").kernel_cache.warm


WHOLE = ["triton/0123abcd/half.so", "triton/0123abcd/kernel.cubin", "triton/4567cdef/kernel.cubin"]


def test_a_lane_killed_at_its_time_limit_keeps_only_the_kernels_written_whole(kc_repo, monkeypatch, capsys):
    kc_repo.write_tracking(timeout=4)
    monkeypatch.setenv("FAKE_MODE", "compile-hang")
    assert _run(kc_repo, "--lane", "bug") == Exit.TIMEOUT
    rec = _latest(kc_repo, "bug")
    entry = _entry(kc_repo, rec)
    # Triton's files (written whole) are sealed; its scratch, the half extension and the JIT index are not
    assert sorted(json.loads((entry / SEAL).read_text())) == ["kernel-cache.json", *WHOLE]
    assert not list((entry / ".users").iterdir())  # the harness lived: it said it is done
    assert kernel_cache.damage(entry) == []
    monkeypatch.delenv("FAKE_MODE")
    capsys.readouterr()
    time.sleep(1.1)
    assert cli("run", "01", "--lane", "bug", *kc_repo.args()) == Exit.OK
    err = capsys.readouterr().err
    assert "removed 2 unsealed file(s) a lane that did not finish left" in err
    rec = _latest(kc_repo, "bug")
    assert rec.kernel_cache.warm and _figure(rec, "kernel_cached") == 1  # the long compile is not lost
    assert not (entry / "torch-extensions" / "ext" / "ext.so").exists()
    assert not (entry / "triton" / "tmp.pid_77_0").exists()


def test_a_killed_lane_leaves_a_sealed_file_it_changed_in_place_unsealed(kc_repo, monkeypatch, capsys):
    assert _run(kc_repo, "--lane", "bug") == Exit.OK  # seals cuda-jit/index = "1"
    entry = _entry(kc_repo, _latest(kc_repo, "bug"))
    assert "cuda-jit/index" in json.loads((entry / SEAL).read_text())
    kc_repo.write_tracking(timeout=4)
    monkeypatch.setenv("FAKE_MODE", "compile-hang")  # rewrites the index in place, then is killed
    time.sleep(1.1)
    assert _run(kc_repo, "--lane", "bug") == Exit.TIMEOUT
    seal = json.loads((entry / SEAL).read_text())
    assert "cuda-jit/index" not in seal and set(WHOLE) <= set(seal)
    assert kernel_cache.damage(entry) == []  # the entry stays usable: nothing sealed differs from its seal
    monkeypatch.delenv("FAKE_MODE")
    time.sleep(1.1)
    assert _run(kc_repo, "--lane", "bug") == Exit.OK
    rec = _latest(kc_repo, "bug")
    assert rec.kernel_cache.warm and _figure(rec, "kernel_cached") == 1
    assert (entry / "cuda-jit" / "index").read_text() == "1"  # the unsealed index was removed, then begun anew


def test_a_harness_stopped_by_sigterm_keeps_the_kernels_written_whole(kc_repo):
    env = dict(os.environ, FAKE_MODE="compile-hang", PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "01", "--lane", "bug", *kc_repo.args()],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 60
        for line in proc.stdout:  # type: ignore[union-attr]
            if "COMPILED-SO-FAR" in line or time.time() > deadline:
                break
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == Exit.TERMINATED
    entry = next((kc_repo.cache / "kernel-cache").glob("*/kernel-cache.json")).parent
    assert sorted(json.loads((entry / SEAL).read_text())) == ["kernel-cache.json", *WHOLE]
    assert find(kc_repo.root, "fake", "01") == []  # a stopped lane writes no receipt


def test_a_harness_killed_mid_lane_leaves_no_sealed_half_entry(kc_repo, tmp_path):
    env = dict(os.environ, FAKE_MODE="compile-hang", PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "01", "--lane", "bug", "--quiet",
                             *kc_repo.args()], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        half = None
        while time.time() < deadline and half is None:
            half = next(iter((kc_repo.cache / "kernel-cache").glob("*/triton/0123abcd/half.so")), None) if (
                kc_repo.cache / "kernel-cache").is_dir() else None
            time.sleep(0.2)
        assert half is not None, "the reproducer never compiled"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    entry = half.parents[2]
    time.sleep(1.5)  # the guard kills the orphaned reproducer's group
    assert sorted(json.loads((entry / SEAL).read_text())) == ["kernel-cache.json"]  # the old seal, whole
    assert not list(entry.parent.glob(".tmp-*"))
    assert kernel_cache.damage(entry) == []
    assert find(kc_repo.root, "fake", "01") == []
    assert _run(kc_repo, "--lane", "bug") == Exit.OK
    rec = _latest(kc_repo, "bug")
    assert rec.kernel_cache.key[:20] == entry.name and not rec.kernel_cache.warm
    assert not half.exists()


def test_two_harnesses_with_one_key_share_the_entry(kc_repo, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-m", "harness", "run", "01", "--lane", "bug", "--quiet",
                               "--no-tracking", "--receipts-dir", str(tmp_path / f"r{i}"), *kc_repo.args()],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == Exit.OK, err
    recs = [Receipt.load(next((tmp_path / f"r{i}").rglob("receipt.json"))) for i in range(2)]
    assert recs[0].kernel_cache.key == recs[1].kernel_cache.key
    [entry] = [p for p in (kc_repo.cache / "kernel-cache").iterdir() if not p.name.startswith(".")]
    assert kernel_cache.damage(entry) == [] and kernel_cache.unsealed(entry) == []
    assert "triton/0123abcd/kernel.cubin" in json.loads((entry / SEAL).read_text())
    assert not list((entry / ".users").iterdir())


def test_a_seal_that_cannot_be_written_costs_a_compile_not_the_lane(kc_repo, monkeypatch, capsys):
    import errno

    def full(*_args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(kernel_cache, "reseal", full)
    monkeypatch.setattr(kernel_cache, "_create", _create_without(kernel_cache._create))
    assert cli("run", "01", "--lane", "bug", *kc_repo.args()) == Exit.OK
    assert "cannot seal what this lane compiled (No space left on device)" in capsys.readouterr().err
    assert _latest(kc_repo, "bug").kernel_cache.mode == "store"


def _create_without(create):
    """``_create`` with the real reseal (only the seal after the lane fails in the test above)."""
    from harness.base import hashing

    def wrapped(where, facts):
        saved = kernel_cache.reseal
        kernel_cache.reseal = hashing.reseal
        try:
            return create(where, facts)
        finally:
            kernel_cache.reseal = saved
    return wrapped


def test_an_interpreter_that_cannot_say_its_compilers_gets_a_throwaway_cache(kc_repo, monkeypatch, tmp_path,
                                                                               capsys):
    site = tmp_path / "site"
    site.mkdir()
    # the probe runs with the lane's environment before the cache directories are added to it: fail only there
    (site / "sitecustomize.py").write_text(
        "import os, sys\n"
        "if os.environ.get('HARNESS_LANE') and 'TRITON_CACHE_DIR' not in os.environ:\n"
        "    sys.exit(9)\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    assert cli("run", "01", "--lane", "bug", *kc_repo.args()) == Exit.OK
    assert "did not say its compiler versions" in capsys.readouterr().err
    rec = _latest(kc_repo, "bug")
    assert (rec.kernel_cache.mode, rec.kernel_cache.warm) == ("throwaway", False)


def test_prune_by_age_and_size(kc_repo, capsys):
    assert _run(kc_repo) == Exit.OK
    entries = {e["entry"]: e for e in _ls(kc_repo)}
    old = next(iter(entries))
    past = time.time() - 10 * 86400
    os.utime(kc_repo.cache / "kernel-cache" / old / ".last-used", (past, past))
    assert cli("cache", "prune", *kc_repo.args()) == Exit.USAGE
    capsys.readouterr()
    assert cli("cache", "prune", "--older-than", "5", "--dry-run", "--json", *kc_repo.args()) == Exit.OK
    assert [e["entry"] for e in json.loads(capsys.readouterr().out)] == [old]
    assert (kc_repo.cache / "kernel-cache" / old).is_dir()
    assert cli("cache", "prune", "--older-than", "5", *kc_repo.args()) == Exit.OK
    assert [e["entry"] for e in _ls(kc_repo)] == [n for n in entries if n != old]
    assert cli("cache", "prune", "--max-size", "0", *kc_repo.args()) == Exit.OK
    assert _ls(kc_repo) == []


def test_export_and_import_carry_entries_between_stores(kc_repo, tmp_path, capsys):
    assert _run(kc_repo, "--lane", "bug") == Exit.OK
    [entry] = _ls(kc_repo)
    archive = tmp_path / "kc.tar.xz"
    assert cli("cache", "export", "-o", str(archive), *kc_repo.args()) == Exit.OK
    other = tmp_path / "other-cache"
    args = ["--root", str(kc_repo.root), "--cache", str(other)]
    assert cli("cache", "import", str(archive), *args) == Exit.OK
    installed = other / "kernel-cache" / entry["entry"]
    assert kernel_cache.damage(installed) == [] and (installed / "triton/0123abcd/kernel.cubin").is_file()
    capsys.readouterr()
    assert cli("cache", "import", str(archive), *args) == Exit.OK
    assert "already present" in capsys.readouterr().out


def test_an_export_with_a_changed_file_imports_nothing(kc_repo, tmp_path, capsys):
    assert _run(kc_repo, "--lane", "bug") == Exit.OK
    archive = tmp_path / "kc.tar"
    assert cli("cache", "export", "-o", str(archive), *kc_repo.args()) == Exit.OK
    unpacked = tmp_path / "unpacked"
    with tarfile.open(archive) as tf:
        tf.extractall(unpacked, filter="data")
    victim = next(unpacked.rglob("kernel.cubin"))
    victim.write_bytes(b"evil")
    with tarfile.open(archive, "w") as tf:
        tf.add(unpacked / kernel_cache.TOP, arcname=kernel_cache.TOP)
    other = tmp_path / "other-cache"
    assert cli("cache", "import", str(archive), "--root", str(kc_repo.root), "--cache", str(other)) == Exit.TAMPERED
    assert "not as sealed" in capsys.readouterr().out
    assert [p for p in (other / "kernel-cache").iterdir() if not p.name.startswith(".")] == []


def _bundle(repo, tmp_path, *extra) -> tuple[Path, dict]:
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    out = tmp_path / "dist" / "bundle-01.tar.xz"
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), *extra, *repo.args()) == Exit.OK
    with tarfile.open(out) as tf:
        index = json.load(tf.extractfile("patchlane-bundle/bundle.json"))
    return out, index


def _bootstrap(repo, bundle: Path, cache: Path, env_extra: dict | None = None) -> None:
    env = dict(os.environ, PATCHLANE_HOME=str(cache), **(env_extra or {}))
    proc = subprocess.run([sys.executable, "-m", "harness.bootstrap", str(bundle), "--", "run", "01", "--quiet",
                           "--root", str(repo.root), "--cache", str(cache)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr


def test_a_bundle_carries_the_kernel_caches_of_its_builds_and_the_gpu_host_starts_warm(kc_repo, tmp_path, capsys):
    assert _run(kc_repo) == Exit.OK
    keys = {_latest(kc_repo, lane).kernel_cache.key for lane in ("bug", "fix")}
    capsys.readouterr()
    bundle, index = _bundle(kc_repo, tmp_path, "--kernel-cache")
    assert set(index["kernel_caches"]) == keys
    assert all(e["files"] == 2 and e["bytes"] > 0 and len(e["sha256"]) == 64 for e in index["kernel_caches"].values())
    assert "2 kernel-cache entries carried" in capsys.readouterr().err
    device = tmp_path / "device-cache"
    _bootstrap(kc_repo, bundle, device)
    for lane in ("bug", "fix"):
        rec = _latest(kc_repo, lane)
        assert rec.build.source == "bundle" and rec.kernel_cache.warm and _figure(rec, "kernel_cached") == 1
    assert len([p for p in (device / "kernel-cache").iterdir() if not p.name.startswith(".")]) == 2
    back = tmp_path / "out" / "kernel-cache.tar.xz"  # what the GPU host sends back for the next bundle
    proc = subprocess.run([sys.executable, "-m", "harness.bootstrap", str(bundle), "--", "cache", "export", "-o",
                           str(back)], capture_output=True, text=True, env=dict(os.environ, PATCHLANE_HOME=str(device)))
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(back) as tf:
        names = tf.getnames()
    assert {n.split("/")[1] for n in names} == {k[:20] for k in keys}


def test_a_bundle_without_the_option_carries_none(kc_repo, tmp_path):
    assert _run(kc_repo, "--lane", "bug") == Exit.OK
    _, index = _bundle(kc_repo, tmp_path)
    assert "kernel_caches" not in index


def test_a_carried_entry_of_another_driver_is_not_used_on_the_gpu_host(kc_repo, tmp_path):
    assert _run(kc_repo, "--lane", "bug") == Exit.OK
    bundle, index = _bundle(kc_repo, tmp_path, "--kernel-cache")
    assert len(index["kernel_caches"]) == 1
    bin_dir = tmp_path / "bin"
    _fake_smi(bin_dir, "NVIDIA H100 80GB HBM3, 9.0, 550.54.15")  # the GPU host: another key
    device = tmp_path / "device-cache"
    _bootstrap(kc_repo, bundle, device, {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    rec = _latest(kc_repo, "bug")
    assert rec.kernel_cache.key not in index["kernel_caches"] and not rec.kernel_cache.warm
    assert _figure(rec, "kernel_cached") == 0


def test_a_receipt_with_a_malformed_kernel_cache_record_is_a_config_error(kc_repo, tmp_path):
    assert _run(kc_repo, "--lane", "bug") == Exit.OK
    data = json.loads(_latest(kc_repo, "bug").path.read_text())
    data["kernel_cache"]["warm"] = "yes"
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"\[kernel_cache\]: key 'warm' is str"):
        Receipt.load(path)
    del data["kernel_cache"]
    path.write_text(json.dumps(data))
    assert Receipt.load(path).kernel_cache is None  # receipts written before kernel caches load as they are


def test_a_lane_that_compiles_nothing_says_nothing_of_the_kernel_cache(kc_repo, capsys):
    """"kernel cache ...: cold" on every CPU lane, where nothing compiles, read as a failure: an empty entry is a
    detail; what a lane compiled is said when it is kept, and a warm entry when it is found."""
    capsys.readouterr()
    assert cli("run", "01", "--lane", "bug", *kc_repo.args()) == Exit.OK
    err = " ".join(capsys.readouterr().err.split())
    assert "cold" not in err and "kept 2 file(s) this lane compiled" in err
    time.sleep(1.1)
    assert cli("run", "01", "--lane", "bug", *kc_repo.args()) == Exit.OK
    err = " ".join(capsys.readouterr().err.split())
    assert "warm, 2 file(s)" in err and "this lane compiled" not in err
    # the reproducer without its compile step: no kernel cache line at all
    repro = kc_repo.root / "repros" / "fake" / "pack01.py"
    repro.write_text(repro.read_text().replace(COMPILE, ""))
    shutil.rmtree(kc_repo.cache / "kernel-cache")
    time.sleep(1.1)
    assert cli("run", "01", "--lane", "bug", *kc_repo.args()) == Exit.OK
    assert "kernel cache" not in capsys.readouterr().err
