"""``harness materialize [TARGET]``: the pristine, git-initialised base checkout(s)."""

from __future__ import annotations

from harness.base import ui
from harness.base.store import Store
from harness.commands import _args
from harness.commands._context import find_root, sources
from harness.errors import UsageError
from harness.upstream import pins


def register(sub) -> None:
    p = sub.add_parser("materialize", help="fetch and verify a pinned base (artefact or git commit) into a checkout",
                       description="Fetch a base into the cache and print its checkout: a release artefact is "
                                   "checked against its sha256 before it is unpacked; a git base is fetched one "
                                   "commit deep (from --git-mirrors / $PATCHLANE_GIT_MIRRORS first, else the "
                                   "repository URL) and its HEAD checked against the pinned id. A base that cannot "
                                   "be had exits 4 and leaves nothing in the cache.")
    p.add_argument("target", nargs="?", help="a target in upstream/, e.g. mamba (with --all: default every target)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--base", default=None, help="base name (default: the manifest's default_base)")
    which.add_argument("--all", action="store_true", help="every base of the target (or of every target)")
    p.add_argument("--git-only", action="store_true", help="with --all: only the git-commit bases")
    _args.artifacts(p)
    _args.common(p)


def main(args) -> int:
    root = find_root(args.root)
    if args.target is None and not args.all:
        raise UsageError("name a target, or pass --all")
    store = Store(args.cache)
    for target in [args.target] if args.target else pins.list_targets(root):
        manifest = pins.load_manifest(root, target)
        names = [b.name for b in manifest.bases.values() if b.git is not None or not args.git_only] \
            if args.all else [args.base]
        for name in names:
            checkout = pins.materialize(manifest, name, store, sources(args))
            base = checkout.base
            ui.info(f"{manifest.target} {base.name} ({base.kind}, upstream {base.commit or 'commit unknown'}):")
            ui.data(str(checkout.path))
    return 0
