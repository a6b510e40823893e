"""``harness apply PACK``: the base with the pack's series (and its dependencies') applied."""

from __future__ import annotations

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.lane import series


def register(sub) -> None:
    p = sub.add_parser("apply", help="apply a pack's series (with its dependencies') on a base; print the tree")
    p.add_argument("pack")
    p.add_argument("--base", default=None, help="base name (default: the pack's base, else the target's default)")
    _args.artifacts(p)
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    pack = ctx.tracking.pack(args.pack)
    manifest = ctx.manifest(pack.target)
    checkout = ctx.materialize(manifest, args.base or pack.base)
    patches = series.series_for(ctx.tracking, ctx.root, pack, checkout.base.name)
    if not patches:
        ui.warn(f"pack {pack.id} has no patches; the tree is the pristine base")
        ui.data(str(checkout.path))
        return 0
    tree = series.apply(checkout, patches, ctx.store)
    ui.info(f"{len(patches)} patch(es) applied on {manifest.target} {checkout.base.name}:")
    ui.data(str(tree.path))
    return 0
