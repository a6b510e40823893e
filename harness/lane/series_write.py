"""Writing a series back: ``git format-patch`` output made deterministic and normalized, unchanged patch files kept
as they were, and a series directory replaced in one swap that a killed run can recover from."""

from __future__ import annotations

import difflib
import email.parser
import email.policy
import email.utils
import os
import re
import shutil
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

from harness.base import guard
from harness.errors import ConfigError, SeriesError
from harness.lane.series import parse_patch, swap_backups
from harness.lane.tracking import layout
from harness.upstream import git

# Every option that a config setting (format.*, diff.*) could otherwise change is spelled out, so a
# checkout's own config cannot alter the output.
FORMAT_OPTIONS = (
    "--zero-commit", "--no-signature", "--no-numbered", "--full-index", "--no-renames",
    "--diff-algorithm=myers", "-U3", "--src-prefix=a/", "--dst-prefix=b/", "--subject-prefix=PATCH",
    "--no-thread", "--no-cover-letter", "--no-notes", "--no-attach", "--no-add-header", "--no-to", "--no-cc",
    "--no-base", "--encode-email-headers",
)
_INDEX = re.compile(r"^index ([0-9a-f]{40})\.\.([0-9a-f]{40})(.*)$")
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_FROM_LINE = re.compile(rb"\AFrom [0-9a-f]{40} ")
_SIGNATURE = re.compile(rb"\n-- \n[^\n]*\s*\Z")


def format_series(repo: git.Repo, start: str, end: str, out: Path) -> list[Path]:
    """``git format-patch start..end`` into ``out``, normalized (see the module docstring)."""
    merges = repo.run("rev-list", "--merges", f"{start}..{end}").split()
    if merges:
        raise SeriesError(f"{repo.path}: merge commit {merges[0][:12]} in the series; a series is linear")
    names = repo.run("format-patch", *FORMAT_OPTIONS, "-o", str(out), f"{start}..{end}").splitlines()
    files = [Path(n) if Path(n).is_absolute() else repo.path / n for n in names if n.strip()]
    for f in files:
        f.write_bytes(normalize_patch(f.read_bytes()))
    return files


def normalize_patch(data: bytes) -> bytes:
    """Cut blob ids to 7 digits and the ``Date:`` header to the author's UTC day.

    The ``index`` line of a file with a binary hunk (``GIT binary patch``) keeps its full ids: git
    applies a binary patch only when it can check the preimage's full blob id.
    """
    lines = data.split(b"\n")
    binary = _binary_sections(lines)
    section = -1
    in_header = True
    for i, raw in enumerate(lines):
        if in_header:
            if raw == b"":
                in_header = False
            elif raw.startswith(b"Date: "):
                when = email.utils.parsedate_to_datetime(raw[6:].decode())
                when = when.astimezone(UTC) if when.tzinfo else when
                lines[i] = (f"Date: {_DAYS[when.weekday()]}, {when.day} {_MONTHS[when.month - 1]} {when.year} "
                            "00:00:00 +0000").encode()
            continue
        if raw.startswith(b"diff --git "):
            section += 1
        if raw.startswith(b"index ") and section not in binary:
            m = _INDEX.match(raw.decode("ascii", "replace"))
            if m:
                lines[i] = f"index {m.group(1)[:7]}..{m.group(2)[:7]}{m.group(3)}".encode()
    return b"\n".join(lines)


def _binary_sections(lines: list[bytes]) -> set[int]:
    """The positions (0, 1, ...) of the ``diff --git`` sections that carry a binary hunk."""
    found, section = set(), -1
    for raw in lines:
        if raw.startswith(b"diff --git "):
            section += 1
        elif raw == b"GIT binary patch" and section >= 0:
            found.add(section)
    return found


def content_key(data: bytes) -> bytes:
    """A patch file without git format-patch's noise: what two files must share to say the same thing."""
    data = _FROM_LINE.sub(b"From " + b"0" * 40 + b" ", normalize_patch(data))
    return _SIGNATURE.sub(b"\n", data).rstrip(b"\n")


def keep_unchanged(old_dir: Path, files: list[Path]) -> None:
    """Put back the old file's bytes wherever the regenerated patch has the same content key."""
    for f in files:
        old = old_dir / f.name
        if old.is_file() and content_key(old.read_bytes()) == content_key(f.read_bytes()):
            shutil.copyfile(old, f)


def keep_names(old_dir: Path, files: list[Path]) -> list[Path]:
    """Give a regenerated patch the slug of the old file with the same subject (its number is its position).

    Hand-named files keep their names, so an unchanged series stays byte- and name-identical.
    Returns the files under their final names.
    """
    if not old_dir.is_dir():
        return files
    by_subject: dict[str, str] = {}
    for p in sorted(old_dir.glob("*.patch")):
        try:
            by_subject.setdefault(parse_patch("", p).subject, p.name[5:])
        except ConfigError:
            continue
    named = []
    for f in files:
        slug = by_subject.get(parse_patch("", f).subject)
        if slug and f.name[5:] != slug:
            f = f.rename(f.with_name(f"{f.name[:4]}-{slug}"))
        named.append(f)
    return named


@dataclass(frozen=True)
class SeriesDiff:
    """What replacing one series directory by another changes."""

    changed: bool
    diff: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    modified: tuple[str, ...]
    backup: Path | None = None


def compare(old_dir: Path, new_dir: Path) -> SeriesDiff:
    """What replacing ``old_dir``'s patches by ``new_dir``'s would change, as a unified diff of the files.

    Files are paired by their NNNN number, so a reworded subject shows as a modified patch.
    """
    old = {p.name[:4]: p for p in sorted(old_dir.glob("*.patch"))} if old_dir.is_dir() else {}
    new = {p.name[:4]: p for p in sorted(new_dir.glob("*.patch"))}
    chunks: list[str] = []
    added: list[str] = []
    removed: list[str] = []
    modified: list[str] = []
    for no in sorted(set(old) | set(new)):
        a, b = old.get(no), new.get(no)
        a_text = a.read_text(errors="surrogateescape").splitlines(keepends=True) if a else []
        b_text = b.read_text(errors="surrogateescape").splitlines(keepends=True) if b else []
        if a and b and a.name == b.name and a_text == b_text:
            continue
        if a is not None and b is not None:
            modified.append(b.name)
        elif b is not None:
            added.append(b.name)
        elif a is not None:
            removed.append(a.name)
        chunks.extend(difflib.unified_diff(a_text, b_text, f"a/{a.name}" if a else "/dev/null",
                                           f"b/{b.name}" if b else "/dev/null"))
    return SeriesDiff(bool(chunks), "".join(chunks), tuple(added), tuple(removed), tuple(modified))


def _owner(path: Path, prefix: str) -> int | None:
    """The process id in ``path``'s name after ``prefix`` (``<prefix><pid>[-...]``), None without one."""
    head = path.name[len(prefix):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def recover_swap(dest: Path) -> Path | None:
    """Put back the series a regen killed between its two renames left only as ``.<name>.bak-<pid>`` (``dest``
    missing, the backup's process gone); returns the backup put back (None: nothing to recover).

    The previous series is the one the edit checkout's state still records, so putting it back leaves the pack
    exactly as before the killed regen, which can then simply run again."""
    if dest.exists():
        return None
    left = swap_backups(dest)
    live = [b for b in left if (pid := _owner(b, f".{dest.name}.bak-")) is not None and guard.process_exists(pid)]
    if live:
        raise ConfigError(f"{dest}: missing while process {_owner(live[0], f'.{dest.name}.bak-')} swaps it "
                          f"({live[0]}); wait for it to end")
    if not left:
        return None
    if len(left) > 1:
        raise ConfigError(f"{dest}: missing, and several backups of it were left ({', '.join(p.name for p in left)}); "
                          "move the one to keep back by hand")
    os.replace(left[0], dest)
    return left[0]


def sweep_regen_scratch(parent: Path, pack: str) -> list[Path]:
    """Remove the ``.regen-<pack>-<pid>-*`` scratch directories of regens that are gone (a name without a pid
    comes from a harness before pids were named, none of which runs now); return what was removed."""
    prefix = f".regen-{pack}-"
    gone = []
    for scratch in sorted(parent.glob(prefix + "*")) if parent.is_dir() else []:
        pid = _owner(scratch, prefix)
        if pid is not None and guard.process_exists(pid):
            continue
        shutil.rmtree(scratch, ignore_errors=True)
        gone.append(scratch)
    return gone


def replace_series(dest: Path, new: Path) -> Path | None:
    """Swap the directory ``new`` in as ``dest``; return the backup of the old series (None if there was none).

    Two renames on one filesystem: at every instant either the old or the new series is whole on
    disk, and a failure between them puts the old one back. Ported series of other bases (sub-
    directories of ``dest``) move over into the new directory untouched.
    """
    backup = None
    if dest.exists():
        for sub in sorted(d for d in dest.iterdir() if d.is_dir() and not d.name.startswith(".")):
            if not (new / sub.name).exists():
                shutil.copytree(sub, new / sub.name)
        declared = dest / layout.PACK_FILE  # what the pack declares lives beside its series, and stays
        if declared.is_file() and not (new / layout.PACK_FILE).exists():
            shutil.copy2(declared, new / layout.PACK_FILE)
        backup = dest.with_name(f".{dest.name}.bak-{os.getpid()}")
        if backup.exists():
            shutil.rmtree(backup)
        os.replace(dest, backup)
    try:
        os.replace(new, dest)
    except BaseException:
        if backup is not None:
            os.replace(backup, dest)
        raise
    os.chmod(dest, 0o755)  # mkdtemp made it 0700
    return backup
