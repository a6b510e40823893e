"""Materializing a base: a pristine git checkout in the store, from a release artefact (unpacked safely and
committed once) or a git commit (fetched from a mirror, else the repository URL)."""

from __future__ import annotations

import os
import posixpath
import shutil
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from harness.base import tarsafe, ui
from harness.base.store import Store
from harness.errors import ConfigError, PinError, WriteError, cannot_write, write_reason
from harness.upstream import git
from harness.upstream.pins.downloads import fetch
from harness.upstream.pins.model import Base, GitPin, Manifest

MIRRORS_ENV = "PATCHLANE_GIT_MIRRORS"


@dataclass(frozen=True)
class Sources:
    """Where bases may come from besides their URLs: artefact directories and git mirror directories."""

    artifacts: tuple[Path, ...] = ()
    git_mirrors: tuple[Path, ...] = ()


def mirrors_from_env() -> tuple[Path, ...]:
    """``$PATCHLANE_GIT_MIRRORS``: directories (os.pathsep-separated) holding ``owner+name.git`` mirrors,
    made absolute against the working directory (git fetches from them with the new checkout as its own)."""
    return tuple(Path(os.path.abspath(os.path.expanduser(p)))
                 for p in os.environ.get(MIRRORS_ENV, "").split(os.pathsep) if p)


@dataclass(frozen=True)
class Checkout:
    """A pristine, git-initialised base: ``path`` holds the tree, ``commit`` its sha."""

    target: str
    base: Base
    path: Path
    commit: str


def base_dir(store: Store, target: str, base: Base) -> Path:
    return store.area("bases") / target / f"{base.name}-{base.pin[:12]}"


def materialize(manifest: Manifest, base_name: str | None, store: Store,
                sources: Sources | list[Path] | tuple[Path, ...] = ()) -> Checkout:
    """The base's checkout in the store, created on first use and reused afterwards.

    ``sources`` is a ``Sources``, or (older callers) just the artefact directories.
    """
    if not isinstance(sources, Sources):
        sources = Sources(artifacts=tuple(sources))
    base = manifest.base(base_name)
    final = base_dir(store, manifest.target, base)
    commit = _intact_checkout(final)  # lock-free: a cached base never waits behind another process's download
    if commit is None:
        commit = _make_checkout(manifest, base, final, store, sources)
    if base.git is not None and commit != base.git.commit:  # a cache entry someone changed by hand
        raise PinError(f"{final}: HEAD is {commit}, not the pinned {base.git.commit}",
                       hint="remove that directory; the next run fetches the commit again")
    return Checkout(manifest.target, base, final, commit)


def _intact_checkout(final: Path) -> str | None:
    """The commit of the cached checkout at ``final`` when it exists and is exactly that commit, asked without
    the store lock; None on any doubt (the caller then takes the lock and looks again)."""
    if not (final / ".git").is_dir():
        return None
    try:
        repo = git.repo(final)
        return None if repo.stray_paths() else repo.head()
    except (git.GitError, OSError):
        return None


def _make_checkout(manifest: Manifest, base: Base, final: Path, store: Store, sources: Sources) -> str:
    """Under the store lock: look again, and make (or remake) the checkout when it is missing or not its commit."""
    with store.locked():
        if (final / ".git").is_dir():
            stray = git.repo(final).stray_paths()  # a pristine checkout is exactly its commit
            if stray:
                ui.warn(f"base {manifest.target} {base.name}: the cache entry {final} is not its pinned commit "
                        f"({stray[0]}{f' and {len(stray) - 1} more' if len(stray) > 1 else ''} changed or added); "
                        "making it again")
                shutil.rmtree(final)
        if not (final / ".git").is_dir():
            if base.git is not None:
                first = git_sources(base.git, sources.git_mirrors)[0][0]
                origin = f"from mirror {first}" if first != base.git.url else f"from {base.git.url}"
                with ui.status(f"fetching {base.git.commit[:12]} ({base.git.ref}) {origin}") as act, \
                        store.new_entry(final) as tmp:
                    used = fetch_commit(base.git, tmp, sources.git_mirrors)
                    act.result = ui.human_bytes(ui.dir_size(tmp)) + ("" if used == first else f" (from {used})")
            else:
                art = base.release
                archive = fetch(art, store, list(sources.artifacts))
                with ui.status(f"unpacking {art.filename}") as act, store.new_entry(final) as tmp:
                    _extract(archive, art.kind, tmp)
                    act.result = ui.human_bytes(ui.dir_size(tmp))
                    message = f"{manifest.target} {base.version} pristine ({art.filename}, sha256 {art.sha256})"
                    try:
                        git.init_snapshot(tmp, message)
                    except git.GitError as exc:
                        if not cannot_write(exc.stderr):
                            raise
                        raise WriteError(f"cannot write {final} (recording {art.filename} as a git snapshot): "
                                         f"{write_reason(exc.stderr)}; nothing was kept",
                                         hint=f"free space in {final.parent}") from None
        return git.repo(final).head()


# --------------------------------------------------------------------------- git bases

def mirror_name(url: str) -> str:
    """``https://github.com/owner/name(.git)`` -> ``owner+name.git``, the mirrors' directory name."""
    parts = [p for p in url.rstrip("/").removesuffix(".git").split("/") if p]
    if len(parts) < 2:
        raise ConfigError(f"repository URL {url!r} has no owner/name")
    return f"{parts[-2]}+{parts[-1]}.git"


def git_sources(pin: GitPin, mirrors: tuple[Path, ...] = ()) -> tuple[list[str], list[str]]:
    """Where ``pin`` is fetched from, in order (each mirror directory, given or from the environment, that
    has the repository, then its URL), and the mirror paths looked at that do not have it. A directory
    named twice is looked at once."""
    name = mirror_name(pin.url)
    candidates = dict.fromkeys(str(Path(d) / name) for d in (*mirrors, *mirrors_from_env()))
    found = [c for c in candidates if Path(c).is_dir()]
    return found + [pin.url], [c for c in candidates if c not in found]


def fetch_commit(pin: GitPin, dest: Path, mirrors: tuple[Path, ...] = ()) -> str:
    """Make ``dest`` a git repository whose HEAD is exactly ``pin.commit``, fetched one commit deep; return the
    source it came from (a mirror's path or the URL).

    Each source is tried in turn; every failure is named in the error (exit 4). ``dest`` is a
    scratch directory the caller discards on failure, so nothing half-fetched stays in the cache.
    """
    env = {**git.clean_env(), "GIT_TERMINAL_PROMPT": "0",
           # give up on a stalled network fetch instead of hanging a CI job
           "GIT_HTTP_LOW_SPEED_LIMIT": "1000", "GIT_HTTP_LOW_SPEED_TIME": "60"}
    failures = []
    sources, missing = git_sources(pin, mirrors)
    dest.mkdir(parents=True, exist_ok=True)
    for source in sources:
        shutil.rmtree(dest / ".git", ignore_errors=True)
        steps = [("init", "-q", "--initial-branch=base"),
                 ("fetch", "-q", "--no-tags", "--depth", "1", source, pin.commit),
                 ("-c", "advice.detachedHead=false", "checkout", "-q", "--detach", "FETCH_HEAD")]
        error = None
        for args in steps:
            try:
                done = git.call(dest, *args, env=env, timeout=1800)
            except git.GitNotFound:
                raise
            except git.GitError as exc:  # timed out
                error = exc.stderr
                break
            if not done.ok:
                error = _last_line(done.stderr) or f"exit {done.status}"
                break
        if error is None:
            head = git.call(dest, "rev-parse", "HEAD", env=env).stdout.strip()
            if head != pin.commit:
                error = f"HEAD is {head or '?'} after the fetch, not {pin.commit}"
            else:
                git.run(dest, "tag", "pristine", env=env)
                return source
        failures.append(f"{source}: {error}")
    tried = "; ".join(failures)
    if missing:
        tried += "; no mirror at " + ", ".join(missing)
    raise PinError(f"cannot fetch commit {pin.commit} ({pin.ref}): {tried}",
                   hint=f"offline? point --git-mirrors (or ${MIRRORS_ENV}) at a directory holding "
                        f"{mirror_name(pin.url)}")


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


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
            [top] = tops
            for m in members:
                _check_member(m.name, archive)
                parts = PurePosixPath(m.name).parts
                if len(parts) <= 1:
                    continue
                rel = PurePosixPath(*parts[1:])
                if m.issym():
                    _check_symlink(rel, m.linkname, archive)
                elif m.islnk():
                    m.linkname = _strip_top(m.linkname, top, m.name, archive)
                m.name = str(rel)
                tarsafe.extract(tf, m, dest)
            tarsafe.no_links_leaving(dest, [m.name for m in members if m.issym()])  # links leaving via each other
    except OSError as exc:
        if cannot_write(exc):
            raise WriteError(f"cannot write {dest} (unpacking {archive.name}): {exc.strerror or exc}; nothing was "
                             "kept", hint=f"free space in (or fix the permissions of) {dest}") from None
        raise PinError(f"cannot unpack {archive.name}: {exc}") from None
    except (tarfile.TarError, zipfile.BadZipFile) as exc:
        raise PinError(f"cannot unpack {archive.name}: {exc}") from None


def extract_artifact(archive: Path, kind: str, dest: Path) -> None:
    """Unpack a release artefact (``sdist`` or ``wheel``) into ``dest`` as a base's tree is made from it."""
    _extract(archive, kind, dest)


def _check_member(name: str, archive: Path) -> None:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts:
        raise PinError(f"{archive.name}: refusing unsafe member path {name!r}")


def _check_symlink(rel: PurePosixPath, target: str, archive: Path) -> None:
    """A symlink at ``rel`` (inside the unpacked tree) must point inside the tree: resolved, not by spelling."""
    where = posixpath.normpath(posixpath.join(str(rel.parent), target))
    if posixpath.isabs(target) or where == ".." or where.startswith("../"):
        raise PinError(f"{archive.name}: refusing symlink {str(rel)!r} -> {target!r}: it points outside the tree")


def _strip_top(target: str, top: str, name: str, archive: Path) -> str:
    """A hard link names its target from the archive's root: the same path without the top directory."""
    parts = PurePosixPath(target).parts
    if PurePosixPath(target).is_absolute() or ".." in parts or len(parts) < 2 or parts[0] != top:
        raise PinError(f"{archive.name}: refusing hard link {name!r} -> {target!r}: its target is not in the tree")
    return str(PurePosixPath(*parts[1:]))
