"""Try every pack's series on another base of its target and say, patch by patch, how it lands.

Each pack is tried in its own scratch clone of the new base, after its same-target
dependencies' series (dependencies that are already upstream are skipped). A patch is:

``contained``  it reverse-applies cleanly: the new base already has the change
``clean``      it applies exactly where it says
``offset``     it applies, but some hunks moved (``git apply`` reports the offset)
``fuzz``       it applies only when the outer context is trimmed to one line (``-C1``)
``3-way``      only a 3-way merge applies it (``git am -3``, from the blobs its ``index`` lines name)
``conflict``   it does not apply; the file and hunk(s) are named
``not tried``  an earlier patch of the pack (or of a dependency) conflicts

Nothing under ``patches/`` changes unless ``refresh`` is asked for; then a pack whose
patches all apply (clean, offset, fuzz or 3-way) is rewritten from the commits on the new base,
with the same deterministic format as ``harness regen``: in place, or with ``port`` as a
series of its own for that base (``patches/<target>/<pack>/<base>/``), leaving the series
of the pack's own base as it is. Each base uses its ported series where it has one.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import ConfigError, HarnessError
from harness.lane import series, series_write
from harness.lane.context import Context
from harness.lane.tracking import Pack
from harness.upstream import git, pins

CONTAINED, CLEAN, OFFSET, FUZZ, CONFLICT, NOT_TRIED = "contained", "clean", "offset", "fuzz", "conflict", "not tried"
THREE_WAY = "3-way"
_RANK = {CLEAN: 0, CONTAINED: 1, OFFSET: 2, FUZZ: 3, THREE_WAY: 4, NOT_TRIED: 5, CONFLICT: 6}
APPLIES = (CLEAN, OFFSET, FUZZ, THREE_WAY)  # a patch that lands one way or another: its series can be rewritten
MOVED = (OFFSET, FUZZ, THREE_WAY)  # one that lands, but not as written: rewriting it changes the series
_OFFSET = re.compile(r"Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)")
_CHECKING = re.compile(r"^Checking patch (.+)\.\.\.$")


@dataclass(frozen=True)
class PatchResult:
    pack: str
    patch: str
    status: str
    detail: str = ""


@dataclass
class PackReport:
    pack: Pack
    base: str
    results: list[PatchResult] = field(default_factory=list)
    blocked_by: str | None = None  # a dependency's patch that conflicts
    refreshed: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        if self.blocked_by:
            return CONFLICT
        return max((r.status for r in self.results), key=_RANK.__getitem__, default=CLEAN)

    @property
    def contained(self) -> bool:
        return bool(self.results) and not self.blocked_by and all(r.status == CONTAINED for r in self.results)


class Blobs:
    """The blobs a 3-way apply needs, lent to a scratch clone only when a patch gets that far.

    ``git am -3`` merges from the blobs a patch's ``index`` lines name: those of the base its series was written
    against. A base fetched one commit deep (or unpacked from a release) holds only its own, so the checkouts of
    the series' own bases are materialized (cached as any base) and lent as alternates. A base that cannot be
    materialized lends nothing: the 3-way apply then fails, and the patch stays a conflict."""

    def __init__(self, ctx: Context, packs: list[Pack], base_name: str):
        self.ctx, self.packs, self.base_name = ctx, packs, base_name
        self._paths: list[Path] | None = None

    def paths(self) -> list[Path]:
        if self._paths is None:
            self._paths = []
            for p in self.packs:
                manifest = self.ctx.manifest(p.target)
                own = self.base_name if self.base_name in series.ported_bases(self.ctx.root, p.target, p.id) \
                    else p.base or manifest.default_base
                if own == self.base_name:
                    continue
                try:
                    path = self.ctx.materialize(manifest, own).path
                except HarnessError:
                    continue
                if path not in self._paths:
                    self._paths.append(path)
        return self._paths

    def lend(self, repo: git.Repo) -> None:
        for path in self.paths():
            repo.borrow_objects(path)


def classify(repo: git.Repo, patch: series.Patch, base: pins.Checkout, blobs: Blobs | None = None) -> PatchResult:
    """Decide how ``patch`` lands on ``repo``'s HEAD; commit it there unless it is contained or conflicts. A 3-way
    apply is tried last, with ``blobs`` lent to ``repo`` (its own objects only, without them)."""
    path = str(patch.path)
    if series.git_apply(repo, "-R", "--check", path)[0] == 0:
        return PatchResult(patch.pack, patch.name, CONTAINED, "reverse-applies: the base already has this change")
    status, log = series.git_apply(repo, "--check", "-v", path)
    if status == 0:
        moved = _offsets(patch, log)
        series.apply_patch(repo, patch, base)
        return PatchResult(patch.pack, patch.name, OFFSET if moved else CLEAN, "; ".join(moved))
    status, log = series.git_apply(repo, "--check", "-v", "-C1", path)
    if status == 0:
        if not repo.call("am", *series.AM_OPTIONS, "-C1", path).ok:  # git am stops on a patch that changes nothing
            repo.run("am", "--abort")
            return PatchResult(patch.pack, patch.name, CONTAINED, "applying it changes nothing")
        moved = _offsets(patch, log)
        return PatchResult(patch.pack, patch.name, FUZZ,
                           "; ".join(["context trimmed to 1 line (-C1)", *moved]))
    why = series.explain(repo, patch)
    if blobs is not None:
        blobs.lend(repo)
    if series.three_way(repo, patch):
        return PatchResult(patch.pack, patch.name, THREE_WAY, "plain git am and -C1 fail; git am -3 merges it "
                           f"cleanly (plain: {why})")
    return PatchResult(patch.pack, patch.name, CONFLICT, why)


def _hunk(patch: series.Patch, path: str, index: int) -> str:
    h = next((h for h in patch.hunks if h.path == path and h.index == index), None)
    return f"{path} hunk #{index}" + (f" (@@ {h.header} @@)" if h else "")


def _offsets(patch: series.Patch, log: str) -> list[str]:
    moved, current = [], "?"
    for line in log.splitlines():
        m = _CHECKING.match(line.strip())
        if m:
            current = m.group(1)
            continue
        m = _OFFSET.search(line)
        if m:
            moved.append(f"{_hunk(patch, current, int(m.group(1)))} at line {m.group(2)} "
                         f"(offset {int(m.group(3)):+d})")
    return moved


def try_pack(ctx: Context, pack: Pack, checkout: pins.Checkout, scratch: Path, refresh: bool = False,
             port: bool = False) -> PackReport:
    """Apply the pack's dependencies' series and then its own on ``checkout``; classify each own patch."""
    report = PackReport(pack, checkout.base.name)
    repo = git.clone(checkout.path, scratch, branch=f"rebase-{pack.id}")
    own_start = repo.head()
    base = checkout.base.name
    blobs = Blobs(ctx, series.dependency_chain(ctx.tracking, pack, base), base)
    for p in series.dependency_chain(ctx.tracking, pack, base):  # a dependency absorbed at this base is skipped
        own_start = repo.head()
        for patch in series.load_series(ctx.root, p.target, p.id, base):
            if report.blocked_by or (p.id == pack.id and report.status == CONFLICT):
                if p.id == pack.id:
                    report.results.append(PatchResult(p.id, patch.name, NOT_TRIED, "an earlier patch conflicts"))
                continue
            result = classify(repo, patch, checkout, blobs)
            if p.id == pack.id:
                report.results.append(result)
            elif result.status == CONFLICT:
                report.blocked_by = f"dependency {p.id}: {patch.name} conflicts ({result.detail})"
    if refresh and report.results and all(r.status in APPLIES for r in report.results) \
            and any(r.status in MOVED for r in report.results):
        source = series.series_dir(ctx.root, pack.target, pack.id, base)
        # refresh rewrites the series where it was read from; port writes a series of its own for this base
        dest = series.write_dir(ctx.root, pack, base, ctx.manifest(pack.target).default_base) if port else source
        dest.parent.mkdir(parents=True, exist_ok=True)
        out = Path(tempfile.mkdtemp(prefix=f".refresh-{pack.id}-", dir=dest.parent))
        leftover: Path | None = out  # removed on the way out unless it became the series
        try:
            series_write.keep_names(source, series_write.format_series(repo, own_start, "HEAD", out))
            changed = series_write.compare(source, out)
            backup = series_write.replace_series(dest, out)
            leftover = None
            if backup is not None:
                shutil.rmtree(backup)
            report.refreshed = changed.modified + changed.added
        finally:
            if leftover is not None:
                shutil.rmtree(leftover, ignore_errors=True)
    return report


def rebase_target(ctx: Context, manifest: pins.Manifest, base_name: str, refresh: bool = False,
                  packs: list[str] | None = None, port: bool = False) -> list[PackReport]:
    chosen = [p for p in ctx.tracking.packs.values()
              if p.target == manifest.target and (not packs or p.id in packs)
              and series.load_series(ctx.root, p.target, p.id, base_name)]
    if not chosen:
        return []
    checkout = ctx.materialize(manifest, base_name)
    reports = []
    for pack in chosen:
        with tempfile.TemporaryDirectory(prefix=f"patchlane-rebase-{pack.id}-") as tmp:
            reports.append(try_pack(ctx, pack, checkout, Path(tmp) / "tree", refresh=refresh, port=port))
    return reports


def resolve_base(manifest: pins.Manifest, name: str) -> str:
    """A base name of the manifest, or the name of the one base whose version is ``name``."""
    if name in manifest.bases:
        return name
    hits = [b.name for b in manifest.bases.values() if b.version == name]
    if len(hits) == 1:
        return hits[0]
    raise ConfigError(f"{manifest.path}: no base '{name}' (bases: {', '.join(manifest.bases)})",
                      hint=f"a release not in the manifest: --to-version {name}")
