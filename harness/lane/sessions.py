"""Nox sessions as data, read from tracking.toml and the packs' pack.toml with the standard library only.

The noxfile imports this module before any dependency is installed, so it
must not import tomlkit, rich or requests. Each pack becomes a session
``<prefix>_pack<NN>``; the prefix is the manifest's ``session_prefix`` or the
first word of the target name (``liger-kernel`` -> ``liger``). A manifest's
optional ``python`` (e.g. ``"3.12"`` where the upstream package requires it)
becomes the session's interpreter; otherwise nox's own interpreter is used.
All pack sessions of one target share one virtualenv (``PackSession.lane_env``), installed
again only when ``lane_env_stamp`` changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.base.fingerprint import file_identity
from harness.base.regular import MAX_TOML_BYTES as MAX_BYTES
from harness.errors import Exit  # stdlib-only, like this module (the noxfile imports both)

HEARTBEAT_S = 15.0  # as harness.base.ui: a line at least this often while a long step runs off a terminal
STAMP_FILE = ".patchlane-stamp.json"
STAMP_VERSION = "1"  # bump when what the lane environment installs changes in a way the stamp cannot see


@dataclass(frozen=True)
class PackSession:
    name: str
    pack: str
    target: str
    description: str
    requirements: str | None  # requirements/lane-<target>.txt when it exists
    python: str | None = None  # the manifest's ``python``: interpreter version the session needs
    error: str | None = None  # its pack.toml cannot be read (file, line, what): the session fails with this

    def lane_env(self, python_version: str) -> str:
        """The directory name (under nox's envdir) of the virtualenv that all of this target's
        pack sessions share: ``lane-<target>-py<X.Y>``."""
        return f"lane-{self.target}-py{python_version}"

    @property
    def tags(self) -> list[str]:
        """``nox -t <tag>`` selects every pack session of a target: its name and its session prefix."""
        prefix = self.name.rsplit("_pack", 1)[0]
        return [self.target] + ([prefix] if prefix != self.target else [])


def lane_env_stamp(root: Path, spec: PackSession, python: str, envdir: Path) -> dict:
    """What a lane environment's installs depend on; the noxfile installs again only when it changes.

    The interpreter that made the environment (path, real file, size, mtime, inode: an upgrade in
    place moves it), the environment's and the repository's locations (a venv and an editable
    install hold absolute paths), and the content of pyproject.toml (the harness's pins, scripts,
    packages) and of the target's requirements file. The harness itself is installed editable,
    so a change to its sources needs no reinstall.
    """
    def content(rel: str | None) -> str | None:
        if rel is None:
            return None
        path = root / rel
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None

    return {"version": STAMP_VERSION, "python": python, "interpreter": file_identity(python),
            "envdir": str(envdir), "root": str(root), "pyproject.toml": content("pyproject.toml"),
            "requirements": [spec.requirements, content(spec.requirements)]}


def _manifest(root: Path, target: str) -> dict:
    path = root / "upstream" / f"{target}.toml"
    if not path.is_file():
        return {}
    with open(path, "rb") as fh:
        return tomllib.load(fh)


def session_prefix(root: Path, target: str) -> str:
    prefix = _manifest(root, target).get("session_prefix")
    return str(prefix) if prefix else target.split("-")[0]


def session_python(root: Path, target: str) -> str | None:
    python = _manifest(root, target).get("python")
    return str(python) if python else None


def pack_sessions(root: Path) -> list[PackSession]:
    with open(root / "tracking.toml", "rb") as fh:
        packs = tomllib.load(fh).get("packs", {})
    out = []
    for pid, pack in packs.items():
        target = pack.get("target", "unknown")
        reqs = root / "requirements" / f"lane-{target}.txt"
        state = pack.get("state", "?")
        declared = root / "patches" / target / pid / "pack.toml"  # tracking.layout.PACK_FILE (stdlib only here)
        error = None
        try:
            pack = {**pack, **_read_pack_file(declared)}
        except (OSError, tomllib.TOMLDecodeError) as exc:  # one broken file must not take every session down
            error = f"{declared.relative_to(root)}: {exc}"
        if error is not None:
            out.append(PackSession(f"{session_prefix(root, target)}_pack{pid}", pid, target,
                                   f"pack {pid}: cannot run: {error}", None, session_python(root, target), error))
            continue
        lanes = len(pack.get("lanes", []))
        desc = f"pack {pid} [{pack.get('kind', '?')}, {state}, {lanes} lane(s)]: {pack.get('title', '')}"
        if not lanes:  # `harness run` exits NO_LANES: the session fails rather than pass on nothing
            desc += f" -- no lanes: validates nothing, fails with exit {int(Exit.NO_LANES)}"
        out.append(PackSession(f"{session_prefix(root, target)}_pack{pid}", pid, target, desc,
                               str(reqs.relative_to(root)) if reqs.is_file() else None,
                               session_python(root, target)))
    return out



def _read_pack_file(path: Path) -> dict:
    """A pack's own file as TOML ({} when the pack has none); one over tomlutil.MAX_BYTES is not parsed."""
    if not path.is_file():
        return {}
    if path.stat().st_size > MAX_BYTES:
        raise OSError(f"{path.stat().st_size} bytes, more than the {MAX_BYTES} a TOML file of this repository may "
                      "hold; not read")
    with open(path, "rb") as fh:
        return tomllib.load(fh)


def stack_bases(root: Path, target: str) -> list[str]:
    """The bases a stack of ``target`` is built at: each carried pack's base and the bases of its ported series
    (``patches/<target>/<NN>/<base>/``), known to the manifest, in the manifest's order."""
    bases = list(_manifest(root, target).get("bases", {}))
    with open(root / "tracking.toml", "rb") as fh:
        packs = tomllib.load(fh).get("packs", {})
    wanted: set[str] = set()
    for pid, pack in packs.items():
        try:
            pack = {**pack, **_read_pack_file(root / "patches" / target / pid / "pack.toml")}
        except (OSError, tomllib.TOMLDecodeError):
            continue  # its own session says what is wrong with it
        if pack.get("target") != target or pack.get("state") in ("absorbed", "retired", "dropped"):
            continue
        wanted.update(b for b in [pack.get("base"), *(lane.get("base") for lane in pack.get("lanes", [])
                                                       if lane.get("patched"))] if b)
        d = root / "patches" / target / pid
        wanted.update(sub.name for sub in d.iterdir() if sub.is_dir()) if d.is_dir() else None
    return [b for b in bases if b in wanted]


def _size(path: Path) -> int:
    total = 0
    for top, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_size
    return total


@contextlib.contextmanager
def heartbeat(what: str, grows: Path | None = None, every: float = HEARTBEAT_S,
              write: Callable[[str], object] | None = None) -> Iterator[None]:
    """A line every ``every`` seconds while the block runs (``what``, the time so far and, with ``grows``, that
    directory's size), terminal or not, then one with the total: a pip install of the megatron lane environment
    (about 5 GB) printed nothing for three minutes. Standard library only (the noxfile runs it before rich)."""
    say = write or (lambda line: print(line, file=sys.stderr, flush=True))
    started = time.monotonic()
    stop = threading.Event()

    def state() -> str:
        size = f", {_size(grows) / 2**20:,.0f} MiB in {grows.name}" if grows is not None and grows.is_dir() else ""
        return f"{time.monotonic() - started:.0f} s{size}"

    def beat() -> None:
        while not stop.wait(every):
            say(f"  ... still {what} ({state()})")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    say(f"  {what}: done in {state()}")
