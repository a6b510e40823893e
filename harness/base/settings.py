"""The configuration that the noxfile and the CLI share, with one set of defaults.

Standard library only (and layer 0): the noxfile imports it before anything is installed.

- **Git mirrors** (where git bases, upstream main/dev, come from): ``$PATCHLANE_GIT_MIRRORS`` when it is
  set (os.pathsep-separated; set but empty means "none": GitHub), else ``../shared/mirrors`` beside the
  checkout when that directory exists, else none (GitHub). ``--git-mirrors DIR`` adds to these.
- **Cache**: ``$PATCHLANE_HOME``, else ``$XDG_CACHE_HOME/patchlane``, else ``~/.cache/patchlane``
  (``--cache`` overrides it); see ``harness.base.store.default_root``.
- **Bytecode cache** (where the Python processes the harness starts keep their compiled modules):
  ``$PATCHLANE_PYCACHE`` when set (``off``: Python's own behaviour, untouched), else ``<cache>/pycache``; an
  inherited ``$PYTHONPYCACHEPREFIX`` is kept as it is. Python then writes and reads ``.pyc`` files there, never
  beside a source (a base checkout or a build stays as it was made), even where ``$PYTHONDONTWRITEBYTECODE`` is
  set: with it and pip's ``--no-compile``, every import check, reproducer and suite run compiled torch and
  megatron-core from source again (bench/results/*-bytecode-cache.*). No remembered answer's key reads these
  variables: they say where bytecode goes, not what is imported (``fingerprint._VOLATILE``).
  The cache is split by trust domain: ``<cache>/pycache/<key>``, the key naming the user and the checkout, so a
  reproducer of one clone cannot plant bytecode another clone runs (the clones share builds, not bytecode). The
  checkout's ``repros/`` are compiled there first as *checked-hash* pycs, which Python validates against the
  source's hash on every import (and keeps hash-checked when it writes them again): an edit in the same second
  that keeps a file's size still runs the new code, which a timestamp pyc would not.
- **Python per target**: the manifest's ``python`` (``upstream/<target>.toml``), else the running interpreter;
  the lane environment nox builds for it is ``.nox/lane-<target>-py<X.Y>``.

``harness config`` is not a command: ``harness status -v`` and the noxfile's log say which mirrors were chosen.
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

from harness.base.store import default_root

MIRRORS_ENV = "PATCHLANE_GIT_MIRRORS"
PYCACHE_ENV = "PATCHLANE_PYCACHE"


def beside_mirrors(root: Path) -> Path:
    """``../shared/mirrors`` beside the checkout: where this project's hosts keep the offline bare mirrors."""
    return Path(root).resolve().parent / "shared" / "mirrors"


def git_mirrors(root: Path, environ: os._Environ[str] | dict[str, str] | None = None) -> tuple[Path, ...]:
    """The mirror directories the harness uses by default for the checkout at ``root`` (see the module's doc)."""
    env = os.environ if environ is None else environ
    if MIRRORS_ENV in env:
        return tuple(Path(os.path.abspath(os.path.expanduser(p))) for p in env[MIRRORS_ENV].split(os.pathsep) if p)
    beside = beside_mirrors(root)
    return (beside,) if beside.is_dir() else ()


def mirrors_origin(root: Path, environ: os._Environ[str] | dict[str, str] | None = None) -> str:
    """Where ``git_mirrors`` came from, in words (for logs and ``status -v``)."""
    env = os.environ if environ is None else environ
    if MIRRORS_ENV in env:
        return f"${MIRRORS_ENV}" if env[MIRRORS_ENV] else f"${MIRRORS_ENV} set empty: GitHub"
    return str(beside_mirrors(root)) + " (beside the checkout)" if git_mirrors(root, env) else "none: GitHub"


def export_mirrors(root: Path) -> None:
    """Put the default mirrors into ``$PATCHLANE_GIT_MIRRORS`` for child processes (the noxfile's lane runs)."""
    if MIRRORS_ENV not in os.environ:
        found = git_mirrors(root)
        if found:
            os.environ[MIRRORS_ENV] = os.pathsep.join(map(str, found))


def trust_domain(root: Path | None) -> str:
    """The key of a bytecode trust domain: this user and the checkout ``root`` (resolved), 16 hex digits."""
    import hashlib

    uid = os.getuid() if hasattr(os, "getuid") else 0
    where = os.path.realpath(root) if root is not None else ""
    return hashlib.sha256(f"{uid}\0{where}".encode()).hexdigest()[:16]


def checkout_root(start: Path | None = None) -> Path | None:
    """The checkout around ``start`` (default: the working directory), or None outside one."""
    here = Path(start or Path.cwd()).resolve()
    return next((d for d in [here, *here.parents] if (d / "tracking.toml").is_file() and (d / "upstream").is_dir()),
                None)


def bytecode_env(cache_root: Path, environ: os._Environ[str] | dict[str, str] | None = None,
                 root: Path | None = None) -> dict[str, str]:
    """The variables that give child Pythons the harness's bytecode cache of the trust domain of ``root`` (see
    the module's doc); {} when ``$PATCHLANE_PYCACHE`` is ``off`` or ``$PYTHONPYCACHEPREFIX`` is already set."""
    env = os.environ if environ is None else environ
    choice = env.get(PYCACHE_ENV, "")
    if choice == "off" or env.get("PYTHONPYCACHEPREFIX"):
        return {}
    prefix = (Path(os.path.expanduser(choice)) if choice else Path(cache_root) / "pycache") / trust_domain(root)
    # empty, not absent: Python reads PYTHONDONTWRITEBYTECODE as set only when it is a non-empty string
    return {"PYTHONPYCACHEPREFIX": os.path.abspath(prefix), "PYTHONDONTWRITEBYTECODE": ""}


def export_bytecode_cache(cache_root: Path, root: Path | None = None) -> dict[str, str]:
    """Apply ``bytecode_env`` to this process's environment (what its children inherit) and to its own later
    imports, and compile the checkout's ``repros/`` there as checked-hash pycs; return what was set."""
    root = root if root is not None else checkout_root()
    found = bytecode_env(cache_root, root=root)
    if found:
        os.environ.update(found)
        sys.pycache_prefix = found["PYTHONPYCACHEPREFIX"]
        sys.dont_write_bytecode = False
        if root is not None and (root / "repros").is_dir():
            _hash_checked(root / "repros")
    return found


def _hash_checked(tree: Path) -> None:
    """Compile ``tree``'s modules into the bytecode cache as checked-hash pycs; one whose pyc there is already
    checked-hash for its source's current hash is left as it is (compileall would compile every one again), and a
    file that does not compile is left to the import that reports it."""
    import importlib.util
    import py_compile

    for source in sorted(tree.rglob("*.py")):
        try:
            data = source.read_bytes()
            cfile = importlib.util.cache_from_source(str(source))
            with open(cfile, "rb") as fh:
                head = fh.read(16)
            if head[:4] == importlib.util.MAGIC_NUMBER and head[4:8] == b"\x03\x00\x00\x00" \
                    and head[8:16] == importlib.util.source_hash(data):
                continue  # checked-hash, and of this very source
        except OSError:
            pass
        try:
            py_compile.compile(str(source), doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        except (py_compile.PyCompileError, OSError):
            continue


def cache_home() -> Path:
    """The cache root the CLI uses without ``--cache`` (``$PATCHLANE_HOME``, XDG, ``~/.cache/patchlane``)."""
    return default_root()


def target_python(root: Path, target: str) -> str | None:
    """The Python version (``"3.12"``) a target's lanes need, from its manifest; None: any (the running one)."""
    path = Path(root) / "upstream" / f"{target}.toml"
    try:
        with open(path, "rb") as fh:
            value = tomllib.load(fh).get("python")
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return str(value) if value else None


def running_python() -> str:
    return "{}.{}".format(*sys.version_info[:2])


def lane_env_dir(root: Path, target: str, python: str | None = None) -> Path:
    """The lane environment nox builds for ``target`` (``<root>/.nox/lane-<target>-py<X.Y>``)."""
    version = python or target_python(root, target) or running_python()
    return Path(root) / ".nox" / f"lane-{target}-py{version}"
