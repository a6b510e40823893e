"""Ordered patch series: ``patches/<target>/<pack>/NNNN-*.patch`` in git format-patch form.

Each patch must carry an ``Upstream-Status:`` line in its message, in the
DEP-3 / Yocto tradition. A series is applied with ``git am`` on a clone of the
pristine base, dependencies' series first, in a scratch directory that only
becomes the patched tree when every patch applied: a failure leaves nothing
half-applied and names the pack, the patch file, the path and the hunk.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from harness import git, ui
from harness.errors import ConfigError, SeriesError
from harness.hashing import sha256_file
from harness.pins import Checkout
from harness.store import Store

STATUS_RE = re.compile(
    r"^Upstream-Status:\s*(?P<status>Pending|Accepted|Backport|Denied|Submitted|Inappropriate)"
    r"(?:\s+\[(?P<detail>[^\]]+)\])?\s*$"
)
_NEEDS_DETAIL = {"Backport", "Submitted", "Inappropriate", "Denied"}
_PATCH_NAME = re.compile(r"^\d{4}-[A-Za-z0-9._-]+\.patch$")
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


def series_dir(root: Path, target: str, pack: str) -> Path:
    return root / "patches" / target / pack


def load_series(root: Path, target: str, pack: str) -> list[Patch]:
    """The pack's patches in order (an empty list when it has none)."""
    d = series_dir(root, target, pack)
    if not d.is_dir():
        return []
    patches = []
    for p in sorted(d.iterdir()):
        if p.name.startswith(".") or p.is_dir():
            continue
        if not _PATCH_NAME.match(p.name):
            raise ConfigError(f"{p}: patch files are named NNNN-slug.patch")
        patches.append(parse_patch(pack, p))
    return patches


def parse_patch(pack: str, path: Path) -> Patch:
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    lines = text.splitlines()
    if not lines or not lines[0].startswith("From "):
        raise ConfigError(f"{path}:1: not a git format-patch file (expected a 'From <sha> ...' first line)")
    subject = ""
    status = detail = None
    files: list[str] = []
    hunks: list[Hunk] = []
    in_diff = False
    current = None
    per_file = 0
    in_subject = False
    for no, line in enumerate(lines, 1):
        if not in_diff:
            if in_subject and line[:1] in (" ", "\t"):  # RFC 2822 folded header line
                subject = f"{subject} {line.strip()}"
                continue
            in_subject = line.startswith("Subject:")
            if in_subject:
                subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", line[len("Subject:"):].strip())
            elif line.startswith("Upstream-Status:"):
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
        elif in_diff and line.startswith("@@"):
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


def series_key(target: str, artifact_sha256: str, patches: list[Patch]) -> str:
    """Content key of a patched tree: the base artefact's sha256 plus each patch's sha256, in order."""
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
    key = series_key(base.target, base.base.artifact.sha256, patches)
    with store.locked():
        final = store.area("trees") / base.target / key[:20]
        if not (final / ".git").is_dir():
            with store.new_entry(final) as tmp:
                repo = git.clone(base.path, tmp, branch="patched")  # clone into the empty scratch dir
                for patch in patches:
                    with ui.status(f"applying pack {patch.pack}: {patch.name}"):
                        _apply_one(repo, patch, base)
    return PatchedTree(base, tuple(patches), final, key)


def check_applies(base: Checkout, patches: list[Patch], scratch: Path) -> None:
    """Apply ``patches`` in a throwaway clone under ``scratch``; raise on the first failure."""
    repo = git.clone(base.path, scratch, branch="check")
    for patch in patches:
        _apply_one(repo, patch, base)


def _apply_one(repo, patch: Patch, base: Checkout) -> None:
    try:
        repo.git.apply("--check", str(patch.path))
    except git.GitCommandError as exc:
        raise SeriesError(_explain(patch, base, exc.stderr or str(exc))) from None
    try:
        repo.git.am("--quiet", "--keep-cr", "--committer-date-is-author-date", str(patch.path))
    except git.GitCommandError as exc:
        try:
            repo.git.am("--abort")
        except git.GitCommandError:
            pass
        raise SeriesError(_explain(patch, base, exc.stderr or str(exc))) from None


def _explain(patch: Patch, base: Checkout, stderr: str) -> str:
    where = f"pack {patch.pack}: {patch.path.parent.name}/{patch.name} does not apply on {base.target} {base.base.name}"
    m = re.search(r"patch failed: (.+?):(\d+)", stderr)
    if m:
        path, line = m.group(1), int(m.group(2))
        hunk = next((h for h in patch.hunks if h.path == path and h.old_start == line), None)
        if hunk is None:
            hunk = next((h for h in patch.hunks if h.path == path), None)
        if hunk is not None:
            return (f"{where}: {path} hunk #{hunk.index} (@@ {hunk.header} @@, patch line {hunk.patch_line}): "
                    "context does not match the base")
        return f"{where}: {path} near line {line}: context does not match the base"
    m = re.search(r"error: (.+?): (No such file or directory|does not exist in index)", stderr)
    if m:
        return f"{where}: {m.group(1)}: file is not in the base"
    m = re.search(r"error: (.+?): already exists in working directory", stderr)
    if m:
        return f"{where}: {m.group(1)}: the patch creates it but the base already has it"
    first = next((ln for ln in stderr.splitlines() if ln.strip().startswith("error")), stderr.strip()[:200])
    return f"{where}: {first.strip()}"
