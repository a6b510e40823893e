"""``harness run PACK``: every lane of the pack, with receipts and a summary table."""

from __future__ import annotations

import json
import sys

from harness.base import settings, ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import BuildError, Exit, worst
from harness.host import sweep_plan
from harness.lane import lanes, receipts, runs, sessions
from harness.lane.receipts import Verdict

_STYLE = {Verdict.PASS: "green", Verdict.SKIPPED: "yellow", Verdict.MISMATCH: "red", Verdict.CRASH: "red",
          Verdict.TIMEOUT: "red"}


def register(sub) -> None:
    p = sub.add_parser("run", help="run a pack's lanes: build, import-check, reproducer, receipt",
                       description="Build each lane of PACK (baseline and patched), import-check it, run the "
                                   "pack's reproducer against it, write a receipt per lane and update "
                                   "tracking.toml. Lanes that need a GPU this host lacks are reported as skipped "
                                   f"(exit {int(Exit.SKIPPED)}); a pack without lanes validates nothing "
                                   f"(exit {int(Exit.NO_LANES)}). -q stops echoing the reproducer's output.")
    p.add_argument("pack", help="pack id, e.g. 09")
    p.add_argument("--lane", action="append", default=[], help="run only this lane (repeatable)")
    p.add_argument("--receipts-dir", type=_args.path, default=None, help="write receipts here (default: receipts/)")
    p.add_argument("--no-tracking", action="store_true", help="do not update tracking.toml")
    p.add_argument("--skip-current", action="store_true",
                   help="answer a lane by its latest receipt when that passed, is current (same pin, series, "
                        "declaration, reproducer and what it imported, as readiness and 'sweep' decide) for it and "
                        "every lane it runs with, and was made on a host of this one's kind (GPU or none); its "
                        "build is still made and import-checked (CI uses this)")
    p.add_argument("--result-file", type=_args.path, default=None,
                   help="also write {\"exit\": N, \"lanes\": [...]} here (used by the nox sessions)")
    p.add_argument("--json", action="store_true",
                   help="print the result as JSON on stdout (schema 1: pack, exit, exit_name, lanes[])")
    _args.output_format(p)
    _args.source(p)
    _args.common(p)


def _current(ctx, pack, chosen: list[str]) -> dict:
    """The lanes to answer from their receipts: current and passed, made on a host of this one's kind (with a GPU
    or without: a lane whose reproducer skips itself on a CPU host is never answered there by a GPU host's
    receipt), together with every lane they run with (a patched lane reads what its baseline left in the run
    directory: both are current, or both run)."""
    current = sweep_plan.current_lanes(ctx.root, ctx.tracking, pack, ctx.manifest(pack.target), ctx.receipts_dir)
    gpu_here = runs.cuda_devices(ctx.python, ctx.store.area("memo") / "cuda-devices")[0] > 0
    ok = {name: rec for name, rec in current.items() if (receipts.host_label(rec) != "cpu") == gpu_here}
    names = {lane.name for group in sweep_plan.pairs(pack) if all(lane.name in ok for lane in group)
             for lane in group}
    return {name: ok[name] for name in names if not chosen or name in chosen}


def main(args) -> int:
    ctx = context(args, receipts_dir=args.receipts_dir, echo=ui.verbosity >= 0)
    pack = ctx.tracking.pack(args.pack)
    if not pack.lanes:
        ui.warn(f"pack {pack.id} has no lanes in tracking.toml: nothing was validated")
        code = Exit.NO_LANES
        results = []
    else:
        try:
            current = _current(ctx, pack, args.lane) if args.skip_current else None
            results = lanes.run_pack(ctx, pack, args.lane or None, update_tracking=not args.no_tracking,
                                     current=current)
        except BuildError as exc:
            _hint_lane_environment(exc, ctx, pack, args)
            raise
        code = worst(r.exit for r in results)
    result = as_json(ctx, pack, results, code)
    if args.result_file:  # receipts as absolute paths: 'sweep' reads them from another working directory
        args.result_file.write_text(json.dumps({"exit": int(code), "lanes": [
            {"lane": r.lane, "verdict": r.verdict, "reason": r.reason,
             "receipt": str(r.receipt.path) if r.receipt else None} for r in results]}))
    if args.json:
        ui.out.file.write(json.dumps(result, indent=2) + "\n")
    elif results:
        ui.tabular(("lane", "verdict", "why", "receipt"),
                   [(ui.text(r["lane"]), ui.text(r["verdict"], _STYLE[Verdict(r["verdict"])]), ui.text(r["reason"]),
                     ui.text(r["receipt"] or "-")) for r in result["lanes"]],
                   fmt=args.format, title=f"pack {pack.id} - {pack.title}")
    skipped = [r for r in results if r.verdict == Verdict.SKIPPED]
    latest = receipts.latest_by_lane(ctx.root, pack.target, pack.id) if skipped else {}
    for r in skipped:
        last = latest.get(r.lane)
        if last is None:
            ui.info(f"  {r.lane}: skipped here; no receipt yet from a host that has the hardware")
        else:
            ui.info(f"  {r.lane}: skipped here; latest receipt {last.dir.relative_to(ctx.root)}: "
                    f"{last.verdict} ({', '.join(last.sentinels) or 'no sentinel'}) on "
                    f"{receipts.host_description(last)} at {last.started}")
    if results and len(skipped) == len(results):
        ui.warn("no lane could run on this host: nothing was validated")
    for line in next_steps(ctx, pack, results, skipped, args):
        ui.info(line)
    ui.info(f"exit {int(code)} ({code.name})")
    return int(code)


def as_json(ctx, pack, results, code: Exit) -> dict:
    """What ``--json`` prints and ``--result-file`` holds: receipts as paths relative to the checkout."""
    return {"schema": 1, "pack": pack.id, "target": pack.target, "exit": int(code), "exit_name": code.name,
            "lanes": [{"lane": r.lane, "verdict": str(r.verdict), "reason": r.reason,
                       "receipt": receipts.display_path(r.receipt.dir, ctx.root) if r.receipt else None}
                      for r in results]}


def _hint_lane_environment(exc: BuildError, ctx, pack, args) -> None:
    """An import check that fails for want of a module, run with the harness's own interpreter: name the fix."""
    if exc.hint or "No module named" not in str(exc) or args.python not in (None, sys.executable):
        return
    env = settings.lane_env_dir(ctx.root, pack.target)
    session = f"{sessions.session_prefix(ctx.root, pack.target)}_pack{pack.id}"
    where = env.relative_to(ctx.root) if env.is_relative_to(ctx.root) else env
    exc.hint = (f"this interpreter ({sys.executable}) lacks {pack.target}'s lane dependencies: run "
                f"'nox -s {session}' (it builds the lane environment {where}), or pass --python {where}/bin/python "
                "once it exists")


def next_steps(ctx, pack, results, skipped, args) -> list[str]:
    """After a skip: how to run those lanes on a GPU host; after any lane wrote a receipt into the checkout: what
    this run changed there, and the one command that keeps it and the one that discards it."""
    lines = []
    if skipped:
        bundle = f"dist/bundle-{pack.id}.tar.xz"
        only = "".join(f" --lane {r.lane}" for r in skipped)
        lines.append(f"to run the skipped lane(s) on a GPU host: harness bundle {pack.id} -o {bundle}; there: python3 "
                     f"-m harness.bootstrap {bundle} -- run {pack.id}{only} --receipts-dir /tmp/r --no-tracking; back "
                     "here: harness receipts import (docs/gpu-hosts.md)")
    ran = [r for r in results if r.receipt is not None]
    if ran:
        lines.append(changes_line(ctx, pack, len(ran), tracked=not args.no_tracking))
    return lines


def changes_line(ctx, pack, ran: int, tracked: bool) -> str:
    """What ``ran`` lanes changed in the checkout, with the commands that keep or discard it. The receipt directories
    are new, untracked files: ``git checkout`` alone leaves them (and 'status' keeps reading them); ``git clean``
    of the pack's receipt directory removes exactly those, and tracking.toml goes back to its committed text."""
    root = ctx.receipts_dir or receipts.receipts_root(ctx.root)
    where = receipts.display_path(root, ctx.root)
    pack_dir = receipts.display_path(root / pack.target / pack.id, ctx.root)
    inside = (root / pack.target / pack.id).is_relative_to(ctx.root)
    keep = [p for p, wanted in ((pack_dir, inside), ("tracking.toml", tracked)) if wanted]
    undo = [cmd for cmd, wanted in (("git checkout -- tracking.toml", tracked),
                                    (f"git clean -fdq -- {pack_dir}/", inside)) if wanted]
    text = f"the {ran} lane(s) that ran here wrote receipts under {where}/" + ("; tracking.toml was updated" if tracked
                                                                              else "")
    if keep:
        text += f". Keep: git add {' '.join(keep)} && git commit; discard: {' && '.join(undo)}"
    return text
