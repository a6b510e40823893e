"""Extract tar members with the safety of tarfile's ``data`` filter on every Python the harness supports.

Extraction filters (PEP 706) came with Python 3.11.4; 3.11.0 to 3.11.3 have none, and their
``extract``/``extractall`` refuse the ``filter`` argument. Where the filter exists it is used; where it
does not, each member is checked right before it is extracted, by the same rules:

* leading slashes are dropped from a name; nothing lands outside the destination once every link on its way (in the
  destination, including links extracted a moment ago) is followed;
* a symbolic or hard link must not be absolute nor point outside the destination, checked again once every
  member is extracted (a later link can turn an earlier one into a way out; ``extractall`` only);
* no device file or FIFO;
* set-user-id, set-group-id and sticky bits and group/other write bits are cleared; a file is readable
  and writable by its owner; a directory gets the default mode; owners and groups of the archive are
  ignored (files belong to whoever extracts them).

Standard library only (``harness.bootstrap`` unpacks bundles with it before any dependency exists).
"""

from __future__ import annotations

import copy
import os
import stat
import tarfile
from collections.abc import Iterable
from pathlib import Path


class UnsafeMember(tarfile.TarError):
    """A member the ``data`` filter would refuse (named, with the reason)."""


def has_filter() -> bool:
    """Whether this Python's tarfile has extraction filters (3.11.4 and later)."""
    return hasattr(tarfile, "data_filter")


def extractall(tf: tarfile.TarFile, dest: Path | str, members: Iterable[tarfile.TarInfo] | None = None) -> None:
    """``tf.extractall(dest, filter="data")``, on a Python without filters too."""
    chosen = list(members if members is not None else tf.getmembers())
    if has_filter():
        tf.extractall(dest, members=chosen, filter="data")
    else:
        for member in chosen:
            extract(tf, member, dest)
    no_links_leaving(dest, [m.name for m in chosen if m.issym()])


def no_links_leaving(dest: Path | str, names: Iterable[str]) -> None:
    """Check the symbolic links extracted as ``names`` under ``dest`` once all are there: each member's link was
    checked when it was made, but a later link can turn an earlier one into a way out (``a/y -> w/../..``, then
    ``a/w -> .``), whatever this Python's filter does. Every such link is removed, then UnsafeMember names one."""
    leaving = []
    for name in names:
        rel = name.lstrip("/" + os.sep)
        path = os.path.join(dest, rel)
        if os.path.islink(path) and link_leaves(dest, os.path.dirname(rel), os.readlink(path)):
            leaving.append((rel, os.readlink(path)))
    for rel, _ in leaving:
        os.unlink(os.path.join(dest, rel))
    if leaving:
        rel, target = leaving[0]
        more = f" (and {len(leaving) - 1} more)" if len(leaving) > 1 else ""
        raise UnsafeMember(f"link {rel!r} -> {target!r} points outside {dest} once the archive's other links are "
                           f"extracted{more}")


def extract(tf: tarfile.TarFile, member: tarfile.TarInfo, dest: Path | str) -> None:
    """``tf.extract(member, dest, filter="data")``, on a Python without filters too."""
    if has_filter():
        tf.extract(member, dest, filter="data")
        return
    tf.extract(checked(member, dest), dest)  # 3.11.0-3.11.3: no filter argument


def checked(member: tarfile.TarInfo, dest: Path | str) -> tarfile.TarInfo:
    """A copy of ``member`` made safe the way the ``data`` filter does, or UnsafeMember."""
    root = os.path.realpath(dest)
    name = member.name.lstrip("/" + os.sep)
    if os.path.isabs(name):  # leading slashes are dropped, as the filter does; what is still absolute is not
        raise UnsafeMember(f"member {member.name!r} has an absolute path")
    target = os.path.realpath(os.path.join(root, name))
    if os.path.commonpath([root, target]) != root:
        raise UnsafeMember(f"member {member.name!r} would be extracted outside {dest}")
    if member.ischr() or member.isblk() or member.isfifo() or member.isdev():
        raise UnsafeMember(f"member {member.name!r} is a device or FIFO")
    if member.issym() or member.islnk():
        if os.path.isabs(member.linkname):
            raise UnsafeMember(f"link {member.name!r} -> {member.linkname!r} is absolute")
        base = os.path.dirname(target) if member.issym() else root
        where = os.path.realpath(os.path.join(base, member.linkname))
        if os.path.commonpath([root, where]) != root:
            raise UnsafeMember(f"link {member.name!r} -> {member.linkname!r} points outside {dest}")
    safe = copy.copy(member)  # TarInfo.replace came with the filters
    safe.name, safe.uid, safe.gid, safe.uname, safe.gname = name, os.getuid(), os.getgid(), "", ""
    if member.isreg() or member.islnk():
        mode = (member.mode or 0) & 0o755 & ~(stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX) | 0o600
        if not mode & 0o100:
            mode &= ~0o011  # group/other execute only with the owner's
        safe.mode = mode
    elif member.isdir():
        safe.mode = 0o755 & ~_umask()
    return safe


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def link_leaves(root: Path | str, link_dir: str, target: str) -> bool:
    """Whether a symbolic link in ``link_dir`` (relative to ``root``) to ``target`` leaves ``root``: absolute, or
    climbing out once every link on its way is followed (a link into the tree is not one)."""
    if os.path.isabs(target):
        return True
    top = os.path.realpath(root)
    where = os.path.realpath(os.path.join(top, link_dir, target))
    return os.path.commonpath([top, where]) != top


def links_leaving(root: Path | str) -> list[tuple[str, str]]:
    """Every symbolic link under ``root`` (a tree, never followed into a link) that leaves it, as
    ``(path relative to root, where it points)``; ``.git`` is not looked into."""
    found = []
    for here, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git" or here != str(root)]
        for name in (*dirs, *files):
            path = os.path.join(here, name)
            if os.path.islink(path):
                target = os.readlink(path)
                rel = os.path.relpath(path, root)
                if link_leaves(root, os.path.dirname(rel), target):
                    found.append((rel, target))
    return sorted(found)
