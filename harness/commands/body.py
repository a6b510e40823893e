"""``harness body``: render and lint a pack's filing text; with --post (and a typed pack id), post it."""

from __future__ import annotations

import sys
from pathlib import Path

from harness import filing, readiness, ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import LintError, UsageError


def register(sub) -> None:
    p = sub.add_parser("body", help="render the pack's issue / PR / comment text from templates/ and its receipts, "
                                     "lint it, print the gh command; --post files it after a typed confirmation")
    p.add_argument("pack", help="pack id (09, pack09, liger_pack09)")
    p.add_argument("-o", "--out", type=Path, default=None,
                   help="where to write the body (default: dist/filing/<pack>-<kind>.md)")
    p.add_argument("--head", default=None, metavar="OWNER:BRANCH", help="head branch of a PR (kind pr)")
    p.add_argument("--post", action="store_true",
                   help="run the gh command; asks you to type the pack id, refuses without a terminal")
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    pack = ctx.tracking.pack(args.pack)
    body = filing.render(ctx.root, ctx.tracking, pack)
    ui.out.print(body, markup=False, end="")
    findings = filing.lint(body)
    if findings:
        for f in findings:
            ui.err.print(f.describe(f"pack {pack.id} body"), markup=False)
        raise LintError(f"pack {pack.id}: the body failed lint ({len(findings)} finding(s)); "
                        "nothing was written or posted")
    out = args.out or ctx.root / "dist" / "filing" / f"{pack.id}-{pack.kind}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(body, encoding="utf-8")
    argv = filing.gh_command(ctx.root, pack, out, args.head)
    state = readiness.readiness(ctx.root, ctx.tracking, pack)
    ui.err.print(f"body: {out} (lint clean)")
    ui.err.print(f"readiness: {state.why()}")
    ui.err.print("command:", markup=False)
    ui.out.print(filing.show_command(argv), markup=False)
    if not args.post:
        return 0
    if not state.ready:
        raise UsageError(f"pack {pack.id} is not ready to post: {state.why()}")
    if not sys.stdin.isatty():
        raise UsageError("refusing to post: stdin is not a terminal (a person types the pack id to confirm)")
    entry = filing.post(ctx.root, ctx.tracking, pack, argv, body, input)
    ui.out.print(f"posted pack {pack.id}: {entry.get('url') or '(no URL printed by gh)'}; "
                 f"recorded in [packs.{pack.id}.filing] (decided by {entry['decided_by']})", markup=False)
    return 0
