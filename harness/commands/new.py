"""``harness new PACK --target T``: scaffold a pack (tracking entry, series directory, reproducer from the kit)."""

from __future__ import annotations

from harness import scaffold, ui
from harness.commands import _args
from harness.commands._context import context
from harness.tracking import KINDS


def register(sub) -> None:
    p = sub.add_parser("new", help="scaffold a pack: tracking.toml entry, series directory, reproducer from the kit",
                       description="Adds [packs.NN] to tracking.toml (state planned; a bug lane on the base and, "
                                   "for kinds that carry a patch, a fix lane), creates patches/<target>/NN/ and "
                                   "writes repros/<target>/packNN_<slug>.py from repros/_lane.py's kit. All or "
                                   "nothing. Next: write the reproducer's check, then 'harness edit NN' to make "
                                   "the series.")
    p.add_argument("pack", help="the new pack's id, e.g. 24")
    p.add_argument("--target", required=True, help="an upstream/<target>.toml, e.g. mamba")
    p.add_argument("--title", default=None, help="one line: what breaks (default: 'TODO: title')")
    p.add_argument("--kind", default="pr", choices=KINDS, help="what will be filed (default: %(default)s)")
    p.add_argument("--base", default=None, help="the base its lanes run on (default: the manifest's default_base)")
    p.add_argument("--requires", default="cuda", choices=("cpu", "cuda"),
                   help="what its lanes need (default: %(default)s)")
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    made = scaffold.new_pack(ctx.tracking, args.pack, args.target, args.title or "TODO: title", args.kind,
                             args.base, args.requires)
    ui.data(str(made.reproducer.relative_to(ctx.root)))
    ui.info(f"pack {made.pack}: [packs.{made.pack}] in tracking.toml (lanes {', '.join(made.lanes)}), "
            f"{made.series_dir.relative_to(ctx.root)}/, {made.reproducer.relative_to(ctx.root)}")
    ui.info(f"next: write check() in the reproducer; 'harness edit {made.pack}' to make the series; "
            f"'harness run {made.pack}'")
    return 0
