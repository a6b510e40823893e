"""Try every pack's series on another base of its target and say, patch by patch, how it lands.

Each pack is tried in its own scratch clone of the new base, after its same-target
dependencies' series (dependencies that are already upstream are skipped). A patch is:

``contained``  it reverse-applies cleanly: the new base already has the change
``clean``      it applies exactly where it says
``offset``     it applies, but some hunks moved (``git apply`` reports the offset)
``fuzz``       it applies only when the outer context is trimmed to one line (``-C1``)
``conflict``   it does not apply; the file and hunk(s) are named
``not tried``  an earlier patch of the pack (or of a dependency) conflicts

Nothing under ``patches/`` changes unless ``refresh`` is asked for; then a pack whose
patches all apply (clean, offset or fuzz) is rewritten from the commits on the new base,
with the same deterministic format as ``harness regen``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from harness import edit, git, pins, series
from harness.errors import ConfigError, PinError
from harness.lanes import Context
from harness.tracking import Pack

CONTAINED, CLEAN, OFFSET, FUZZ, CONFLICT, NOT_TRIED = "contained", "clean", "offset", "fuzz", "conflict", "not tried"
_RANK = {CLEAN: 0, CONTAINED: 1, OFFSET: 2, FUZZ: 3, NOT_TRIED: 4, CONFLICT: 5}
_OFFSET = re.compile(r"Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)")
_CHECKING = re.compile(r"^Checking patch (.+)\.\.\.$")
_REJECTED = re.compile(r"^Rejected hunk #(\d+)\.$")
_APPLYING = re.compile(r"^Applying patch (.+) with \d+ reject")
PYPI_URL = "https://pypi.org/pypi"


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


def _apply(repo, *args: str) -> tuple[int, str]:
    status, out, err = repo.git.apply(*args, with_extended_output=True, with_exceptions=False)
    return status, f"{out}\n{err}"


def classify(repo, patch: series.Patch, base: pins.Checkout) -> PatchResult:
    """Decide how ``patch`` lands on ``repo``'s HEAD; commit it there unless it is contained or conflicts."""
    path = str(patch.path)
    if _apply(repo, "-R", "--check", path)[0] == 0:
        return PatchResult(patch.pack, patch.name, CONTAINED, "reverse-applies: the base already has this change")
    status, log = _apply(repo, "--check", "-v", path)
    if status == 0:
        moved = _offsets(patch, log)
        series.apply_patch(repo, patch, base)
        return PatchResult(patch.pack, patch.name, OFFSET if moved else CLEAN, "; ".join(moved))
    status, log = _apply(repo, "--check", "-v", "-C1", path)
    if status == 0:
        try:
            repo.git.am("--quiet", "--keep-cr", "--committer-date-is-author-date", "-C1", path)
        except git.GitCommandError:  # git am stops on a patch that changes nothing
            repo.git.am("--abort")
            return PatchResult(patch.pack, patch.name, CONTAINED, "applying it changes nothing")
        moved = _offsets(patch, log)
        return PatchResult(patch.pack, patch.name, FUZZ,
                           "; ".join(["context trimmed to 1 line (-C1)", *moved]))
    return PatchResult(patch.pack, patch.name, CONFLICT, _rejects(repo, patch))


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


def _rejects(repo, patch: series.Patch) -> str:
    """Which files and hunks fail: ``git apply --reject`` in the scratch tree, then put it back."""
    _, log = _apply(repo, "--reject", "-v", str(patch.path))
    repo.git.reset("-q", "--hard")
    repo.git.clean("-q", "-fdx")
    rejected: dict[str, list[str]] = {}
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
            h = next((h for h in patch.hunks if h.path == current and h.index == index), None)
            rejected.setdefault(current, []).append(f"#{index}" + (f" (@@ -{h.old_start} @@)" if h else ""))
        m = re.match(r"error: (.+?): (does not exist in index|No such file or directory)", line)
        if m:
            problems.append(f"{m.group(1)}: file is not in the base")
        m = re.match(r"error: (.+?): already exists in working directory", line)
        if m:
            problems.append(f"{m.group(1)}: the patch creates it but the base already has it")
    for path, hunks in rejected.items():
        total = sum(1 for h in patch.hunks if h.path == path)
        problems.append(f"{path}: hunk{'s' if len(hunks) > 1 else ''} {', '.join(hunks)} of {total} do not apply")
    return "; ".join(dict.fromkeys(problems)) or log.strip().splitlines()[-1][:200]


def try_pack(ctx: Context, pack: Pack, checkout: pins.Checkout, scratch: Path, refresh: bool = False) -> PackReport:
    """Apply the pack's dependencies' series and then its own on ``checkout``; classify each own patch."""
    report = PackReport(pack, checkout.base.name)
    repo = git.clone(checkout.path, scratch, branch=f"rebase-{pack.id}")
    own_start = repo.head.commit.hexsha
    for p in ctx.tracking.closure(pack.id):
        if p.target != pack.target:
            continue
        own_start = repo.head.commit.hexsha
        for patch in series.load_series(ctx.root, p.target, p.id):
            if report.blocked_by or (p.id == pack.id and report.status == CONFLICT):
                if p.id == pack.id:
                    report.results.append(PatchResult(p.id, patch.name, NOT_TRIED, "an earlier patch conflicts"))
                continue
            result = classify(repo, patch, checkout)
            if p.id == pack.id:
                report.results.append(result)
            elif result.status == CONFLICT:
                report.blocked_by = f"dependency {p.id}: {patch.name} conflicts ({result.detail})"
    if refresh and report.results and all(r.status in (CLEAN, OFFSET, FUZZ) for r in report.results) \
            and any(r.status in (OFFSET, FUZZ) for r in report.results):
        dest = series.series_dir(ctx.root, pack.target, pack.id)
        out = Path(tempfile.mkdtemp(prefix=f".refresh-{pack.id}-", dir=dest.parent))
        try:
            edit.keep_names(dest, edit.format_series(repo, own_start, "HEAD", out))
            changed = edit.compare(dest, out)
            backup = edit.replace_series(dest, out)
            out = None
            if backup is not None:
                shutil.rmtree(backup)
            report.refreshed = changed.modified + changed.added
        finally:
            if out is not None:
                shutil.rmtree(out, ignore_errors=True)
    return report


def rebase_target(ctx: Context, manifest: pins.Manifest, base_name: str, refresh: bool = False,
                  packs: list[str] | None = None) -> list[PackReport]:
    chosen = [p for p in ctx.tracking.packs.values()
              if p.target == manifest.target and (not packs or p.id in packs)
              and series.load_series(ctx.root, p.target, p.id)]
    if not chosen:
        return []
    checkout = pins.materialize(manifest, base_name, ctx.store, ctx.artifacts)
    reports = []
    for pack in chosen:
        with tempfile.TemporaryDirectory(prefix=f"patchlane-rebase-{pack.id}-") as tmp:
            reports.append(try_pack(ctx, pack, checkout, Path(tmp) / "tree", refresh=refresh))
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


# --------------------------------------------------------------------------- a release not in the manifest

def pypi_base(manifest: pins.Manifest, version: str) -> pins.Base:
    """The base for release ``version`` from the PyPI JSON API, same artefact kind as the default base."""
    index = os.environ.get("PATCHLANE_PYPI_URL", PYPI_URL).rstrip("/")
    url = f"{index}/{manifest.distribution}/{version}/json"
    try:
        files = _read_json(url)["urls"]
    except PinError:
        # Some mirrors serve only the project document; its "releases" table has the same file entries.
        project = f"{index}/{manifest.distribution}/json"
        try:
            releases = _read_json(project)["releases"]
        except PinError:
            raise PinError(f"cannot read {url} nor {project}") from None
        if version not in releases:
            raise PinError(f"{project}: {manifest.distribution} has no release {version}") from None
        files, url = releases[version], project
    ref = manifest.base(None).artifact
    want = "sdist" if ref.kind == "sdist" else "bdist_wheel"
    files = [u for u in files if u.get("packagetype") == want]
    if ref.kind == "wheel":  # same interpreter/ABI/platform tags as the current pin
        tags = ref.filename.rsplit("-", 3)[1:]
        files = [u for u in files if u["filename"].rsplit("-", 3)[1:] == tags]
    if not files:
        raise PinError(f"{url}: release {version} has no {want} like {ref.filename}")
    f = files[0]
    sha = f.get("digests", {}).get("sha256", "")
    if not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise PinError(f"{url}: {f['filename']} has no sha256 digest")
    file_url = urllib.parse.urljoin(url, f["url"])  # mirrors may answer with URLs relative to the document
    art = pins.Artifact(ref.kind, f["filename"], file_url, sha, f.get("size"))
    return pins.Base(name=version, version=version, commit="", role="candidate pin (from the PyPI JSON API)",
                     artifact=art)


def _read_json(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            return json.load(resp)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise PinError(f"cannot read {url}: {exc}") from None


def with_base(manifest: pins.Manifest, base: pins.Base) -> pins.Manifest:
    return dataclasses.replace(manifest, bases={**manifest.bases, base.name: base})


def manifest_snippet(base: pins.Base) -> str:
    a = base.artifact
    size = f"\nsize = {a.size}" if a.size is not None else ""
    return (f'[bases."{base.name}"]\nversion = "{base.version}"\ncommit = ""\n'
            f'commit_note = "not looked up: added by harness rebase --to-version"\ncommit_source = "none"\n'
            f'role = "{base.role}"\nruntime_requires = []\n\n'
            f'[bases."{base.name}".artifact]\nkind = "{a.kind}"\nfilename = "{a.filename}"\nurl = "{a.url}"\n'
            f'sha256 = "{a.sha256}"   # PyPI JSON digest; the download matched it{size}\n')


def write_manifest(manifest: pins.Manifest, base: pins.Base) -> None:
    """Append the base's tables to the manifest; the file is left as it was if the result does not load."""
    old = manifest.path.read_text(encoding="utf-8")
    manifest.path.write_text(old.rstrip("\n") + "\n\n" + manifest_snippet(base), encoding="utf-8")
    try:
        pins.load_manifest(manifest.path.parent.parent, manifest.target)
    except ConfigError:
        manifest.path.write_text(old, encoding="utf-8")
        raise
