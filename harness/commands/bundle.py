"""``harness bundle PACK... -o FILE``: the offline bundle for a GPU host without network."""

from __future__ import annotations

from harness import bundle, ui
from harness.commands import _args
from harness.commands._context import context


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
    p.add_argument("--kernel-cache", action="store_true",
                   help="also carry the store's kernel-compile caches of the bundle's builds, so the GPU host starts "
                        "warm (one whose driver, GPU or compilers differ there is not used: its key decides); "
                        "their sizes are listed")
    _args.artifacts(p)
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    index = bundle.make(ctx, args.packs, args.output, python_version=args.python_version, deps_dir=args.wheels,
                         bases=args.base or None, kernel_caches=args.kernel_cache,
                         part_size=args.part_size * 2**20)
    size = args.output.stat().st_size
    ui.data(str(args.output))
    carried = index.get("kernel_caches")
    kernels = "" if carried is None else f", {len(carried)} kernel-cache entr{'y' if len(carried) == 1 else 'ies'}"
    ui.info(f"{args.output}: {size / 2**20:.1f} MiB, {len(index['builds'])} build(s) for "
            f"{', '.join(index['packs'])}, {len(index['wheels'])} wheel(s){kernels}")
    for entry in index.get("payloads", []):
        ui.info(f"payload {entry['name']}: {entry['size']} bytes, packed {entry['packed']['size']}, "
                f"{len(entry['parts'])} part(s) in {bundle.parts_dir(args.output)}; carry each with the bundle and "
                f"stage it: python3 -m harness.bootstrap {args.output} --parts DIR --stage PARTS_DIR --")
    ui.info(f"on the GPU host: python3 -m harness.bootstrap {args.output}"
            f"{' --parts DIR' if index.get('payloads') else ''} -- run {' '.join(index['packs'][:1])}")
    if size > 64 * 2**20:
        ui.warn("over 64 MiB: too large for one device-tool carry; split the packs over several bundles")
    return 0
