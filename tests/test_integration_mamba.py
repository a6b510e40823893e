"""The real mamba-ssm pin: download the 2.3.2.post1 sdist, apply packs 04, 05, 07, build the overlay.

Needs PyPI (network). The patched modules are always byte-compiled; they are imported (with the
overlay's stubs) only where torch, triton and tilelang are installed, e.g. ``nox -s mamba_pack05``'s
environment (requirements/lane-mamba.txt).
"""

from __future__ import annotations

import importlib.util
import py_compile
import sys
from pathlib import Path

import pytest

from harness.base.store import Store
from harness.lane import builds, lanes, series
from harness.lane.context import Context
from harness.lane.tracking import Tracking
from harness.upstream import pins

ROOT = Path(__file__).resolve().parent.parent
BASE = "2.3.2.post1"

pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    return Store(tmp_path_factory.mktemp("mamba-cache"))


@pytest.fixture(scope="module")
def ctx(store) -> Context:
    return Context(root=ROOT, tracking=Tracking.load(ROOT), store=store)


@pytest.mark.parametrize("pack", ["04", "05", "07"])
def test_series_applies_on_the_pin_and_the_overlay_builds(ctx, store, pack):
    tracked = ctx.tracking.pack(pack)
    manifest = ctx.manifest("mamba")
    patches = lanes.series_for(ctx, tracked)
    assert [p.pack for p in patches] == {"04": ["04"], "05": ["04", "05"], "07": ["04", "05", "07"]}[pack]
    assert all(p.upstream_status == "Pending" for p in patches)
    checkout = pins.materialize(manifest, BASE, store)
    tree = series.apply(checkout, patches, store)
    for f in tracked.files:
        assert (tree.path / f).read_text() != (checkout.path / f).read_text(), f"{f} unchanged by the series"
    build = builds.build(tree.path, tree.key, manifest, store, f"mamba {BASE} + {pack}")
    assert set(build.stubs) >= {"selective_scan_cuda"}
    assert build.describe()["stubbed_modules"] == sorted(manifest.stubs)
    for f in tracked.files:
        py_compile.compile(str(build.site / f), doraise=True)
    if all(importlib.util.find_spec(m) for m in ("torch", "triton", "tilelang")):
        modules = ["mamba_ssm"] + lanes._pack_modules(tracked, manifest.import_names)
        found = builds.import_check(build, modules, sys.executable, pack)
        assert found["stub:selective_scan_cuda"] == "stub"
