"""Edit a pack's series as commits, then regenerate its patch files from them.

``start`` clones the pristine base into an edit checkout and applies, with
``git am``, the series of every same-target dependency and then the pack's own,
one commit per patch (the ``gbp pq import`` / ``devtool modify`` model). Which
commits belong to which pack is recorded in ``.git/patchlane-edit.json``.

``regenerate`` turns the pack's commits (everything after its dependencies'
last commit) back into ``patches/<target>/<pack>/`` with ``git format-patch``,
formatted so an unchanged commit gives a byte-identical file:

* ``--zero-commit`` (``From 000...``), ``--no-signature``, ``--no-numbered``
  (subjects say ``[PATCH]``, so adding a commit does not touch the others);
* blob ids are generated with ``--full-index`` and cut to 7 hex digits, so the
  width never depends on how many objects the checkout holds;
* ``Date:`` is the author date's UTC day at 00:00:00 +0000;
* a regenerated patch that says what the old file said, once that noise
  (commit id, time of day, blob id width, a ``-- <git version>`` signature)
  is set aside, keeps the old file's bytes, so a series written by plain
  ``git format-patch`` also regenerates to a zero diff.

New files are written to a scratch directory beside the series and swapped in
with renames; the old series is kept as a backup until the swap succeeded.
"""

from __future__ import annotations

import difflib
import email.utils
import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import UTC
from pathlib import Path

from harness import git, pins, series, ui
from harness.errors import ConfigError, EditError
from harness.hashing import sha256_file
from harness.lanes import Context
from harness.tracking import Pack

STATE_FILE = "patchlane-edit.json"
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
_PACK_TRAILER = re.compile(r"^Pack:\s*(\S+)\s*$", re.M)


@dataclass
class PackRange:
    """Commits ``start..end`` of an edit checkout are the series of ``pack``."""

    pack: str
    start: str
    end: str
    patches: dict[str, str] = field(default_factory=dict)  # file name -> sha256 when the checkout was made


@dataclass
class EditState:
    target: str
    pack: str
    base: str
    pristine: str
    ranges: list[PackRange]

    def own(self) -> PackRange:
        return next(r for r in self.ranges if r.pack == self.pack)

    def write(self, checkout: Path) -> None:
        path = Path(git.repo(checkout).git_dir) / STATE_FILE
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def read(cls, checkout: Path) -> EditState:
        try:
            path = Path(git.repo(checkout).git_dir) / STATE_FILE
            raw = json.loads(path.read_text())
        except (OSError, ValueError, git.git.exc.GitError) as exc:
            raise EditError(f"{checkout}: not an edit checkout made by 'harness edit' ({exc})") from None
        raw["ranges"] = [PackRange(**r) for r in raw["ranges"]]
        return cls(**raw)


def default_dir(ctx: Context, pack: Pack) -> Path:
    return ctx.store.area("edit") / pack.target / pack.id


def start(ctx: Context, pack: Pack, base_name: str | None, dest: Path, force: bool = False) -> EditState:
    """Make ``dest`` an edit checkout of ``pack`` (dependencies' commits first, then the pack's)."""
    manifest = ctx.manifest(pack.target)
    checkout = pins.materialize(manifest, base_name or pack.base, ctx.store, ctx.artifacts)
    if dest.exists() and any(dest.iterdir()):
        if not force:
            raise EditError(f"{dest} already exists and is not empty",
                            hint="finish it with 'harness regen', remove it, or pass --force to replace it")
        if (dest / ".git").is_dir():  # --force replaces a checkout, never work that is not in patches/ yet
            _refuse_dirty(git.repo(dest), dest)
            _refuse_unregenerated(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".edit-{pack.id}-", dir=dest.parent))
    try:
        repo = git.clone(checkout.path, scratch / "tree", branch=f"pack-{pack.id}")
        ranges = []
        for p in ctx.tracking.closure(pack.id):
            if p.target != pack.target:
                continue
            begin = repo.head.commit.hexsha
            patches = series.load_series(ctx.root, p.target, p.id)
            for patch in patches:
                series.apply_patch(repo, patch, checkout)
            ranges.append(PackRange(p.id, begin, repo.head.commit.hexsha, {x.name: x.sha256 for x in patches}))
        state = EditState(pack.target, pack.id, checkout.base.name, checkout.commit, ranges)
        state.write(scratch / "tree")
        if dest.exists():
            shutil.rmtree(dest)  # empty, or a checkout whose work is all in patches/ (checked above)
        os.replace(scratch / "tree", dest)  # a series that does not apply leaves no half-made checkout
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return state


# --------------------------------------------------------------------------- regenerate

@dataclass(frozen=True)
class Regenerated:
    changed: bool
    diff: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    modified: tuple[str, ...]
    backup: Path | None = None


def _refuse_unregenerated(checkout: Path) -> None:
    try:
        state = EditState.read(checkout)
    except EditError:
        return
    head = git.repo(checkout).head.commit.hexsha
    if head != state.own().end:
        raise EditError(f"{checkout}: HEAD {head[:12]} has commits not regenerated into patches/ yet",
                        hint=f"run 'harness regen {state.pack} --dir {checkout}' first, or remove the directory")


def dirty_paths(repo) -> list[str]:
    return [ln[3:] for ln in repo.git.status("--porcelain", "--untracked-files=all").splitlines() if ln.strip()]


def _refuse_dirty(repo, where: Path) -> None:
    dirty = dirty_paths(repo)
    if dirty:
        shown = ", ".join(dirty[:8]) + (f" (+{len(dirty) - 8} more)" if len(dirty) > 8 else "")
        raise EditError(f"{where}: uncommitted changes in {shown}",
                        hint="commit them (git commit --amend into the patch, or a new commit) or stash them first")
    gd = Path(repo.git_dir)
    for marker, what in (("rebase-apply", "git am/rebase"), ("rebase-merge", "git rebase"),
                         ("MERGE_HEAD", "merge"), ("CHERRY_PICK_HEAD", "cherry-pick")):
        if (gd / marker).exists():
            raise EditError(f"{where}: a {what} is in progress; finish or abort it first")


def format_series(repo, start: str, end: str, out: Path) -> list[Path]:
    """``git format-patch start..end`` into ``out``, normalized (see the module docstring)."""
    merges = repo.git.rev_list("--merges", f"{start}..{end}").split()
    if merges:
        raise EditError(f"{repo.working_dir}: merge commit {merges[0][:12]} in the series; a series is linear")
    names = repo.git.format_patch(*FORMAT_OPTIONS, "-o", str(out), f"{start}..{end}").splitlines()
    files = [Path(n) if Path(n).is_absolute() else Path(repo.working_dir) / n for n in names if n.strip()]
    for f in files:
        f.write_bytes(normalize_patch(f.read_bytes()))
    return files


def normalize_patch(data: bytes) -> bytes:
    """Cut blob ids to 7 digits and the ``Date:`` header to the author's UTC day."""
    lines = data.split(b"\n")
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
        if raw.startswith(b"index "):
            m = _INDEX.match(raw.decode("ascii", "replace"))
            if m:
                lines[i] = f"index {m.group(1)[:7]}..{m.group(2)[:7]}{m.group(3)}".encode()
    return b"\n".join(lines)


_FROM_LINE = re.compile(rb"\AFrom [0-9a-f]{40} ")
_SIGNATURE = re.compile(rb"\n-- \n[^\n]*\s*\Z")


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
    by_subject = {}
    for p in sorted(old_dir.glob("*.patch")):
        try:
            by_subject.setdefault(series.parse_patch("", p).subject, p.name[5:])
        except ConfigError:
            continue
    named = []
    for f in files:
        slug = by_subject.get(series.parse_patch("", f).subject)
        if slug and f.name[5:] != slug:
            f = f.rename(f.with_name(f"{f.name[:4]}-{slug}"))
        named.append(f)
    return named


def _check_commits(pack: Pack, repo, start: str, end: str) -> None:
    """Every commit of the pack changes something and carries its Upstream-Status (and no other pack's trailer)."""
    for sha in repo.git.rev_list("--reverse", f"{start}..{end}").split():
        commit = repo.commit(sha)
        where = f"pack {pack.id}: commit {sha[:12]} ({commit.summary!r})"
        if commit.parents and commit.tree == commit.parents[0].tree:
            raise EditError(f"{where} is empty", hint="drop it (git rebase -i) and run regen again")
        if not re.search(r"^Upstream-Status:", commit.message, re.M):
            raise EditError(f"{where} has no 'Upstream-Status:' line",
                            hint="git commit --amend (or rebase -i with 'reword') and add e.g. "
                                 "'Upstream-Status: Pending' above the trailers")
        m = _PACK_TRAILER.search(commit.message)
        if m and m.group(1) != pack.id:
            raise EditError(f"{where} says 'Pack: {m.group(1)}'; a commit of pack {m.group(1)} belongs in that "
                            "pack's edit checkout")


def regenerate(ctx: Context, pack: Pack, checkout: Path, dry_run: bool = False) -> Regenerated:
    state = EditState.read(checkout)
    if state.pack != pack.id or state.target != pack.target:
        raise EditError(f"{checkout}: edit checkout of pack {state.pack} ({state.target}), not of pack {pack.id}")
    repo = git.repo(checkout)
    _refuse_dirty(repo, checkout)
    own = state.own()
    try:
        repo.git.merge_base("--is-ancestor", own.start, "HEAD")
    except git.GitCommandError:
        raise EditError(f"{checkout}: the dependencies' commits (up to {own.start[:12]}) were rewritten; "
                        f"edit a dependency with 'harness edit <dep>' instead") from None
    dest = series.series_dir(ctx.root, pack.target, pack.id)
    current = {p.name: sha256_file(p) for p in sorted(dest.glob("*.patch"))} if dest.is_dir() else {}
    if current != own.patches:
        raise EditError(f"{dest}: changed since 'harness edit' made {checkout}; regenerating would overwrite it",
                        hint="commit or move those changes, then run 'harness edit --force' again")
    dest.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".regen-{pack.id}-", dir=dest.parent))
    try:
        _check_commits(pack, repo, own.start, "HEAD")
        files = format_series(repo, own.start, "HEAD", scratch)
        for f in files:
            series.parse_patch(pack.id, f)  # the Upstream-Status value itself, as every loader checks it
        keep_unchanged(dest, keep_names(dest, files))
        result = compare(dest, scratch)
        if not result.changed or dry_run:
            return result
        backup = replace_series(dest, scratch)
        scratch = None  # it is the series now
        own.end = repo.head.commit.hexsha
        own.patches = {p.name: sha256_file(p) for p in sorted(dest.glob("*.patch"))}
        state.write(checkout)
        if backup is not None:
            shutil.rmtree(backup)
        return result
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def compare(old_dir: Path, new_dir: Path) -> Regenerated:
    """What replacing ``old_dir``'s patches by ``new_dir``'s would change, as a unified diff of the files.

    Files are paired by their NNNN number, so a reworded subject shows as a modified patch.
    """
    old = {p.name[:4]: p for p in sorted(old_dir.glob("*.patch"))} if old_dir.is_dir() else {}
    new = {p.name[:4]: p for p in sorted(new_dir.glob("*.patch"))}
    chunks: list[str] = []
    added, removed, modified = [], [], []
    for no in sorted(set(old) | set(new)):
        a, b = old.get(no), new.get(no)
        a_text = a.read_text(errors="surrogateescape").splitlines(keepends=True) if a else []
        b_text = b.read_text(errors="surrogateescape").splitlines(keepends=True) if b else []
        if a and b and a.name == b.name and a_text == b_text:
            continue
        (modified if a and b else added if b else removed).append((b or a).name)
        chunks.extend(difflib.unified_diff(a_text, b_text, f"a/{a.name}" if a else "/dev/null",
                                           f"b/{b.name}" if b else "/dev/null"))
    return Regenerated(bool(chunks), "".join(chunks), tuple(added), tuple(removed), tuple(modified))


def replace_series(dest: Path, new: Path) -> Path | None:
    """Swap the directory ``new`` in as ``dest``; return the backup of the old series (None if there was none).

    Two renames on one filesystem: at every instant either the old or the new series is whole on
    disk, and a failure between them puts the old one back.
    """
    backup = None
    if dest.exists():
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


def print_result(result: Regenerated, dest: Path) -> None:
    if not result.changed:
        ui.data(f"{dest}: unchanged (regenerated series is byte-identical)")
        return
    ui.out.print(result.diff.rstrip("\n"), markup=False, highlight=False)
    for what, names in (("modified", result.modified), ("added", result.added), ("removed", result.removed)):
        if names:
            ui.data(f"{what}: {', '.join(names)}")
