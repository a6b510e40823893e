"""The series as it is filed: ``git am``-able patches for an upstream base, with nothing of ours in them.

``export`` takes a pack's series for a base (its ported series where it has one), applies it to a
clone of that base, and writes it back with the deterministic format of ``series.format_series``
minus this repository's own trailers (``Upstream-Status:``, ``Pack:``). It then proves the result:
the written files must apply with plain ``git am`` to a fresh clone of the base and give the same
tree. When the pack's own series does not apply alone, the same-target dependencies that are not
absorbed at that base go underneath and the export says it is stacked on them.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness import git, series
from harness.context import Context
from harness.errors import SeriesError
from harness.tracking import Pack

# Lines of a commit message that are this repository's bookkeeping, not part of the filed change.
_OURS = re.compile(r"^(Upstream-Status|Pack):.*$")


@dataclass(frozen=True)
class Export:
    pack: str
    target: str
    base: str
    commit: str  # the base's commit the files apply to
    files: tuple[Path, ...]
    stacked_on: tuple[str, ...]  # packs whose patches go first (their files are part of the export)
    tree: str  # the tree id after applying everything


def export(ctx: Context, pack: Pack, base_name: str | None, out: Path) -> Export:
    manifest = ctx.manifest(pack.target)
    base = manifest.base(base_name or pack.filing_base).name
    own = series.load_series(ctx.root, pack.target, pack.id, base)
    if not own:
        raise SeriesError(f"pack {pack.id} has no series for {pack.target} {base} (nothing to export)")
    checkout = ctx.materialize(manifest, base)
    deps = [p for p in series.dependency_chain(ctx.tracking, pack, base) if p.id != pack.id]
    work = Path(tempfile.mkdtemp(prefix=f"patchlane-export-{pack.id}-"))
    try:
        stacked: list[str] = []
        try:
            repo = _applied(checkout, own, work / "alone")
        except SeriesError:
            if not deps:
                raise
            stacked = [p.id for p in deps]
            dep_patches = [x for p in deps for x in series.load_series(ctx.root, p.target, p.id, base)]
            repo = _applied(checkout, dep_patches + own, work / "stacked")
        fmt = work / "formatted"
        files = series.format_series(repo, checkout.commit, "HEAD", fmt)
        for f in files:
            f.write_bytes(strip_ours(f.read_bytes()))
        tree = repo.tree()
        _prove(checkout.path, files, tree, work / "proof")
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
        for f in files:
            shutil.copyfile(f, staging / f.name)
        os.chmod(staging, 0o755)
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Export(pack.id, pack.target, base, checkout.commit, tuple(out / f.name for f in files),
                  tuple(stacked), tree)


def _applied(checkout, patches: list[series.Patch], dest: Path) -> git.Repo:
    repo = git.clone(checkout.path, dest, branch="export")
    for patch in patches:
        series.apply_patch(repo, patch, checkout)
    return repo


def strip_ours(data: bytes) -> bytes:
    """The patch without our trailers in its message (the diff after ``---`` is left as it is)."""
    head, sep, rest = data.partition(b"\n---\n")
    lines = [ln for ln in head.decode("utf-8", "surrogateescape").split("\n") if not _OURS.match(ln)]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).rstrip("\n") + "\n"
    return text.encode("utf-8", "surrogateescape") + sep[1:] + rest if sep else data


def _prove(base: Path, files: list[Path], tree: str, dest: Path) -> None:
    """Plain ``git am`` of the exported files on a fresh clone of the base must give ``tree``."""
    repo = git.clone(base, dest, branch="proof")
    done = repo.call("am", "--quiet", *[str(f) for f in files])
    if not done.ok:
        said = (done.stderr.strip() or done.stdout.strip() or f"exit {done.status}").splitlines()[-1]
        raise SeriesError(f"the exported series does not apply with plain git am: {said}")
    got = repo.tree()
    if got != tree:
        raise SeriesError(f"the exported series gives tree {got[:12]} with plain git am, not {tree[:12]}")
