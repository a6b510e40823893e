"""The real liger-kernel pins: download from PyPI, verify sha256, apply pack 09's series.

Needs PyPI (the only network CI has). The download cache is shared across the
module so each sdist is fetched once.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from harness.base.store import Store
from harness.errors import Exit
from harness.lane import lanes, series
from harness.lane.context import Context
from harness.lane.tracking import Tracking
from harness.upstream import git, pins

ROOT = Path(__file__).resolve().parent.parent
FLCE = "src/liger_kernel/ops/fused_linear_cross_entropy.py"

pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    return Store(tmp_path_factory.mktemp("liger-cache"))


@pytest.fixture(scope="module")
def manifest() -> pins.Manifest:
    return pins.load_manifest(ROOT, "liger-kernel")


@pytest.mark.parametrize("base", ["0.8.1", "0.8.5"])
def test_real_pin_materializes_with_its_pinned_sha(manifest, store, base):
    checkout = pins.materialize(manifest, base, store)
    assert checkout.base.artifact.sha256 == manifest.bases[base].artifact.sha256
    assert f'version = "{base}"' in (checkout.path / "pyproject.toml").read_text()
    assert (checkout.path / FLCE).is_file()
    assert git.is_clean(git.repo(checkout.path))


def test_pack09_series_applies_on_0_8_1_and_changes_the_backward(manifest, store):
    tracking = Tracking.load(ROOT)
    ctx = Context(root=ROOT, tracking=tracking, store=store)
    patches = lanes.series_for(ctx, tracking.pack("09"))
    assert patches and all(p.upstream_status for p in patches)
    assert all(FLCE in p.files for p in patches)
    checkout = pins.materialize(manifest, "0.8.1", store)
    tree = series.apply(checkout, patches, store)
    repo = git.repo(tree.path)
    subjects = repo.run("log", "--reverse", "--format=%s", "pristine..HEAD").splitlines()
    assert subjects == [p.subject for p in patches]
    diff = repo.run("diff", "pristine", "HEAD", "--", FLCE)
    assert diff and "grad_output" in diff
    pristine = (checkout.path / FLCE).read_text()
    assert (tree.path / FLCE).read_text() != pristine


def test_pack09_series_does_not_apply_on_the_current_pin(manifest, store):
    """0.8.5 carries upstream's own fix (#1298): our series is superseded there, which the lane reflects."""
    tracking = Tracking.load(ROOT)
    ctx = Context(root=ROOT, tracking=tracking, store=store)
    patches = lanes.series_for(ctx, tracking.pack("09"))
    checkout = pins.materialize(manifest, "0.8.5", store)
    with tempfile.TemporaryDirectory() as tmp, pytest.raises(series.SeriesError, match="pack 09"):
        series.check_applies(checkout, patches, Path(tmp) / "tree")


def test_workflows_on_the_real_pins(store, tmp_path, capsys):
    """edit + regen of pack 09 is a zero diff; at 0.8.5 the series conflicts, and rebase says the pack is
    superseded there (upstream fixed it differently, and the BUG_ABSENT lane backs it): exit 0, not 5."""
    from conftest import cli

    args = ["--root", str(ROOT), "--cache", str(store.root)]
    before = {p.name: p.read_bytes() for p in (ROOT / "patches" / "liger-kernel" / "09").iterdir()}
    assert cli("edit", "09", "--dir", str(tmp_path / "edit"), *args) == Exit.OK
    assert cli("regen", "09", "--dir", str(tmp_path / "edit"), "--dry-run", *args) == Exit.OK
    assert "unchanged" in capsys.readouterr().out
    assert cli("rebase", "liger-kernel", "--to", "0.8.5", *args) == Exit.OK
    captured = capsys.readouterr()
    row = next(ln for ln in captured.out.splitlines() if ln.startswith("09\t"))
    assert "superseded" in row and "conflict" in row and FLCE in captured.out
    assert "pack 09: superseded on 0.8.5" in captured.err
    assert cli("absorbed", "liger-kernel", "--to", "0.8.5", *args) == Exit.OK
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("09\t"))
    assert "superseded" in row and "regression-0.8.5" in out
    assert {p.name: p.read_bytes() for p in (ROOT / "patches" / "liger-kernel" / "09").iterdir()} == before
