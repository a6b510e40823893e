"""Which files of this repository a lane's processes imported, read from each process's own module table at exit.

A receipt is current while what its run loaded is unchanged (``harness.filing.readiness.lane_problem``), so it has
to know what that was: not every helper that *could* have been imported, but the modules that were. The harness
puts a ``sitecustomize`` of its own first on the reproducer's ``PYTHONPATH``; every Python process of the lane that
inherits it (the reproducer, its ranks under torch.distributed.run, the point scripts of a domain sweep, a pytest
run of the upstream-test kit) registers an exit hook that writes the files of ``sys.modules`` lying under the
repository into a JSON file of its own in a scratch directory. The hook then runs the ``sitecustomize`` it
shadows, if the interpreter has one, so the lane's environment behaves as before.

``collect`` reads those records back: the union of the files, each with its sha256 now, or None where the
record cannot be trusted to be whole (no process that ran the lane's own runner wrote one: it was killed,
it ran under ``-I``/``-S``, or it ended through ``os._exit``). Standard library and harness.base only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.base.hashing import sha256_file

DIR_ENV = "HARNESS_LOADED_DIR"  # where each process writes its record (one file per pid)
ROOT_ENV = "HARNESS_LOADED_ROOT"  # the repository whose files are recorded

# The hook itself: standard library only, no name left in the process's namespace but one private function.
SITECUSTOMIZE = r'''"""The patch-lane harness wrote this for one lane run: it records the repository files imported."""
import atexit as _atexit
import os as _os
import sys as _sys


def _patchlane_record_loaded():
    out, root = _os.environ.get("HARNESS_LOADED_DIR"), _os.environ.get("HARNESS_LOADED_ROOT")
    if not out or not root:
        return
    root = _os.path.realpath(root)
    files = set()
    for module in list(_sys.modules.values()):
        name = getattr(module, "__file__", None)
        if isinstance(name, str) and _os.path.isabs(name):  # torch names some modules "_ops.py": no file of ours
            path = _os.path.realpath(name)
            if path.startswith(root + _os.sep):
                files.add(_os.path.relpath(path, root))
    # a script's __main__ has lost __file__ by now (CPython removes it once the script returns): its loader keeps it
    main = getattr(getattr(_sys.modules.get("__main__"), "__loader__", None), "path", None)
    if isinstance(main, str):
        main = _os.path.realpath(main)
        if main.startswith(root + _os.sep):
            files.add(_os.path.relpath(main, root))
    record = {"pid": _os.getpid(), "main": main if isinstance(main, str) else None, "files": sorted(files)}
    try:
        tmp = _os.path.join(out, ".%d.tmp" % _os.getpid())
        with open(tmp, "w") as fh:
            fh.write(__import__("json").dumps(record))
        _os.replace(tmp, _os.path.join(out, "%d.json" % _os.getpid()))
    except OSError:
        pass


_atexit.register(_patchlane_record_loaded)


def _patchlane_chain():
    """Run the sitecustomize this one shadows (a distribution's own), as Python would have without us."""
    import importlib.machinery
    import importlib.util
    here = _os.path.dirname(_os.path.abspath(__file__))
    rest = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_patchlane_chain()
'''


# where installed code lives when an environment sits inside the checkout (nox's lane environments in .nox/, a
# .venv): what was installed there is not the repository's, and a fresh clone has none of it
_INSTALLED_PARTS = frozenset({"site-packages", "dist-packages", "__pycache__"})
_ENV_DIRS = frozenset({".nox", ".venv", "venv", ".ci-venv", ".tox", ".ci-cache"})


def ours(rel: str) -> bool:
    """Whether a repository-relative path is the repository's own file, not an environment's installed one."""
    parts = Path(rel).parts
    return bool(parts) and parts[0] not in _ENV_DIRS and not _INSTALLED_PARTS.intersection(parts)


def install(scratch: Path, root: Path) -> tuple[dict[str, str], Path]:
    """Write the hook into ``scratch`` (the lane's temporary directory). Returns the variables to add to the lane's
    environment and the hook's directory, which the caller puts first on ``PYTHONPATH``."""
    site, records = scratch / "patchlane-site", scratch / "patchlane-loaded"
    site.mkdir(parents=True, exist_ok=True)
    records.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return {DIR_ENV: str(records), ROOT_ENV: str(Path(root).resolve())}, site


def collect(records: Path, root: Path, runner: Path) -> dict[str, str] | None:
    """Repository-relative path -> sha256 of every repository file the lane's processes imported (sorted), or
    None when no process that ran ``runner`` as its main program left a record (see the module's doc)."""
    root = Path(root).resolve()
    want = os.path.realpath(runner)
    files: set[str] = set()
    whole = False
    for path in sorted(Path(records).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or not isinstance(data.get("files"), list):
            continue
        whole = whole or data.get("main") == want
        files.update(f for f in data["files"] if isinstance(f, str) and not f.startswith("..") and ours(f)
                     and (root / f).is_file())
    if not whole:
        return None
    return {rel: sha256_file(root / rel) for rel in sorted(files)}


def changed(recorded: dict[str, str], root: Path) -> list[str]:
    """The recorded files whose content differs today (or that are gone), sorted; installed files an environment
    inside the checkout held (recorded by older runs) do not count: a fresh clone has none of them."""
    found = []
    for rel, digest in sorted(recorded.items()):
        if not ours(rel):
            continue
        path = Path(root) / rel
        now = sha256_file(path) if path.is_file() else ""
        if now != digest:
            found.append(rel)
    return found
