"""Upstream-test lanes: the upstream's own pytest ids, run against a lane's build.

A lane with ``upstream_tests`` (tracking.toml) runs chosen pytest node ids of the upstream tree of its
base -- with the pack's series applied when the lane is patched, so a test the series adds is there --
against the lane's installed build, instead of a reproducer of ours. This module owns the pieces the
lane workflow (``harness/lane/lanes.py``) puts together:

* ``export_tree``: the part of the upstream tree pytest needs (the selected test files, the ``conftest.py``
  and ``__init__.py`` files from the root down to each, the helper modules of the tests tree they import,
  found statically by ``harness/base/pyimports.py``, and the root's pytest configuration), copied into the store
  under the tree's key, so the package source itself is *not* beside the tests and ``import mamba_ssm``
  resolves to the build; a bundle carries a few hundred KB rather than a whole ``tests/`` directory.
  Bundles carry it as a tar (``harness/host/bundle.py``).
* ``runner_args``: the arguments of the kit's runner (``repros/upstream_tests.py``), which runs pytest
  with ``--junitxml``, reads each id's outcome from that file and prints the verdict sentinel; the
  arguments hold the selected ids exactly, so the receipt's ``reproducer.args`` records the choice.
* ``gpu_lock``: one file lock per visible GPU, held for the whole pytest run. Upstream suites autotune
  and some of their tests hold tens of GB of GPU memory: two such processes on one GPU slow each other
  down or run out of memory, so a second run waits.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from harness.base import fingerprint, pyimports, ui
from harness.base.store import Store
from harness.errors import BuildError, ConfigError, GpuBusyError

# the kit's runner, relative to the repository root; not named _*.py: the kit's helpers are pinned in every
# receipt (receipts.helper_digests), and adding one would make every reproducer's receipt stale
RUNNER = "repros/upstream_tests.py"
SUITE_RUNNER = "repros/upstream_suite.py"  # a suite lane's: collects, runs its shard, records every case
# pytest and its own dependencies, exactly pinned: the lane's runtime site is installed with --no-deps
PYTEST_REQUIRES = ("pytest==9.2.0", "pluggy==1.7.0", "iniconfig==2.3.1", "packaging==26.0", "pygments==2.21.0")


def pytest_requires(test_requires: tuple[str, ...]) -> tuple[str, ...]:
    """The harness's pytest pins less those ``test_requires`` pins otherwise (the upstream CI's pytest), then those."""
    names = {r.split("==", 1)[0].lower().replace("_", "-") for r in test_requires}
    return tuple(r for r in PYTEST_REQUIRES if r.split("==", 1)[0] not in names) + tuple(test_requires)
# files at the root of an upstream tree that configure pytest (rootdir, markers, addopts, conftest)
ROOT_CONFIG = ("pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini", "conftest.py")
TREE_VERSION = "2"  # bump when what export_tree copies changes (2: the selected files and what they need)
LOCK_DIR_ENV = "PATCHLANE_GPU_LOCK_DIR"
SUITE_STATE_ENV = "HARNESS_SUITE_STATE"  # a suite lane's per-case progress file (repros/upstream_suite.py reads it)
SUITE_RERUN_ENV = "PATCHLANE_SUITE_RERUN"  # 1: forget the progress of suite lanes, decide every case again
ROOT_ENV = "HARNESS_UPSTREAM_TESTS_ROOT"  # where the runner finds the test tree (repros/upstream_tests.py reads it)
# Every selected case runs to its outcome: an upstream whose pytest addopts hold -x (Megatron-LM dev) would stop at
# the first failure, leaving the rest "not run" on the base build. PYTEST_ADDOPTS comes after the ini addopts, so
# its --maxfail wins; set in the lane's environment rather than in the runner, whose digest every receipt pins.
PYTEST_ENV = {"PYTEST_ADDOPTS": "--maxfail=1000000000"}
SENTINEL_ALL_PASSED = "UPSTREAM_TESTS_PASSED"
SENTINEL_FAILED_AS_EXPECTED = "UPSTREAM_TESTS_FAILED_AS_EXPECTED"
SENTINEL_SUITE_RAN = "UPSTREAM_SUITE_RECORDED"
# The runner's verdicts, added to the reproducers' vocabulary (tracking.sentinels) here rather than in
# repros/_lane.py, whose digest every receipt pins. The runner prints them (RUNNER keeps the same names).
SENTINELS = {
    SENTINEL_ALL_PASSED: "every selected upstream test passed on this build",
    SENTINEL_FAILED_AS_EXPECTED: "the upstream tests expected to fail failed, every other one passed",
    "UPSTREAM_TESTS_UNEXPECTED": "an upstream test failed, errored, was skipped or did not run against expectation",
    SENTINEL_SUITE_RAN: "pytest ran the suite shard to its end and every case's outcome is recorded "
                        "(the verdict compares the base's and the patched build's outcomes)",
    "UPSTREAM_SUITE_INCOMPLETE": "the suite shard did not run to its end (budget, pytest usage error, no junit XML)",
}


def recorded_tree(args: tuple[str, ...]) -> str | None:
    """The test tree key a receipt's runner arguments name (``runner_args``), or None."""
    return args[args.index("--tests-tree") + 1] if "--tests-tree" in args[:-1] else None


def expected_sentinel(expect_failed: tuple[str, ...]) -> str:
    """The sentinel an upstream-test lane expects: every id passed, or exactly the listed ones failed."""
    return SENTINEL_FAILED_AS_EXPECTED if expect_failed else SENTINEL_ALL_PASSED


def test_file(node_id: str) -> str:
    """The file part of a pytest node id (``tests/a/test_b.py::test_c[x]`` -> ``tests/a/test_b.py``)."""
    return node_id.split("::", 1)[0]


def check_ids(ids: tuple[str, ...], where: str) -> None:
    """Refuse ids pytest would read as something else: absolute paths, ``..``, options, empty parts."""
    for node in ids:
        path = test_file(node)
        parts = Path(path).parts
        if (not path or node.startswith("-") or Path(path).is_absolute() or ".." in parts
                or not path.endswith(".py") or "::" in node and not node.split("::", 1)[1]):
            raise ConfigError(f"{where}: {node!r} is not a pytest node id relative to the upstream root "
                              "(FILE.py or FILE.py::TEST[PARAM])")


def tree_key(series_key: str, ids: tuple[str, ...]) -> str:
    """The store key of the exported test tree: the applied tree's key and the test files it holds."""
    return fingerprint.digest("upstream-tests", TREE_VERSION, series_key, sorted({test_file(n) for n in ids}))


def tree_files(source: Path, ids: tuple[str, ...]) -> list[str]:
    """What ``export_tree`` copies from ``source``, relative paths: the selected files, what pytest loads with
    them (``conftest.py``, ``__init__.py``, helper modules of the tests tree, ``pyimports.helper_files``) and the
    root's pytest configuration."""
    files = sorted({test_file(node) for node in ids})
    return sorted(set(files) | set(pyimports.helper_files(source, files))
                  | {name for name in ROOT_CONFIG if (source / name).is_file()})


def lookup_tree(store: Store, key: str) -> Path | None:
    path = store.root / "upstream-tests" / key[:20] / "tree"
    return path if path.is_dir() else None


def _ensure_tree(store: Store, key: str, fill: Callable[[Path], None]) -> Path | None:
    """The test tree under ``key``, made by ``fill(entry)`` if absent: looked up without the store's lock, made
    under it (looking again first), written as a new entry that appears whole or not at all."""
    found = lookup_tree(store, key)
    if found is not None:
        return found
    with store.locked():
        found = lookup_tree(store, key)
        if found is not None:
            return found
        with store.new_entry(store.area("upstream-tests") / key[:20]) as tmp:
            fill(tmp)
    return lookup_tree(store, key)


def export_tree(source: Path, ids: tuple[str, ...], key: str, store: Store, label: str) -> Path:
    """The test tree for ``ids`` taken from the upstream tree at ``source`` (cached under ``key``).

    Every selected file must exist in ``source``: a missing file is a configuration error here, not a
    pytest "not found" on the GPU host.
    """
    missing = [node for node in ids if not (source / test_file(node)).is_file()]
    if missing:
        raise ConfigError(f"{label}: upstream test file {test_file(missing[0])} is not in the tree "
                          f"({source}); is the test in the pack's series?")
    def fill(tmp: Path) -> None:
        for rel in tree_files(source, ids):
            (tmp / "tree" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / rel, tmp / "tree" / rel)

    made = _ensure_tree(store, key, fill)
    if made is None:
        raise BuildError(f"{label}: the upstream test tree {store.root / 'upstream-tests' / key[:20]} vanished")
    ui.note(f"upstream tests of {label}: {made}")
    return made


def adopt_tree(tar: Path, key: str, store: Store, label: str) -> Path:
    """Register a test tree from an offline bundle (a tar of ``tree/``) under ``key``."""
    import tarfile

    def fill(tmp: Path) -> None:
        with tarfile.open(tar) as tf:
            tf.extractall(tmp, filter="data")

    made = _ensure_tree(store, key, fill)
    if made is None:
        raise BuildError(f"{label}: the bundle's test tree did not unpack into "
                         f"{store.root / 'upstream-tests' / key[:20]}")
    return made


def runner_args(ids: tuple[str, ...], expect_failed: tuple[str, ...], distribution: str, module: str,
                requires: str, timeout_s: int, tree: str) -> list[str]:
    """The runner's command line: what it stamps, the device it needs, pytest's time budget, the test tree's
    key (``tree_key``: which series the test files came from, so a receipt goes stale when the series
    changes, on an unpatched lane too), the ids."""
    # pytest gets the lane's time less a margin, so the runner can still read the XML and say what happened
    budget = max(30, timeout_s - min(120, timeout_s // 10))
    args = ["--distribution", distribution, "--module", module, "--requires", requires, "--timeout", str(budget),
            "--tests-tree", tree]
    for node in expect_failed:
        args += ["--expect-failed", node]
    return args + ["--", *ids]


def visible_gpus(env: dict[str, str] | None = None, proc_root: Path = Path("/proc")) -> list[str]:
    """Names of the GPUs a process started with ``env`` may use, for the lock files.

    ``CUDA_VISIBLE_DEVICES`` when set (its entries: indices or UUIDs), else every GPU the kernel shows,
    by index; GPU 0 when the kernel shows none (a container without ``/proc/driver/nvidia/gpus``: a
    CUDA lane runs only where torch saw a device, so locking too much beats locking nothing). An empty
    ``CUDA_VISIBLE_DEVICES`` hides every GPU.
    """
    given = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [d.strip() for d in given.split(",") if d.strip()]
    return [str(i) for i in range(len(fingerprint.gpu_driver(proc_root)["gpus"]))] or ["0"]


def lock_dir() -> Path:
    """Where the GPU locks live: host-wide (``$PATCHLANE_GPU_LOCK_DIR``, else the temp directory), not per store,
    so two checkouts or two stores on one GPU host still exclude each other."""
    return Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "patchlane-gpu-locks")


@contextmanager
def gpu_lock(gpus: list[str], timeout_s: float, label: str, directory: Path | None = None) -> Iterator[float]:
    """Hold one lock per GPU in ``gpus`` (taken in sorted order, so two holders never deadlock); yields the
    seconds spent waiting. Waiting longer than ``timeout_s`` is a GpuBusyError naming the lock."""
    if not gpus:  # a CPU lane, or none to lock: leave nothing behind in the temp directory
        yield 0.0
        return
    directory = directory or lock_dir()
    directory.mkdir(parents=True, exist_ok=True)
    held: list[FileLock] = []
    start = time.monotonic()
    try:
        for gpu in sorted(set(gpus)):
            name = "".join(c if c.isalnum() or c in "-_." else "_" for c in gpu)
            lock = FileLock(str(directory / f"gpu-{name}.lock"))
            left = max(0.0, timeout_s - (time.monotonic() - start))
            try:
                lock.acquire(timeout=0)
            except Timeout:
                ui.note(f"{label}: GPU {gpu} is running other upstream tests; waiting (up to {int(left)} s)")
                try:
                    lock.acquire(timeout=left)
                except Timeout:
                    raise GpuBusyError(f"{label}: GPU {gpu} stayed busy with other upstream tests for "
                                       f"{int(timeout_s)} s (lock {lock.lock_file})") from None
            held.append(lock)
        yield round(time.monotonic() - start, 3)
    finally:
        for lock in reversed(held):
            lock.release()
