"""Ordered patch series: the one owner of patch files and of the git operations on them.

A pack's series is ``patches/<target>/<pack>/NNNN-*.patch`` (git format-patch form) for the pack's
own base, plus ``patches/<target>/<pack>/<base>/NNNN-*.patch`` for each other base it was ported to
(e.g. ``patches/mamba/07/main/``: the same change rebuilt on upstream main). ``series_for`` picks,
for a base, each same-target dependency's series and then the pack's own; a dependency that
upstream absorbed at that base contributes nothing there.

Each patch must carry an ``Upstream-Status:`` line in its message, in the DEP-3 / Yocto tradition.
A series is applied with ``git am`` on a clone of the pristine base in a scratch directory that only
becomes the patched tree when every patch applied: a failure leaves nothing half-applied and names
the pack, the patch file, the path and the hunk.

Writing a series back (``series_write.format_series``) is deterministic, so an unchanged commit gives a
byte-identical file:

* ``--zero-commit`` (``From 000...``), ``--no-signature``, ``--no-numbered`` (subjects say
  ``[PATCH]``, so adding a commit does not touch the others);
* blob ids are generated with ``--full-index`` and cut to 7 hex digits, so the width never depends
  on how many objects the checkout holds;
* ``Date:`` is the author date's UTC day at 00:00:00 +0000;
* a regenerated patch that says what the old file said, once that noise (commit id, time of day,
  blob id width, a ``-- <git version>`` signature) is set aside, keeps the old file's bytes
  (``keep_unchanged``), so a series written by plain ``git format-patch`` regenerates to a zero diff.
"""

from __future__ import annotations

import email.parser
import email.policy
import email.utils
import hashlib
import os
import posixpath
import re
import shutil
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.base import regular, tarsafe, ui
from harness.base.hashing import sha256_file
from harness.base.store import Store
from harness.errors import ConfigError, SeriesError
from harness.lane.tracking import layout
from harness.upstream import git
from harness.upstream.pins import Checkout

if TYPE_CHECKING:
    from harness.lane.tracking import Pack, Tracking

STATUS_RE = re.compile(
    r"^Upstream-Status:\s*(?P<status>Pending|Accepted|Backport|Denied|Submitted|Inappropriate)"
    r"(?:\s+\[(?P<detail>[^\]]+)\])?\s*$"
)
_NEEDS_DETAIL = {"Backport", "Submitted", "Inappropriate", "Denied"}
PATCH_NAME = re.compile(r"^\d{4}-[A-Za-z0-9._-]+\.patch$")
# How every patch is applied as a commit (the tool's own applies and `harness edit`).
AM_OPTIONS = ("--quiet", "--keep-cr", "--committer-date-is-author-date")
_HUNK = re.compile(r"^@@ -(?P<old>\d+)(?:,(?P<oldlen>\d+))? \+(?P<new>\d+)(?:,(?P<newlen>\d+))? @@")


@dataclass(frozen=True)
class Hunk:
    path: str
    index: int  # 1-based within its file
    old_start: int
    header: str
    patch_line: int  # line of the @@ header in the patch file
    old_lines: int = 1  # lines of the base the hunk covers (0 for a pure insertion)

    @property
    def old_range(self) -> tuple[int, int]:
        """First and last base line the hunk touches (an insertion touches the line it follows)."""
        return self.old_start, self.old_start + max(self.old_lines, 1) - 1


@dataclass(frozen=True)
class Patch:
    pack: str
    path: Path
    subject: str
    upstream_status: str
    status_detail: str | None
    sha256: str
    files: tuple[str, ...]
    hunks: tuple[Hunk, ...]

    @property
    def name(self) -> str:
        return self.path.name


def series_dir(root: Path, target: str, pack: str, base: str | None = None) -> Path:
    """Where the pack's series lives: its own base's at the top, a ported one under ``<base>/``."""
    top = root / "patches" / target / pack
    return top / base if base is not None and (top / base).is_dir() else top


def write_dir(root: Path, pack: Pack, base: str, default_base: str) -> Path:
    """Where a series rebuilt on ``base`` is written: the top level for the pack's own base, else ``<base>/``."""
    top = root / "patches" / pack.target / pack.id
    return top if base == (pack.base or default_base) else top / base


def ported_bases(root: Path, target: str, pack: str) -> list[str]:
    """The bases the pack carries a ported series for (the sub-directories of its series directory)."""
    top = root / "patches" / target / pack
    return sorted(d.name for d in top.iterdir() if d.is_dir() and not d.name.startswith(".")) if top.is_dir() else []


def load_series(root: Path, target: str, pack: str, base: str | None = None) -> list[Patch]:
    """The pack's patches in order for ``base`` (its ported series if it has one; an empty list when none).

    A series directory that a regen killed between its two renames left only as a backup is refused (naming the
    backup), never read as "no series"."""
    top = root / "patches" / target / pack
    for where in (top, *([top / base] if base is not None else [])):
        left = swap_backups(where)
        if left and not where.is_dir():
            raise ConfigError(f"{where}: missing; a regen killed while it swapped the series left the previous one "
                              f"in {left[0]}", hint=f"run 'harness regen {pack}' (it puts the backup back first), "
                                                    f"or move {left[0].name} back to {where.name}")
    d = series_dir(root, target, pack, base)
    if not d.is_dir():
        return []
    patches: list[Patch] = []
    numbers: dict[str, Path] = {}
    for p in sorted(d.iterdir()):
        if p.name.startswith(".") or (p.name == layout.PACK_FILE and d == top):
            continue  # the pack's declarations (patches/<target>/<NN>/pack.toml) sit beside its own series
        named = PATCH_NAME.match(p.name)
        if p.is_symlink():  # its content would live elsewhere, outside what the series' digests cover
            raise ConfigError(f"{p}: a symbolic link (to {os.readlink(p)}); a patch is a regular file of the series",
                              hint="replace the link with the file it points to")
        if regular.kind(p) not in (None, "a directory"):  # a FIFO would block the read, a device is no patch
            raise ConfigError(f"{p}: {regular.kind(p)}; a patch is a regular file of the series")
        if p.is_dir():
            if named:
                raise ConfigError(f"{p}: a directory named like a patch file; a series holds NNNN-slug.patch "
                                  "files and the ported series of other bases (named after the base)")
            continue  # the ported series of another base
        if not named:
            raise ConfigError(f"{p}: patch files are named NNNN-slug.patch")
        number = p.name[:4]
        if number in numbers:
            raise ConfigError(f"{p}: number {number} is also {numbers[number].name}; each patch of a series has "
                              "its own number (its place in the order)")
        numbers[number] = p
        patches.append(parse_patch(pack, p))
    return patches


# Characters another tool reads differently from git: line and paragraph separators (a trailer "on its own line"
# to one reader, inside a subject line to another) and bidi controls (code that reads otherwise than it runs).
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
_JOINERS = frozenset("\u200c\u200d")


def _odd_character(text: str, in_message: bool) -> str | None:
    """What in ``text`` (one physical line) another tool would read otherwise: None when nothing."""
    for ch in text:
        kind = unicodedata.category(ch)
        if ch in _BIDI:
            return f"a bidi control ({ascii(ch)})"
        if kind in ("Zl", "Zp") or ch in "\x85\x0b\x0c":
            return f"a line break other than newline ({ascii(ch)})"
        if in_message and ((kind == "Cf" and ch not in _JOINERS) or (kind == "Cc" and ch not in "\t\r")):
            return f"an invisible control or format character ({ascii(ch)})"
    return None


def _refuse_odd_characters(path: Path, text: str) -> None:
    """A patch whose message or added lines hold characters other tools split or reorder on is refused: a
    ``Signed-off-by`` after a U+2028 reads as a trailer to some readers, bidi controls make code read otherwise."""
    in_message = True
    for no, line in enumerate(text.split("\n"), 1):
        if in_message and (line == "---" or line.startswith("diff --git ")):
            in_message = False
        if not in_message and not line.startswith("+"):
            continue
        found = _odd_character(line, in_message)
        if found:
            where = "the commit message" if in_message else "an added line"
            raise ConfigError(f"{path}:{no}: {where} holds {found}; other tools read it otherwise than git does",
                              hint="remove it from the commit (harness edit, then harness regen)")


def parse_patch(pack: str, path: Path) -> Patch:
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    _refuse_odd_characters(path, text)
    lines = text.splitlines()
    if not lines or not lines[0].startswith("From "):
        raise ConfigError(f"{path}:1: not a git format-patch file (expected a 'From <sha> ...' first line)")
    subject = subject_of(text)
    found = _odd_character(subject, True)  # git writes a non-ASCII subject as RFC 2047 words: read it decoded
    if found:
        raise ConfigError(f"{path}: the commit message's subject holds {found}; other tools read it otherwise than "
                          "git does", hint="remove it from the commit (harness edit, then harness regen)")
    status = detail = None
    files: list[str] = []
    hunks: list[Hunk] = []
    in_diff = in_hunk = False
    current = None
    per_file = 0
    links: set[str] = set()  # files the patch makes symbolic links (mode 120000)
    for no, line in enumerate(lines, 1):
        if not in_diff:
            if line.startswith("Upstream-Status:"):
                m = STATUS_RE.match(line)
                if not m:
                    raise ConfigError(
                        f"{path}:{no}: bad Upstream-Status {line[16:].strip()!r}; expected Pending, Accepted, "
                        "Backport [url], Denied [why], Submitted [url] or Inappropriate [why]"
                    )
                status, detail = m.group("status"), m.group("detail")
                if status in _NEEDS_DETAIL and not detail:
                    raise ConfigError(f"{path}:{no}: Upstream-Status {status} needs a [reference or reason]")
        if line.startswith("diff --git "):
            in_diff = True
            m = re.match(r"^diff --git a/(.+) b/(.+)$", line)
            current = m.group(2) if m else line[11:]
            files.append(current)
            per_file = 0
            in_hunk = False
        elif in_diff and not in_hunk and line in ("new file mode 120000", "new mode 120000"):
            links.add(current or "?")
        elif in_hunk and current in links and line.startswith("+"):
            _refuse_leaving_link(path, no, current, line[1:])
        elif in_diff and line.startswith("@@"):
            in_hunk = True
            m = _HUNK.match(line)
            if m:
                per_file += 1
                old_len = int(m.group("oldlen")) if m.group("oldlen") is not None else 1
                hunks.append(Hunk(current or "?", per_file, int(m.group("old")), line.split("@@")[1].strip(), no,
                                  old_len))
    if status is None:
        raise ConfigError(f"{path}: no 'Upstream-Status:' line in the patch message (DEP-3); add one before the '---'")
    if not files:
        raise ConfigError(f"{path}: the patch changes no file")
    return Patch(pack, path, subject, status, detail, sha256_file(path), tuple(files), tuple(hunks))


def _refuse_leaving_link(path: Path, no: int, link: str, target: str) -> None:
    """A patch line making ``link`` a symbolic link to ``target``: refused when it leaves the tree (absolute, or
    climbing above the top); one into the tree is checked again once applied (``refuse_links_leaving``)."""
    inside = posixpath.normpath(posixpath.join(posixpath.dirname(link), target))
    if posixpath.isabs(target) or inside == ".." or inside.startswith("../"):
        raise ConfigError(f"{path}:{no}: makes {link} a symbolic link to {target!r}, outside the tree; a build "
                          "never reads outside its tree", hint="add the file itself, not a link to it")


def refuse_links_leaving(tree: Path, where: str) -> None:
    """Raise SeriesError when a symbolic link in ``tree`` leaves it (after the series of ``where`` applied)."""
    leaving = tarsafe.links_leaving(tree)
    if leaving:
        rel, target = leaving[0]
        more = f" (and {len(leaving) - 1} more)" if len(leaving) > 1 else ""
        raise SeriesError(f"{where}: {rel} is a symbolic link to {target!r}, outside the tree{more}; a build never "
                          "reads outside its tree")


def absorbed_at(pack: Pack, base: str | None) -> bool:
    """Whether tracking.toml records that upstream absorbed ``pack`` at ``base`` (``[absorbed] base``)."""
    return base is not None and pack.absorbed is not None and pack.absorbed.get("base") == base


def series_for(tracking: Tracking, root: Path, pack: Pack, base: str | None) -> list[Patch]:
    """Every patch a patched lane of ``pack`` on ``base`` applies: same-target dependencies' series first.

    A dependency that upstream absorbed at ``base`` is already in the base and contributes nothing.
    """
    out: list[Patch] = []
    for p in dependency_chain(tracking, pack, base):
        out.extend(load_series(root, p.target, p.id, base))
    return out


def dependency_chain(tracking: Tracking, pack: Pack, base: str | None) -> list[Pack]:
    """The same-target packs whose series go under ``pack``'s on ``base`` (dependencies first, then the pack)."""
    return [p for p in tracking.closure(pack.id)
            if p.target == pack.target and (p.id == pack.id or not absorbed_at(p, base))]


def subject_of(text: str) -> str:
    """The patch's subject as a person wrote it: the mail header parsed by the stdlib (folded lines joined,
    RFC 2047 ``=?UTF-8?q?...?=`` words decoded), without git's ``[PATCH ...]`` prefix."""
    header = text.split("\n", 1)[1] if text.startswith("From ") else text  # the mbox "From <sha>" line
    header = header.split("\n\n", 1)[0]
    message = email.parser.HeaderParser(policy=email.policy.default).parsestr(header)
    return re.sub(r"^\[PATCH[^\]]*\]\s*", "", str(message.get("Subject", "")).strip())


def series_key(target: str, artifact_sha256: str, patches: list[Patch]) -> str:
    """Content key of a patched tree: the base's pin (artefact sha256 or commit id) plus each patch's sha256."""
    h = hashlib.sha256()
    h.update(f"{target}\0{artifact_sha256}\0".encode())
    for p in patches:
        h.update(f"{p.pack}/{p.name}\0{p.sha256}\0".encode())
    return h.hexdigest()


@dataclass(frozen=True)
class PatchedTree:
    base: Checkout
    patches: tuple[Patch, ...]
    path: Path
    key: str


def apply(base: Checkout, patches: list[Patch], store: Store) -> PatchedTree:
    """The base with ``patches`` applied as commits, cached by content key."""
    key = series_key(base.target, base.base.pin, patches)
    final = store.area("trees") / base.target / key[:20]
    if _intact_tree(final):  # lock-free: an entry exists under its final name only when complete
        return PatchedTree(base, tuple(patches), final, key)
    with store.locked():  # to make it, or to replace a damaged one: look again, another process may have
        if (final / ".git").is_dir():
            stray = git.repo(final).stray_paths()  # a patched tree is exactly its last commit
            if stray:
                ui.warn(f"patched tree {final} is not its series' commit ({stray[0]} changed or added); "
                        "making it again")
                shutil.rmtree(final)
        if not (final / ".git").is_dir():
            with store.new_entry(final) as tmp:
                repo = git.clone(base.path, tmp, branch="patched")  # clone into the empty scratch dir
                for patch in patches:
                    with ui.status(f"applying pack {patch.pack}: {patch.name}"):
                        apply_patch(repo, patch, base)
                refuse_links_leaving(tmp, _applied(base, patches))
    return PatchedTree(base, tuple(patches), final, key)


def _intact_tree(path: Path) -> bool:
    """Whether the tree at ``path`` exists and is exactly its last commit, asked without the store lock; any
    doubt (missing, changed, unreadable while another process replaces it) is False: the caller takes the lock."""
    if not (path / ".git").is_dir():
        return False
    try:
        return not git.repo(path).stray_paths()
    except (git.GitError, OSError):
        return False


def check_applies(base: Checkout, patches: list[Patch], scratch: Path) -> None:
    """Apply ``patches`` in a throwaway clone under ``scratch``; raise on the first failure."""
    repo = git.clone(base.path, scratch, branch="check")
    for patch in patches:
        apply_patch(repo, patch, base)
    refuse_links_leaving(scratch, _applied(base, patches))


def _applied(base: Checkout, patches: list[Patch]) -> str:
    packs = sorted({p.pack for p in patches})
    return f"pack(s) {', '.join(packs) or '-'} applied on {base.target} {base.base.name}"


def apply_patch(repo: git.Repo, patch: Patch, base: Checkout, *extra: str) -> None:
    """`git am` one patch onto ``repo`` (checked first); a failure names pack, file, path and hunk, and points at
    ``harness rebase`` (which tries ``-C1`` and ``git am -3``; a lane applies as a maintainer does, plain)."""
    where = f"pack {patch.pack}: {patch.path.parent.name}/{patch.name} does not apply on {base.target} {base.base.name}"
    status, log = git_apply(repo, "--check", *extra, str(patch.path))
    if status != 0:
        raise SeriesError(f"{where}: {explain(repo, patch)}",
                          hint=f"harness rebase {base.target} --to {base.base.name} --pack {patch.pack} says whether "
                               "reduced context or a 3-way merge (git am -3) applies it; --refresh then rewrites "
                               "the series so that plain git am does")
    done = repo.call("am", *AM_OPTIONS, *extra, str(patch.path))
    if not done.ok:
        repo.call("am", "--abort")  # nothing to abort when am stopped before starting
        raise SeriesError(f"{where}: {_last_error(done.stderr or done.stdout)}")


def three_way(repo: git.Repo, patch: Patch) -> bool:
    """Commit ``patch`` on ``repo`` with ``git am -3`` (a merge from the blobs its ``index`` lines name), leaving the
    tree as it was when that fails: a conflict, or a base that lacks those blobs (a shallow clone, another
    history). True when the commit was made."""
    done = repo.call("am", *AM_OPTIONS, "-3", str(patch.path))
    if not done.ok:
        repo.call("am", "--abort")
        repo.run("reset", "-q", "--hard")
        repo.run("clean", "-q", "-fdx")
    return done.ok


def git_apply(repo: git.Repo, *args: str) -> tuple[int, str]:
    """``git apply ARGS`` in ``repo``: its exit status and its output (stdout and stderr together)."""
    done = repo.call("apply", *args)
    return done.status, f"{done.stdout}\n{done.stderr}"


_CHECKING = re.compile(r"^Checking patch (.+)\.\.\.$")
_REJECTED = re.compile(r"^Rejected hunk #(\d+)\.$")
_APPLYING = re.compile(r"^Applying patch (.+) with \d+ reject")


def explain(repo: git.Repo, patch: Patch) -> str:
    """Which files and hunks of ``patch`` fail on ``repo``'s HEAD, from ``git apply --reject`` (tree restored)."""
    _, log = git_apply(repo, "--reject", "-v", str(patch.path))
    repo.run("reset", "-q", "--hard")
    repo.run("clean", "-q", "-fdx")
    rejected: dict[str, list[Hunk | int]] = {}
    problems: list[str] = []
    current = "?"
    for line in log.splitlines():
        line = line.strip()
        m = _APPLYING.match(line) or _CHECKING.match(line)
        if m:
            current = m.group(1)
        m = _REJECTED.match(line)
        if m:
            index = int(m.group(1))
            hunk = next((h for h in patch.hunks if h.path == current and h.index == index), None)
            rejected.setdefault(current, []).append(hunk or index)
        m = re.match(r"error: (.+?): (does not exist in index|No such file or directory)", line)
        if m:
            problems.append(f"{m.group(1)}: file is not in the base")
        m = re.match(r"error: (.+?): already exists in working directory", line)
        if m:
            problems.append(f"{m.group(1)}: the patch creates it but the base already has it")
    for path, hunks in rejected.items():
        total = sum(1 for h in patch.hunks if h.path == path)
        shown = ", ".join(f"hunk #{h.index} (@@ {h.header} @@, patch line {h.patch_line})" if isinstance(h, Hunk)
                          else f"hunk #{h}" for h in hunks)
        problems.append(f"{path} {shown}: context does not match the base ({len(hunks)} of {total} hunks)")
    return "; ".join(dict.fromkeys(problems)) or _last_error(log)


def _last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("error", "fatal"))]
    return (errors or lines or ["git gave no reason"])[0][:200]


swap_backups = layout.swap_backups  # the previous series a regen kept beside a series directory
