"""``harness list``: one row per pack."""

from __future__ import annotations

from rich.table import Table

from harness import ui
from harness.commands import _args
from harness.commands._context import context


def register(sub) -> None:
    p = sub.add_parser("list", help="table of packs: target, kind, state, lanes, latest verdicts")
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    table = Table()
    for col in ("pack", "target", "kind", "state", "depends on", "lanes: latest verdict", "title"):
        table.add_column(col)
    for pack in ctx.tracking.packs.values():
        validation = ctx.tracking.doc["packs"][pack.id].get("validation", {})
        lanes = ", ".join(f"{lane.name}: {validation.get(lane.name, {}).get('verdict', 'not run')}"
                          for lane in pack.lanes) or "-"
        table.add_row(pack.id, pack.target, pack.kind, pack.state, ", ".join(pack.depends_on) or "-", lanes,
                      pack.title)
    ui.out.print(table)
    return 0
