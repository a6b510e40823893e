"""``harness check``: validate everything a run relies on; optionally apply every series."""

from __future__ import annotations

import tempfile
from pathlib import Path

from harness import lanes, pins, series, ui
from harness.commands import _args
from harness.commands._context import context


def register(sub) -> None:
    p = sub.add_parser("check", help="validate tracking.toml, manifests and patch headers; with --apply, "
                                      "apply every series on its bases")
    p.add_argument("--apply", action="store_true", help="also apply every pack's series on each base its lanes use")
    _args.artifacts(p)
    _args.common(p)


def main(args) -> int:
    ctx = context(args)  # loading validates tracking.toml and the manifests it names
    for target in pins.list_targets(ctx.root):
        pins.load_manifest(ctx.root, target)
    n_patches = 0
    for pack in ctx.tracking.packs.values():
        n_patches += len(series.load_series(ctx.root, pack.target, pack.id))  # parses headers
    ui.out.print(f"tracking.toml: {len(ctx.tracking.packs)} packs; manifests: {len(pins.list_targets(ctx.root))}; "
                 f"patches: {n_patches} with valid Upstream-Status")
    if not args.apply:
        return 0
    for pack in ctx.tracking.packs.values():
        patches = lanes.series_for(ctx, pack)
        if not series.load_series(ctx.root, pack.target, pack.id):
            continue
        manifest = ctx.manifest(pack.target)
        bases = sorted({lane.base for lane in pack.lanes if lane.patched} or {pack.base or manifest.default_base})
        for base in bases:
            checkout = pins.materialize(manifest, base, ctx.store, ctx.artifacts)
            with tempfile.TemporaryDirectory(prefix="patchlane-check-") as tmp:
                series.check_applies(checkout, patches, Path(tmp) / "tree")
            ui.out.print(f"pack {pack.id}: {len(patches)} patch(es) apply on {pack.target} {base}")
    return 0
