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


def bytecode_env(cache_root: Path, environ: os._Environ[str] | dict[str, str] | None = None) -> dict[str, str]:
    """The variables that give child Pythons the harness's bytecode cache (see the module's doc); {} when
    ``$PATCHLANE_PYCACHE`` is ``off`` or ``$PYTHONPYCACHEPREFIX`` is already set."""
    env = os.environ if environ is None else environ
    choice = env.get(PYCACHE_ENV, "")
    if choice == "off" or env.get("PYTHONPYCACHEPREFIX"):
        return {}
    prefix = Path(os.path.expanduser(choice)) if choice else Path(cache_root) / "pycache"
    # empty, not absent: Python reads PYTHONDONTWRITEBYTECODE as set only when it is a non-empty string
    return {"PYTHONPYCACHEPREFIX": os.path.abspath(prefix), "PYTHONDONTWRITEBYTECODE": ""}


def export_bytecode_cache(cache_root: Path) -> dict[str, str]:
    """Apply ``bytecode_env`` to this process's environment (what its children inherit) and to its own later
    imports; return what was set."""
    found = bytecode_env(cache_root)
    if found:
        os.environ.update(found)
        sys.pycache_prefix = found["PYTHONPYCACHEPREFIX"]
        sys.dont_write_bytecode = False
    return found


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
