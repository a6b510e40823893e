"""``harness list``: one row per pack (``--json`` for machines)."""

from __future__ import annotations

import json

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.lane import receipts

JSON_SCHEMA = 1


def register(sub) -> None:
    p = sub.add_parser("list", help="table of packs: target, kind, state, lanes, latest verdicts")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout (keys: docs/cli.md)")
    _args.output_format(p)
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    rows: list[dict] = []
    for pack in sorted(ctx.tracking.packs.values(), key=lambda p: p.id):  # by pack, not file order
        latest = receipts.latest_by_lane(ctx.root, pack.target, pack.id)  # the one rule, as status and [verdicts]
        rows.append({
            "id": pack.id, "title": pack.title, "target": pack.target, "kind": pack.kind, "class": pack.cls,
            "state": pack.state, "depends_on": list(pack.depends_on),
            "lanes": [{"name": lane.name, "base": lane.base, "patched": lane.patched, "expect": lane.expect,
                       "verdict": latest[lane.name].verdict.value if lane.name in latest else "not run"}
                      for lane in pack.lanes],
        })
    if args.json:
        ui.out.file.write(json.dumps({"schema": JSON_SCHEMA, "packs": rows}, indent=2) + "\n")
        return 0
    # a table gives each lane a line of its own, never broken inside (a lane name wrapped mid-word at 120 columns);
    # piped, one line per pack as before
    sep = ", " if ui.plain(args.format) else "\n"
    ui.tabular(("pack", "target", "kind", "state", "depends on", "lanes: latest verdict", "title"),
               ((r["id"], r["target"], r["kind"], r["state"], ", ".join(r["depends_on"]) or "-",
                 sep.join(f"{lane['name']}: {lane['verdict']}" for lane in r["lanes"]) or "-", r["title"])
                for r in rows), fmt=args.format, whole=("lanes: latest verdict",))
    return 0
