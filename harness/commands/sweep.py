"""``harness sweep [PACK ...]``: run many packs' lanes at once on this host, or write the plan for another engine."""

from __future__ import annotations

import dataclasses
import json
import sys

from harness.base import ui
from harness.commands import _args, _sweep_slurm
from harness.commands._context import context
from harness.errors import Exit, UsageError
from harness.host import slurm, sweep, sweep_estimate, sweep_plan, sweep_schedule
from harness.lane.receipts import Verdict

_STYLE = {Verdict.PASS.value: "green", "current": "green", "skipped": "yellow"}


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", help="run the selected lanes of many packs concurrently on this host (or print the plan)",
        description="Plan every selected lane with what it needs and run them at once: lanes on disjoint GPUs "
                    "(CUDA_VISIBLE_DEVICES, else every GPU the driver shows), a multi-GPU lane on a group of its "
                    "size, a lane whose claim is a time or memory figure with its GPU to itself, correctness lanes "
                    "sharing a GPU only within their declared gpu_memory_gib, builds overlapped on the CPU cores. "
                    "A patched lane runs together with its pack's unpatched lanes of the same base and args "
                    "(its baseline). Each task is a child 'harness run', so receipts and tracking.toml are "
                    "written exactly as a single run writes them; one failure never stops the others. Lanes whose "
                    "latest receipt passed and is current are not run again (--rerun). Ctrl-C or SIGTERM ends "
                    "every child; a sweep run again resumes where it stopped. Exit: the worst lane's code. "
                    "--plan --json writes the tasks as data for a CI matrix or a Slurm array (docs/sweep.md).")
    p.add_argument("packs", nargs="*", metavar="PACK", help="pack ids (default: every pack)")
    p.add_argument("--target", action="append", default=[], help="only packs of this target (repeatable)")
    p.add_argument("--base", action="append", default=[], help="only lanes on this base (repeatable)")
    p.add_argument("--lane", "--lanes", action="append", default=[], metavar="PATTERN", dest="lanes",
                   help="only lanes whose name matches (a name or a shell pattern such as 'fix-*'; PACK:PATTERN for "
                        "one pack's lanes, e.g. 02:lower-*; repeatable); a patched lane's baseline lanes come along")
    p.add_argument("--rerun", action="store_true", help="run lanes whose latest receipt is current too")
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help=f"CPU slots: children at once, a CPU lane taking one per rank (default: this host's "
                        f"cores, {sweep_schedule.cpu_count()} here)")
    p.add_argument("--gpus", default=None, metavar="LIST",
                   help="GPU ids to use, as CUDA_VISIBLE_DEVICES writes them (default: CUDA_VISIBLE_DEVICES, else "
                        "every GPU the driver shows); '' for none")
    p.add_argument("--gpu-memory-gib", type=float, default=None, metavar="GIB",
                   help="memory of each GPU, for lanes that share one (default: nvidia-smi's; unknown: none shares)")
    p.add_argument("--lane-python", action="append", default=[], metavar="TARGET=PYTHON",
                   help="run TARGET's lanes with the harness of this interpreter's environment (the nox sweep "
                        "session passes each target's lane environment; default: this interpreter)")
    p.add_argument("--plan", action="store_true", help="print the plan (tasks and their needs); run nothing")
    p.add_argument("--estimate", action="store_true",
                   help="with --plan: replay the scheduler over each task's recorded duration (its lanes' latest "
                        "receipts) on this host, or on the host --gpus, --gpu-memory-gib and --jobs describe "
                        "(--gpus 0,1,2,3,4,5,6,7 for eight GPUs): the serial total, when the sweep would end, "
                        "and their ratio; runs nothing")
    p.add_argument("--from-plan", type=_args.path, default=None, metavar="FILE",
                   help="run one task of a plan written by 'sweep --plan --json' (with --task; a Slurm array task)")
    p.add_argument("--task", type=int, default=None, metavar="N", help="the task of --from-plan to run")
    p.add_argument("--json", action="store_true",
                   help="print the plan (--plan) or the sweep's result as one JSON document on stdout")
    g = p.add_argument_group(
        "Slurm", "hand the plan to Slurm instead of running it here: one array job per GPU count, each array task "
                 "'sweep --from-plan plan.json --task I' into a receipts directory of its own, then a gather job "
                 "(afterany) that imports their receipts and writes the summary a local sweep prints. Run it again "
                 "and it submits only the tasks with no current receipt and none still queued (docs/sweep.md)")
    g.add_argument("--slurm", action="store_true", help="submit the selected lanes to Slurm (sbatch)")
    g.add_argument("--slurm-dir", type=_args.path, default=None, metavar="DIR",
                   help=f"where rounds keep their plan, scripts, logs, receipts and summary; on storage every node "
                        f"sees (default: {_sweep_slurm.DEFAULT_DIR}/ in the checkout)")
    g.add_argument("--partition", default=None, help="sbatch --partition")
    g.add_argument("--account", default=None, help="sbatch --account")
    g.add_argument("--time", default=None,
                   help="sbatch --time for every array task (default: the longest task's lane limits + 25%% + 10 min)")
    g.add_argument("--gpus-flag", default=slurm.Options.gpus_flag, metavar="TEMPLATE",
                   help="how a task asks for its N GPUs, {n} standing for N (default: %(default)s; e.g. --gpus={n})")
    g.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                   help="one more sbatch argument for every job, as written (repeatable: --sbatch-arg=--qos=high)")
    g.add_argument("--bundle", type=_args.path, default=None, metavar="FILE",
                   help="an offline bundle on shared storage: every task starts through 'python -m harness.bootstrap "
                        "FILE', which unpacks it once per node under a lock")
    g.add_argument("--watch", action="store_true",
                   help=f"with --slurm: follow the jobs until the gather job ends (progress on stderr; every "
                        f"${_sweep_slurm.POLL_ENV} s, default 10), then print the summary and exit with its code; "
                        "Ctrl-C or SIGTERM cancels them")
    g.add_argument("--slurm-watch", action="store_true", help="follow the newest round already submitted (as --watch)")
    g.add_argument("--slurm-cancel", action="store_true",
                   help="cancel every job of this sweep's rounds that is still queued or running (scancel)")
    g.add_argument("--slurm-gather", type=_args.path, default=None, metavar="ROUND_DIR",
                   help="import a round's receipts and write its summary (what the gather job runs; also by hand)")
    p.add_argument("--receipts-dir", type=_args.path, default=None, help="write receipts here (default: receipts/)")
    p.add_argument("--no-tracking", action="store_true", help="do not update tracking.toml")
    _args.output_format(p)
    _args.source(p)
    _args.common(p)


def main(args) -> int:
    _sweep_slurm.check_flags(args)
    if args.slurm_gather is not None:
        return _sweep_slurm.gather(args, context(args))
    if args.slurm_cancel:
        return _sweep_slurm.cancel(args, context(args))
    if args.slurm_watch:
        ctx = context(args)
        rnd = slurm.round_of(_sweep_slurm.slurm_dir(args, ctx), None)
        return _sweep_slurm.watch(args, ctx, slurm.Slurm(), rnd)
    if (args.from_plan is None) != (args.task is None):
        raise UsageError("--from-plan and --task go together: the plan file and the index of its task to run")
    if args.estimate and not args.plan:
        raise UsageError("--estimate goes with --plan: it replays the plan, it runs nothing")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    ctx = context(args, receipts_dir=args.receipts_dir)
    jobs = args.jobs or sweep_schedule.cpu_count()
    if args.slurm:
        return _sweep_slurm.submit(args, ctx, sweep_plan.Selection(tuple(args.packs), tuple(args.target),
                                                                 tuple(args.base), tuple(args.lanes)), jobs)
    if args.from_plan is not None:
        if args.packs or args.target or args.base or args.lanes:
            raise UsageError("--from-plan runs the plan's task as written: no PACK, --target, --base or --lane")
        task = sweep_plan.Plan.load(args.from_plan, ctx.tracking).task(args.task)
        # the plan's judgement of currency stands (a pin-bump plan is written with --rerun), unless --rerun here
        plan = sweep_plan.Plan((dataclasses.replace(task, index=0, state="run") if args.rerun
                           else dataclasses.replace(task, index=0),))
    else:
        plan = sweep_plan.make_plan(ctx, sweep_plan.Selection(tuple(args.packs), tuple(args.target), tuple(args.base),
                                                    tuple(args.lanes)), rerun=args.rerun, jobs=jobs)
    if args.plan and args.estimate:
        durations = sweep_estimate.recorded_durations(ctx.root, ctx.tracking, plan, args.receipts_dir)
        return _print_estimate(sweep_estimate.estimate(plan, durations, _host(args, ctx, jobs)), args)
    if args.plan:
        return _print_plan(plan, args, ctx)
    to_run = [t for t in plan.tasks if t.state == "run"]
    host = _host(args, ctx, jobs, needed=any(t.need.gpus for t in to_run))
    ui.info(f"sweep: {len(to_run)} task(s) to run, {len(plan.tasks) - len(to_run)} current; "
            f"{len(host.gpus)} GPU(s) ({host.gpu_source}), {jobs} CPU slot(s)")
    spec = sweep.ChildSpec(python=sweep.python_for(_args.per_target(args.lane_python)),
                           options=_child_options(args, ctx))
    result = sweep.run(plan, host, spec, ctx.root,
                       durations=sweep_estimate.recorded_durations(ctx.root, ctx.tracking, plan, args.receipts_dir))
    if args.json:
        json.dump(result.as_json(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        rows = [[o.pack, o.lane, ui.text(o.verdict, _STYLE.get(o.verdict, "red")), f"{int(o.exit)} {o.exit.name}",
                 ",".join(o.gpus) or "-", f"{o.duration_s:.1f}" if o.duration_s is not None else "-",
                 o.receipt or "-", o.reason] for o in result.lanes]
        ui.tabular(["pack", "lane", "verdict", "exit", "gpus", "seconds", "receipt", "why"], rows, fmt=args.format,
                   title="sweep")
    code = result.exit
    ui.info(f"sweep: {len(result.lanes)} lane(s) in {result.ended - result.started:.1f} s; "
            f"exit {int(code)} ({code.name})")
    return int(code)


def _child_options(args, ctx) -> tuple[str, ...]:
    """What every child harness is told: this repository and store, where receipts go, where bases come from."""
    opts = ["--root", str(ctx.root), "--cache", str(ctx.store.root)]
    if args.receipts_dir is not None:
        opts += ["--receipts-dir", str(args.receipts_dir)]
    if args.no_tracking:
        opts.append("--no-tracking")
    for d in args.artifacts:
        opts += ["--artifacts", str(d)]
    for d in args.git_mirrors:
        opts += ["--git-mirrors", str(d)]
    if args.bundle_dir is not None:
        opts += ["--bundle-dir", str(args.bundle_dir)]
    if args.python != sys.executable:
        opts += ["--python", ctx.python]
    return tuple(opts)


def _host(args, ctx, jobs: int, needed: bool = True) -> sweep_schedule.Host:
    """The host the sweep (or its estimate) schedules on: --gpus, else the GPUs found, each with its memory
    (--gpu-memory-gib, else nvidia-smi's); no GPU looked for when no task ``needed`` one."""
    ids, source = (sweep_schedule.discover_gpus(ctx.python, ctx.store.area("memo") / "cuda-devices", args.gpus)
                   if needed else ([], "not needed"))
    memory = sweep_schedule.gpu_memory(ids) if args.gpu_memory_gib is None else {}
    gpus = tuple(sweep_schedule.Gpu(i, args.gpu_memory_gib or memory.get(i)) for i in ids)
    return sweep_schedule.Host(gpus, jobs, source)


def _print_estimate(est: sweep_estimate.Estimate, args) -> int:
    if args.json:
        json.dump(est.as_json(), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return int(Exit.OK)
    rows = [[str(r["index"]), r["pack"], ",".join(r["lanes"]), ",".join(r["gpus"]) or "-",
             f"{r['duration_s']:.1f}", f"{r['start_s']:.1f}", f"{r['end_s']:.1f}"] for r in est.tasks]
    ui.tabular(["task", "pack", "lanes", "gpus", "seconds", "start", "end"], rows, fmt=args.format,
               title=f"sweep estimate on {len(est.host.gpus)} GPU(s), {est.host.jobs} CPU slot(s)")
    ratio = f"{est.makespan_s / est.serial_s:.3f}" if est.serial_s else "n/a"
    ui.info(f"serial {est.serial_s:.1f} s, sweep {est.makespan_s:.1f} s (ratio {ratio}); no schedule ends before "
            f"the longest task, {est.longest_s:.1f} s")
    for label in est.unknown:
        ui.warn(f"left out (a lane has no receipt to take a duration from): {label}")
    for label in est.too_big:
        ui.warn(f"left out (needs more GPUs than {len(est.host.gpus)}): {label}")
    return int(Exit.OK)


def _print_plan(plan: sweep_plan.Plan, args, ctx=None) -> int:
    """The plan's tasks. JSON: for any host (a CI matrix, a Slurm array), unchanged. The table also says what this
    host would do: a task that needs more GPUs than it has is 'skip here', not 'run'."""
    if args.json:
        json.dump(plan.as_json(), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return int(Exit.OK)
    here = None
    if ctx is not None and any(t.need.gpus and t.state == "run" for t in plan.tasks):
        ids, source = sweep_schedule.discover_gpus(ctx.python, ctx.store.area("memo") / "cuda-devices", args.gpus)
        here = (len(ids), source)

    def state(t: sweep_plan.Task) -> str:
        if here is not None and t.state == "run" and t.need.gpus > here[0]:
            return f"skip here (needs {t.need.gpus} GPU(s), this host has {here[0]})"
        return t.state

    rows = [[str(t.index), t.pack, ",".join(t.lanes), str(t.need.gpus),
             "-" if not t.need.gpus else ("own" if t.need.whole else f"share {t.need.memory_gib:g} GiB"),
             str(t.need.slots), state(t), "; ".join(t.why) or "-"] for t in plan.tasks]
    ui.tabular(["task", "pack", "lanes", "gpus", "gpu", "cpu", "state", "why"], rows, fmt=args.format,
               title="sweep plan")
    if here is not None:
        skipped = sum(1 for t in plan.tasks if t.state == "run" and t.need.gpus > here[0])
        if skipped:
            ui.info(f"this host has {here[0]} GPU(s) ({here[1]}): {skipped} task(s) would be skipped here; the plan "
                    "itself (--json) is for any host")
    return int(Exit.OK)
