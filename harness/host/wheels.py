"""The wheels a bundle carries besides builds: the harness's own dependencies at the pins of
``requirements/harness.lock`` (hash-checked) and each base's runtime pins, downloaded for the GPU host's Python."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.errors import BundleError

# The harness's own dependencies, transitive ones included, pinned with wheel hashes; generated from
# pyproject.toml by tools/lock.py (tests/test_lock.py fails when the two disagree).
LOCK_FILE = Path("requirements") / "harness.lock"
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64"]


HARNESS_WHEELS = "harness"  # the subdirectory the lock's wheels are downloaded into, apart from runtime pins


def download_wheels(requirement_sets: list[list[str]], dest: Path, python_version: str,
                    lock: Path | None = None) -> list[Path]:
    """Binary wheels of exactly each set in ``requirement_sets`` and of the ``lock`` file (no dependency
    resolution) for the GPU host's Python; the lock's wheels must match its hashes (``pip --require-hashes``).

    Each set is one base's runtime pins (with its lanes' extra builds'), downloaded in a pip run of its own:
    two bases of one target may pin one distribution at two versions (tilelang 0.1.8 needs apache-tvm-ffi
    0.1.9, 0.1.15 needs 0.1.12), which one pip run refuses as a conflict; the bundle carries both."""
    dest.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
            "--python-version", python_version, "--implementation", "cp"]
    for plat in PLATFORMS:
        base += ["--platform", plat]
    # pip checks hashes for every requirement of a run once one has them: the lock and the manifests'
    # runtime wheels (which carry none) are two runs
    if lock is not None:
        _pip(base + ["--require-hashes", "-r", str(lock), "--dest", str(dest / HARNESS_WHEELS)],
             f"the harness's dependencies ({lock.name})",
             hint=f"a Python the lock has no hashes for? regenerate it: python tools/lock.py (see {lock})")
    for requirements in requirement_sets:
        if requirements:
            _pip(base + ["--dest", str(dest), *requirements], ", ".join(requirements))
    return sorted(dest.glob("*.whl")) + sorted((dest / HARNESS_WHEELS).glob("*.whl"))


def _pip(cmd: list[str], what: str, hint: str | None = None) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        raise BundleError(f"cannot download wheels for the bundle ({what}):\n{tail}", hint=hint)


def lock_file(root: Path) -> Path:
    path = root / LOCK_FILE
    if not path.is_file():
        raise BundleError(f"{path}: missing; it pins the harness's own dependencies for the GPU host",
                          hint="python tools/lock.py writes it from pyproject.toml")
    return path
