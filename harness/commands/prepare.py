"""``harness prepare PACK``: build and import-check each lane without running the reproducer."""

from __future__ import annotations

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.lane import lanes


def register(sub) -> None:
    p = sub.add_parser("prepare", help="materialize, apply, build and import-check a pack's lanes (no reproducer)")
    p.add_argument("pack")
    p.add_argument("--lane", action="append", default=[])
    p.add_argument("--no-import-check", action="store_true")
    _args.source(p)
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    pack = ctx.tracking.pack(args.pack)
    chosen = [pack.lane(n) for n in args.lane] if args.lane else list(pack.lanes)
    if not chosen:
        ui.warn(f"pack {pack.id} has no lanes in tracking.toml yet")
    for lane in chosen:
        prep = lanes.prepare(ctx, pack, lane, import_check=not args.no_import_check)
        ui.data(f"{pack.id} {lane.name}: build {prep.build.key[:12]} at {prep.build.site}")
    return 0
