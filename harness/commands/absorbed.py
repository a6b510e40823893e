"""``harness absorbed [TARGET] [--to BASE]``: the weekly upstream diff."""

from __future__ import annotations

from rich.table import Table

from harness import absorbed, rebase, ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import DriftError, UsageError


def register(sub) -> None:
    p = sub.add_parser("absorbed", help="which packs upstream already has, which still differ, and untracked drift",
                       description="At BASE (default: each target's default base), a pack whose patches all "
                                   "reverse-apply is absorbed upstream: the tracking.toml change that retires it "
                                   "is printed (written only with --retire; its lanes stay as regression "
                                   "coverage). Packs whose series still changes the base are listed. A file under "
                                   "patches/ or overlays/ that no pack accounts for is untracked drift: exit 11.")
    p.add_argument("target", nargs="?", default=None, help="one target (default: every target with patches)")
    p.add_argument("--to", metavar="BASE", default=None, help="base name or version (default: the default base)")
    p.add_argument("--retire", action="store_true", help="write the proposed tracking.toml changes")
    _args.artifacts(p)
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    targets = [args.target] if args.target else sorted({p.target for p in ctx.tracking.packs.values()})
    if args.to and not args.target:
        raise UsageError("--to needs a TARGET (bases are per target)")
    drift = absorbed.scan_drift(ctx.root, ctx.tracking, args.target)
    skip = absorbed.drifted_packs(ctx.root, drift)
    for pid in sorted(skip):
        ui.warn(f"pack {pid}: not checked, its series directory holds untracked drift")
    table = Table(title="upstream diff", title_justify="left")
    for col in ("pack", "target", "base", "state", "detail"):
        table.add_column(col)
    proposals = []
    for target in targets:
        manifest = ctx.manifest(target)
        base = rebase.resolve_base(manifest, args.to) if args.to else manifest.default_base
        for v in absorbed.check(ctx, manifest, base, skip=skip):
            r = v.report
            if v.state == "absorbed":
                state = "[cyan]absorbed[/]"
                detail = ("already retired in tracking.toml" if r.pack.state == "absorbed"
                          else "every patch reverse-applies: retire the pack, keep its reproducer as "
                               "regression coverage")
                if v.proposal:
                    proposals.append((r.pack.id, manifest.base(base).version, v.proposal))
            elif v.state == "superseded":
                state = "[cyan]superseded[/]"
                detail = (f"series {r.status}" + "".join(f"; {x.patch}: {x.status}" for x in r.results)
                          + f"; tracking.toml: absorbed at {(r.pack.absorbed or {}).get('version', '?')} by another "
                            f"change; {v.evidence}")
            else:
                state = "differs"
                detail = f"series {r.status}" + (f" ({r.blocked_by})" if r.blocked_by else "") + \
                    "".join(f"; {x.patch}: {x.status}" for x in r.results)
                if r.pack.state == "absorbed":
                    detail += (f"; tracking.toml says absorbed at {(r.pack.absorbed or {}).get('version', '?')}, "
                               "but the series differs and no passing BUG_ABSENT lane on this base backs it")
            table.add_row(r.pack.id, target, base, state, detail)
    ui.out.print(table)
    for pid, version, diff in proposals:
        ui.out.print(f"\npack {pid} is absorbed upstream at {version}; the tracking.toml change:\n")
        ui.out.print(diff, markup=False, highlight=False)
        if args.retire:
            absorbed.retire(ctx.tracking, pid, version)
            ui.out.print(f"written: pack {pid} state = \"absorbed\" (lanes kept)")
    if proposals and not args.retire:
        ui.out.print("not written; pass --retire to apply these changes")
    if drift:
        for d in drift:
            ui.out.print(f"[red]untracked drift[/]: {d.path.relative_to(ctx.root)}: {d.why}")
        raise DriftError(f"untracked drift: {len(drift)} path(s) under patches/ or overlays/ with no pack, first "
                         f"{drift[0].path.relative_to(ctx.root)} ({drift[0].why})",
                         hint="add the pack to tracking.toml, rename the file to NNNN-slug.patch, or remove it")
    return 0
