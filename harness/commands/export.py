"""``harness export PACK``: the pack's series as filed against an upstream base (plain ``git am``)."""

from __future__ import annotations

import json

from harness import export, ui
from harness.commands import _args
from harness.commands._context import context


def register(sub) -> None:
    p = sub.add_parser("export", help="write a pack's series for filing: git am-able, without our trailers",
                       description="Apply the pack's series for BASE (its ported series where one exists) to "
                                   "that base, write it back as format-patch files without this repository's "
                                   "trailers (Upstream-Status, Pack), and check that they apply with plain "
                                   "'git am' to a fresh clone of the base. Prints the output directory.")
    p.add_argument("pack")
    p.add_argument("--base", default=None,
                   help="the upstream base to file against (default: the pack's filing base, e.g. main)")
    p.add_argument("-o", "--output", type=_args.path, default=None,
                   help="directory to write (replaced whole; default dist/export/<pack>-<base>/)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    _args.artifacts(p)
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    pack = ctx.tracking.pack(args.pack)
    base = args.base or pack.filing_base
    out = args.output or ctx.root / "dist" / "export" / f"{pack.id}-{base}"
    result = export.export(ctx, pack, base, out)
    if args.json:
        ui.out.print_json(json.dumps({"pack": result.pack, "target": result.target, "base": result.base,
                                      "commit": result.commit, "files": [str(f) for f in result.files],
                                      "stacked_on": list(result.stacked_on), "tree": result.tree}))
        return 0
    if result.stacked_on:
        ui.warn(f"pack {pack.id}'s series needs pack(s) {', '.join(result.stacked_on)} underneath on {base}; "
                "their patches come first in the export")
    ui.note(f"{len(result.files)} patch(es) for {result.target} {result.base} ({result.commit[:12]}); "
            f"apply with: git am {out}/*.patch")
    ui.out.print(str(out), markup=False, highlight=False)
    return 0
