"""``harness absorbed [TARGET] [--to BASE]``: the weekly upstream diff (``--json`` for machines)."""

from __future__ import annotations

import json

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import DriftError, UsageError
from harness.watch import absorbed, rebase

JSON_SCHEMA = 1
_STYLE = {"absorbed": "cyan", "superseded": "cyan", "differs": ""}


def register(sub) -> None:
    p = sub.add_parser("absorbed", help="which packs upstream already has, which still differ, and untracked drift",
                       description="At BASE (default: each target's default base), a pack whose patches all "
                                   "reverse-apply is absorbed upstream: the tracking.toml change that retires it "
                                   "is printed (written only with --retire; its lanes stay as regression "
                                   "coverage). Packs whose series still changes the base are listed. A file under "
                                   "patches/ or overlays/ that no pack accounts for is untracked drift: exit 11.")
    p.add_argument("target", nargs="?", default=None, help="one target (default: every target with patches)")
    p.add_argument("--to", metavar="BASE", default=None, help="base name or version (default: the default base)")
    p.add_argument("--retire", action="store_true", help="write the proposed tracking.toml changes")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout (keys: docs/cli.md)")
    _args.artifacts(p)
    _args.output_format(p)
    _args.common(p)


def _detail(v: absorbed.Verdict) -> str:
    r = v.report
    per_patch = "".join(f"; {x.patch}: {x.status}" for x in r.results)
    if v.state == "absorbed":
        return ("already retired in tracking.toml" if r.pack.state == "absorbed"
                else "every patch reverse-applies: retire the pack, keep its reproducer as regression coverage")
    if v.state == "superseded":
        return (f"series {r.status}{per_patch}; tracking.toml: absorbed at "
                f"{(r.pack.absorbed or {}).get('version', '?')} by another change; {v.evidence}")
    detail = f"series {r.status}" + (f" ({r.blocked_by})" if r.blocked_by else "") + per_patch
    if r.pack.state == "absorbed":
        detail += (f"; tracking.toml says absorbed at {(r.pack.absorbed or {}).get('version', '?')}, "
                   "but the series differs and no passing BUG_ABSENT lane on this base backs it")
    return detail


def main(args) -> int:
    ctx = context(args)
    targets = [args.target] if args.target else sorted({p.target for p in ctx.tracking.packs.values()})
    if args.to and not args.target:
        raise UsageError("--to needs a TARGET (bases are per target)")
    drift = absorbed.scan_drift(ctx.root, ctx.tracking, args.target)
    skip = absorbed.drifted_packs(ctx.root, drift)
    for pid in sorted(skip):
        ui.warn(f"pack {pid}: not checked, its series directory holds untracked drift")
    found = []
    for target in targets:
        manifest = ctx.manifest(target)
        base = rebase.resolve_base(manifest, args.to) if args.to else manifest.default_base
        found += [(target, base, manifest, v) for v in absorbed.check(ctx, manifest, base, skip=skip)]
    proposals = [(v.report.pack.id, manifest.base(base).version, v.proposal)
                 for target, base, manifest, v in found if v.state == "absorbed" and v.proposal]
    if args.json:
        data = {"schema": JSON_SCHEMA,
                "results": [{"pack": v.report.pack.id, "target": target, "base": base, "state": v.state,
                             "series": v.report.status, "blocked_by": v.report.blocked_by,
                             "patches": [{"patch": x.patch, "status": x.status, "detail": x.detail}
                                         for x in v.report.results],
                             "evidence": v.evidence or None, "proposal": v.proposal or None}
                            for target, base, manifest, v in found],
                "skipped": sorted(skip),
                "drift": [{"path": str(d.path.relative_to(ctx.root)), "why": d.why} for d in drift]}
        ui.out.file.write(json.dumps(data, indent=2) + "\n")
    else:
        ui.tabular(("pack", "target", "base", "state", "detail"),
                   [(*(ui.text(x) for x in (v.report.pack.id, target, base)), ui.text(v.state, _STYLE[v.state]),
                     ui.text(_detail(v))) for target, base, _, v in found],
                   fmt=getattr(args, "format", "auto"), title="upstream diff")
        for pid, version, diff in proposals:
            ui.data(f"\npack {pid} is absorbed upstream at {version}; the tracking.toml change:\n")
            ui.data(diff)
        for d in drift:
            ui.data(f"untracked drift: {d.path.relative_to(ctx.root)}: {d.why}")
    for pid, version, _ in proposals:
        if args.retire:
            absorbed.retire(ctx.tracking, pid, version)
            ui.info(f"written: pack {pid} state = \"absorbed\" (lanes kept)")
    if proposals and not args.retire:
        ui.info("not written; pass --retire to apply these changes")
    if drift:
        raise DriftError(f"untracked drift: {len(drift)} path(s) under patches/ or overlays/ with no pack, first "
                         f"{drift[0].path.relative_to(ctx.root)} ({drift[0].why})",
                         hint="add the pack to tracking.toml, rename the file to NNNN-slug.patch, or remove it")
    return 0
