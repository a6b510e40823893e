"""The real megatron-lm bases: the PyPI sdist and the git commits (main, dev) from shared/mirrors.

Needs PyPI and ../shared/mirrors (git bases are skipped without it). Each pack with patches under
patches/megatron-lm/ must apply on every base it declares (landing.bases_to_check), and every file
its own patches touch must be one the pack lists.
Building and running the reproducers is left to ``nox -s megatron_pack16`` (.ci/run).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from harness.base.store import Store
from harness.filing import landing
from harness.lane import series
from harness.lane.context import Context, Options
from harness.lane.tracking import Tracking
from harness.upstream import git, pins

ROOT = Path(__file__).resolve().parent.parent
MIRRORS = ROOT.parent / "shared" / "mirrors"
TARGET = "megatron-lm"

pytestmark = pytest.mark.network


def _packs_with_series() -> list[str]:
    """Read at collection, in every worker of every run: the standard library's parser (tomlkit's Tracking.load
    takes seconds on a loaded host, and this module's tests are the slow ones)."""
    packs = tomllib.loads((ROOT / "tracking.toml").read_text())["packs"]
    return [pid for pid, table in packs.items()
            if table.get("target") == TARGET and series.load_series(ROOT, TARGET, pid)]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    return Store(tmp_path_factory.mktemp("megatron-cache"))


def test_there_are_megatron_series_to_check():
    assert "16" in _packs_with_series()


@pytest.mark.parametrize("pid", _packs_with_series())
def test_series_applies_on_its_bases(store, pid):
    tracking = Tracking.load(ROOT)
    pack = tracking.pack(pid)
    manifest = pins.load_manifest(ROOT, TARGET)
    ctx = Context(root=ROOT, tracking=tracking, store=store,
                  options=Options(git_mirrors=(MIRRORS,) if MIRRORS.is_dir() else ()))
    for base in landing.bases_to_check(ctx, pack):
        if manifest.base(base).git is not None and not MIRRORS.is_dir():
            continue
        patches = series.series_for(tracking, ROOT, pack, base)
        assert all(p.upstream_status for p in patches)
        tree = series.apply(ctx.materialize(manifest, base), patches, store)
        repo = git.repo(tree.path)
        subjects = repo.run("log", "--reverse", "--format=%s", "pristine..HEAD").splitlines()
        assert subjects == [p.subject for p in patches]
        own = sum(1 for p in patches if p.pack == pid)
        changed = set(repo.run("diff", f"HEAD~{own}", "HEAD", "--name-only").split())
        assert changed and changed <= set(pack.files), f"pack {pid} touches files it does not list: {changed}"
