"""``harness bisect PACK --lane NAME``: the upstream commit that changed a lane's verdict on a git base."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import ConfigError, Exit
from harness.lane.context import Context
from harness.lane.tracking import Tracking
from harness.watch import refresh


def _first_change(hist: refresh.History, good: str, bad: str, good_said, said_at) -> refresh.Commit:
    """The first commit of good..bad whose lane prints another sentinel than ``good_said``: a binary search over
    the first-parent chain (one branch, in order), then, where that lands on a merge whose brought-in branch
    changed the verdict already, the same search down that branch; the merge itself when its branch did not."""
    while True:
        chain = hist.mainline(good, bad)
        lo, hi = 0, len(chain) - 1  # chain[hi] is bad: find the first that differs from good
        while lo < hi:
            mid = (lo + hi) // 2
            if said_at(chain[mid].sha) == good_said:
                lo = mid + 1
            else:
                hi = mid
        first = chain[lo]
        parents = hist.parents(first.sha)
        if len(parents) < 2:
            return first
        side = parents[1]  # the tip of the branch the merge brought in, seen from its first parent
        if said_at(side) == good_said:
            return first  # the branch alone did not change it: the merge did
        good, bad = parents[0], side


def register(sub) -> None:
    p = sub.add_parser(
        "bisect", help="find the upstream commit that changed a lane's verdict between the pin and a new head",
        description="Run the lane at the pin (--good, default the base's pinned commit) and at --bad (a branch, "
                    "tag or commit; default the ref the base follows), then at midpoints of the history between "
                    "them, each in a scratch copy of the checkout with the base moved there: the first commit whose "
                    "lane prints another sentinel than the good one. A lane that needs a GPU this host lacks is not "
                    "run: the commits to run it at are printed as a plan (exit 3). Exit 0 when found or when the "
                    "verdict does not change, 4 when the history is not available.")
    p.add_argument("pack")
    p.add_argument("--lane", required=True, help="the lane to run (on a git base)")
    p.add_argument("--good", metavar="REV", default=None, help="where the old verdict holds (default: the pin)")
    p.add_argument("--bad", metavar="REV", default=None,
                   help="where the verdict is different (default: the ref the base follows, now)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    _args.source(p)  # --python: a lane environment (megatron needs 3.12), --bundle-dir, artefacts and mirrors
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    pack = ctx.tracking.pack(args.pack)
    lane = next((x for x in pack.lanes if x.name == args.lane), None)
    if lane is None:
        raise ConfigError(f"pack {pack.id} has no lane {args.lane!r} (lanes: {', '.join(x.name for x in pack.lanes)})")
    manifest = ctx.manifest(pack.target)
    base = manifest.base(lane.base or manifest.default_base)
    if base.git is None:
        raise ConfigError(f"lane {lane.name} runs on {base.name}, a release: bisect walks a git base's history")
    good = refresh.resolve(base.git, args.good, ctx.sources())[0] if args.good else base.git.commit
    bad, _ = refresh.resolve(base.git, args.bad, ctx.sources())
    if good == bad:  # nothing lies between: running the lane twice would only say so after minutes
        if args.json:
            json.dump({"schema": 1, "kind": "patchlane-bisect", "pack": pack.id, "lane": lane.name, "good": good,
                       "bad": bad, "good_sentinel": None, "bad_sentinel": None, "commits": 0, "first": None,
                       "steps": []}, sys.stdout, indent=1)
            sys.stdout.write("\n")
        ui.info(f"bisect: good and bad are the same commit {good[:12]}: nothing to find, no lane run")
        return 0
    scratch = refresh.scratch_dir(f"bisect-{pack.id}")
    options = _args.artifact_options(args) + (["--python", ctx.python] if ctx.python != sys.executable else [])
    try:
        hist = refresh.history(replace(base.git, commit=good), bad, ctx.sources(), scratch / "history")
        if not hist.known:
            raise refresh.RefreshError(f"no history between {good[:12]} and {bad[:12]}: {hist.why_unknown}",
                                       hint="fetch from a full mirror or the repository (--git-mirrors)")
        steps: list[dict] = []

        def verdict_at(sha: str) -> tuple[str | None, bool]:
            ran = next((s for s in steps if s["sha"] == sha), None)
            if ran is not None:  # a merge's parent may be asked again: one run per commit
                return ran["sentinel"], False
            tree = scratch / f"tree-{sha[:12]}"
            root = refresh.moved_tree(ctx.root, pack.target, base.name, sha, hist, tree, propose=False)
            moved = Context(root=root, tracking=Tracking.load(root), store=ctx.store, options=ctx.options)
            ui.info(f"bisect: {pack.id} {lane.name} at {sha[:12]}")
            said, planned = refresh.run_lane_at(moved, pack, lane, scratch / f"receipts-{sha[:12]}", options)
            shutil.rmtree(tree, ignore_errors=True)
            steps.append({"sha": sha, "sentinel": said})
            return said, planned

        commits = hist.commits
        good_said, planned = verdict_at(good)
        if planned:
            return _plan(args, pack, lane, commits)
        bad_said, _ = verdict_at(bad)
        doc: dict = {"schema": 1, "kind": "patchlane-bisect", "pack": pack.id, "lane": lane.name, "good": good,
               "bad": bad, "good_sentinel": good_said, "bad_sentinel": bad_said, "commits": len(commits),
               "first": None, "steps": steps}
        found = None
        if good_said != bad_said:
            first = _first_change(hist, good, bad, good_said, lambda sha: verdict_at(sha)[0])
            said = next((s["sentinel"] for s in steps if s["sha"] == first.sha), bad_said)
            doc["first"] = {"sha": first.sha, "subject": first.subject, "sentinel": said,
                            "merge": len(hist.parents(first.sha)) > 1}
        found = doc["first"]
        doc["steps"] = steps[2:]  # the midpoints (good and bad are named above)
        if args.json:
            json.dump(doc, sys.stdout, indent=1)
            sys.stdout.write("\n")
        elif found:
            ui.data(f"{found['sha']} {found['subject']}")
            ui.info(f"bisect: lane {lane.name} printed {good_said} at {good[:12]} and {found['sentinel']} "
                    f"from {found['sha'][:12]} on ({len(steps)} run(s) over {len(commits)} commit(s))")
        else:
            ui.info(f"bisect: lane {lane.name} printed {good_said} at both {good[:12]} and {bad[:12]}: nothing to find")
        return int(Exit.OK)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _plan(args, pack, lane, commits) -> int:
    """A GPU lane on a host without one: the commits to run it at, halving the history each time, as a plan."""
    order, lo, hi = [], 0, len(commits) - 1
    while lo <= hi:  # the midpoints a bisection visits first, then the rest: a sweep over GPUs runs them at once
        mid = (lo + hi) // 2
        order.append(commits[mid])
        lo = mid + 1
    rest = [c for c in commits if c not in order]
    plan = [{"sha": c.sha, "subject": c.subject,
             "command": f"harness refresh {pack.id} --to {c.sha} (then harness run {pack.id} --lane {lane.name})"}
            for c in [*order, *rest]]
    if args.json:
        json.dump({"schema": 1, "kind": "patchlane-bisect-plan", "pack": pack.id, "lane": lane.name,
                   "commits": plan}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for row in plan:
            ui.data(f"{row['sha']}\t{row['subject']}")
        ui.info(f"bisect: lane {lane.name} needs hardware this host lacks: run it at these {len(plan)} commit(s) on "
                "a GPU host (the first ones halve the history)")
    return int(Exit.SKIPPED)
