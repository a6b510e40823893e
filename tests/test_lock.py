"""requirements/harness.lock and pyproject.toml: one set of dependency pins, and the bundle downloads the lock."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import REPO, cli

from harness.errors import BundleError, Exit
from harness.host import bundle
from harness.host import wheels as host_wheels

_spec = importlib.util.spec_from_file_location("lock_tool", REPO / "tools" / "lock.py")
assert _spec and _spec.loader
lock_tool = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = lock_tool  # dataclasses look their module up there
_spec.loader.exec_module(lock_tool)


@pytest.fixture
def copies(tmp_path) -> tuple[Path, Path]:
    """This repository's pyproject.toml and lock, copied so a test can make them drift."""
    pyproject, lock = tmp_path / "pyproject.toml", tmp_path / "harness.lock"
    shutil.copyfile(REPO / "pyproject.toml", pyproject)
    shutil.copyfile(REPO / host_wheels.LOCK_FILE, lock)
    return pyproject, lock


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_the_lock_agrees_with_pyproject():
    assert lock_tool.check(REPO / "pyproject.toml", REPO / host_wheels.LOCK_FILE) == []
    entries = lock_tool.parse_lock((REPO / host_wheels.LOCK_FILE).read_text())
    direct = lock_tool.direct_requirements(REPO / "pyproject.toml")
    assert set(direct) < set(entries)  # the transitive ones are there too
    assert all(e.hashes for e in entries.values())
    assert not {"gitpython", "gitdb", "smmap"} & set(entries) and not {"gitpython"} & set(direct)


@pytest.mark.parametrize("drift, expected", [
    (("pyproject", '"rich==15.0.0"', '"rich==14.0.0"'), "rich: pyproject.toml pins 14.0.0, the lock 15.0.0"),
    (("pyproject", '"packaging==26.3",', '"packaging==26.3",\n    "attrs==25.1.0",'),
     "attrs==25.1.0 is in pyproject.toml but not in the lock"),
    (("pyproject", '    "filelock==4.2.11",\n', ""),
     "filelock==4.2.11: the lock has it as a direct dependency; pyproject.toml does not"),
    (("pyproject", '"tomlkit==0.15.2"', '"tomlkit>=0.15"'),
     "pyproject.toml: tomlkit>=0.15 is not pinned with one '=='"),
    (("lock", "idna==3.20", "idna==3.21"), None),  # a transitive pin moved by hand: the lock is still consistent
    (("lock", "rich==15.0.0", "rich==15.0.1"), "rich: pyproject.toml pins 15.0.0, the lock 15.0.1"),
])
def test_a_drift_between_pyproject_and_the_lock_is_found(copies, drift, expected):
    pyproject, lock = copies
    which, old, new = drift
    _edit(pyproject if which == "pyproject" else lock, old, new)
    problems = lock_tool.check(pyproject, lock)
    if expected is None:
        assert problems == []
        return
    assert expected in problems, problems
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "lock.py"), "--check", "--pyproject", str(pyproject),
                           "--lock", str(lock)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and expected in proc.stderr


def test_a_lock_entry_without_hash_or_without_reason_is_found(copies):
    pyproject, lock = copies
    text = lock.read_text()
    start = text.index("mdurl==")
    end = text.index("# via markdown-it-py", start)
    lock.write_text(text[:start] + "mdurl==0.1.2\n    " + text[end:])  # hashes gone
    assert "mdurl==0.1.2: no --hash in the lock" in lock_tool.check(pyproject, lock)
    lock.write_text(text.replace("# via markdown-it-py", "# via nothing-locked"))
    assert any(p.startswith("mdurl==0.1.2: needed by nothing in the lock") for p in lock_tool.check(pyproject, lock))


def test_a_malformed_lock_line_is_named(copies):
    pyproject, lock = copies
    lock.write_text(lock.read_text() + "rich>=1\n")
    [problem] = lock_tool.check(pyproject, lock)
    assert "harness.lock:" in problem and "rich>=1" in problem


def test_bundle_without_the_lock_is_a_bundle_error(lane_repo, tmp_path, capsys):
    """No --wheels: the bundle needs the lock before it downloads anything."""
    out = tmp_path / "b.tar.xz"
    assert cli("bundle", "01", "-o", str(out), *lane_repo.args()) == Exit.PIN
    assert "requirements/harness.lock: missing" in capsys.readouterr().err and not out.exists()


# --------------------------------------------------------------------------- against PyPI

@pytest.mark.network
def test_regenerating_the_lock_gives_the_same_file(tmp_path):
    out = tmp_path / "harness.lock"
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "lock.py"), "--output", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == (REPO / host_wheels.LOCK_FILE).read_text()


@pytest.mark.network
def test_the_bundle_downloads_exactly_the_locked_wheels(tmp_path):
    lock = REPO / host_wheels.LOCK_FILE
    wheels = host_wheels.download_wheels([], tmp_path / "wheels", "3.12", lock)
    entries = lock_tool.parse_lock(lock.read_text())
    names = {w.name.split("-")[0].lower().replace("_", "-") for w in wheels}
    assert names == set(entries)
    tampered = tmp_path / "tampered.lock"
    tampered.write_text(lock.read_text().replace(next(iter(entries["rich"].hashes)), "0" * 64))
    with pytest.raises(BundleError, match="cannot download wheels"):
        host_wheels.download_wheels([], tmp_path / "again", "3.12", tampered)


@pytest.mark.network
def test_harness_bundle_with_downloaded_dependencies(lane_repo, tmp_path):
    shutil.copytree(REPO / "requirements", lane_repo.root / "requirements", dirs_exist_ok=True)
    out = tmp_path / "dist" / "bundle-01.tar.xz"
    assert cli("bundle", "01", "-o", str(out), *lane_repo.args()) == Exit.OK
    with tarfile.open(out) as tf:
        index = json.load(tf.extractfile("patchlane-bundle/bundle.json"))
    got = {Path(w["file"]).name.split("-")[0].lower().replace("_", "-") for w in index["wheels"]}
    assert got == set(lock_tool.parse_lock((REPO / host_wheels.LOCK_FILE).read_text()))


def test_bases_with_conflicting_runtime_pins_download_in_separate_pip_runs(tmp_path, monkeypatch):
    """tilelang 0.1.8 and 0.1.15 pin apache-tvm-ffi at two versions: one pip run refuses that, two do not."""
    runs = []

    def fake_pip(cmd, what, hint=None):
        reqs = [a for a in cmd if "==" in a]
        names = [r.split("==")[0] for r in reqs]
        if len(names) != len(set(names)):  # what pip says: ResolutionImpossible
            raise bundle.BundleError(f"cannot download wheels for the bundle ({what}): conflicting pins")
        runs.append(reqs)

    monkeypatch.setattr(host_wheels, "_pip", fake_pip)
    host_wheels.download_wheels([["apache-tvm-ffi==0.1.9", "z3-solver==4.15.4.0"], ["apache-tvm-ffi==0.1.12"]],
                           tmp_path / "w", "3.12")
    assert runs == [["apache-tvm-ffi==0.1.9", "z3-solver==4.15.4.0"], ["apache-tvm-ffi==0.1.12"]]
