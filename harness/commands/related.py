"""``harness related PACK|--all``: upstream commits, PRs and issues overlapping a pack, ranked, with decisions.

The GitHub API is asked (token from GITHUB_TOKEN / GH_TOKEN); ``--offline`` reads recorded answers instead
(``--recorded DIR``, $PATCHLANE_GITHUB_RECORDED, else upstream/github).
Rate limits stop the command with one line (exit 9). When GitHub cannot be reached, only recorded answers asked
for by name (``--recorded``, $PATCHLANE_GITHUB_RECORDED) stand in, with a warning; the project's own dated record
(upstream/github) never does (exit 9). See docs/related.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import Exit, UsageError
from harness.watch import decisions, footprint, related

JSON_SCHEMA = 1


def register(sub) -> None:
    p = sub.add_parser("related", help="upstream commits, PRs and issues that overlap a pack, ranked (same hunk > "
                                        "same function > same file > mention), and the decisions recorded on them")
    p.add_argument("pack", nargs="?", help="the pack (or --all)")
    p.add_argument("--all", action="store_true", help="every pack still to be filed, and every active contract")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.add_argument("--offline", action="store_true", help="do not ask GitHub: use recorded answers only")
    p.add_argument("--recorded", type=Path, default=None, metavar="DIR",
                   help="recorded GitHub answers (default: $PATCHLANE_GITHUB_RECORDED, else upstream/github)")
    p.add_argument("--api-url", default=None, help="GitHub REST API root (default: https://api.github.com)")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds per API request (default: %(default)s)")
    p.add_argument("--days", type=int, default=related.SEARCH_DAYS,
                   help="search PRs and issues updated in the last DAYS days (default: %(default)s)")
    _args.artifacts(p)
    _args.common(p)


def _packs(ctx, args):
    if args.all == bool(args.pack):
        raise UsageError("name one pack, or --all")
    if args.pack:
        return [ctx.tracking.pack(args.pack)]
    return [p for p in ctx.tracking.packs.values() if p.state not in ("absorbed", "retired")
            and p.kind != "regression-guard"]


def sources(ctx, args, pack_ids: list[str]) -> related.Sources:
    from harness.upstream import github  # requests is imported only here

    mirrors = ctx.options.git_mirrors
    rec = related.recorded_dir(ctx.root, args.recorded)
    if args.recorded is not None and rec is None:
        raise UsageError(f"--recorded {args.recorded}: no recorded search answers there (search/issues/)")
    recorded = (related.Sources(mirrors, github.Recorded(rec).get, str(rec), days=args.days, recorded=rec)
                if rec else None)
    if args.offline:
        if recorded is None:
            raise related.offline_line(pack_ids)
        return recorded
    client = github.GitHub(args.api_url or github.DEFAULT_API, github.token_from_env(), args.timeout)
    try:
        client.get("/rate_limit")  # costs nothing against the limit; tells whether the API is there at all
    except github.Unreachable as exc:
        if recorded is None:
            line = related.offline_line(pack_ids)
            raise github.Unreachable(f"{exc}; {line}", hint=line.hint) from None
        if args.recorded is None and not os.environ.get("PATCHLANE_GITHUB_RECORDED"):  # related.RECORDED_ENV
            # the project's recorded answers (dated): never a live answer in disguise
            raise github.Unreachable(f"{exc}; not answering from the recorded answers in {rec} in its place",
                                     hint="retry with the network, or ask for recorded answers by name: --offline, "
                                          f"--recorded DIR or ${related.RECORDED_ENV}") from None
        ui.warn(f"{exc}; using the recorded answers in {rec} (asked for by "
                f"{'--recorded' if args.recorded is not None else '$' + related.RECORDED_ENV}), not GitHub's")
        return recorded
    return related.Sources(mirrors, client.get, client.api_url, days=args.days)


def main(args) -> int:
    ctx = context(args)
    packs = _packs(ctx, args)
    src = sources(ctx, args, [p.id for p in packs])
    scans = []
    with ui.status(f"looking for upstream work overlapping {len(packs)} pack(s)"):
        for pack in packs:
            scans.append(related.scan(ctx.root, ctx.tracking, pack, src))
    if args.json:
        ui.out.file.write(json.dumps({"schema": JSON_SCHEMA, "packs": [s.as_json() for s in scans]}, indent=2) + "\n")
        return int(Exit.OK)
    for s in scans:
        for line in lines(s):
            ui.data(line)
    return int(Exit.OK)


def lines(s: related.Scan) -> list[str]:
    pack = s.pack
    open_ = {c.ref for c in related.undecided(pack, s.candidates)}
    out = [f"pack {pack.id}: {pack.title} (compared from base {s.base})"]
    if not s.candidates:
        out.append("  no overlapping upstream work found")
    for c in s.candidates:
        d = decisions.decision_for(pack, c.ref)
        state = f" {c.state}" if c.state else ""
        decided = (f"decided {d.relation} ({d.date})" if d else "UNDECIDED" if c.ref in open_
                   else "not decided (older than the last decision)" if c.overlap >= related.GATING
                   else "not decided (another def of our file)" if c.overlap == footprint.Overlap.FILE
                   else "not decided (mention only)")
        out.append(f"  [{c.overlap.label}{', CONFLICTS' if c.conflicts else ''}] {c.ref} {c.kind}{state} "
                   f"{c.date[:10] or 'date?'}: {c.title}")
        out.append(f"      {c.where}; {decided}")
        for h in c.conflicts:
            out.append(f"      conflicts with our hunk {h} ({c.compared})")
        for h in c.carried:
            out.append(f"      brings what our hunk {h} needs ({c.compared})")
        if c.compared.startswith("not checked"):
            out.append(f"      conflicts {c.compared}")
        elif c.compared and not c.conflicts and not c.carried:
            out.append(f"      no textual conflict ({c.compared})")
    for d in pack.related:
        if not any(decisions.decision_for(pack, c.ref) is d for c in s.candidates):
            out.append(f"  decided {d.ref}: {d.relation} ({d.date}): {d.reason}")
    for v in s.views:
        out.append(f"  upstream as of: {v.describe()}")
    if s.terms:
        out.append("  searched for: " + ", ".join(repr(t) for t in s.terms))
    out += [f"  ({note})" for note in s.notes]
    return out
