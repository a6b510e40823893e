"""``harness plan``: the lane runs that would make packs ready, estimated and fitted to a device budget."""

from __future__ import annotations

import json

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import UsageError
from harness.host import ready_plan


def register(sub) -> None:
    p = sub.add_parser(
        "plan", help="what to run to make packs ready: GPU and CPU tasks, minutes, bundles, fitted to a budget",
        description="For every pack (or the named ones) that is not ready: the lanes on its filing base without a "
                    "current passing receipt, grouped as the sweep runs them, each with its estimated minutes (its "
                    "lanes' latest receipts' run time; a lane never run is a guess, named). Then, cheapest first by "
                    "device minutes per pack made ready, the packs whose GPU tasks (and those of the packs they "
                    "depend on) fit in --budget-min on a host of --gpus GPUs; the sweep scheduler replays their "
                    "durations (lanes that may share a GPU do), plus the start-up of one bundle per target and "
                    "base. A pack held by something runs cannot clear (its body's word budget, an undecided "
                    "related PR, its state) is left out and says why. Prints the bundle, bootstrap and import "
                    "commands of the chosen GPU tasks, and the CPU tasks to run here. Runs nothing.")
    p.add_argument("packs", nargs="*", metavar="PACK", help="pack ids (default: every pack)")
    p.add_argument("--budget-min", type=float, default=None, metavar="MINUTES",
                   help="device minutes the GPU tasks may take (default: no limit)")
    p.add_argument("--gpus", type=int, default=1, metavar="N", help="GPUs of the device host (default: %(default)s)")
    p.add_argument("--gpu-memory-gib", type=float, default=80.0, metavar="GIB",
                   help="memory of each of its GPUs, for lanes that may share one (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=16, metavar="N", help="its CPU slots (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout (keys: docs/cli.md)")
    p.add_argument("--no-apply", action="store_true",
                   help="do not materialize bases for the apply checks; use cached results only")
    _args.common(p)


def main(args) -> int:
    if args.budget_min is not None and args.budget_min <= 0:
        raise UsageError(f"--budget-min {args.budget_min:g}: give a positive number of minutes")
    if args.gpus < 0 or args.jobs < 1:
        raise UsageError("--gpus takes 0 or more, --jobs 1 or more")
    ctx = context(args)
    packs = [ctx.tracking.pack(p) for p in args.packs] if args.packs else list(ctx.tracking.packs.values())
    with ui.status(f"computing what would make {len(packs)} pack(s) ready (receipts, readiness)"):
        by_pack = ready_plan.plans(ctx, packs, allow_download=not args.no_apply)
    host = ready_plan.host_of(args.gpus, args.gpu_memory_gib, args.jobs)
    # packs named on the command line are planned whatever their state; by default only those to be filed
    result = ready_plan.fit(by_pack, host, None if args.budget_min is None else args.budget_min * 60,
                            every=bool(args.packs))
    if args.json:
        ui.out.file.write(json.dumps(ready_plan.as_json(result, by_pack), indent=2) + "\n")
        return 0
    for line in ready_plan.render(result, by_pack):
        ui.out.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0
