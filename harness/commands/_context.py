"""What every command needs: the repository root, tracking.toml, the store, maybe a bundle."""

from __future__ import annotations

from pathlib import Path

from harness.errors import UsageError
from harness.lanes import Context
from harness.store import Store
from harness.tracking import Tracking


def find_root(start: Path | None) -> Path:
    here = (start or Path.cwd()).resolve()
    for d in [here, *here.parents]:
        if (d / "tracking.toml").is_file() and (d / "upstream").is_dir():
            return d
    raise UsageError(f"{here} is not inside a patch-lane repository (no tracking.toml + upstream/ found)",
                     hint="run from the repository, or pass --root")


def context(args) -> Context:
    root = find_root(getattr(args, "root", None))
    ctx = Context(root=root, tracking=Tracking.load(root), store=Store(getattr(args, "cache", None)))
    ctx.artifacts = list(getattr(args, "artifacts", []) or [])
    ctx.python = getattr(args, "python", None) or ctx.python
    bundle_dir = getattr(args, "bundle_dir", None)
    if bundle_dir is not None:
        from harness.bundle import OpenBundle

        ctx.bundle = OpenBundle.open(Path(bundle_dir))
    return ctx
