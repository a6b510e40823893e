"""What every command needs: the repository root, tracking.toml, the store, and this invocation's options."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from harness.base import settings
from harness.base.store import Store
from harness.errors import UsageError
from harness.lane.context import Context, Options
from harness.lane.tracking import Tracking
from harness.upstream import pins


def find_root(start: Path | None) -> Path:
    root = settings.checkout_root(start)
    if root is None:
        raise UsageError(f"{(start or Path.cwd()).resolve()} is not inside a patch-lane repository (no tracking.toml "
                         "+ upstream/ found)", hint="run from the repository, or pass --root")
    return root


def _interpreter(python: str | None) -> str | None:
    """``--python`` as an absolute executable path, resolved once against the working directory (builds and
    reproducers run elsewhere); a name or path that runs nothing is bad input, named."""
    if not python:
        return None
    found = shutil.which(python)
    if found is None:
        raise UsageError(f"--python {python}: no such executable file"
                         + (f" (relative to {Path.cwd()})" if os.sep in python else " on PATH"),
                         hint="give the path of a Python interpreter, e.g. a lane environment's "
                              "(.nox/lane-<target>-py<X.Y>/bin/python, made by 'nox -s <target>_pack<NN>')")
    return os.path.abspath(found)


def _mirrors(args, root: Path | None) -> tuple[Path, ...]:
    """``--git-mirrors`` first, then ../shared/mirrors beside the checkout when $PATCHLANE_GIT_MIRRORS is unset
    (harness/base/settings.py: the noxfile's defaults; the variable itself is read where bases are fetched)."""
    given = tuple(getattr(args, "git_mirrors", None) or ())
    if root is None or settings.MIRRORS_ENV in os.environ:
        return given
    return given + tuple(d for d in settings.git_mirrors(root) if d not in given)


def options(args, root: Path | None = None, **overrides) -> Options:
    """The invocation's options from the parsed arguments (a command without an option keeps the default)."""
    values: dict[str, Any] = {
        "artifacts": tuple(getattr(args, "artifacts", None) or ()),
        "git_mirrors": _mirrors(args, root),
    }
    python = _interpreter(getattr(args, "python", None))
    if python:
        values["python"] = python
    bundle_dir = getattr(args, "bundle_dir", None)
    if bundle_dir is not None:
        from harness.host.unpacked import OpenBundle  # only offline runs need it

        values["bundle"] = OpenBundle.open(Path(bundle_dir))
    return Options(**(values | overrides))


def context(args, *, missing_selections_ok: bool = False, **overrides) -> Context:
    """``missing_selections_ok``: see ``Tracking.load`` (``suite select`` records a lost selection again)."""
    root = find_root(getattr(args, "root", None))
    # the noxfile's defaults, for every reader of the mirrors in this process and its children (the filing
    # template's reader and the lanes' child processes read $PATCHLANE_GIT_MIRRORS, not these options)
    settings.export_mirrors(root)
    tracking = Tracking.load(root, missing_selections_ok=missing_selections_ok)
    return Context(root=root, tracking=tracking, store=Store(getattr(args, "cache", None)),
                   options=options(args, root, **overrides))


def sources(args) -> pins.Sources:
    """Where a command that needs no tracking.toml (``materialize``) fetches bases from."""
    try:
        root: Path | None = find_root(getattr(args, "root", None))
    except UsageError:
        root = None
    return pins.Sources(artifacts=tuple(getattr(args, "artifacts", None) or ()), git_mirrors=_mirrors(args, root))
