"""``harness bundle PACK... -o FILE``: the offline bundle for a GPU host without network."""

from __future__ import annotations

import json

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.host import bundle, sweep_plan


def register(sub) -> None:
    p = sub.add_parser("bundle", help="write an offline bundle (builds + wheels) for GPU hosts without network")
    p.add_argument("packs", nargs="+", help="pack ids")
    p.add_argument("-o", "--output", type=_args.path, required=True, help="output file, e.g. dist/bundle-09.tar.xz")
    p.add_argument("--python-version", default="3.12", help="Python version of the GPU host (default 3.12)")
    p.add_argument("--wheels", type=_args.path, default=None, metavar="DIR",
                   help="take the dependency wheels from DIR instead of downloading them")
    p.add_argument("--part-size", type=int, default=bundle.PART_SIZE // 2**20, metavar="MIB",
                   help="cut payloads (runtime wheels too large for one carry) into parts of at most MIB MiB, "
                        f"written to OUTPUT.parts/ (default {bundle.PART_SIZE // 2**20})")
    p.add_argument("--base", action="append", default=[], metavar="NAME",
                   help="only the lanes on this base (repeatable); run them there with 'run PACK --lane NAME'")
    p.add_argument("--lane", "--lanes", action="append", default=[], metavar="PATTERN", dest="lanes",
                   help="only lanes whose name matches, as 'harness sweep --lane' selects them (a name or a shell "
                        "pattern such as 'minimal-*'; PACK:PATTERN for one pack's lanes, e.g. 11:minimal-*; "
                        "repeatable): the bundle carries what those lanes need and what the sweep brings along "
                        "with them (a patched lane's baseline lanes)")
    p.add_argument("--json", action="store_true",
                   help="the bundle's size, each member's size and the carry estimate as one JSON object on stdout")
    p.add_argument("--kernel-cache", action="store_true",
                   help="also carry the store's kernel-compile caches of the bundle's builds, so the GPU host starts "
                        "warm (one whose driver, GPU or compilers differ there is not used: its key decides); "
                        "their sizes are listed")
    _args.artifacts(p)
    _args.common(p)


def host_command(output, index: dict, selected: bool) -> str:
    """The bootstrap command that runs what the bundle holds: ``run PACK`` for one whole pack, else a sweep of its
    packs with every lane the bundle carries named (``--lane PACK:LANE``), so no lane it lacks is asked for."""
    packs = index["packs"]
    staged = f" --stage {bundle.parts_dir(output)}" if index.get("payloads") else ""
    head = f"python3 -m harness.bootstrap {output}{staged} --"
    if len(packs) == 1 and not selected:
        return f"{head} run {packs[0]}"
    lanes = [f"--lane {pid}:{lane}" for pid in packs for lane in index.get("lanes", {}).get(pid, [])]
    return f"{head} sweep {' '.join(packs)} {' '.join(lanes)}".rstrip()


def main(args) -> int:
    ctx = context(args)
    only: dict[str, list[str]] | None = None
    if args.lanes:  # exactly the lanes the sweep would run for this selection, paired baselines included
        plan = sweep_plan.make_plan(ctx, sweep_plan.Selection(packs=tuple(args.packs), bases=tuple(args.base),
                                                    lanes=tuple(args.lanes)), rerun=True)
        only = {}
        for task in plan.tasks:
            only.setdefault(task.pack, []).extend(task.lanes)
    index = bundle.make(ctx, args.packs, args.output, python_version=args.python_version, deps_dir=args.wheels,
                        bases=args.base or None, kernel_caches=args.kernel_cache,
                        part_size=args.part_size * 2**20, only=only)
    size = args.output.stat().st_size
    checkout = bundle.checkout_bytes(ctx.root)
    carry = None if checkout is None else checkout + size
    fits = None if carry is None else carry <= bundle.CARRY_LIMIT
    for row in index["sizes"]:
        ui.info(f"  {row['file']}: {ui.human_bytes(row['bytes'])} in the archive, about "
                f"{ui.human_bytes(row['xz_bytes'])} of its xz ({row['for'] or '-'})")
    carried = index.get("kernel_caches")
    kernels = "" if carried is None else f", {len(carried)} kernel-cache entr{'y' if len(carried) == 1 else 'ies'}"
    ui.info(f"{args.output}: {size / 2**20:.1f} MiB, {len(index['builds'])} build(s) for "
            f"{', '.join(index['packs'])}, {len(index['wheels'])} wheel(s){kernels}")
    for entry in index.get("payloads", []):
        ui.info(f"payload {entry['name']}: {entry['size']} bytes, packed {entry['packed']['size']}, "
                f"{len(entry['parts'])} part(s) in {bundle.parts_dir(args.output)}; carry each with the bundle and "
                f"stage the ones a call brings: python3 -m harness.bootstrap {args.output} --stage "
                f"{bundle.parts_dir(args.output)} --")
    ui.info(f"on the GPU host: {host_command(args.output, index, bool(only))}")
    ui.info("back here: harness receipts import receipts.tar (the receipts directory the host wrote, as a tar or "
            "as a directory)")
    limit = f"{bundle.CARRY_LIMIT / 2**20:.0f} MiB"
    if checkout is None or carry is None:
        ui.warn(f"cannot measure the checkout {ctx.root} (no git, or not a checkout): the bundle alone is "
                f"{size / 2**20:.1f} MiB of the {limit} one device call carries with the checkout")
    elif not fits:
        ui.warn(f"{args.output} ({size / 2**20:.1f} MiB) and the checkout ({checkout / 2**20:.1f} MiB of tracked "
                f"and untracked files) make {carry / 2**20:.1f} MiB: over the {limit} one device call carries; "
                "select fewer lanes (--lane) or split the packs over several bundles")
    else:
        ui.info(f"carry: {carry / 2**20:.1f} MiB of {limit} (checkout {checkout / 2**20:.1f} MiB + bundle)")
    if args.json:
        ui.data(json.dumps({"output": str(args.output), "bytes": size, "packs": index["packs"],
                            "lanes": index.get("lanes", {}), "members": index["sizes"],
                            "payload_parts": [{"name": e["name"], "parts": len(e["parts"]),
                                               "bytes": e["packed"]["size"]} for e in index.get("payloads", [])],
                            "checkout_bytes": checkout, "carry_bytes": carry, "carry_limit": bundle.CARRY_LIMIT,
                            "fits_one_carry": fits}, indent=1))
    else:
        ui.data(str(args.output))
    return 0
