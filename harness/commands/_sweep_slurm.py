"""``harness sweep --slurm``: submit, follow, cancel, resume and gather a sweep run by Slurm (docs/sweep.md).

The files and Slurm's commands are ``harness/host/slurm.py``'s; this module is the command's side of it: which
tasks to submit (the plan's, less those with a current receipt and those an earlier round still has queued or
running), the watch loop with its progress on stderr, and the gather job's import and summary.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.base import ui
from harness.commands._context import context
from harness.errors import Exit, HarnessError, UsageError, worst
from harness.host import slurm, sweep_plan
from harness.host.sweep_plan import Plan
from harness.lane import receipts, runs

SUMMARY_SCHEMA = 1
DEFAULT_DIR = ".slurm-sweep"  # under the checkout: shared storage on a cluster, where the array tasks find it
POLL_ENV = "PATCHLANE_SLURM_POLL_S"


def slurm_dir(args, ctx) -> Path:
    return (args.slurm_dir or ctx.root / DEFAULT_DIR).resolve()


def options(args) -> slurm.Options:
    return slurm.Options(partition=args.partition, account=args.account, time=args.time,
                         gpus_flag=args.gpus_flag, extra=tuple(args.sbatch_arg))


def harness_command(args) -> list[str]:
    """How an array task starts the harness: this interpreter, or the offline bundle's bootstrap (it unpacks the
    bundle once per node, under a lock, and adds ``--bundle-dir`` itself)."""
    if args.bundle is not None:
        return [sys.executable, "-m", "harness.bootstrap", str(Path(args.bundle).resolve()), "--"]
    return [sys.executable, "-m", "harness"]


def root_options(args, ctx) -> list[str]:
    """What every task and the gather job are told: this checkout and store, where bases come from."""
    opts = ["--root", str(ctx.root)]
    if args.bundle is None:
        opts += ["--cache", str(ctx.store.root)]
    for d in args.artifacts:
        opts += ["--artifacts", str(Path(d).resolve())]
    for d in args.git_mirrors:
        opts += ["--git-mirrors", str(Path(d).resolve())]
    if args.python != sys.executable:
        opts += ["--python", ctx.python]
    return opts


def _states(client: slurm.Slurm, rnd: slurm.Round) -> dict[str, slurm.TaskState]:
    return client.states(rnd.jobs())


def import_round(ctx, rnd: slurm.Round, args) -> list[str]:
    """Import the receipts every finished task of ``rnd`` wrote, task by task, through ``receipts import`` (each
    verified as a receipt brought from a GPU host is); the lines it printed. Receipts already present are
    skipped by the import itself, so a round may be gathered more than once."""
    lines: list[str] = []
    base = [sys.executable, "-m", "harness", "receipts", "import"]
    opts = ["--root", str(ctx.root), "--cache", str(ctx.store.root), "-q"]
    for directory in sorted((rnd.dir / "receipts").glob("task-*")):
        with tempfile.TemporaryDirectory(prefix="patchlane-slurm-") as tmp:
            tar = Path(tmp) / f"{directory.name}.tar"
            if not slurm.tar_receipts(directory, tar):
                continue
            proc = subprocess.run([*base, str(tar), *opts], capture_output=True, text=True)
            if proc.returncode != 0:
                said = (proc.stderr or proc.stdout).strip().splitlines()
                raise slurm.SlurmError(f"{directory}: receipts import exited {proc.returncode}: "
                                       f"{said[-1] if said else 'no output'}")
            lines += [line for line in proc.stdout.splitlines() if line.strip()]
    return lines


def submit(args, ctx, selection: sweep_plan.Selection, jobs: int) -> int:
    """Gather what earlier rounds finished, then submit the plan's tasks that have neither a current receipt nor a
    task still queued or running in an earlier round."""
    client = slurm.Slurm()
    sdir = slurm_dir(args, ctx)
    busy: set[tuple[str, tuple[str, ...]]] = set()
    for rnd in slurm.rounds(sdir):
        states = _states(client, rnd)
        try:
            earlier = Plan.load(rnd.plan_file, ctx.tracking)
        except HarnessError as exc:
            ui.warn(f"slurm {rnd.dir.name}: not resumed ({exc})")
            continue
        busy |= slurm.active_labels(rnd, earlier, states)
        for line in import_round(ctx, rnd, args):
            ui.info(f"slurm {rnd.dir.name}: {line}")
    ctx = context(args)  # the imports updated tracking.toml
    plan = sweep_plan.make_plan(ctx, selection, rerun=args.rerun, jobs=jobs)
    to_run = [t for t in plan.tasks if t.state == "run"]
    held = [t for t in to_run if (t.pack, t.lanes) in busy]
    indices = [t.index for t in to_run if (t.pack, t.lanes) not in busy]
    current = len(plan.tasks) - len(to_run)
    if not indices:
        ui.info(f"slurm: nothing to submit: {current} task(s) current, {len(held)} still queued or running in an "
                f"earlier round")
        _print_submission(args, None, plan, held, current)
        if args.watch and held:
            return watch(args, ctx, client, slurm.rounds(sdir)[-1])
        return int(Exit.OK)
    rdir = slurm.new_round_dir(sdir)
    harness = harness_command(args)
    opts = root_options(args, ctx)
    gather = [*harness, "sweep", "--slurm-gather", str(rdir), *opts]
    rnd = slurm.submit(plan, indices, rdir, client, options(args), harness, opts, gather)
    for a in rnd.arrays:
        ui.info(f"slurm: submitted array {a.job} ({a.gpus} GPU(s) a task): plan task(s) "
                f"{','.join(map(str, a.tasks))}")
    ui.info(f"slurm: gather job {rnd.gather} after them (afterany); {current} task(s) current, {len(held)} held "
            f"(still queued or running in an earlier round); files in {rdir}")
    _print_submission(args, rnd, plan, held, current)
    if args.watch:
        return watch(args, ctx, client, rnd)
    ui.info(f"slurm: follow it with: harness sweep --slurm-watch{_dir_flag(args)}; cancel it with: "
            f"harness sweep --slurm-cancel{_dir_flag(args)}")
    return int(Exit.OK)


def _dir_flag(args) -> str:
    return f" --slurm-dir {args.slurm_dir}" if args.slurm_dir else ""


def _print_submission(args, rnd: slurm.Round | None, plan: Plan, held, current: int) -> None:
    if args.watch:
        return  # the summary follows
    doc = {"schema": SUMMARY_SCHEMA, "kind": "patchlane-slurm-submission",
           "round": rnd.dir.name if rnd else None, "dir": str(rnd.dir) if rnd else None,
           "arrays": [a.as_json() for a in rnd.arrays] if rnd else [], "gather": rnd.gather if rnd else None,
           "current": current, "held": [{"pack": t.pack, "lanes": list(t.lanes)} for t in held]}
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif rnd is not None:
        rows = [[a.job, str(a.gpus), ",".join(map(str, a.tasks)),
                 "; ".join(plan.task(i).label for i in a.tasks)] for a in rnd.arrays]
        ui.tabular(["job", "gpus", "tasks", "lanes"], rows, fmt=args.format, title=f"slurm {rnd.dir.name}")


class _Stopped(Exception):
    def __init__(self, signum: int) -> None:
        self.signum = signum


def watch(args, ctx, client: slurm.Slurm, rnd: slurm.Round) -> int:
    """Follow the round until its gather job ends: a progress line on stderr when anything changes and every
    heartbeat otherwise (also when stderr is not a terminal). Ctrl-C or SIGTERM cancels the round's jobs."""
    poll = float(os.environ.get(POLL_ENV, "10"))

    def stop(signum, _frame):
        raise _Stopped(signum)

    previous = signal.signal(signal.SIGTERM, stop)
    last, said_at = "", 0.0
    try:
        while True:
            states = _states(client, rnd)
            line = slurm.progress_line(rnd, states)
            if line != last or time.monotonic() - said_at >= ui.HEARTBEAT_S:
                ui.info(line)
                last, said_at = line, time.monotonic()
            g = states.get(rnd.gather) if rnd.gather else None
            if g is None or not g.active:
                break
            time.sleep(poll)
    except (KeyboardInterrupt, _Stopped) as exc:
        code = Exit.TERMINATED if isinstance(exc, _Stopped) else Exit.INTERRUPT
        jobs = rnd.jobs()
        ui.info(f"slurm: stopping: cancelling {rnd.dir.name}'s job(s) {', '.join(jobs)}")
        client.cancel(jobs)
        return int(code)
    finally:
        signal.signal(signal.SIGTERM, previous)
    summary = slurm.read_summary(rnd)
    if summary is None:
        logs = sorted((rnd.dir / "logs").glob("gather-*.log"))
        raise slurm.SlurmError(f"the gather job {rnd.gather} of {rnd.dir.name} ended without writing "
                               f"{rnd.dir / slurm.SUMMARY_FILE}" + (f"; its log: {logs[-1]}" if logs else ""),
                               hint=f"gather it here: harness sweep --slurm-gather {rnd.dir}")
    _print_summary(args, summary)
    return int(summary.get("exit", int(Exit.INTERNAL)))


def cancel(args, ctx) -> int:
    """Cancel every job of every round that Slurm still has queued or running."""
    client = slurm.Slurm()
    cancelled = []
    for rnd in slurm.rounds(slurm_dir(args, ctx)):
        states = _states(client, rnd)
        live = [j for j in rnd.jobs() if any((k == j or k.startswith(f"{j}_")) and s.active
                                             for k, s in states.items())]
        if live:
            client.cancel(live)
            cancelled += live
            ui.info(f"slurm {rnd.dir.name}: cancelled job(s) {', '.join(live)}")
    if not cancelled:
        ui.info("slurm: no job of this sweep is queued or running")
    return int(Exit.OK)


def gather(args, ctx) -> int:
    """The gather job (or a person, later): import every task's receipts, then the summary a local sweep prints,
    from each task's result, or from Slurm's state where a task wrote none."""
    rdir = Path(args.slurm_gather).resolve()
    rnd = slurm.Round.load(rdir)
    plan = Plan.load(rnd.plan_file, ctx.tracking)
    states = slurm.Slurm().states([a.job for a in rnd.arrays])
    ends = slurm.task_ends(rnd, plan, states)
    for line in import_round(ctx, rnd, args):
        ui.info(line)
    lanes: list[dict] = []
    for end in ends:
        if end.result is not None:
            # keyed by pack and lane: two packs of one round may both have a lane named fix-dev
            by_lane = {(o.get("pack"), o.get("lane")): o for o in end.result["lanes"] if isinstance(o, dict)}
            made = _task_receipts(rnd.receipts_dir(end.task.index), end.task)
            for lane in end.task.lanes:
                got = by_lane.get((end.task.pack, lane))
                if got is None:
                    lanes.append(_lane_row(end, lane, "error", end.exit(), "the task's sweep reported no such lane"))
                else:
                    lanes.append(_as_its_receipt_says(ctx, rnd, end, lane, got, made.get(lane)))
            continue
        if end.state is not None and end.state.active:
            verdict = "not-run"
        else:
            verdict = "error"
        for lane in end.task.lanes:
            lanes.append(_lane_row(end, lane, verdict, end.exit() if verdict == "error" else Exit.TERMINATED,
                                   end.reason() or "still queued or running"))
    submitted = {i for a in rnd.arrays for i in a.tasks}
    for task in plan.tasks:
        if task.index not in submitted and task.state == "current":
            lanes += [{"pack": task.pack, "lane": lane, "task": task.index, "verdict": "current",
                       "exit": int(Exit.OK), "exit_name": Exit.OK.name, "reason": "its latest receipt is current",
                       "receipt": None, "gpus": []} for lane in task.lanes]
    code = worst(Exit(int(o["exit"])) for o in lanes) if lanes else Exit.NO_LANES
    doc = {"schema": SUMMARY_SCHEMA, "exit": int(code), "exit_name": code.name, "round": rnd.dir.name,
           "arrays": [a.as_json() for a in rnd.arrays], "gather": rnd.gather,
           "tasks": [{"index": e.task.index, "pack": e.task.pack, "lanes": list(e.task.lanes),
                      "job": f"{e.array.job}_{e.task.index}" if e.array else None,
                      "slurm_state": e.state.state if e.state else None, "exit": int(e.exit()),
                      "exit_name": e.exit().name, "log": str(rnd.log_file(e.array, e.task.index)) if e.array else None}
                     for e in ends],
           "lanes": lanes}
    slurm.write_summary(rnd, doc)
    _print_summary(args, doc)
    return int(code)


def _imported(ctx, task_dir: Path, shown: str | None) -> str | None:
    """Where the import put a receipt the task wrote under its own directory (as the checkout names it)."""
    if not shown:
        return shown
    path = Path(shown) if Path(shown).is_absolute() else ctx.root / shown
    try:
        rel = path.resolve().relative_to(task_dir.resolve())
    except ValueError:
        return shown
    return receipts.display_path(receipts.receipts_root(ctx.root) / rel, ctx.root)


def _task_receipts(task_dir: Path, task) -> dict[str, receipts.Receipt]:
    """The latest receipt of each of the task's pack's lanes that the task wrote in its own directory."""
    if not task_dir.is_dir():
        return {}
    try:
        return receipts.latest_per_lane(receipts.find(task_dir.parent, task.target, task.pack, receipts_dir=task_dir))
    except HarnessError:
        return {}


def _as_its_receipt_says(ctx, rnd, end: slurm.TaskEnd, lane: str, got: dict, rec) -> dict:
    """A lane's summary row from the receipt the task brought back, not from the task's own word: a result that
    says it ran but left no receipt of this pack's lane is an error, and a receipt whose verdict differs wins."""
    row = {**got, "pack": end.task.pack, "lane": lane, "task": end.task.index,
           "receipt": _imported(ctx, rnd.receipts_dir(end.task.index), got.get("receipt"))}
    said = str(got.get("verdict"))
    if rec is None:
        if said in ("skipped", "current"):
            return row  # nothing ran, so nothing was written: the word of the task stands
        return {**row, "verdict": "error", "exit": int(Exit.TAMPERED), "exit_name": Exit.TAMPERED.name,
                "reason": f"its result says {said}, but the task brought back no receipt of pack {end.task.pack} "
                          f"lane {lane}"}
    if str(rec.verdict) != said:
        code = runs.VERDICT_EXIT.get(rec.verdict, Exit.MISMATCH)
        return {**row, "verdict": str(rec.verdict), "exit": int(code), "exit_name": Exit(int(code)).name,
                "reason": f"its receipt says {rec.verdict} ({rec.reason}); the task's result said {said}"}
    return row


def _lane_row(end: slurm.TaskEnd, lane: str, verdict: str, code: Exit, reason: str) -> dict:
    return {"pack": end.task.pack, "lane": lane, "task": end.task.index, "verdict": verdict, "exit": int(code),
            "exit_name": code.name, "reason": reason, "receipt": None, "gpus": []}


def _print_summary(args, doc: dict) -> None:
    code = Exit(int(doc.get("exit", int(Exit.INTERNAL))))
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        rows = [[o["pack"], o["lane"], str(o["verdict"]), f"{o['exit']} {o['exit_name']}",
                 ",".join(o.get("gpus") or []) or "-",
                 f"{o['duration_s']:.1f}" if o.get("duration_s") is not None else "-",
                 o.get("receipt") or "-", o.get("reason") or ""] for o in doc.get("lanes", [])]
        ui.tabular(["pack", "lane", "verdict", "exit", "gpus", "seconds", "receipt", "why"], rows, fmt=args.format,
                   title=f"sweep (slurm {doc.get('round')})")
    ui.info(f"sweep (slurm {doc.get('round')}): {len(doc.get('lanes', []))} lane(s); exit {int(code)} ({code.name})")


def check_flags(args) -> None:
    """The Slurm options go with --slurm (or the verbs that follow a round); --slurm goes with no local-only one."""
    slurm_only = {"--partition": args.partition, "--account": args.account, "--time": args.time,
                  "--sbatch-arg": args.sbatch_arg, "--watch": args.watch, "--bundle": args.bundle,
                  "--gpus-flag": args.gpus_flag != slurm.Options.gpus_flag}
    if not args.slurm:
        given = [flag for flag, value in slurm_only.items() if value]
        if given:
            raise UsageError(f"{given[0]} goes with --slurm")
        return
    local_only = {"--plan": args.plan, "--estimate": args.estimate, "--from-plan": args.from_plan,
                  "--receipts-dir": args.receipts_dir, "--no-tracking": args.no_tracking, "--gpus": args.gpus,
                  "--bundle-dir": args.bundle_dir}
    given = [flag for flag, value in local_only.items() if value]
    if given:
        raise UsageError(f"--slurm does not take {given[0]}: each array task writes to a receipts directory of its "
                         "own under the Slurm directory, and the gather job imports them into this checkout")
    if "{n}" not in args.gpus_flag:
        raise UsageError(f"--gpus-flag {args.gpus_flag!r}: write where the GPU count goes as {{n}}, e.g. --gpus={{n}}")
