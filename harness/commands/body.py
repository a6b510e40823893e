"""``harness body``: render and lint a pack's filing text and its reproducer; with --post, file them;
with --check, run the body check over one or more packs (``--all``: every pack whose body docs/filings shows)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness import filing
from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import Exit, LintError, UsageError, WriteError
from harness.filing import readiness
from harness.filing.check import committed, docs_texts, linked_issue_name

DOCS_DIR = Path("docs") / "filings"


def register(sub) -> None:
    p = sub.add_parser(
        "body", help="render a pack's issue / PR / comment text and its self-contained reproducer, lint them, "
                     "print the gh command; --post files them after a typed confirmation",
        description="Renders templates/<kind>.md from the pack's patch (commit message, upstream file and line "
                    "at the base it is filed against), the evidence rows declared in tracking.toml (values read "
                    "from the latest receipts) and a single-file reproducer. stdout carries only the body; "
                    "the files written, readiness and the gh command go to stderr.")
    p.add_argument("pack", nargs="*", help="pack id (09, pack09, liger_pack09); --check takes several")
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
    p.add_argument("--check", action="store_true",
                   help="run the body check (layout, word budget, anchors, evidence bases, names, lint) on each "
                        "PACK or --all; exit 10 on any finding; see docs/body-check.md")
    p.add_argument("--all", action="store_true",
                   help="with --check: every pack whose body docs/filings shows (a filed kind, a state that can "
                        "be filed, receipts)")
    p.add_argument("--ready", action="store_true",
                   help="with --check: every pack that is ready but for its body (what CI runs: a ready pack's "
                        "body must pass)")
    p.add_argument("--json", action="store_true", help="with --check: the findings as JSON on stdout")
    p.add_argument("--scripts", action="store_true",
                   help=f"run the attached script of each PACK or --all (those {DOCS_DIR} holds) alone: python -I "
                        "against a plain tree of the filing base (with the series for the steps with the change), "
                        "on the CPU; fails (exit 10) on a missing module, this project's vocabulary, or a step the "
                        "script says runs on the CPU that does not pass")
    p.add_argument("--target", default=None, help="with --scripts --all: only the packs of this target")
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    if args.scripts:
        if args.check or args.post or args.out or args.all_docs or args.ready:
            raise UsageError("--scripts takes PACK ... or --all (and --target)")
        if bool(args.all) == bool(args.pack):
            raise UsageError("--scripts needs one of PACK ... or --all")
        packs = docs_packs(ctx) if args.all else [ctx.tracking.pack(p) for p in args.pack]
        return run_scripts(ctx, [p for p in packs if args.target in (None, p.target)], args.json)
    if args.target:
        raise UsageError("--target goes with --scripts")
    if args.check:
        if args.post or args.out or args.all_docs:
            raise UsageError("--check only reads; it takes no --post, --out or --all-docs")
        if [bool(args.all), bool(args.ready), bool(args.pack)].count(True) != 1:
            raise UsageError("--check needs one of PACK ..., --all or --ready")
        if args.ready:
            packs = [p for p in docs_packs(ctx)
                     if all(r.code == readiness.ReasonCode.BODY_CHECK for r in readiness.readiness(ctx, p).reasons)]
        else:
            packs = docs_packs(ctx) if args.all else [ctx.tracking.pack(p) for p in args.pack]
        return check_bodies(ctx, packs, args.json)
    if args.all or args.ready or args.json:
        raise UsageError("--all, --ready and --json go with --check")
    if args.all_docs:
        if args.pack or args.post or args.out:
            raise UsageError("--all-docs renders every pack into docs/filings/; it takes no PACK, --out or --post")
        return render_docs(ctx, ctx.root / DOCS_DIR)
    if len(args.pack) != 1:
        raise UsageError("body needs one PACK (or --all-docs, or --check PACK ...)")
    pack = ctx.tracking.pack(args.pack[0])
    rendered = filing.render(ctx.root, ctx.tracking, pack)
    ui.out.file.write(rendered.body)
    ui.out.file.flush()
    if rendered.findings:
        for f in rendered.findings:
            ui.err.print(f.describe(f"pack {pack.id} {f.where}"), markup=False)
        raise LintError(f"pack {pack.id}: the body or its reproducer failed lint ({len(rendered.findings)} "
                        "finding(s)); nothing was written or posted")
    out = args.out or ctx.root / "dist" / "filing" / f"{pack.id}-{pack.kind}.md"
    script_file = out.parent / rendered.script[0] if rendered.script is not None else None
    feature_file = out.parent / linked_issue_name(pack) if rendered.companion is not None else None
    texts = [(out, rendered.body), *([(script_file, rendered.script[1])] if script_file and rendered.script else []),
             *([(feature_file, rendered.companion[1])] if feature_file and rendered.companion else [])]
    written: list = []
    try:  # a read-only checkout or a full disk: the path and the reason in one line, never an internal error
        out.parent.mkdir(parents=True, exist_ok=True)
        for path, text in texts:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    except OSError as exc:
        for path in written:  # the body without its script is no filing: nothing is left half-written
            path.unlink(missing_ok=True)
        raise WriteError.of(exc, f"pack {pack.id}'s body", out.parent,
                            hint="write it elsewhere with -o PATH (a writable directory)") from None
    plan = filing.gh_plan(ctx.root, rendered, out, script_file, args.head, feature_file)
    state = readiness.readiness(ctx, pack, allow_download=not args.no_apply)
    ui.info(f"body: {out}" + (f"; reproducer: {script_file}" if script_file else "")
            + (f"; the issue it links, filed first: {feature_file}" if feature_file else "") + " (lint clean)")
    for problem in rendered.problems:
        ui.warn(problem)
    ui.info(f"readiness: {state.why()}")
    ui.info("command:")
    ui.info(plan.shell())
    if pack.kind == "pr" and not args.head:  # the command ends with a placeholder: say how to make the branch
        fbase = state.filing_base
        ui.info(f"--head OWNER:BRANCH is a branch of your fork holding the series: 'harness export {pack.id} --base "
                f"{fbase}' writes it signed as you (dist/export/{pack.id}-{fbase}/); 'git am' those files on "
                f"{fbase} in your fork, push the branch, then pass --head you:branch")
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


def check_bodies(ctx, packs: list, as_json: bool) -> int:
    """The body check over ``packs``: each finding on one line naming pack, file part and line; JSON with --json."""
    results = []
    shown = {p.id for p in docs_packs(ctx)}  # their committed bodies under docs/filings must equal the render
    for pack in packs:
        rendered = filing.render(ctx.root, ctx.tracking, pack)
        findings = filing.body_check(rendered) + filing.check.export_build(rendered, _applies_alone(ctx, rendered))
        if pack.id in shown:
            findings += committed(rendered, ctx.root / DOCS_DIR)
        results.append({"pack": pack.id, "kind": pack.kind, "filing_base": rendered.filing_base,
                        "words": filing.prose_words(rendered.body, rendered.sections),
                        "budget": filing.BUDGETS.get(pack.kind),
                        "ok": not findings,
                        "findings": [{"where": f.where, "line": f.line, "rule": f.rule, "text": f.text}
                                     for f in findings]})
        for f in findings:
            ui.err.print(f.describe(f"pack {pack.id} {f.where}"), markup=False)
        if not findings:
            ui.info(f"pack {pack.id}: body check passes ({results[-1]['words']} words of prose, budget "
                    f"{results[-1]['budget']})")
    if as_json:
        ui.data(json.dumps(results, indent=2))
    failed = [r["pack"] for r in results if not r["ok"]]
    if failed:
        raise LintError(f"pack(s) {', '.join(failed)}: the body check failed "
                        f"({sum(len(r['findings']) for r in results)} finding(s))")
    return 0


def _applies_alone(ctx, rendered) -> bool | None:
    """Whether the pack's own series applies on its filing base without the packs under it (then the export
    holds it alone); None where nothing is stacked or it could not be checked."""
    from harness.lane import series

    if not rendered.stacked:
        return None
    own = series.load_series(ctx.root, rendered.pack.target, rendered.pack.id, rendered.filing_base)
    if not own:
        return None
    check = readiness.apply_check(ctx, rendered.pack, rendered.filing_base, own)
    return check.status == readiness.APPLIES if check.status in (readiness.APPLIES, readiness.CONFLICT) else None


def run_scripts(ctx, packs: list, as_json: bool) -> int:
    """``filing.scripts.check_pack`` for each pack: one line per finding, the steps run and their times."""
    from harness.filing import scripts

    results, failed = [], []
    for pack in packs:
        outcome = scripts.check_pack(ctx, pack, ctx.root / DOCS_DIR)
        if outcome is None:
            continue
        ran = ", ".join(f"{what} {secs:.0f} s" for what, secs in outcome.ran)
        ui.info(f"pack {pack.id} {outcome.script}: ran {ran or 'nothing'}")
        for text in outcome.findings:
            ui.warn(f"pack {pack.id} {outcome.script}: {text}")
        if not outcome.ok:
            failed.append(pack.id)
        results.append({"pack": pack.id, "script": outcome.script, "ok": outcome.ok, "findings": outcome.findings,
                        "ran": [{"what": w, "seconds": round(s, 1)} for w, s in outcome.ran]})
    if as_json:
        print(json.dumps(results, indent=1))
    if failed:
        raise LintError(f"pack(s) {', '.join(failed)}: the attached script does not run alone")
    return Exit.OK


def docs_packs(ctx) -> list:
    """Packs whose body the docs show: a filed kind, a state that can be filed, and at least one receipt."""
    from harness.lane import receipts

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
    written_names: set[str] = set()
    for pack in docs_packs(ctx):
        rendered = filing.render(ctx.root, ctx.tracking, pack)
        if rendered.findings:
            failed.append(pack.id)
            written_names.update({f"{pack.id}-{pack.kind}.md", filing.script_name(pack),
                                  linked_issue_name(pack)})  # kept: not stale
            for f in rendered.findings:
                ui.err.print(f.describe(f"pack {pack.id} {f.where}"), markup=False)
            continue
        name = f"{pack.id}-{pack.kind}.md"
        script = rendered.script[0] if rendered.script is not None else ""
        texts = docs_texts(rendered)
        for file_name, text in texts.items():
            (out_dir / file_name).write_text(text, encoding="utf-8")
        written_names.update(texts)
        used = "<br>".join(f"`{r.dir.relative_to(ctx.root)}`" for r in rendered.receipts) or "-"
        linked = linked_issue_name(pack) if rendered.companion is not None else ""
        index.append(f"| {pack.id} | {pack.kind} | {rendered.filing_base} | [{name}]({name})"
                     + (f", after [{linked}]({linked})" if linked else "") + " | "
                     + (f"[{script}]({script})" if script else "-") + f" | {used} |")
        for problem in rendered.problems:
            ui.warn(f"pack {pack.id}: {problem}")
        written = out_dir / name
        ui.data(str(written.relative_to(ctx.root) if written.is_relative_to(ctx.root) else written))
    shown = {p.id for p in docs_packs(ctx)}
    left = [f"{p.id} ({p.state})" for p in ctx.tracking.packs.values()
            if p.kind in filing.TEMPLATES and p.id not in shown and p.state in readiness.NOT_FILED]
    if left:
        index += ["", "Only bodies to be filed are here. Not filed, so not rendered: " + ", ".join(left) + "."]
    (out_dir / "README.md").write_text("\n".join(index) + "\n", encoding="utf-8")
    for stale in sorted(set(out_dir.glob("[0-9][0-9]-*.md")) | set(out_dir.glob("repro_*.py"))):
        if stale.name not in written_names:  # a pack that is no longer filed (absorbed, retired): its body goes
            stale.unlink()
            ui.info(f"removed {stale.name}: no pack files it any more")
    if failed:
        raise LintError(f"pack(s) {', '.join(failed)}: body or reproducer failed lint; not written")
    return 0
