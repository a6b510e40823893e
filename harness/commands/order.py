"""``harness order``: the landing order, plus the checks that keep depends_on honest."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from harness import landing, ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import Exit, worst


def register(sub) -> None:
    p = sub.add_parser("order", help="landing order across targets; check each series applies with only its "
                                      "declared dependencies, and that overlapping packs are ordered")
    p.add_argument("--no-apply", action="store_true",
                   help="skip applying series (no artefact download); only the graph and hunk overlaps")
    _args.artifacts(p)
    _args.common(p)


def main(args) -> int:
    ctx = context(args)  # loading rejects unknown dependencies and cycles
    order = landing.landing_order(ctx.tracking)
    table = Table(title="landing order")
    for col in ("#", "pack", "target", "kind", "class", "state", "depends on", "title"):
        table.add_column(col)
    for i, p in enumerate(order, 1):
        table.add_row(str(i), p.id, p.target, p.kind, p.cls or "-", p.state, ", ".join(p.depends_on) or "-",
                      escape(p.title))
    ui.out.print(table)
    codes = [Exit.OK]
    if not args.no_apply:
        for check in landing.apply_checks(ctx):
            if check.error:
                codes.append(Exit.APPLY)
                ui.out.print(f"[red]FAIL[/] pack {check.pack}: series does not apply on {check.target} {check.base} "
                             f"with only its declared dependencies: {escape(check.error)}")
            else:
                ui.out.print(f"ok   pack {check.pack}: {check.patches} patch(es) apply on {check.target} "
                             f"{check.base} with only its declared dependencies")
    found = landing.overlaps(ctx.root, ctx.tracking)
    for ov in found:
        codes.append(Exit.USAGE)
        ui.out.print(f"[red]OVERLAP[/] {escape(ov.describe())}; add a depends_on")
    if not found:
        ui.out.print("no two unordered packs touch the same lines")
    return int(worst(codes))
