"""``harness bundle PACK... -o FILE``: the offline bundle for a GPU host without network."""

from __future__ import annotations

from harness import bundle, ui
from harness.commands._context import context


def main(args) -> int:
    ctx = context(args)
    index = bundle.make(ctx, args.packs, args.output, python_version=args.python_version, deps_dir=args.wheels)
    size = args.output.stat().st_size
    ui.out.print(f"{args.output}: {size / 2**20:.1f} MiB, {len(index['builds'])} build(s) for "
                 f"{', '.join(index['packs'])}, {len(index['wheels'])} wheel(s)")
    ui.out.print(f"on the GPU host: python3 -m harness.bootstrap {args.output} -- run {' '.join(index['packs'][:1])}")
    if size > 64 * 2**20:
        ui.warn("over 64 MiB: too large for one device-tool carry; split the packs over several bundles")
    return 0
