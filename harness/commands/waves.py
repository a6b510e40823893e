"""``harness waves``: proposed filing waves of 2-4 packs per target repository."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from harness import landing, ui
from harness.commands import _args
from harness.commands._context import context


def register(sub) -> None:
    p = sub.add_parser("waves", help="propose filing waves (2-4 packs per target repo): crash fixes, comments "
                                      "on open threads, other fixes, refactors, bug reports")
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    waves, skipped = landing.plan_waves(ctx.tracking)
    table = Table(title="filing waves")
    for col in ("wave", "target", "pack", "kind", "class", "category", "depends on", "title"):
        table.add_column(col)
    for wave in waves:
        for i, p in enumerate(wave.packs):
            table.add_row(str(wave.number) if i == 0 else "", wave.target if i == 0 else "", p.id, p.kind,
                          p.cls or "-", landing.CATEGORIES[landing.category(p)], ", ".join(p.depends_on) or "-",
                          escape(p.title))
        if wave.note:
            table.add_row("", "", "", "", "", f"[dim]{wave.note}[/]", "", "")
    ui.out.print(table)
    if skipped:
        ui.out.print("not in any wave:")
        for s in skipped:
            ui.out.print(f"  {s.pack.id} ({s.pack.target}): {s.reason}", markup=False)
    return 0
