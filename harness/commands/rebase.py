"""``harness rebase TARGET --to BASE``: how every pack's series lands on another base."""

from __future__ import annotations

from rich.table import Table

from harness import pins, rebase, ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import Exit, UsageError

_STYLE = {rebase.CLEAN: "green", rebase.OFFSET: "yellow", rebase.FUZZ: "yellow", rebase.CONTAINED: "cyan",
          rebase.CONFLICT: "red", rebase.NOT_TRIED: "red"}


def register(sub) -> None:
    p = sub.add_parser("rebase", help="try every pack's series of a target on another base; report per patch",
                       description="Apply each pack's series (on the new base plus its dependencies' series) and "
                                   "say per patch: clean, offset, fuzz, conflict (file and hunk) or contained "
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
                   help="rewrite the patches of packs that apply with offset or fuzz from the new base")
    p.add_argument("--write-manifest", action="store_true",
                   help="with --to-version: add the new base to upstream/<target>.toml")
    _args.artifacts(p)
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
    print_reports(reports, f"{manifest.target}: series on {name}")
    if args.to_version:
        ui.out.print(f"\nmanifest entry for {name} (sha256 verified against the download):\n")
        ui.out.print(pins.manifest_snippet(manifest.bases[name]), markup=False)
        if args.write_manifest:
            pins.write_manifest(manifest, manifest.bases[name])
            ui.out.print(f"added to {manifest.path}")
        else:
            ui.out.print("(not written; pass --write-manifest to add it)")
    for r in reports:
        if r.refreshed:
            ui.out.print(f"pack {r.pack.id}: refreshed {', '.join(r.refreshed)}")
    if not args.refresh and any(r.status in (rebase.OFFSET, rebase.FUZZ) for r in reports):
        ui.out.print("patches/ unchanged; --refresh rewrites the offset/fuzz packs against this base")
    return int(Exit.APPLY) if any(r.status == rebase.CONFLICT for r in reports) else 0


def print_reports(reports, title: str) -> None:
    if not reports:
        ui.out.print(f"{title}: no pack of this target has patches")
        return
    table = Table(title=title, title_justify="left")
    for col in ("pack", "patch", "result", "detail"):
        table.add_column(col)
    for r in reports:
        rows = r.results or [rebase.PatchResult(r.pack.id, "-", rebase.CONFLICT, r.blocked_by or "")]
        for i, res in enumerate(rows):
            detail = res.detail
            if i == 0 and r.blocked_by:
                detail = f"blocked: {r.blocked_by}"
            table.add_row(r.pack.id if i == 0 else "", res.patch, f"[{_STYLE[res.status]}]{res.status}[/]", detail)
    ui.out.print(table)
