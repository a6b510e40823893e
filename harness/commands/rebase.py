"""``harness rebase TARGET --to BASE``: how every pack's series lands on another base."""

from __future__ import annotations

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import Exit, UsageError
from harness.upstream import pins
from harness.watch import absorbed, rebase

_STYLE = {rebase.CLEAN: "green", rebase.OFFSET: "yellow", rebase.FUZZ: "yellow", rebase.THREE_WAY: "yellow",
          rebase.CONTAINED: "cyan",
          rebase.CONFLICT: "red", rebase.NOT_TRIED: "red"}


def register(sub) -> None:
    p = sub.add_parser("rebase", help="try every pack's series of a target on another base; report per patch",
                       description="Apply each pack's series (on the new base plus its dependencies' series) and "
                                   "say per patch: clean, offset, fuzz, 3-way (only git am -3 merges it), conflict "
                                   "(file and hunk) or contained "
                                   "(already upstream). Nothing under patches/ changes unless --refresh. "
                                   "Exit 5 when a patch conflicts.")
    p.add_argument("target")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to", metavar="BASE", help="a base of the target's manifest (its name or version)")
    to.add_argument("--to-version", metavar="X",
                    help="a release not in the manifest: fetched via the PyPI JSON API, sha256 checked")
    p.add_argument("--pack", action="append", default=[], help="only this pack (repeatable)")
    p.add_argument("--port", action="store_true",
                   help="with --refresh: write the rewritten series as patches/<target>/<pack>/<base>/ (a series "
                        "ported to that base) instead of replacing the pack's own")
    p.add_argument("--refresh", action="store_true",
                   help="rewrite the patches of packs that apply with offset, fuzz or a 3-way merge from the new "
                        "base (plain git am applies the result)")
    p.add_argument("--write-manifest", action="store_true",
                   help="with --to-version: add the new base to upstream/<target>.toml")
    p.add_argument("--json", action="store_true",
                   help="one JSON document on stdout: schema, target, base, packs[] {pack, status, upstream, "
                        "blocked_by, refreshed[], patches[] {patch, status, detail}}")
    _args.artifacts(p)
    _args.output_format(p)
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    manifest = ctx.manifest(args.target)
    if args.write_manifest and not args.to_version:
        raise UsageError("--write-manifest goes with --to-version")
    if args.to_version:
        if args.to_version in manifest.bases:
            raise UsageError(f"{args.to_version} is already a base of {manifest.path.name}; use --to")
        base = pins.pypi_base(manifest, args.to_version)
        manifest = pins.with_base(manifest, base)
        name = base.name
    else:
        name = rebase.resolve_base(manifest, args.to)
    reports = rebase.rebase_target(ctx, manifest, name, refresh=args.refresh, port=args.port,
                                   packs=[ctx.tracking.pack(p).id for p in args.pack])
    verdicts = {r.pack.id: absorbed.classify(ctx.tracking, manifest, name, r) for r in reports}
    if args.json:
        import json

        ui.out.file.write(json.dumps({
            "schema": 1, "target": manifest.target, "base": name,
            "packs": [{"pack": r.pack.id, "status": r.status, "upstream": verdicts[r.pack.id].state,
                       "blocked_by": r.blocked_by, "refreshed": list(r.refreshed),
                       "patches": [{"patch": x.patch, "status": x.status, "detail": x.detail} for x in r.results]}
                      for r in reports]}, indent=2) + "\n")
    else:
        print_reports(reports, f"{manifest.target}: series on {name}", verdicts, args.format)
    if args.to_version:
        ui.data(f"\nmanifest entry for {name} (sha256 verified against the download):\n")
        ui.data(pins.manifest_snippet(manifest.bases[name]))
        if args.write_manifest:
            pins.write_manifest(manifest, manifest.bases[name])
            ui.info(f"added to {manifest.path}")
        else:
            ui.info("(not written; pass --write-manifest to add it)")
    for r in reports:
        if r.refreshed:
            ui.info(f"pack {r.pack.id}: refreshed {', '.join(r.refreshed)}")
    for v in verdicts.values():
        if v.state == "superseded":
            ui.info(f"pack {v.report.pack.id}: superseded on {name}: upstream fixed it with another change "
                    f"({v.evidence}); its conflicts need no rebase")
        elif v.state == "absorbed":
            ui.info(f"pack {v.report.pack.id}: absorbed on {name}: every patch is already upstream")
    if not args.refresh and any(r.status in rebase.MOVED for r in reports):
        ui.info("patches/ unchanged; --refresh rewrites the offset/fuzz/3-way packs against this base")
    live = [r for r in reports if verdicts[r.pack.id].state == "differs"]
    return int(Exit.APPLY) if any(r.status == rebase.CONFLICT for r in live) else 0


def print_reports(reports, title: str, verdicts: dict | None = None, fmt: str = "auto") -> None:
    if not reports:
        ui.data(f"{title}: no pack of this target has patches")
        return
    verdicts = verdicts or {}
    plain = ui.plain(fmt)
    table = []
    for r in reports:
        v = verdicts.get(r.pack.id)
        upstream = "-" if v is None or v.state == "differs" else v.state
        rows = r.results or [rebase.PatchResult(r.pack.id, "-", rebase.CONFLICT, r.blocked_by or "")]
        for i, res in enumerate(rows):
            detail = res.detail
            if i == 0 and r.blocked_by:
                detail = f"blocked: {r.blocked_by}"
            first = i == 0 or plain  # piped: every line names its pack (grep), nothing left blank
            table.append((ui.text(r.pack.id if first else ""), ui.text(upstream if first else "", "cyan"),
                          ui.text(res.patch), ui.text(res.status, _STYLE[res.status]), ui.text(detail)))
    ui.tabular(("pack", "upstream", "patch", "result", "detail"), table, fmt=fmt, title=title)
