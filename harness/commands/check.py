"""``harness check``: validate everything a run relies on; optionally apply every series."""

from __future__ import annotations

from harness import landing, pins, series, ui
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
    ui.data(f"tracking.toml: {len(ctx.tracking.packs)} packs; manifests: {len(pins.list_targets(ctx.root))}; "
                 f"patches: {n_patches} with valid Upstream-Status")
    if not args.apply:
        return 0
    for check in landing.apply_checks(ctx, keep_going=False):  # the first failure raises (exit 5)
        ui.data(f"pack {check.pack}: {check.patches} patch(es) apply on {check.target} {check.base}")
    return 0
