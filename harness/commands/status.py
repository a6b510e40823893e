"""``harness status [PACK]``: one line per pack, or one pack's whole story; ``--json`` for machines.

``--refresh`` first reads thread states from the GitHub API. Readiness (harness/filing/readiness.py) is computed
here, including the check that each pack's series applies to the base it is filed against (the base is
materialized when needed; ``--no-apply`` uses only cached results and says "not checked" otherwise).
"""

from __future__ import annotations

import dataclasses
import json

from rich.text import Text

from harness import errors
from harness.base import clock, ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import Exit
from harness.filing import readiness
from harness.host import ready_plan
from harness.lane import receipts
from harness.lane.tracking import Tracking
from harness.upstream.github import thread_label
from harness.watch import decisions, related

JSON_SCHEMA = 1


def register(sub) -> None:
    p = sub.add_parser("status", help="one line per pack: threads, latest receipt, ready or why not; "
                                       "'status PACK' tells the whole story; --json for CI and dashboards",
                       description="A pack is ready when its series applies to the base it is filed against, "
                                   "its receipts are current for that series, its body lints and nothing "
                                   "upstream absorbed it (see docs/filing.md, 'Readiness').")
    p.add_argument("pack", nargs="?", help="show everything about this pack")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout (keys: docs/cli.md)")
    p.add_argument("--no-apply", action="store_true",
                   help="do not materialize bases for the apply check; use cached results only")
    p.add_argument("--refresh", action="store_true",
                   help="read each thread's state from the GitHub REST API and update tracking.toml "
                        "(token from GITHUB_TOKEN / GH_TOKEN when set)")
    p.add_argument("--api-url", default=None, help="GitHub REST API root (default: https://api.github.com)")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds per API request (default: %(default)s)")
    _args.artifacts(p)
    _args.output_format(p)
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    code = Exit.OK
    if args.refresh:
        from harness.upstream import github  # requests is only needed here
        from harness.watch import threads  # requests is only needed here

        client = github.GitHub(args.api_url or github.DEFAULT_API, github.token_from_env(), args.timeout)
        with ui.status(f"reading {sum(len(p.threads) for p in ctx.tracking.packs.values())} thread(s) "
                       f"from {client.api_url}"):
            result = threads.refresh(ctx.tracking, client)
        ui.info(f"read {result.read} thread(s); {len(result.changes)} changed")
        for change in result.changes:
            ui.info(("! " if change.action else "  ") + change.describe())
        for url in result.not_threads:
            ui.note(f"not a pull request or issue, left as is: {url}")
        for line in result.not_found:
            ui.warn(line)
            code = Exit.USAGE
        # the packs as written, new thread states included (a Context is frozen: a new one, same options)
        ctx = dataclasses.replace(ctx, tracking=Tracking.load(ctx.root))
    packs = [ctx.tracking.pack(args.pack)] if args.pack else list(ctx.tracking.packs.values())
    for rec in receipts.future_dated(ctx.root, *((packs[0].target, packs[0].id) if args.pack else ())):
        ui.warn(f"{receipts.display_path(rec.dir, ctx.root)} says it started {rec.started}, after this host's now: "
                "it counts for no lane until then (the host that wrote it had its clock ahead?)")
    memo: dict = {}
    # seconds of apply checks, related-work scans and body checks: say so on stderr, with a heartbeat off a terminal
    with ui.status(f"computing the readiness of {len(packs)} pack(s) (apply checks, receipts, bodies)"):
        states = [readiness.readiness(ctx, p, allow_download=not args.no_apply, _memo=memo) for p in packs]
    unfetched = [s for s in states if s.apply is not None and s.apply.status == readiness.ApplyStatus.UNAVAILABLE]
    if unfetched:  # not "not ready": not known. Exit 4 as 'run' does when a base cannot be fetched
        ui.warn(f"{len(unfetched)} pack(s) could not be checked: their filing base could not be fetched "
                f"({', '.join(sorted({f'{s.pack.target} {s.apply.base}' for s in unfetched if s.apply}))}); "
                "point --git-mirrors (or $PATCHLANE_GIT_MIRRORS) at the offline mirrors, or run with network")
        code = errors.worst([code, Exit.PIN])
    if args.json:
        ui.out.file.write(json.dumps(as_json(ctx, states), indent=2) + "\n")
    elif args.pack:
        story(ctx, states[0])
    elif ui.plain(args.format):
        # the summary is data, as on a terminal: the last line of stdout (the rows above it are tab-separated)
        ui.out.file.write("".join(line + "\n" for line in overview_plain(ctx, states)))
        ui.out.file.write(f"{sum(s.ready for s in states)} of {len(states)} ready; every reason of one pack: "
                          "harness status <pack>\n")
    else:
        for row in overview(ctx, states):
            ui.out.print(row, no_wrap=True, overflow="ignore", crop=False)
    return int(code)


# ---------------------------------------------------------------------------------------------- data

def _latest(ctx, pack):
    return receipts.latest(ctx.root, pack.target, pack.id)


def _host(rec: receipts.Receipt) -> str:
    return receipts.host_label(rec)


def receipt_json(ctx, rec: receipts.Receipt | None) -> dict | None:
    if rec is None:
        return None
    path = rec.dir.relative_to(ctx.root) if rec.dir.is_relative_to(ctx.root) else rec.dir
    return {"lane": rec.lane, "verdict": rec.verdict.value, "started": rec.started, "host": _host(rec),
            "path": str(path)}


def pack_json(ctx, state: readiness.Readiness) -> dict:
    pack = state.pack
    manifest = ctx.manifest(pack.target)
    return {
        "id": pack.id,
        "title": pack.title,
        "target": pack.target,
        "kind": pack.kind,
        "class": pack.cls,
        "state": pack.state,
        "base": pack.base,
        "filing_base": state.filing_base,
        "default_base": manifest.default_base,
        "depends_on": list(pack.depends_on),
        "threads": [{"ref": thread_label(t.url), "url": t.url, "role": t.role, "state": t.state,
                     "verified": t.verified} for t in pack.threads],
        "lanes": [{"name": e.lane.name, "base": e.lane.base, "patched": e.lane.patched, "expect": e.lane.expect,
                   "on_filing_base": e.on_filing_base, "receipt": receipt_json(ctx, e.receipt),
                   "problem": e.problem.text if e.problem else None} for e in state.lanes],
        "latest_receipt": receipt_json(ctx, _latest(ctx, pack)),
        "apply": None if state.apply is None else {"base": state.apply.base, "status": state.apply.status,
                                                   "detail": state.apply.detail,
                                                   "checked_at": state.apply.checked_at,
                                                   # true: answered from the store's apply-checks, not checked now
                                                   "cached": state.apply.cached},
        "mitigation": (pack.mitigation or {}).get("status", "active") if pack.mitigation else None,
        "ready": state.ready,
        "reasons": [{"code": r.code.value, "text": r.text} for r in state.reasons],
        # upstream work overlapping the pack (None: not looked for, e.g. a pack that is not to be filed)
        "related": state.related.as_json() if state.related is not None else None,
        # where it would be filed: closed, merged or stale (no activity in decisions.STALE_DAYS days) targets
        "targets": [h.as_json() for h in decisions.target_health(pack)],
        # the upstream suite at the filing base: N of M cases run, patched-only failures (None: none declared)
        "suite": None if state.suite is None else {k: v for k, v in state.suite.as_json().items() if k != "cases"},
        # what would make it ready: the lane runs it lacks, their minutes, what runs cannot clear (harness plan)
        "to_ready": ready_plan.pack_plan(ctx, state).as_json(),
    }


def as_json(ctx, states) -> dict:
    return {"schema": JSON_SCHEMA, "generated": receipts.utc_now().isoformat().replace("+00:00", "Z"),
            "packs": [pack_json(ctx, s) for s in states]}


# ---------------------------------------------------------------------------------------------- views

def _age(delta) -> str:
    secs = int(delta.total_seconds())
    if secs < 3600:
        return f"{max(secs // 60, 0)}m"
    if secs < 86400:
        return f"{secs // 3600}h"
    return f"{secs // 86400}d"


def _upstream(pack) -> str:
    target = next((t for t in pack.threads if t.role == "filing target"), None)
    others = len(pack.threads) - (target is not None)
    stale = any(h.problem and h.problem.startswith("stale") for h in decisions.target_health(pack))
    more = f"{others} other thread{'s' if others != 1 else ''}"
    if target is None:  # nothing filed yet: say so, and how many threads it follows
        return f"not filed, {more}" if others else "-"
    text = f"{thread_label(target.url)} {target.state}" + (" stale" if stale else "")
    return text + (f" +{others}" if others else "")


REASON_BRIEF = 160  # characters of the first reason the overview prints (-v: all; 'status PACK' and --json: all)


def _brief(text: str, pack: str) -> str:
    """A reason cut to about REASON_BRIEF characters at a word, saying where the rest is (unless -v)."""
    if len(text) <= REASON_BRIEF or ui.verbosity >= 1:
        return text
    cut = " ".join(text.split())[:REASON_BRIEF].rsplit(" ", 1)[0].rstrip(",;:(")
    return f"{cut} ... (all of it: harness status {pack})"


def _related(state: readiness.Readiness) -> str:
    """The related column: 'N new' (undecided candidates), else 'N ok' (found, none waiting), 'none', or '-'
    (not looked for: the pack is not to be filed)."""
    scan = state.related
    if scan is None:
        return "-"
    new = related.undecided(state.pack, scan.candidates)
    if new:
        return f"{len(new)} new"
    return f"{len(scan.candidates)} ok" if scan.candidates else "none"


COLUMNS = (("pack", 4), ("target", 11), ("kind", 8), ("state", 8), ("upstream", 28), ("related", 8),
           ("latest", 15))
MIN_REASON = 24


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def _cells(ctx, state, now) -> tuple[str, ...]:
    pack = state.pack
    rec = _latest(ctx, pack)
    if rec is None:
        latest = "-"
    else:
        started = rec.started_at
        latest = f"{_age(now - started) if started else '?'} {_host(rec)} {rec.verdict}"
    return pack.id, pack.target, pack.kind, pack.state, _upstream(pack), _related(state), latest


def overview_plain(ctx, states) -> list[str]:
    """One tab-separated line per pack, nothing cut: the first reason in full, and how many more there are."""
    now = clock.now()
    lines = ["\t".join([name for name, _ in COLUMNS] + ["ready / why not"])]
    for state in states:
        more = len(state.reasons) - 1
        first = state.reasons[0] if state.reasons else None
        why = "ready" if first is None or state.ready else \
            f"[{first.code}] {_brief(first.text, state.pack.id)}" + (f" (+{more})" if more else "")
        lines.append("\t".join((*_cells(ctx, state, now), " ".join(why.split("\n")))))
    return lines


def overview(ctx, states, width: int | None = None) -> list[Text]:
    """One line per pack, cut to the console width: the first reason, and how many more there are."""
    now = clock.now()
    width = width or ui.out.width
    fixed = sum(w + 2 for _, w in COLUMNS)
    last = max(width - fixed, MIN_REASON)
    lines = [Text("  ".join(name.ljust(w) for name, w in COLUMNS) + "  ready / why not", style="bold")]
    for state in states:
        cells = _cells(ctx, state, now)
        line = Text("  ".join(_fit(str(c), w).ljust(w) for c, (_, w) in zip(cells, COLUMNS, strict=True)) + "  ")
        if state.ready:
            line.append("ready", style="green")
        else:
            more = len(state.reasons) - 1
            suffix = f" (+{more})" if more else ""
            line.append(_fit(state.reasons[0].text, last - len(suffix)) + suffix)
        lines.append(line)
    ready = sum(s.ready for s in states)
    lines.append(Text(f"{ready} of {len(states)} ready; every reason of one pack: harness status <pack>",
                      style="dim"))
    return lines


def story(ctx, state: readiness.Readiness) -> None:
    """Everything status knows about one pack, one fact per line."""
    pack = state.pack
    manifest = ctx.manifest(pack.target)
    lines = [f"pack {pack.id}: {pack.title}",
             f"  target {pack.target}, kind {pack.kind}" + (f" ({pack.cls})" if pack.cls else "")
             + f", state {pack.state}" + (f": {pack.state_reason}" if pack.state_reason else ""),
             f"  base {pack.base or '-'}; filed against {state.filing_base}; target default "
             f"{manifest.default_base}",
             f"  depends on {', '.join(pack.depends_on) or 'nothing'}"]
    if pack.threads:
        lines.append("  threads:")
        lines += [f"    {thread_label(t.url)}  {t.role}  {t.state}" + (f" (verified {t.verified})" if t.verified
                                                                          else "") for t in pack.threads]
    for h in decisions.target_health(pack):
        if h.problem:
            lines.append(f"  filing target {thread_label(h.url)}: {h.problem}")
    if state.related is not None:
        lines.append("  related upstream work (harness related " + pack.id + "):")
        if not state.related.candidates:
            lines.append("    none found")
        for c in state.related.candidates:
            d = decisions.decision_for(pack, c.ref)
            lines.append(f"    [{c.overlap.label}] {c.ref} {c.kind}{' ' + c.state if c.state else ''}: "
                         + (f"{d.relation} ({d.date})" if d else "not decided"))
    if state.apply is not None:
        a = state.apply
        when = f"checked {a.checked_at}" if a.checked_at else ""
        if a.cached:  # not checked by this command: say so, and where the answer is kept
            when = (f"not checked now; {when or 'a result'} remembered in {ctx.store.area('apply-checks')}, "
                    "shared by every clone on this host")
        lines.append(f"  series on {a.base}: {a.describe()}" + (f" ({when})" if when else ""))
    if pack.lanes:
        lines.append("  lanes:")
        for e in state.lanes:
            rec = e.receipt
            seen = "no receipt" if rec is None else (
                f"{rec.verdict} ({', '.join(rec.sentinels) or 'no sentinel'}) on "
                f"{_host(rec)} at {rec.started}, {rec.dir.relative_to(ctx.root)}")
            where = "" if e.on_filing_base else f" [not on {state.filing_base}]"
            lines.append(f"    {e.lane.name} ({e.lane.base}, {'patched' if e.lane.patched else 'baseline'}, expects "
                         f"{e.lane.expect}){where}: {seen}" + (f" -- {e.problem}" if e.problem and rec is not None
                                                                else ""))
    else:
        lines.append("  lanes: none")
    if state.suite is not None:
        lines.append(f"  upstream suite: {state.suite.line()}")
    if pack.mitigation:
        m = pack.mitigation
        lines.append(f"  mitigation ({m.get('status', 'active')}): {m.get('what')}")
        lines.append(f"    retire when: {m.get('retire_when')}")
    lines += verdict_lines(state.filing_base, [(str(r.code), r.text) for r in state.reasons], indent="  ")
    if not state.ready:
        lines += to_ready_lines(ready_plan.pack_plan(ctx, state), indent="  ")
    for line in lines:
        ui.data(line)


def to_ready_lines(plan: ready_plan.PackPlan, indent: str = "") -> list[str]:
    """What would make the pack ready: each task with its host and minutes, the commands, and what runs cannot
    clear (harness plan does it for every pack, fitted to a device budget)."""
    if not plan.steps and not plan.blockers and not plan.depends_on:
        return []
    out = [f"{indent}what would make it ready:", *ready_plan.step_lines(list(plan.steps), indent + "  ")]
    out += [f"{indent}  and first: {d} (a dependency) ready" for d in plan.depends_on]
    out += [f"{indent}  runs cannot clear: {b}" for b in plan.blockers]
    return out


def verdict_lines(filing_base: str, reasons: list[tuple[str, str]], indent: str = "") -> list[str]:
    """The verdict of 'status PACK': ready, or every reason (code, text) why not. tools/pack_pages.py writes the
    same lines on each pack's page from 'status --json', so a page cannot say other than status does."""
    if not reasons:
        return [f"{indent}READY to file against {filing_base}"]
    return [f"{indent}not ready to file against {filing_base} ({len(reasons)} reason(s)):",
            *(f"{indent}  [{code}] {text}" for code, text in reasons)]
