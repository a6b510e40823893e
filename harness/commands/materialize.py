"""``harness materialize TARGET``: the pristine, git-initialised base checkout."""

from __future__ import annotations

from harness import pins, ui
from harness.commands import _args
from harness.commands._context import find_root
from harness.store import Store


def register(sub) -> None:
    p = sub.add_parser("materialize", help="fetch, verify and unpack a pinned base into a git checkout")
    p.add_argument("target", help="a target in upstream/, e.g. liger-kernel")
    p.add_argument("--base", default=None, help="base name (default: the manifest's default_base)")
    _args.artifacts(p)
    _args.common(p)


def main(args) -> int:
    root = find_root(args.root)
    manifest = pins.load_manifest(root, args.target)
    checkout = pins.materialize(manifest, args.base, Store(args.cache), args.artifacts)
    ui.info(f"{manifest.target} {checkout.base.name} (upstream {checkout.base.commit or 'commit unknown'}), "
            f"git {checkout.commit[:12]}:")
    ui.data(str(checkout.path))
    return 0
