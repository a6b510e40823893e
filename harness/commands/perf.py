"""``harness perf [PACK ...]``: each pack's performance claims, read from receipts (``--json`` for machines)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import Exit
from harness.filing import performance, table_cell

JSON_SCHEMA = 1


def register(sub) -> None:
    p = sub.add_parser(
        "perf", help="performance claims: value, base measured on, host, receipt, whether it is current",
        description="Each [[performance]] row of the packs' pack.toml files, resolved: the value is read from the "
                    "row's lane's latest receipt (never typed), the base is that lane's base (a release or an "
                    "upstream commit), and the claim is current when the receipt passed and still matches "
                    "today's pin, series, reproducer and helper modules. Exit 0 when every claim shown is "
                    "current, 1 (MISMATCH) otherwise: a stale or unreadable claim.")
    p.add_argument("packs", nargs="*", help="pack ids (default: every pack that declares a claim)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="machine-readable output on stdout (keys: docs/cli.md)")
    out.add_argument("--markdown", action="store_true", help="a Markdown table on stdout (docs/packs quotes it)")
    _args.output_format(p)
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    packs = [ctx.tracking.pack(p) for p in args.packs] if args.packs else \
        [p for p in ctx.tracking.packs.values() if p.performance]
    rows = [c for pack in packs for c in performance.claims(ctx, pack)]
    current = all(c.current for c in rows)
    if args.json:
        ui.out.file.write(json.dumps({"schema": JSON_SCHEMA, "claims": [c.as_json() for c in rows]}, indent=2) + "\n")
        return int(Exit.OK) if current else int(Exit.MISMATCH)
    if args.markdown:
        lines = ["| pack | claim | value | measured on | host | receipt |", "| --- | --- | --- | --- | --- | --- |"]
        for c in rows:
            value = c.result if c.problem is None else f"({c.problem})"
            value += f" (stale: {c.stale})" if c.stale else ""
            pin = f" ({c.base_pin[:10]})" if c.base_pin and len(c.base_pin) == 40 else ""
            where = Path(c.receipt).parent.name if c.receipt else "-"
            lines.append(f"| {c.pack} | {table_cell(c.label)} | {table_cell(value)} | {c.base}{pin} | "
                         f"{c.host or '-'} | `{where}` |")
        ui.out.file.write("\n".join(lines) + "\n")
        return int(Exit.OK) if current else int(Exit.MISMATCH)
    cells: list[list] = []
    for c in rows:
        cell = ui.text(c.result) if c.problem is None else ui.text(c.problem, "red")
        if c.stale:
            cell.append(f" (stale: {c.stale})", style="yellow")
        cells.append([c.pack, c.label, cell, c.base, c.host or "-", c.receipt or "-"])
    ui.tabular(("pack", "claim", "value", "base", "host", "receipt"), cells, fmt=args.format)
    return int(Exit.OK) if current else int(Exit.MISMATCH)
