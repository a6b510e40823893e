"""``harness export PACK``: the pack's series as filed against an upstream base (plain ``git am``)."""

from __future__ import annotations

import json

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.filing import export


def register(sub) -> None:
    p = sub.add_parser("export", help="write a pack's series for filing: signed as you, checked with upstream's tools",
                       description="Apply the pack's series for BASE (its ported series where one exists) to "
                                   "that base, write it back as format-patch files without this repository's "
                                   "trailers (Upstream-Status, Pack), authored by you (and signed off, where the "
                                   "upstream asks for the DCO), and check that they apply with plain 'git am' to "
                                   "a fresh clone of the base. Then run the upstream's own formatters and linters "
                                   "(its [policy] checks, installed from PyPI at their pinned versions) on the "
                                   "lines the series adds or changes, or on whole changed files where its CI "
                                   "runs them so; a finding the series introduces fails the export (one "
                                   "file:line per finding) unless --report-only, and so does a file that fails "
                                   "at the base already without the pack's recorded decision "
                                   "(pack.toml's [[lint_at_base]]). Prints the output directory.")
    p.add_argument("pack")
    p.add_argument("--base", default=None,
                   help="the upstream base to file against (default: the pack's filing base, e.g. main)")
    p.add_argument("-o", "--output", type=_args.path, default=None,
                   help="directory to write (replaced only if an export wrote it; default dist/export/<pack>-<base>/)")
    p.add_argument("--identity", default=None, metavar='"NAME <EMAIL>"',
                   help="who files the series: author and Signed-off-by (default: your git config's "
                        "user.name and user.email)")
    p.add_argument("--report-only", action="store_true",
                   help="list the upstream checks' findings but write the series and exit 0 anyway")
    p.add_argument("--json", action="store_true", help="print what was written and the checks' findings as JSON")
    _args.artifacts(p)
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    pack = ctx.tracking.pack(args.pack)
    base = args.base or pack.filing_base
    out = args.output or ctx.root / "dist" / "export" / f"{pack.id}-{base}"
    result = export.export(ctx, pack, base, out, identity=args.identity, report_only=args.report_only)
    if args.json:
        ui.out.print_json(json.dumps({"pack": result.pack, "target": result.target, "base": result.base,
                                      "commit": result.commit, "files": [str(f) for f in result.files],
                                      "stacked_on": list(result.stacked_on), "tree": result.tree,
                                      "author": str(result.identity), "identity_from": result.identity.source,
                                      "signed_off": result.signed_off, **result.checks.describe(),
                                      "lint_at_base": None if result.lint_at_base is None else {
                                          "files": list(result.lint_at_base.files),
                                          "decision": result.lint_at_base.decision,
                                          "reason": result.lint_at_base.reason}}))
        return 0
    if result.stacked_on:
        ui.warn(f"pack {pack.id}'s series needs pack(s) {', '.join(result.stacked_on)} underneath on {base}; "
                "their patches come first in the export")
    for finding in result.checks.findings:
        ui.warn(str(finding))
    for finding in result.checks.at_base:
        ui.warn(f"{finding} (fails at the base too: not the series')")
    if result.lint_at_base is not None:
        ui.note(f"{', '.join(result.lint_at_base.files)} fail the upstream's CI checks at {result.base} already; "
                f"decision: {result.lint_at_base.decision} ({result.lint_at_base.reason})")
    ran = [r.name for r in result.checks.ran if r.files]
    checks = (", ".join(ran) if ran else "none on these files" if result.checks.ran else "none recorded")
    signed = " and signed off" if result.signed_off else ""
    ui.note(f"{len(result.files)} patch(es) for {result.target} {result.base} ({result.commit[:12]}), authored"
            f"{signed} by {result.identity}; upstream checks: {checks} (and whitespace), "
            f"{len(result.checks.findings)} finding(s); apply with: git am {out}/*.patch")
    ui.out.print(str(out), markup=False, highlight=False)
    return 0
