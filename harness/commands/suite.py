"""``harness suite``: a pack's upstream suite -- the selection derived from its series, and the verdict."""

from __future__ import annotations

import json

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import Exit
from harness.lane import lanes, suite, suite_check

JSON_SCHEMA = 1  # 'suite compare --json' and 'suite commits --json' (keys: docs/cli.md)

def register(sub) -> None:
    p = sub.add_parser("suite", help="derive, record and judge a pack's upstream suite (docs/upstream-tests.md)",
                       description="The upstream test files that exercise what a pack's series touches, derived "
                                   "from the base's tree with the series applied and recorded in "
                                   "suites/<pack>/<base>.toml; and the verdict of the suite lanes, base vs patched.")
    verbs = p.add_subparsers(dest="suite_verb", required=True, metavar="VERB")
    sel = verbs.add_parser("select", help="derive the selection and write suites/<pack>/<base>.toml",
                           description="Derive the selection from the tree and write it, keeping the ids a person "
                                       "added and the exclusions (each with its reason). With --check, write "
                                       "nothing and fail (exit 2) when the recorded selection differs.")
    cmp_ = verbs.add_parser("compare", help="the suite verdict: every case on the base and the patched build",
                            description="Read the latest receipts of the pack's suite lanes at BASE (unpatched and "
                                        "patched) and compare each case. Exit 1 when a case that passes on the base "
                                        "fails, errors or is missing when patched, or an added test passes on the "
                                        "base of a pack that claims a fix.")
    com = verbs.add_parser("commits", help="every commit of the series: the suite's CPU part vs the base",
                           description="Apply each commit of each pack's series in order on its base and run the "
                                       "part of its recorded suite that runs without a GPU (collection included) "
                                       "at the base and at every commit. Exit 1 when a case that passes at the base "
                                       "fails, errors or goes missing at a commit, or a run does not finish.")
    com.add_argument("packs", nargs="*", metavar="PACK",
                     help="pack ids (default: every PR pack with a recorded selection at its filing base)")
    com.add_argument("--base", default=None, help="the upstream base (default: each pack's filing base)")
    com.add_argument("--timeout", type=int, default=900, help="seconds one commit's run may take (default 900)")
    com.add_argument("--json", action="store_true", help="print every step's cases as JSON")
    _args.source(com)
    _args.common(com)
    for q in (sel, cmp_):
        q.add_argument("pack")
        q.add_argument("--base", default=None, help="the upstream base (default: the pack's filing base)")
        q.add_argument("--json", action="store_true", help="print the result as JSON")
        _args.source(q)
        _args.common(q)
    sel.add_argument("--check", action="store_true", help="compare with the recorded selection; write nothing")
    cmp_.add_argument("--ranks", type=int, default=None,
                      help="read the receipts of runs at this many ranks (default: each lane's latest)")
    for q in (sel, cmp_):
        q.add_argument("--receipts-dir", type=_args.path, default=None,
                       help="read the suite lanes' receipts here (default: receipts/), e.g. a GPU host's")


def main(args) -> int:
    ctx = context(args, receipts_dir=getattr(args, "receipts_dir", None),
                  missing_selections_ok=args.suite_verb == "select")  # the way out of a lost selection file
    if args.suite_verb == "commits":
        return _commits(ctx, args)
    pack = ctx.tracking.pack(args.pack)
    base = args.base or pack.filing_base
    if args.suite_verb == "compare":
        return _compare(ctx, pack, base, args.json, args.ranks)
    source = lanes.suite_source(ctx, pack, base)
    hubs: dict[str, int] = {}
    derived = source.derive(hubs)
    names = [p.name for p in source.own]
    path = suite.selection_path(ctx.root, pack.id, base)
    old = suite.load(path) if path.is_file() else None
    if args.check:
        if old is None:
            raise suite.SuiteDrift(f"pack {pack.id} at {base}: no recorded selection ({path.relative_to(ctx.root)})",
                                   hint=f"harness suite select {pack.id} --base {base}")
        diffs = suite.differences(old, derived, names)
        if diffs:
            raise suite.SuiteDrift(f"{path.relative_to(ctx.root)}: " + "; ".join(diffs),
                                   hint=f"harness suite select {pack.id} --base {base} (and commit the file)")
        sel = old
    else:
        sel = suite.refreshed(old, pack.id, base, names, derived, _collected_cases(ctx, pack, base))
        text = suite.dump(sel)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            suite.write(path, text)
    if args.json:
        chains = {d.path: [c.as_json() for c in d.chains] for d in derived}
        ui.out.print_json(json.dumps({
            "pack": pack.id, "base": base, "series": list(sel.series), "path": str(path.relative_to(ctx.root)),
            "files": [{"path": f.path, "reasons": list(f.reasons), "cases": f.cases,
                       "chains": chains.get(f.path, [])} for f in sel.files],
            "rules": suite.rule_counts(derived), "library_hops": suite.LIBRARY_HOPS,
            "hubs_not_followed": hubs, "hub_limit": suite.HUB_LIMIT,
            "add": [{"id": a.id, "reason": a.reason} for a in sel.add],
            "exclude": [{"id": e.id, "reason": e.reason} for e in sel.exclude],
            "cases": sel.cases, "added_tests": {k: sorted(v) for k, v in source.added().items()}}))
        return 0
    for f in sel.files:
        ui.data(f"{f.path}  ({f.cases if f.cases is not None else '?'} cases): {'; '.join(f.reasons)}")
    for a in sel.add:
        ui.data(f"+ {a.id}: {a.reason}")
    for e in sel.exclude:
        ui.data(f"- {e.id}: {e.reason}")
    counts = suite.rule_counts(derived)
    ui.note("files per rule (selects/adds): " + "; ".join(f"{r} {c['selects']}/{c['adds']}"
                                                          for r, c in counts.items()))
    for module, n in sorted(hubs.items()):
        ui.note(f"not followed: {n} test files reach the touched code through {module} (more than "
                f"{suite.HUB_LIMIT}, no switch on the way)")
    ui.note(f"pack {pack.id} at {base}: {len(sel.files)} file(s); {path.relative_to(ctx.root)}"
            + (" matches the derivation" if args.check else " written"))
    return 0


def _collected_cases(ctx, pack, base: str) -> dict[str, int] | None:
    """Cases per file that the suite lanes' latest receipts on the base build collected, when every shard has one
    (else None: the counts recorded before stay)."""
    chosen = suite_check.suite_lanes(pack, base)
    if not chosen:
        return None
    result = suite_check.suite_verdict(ctx, pack, base)
    base_missing = [lane.name for lane in chosen if not lane.patched and lane.name in result.missing]
    if base_missing or result.collected is None or len(result.merged.base) < result.collected:
        return None
    out: dict[str, int] = {}
    for node in result.merged.base:
        path = node.split("::", 1)[0]
        out[path] = out.get(path, 0) + 1
    return out


def _compare(ctx, pack, base: str, as_json: bool, ranks: int | None = None) -> int:
    result = suite_check.suite_verdict(ctx, pack, base, ranks)
    if as_json:
        ui.json_data({"schema": JSON_SCHEMA, **result.as_json()})
    else:
        here = dict(result.comparison.not_here)
        for case in result.comparison.cases:
            if case.id in here:  # a column of its own: neither build ran it here, and why
                ui.data(f"{case.id}: base -, patched -, not run here: {here[case.id]}")
            elif case.verdict != "ok":
                why = "; ".join(f"{side}: {text}" for side, text in (("base", case.why_base),
                                                                     ("patched", case.why_patched)) if text)
                ui.data(f"{case.id}: base {case.base}, patched {case.patched}: {case.verdict}"
                        + (f" ({why})" if why else ""))
        # what was left out, and the verdict, are data too (stdout): 'suite compare 07 | tail -2' reads both
        ok = sum(1 for case in result.comparison.cases if case.verdict == "ok")
        if ok:
            ui.data(f"{ok} case(s) ok on both builds, not listed (--json lists every case)")
        ui.data(result.line())
    return Exit.OK if result.ok else Exit.MISMATCH



def _commits(ctx, args) -> int:
    import time

    if args.packs:
        chosen = [(ctx.tracking.pack(p), args.base) for p in args.packs]
    else:
        chosen = [(p, args.base) for p in ctx.tracking.packs.values()
                  if p.kind == "pr" and suite.selection_path(ctx.root, p.id, args.base or p.filing_base).is_file()]
    started = time.monotonic()
    results = [suite_check.commit_check(ctx, pack, base or pack.filing_base, args.timeout) for pack, base in chosen]
    if args.json:
        ui.out.print_json(json.dumps({"schema": JSON_SCHEMA, "ok": all(r.ok for r in results),
                                      "checks": [r.as_json() for r in results],
                                      "duration_s": round(time.monotonic() - started, 1)}))
    else:
        for r in results:
            for s in r.steps:
                what = f"commit {s.index} ({s.patch})" if s.index else "the base"
                state = ("does not finish" if not s.complete else f"breaks {len(s.broken)} case(s)" if s.broken
                         else "ok")
                ui.data(f"pack {r.pack} at {r.base}, {what}: {len(s.cases)} case(s), {s.summary or '-'}: {state}")
                for node in s.broken:
                    ui.data(f"  {node}: passes at the base, not at this commit")
        ui.note(f"{len(results)} series checked commit by commit in {time.monotonic() - started:.0f} s")
    return Exit.OK if all(r.ok for r in results) else Exit.MISMATCH
