"""Files read from a tree (the checkout, a series, an upstream tree): a regular file inside it, or refused.

A FIFO blocks the reader forever, a device node or a socket is not data, a directory or a symbolic link named
like a file puts its content elsewhere (outside what a digest, a seal or a review covers). ``kind`` names what
a path is without following it or opening it; ``read_bytes`` opens without following a link and without
blocking on a FIFO, then checks what it opened, so nothing can be swapped in between the check and the read.

Standard library only.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


# The most a TOML file of this repository may hold (tomlutil, and the noxfile's stdlib-only reader). tracking.toml
# is tens of KiB, a pack.toml a few: a 100 MB file took minutes and most of a GiB to parse before anything was said.
MAX_TOML_BYTES = 4 << 20


class NotRegular(OSError):
    """A path that is not a regular file (or leaves the tree it was read from); its message names both."""


def kind_of(mode: int) -> str | None:
    """What ``mode`` (an ``st_mode``) is, when not a regular file; None for one."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def kind(path: Path | str) -> str | None:
    """What ``path`` is when it is there and not a regular file (not followed if a link); None otherwise."""
    try:
        return kind_of(os.lstat(path).st_mode)
    except FileNotFoundError:
        return None


def check(path: Path | str, root: Path | str | None = None) -> None:
    """NotRegular unless ``path`` is missing or a regular file (not a link), inside ``root`` when given."""
    what = kind(path)
    if what is not None:
        target = f" to {os.readlink(path)}" if what == "a symbolic link" else ""
        raise NotRegular(f"{path} is {what}{target}, not a regular file")
    if root is not None and os.path.lexists(path):
        top = os.path.realpath(root)
        if os.path.commonpath([top, os.path.realpath(path)]) != top:
            raise NotRegular(f"{path} lies outside {root} (through a link on its way)")


def read_bytes(path: Path | str, *, follow: bool = False) -> bytes:
    """The bytes of the regular file ``path``; NotRegular for any other kind (a link too unless ``follow``),
    FileNotFoundError when it is not there. Never blocks on a FIFO."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        what = kind(path) if not isinstance(exc, FileNotFoundError) else None
        if what is not None and not (follow and what == "a symbolic link"):
            raise NotRegular(f"{path} is {what}, not a regular file") from None
        raise
    with os.fdopen(fd, "rb") as fh:
        what = kind_of(os.fstat(fh.fileno()).st_mode)
        if what is not None:
            raise NotRegular(f"{path} is {what}, not a regular file")
        os.set_blocking(fh.fileno(), True)
        return fh.read()


def source_text(tree: Path | str, rel: str) -> str:
    """The text of ``tree/rel``, a regular file inside ``tree`` (a module or test an upstream tree holds, read to
    derive what a change reaches): NotRegular for a link, a FIFO, a device or a socket named like a module, which
    the derivation would otherwise follow out of the tree or block on. Undecodable bytes are replaced."""
    path = Path(tree) / rel
    check(path, tree)
    return read_bytes(path).decode("utf-8", errors="replace")
