"""``harness body``: render and lint a pack's filing text and its reproducer; with --post, file them."""

from __future__ import annotations

import sys
from pathlib import Path

from harness import filing, readiness, ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import LintError, UsageError

DOCS_DIR = Path("docs") / "filings"


def register(sub) -> None:
    p = sub.add_parser(
        "body", help="render a pack's issue / PR / comment text and its self-contained reproducer, lint them, "
                     "print the gh command; --post files them after a typed confirmation",
        description="Renders templates/<kind>.md from the pack's patch (commit message, upstream file and line "
                    "at the base it is filed against), the evidence rows declared in tracking.toml (values read "
                    "from the latest receipts) and a single-file reproducer. stdout carries only the body; "
                    "the files written, readiness and the gh command go to stderr.")
    p.add_argument("pack", nargs="?", help="pack id (09, pack09, liger_pack09)")
    p.add_argument("-o", "--out", type=_args.path, default=None,
                   help="where to write the body (default: dist/filing/<pack>-<kind>.md; the reproducer goes "
                        "beside it)")
    p.add_argument("--head", default=None, metavar="OWNER:BRANCH", help="head branch of a PR (kind pr)")
    p.add_argument("--post", action="store_true",
                   help="run the gh command(s); asks you to type the pack id, refuses without a terminal")
    p.add_argument("--no-apply", action="store_true",
                   help="readiness from a cached apply check only (no download of the filing base)")
    p.add_argument("--all-docs", action="store_true",
                   help=f"render every pack that can be filed and has receipts into {DOCS_DIR}/ (body, "
                        "reproducer, and an index of the receipts each figure comes from)")
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    if args.all_docs:
        if args.pack or args.post or args.out:
            raise UsageError("--all-docs renders every pack into docs/filings/; it takes no PACK, --out or --post")
        return render_docs(ctx, ctx.root / DOCS_DIR)
    if not args.pack:
        raise UsageError("body needs a PACK (or --all-docs)")
    pack = ctx.tracking.pack(args.pack)
    rendered = filing.render(ctx.root, ctx.tracking, pack)
    ui.out.file.write(rendered.body)
    ui.out.file.flush()
    if rendered.findings:
        for f in rendered.findings:
            ui.err.print(f.describe(f"pack {pack.id} {f.where}"), markup=False)
        raise LintError(f"pack {pack.id}: the body or its reproducer failed lint ({len(rendered.findings)} "
                        "finding(s)); nothing was written or posted")
    out = args.out or ctx.root / "dist" / "filing" / f"{pack.id}-{pack.kind}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(rendered.body, encoding="utf-8")
    script_file = None
    if rendered.script is not None:
        script_file = out.parent / rendered.script[0]
        script_file.write_text(rendered.script[1], encoding="utf-8")
    plan = filing.gh_plan(ctx.root, rendered, out, script_file, args.head)
    state = readiness.readiness(ctx, pack, allow_download=not args.no_apply)
    ui.info(f"body: {out}" + (f"; reproducer: {script_file}" if script_file else "") + " (lint clean)")
    for problem in rendered.problems:
        ui.warn(problem)
    ui.info(f"readiness: {state.why()}")
    ui.info("command:")
    ui.info(plan.shell())
    if not args.post:
        return 0
    if not state.ready:
        raise UsageError(f"pack {pack.id} is not ready to post: {state.why()}")
    if not sys.stdin.isatty():
        raise UsageError("refusing to post: stdin is not a terminal (a person types the pack id to confirm)")
    entry = filing.post(ctx.root, ctx.tracking, rendered, plan, input)
    ui.info(f"posted pack {pack.id}: {entry.get('url') or '(no URL printed by gh)'}; recorded in "
            f"[packs.{pack.id}.filing] (decided by {entry['decided_by']})")
    return 0


def docs_packs(ctx) -> list:
    """Packs whose body the docs show: a filed kind, a state that can be filed, and at least one receipt."""
    from harness import receipts

    return [p for p in ctx.tracking.packs.values()
            if p.kind in filing.TEMPLATES and p.state not in readiness.NOT_FILED
            and receipts.find(ctx.root, p.target, p.id)]


def render_docs(ctx, out_dir: Path) -> int:
    """Every fileable pack's body and reproducer under ``out_dir``, the reproducer linked by file name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    index = ["# Filing bodies, rendered", "",
             "Written by `harness body --all-docs` from the receipts in this repository; re-run it after new "
             "receipts land. Each body is exactly what `harness body <pack>` files, except that the link to the "
             "reproducer points at the file beside it here instead of the gist the `gh` command creates.", "",
             "| pack | kind | files against | body | reproducer | receipts the figures come from |",
             "| --- | --- | --- | --- | --- | --- |"]
    failed = []
    for pack in docs_packs(ctx):
        rendered = filing.render(ctx.root, ctx.tracking, pack)
        if rendered.findings:
            failed.append(pack.id)
            for f in rendered.findings:
                ui.err.print(f.describe(f"pack {pack.id} {f.where}"), markup=False)
            continue
        name = f"{pack.id}-{pack.kind}.md"
        body = rendered.body
        script = ""
        if rendered.script is not None:
            script = rendered.script[0]
            (out_dir / script).write_text(rendered.script[1], encoding="utf-8")
            body = body.replace(filing.PLACEHOLDER, script)
        (out_dir / name).write_text(body, encoding="utf-8")
        used = "<br>".join(f"`{r.dir.relative_to(ctx.root)}`" for r in rendered.receipts) or "-"
        index.append(f"| {pack.id} | {pack.kind} | {rendered.filing_base} | [{name}]({name}) | "
                     + (f"[{script}]({script})" if script else "-") + f" | {used} |")
        for problem in rendered.problems:
            ui.warn(f"pack {pack.id}: {problem}")
        written = out_dir / name
        ui.data(str(written.relative_to(ctx.root) if written.is_relative_to(ctx.root) else written))
    (out_dir / "README.md").write_text("\n".join(index) + "\n", encoding="utf-8")
    if failed:
        raise LintError(f"pack(s) {', '.join(failed)}: body or reproducer failed lint; not written")
    return 0
