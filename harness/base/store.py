"""The local cache: downloaded artefacts, pristine base checkouts, patched trees, builds.

Everything lives under one root (``$PATCHLANE_HOME``, else ``~/.cache/patchlane``)
and is guarded by one file lock, so two harness processes never write the same
entry. Entries are created in a temporary sibling directory and renamed into
place as the last step: a directory that exists under its final name is
complete, and an interrupted step leaves only a ``.tmp-*`` directory that the
next run removes.

Importable with the standard library only (``harness.bootstrap`` takes ``default_root`` from
here before any dependency is installed): filelock is imported when a Store is made.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

_TMP_PREFIX = ".tmp-"


def default_mode(directory: bool) -> int:
    """The mode a new directory (0o777) or file (0o666) gets under this process's umask.

    ``mkdtemp`` / ``mkstemp`` create 0700 / 0600; what they make and then rename into place
    (cache entries, receipts, tracking.toml) is given this mode, as a checkout expects.
    """
    mask = os.umask(0o022)
    os.umask(mask)
    return (0o777 if directory else 0o666) & ~mask


def default_root() -> Path:
    """``$PATCHLANE_HOME``, else ``$XDG_CACHE_HOME/patchlane``, else ``~/.cache/patchlane``."""
    env = os.environ.get("PATCHLANE_HOME")
    if env:
        return Path(env).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(os.path.abspath((Path(xdg) if xdg else Path.home() / ".cache") / "patchlane"))


class Store:
    """One cache root with named areas and an exclusive lock."""

    def __init__(self, root: Path | None = None):
        # absolute once, here: pip and git run with another working directory (a build's tree)
        self.root = Path(os.path.abspath(os.path.expanduser(root))) if root else default_root()
        self.root.mkdir(parents=True, exist_ok=True)
        from filelock import FileLock

        self._lock = FileLock(str(self.root / ".lock"))

    def area(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    @contextlib.contextmanager
    def locked(self) -> Iterator[Store]:
        """Hold the store's lock (re-entrant within a process)."""
        with self._lock:
            yield self

    @contextlib.contextmanager
    def new_entry(self, final: Path) -> Iterator[Path]:
        """Yield a scratch directory that becomes ``final`` only if the block succeeds."""
        final.parent.mkdir(parents=True, exist_ok=True)
        _sweep_stale(final.parent)
        tmp = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX + final.name + "-", dir=final.parent))
        try:
            os.chmod(tmp, default_mode(directory=True))
            yield tmp
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def _sweep_stale(parent: Path) -> None:
    """Remove scratch directories left by a killed process (we hold the lock)."""
    for child in parent.glob(_TMP_PREFIX + "*"):
        shutil.rmtree(child, ignore_errors=True)
