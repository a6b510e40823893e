"""``harness provenance [TARGET]``: does each release artefact equal the upstream tree of its tag?"""

from __future__ import annotations

import json

from rich.markup import escape

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.upstream import pins
from harness.watch import provenance


def register(sub) -> None:
    p = sub.add_parser("provenance", help="compare release artefacts with the git tree of their tag commit",
                       description="For each release base that records the upstream commit of its tag, fetch "
                                   "that commit (mirrors first) and list every file where the artefact and the "
                                   "tree differ: files only in the artefact (generated packaging files, compiled "
                                   "libraries), files of the package directories only in git, files with other "
                                   "bytes (version stamps). Bases with no recorded commit are listed with the "
                                   "reason. Exit 0 once the comparison ran, whatever it found.")
    p.add_argument("target", nargs="?", help="a target (default: every target)")
    p.add_argument("--base", default=None, help="one release base (default: every release base)")
    p.add_argument("--json", action="store_true", help="print the results as JSON (a list, one object per base)")
    p.add_argument("--limit", type=int, default=50, metavar="N",
                   help="list at most N differences per base in the text output (0: all; --json lists all)")
    _args.artifacts(p)
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    results = []
    for target in [args.target] if args.target else pins.list_targets(ctx.root):
        manifest = ctx.manifest(target)
        names = [args.base] if args.base else [b.name for b in manifest.bases.values() if b.artifact is not None]
        results += [provenance.check(ctx, manifest, name) for name in names]
    if args.json:
        ui.out.print_json(json.dumps([r.as_json() for r in results]))
        return 0
    for r in results:
        head = f"{r.target} {r.base}"
        if not r.compared:
            ui.out.print(escape(f"{head}: not compared: {r.note}"))
            continue
        verdict = ("package files identical" if r.package_identical
                   else "every tag file of the package is unchanged; the artefact adds files" if r.tag_files_unchanged
                   else "package files DIFFER from the tag")
        ui.out.print(escape(f"{head} vs {r.commit[:12]} ({r.commit_source}): {verdict} "
                            f"({', '.join(r.package_dirs) or 'no package directory found'}); "
                            f"{r.identical_files} identical file(s); differences: "
                            f"{', '.join(f'{n} {k}' for k, n in r.counts().items()) or 'none'}"))
        shown = r.differences if args.limit == 0 else r.differences[:args.limit]
        for d in shown:
            ui.out.print(escape(f"  {d.kind:16} {d.path}{'  (package)' if d.in_package else ''}"))
        if len(shown) < len(r.differences):
            ui.out.print(f"  ... {len(r.differences) - len(shown)} more (--limit 0 or --json lists all)")
    return 0
