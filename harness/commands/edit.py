"""``harness edit PACK``: a checkout with the pack's series (and its dependencies') as commits."""

from __future__ import annotations

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.filing import edit


def register(sub) -> None:
    p = sub.add_parser("edit", help="check out a pack's series as commits on a branch, to edit and 'harness regen'",
                       description="Clone the pack's base and apply its same-target dependencies' series, then "
                                   "its own, one commit per patch. Edit with plain git (commit --amend, "
                                   "rebase -i, new commits), then run 'harness regen PACK'.")
    p.add_argument("pack")
    p.add_argument("--base", default=None, help="base name (default: the pack's base, else the target's default)")
    p.add_argument("--dir", type=_args.path, default=None,
                   help="where to put the checkout (default: <cache>/edit/<target>/<pack>)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing checkout at that place (refused if it has uncommitted changes)")
    _args.artifacts(p)
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    pack = ctx.tracking.pack(args.pack)
    dest = (args.dir or edit.default_dir(ctx, pack)).resolve()
    state = edit.start(ctx, pack, args.base, dest, force=args.force)
    for r in state.ranges:
        n = len(r.patches)
        who = "pack" if r.pack == pack.id else "dependency"
        ui.info(f"{who} {r.pack}: {n} commit(s) {r.start[:12]}..{r.end[:12]}")
    ui.info(f"edit checkout of pack {pack.id} on {state.target} {state.base} (branch pack-{pack.id}); when done: "
            f"harness regen {pack.id}" + (f" --dir {dest}" if args.dir else ""))
    ui.data(str(dest))  # the only line on stdout: cd "$(harness edit 09)"
    return 0
