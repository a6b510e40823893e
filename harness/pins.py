"""Pinned upstreams: the manifests in ``upstream/`` and their materialization.

A manifest names the upstream repository, the registry artefact of each base
(file name, URL, size, sha256) and the upstream commit it corresponds to.
Materializing a base downloads (or finds) the artefact, checks its sha256
before anything is extracted, unpacks it and records it as the single commit
of a fresh git repository (tag ``pristine``): the base every series applies to.
"""

from __future__ import annotations

import re
import shutil
import tarfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from harness import git, ui
from harness.errors import ConfigError, PinError
from harness.hashing import sha256_file
from harness.store import Store
from harness.tomlutil import choice, load_document, str_list
from harness.tomlutil import field as get

BUILD_KINDS = ("wheel", "overlay")
ARTIFACT_KINDS = ("sdist", "wheel")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class Artifact:
    kind: str
    filename: str
    url: str
    sha256: str
    size: int | None = None


@dataclass(frozen=True)
class Base:
    name: str
    version: str
    commit: str
    role: str
    artifact: Artifact
    runtime_requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class Manifest:
    target: str
    path: Path
    repo: str
    distribution: str
    import_names: tuple[str, ...]
    build: str
    build_note: str
    default_base: str
    bases: dict[str, Base] = field(default_factory=dict)
    # overlay builds only: module name -> why it is replaced by a stub (see harness/stubs.py)
    stubs: dict[str, str] = field(default_factory=dict)

    def base(self, name: str | None) -> Base:
        name = name or self.default_base
        try:
            return self.bases[name]
        except KeyError:
            known = ", ".join(self.bases)
            raise ConfigError(f"{self.path}: target '{self.target}' has no base '{name}' (bases: {known})") from None


def manifest_path(root: Path, target: str) -> Path:
    return root / "upstream" / f"{target}.toml"


def list_targets(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / "upstream").glob("*.toml"))


def load_manifest(root: Path, target: str) -> Manifest:
    path = manifest_path(root, target)
    if not path.exists():
        known = ", ".join(list_targets(root)) or "none"
        raise ConfigError(f"no manifest for target '{target}' ({path} missing; targets: {known})")
    doc = load_document(path)
    where = str(path)
    if get(doc, "target", str, where) != target:
        raise ConfigError(f"{where}: key 'target' must equal the file name '{target}'")
    bases: dict[str, Base] = {}
    raw_bases = get(doc, "bases", dict, where)
    for name, table in doc["bases"].items():
        bases[name] = _load_base(name, table, f"{where} [bases.\"{name}\"]")
    if not raw_bases:
        raise ConfigError(f"{where}: [bases] is empty")
    manifest = Manifest(
        target=target,
        path=path,
        repo=get(doc, "repo", str, where),
        distribution=get(doc, "distribution", str, where),
        import_names=tuple(str_list(doc, "import_names", where)),
        build=choice(doc, "build", BUILD_KINDS, where),
        build_note=get(doc, "build_note", str, where, default=""),
        default_base=get(doc, "default_base", str, where),
        bases=bases,
        stubs=_load_stubs(doc, where),
    )
    if manifest.stubs and manifest.build != "overlay":
        raise ConfigError(f"{where}: [stubs] only applies to build = \"overlay\"")
    if manifest.default_base not in bases:
        raise ConfigError(f"{where}: default_base '{manifest.default_base}' is not one of the [bases]")
    return manifest


def _load_stubs(doc, where: str) -> dict[str, str]:
    table = get(doc, "stubs", dict, where, default={})
    stubs = {}
    for name, why in table.items():
        if not isinstance(why, str) or not why.strip():
            raise ConfigError(f"{where} [stubs]: '{name}' needs a reason (a non-empty string)")
        if not all(part.isidentifier() for part in name.split(".")):
            raise ConfigError(f"{where} [stubs]: '{name}' is not a module name")
        stubs[str(name)] = str(why)
    return stubs


def _load_base(name: str, table, where: str) -> Base:
    art_where = where[:-1] + ".artifact]"
    if "artifact" not in table:
        raise ConfigError(f"{where}: missing table 'artifact'")
    art = table["artifact"]
    sha = get(art, "sha256", str, art_where).lower()
    if not _HEX64.match(sha):
        raise ConfigError(f"{art_where}: sha256 must be 64 hex digits, got {sha!r}")
    commit = get(table, "commit", str, where)
    if commit and not _HEX40.match(commit):
        raise ConfigError(f"{where}: commit must be a full 40-hex sha (or \"\" when unknown), got {commit!r}")
    filename = get(art, "filename", str, art_where)
    if "/" in filename or filename.startswith("."):
        raise ConfigError(f"{art_where}: filename must be a plain file name, got {filename!r}")
    return Base(
        name=name,
        version=get(table, "version", str, where),
        commit=commit,
        role=get(table, "role", str, where, default=""),
        runtime_requires=tuple(str_list(table, "runtime_requires", where)),
        artifact=Artifact(
            kind=choice(art, "kind", ARTIFACT_KINDS, art_where),
            filename=filename,
            url=get(art, "url", str, art_where),
            sha256=sha,
            size=get(art, "size", int, art_where, default=None),
        ),
    )


# --------------------------------------------------------------------------- fetching

def fetch(artifact: Artifact, store: Store, search_dirs: list[Path] = ()) -> Path:
    """The verified artefact file in the store, downloading it if needed.

    ``search_dirs`` are looked at first (an offline mirror, a test fixture).
    A file whose sha256 differs from the pin is a hard error: nothing is kept.
    """
    dest_dir = store.area("downloads") / artifact.sha256[:16]
    dest = dest_dir / artifact.filename
    if dest.exists():
        if sha256_file(dest) == artifact.sha256:
            return dest
        dest.unlink()  # damaged cache entry: fetch again
    dest_dir.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    source = None
    for d in search_dirs:
        candidate = Path(d) / artifact.filename
        if candidate.is_file():
            shutil.copyfile(candidate, partial)
            source = str(candidate)
            break
    if source is None:
        source = artifact.url
        _download(artifact.url, partial, artifact.size)
    got = sha256_file(partial)
    if got != artifact.sha256:
        partial.unlink()
        raise PinError(
            f"sha256 mismatch for {artifact.filename} from {source}: pinned {artifact.sha256}, got {got}; "
            "nothing was extracted"
        )
    partial.replace(dest)
    return dest


def _download(url: str, dest: Path, size: int | None) -> None:
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, open(dest, "wb") as fh:
            total = size or int(resp.headers.get("Content-Length") or 0) or None
            with ui.Transfer(PurePosixPath(url).name, total) as bar:
                for block in iter(lambda: resp.read(1 << 16), b""):
                    fh.write(block)
                    bar.advance(len(block))
    except (urllib.error.URLError, OSError, TimeoutError, ValueError) as exc:  # ValueError: malformed URL
        dest.unlink(missing_ok=True)
        raise PinError(f"cannot download {url}: {exc}",
                       hint="offline? put the file in a directory and pass --artifacts DIR") from None


# --------------------------------------------------------------------------- materializing

@dataclass(frozen=True)
class Checkout:
    """A pristine, git-initialised base: ``path`` holds the tree, ``commit`` its sha."""

    target: str
    base: Base
    path: Path
    commit: str


def materialize(manifest: Manifest, base_name: str | None, store: Store,
                search_dirs: list[Path] = ()) -> Checkout:
    """The base's checkout in the store, created on first use and reused afterwards."""
    base = manifest.base(base_name)
    art = base.artifact
    with store.locked():
        final = store.area("bases") / manifest.target / f"{base.name}-{art.sha256[:12]}"
        if not (final / ".git").is_dir():
            archive = fetch(art, store, search_dirs)
            with ui.status(f"unpacking {art.filename}") as act, store.new_entry(final) as tmp:
                _extract(archive, art.kind, tmp)
                act.result = ui.human_bytes(ui.dir_size(tmp))
                message = f"{manifest.target} {base.version} pristine ({art.filename}, sha256 {art.sha256})"
                git.init_snapshot(tmp, message)
        commit = git.repo(final).head.commit.hexsha
    return Checkout(manifest.target, base, final, commit)


def _extract(archive: Path, kind: str, dest: Path) -> None:
    """Unpack an sdist (dropping its one top-level directory) or a wheel into ``dest``."""
    try:
        if kind == "wheel":
            with zipfile.ZipFile(archive) as zf:
                for name in zf.namelist():
                    _check_member(name, archive)
                zf.extractall(dest)
            return
        with tarfile.open(archive) as tf:
            members = tf.getmembers()
            tops = {PurePosixPath(m.name).parts[0] for m in members if m.name.strip("./")}
            if len(tops) != 1:
                raise PinError(f"{archive.name}: expected one top-level directory in the sdist, "
                               f"found {sorted(tops)[:5]}")
            for m in members:
                _check_member(m.name, archive)
                if m.issym() or m.islnk():
                    _check_member(str(PurePosixPath(m.name).parent / m.linkname), archive)
                parts = PurePosixPath(m.name).parts
                if len(parts) <= 1:
                    continue
                m.name = str(PurePosixPath(*parts[1:]))
                tf.extract(m, dest, filter="data")
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise PinError(f"cannot unpack {archive.name}: {exc}") from None


def _check_member(name: str, archive: Path) -> None:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts:
        raise PinError(f"{archive.name}: refusing unsafe member path {name!r}")
