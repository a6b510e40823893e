"""``harness regen PACK``: rewrite patches/<target>/<pack>/ from the edit checkout's commits."""

from __future__ import annotations

from harness.commands import _args
from harness.commands._context import context, find_root
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
    if not args.dry_run:
        _put_back_a_killed_swap(args)  # before the packs load: the pack's own file may be inside the backup
    ctx = context(args)
    pack = ctx.tracking.pack(args.pack)
    checkout = (args.dir or edit.default_dir(ctx, pack)).resolve()
    result = edit.regenerate(ctx, pack, checkout, dry_run=args.dry_run)
    edit.print_result(result, series.series_dir(ctx.root, pack.target, pack.id))
    return 0


def _put_back_a_killed_swap(args) -> None:
    """The series directory of ``args.pack`` put back from the backup a regen killed between its renames left,
    read from tracking.toml's [packs.NN] target alone (loading the packs would refuse the missing pack.toml)."""
    import tomllib

    from harness.base.regular import MAX_TOML_BYTES
    from harness.lane.tracking.model import normalize_id

    root = find_root(getattr(args, "root", None))
    try:
        if (root / "tracking.toml").stat().st_size > MAX_TOML_BYTES:
            return  # loading the packs refuses it, by its size
        packs = tomllib.loads((root / "tracking.toml").read_text(encoding="utf-8")).get("packs", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return  # loading the packs says what is wrong with the file
    pid = normalize_id(args.pack)
    target = packs.get(pid, {}).get("target") if isinstance(packs, dict) else None
    if isinstance(target, str) and target:
        edit.recover_killed_regen(pid, series.series_dir(root, target, pid))
