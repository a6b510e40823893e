"""``harness status``: one row per pack; ``--refresh`` first reads thread states from the GitHub API."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.markup import escape
from rich.table import Table

from harness import pins, readiness, receipts, ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import Exit


def register(sub) -> None:
    p = sub.add_parser("status", help="overview of every pack (threads, base, latest receipt, mitigation, "
                                       "ready or blocked); --refresh reads thread states from GitHub first")
    p.add_argument("--refresh", action="store_true",
                   help="read each thread's state from the GitHub REST API and update tracking.toml "
                        "(token from GITHUB_TOKEN / GH_TOKEN when set)")
    p.add_argument("--api-url", default=None, help="GitHub REST API root (default: https://api.github.com)")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds per API request (default: %(default)s)")
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    code = Exit.OK
    if args.refresh:
        from harness import github, threads  # requests is only needed here

        client = github.GitHub(args.api_url or github.DEFAULT_API, github.token_from_env(), args.timeout)
        with ui.status(f"reading {sum(len(p.threads) for p in ctx.tracking.packs.values())} thread(s) "
                       f"from {client.api_url}"):
            result = threads.refresh(ctx.tracking, client)
        ui.out.print(f"read {result.read} thread(s); {len(result.changes)} changed", markup=False)
        for change in result.changes:
            ui.out.print(("[bold]! [/]" if change.action else "  ") + escape(change.describe()))
        for url in result.not_threads:
            ui.note(f"not a pull request or issue, left as is: {url}")
        for line in result.not_found:
            ui.warn(line)
            code = Exit.USAGE
    ui.out.print(overview(ctx))
    return int(code)


def overview(ctx) -> Table:
    now = datetime.now(UTC)
    table = Table(title="packs")
    for col in ("pack", "target", "kind", "state", "upstream", "base", "latest receipt", "mitigation",
                "ready / blocked"):
        table.add_column(col)
    for pack in ctx.tracking.packs.values():
        manifest = pins.load_manifest(ctx.root, pack.target)
        upstream = "\n".join(f"#{t.url.rstrip('/').rsplit('/', 1)[-1][:10]} {t.state}"
                             + (" (filing)" if t.role == "filing target" else "") for t in pack.threads) or "-"
        rec = receipts.latest(ctx.root, pack.target, pack.id)
        if rec is None:
            latest = "-"
        else:
            started = readiness.parse_time(rec.data.get("started"))
            age = _age(now - started) if started else "?"
            host = (rec.data.get("host") or {}).get("gpu") or "cpu"
            latest = f"{age} ago, {host}, {rec.data.get('lane')}: {rec.data.get('verdict')}"
        mitigation = (pack.mitigation or {}).get("status", "-") if pack.mitigation else "-"
        state = readiness.readiness(ctx.root, ctx.tracking, pack)
        verdict = "[green]ready[/]" if state.ready else "blocked: " + escape(state.why())
        table.add_row(pack.id, pack.target, pack.kind, pack.state, upstream,
                      f"{pack.base or '-'} (default {manifest.default_base})", latest, mitigation, verdict)
    return table


def _age(delta) -> str:
    secs = int(delta.total_seconds())
    if secs < 3600:
        return f"{max(secs // 60, 0)}m"
    if secs < 86400:
        return f"{secs // 3600}h"
    return f"{secs // 86400}d"
