"""``harness threads refresh``: each upstream thread's state, merged or not, last activity, and what of ours
is there (by the filer's login: --me, $GITHUB_USER, else the token's own); tracking.toml is updated at once."""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import Exit, UsageError
from harness.watch import related, threads

JSON_SCHEMA = 1


def register(sub) -> None:
    p = sub.add_parser("threads", help="upstream threads: 'threads refresh' reads their state, last activity "
                                        "and whether our comment or PR is already there")
    p.add_argument("action", choices=["refresh"], help="refresh: read every thread and update tracking.toml")
    p.add_argument("pack", nargs="?", help="only this pack's threads")
    p.add_argument("--me", default=None, metavar="LOGIN",
                   help="the filer's GitHub login (default: $GITHUB_USER, else the token's own login)")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.add_argument("--offline", action="store_true",
                   help="read recorded answers instead of the API and only report (tracking.toml is not changed: "
                        "recorded answers are not today's state)")
    p.add_argument("--recorded", type=Path, default=None, metavar="DIR",
                   help="recorded GitHub answers (default: $PATCHLANE_GITHUB_RECORDED, else upstream/github)")
    p.add_argument("--api-url", default=None, help="GitHub REST API root (default: https://api.github.com)")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds per API request (default: %(default)s)")
    _args.common(p)


def main(args) -> int:
    from harness.upstream import github

    ctx = context(args)
    packs = [ctx.tracking.pack(args.pack)] if args.pack else list(ctx.tracking.packs.values())
    client: github.GitHub | github.Recorded
    if args.offline:
        rec = related.recorded_dir(ctx.root, args.recorded)
        if rec is None:
            raise UsageError("--offline: no recorded GitHub answers (--recorded DIR, $PATCHLANE_GITHUB_RECORDED, or "
                             "upstream/github)")
        client = github.Recorded(rec)
    else:
        client = github.GitHub(args.api_url or github.DEFAULT_API, github.token_from_env(), args.timeout)
    me = args.me or os.environ.get("GITHUB_USER") or client.login()
    if me is None:
        ui.note("no login (--me, $GITHUB_USER or a token): whether our comment or PR is there is not checked")
    with ui.status(f"reading {sum(len(p.threads) for p in packs)} thread(s) from {client.api_url}"):
        result = threads.refresh(ctx.tracking, client, me=me, packs=packs, write=not args.offline)
    if args.offline:
        ui.note(f"offline: read from {client.api_url}; tracking.toml not changed")
    code = Exit.USAGE if result.not_found else Exit.OK
    for line in result.not_found:
        ui.warn(line)
    if args.json:
        ui.out.file.write(json.dumps({"schema": JSON_SCHEMA, "me": me,
                                      "threads": [r.as_json() for r in result.reports],
                                      "not_found": list(result.not_found),
                                      "not_threads": list(result.not_threads)}, indent=2) + "\n")
        return int(code)
    for change in result.changes:
        ui.info(("! " if change.action else "  ") + change.describe())
    for r in result.reports:
        ours = ("ours: " + r.ours) if r.ours else ("nothing of ours" if r.looked_for_ours else "ours: not checked")
        ui.data(f"pack {r.pack}  {r.url}  {r.role}  {r.state}{' (merged)' if r.merged else ''}  "
                f"last activity {r.updated[:10] or '?'}  {ours}")
    return int(code)
