"""Kernel-compile caches kept per key in the store, so a second run of an unchanged lane compiles nothing.

GPU lanes spend most of their time in JIT compilation (Triton, TileLang, torch extensions). Each lane's
reproducer gets the libraries' cache directories pointed into one entry of the store,
``<store>/kernel-cache/<key>/``, instead of their defaults in ``$HOME`` or ``/tmp``:

=========================  ===================  =======================================================
variable                   entry subdirectory   read by (default when unset)
=========================  ===================  =======================================================
``TRITON_CACHE_DIR``       ``triton``           triton ``knobs.py`` ``cache_knobs.dir`` (~/.triton/cache)
``TILELANG_CACHE_DIR``     ``tilelang``         tilelang ``env.py`` (~/.tilelang/cache); its autotuner
                                                keeps results under it (``autotuner/``)
``TILELANG_TMP_DIR``       ``tmp/tilelang``     tilelang ``env.py``: scratch of its atomic writes, which
                                                must be on the cache's file system; never sealed
``TVM_FFI_CACHE_DIR``      ``tvm-ffi``          tvm_ffi ``cpp/extension.py``, ``_optional_torch_c_dlpack``
                                                (~/.cache/tvm-ffi)
``TORCH_EXTENSIONS_DIR``   ``torch-extensions`` torch ``utils/cpp_extension.py`` (~/.cache/torch_extensions)
``TORCHINDUCTOR_CACHE_DIR`` ``torchinductor``   torch ``_inductor/runtime/cache_dir_utils.py``
                                                (/tmp/torchinductor_<user>)
``CUDA_CACHE_PATH``        ``cuda-jit``         the NVIDIA driver's PTX JIT cache (~/.nv/ComputeCache)
=========================  ===================  =======================================================

**The key** (``kernel_key``) covers everything that can make a cached kernel stale.

**Verified like other cache entries.** The entry is made atomically (a scratch directory renamed in)
holding ``kernel-cache.json`` (the key and its facts) and a seal (``hashing.SEAL``: every file's
sha256). A lane that ran to its end seals the entry anew, atomically (``hashing.reseal``). A lane
killed at its time limit or by a signal seals only what Triton and TileLang compiled (``WHOLE_WRITES``:
both write every file whole, a scratch file renamed in, so a kernel found there is complete; a long
autotuning run stopped by a call's limit resumes warm); the rest keeps its earlier seal. A harness
killed outright seals nothing. Before a lane uses an entry it
checks the files the seal lists (by stat, hashing only what changed): one missing or changed means
the entry is removed and made again, said in one line. Files no seal lists, found while no other lane
uses the entry, are what a lane that did not finish left (a half-built torch extension, its lock): they
are removed. Lanes of one key may run at once: every step of ours (making, checking, sealing) holds a
lock of that entry only (``kernel-cache/.locks/<entry>.lock``), briefly, never the store's; each lane
registers itself under ``.users/`` while it runs, so no other lane removes what it is writing.

``PATCHLANE_KERNEL_CACHE`` moves the root (a directory), or, ``off``, gives every lane an empty
throwaway directory instead (a benchmark's cold arm).

The entries and a lane's use of one stay in this one module (just over 500 lines): a lane's steps (lock,
check the seal, remove what an unfinished lane left, make, seal) are the entry protocol itself, and share
its private helpers.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness.base import clock, guard, tarsafe, ui
from harness.base.hashing import SEAL, SEAL_SEEN, reseal, sealed, sealed_damage, verify_files
from harness.base.store import Store, default_mode
from harness.errors import ConfigError, WriteError
from harness.lane.kernel_key import VERSION, Facts

ROOT_ENV = "PATCHLANE_KERNEL_CACHE"
AREA = "kernel-cache"
META = "kernel-cache.json"
TOP = "patchlane-kernel-cache"  # the top directory of an exported archive

# variable -> the entry's subdirectory it points at (see the module docstring for where each is read)
DIRS: dict[str, str] = {
    "TRITON_CACHE_DIR": "triton",
    "TILELANG_CACHE_DIR": "tilelang",
    "TILELANG_TMP_DIR": "tmp/tilelang",
    "TVM_FFI_CACHE_DIR": "tvm-ffi",
    "TORCH_EXTENSIONS_DIR": "torch-extensions",
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
    "CUDA_CACHE_PATH": "cuda-jit",
}
# Subdirectories whose libraries write every file whole (to a scratch name, then ``os.replace``; Triton's
# ``tmp.pid_*`` directories and TileLang's ``tmp/`` are never sealed): a killed lane's files there are complete.
# Not torch extensions (the linker writes the .so in place), the driver's JIT index, TVM-FFI or inductor builds.
WHOLE_WRITES = ("triton", "tilelang")
_USERS, _LAST_USED, _SCRATCH, _DAMAGED = ".users", ".last-used", "tmp", ".damaged"
_NOT_FILES = {SEAL, SEAL_SEEN, _USERS, _LAST_USED, _SCRATCH, _DAMAGED}  # ours, or scratch: never sealed
_TMP = ".tmp-"


# ------------------------------------------------------------------------------------------------ entries


def root(store: Store) -> Path | None:
    """Where entries live: ``$PATCHLANE_KERNEL_CACHE``, else ``<store>/kernel-cache``; None when it says ``off``."""
    given = os.environ.get(ROOT_ENV, "").strip()
    if given.lower() == "off":
        return None
    path = Path(os.path.abspath(os.path.expanduser(given))) if given else store.root / AREA
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError.of(exc, "the kernel-cache directory", path, hint=f"set {ROOT_ENV} to another directory, "
                                                                             "or to 'off'") from None
    return path


def _lock(where: Path, name: str):
    from filelock import FileLock

    (where / ".locks").mkdir(exist_ok=True)
    return FileLock(str(where / ".locks" / f"{name}.lock"))


def entry_files(entry: Path) -> list[str]:
    """The files of an entry a seal covers: all but ours (seal, memo, users) and what the libraries are
    writing (tilelang's ``tmp/``, triton's ``tmp.pid_*`` directories, a torch extension's ``lock``)."""
    found = []
    for dirpath, dirnames, files in os.walk(entry):
        rel = os.path.relpath(dirpath, entry)
        top = rel == "."
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("tmp.pid_") and not (top and d in _NOT_FILES))
        in_ext = Path(rel).parts[:1] == ("torch-extensions",) and len(Path(rel).parts) == 2
        for name in files:
            if (top and (name in _NOT_FILES or name.startswith(_TMP))) or (in_ext and name == "lock"):
                continue
            found.append(name if top else os.path.join(rel, name))
    return sorted(found)


def _meta(entry: Path) -> dict | None:
    try:
        data = json.loads((entry / META).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("facts"), dict) else None


def damage(entry: Path, name: str | None = None) -> list[str]:
    """What is wrong with an entry's sealed part (empty: every file its seal lists is as sealed). ``name``: the
    entry's name when ``entry`` is its scratch directory (the key its metadata names must begin with it)."""
    meta = _meta(entry)
    if meta is None:
        return [f"{META}: missing or unreadable"]
    with contextlib.suppress(OSError):
        return [(entry / _DAMAGED).read_text().strip() or "found damaged while a lane used it"]
    if not str(meta.get("key", "")).startswith(name or entry.name) or meta.get("version") != VERSION:
        return [f"{META}: names key {str(meta.get('key'))[:12]} (version {meta.get('version')}), not this entry's"]
    digests = sealed(entry)
    if digests is not None and META not in digests:
        return [f"{META}: not in the seal"]
    return sealed_damage(entry, digests)


def unsealed(entry: Path) -> list[str]:
    """Files of the entry its seal does not list (a lane writing now, or one that did not finish)."""
    digests = sealed(entry) or {}
    return [name for name in entry_files(entry) if name not in digests]


def live_users(entry: Path) -> list[int]:
    """Process ids of the lanes using ``entry`` now; the records of processes that are gone are removed."""
    live = []
    try:
        records = list((entry / _USERS).iterdir())
    except OSError:
        return []
    for rec in records:
        pid = rec.name.split("-", 1)[0]
        if pid.isdigit() and guard.process_exists(int(pid)):
            live.append(int(pid))
        else:
            rec.unlink(missing_ok=True)
    return live


def _remove_unsealed(entry: Path) -> list[str]:
    """Remove what a lane that did not finish left: unsealed files, and the libraries' scratch (no one writes)."""
    gone = unsealed(entry)
    for name in gone:
        (entry / name).unlink(missing_ok=True)
    shutil.rmtree(entry / _SCRATCH, ignore_errors=True)
    for dirpath, dirnames, files in os.walk(entry):
        for d in [d for d in dirnames if d.startswith("tmp.pid_")]:
            shutil.rmtree(Path(dirpath) / d, ignore_errors=True)
        if Path(dirpath).parent.name == "torch-extensions" and "lock" in files:
            (Path(dirpath) / "lock").unlink(missing_ok=True)
    return gone


def _mark_damaged(entry: Path, problem: str) -> None:
    """Say in the entry that it is damaged: the lane using it now must not seal it, and the next one removes it."""
    with contextlib.suppress(OSError):
        (entry / _DAMAGED).write_text(problem + "\n")


def _discard(entry: Path) -> None:
    """Take ``entry`` out of use at once (a rename), then remove it."""
    if not entry.exists():
        return
    gone = Path(tempfile.mkdtemp(prefix=f"{_TMP}{entry.name}-discard-", dir=entry.parent))
    os.replace(entry, gone / entry.name)
    shutil.rmtree(gone, ignore_errors=True)


def _sweep(where: Path, name: str) -> None:
    """Scratch of this entry left by a killed process (we hold the entry's lock)."""
    for child in where.glob(f"{_TMP}{name}-*"):
        shutil.rmtree(child, ignore_errors=True)


def _create(where: Path, facts: Facts) -> Path:
    """A new, empty, sealed entry for ``facts``, renamed into place whole (we hold its lock)."""
    final = where / facts.key[:20]
    tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP}{final.name}-", dir=where))
    try:
        os.chmod(tmp, default_mode(directory=True))
        meta = {"version": VERSION, "key": facts.key, "facts": facts.to_dict(),
                "created": clock.iso()}
        (tmp / META).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        reseal(tmp, entry_files(tmp))
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def check_source(src: Path, key: str | None) -> tuple[str | None, str]:
    """``(its full key, "")`` for a sealed entry ``src`` whose every file is as sealed, else ``(None, why)``."""
    problems = damage(src)
    meta = _meta(src)
    if meta is None or problems:
        return None, f"not as sealed ({(problems or ['no metadata'])[0]})"
    extra = unsealed(src)
    if extra:
        return None, f"not as sealed ({extra[0]}: not in the seal)"
    full = str(meta["key"])
    if key is not None and full != key:
        return None, f"names key {full[:12]}, not {key[:12]}"
    if src.name != full[:20]:
        return None, f"directory {src.name} is not named by its key {full[:20]}"
    return full, ""


def _install(src: Path, where: Path, final: Path) -> None:
    """Copy the sealed entry ``src`` to ``final`` whole (a scratch directory renamed in; we hold its lock)."""
    _sweep(where, final.name)
    tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP}{final.name}-", dir=where))
    try:
        os.chmod(tmp, default_mode(directory=True))
        for name in [*sorted(sealed(src) or {}), SEAL]:
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / name, tmp / name)
        if damage(tmp, final.name):
            raise OSError(f"{src} changed while it was copied")
        _discard(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def adopt_dir(src: Path, where: Path, key: str | None = None) -> tuple[Path | None, str]:
    """Install the sealed entry ``src`` (unpacked from a bundle or an export) under ``where``.

    Returns ``(entry, what happened)``; ``entry`` is None when ``src`` fails its seal or names another key
    than ``key``, or when an intact entry of its key is already there (which is kept: it is this host's own).
    """
    full, why = check_source(src, key)
    if full is None:
        return None, why
    final = where / full[:20]
    with _lock(where, final.name):
        if final.exists() and not damage(final):
            return None, "already present"
        if final.exists() and live_users(final):
            return None, "the entry there is in use"
        _install(src, where, final)
    return final, "installed"


@contextlib.contextmanager
def unpacked(tar: Path, where: Path) -> Iterator[list[Path]]:
    """The entry directories of ``tar`` (a bundle's ``kernel-cache/<entry>.tar``, or an export), unpacked in a
    scratch directory under ``where`` that is removed afterwards. An unreadable archive is a ConfigError."""
    scratch = Path(tempfile.mkdtemp(prefix=f"{_TMP}unpack-", dir=where))
    try:
        try:
            with tarfile.open(tar) as tf:
                tarsafe.extractall(tf, scratch)
        except (tarfile.TarError, OSError) as exc:
            raise ConfigError(f"{tar}: cannot read: {exc}") from None
        top = scratch / TOP if (scratch / TOP).is_dir() else scratch
        yield sorted(d for d in top.iterdir() if d.is_dir())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def pack(entry: Path, tf: tarfile.TarFile, top: str = "") -> int:
    """Add ``entry``'s sealed files and its seal to ``tf`` under ``<top>/<entry name>/``; return their bytes."""
    size = 0
    for name in [*sorted(sealed(entry) or {}), SEAL]:
        tf.add(entry / name, arcname=f"{top}/{entry.name}/{name}".lstrip("/"), recursive=False)
        size += (entry / name).stat().st_size
    return size


@dataclass(frozen=True)
class Entry:
    """One entry as ``harness cache ls`` shows it."""

    path: Path
    key: str
    facts: Facts | None
    files: int  # sealed files the libraries wrote (its metadata not counted)
    bytes: int
    last_used: float
    created: str | None

    def to_dict(self) -> dict:
        return {"entry": self.path.name, "key": self.key, "files": self.files, "bytes": self.bytes,
                "last_used": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.last_used)),
                "created": self.created, "facts": self.facts.to_dict() if self.facts else None}


def entries(where: Path) -> list[Entry]:
    """Every entry under ``where``, least recently used first (no seal is checked: ``damage`` does)."""
    out = []
    for path in sorted(p for p in where.iterdir() if p.is_dir() and not p.name.startswith(".")):
        meta = _meta(path) or {}
        try:
            facts = Facts.from_dict(meta["facts"]) if meta else None
        except (KeyError, TypeError):
            facts = None
        digests = sealed(path) or {}
        size = 0
        for name in digests:
            with contextlib.suppress(OSError):
                size += (path / name).stat().st_size
        used = _last_used(path)
        out.append(Entry(path, str(meta.get("key", "?")), facts, len([n for n in digests if n != META]), size, used,
                         meta.get("created")))
    return sorted(out, key=lambda e: e.last_used)


def _last_used(entry: Path) -> float:
    for name in (_LAST_USED, META):
        with contextlib.suppress(OSError):
            return (entry / name).stat().st_mtime
    return 0.0


def remove(entry: Path) -> bool:
    """Remove an entry no lane uses now (False: one does, and it is kept)."""
    with _lock(entry.parent, entry.name):
        if live_users(entry):
            return False
        _discard(entry)
    return True


def verify(entry: Path) -> tuple[list[str], list[str], bool]:
    """Check one entry: ``(damage, unsealed files removed, removed)``. A damaged entry no lane uses is removed;
    unsealed files are removed when no lane uses the entry (they are what a lane that did not finish left)."""
    with _lock(entry.parent, entry.name):
        users = live_users(entry)
        problems = damage(entry)
        if problems:
            if users:
                _mark_damaged(entry, problems[0])
                return problems, [], False
            _discard(entry)
            return problems, [], True
        return [], [] if users else _remove_unsealed(entry), False


# ------------------------------------------------------------------------------------------------ a lane


@dataclass
class Lease:
    """A lane's use of one kernel cache: the directories its child gets, and whether they were warm."""

    facts: Facts
    mode: str  # "store": the entry of the key; "off": a throwaway directory (PATCHLANE_KERNEL_CACHE=off);
    #            "throwaway": the entry could not be used (damaged while another lane uses it, no key)
    path: Path
    warm: bool = False
    files: int = 0  # sealed files of the entry when the lane started
    _lock: object = field(default=None, repr=False)

    @property
    def env(self) -> dict[str, str]:
        return {var: str(self.path / sub) for var, sub in DIRS.items()}

    def describe(self) -> dict:
        return {"key": self.facts.key, "mode": self.mode, "warm": self.warm, "files": self.files}

    def seal(self, finished: bool = True) -> None:
        """Seal what the lane compiled.

        ``finished`` (its child ended by itself): every file as it is now, those the libraries changed in place
        during the lane included (the CUDA JIT cache's index): the entry was checked when the lane started.
        Not finished (killed at its limit, by a signal): the files of ``WHOLE_WRITES`` as they are now, and
        every other file the earlier seal listed and that is still as sealed; one the lane added or changed
        there (half a torch extension, an index rewritten in place) stays unsealed, and the next lane that
        finds the entry unused removes it. Never when another lane found the entry damaged meanwhile
        (``.damaged``), or it was removed or replaced under this lane."""
        if self.mode != "store":
            return
        try:
            with self._lock:  # type: ignore[attr-defined]
                meta = _meta(self.path)
                if meta is None or meta.get("key") != self.facts.key or (self.path / _DAMAGED).exists():
                    return
                names = entry_files(self.path)
                if finished:
                    reseal(self.path, names)
                    compiled = len([n for n in names if n != META]) - self.files
                    if compiled > 0:  # said only where something compiled (a CPU lane mostly compiles nothing)
                        ui.note(f"kernel cache {self.facts.key[:12]}: kept {compiled} file(s) this lane compiled "
                                f"({self.path})")
                    return
                before = sealed(self.path) or {}
                whole = [n for n in names if Path(n).parts[0] in WHOLE_WRITES]
                rest = {n: sha for n, sha in before.items() if n in names and n not in whole}
                changed = set(verify_files(self.path, rest, self.path / SEAL_SEEN))
                reseal(self.path, whole, keep={n: sha for n, sha in rest.items() if n not in changed})
                new = len([n for n in whole if n not in before])
                ui.note(f"kernel cache {self.facts.key[:12]}: the lane did not finish; sealed the {new} new "
                        f"file(s) of {' and '.join(WHOLE_WRITES)}, which are written whole"
                        + (f"; {len(changed)} other file(s) it changed stay unsealed" if changed else ""))
        except OSError as exc:
            ui.warn(f"kernel cache {self.path}: cannot seal what this lane compiled ({exc.strerror or exc}); "
                    "the next lane compiles it again")


@contextlib.contextmanager
def lane(store: Store, facts: Facts, scratch_prefix: str, seed: Path | None = None) -> Iterator[Lease]:
    """The kernel cache of one lane, registered as in use while the block runs.

    ``scratch_prefix`` names a throwaway directory (``off``), made in the temporary directory and removed
    after the block; ``seed`` is a bundle's tar of an entry of this key, installed when the store has none.
    The caller calls ``Lease.seal`` once the lane's child ended by itself.
    """
    where = root(store)
    if where is None or facts.interpreter is None:
        if facts.interpreter is None and where is not None:
            ui.warn("kernel cache: the lane's interpreter did not say its compiler versions; this lane gets an "
                    "empty throwaway cache")
        with _throwaway(facts, scratch_prefix, "off" if where is None else "throwaway") as lease:
            yield lease
        return
    entry = where / facts.key[:20]
    lock = _lock(where, entry.name)
    me = entry / _USERS / f"{os.getpid()}-{os.urandom(4).hex()}"
    try:
        with lock:
            usable = _open(where, entry, facts, seed)
            if usable:
                me.parent.mkdir(exist_ok=True)
                me.touch()
                (entry / _LAST_USED).touch()
                for sub in DIRS.values():
                    (entry / sub).mkdir(parents=True, exist_ok=True)
                files = len([n for n in (sealed(entry) or {}) if n != META])
    except OSError as exc:
        raise WriteError.of(exc, "the kernel cache", entry, hint=f"{ROOT_ENV}=off runs lanes without one") from None
    if not usable:
        with _throwaway(facts, scratch_prefix, "throwaway") as lease:
            yield lease
        return
    # "cold" on every CPU lane, where nothing compiles, read as a failure: an empty entry is a detail (-v); what a
    # lane compiled into it is said when it is sealed
    state = f"warm, {files} file(s)" if files else "empty, nothing compiled yet"
    (ui.note if files else ui.detail)(f"kernel cache {facts.key[:12]}: {state} ({entry})")
    try:
        yield Lease(facts, "store", entry, warm=files > 0, files=files, _lock=lock)
    finally:
        with lock:
            me.unlink(missing_ok=True)


@contextlib.contextmanager
def _throwaway(facts: Facts, prefix: str, mode: str) -> Iterator[Lease]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        for sub in DIRS.values():
            (path / sub).mkdir(parents=True, exist_ok=True)
        yield Lease(facts, mode, path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _open(where: Path, entry: Path, facts: Facts, seed: Path | None) -> bool:
    """Make ``entry`` ready for a lane (we hold its lock): checked, cleaned, seeded or made. False: in use by
    another lane and damaged, so not to be used (nor removed under that lane)."""
    key = facts.key[:12]
    _sweep(where, entry.name)
    if entry.exists():
        users = live_users(entry)
        problems = damage(entry)
        if problems and users:
            ui.warn(f"kernel cache {key}: the entry {entry} is not as it was sealed ({problems[0]}) and another lane "
                    "uses it; this lane gets an empty throwaway cache")
            _mark_damaged(entry, problems[0])
            return False
        if problems:
            more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
            ui.warn(f"kernel cache {key}: the entry {entry} is not as it was sealed ({problems[0]}{more}); "
                    "discarding it, this lane compiles again")
            _discard(entry)
        elif not users:
            left = _remove_unsealed(entry)
            if left:
                ui.note(f"kernel cache {key}: removed {len(left)} unsealed file(s) a lane that did not finish left "
                        f"({left[0]})")
            return True
        else:
            return True
    if seed is not None and _seed(seed, where, entry, facts.key):
        ui.note(f"kernel cache {key}: installed from the bundle")
        return True
    _create(where, facts)
    return True


def _seed(tar: Path, where: Path, entry: Path, key: str) -> bool:
    """Install a bundle's entry of ``key`` as ``entry`` (we hold its lock); False, said, when it is not usable."""
    try:
        with unpacked(tar, where) as dirs:
            full, why = check_source(dirs[0], key) if len(dirs) == 1 else (None, f"{len(dirs)} entries, not one")
            if full is not None:
                _install(dirs[0], where, entry)
                return True
    except ConfigError as exc:
        why = str(exc)
    ui.warn(f"kernel cache {key[:12]}: the bundle's entry is not used: {why}")
    return False
