"""Fixtures that build a tiny patch-lane repository around a fake upstream package.

The fake upstream ``fakepkg`` has one bug: ``scale(xs, w)`` multiplies every
element by ``w[0]`` instead of by its own weight (the shape of pack 09's bug).
Its sdist is built here, its sha256 pinned in a manifest, its fix written as a
real ``git format-patch`` file, and a reproducer prints the protocol lines.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import shutil
import subprocess
import sys
import tarfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

CORE_BUGGY = textwrap.dedent('''\
    """Scaling helpers."""


    def scale(xs, w):
        # multiply each element by its weight
        return [x * w[0] for x in xs]


    def total(xs):
        return sum(xs)
''')

CORE_FIXED = CORE_BUGGY.replace("[x * w[0] for x in xs]", "[x * wi for x, wi in zip(xs, w)]")

REPRO = textwrap.dedent('''\
    import os, sys, time
    import _lane

    _lane.stamp("fakepkg", "fakepkg.core")
    mode = os.environ.get("FAKE_MODE", "")
    if mode == "crash":
        raise RuntimeError("boom")
    if mode == "hang":
        time.sleep(60)
    if mode == "silent":
        sys.exit(0)
    from fakepkg.core import scale
    got = scale([1.0, 2.0, 3.0], [1.0, 0.0, 2.0])
    _lane.figure("max_err", max(abs(a - b) for a, b in zip(got, [1.0, 0.0, 6.0])))
    if got == [1.0, 0.0, 6.0]:
        _lane.verdict("FIX_VALIDATED" if os.environ.get("HARNESS_PATCHED") == "1" else "BUG_ABSENT", got=got)
    else:
        _lane.verdict("BUG_REPRODUCED" if os.environ.get("HARNESS_PATCHED") != "1" else "FIX_FAILED", got=got)
''')


def fake_tree(version: str = "1.0", core: str = CORE_BUGGY) -> dict[str, str]:
    """The fake upstream's source files (path -> text), as its git repository holds them."""
    return {
        "pyproject.toml": textwrap.dedent(f'''\
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "fakepkg"
            version = "{version}"
            [tool.setuptools.packages.find]
            where = ["src"]
        '''),
        "src/fakepkg/__init__.py": f'__version__ = "{version}"\n',
        "src/fakepkg/core.py": core,
    }


def make_sdist(dest: Path, version: str = "1.0", core: str = CORE_BUGGY) -> Path:
    top = f"fakepkg-{version}"
    files = {
        **{f"{top}/{name}": text for name, text in fake_tree(version, core).items()},
        f"{top}/PKG-INFO": f"Metadata-Version: 2.1\nName: fakepkg\nVersion: {version}\n",
    }
    path = dest / f"fakepkg-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            tf.addfile(info, io.BytesIO(data))
    return path


def git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@invalid", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000", "PATH": "/usr/bin:/bin",
           "GIT_CONFIG_GLOBAL": "/dev/null"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def make_patch(workdir: Path, old: str, new: str, status: str = "Submitted [https://example.invalid/pr/1]",
               path: str = "src/fakepkg/core.py", subject: str = "core: use each element's own weight") -> str:
    """A format-patch that turns ``old`` into ``new`` at ``path``."""
    repo = workdir / "patchsrc"
    if repo.exists():
        shutil.rmtree(repo)
    (repo / Path(path).parent).mkdir(parents=True)
    (repo / path).write_text(old)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    (repo / path).write_text(new)
    git(repo, "commit", "-q", "-am", f"{subject}\n\nUpstream-Status: {status}\nPack: 01\n")
    return git(repo, "format-patch", "-1", "--stdout", "--zero-commit", "--no-signature")


@dataclass
class LaneRepo:
    root: Path
    sdist: Path
    cache: Path

    extra_bases: dict[str, Path] = field(default_factory=dict)

    def write_manifest(self, build: str = "overlay", sha: str | None = None) -> None:
        sha = sha or hashlib.sha256(self.sdist.read_bytes()).hexdigest()
        text = textwrap.dedent(f'''\
            # fake upstream for tests
            target = "fake"
            repo = "https://example.invalid/fake"
            distribution = "fakepkg"
            import_names = ["fakepkg"]
            build = "{build}"
            default_base = "1.0"

            [bases."1.0"]
            version = "1.0"
            commit = "{"a" * 40}"
            role = "current pin"

            [bases."1.0".artifact]
            kind = "sdist"
            filename = "{self.sdist.name}"
            url = "{self.sdist.as_uri()}"
            sha256 = "{sha}"
        ''')
        for version, sdist in self.extra_bases.items():
            text += _base_toml(version, sdist)
        (self.root / "upstream" / "fake.toml").write_text(text)

    def add_base(self, version: str, core: str) -> Path:
        """Build fakepkg ``version`` with ``core`` as its core.py and pin it as base ``version``."""
        self.extra_bases[version] = make_sdist(self.sdist.parent, version, core)
        self.write_manifest()
        return self.extra_bases[version]

    def write_tracking(self, extra: str = "", requires: str = "cpu", timeout: int = 60) -> None:
        (self.root / "tracking.toml").write_text(textwrap.dedent(f'''\
            # tracking for tests: comments must survive the tool's edits
            schema = 1

            [packs.01]
            title = "scale uses w[0] for every element"
            target = "fake"
            kind = "pr"  # a pull request
            state = "ready"
            files = ["src/fakepkg/core.py"]
            depends_on = []
            requires = "{requires}"
            base = "1.0"
            reproducer = "repros/fake/pack01.py"

            [[packs.01.evidence]]
            lane = "bug"
            figure = "max_err"
            label = "scale([1, 2, 3], [1, 0, 2]) vs the exact result"
            show = "largest error {{value}}"

            [[packs.01.evidence]]
            lane = "fix"
            figure = "max_err"
            label = "the same"
            show = "largest error {{value}}"

            [[packs.01.lanes]]
            name = "bug"
            base = "1.0"
            patched = false
            expect = "BUG_REPRODUCED"
            timeout = {timeout}

            [[packs.01.lanes]]
            name = "fix"
            base = "1.0"
            patched = true
            expect = "FIX_VALIDATED"
            timeout = {timeout}
        ''') + extra)

    def write_patch(self, text: str, pack: str = "01", name: str = "0001-use-own-weight.patch") -> Path:
        d = self.root / "patches" / "fake" / pack
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)
        return d / name

    def args(self) -> list[str]:
        return ["--root", str(self.root), "--cache", str(self.cache)]


def _base_toml(version: str, sdist: Path) -> str:
    return textwrap.dedent(f'''
        [bases."{version}"]
        version = "{version}"
        commit = ""
        role = "newer release"

        [bases."{version}".artifact]
        kind = "sdist"
        filename = "{sdist.name}"
        url = "{sdist.as_uri()}"
        sha256 = "{hashlib.sha256(sdist.read_bytes()).hexdigest()}"
    ''')


@pytest.fixture
def lane_repo(tmp_path: Path) -> LaneRepo:
    return make_lane_repo(tmp_path)


def make_lane_repo(tmp_path: Path) -> LaneRepo:
    """The fake pack 01 under ``tmp_path``: repository, sdist (dist/) and an empty cache path."""
    root = tmp_path / "repo"
    (root / "upstream").mkdir(parents=True)
    (root / "repros" / "fake").mkdir(parents=True)
    shutil.copy(REPO / "repros" / "_lane.py", root / "repros" / "_lane.py")
    (root / "repros" / "fake" / "pack01.py").write_text(REPRO)
    dist = tmp_path / "dist"
    dist.mkdir()
    repo = LaneRepo(root=root, sdist=make_sdist(dist), cache=tmp_path / "cache")
    repo.write_manifest()
    repo.write_tracking()
    repo.write_patch(make_patch(tmp_path, CORE_BUGGY, CORE_FIXED))
    return repo


def copy_lane_repo(template: LaneRepo, tmp_path: Path) -> LaneRepo:
    """A private copy of ``template`` (repository, sdists, cache) under ``tmp_path``, for a test to change freely.

    Runs are the slow part of many tests (an overlay build and two reproducer runs: seconds each on a shared
    host); a session-scoped fixture runs once and every test gets its own copy. The manifest keeps pointing at
    the template's sdist until a test rewrites it (``add_base``): same bytes, same sha256."""
    root, cache, dist = tmp_path / "repo", tmp_path / "cache", tmp_path / "dist"
    shutil.copytree(template.root, root, symlinks=True)
    if template.cache.exists():
        shutil.copytree(template.cache, cache, symlinks=True)
    shutil.copytree(template.sdist.parent, dist, symlinks=True, dirs_exist_ok=True)
    extra = {version: dist / sdist.name for version, sdist in template.extra_bases.items()}
    return LaneRepo(root=root, sdist=dist / template.sdist.name, cache=cache, extra_bases=extra)


def overwrite_with(template: LaneRepo, repo: LaneRepo) -> LaneRepo:
    """Replace ``repo``'s repository and cache by copies of ``template``'s (a shared run), keeping ``repo``'s
    paths: for tests that take both ``lane_repo`` and a fixture that ran it."""
    shutil.rmtree(repo.root)
    shutil.copytree(template.root, repo.root, symlinks=True)
    shutil.rmtree(repo.cache, ignore_errors=True)
    if template.cache.exists():
        shutil.copytree(template.cache, repo.cache, symlinks=True)
    shutil.copyfile(template.sdist, repo.sdist)  # the bytes the manifest pins, should a test rewrite it
    return repo


@contextlib.contextmanager
def isolated_env():
    """What the autouse fixtures below set, for session-scoped fixtures (which run outside them)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATCHLANE_HOME", "/dev/null/patchlane-cache-not-for-tests")
        mp.delenv("PATCHLANE_GIT_MIRRORS", raising=False)
        yield mp


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs: a zombie is dead (only not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def cli(*args: str) -> int:
    """Run the harness CLI in-process; return its exit code whether it returns or raises SystemExit."""
    from harness.main import main

    try:
        return main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.fixture(autouse=True)
def wide_console():
    """Tables printed by the CLI are matched line by line: do not let rich wrap them at 80 columns."""
    from harness.base import ui

    old = ui.out.width
    ui.out.width = 250
    yield
    ui.out.width = old


@pytest.fixture(scope="session")
def load_reproducer():
    """Import a reproducer file as a module, with repros/ on sys.path only while it loads (for ``_lane``)."""
    def load(path: Path, name: str):
        sys.path.insert(0, str(REPO / "repros"))
        try:
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod
        finally:
            sys.path.remove(str(REPO / "repros"))
    return load


@pytest.fixture(autouse=True)
def no_real_cache(monkeypatch):
    """A test that forgets --cache / Store(path) must fail, not write to the user's real cache."""
    monkeypatch.setenv("PATCHLANE_HOME", "/dev/null/patchlane-cache-not-for-tests")
    monkeypatch.delenv("PATCHLANE_GIT_MIRRORS", raising=False)


# The slow end-to-end tests: 'nox -s tests' leaves them out (-m "not slow"), 'nox -s tests_slow' (and CI) runs them.
# Every test that needs the network (a real pinned artefact) is one; the others are listed by node id prefix rather
# than marked in their files: here, whole modules that drive real nox processes and tests that scan this repository;
# in tests/slow.txt, the tests measured at 3 s or more in a cold 'nox -s tests' on an idle 2-core host (written by
# tools/slow_tests.py from pytest --durations=0, with the seconds and the run they came from).
def _measured_slow() -> tuple[str, ...]:
    spec = importlib.util.spec_from_file_location("slow_tests", Path(__file__).resolve().parents[1] / "tools"
                                                  / "slow_tests.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(node for _, node in module.entries())


SLOW = _measured_slow() + (
    "tests/test_noxfile.py",  # a real nox per test
    "tests/test_bundle.py::test_a_wheel_bundle_is_built_with_an_interpreter_of_its_python",
    "tests/test_related.py::test_this_repository_offline",  # scans this repository against the shared mirrors
    "tests/test_body_check.py::test_docs_filings_re_render_unchanged_from_the_receipts",  # this repository's packs
    "tests/test_bootstrap.py::test_bootstrap_uses_the_harness_cache_location_and_reuses_the_unpacked_bundle",
    "tests/test_payloads.py::test_bundle_carries_a_pruned_payload_in_parts_joined_over_several_calls",
    "tests/test_sweep.py::test_a_sweep_run_again_skips_lanes_whose_receipt_is_current",
    "tests/test_sweep.py::test_gpu_lanes_run_at_once_on_disjoint_gpus_and_multi_gpu_lanes_wait",
    "tests/test_kernel_cache.py::test_a_bundle_carries_the_kernel_caches_of_its_builds_and_the_gpu_host_starts_warm",
    "tests/test_kernel_cache.py::test_a_carried_entry_of_another_driver_is_not_used_on_the_gpu_host",
    "tests/test_kernel_cache.py::test_another_driver_or_gpu_gets_another_entry",
    "tests/test_reliability_faults.py::test_a_cached_wheel_truncated_to_nothing_is_never_shipped_in_a_bundle",
    "tests/test_reliability_faults.py::test_a_relative_cache_builds_wheels",
)


# Tests of process-wide faults that a pytest-xdist worker disturbs (its execnet thread takes signals): 'nox -s tests'
# runs them after the rest, in one plain process.
SERIAL = (
    "tests/test_reliability_faults.py::test_a_signal_at_the_swap_waits_until_the_series_and_the_state_agree",
    "tests/test_reliability_round5_verdicts.py::test_a_receipt_an_import_stopped_midway_copied_is_recorded_by_the_next",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("network") or item.nodeid.startswith(SLOW):
            item.add_marker(pytest.mark.slow)
        if item.nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)
