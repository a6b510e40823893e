"""``harness refresh [PACK ...] [--to REF]``: re-decide every pack on a git base when upstream moves."""

from __future__ import annotations

import difflib
import json
import shutil
import sys
from pathlib import Path

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import ConfigError, Exit, HarnessError, SeriesError, UsageError
from harness.host import sweep_plan
from harness.lane import lanes, series, suite
from harness.lane.context import Context
from harness.lane.tracking import Tracking
from harness.upstream import git
from harness.watch import refresh

SCHEMA = 1
_STYLE = {refresh.UNCHANGED: "green", refresh.OFFSETS: "yellow", refresh.CONFLICTS: "red",
          refresh.LANDED: "cyan", refresh.LANDED_MODIFIED: "cyan", refresh.SUPERSEDED: "cyan",
          refresh.STILL_NEEDED: "green"}


def register(sub) -> None:
    p = sub.add_parser(
        "refresh", help="when upstream moves: classify every pack on a git base at the new head, propose the move",
        description="For each git base (upstream main/dev) of the selected packs' targets, resolve the new head "
                    "(--to REF, else the ref the base follows, from its mirror or repository), try every pack's "
                    "series there and give it one class: unchanged, offsets, conflicts (with the upstream commits "
                    "that changed the conflicting lines), landed (an upstream commit with the same patch-id), "
                    "landed-modified (the commit after which the series is contained, with git range-diff), "
                    "superseded (the bug lane prints BUG_ABSENT at the head) or still-needed (it still "
                    "reproduces). A bug lane that needs a GPU this host lacks is planned, not run. --propose "
                    "writes the move as one commit on a branch of its own: the new pin, the series regenerated "
                    "where hunks moved, and a note with the classes and the lanes the move made stale "
                    "(docs/refresh.md). Exit 5 when a pack's series conflicts at the head, else 0.")
    p.add_argument("packs", nargs="*", metavar="PACK", help="pack ids (default: every active pack on a git base)")
    p.add_argument("--target", action="append", default=[], help="only this target (repeatable)")
    p.add_argument("--base", action="append", default=[], help="only this git base, e.g. main (repeatable)")
    p.add_argument("--to", metavar="REF", default=None,
                   help="the new head: a branch, tag or full commit id (default: the ref each base follows)")
    p.add_argument("--no-lanes", action="store_true",
                   help="do not run bug lanes at the head (superseded and still-needed are then not decided)")
    p.add_argument("--propose", action="store_true",
                   help="write the move as one commit on a branch refresh/<target>-<base>-<sha12> (needs a git "
                        "checkout; the working tree is not touched)")
    p.add_argument("--lane-python", action="append", default=[], metavar="TARGET=PYTHON",
                   help="run TARGET's bug lanes with this interpreter's environment (its lane environment: the nox "
                        "refresh session passes each target's; default: this interpreter)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    _args.artifacts(p)
    _args.output_format(p)
    _args.common(p)


_INACTIVE = ("absorbed", "retired")


def main(args) -> int:
    ctx = context(args)
    chosen = {ctx.tracking.pack(p).id for p in args.packs}
    known = sorted({p.target for p in ctx.tracking.packs.values()})
    stray = [t for t in args.target if t not in known]
    if stray:  # a typo is not "nothing to refresh"
        close = difflib.get_close_matches(stray[0], known, n=1)
        guess = f"; did you mean {close[0]}?" if close else ""
        raise UsageError(f"--target {stray[0]}: no pack has that target{guess} (targets: {', '.join(known)})")
    targets = sorted({p.target for p in ctx.tracking.packs.values()
                      if (not args.target or p.target in args.target) and (not chosen or p.id in chosen)})
    thread_changes = _thread_changes(ctx, [p for p in ctx.tracking.packs.values()
                                           if p.target in targets and p.state not in _INACTIVE
                                           and (not chosen or p.id in chosen)], args)
    results = []
    for target in targets:
        manifest = ctx.manifest(target)
        for base_name in refresh.git_bases(manifest):
            if args.base and base_name not in args.base:
                continue
            packs = [p for p in ctx.tracking.packs.values()
                     if p.target == target and p.state not in _INACTIVE and (not chosen or p.id in chosen)
                     and base_name in {lane.base for lane in p.lanes}  # a base the pack runs on
                     and series.load_series(ctx.root, target, p.id, base_name)]
            if packs:
                results.append(_one_base(ctx, args, manifest, base_name, packs, thread_changes))
    trees = {(r["target"], r["base"]): Path(r.pop("_tree")) for r in results if r.get("_tree")}
    retirements = [r.as_json() for r in refresh.evaluate_retirements(ctx, trees)]
    for r in results:
        shutil.rmtree(r.pop("_scratch"), ignore_errors=True)
    doc = {"schema": SCHEMA, "kind": "patchlane-refresh", "bases": results, "retirements": retirements,
           "threads": thread_changes}
    conflicts = any(m["class"] == refresh.CONFLICTS for r in results for m in r["packs"])
    code = int(Exit.APPLY if conflicts else Exit.OK)
    doc["exit"] = code
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        _print(doc, args)
    if not results:
        ui.info("refresh: no active pack has a series on a git base of the selection")
    return code


def _one_base(ctx: Context, args, manifest, base_name: str, packs, thread_changes: dict) -> dict:
    base = manifest.base(base_name)
    assert base.git is not None
    new, source = refresh.resolve(base.git, args.to, ctx.sources())
    ui.info(f"refresh {manifest.target} {base_name}: {base.git.commit[:12]} -> {new[:12]} ({args.to or base.git.ref}, "
            f"{source})")
    scratch = refresh.scratch_dir(f"{manifest.target}-{base_name}")
    try:
        hist = refresh.history(base.git, new, ctx.sources(), scratch / "history")
        ui.info(f"refresh {manifest.target} {base_name}: " + (f"{len(hist.commits)} upstream commit(s) between the "
                f"pin and the head" if hist.known else f"history unknown: {hist.why_unknown}"))
        root = refresh.moved_tree(ctx.root, manifest.target, base_name, new, hist, scratch / "proposal", args.propose)
        moved_ctx = Context(root=root, tracking=Tracking.load(root), store=ctx.store, options=ctx.options)
        checkout = moved_ctx.materialize(moved_ctx.manifest(manifest.target), base_name)
        moves = []
        for pack in packs:
            ui.info(f"refresh {manifest.target} {base_name}: pack {pack.id}")
            move = refresh.classify(moved_ctx, pack, checkout, hist, scratch / f"pack-{pack.id}")
            lane = refresh.bug_lane(pack, base_name)
            move.bug_lane = lane.name if lane else None
            if lane is not None and not args.no_lanes and move.klass not in (refresh.LANDED, refresh.LANDED_MODIFIED):
                ui.info(f"refresh: running {pack.id}'s bug lane {lane.name} at the head")
                try:
                    sentinel, planned = refresh.run_lane_at(moved_ctx, pack, lane, scratch / "receipts",
                                                            _source_options(args, pack.target))
                except refresh.RefreshError as exc:
                    ui.warn(str(exc))
                    sentinel, planned = None, False
                refresh.judge_lane(move, sentinel, planned)
            if refresh.OFFSETS in (move.klass, move.applies):
                refresh.regenerate(moved_ctx, pack, checkout, scratch / f"regen-{pack.id}")
            moves.append(move)
        stale = _stale_lanes(moved_ctx, manifest.target, base_name) if new != base.git.commit else []
        suites = _reselect(moved_ctx, packs, base_name, write=args.propose)
        next_stack = _next_stack(ctx, moved_ctx, manifest.target, base_name, moves)
        out = {"target": manifest.target, "base": base_name, "old": base.git.commit, "new": new, "source": source,
               "history": {"known": hist.known, "commits": len(hist.commits), "why_unknown": hist.why_unknown},
               "packs": [m.as_json() for m in moves], "stale_lanes": stale, "suites": suites, "stack": next_stack,
               "counts": refresh.summary_counts(moves), "branch": None, "commit": None,
               "_tree": str(checkout.path), "_scratch": str(scratch)}
        if args.propose:
            changed = [t for t in thread_changes["changes"] if t["pack"] in {p.id for p in packs}]
            out["branch"], out["commit"] = refresh.commit_proposal(root, manifest.target, base_name, hist, moves,
                                                                   stale, suites, changed, _stack_lines(next_stack))
            ui.info(f"refresh {manifest.target} {base_name}: proposed as {out['commit'][:12]} on branch "
                    f"{out['branch']}")
        return out
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    finally:
        if args.propose:
            git.call(ctx.root, "worktree", "remove", "--force", str(scratch / "proposal"))


def _next_stack(ctx: Context, moved_ctx: Context, target: str, base_name: str, moves) -> dict:
    """The stack a training image would install after the move (``harness stack``), beside today's: packs that
    landed upstream or were fixed another way at the head leave it, a series that conflicts there is left out
    naming its hunk, a regenerated one comes in changed. Composing needs every pack's series applied on each
    pin; a base that cannot be had says why instead."""
    from harness.host import stack

    gone = {m.pack.id: f"{m.klass} at the head" + (f": {m.detail}" if m.detail else "") for m in moves
            if m.klass in (refresh.LANDED, refresh.LANDED_MODIFIED, refresh.SUPERSEDED)}
    try:
        return stack.proposal(stack.compose(ctx, target, base_name),
                              stack.compose(moved_ctx, target, base_name, leave=gone))
    except HarnessError as exc:
        return {"error": str(exc)}


def _stack_lines(found: dict) -> list[str]:
    """The next stack in a few lines, for the printed summary and the proposal's commit message."""
    if "error" in found:
        return [f"The next stack cannot be composed: {found['error']}"]
    now, then = found["current"], found["next"]
    lines = [f"Stack: {now['version']} ({', '.join(p['id'] for p in now['packs']) or 'no pack'}) -> "
             f"{then['version']} ({', '.join(p['id'] for p in then['packs']) or 'no pack'})"]
    lines += [f"- pack {r['pack']} leaves the stack: {r['why']}" for r in found["removed"]]
    lines += [f"- pack {pid} comes into the stack" for pid in found["added"]]
    lines += [f"- pack {pid}: its series changed" for pid in found["changed"]]
    lines.append(f"- lanes to run again on the next stack: packs {', '.join(found['rerun'])}" if found["rerun"]
                 else "- nothing to run again on the next stack")
    return lines


def _reselect(ctx: Context, packs, base_name: str, write: bool) -> list[dict]:
    """Each recorded suite selection of ``packs`` at ``base_name`` derived again at the new head (the series
    applied there): what drifted (``suite.differences``); with ``write`` (a proposal), the selection re-written in
    the proposal's tree, keeping what a person recorded (added ids, exclusions)."""
    out = []
    for pack in packs:
        path = suite.selection_path(ctx.root, pack.id, base_name)
        if not path.is_file():
            continue
        old = suite.load(path)
        try:
            source = lanes.suite_source(ctx, pack, base_name)
            derived = source.derive()
        except (ConfigError, SeriesError) as exc:  # a series that conflicts at the head has no tree to read
            out.append({"pack": pack.id, "base": base_name, "drift": None, "why": str(exc)})
            continue
        names = [p.name for p in source.own]
        drift = suite.differences(old, derived, names)
        if drift and write:
            suite.write(path, suite.dump(suite.refreshed(old, pack.id, base_name, names, derived)))
        out.append({"pack": pack.id, "base": base_name, "drift": drift, "why": None})
    return out


def _thread_changes(ctx: Context, packs, args) -> dict:
    """The packs' threads whose state differs from tracking.toml's: read from GitHub with a token, else from the
    recorded answers (then said so: they are not today's state); nothing is written here."""
    from harness.upstream import github
    from harness.watch import related, threads

    token = github.token_from_env()
    client: github.GitHub | github.Recorded
    if token:
        client, source = github.GitHub(github.DEFAULT_API, token, 15.0), "GitHub"
    else:
        rec = related.recorded_dir(ctx.root, None)
        if rec is None:
            return {"source": None, "changes": [], "not_found": []}
        client, source = github.Recorded(rec), f"recorded answers in {rec} (not today's state)"
    result = threads.refresh(ctx.tracking, client, packs=list(packs), write=False)
    return {"source": source, "not_found": list(result.not_found),
            "changes": [{"pack": c.pack.id, "url": c.url, "old": c.old, "new": c.new, "action": c.action}
                        for c in result.changes]}


def _source_options(args, target: str) -> list[str]:
    """A bug lane's child harness: the target's lane interpreter, if given, and where bases come from."""
    python = _args.per_target(args.lane_python).get(target)
    return (["--python", python] if python else []) + _args.artifact_options(args)


def _stale_lanes(ctx: Context, target: str, base_name: str) -> list[dict]:
    """Every lane on the moved base: their receipts name the old pin, so the move made them stale. As the sweep
    plans them (what it needs, its time limit), for a sweep after the move is taken."""
    plan = sweep_plan.make_plan(ctx, sweep_plan.Selection((), (target,), (base_name,), ()), rerun=True, jobs=1)
    return [{"pack": t.pack, "lanes": list(t.lanes), "gpus": t.need.gpus, "timeout_s": t.timeout_s}
            for t in plan.tasks]


def _print(doc: dict, args) -> None:
    rows = []
    for r in doc["bases"]:
        for m in r["packs"]:
            lane = m["bug_lane"] or "-"
            said = "planned (needs a GPU)" if m["planned"] else (m["bug_sentinel"] or "not run")
            rows.append([r["target"], r["base"], m["pack"], ui.text(m["class"], _STYLE.get(m["class"], "")),
                         f"{lane}: {said}" if m["bug_lane"] else "-", m["detail"] or "-"])
    ui.tabular(["target", "base", "pack", "class", "bug lane at the head", "detail"], rows, fmt=args.format,
               title="refresh")
    for m in doc["retirements"]:
        said = {True: "came true", False: "not yet", None: "cannot be told yet"}[m["holds"]]
        ui.info(f"mitigation of pack {m['pack']}: its retirement condition {said}: "
                + "; ".join(f"{c['condition']}: {c['why']}" for c in m["conditions"]))
    for t in doc["threads"]["changes"]:
        ui.info(f"pack {t['pack']}: thread {t['url']} {t['old']} -> {t['new']}" + (f": {t['action']}" if t["action"]
                                                                                   else "")
                + f" ({doc['threads']['source']})")
    for r in doc["bases"]:
        for sel in r["suites"]:
            said = (f"cannot be derived at the head: {sel['why']}" if sel["drift"] is None
                    else "; ".join(sel["drift"]) if sel["drift"] else "no drift")
            ui.info(f"suite of pack {sel['pack']} at {r['target']} {sel['base']}, derived again at the head: {said}")
    for r in doc["bases"]:
        for line in _stack_lines(r["stack"]):
            ui.info(f"{r['target']} {r['base']}: {line.removeprefix('- ')}")
    for r in doc["bases"]:
        counts = ", ".join(f"{n} {k}" for k, n in r["counts"].items())
        gpu = sum(1 for t in r["stale_lanes"] if t["gpus"])
        ui.info(f"{r['target']} {r['base']} {r['old'][:12]} -> {r['new'][:12]}: {counts}; "
                f"{len(r['stale_lanes'])} task(s) of lanes made stale ({gpu} need a GPU)"
                + (f"; proposed on {r['branch']}" if r["branch"] else ""))
