"""The real megatron-core pin: download from PyPI, verify sha256, apply every megatron-lm series.

Needs PyPI. Each pack with patches under patches/megatron-lm/ must apply on the base its
lanes (or its ``base``) name, and every file its patches touch must be one the pack lists.
Building and running the reproducers is left to ``nox -s megatron_pack16`` (.ci/run).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import git, lanes, pins, series
from harness.context import Context
from harness.store import Store
from harness.tracking import Tracking

ROOT = Path(__file__).resolve().parent.parent
TARGET = "megatron-lm"

pytestmark = pytest.mark.network


def _packs_with_series() -> list[str]:
    tracking = Tracking.load(ROOT)
    return [p.id for p in tracking.packs.values()
            if p.target == TARGET and series.load_series(ROOT, TARGET, p.id)]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    return Store(tmp_path_factory.mktemp("megatron-cache"))


def test_there_are_megatron_series_to_check():
    assert "16" in _packs_with_series()


@pytest.mark.parametrize("pid", _packs_with_series())
def test_series_applies_on_its_base(store, pid):
    tracking = Tracking.load(ROOT)
    pack = tracking.pack(pid)
    manifest = pins.load_manifest(ROOT, TARGET)
    bases = sorted({lane.base for lane in pack.lanes if lane.patched} or {pack.base or manifest.default_base})
    patches = lanes.series_for(Context(root=ROOT, tracking=tracking, store=store), pack)
    assert all(p.upstream_status for p in patches)
    for base in bases:
        checkout = pins.materialize(manifest, base, store)
        tree = series.apply(checkout, patches, store)
        repo = git.repo(tree.path)
        assert [c.summary for c in repo.iter_commits("pristine..HEAD")][::-1] == [p.subject for p in patches]
        changed = set(repo.git.diff("pristine", "HEAD", "--name-only").split())
        assert changed and changed <= set(pack.files), f"pack {pid} touches files it does not list: {changed}"
