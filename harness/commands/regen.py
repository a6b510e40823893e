"""``harness regen PACK``: rewrite patches/<target>/<pack>/ from the edit checkout's commits."""

from __future__ import annotations

from harness.commands import _args
from harness.commands._context import context
from harness.filing import edit
from harness.lane import series


def register(sub) -> None:
    p = sub.add_parser("regen", help="regenerate a pack's patch files from its edit checkout; print what changed",
                       description="Format the pack's commits of the edit checkout with git format-patch "
                                   "(deterministic: unchanged commits give byte-identical files), diff them "
                                   "against patches/<target>/<pack>/ and replace the series atomically. "
                                   "Refused while the checkout has uncommitted changes.")
    p.add_argument("pack")
    p.add_argument("--dir", type=_args.path, default=None,
                   help="the edit checkout (default: where 'harness edit' puts it)")
    p.add_argument("--dry-run", action="store_true", help="print the difference, write nothing")
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    pack = ctx.tracking.pack(args.pack)
    checkout = (args.dir or edit.default_dir(ctx, pack)).resolve()
    result = edit.regenerate(ctx, pack, checkout, dry_run=args.dry_run)
    edit.print_result(result, series.series_dir(ctx.root, pack.target, pack.id))
    return 0
