"""Nox sessions as data, read from tracking.toml with the standard library only.

The noxfile imports this module before any dependency is installed, so it
must not import tomlkit, rich or GitPython. Each pack becomes a session
``<prefix>_pack<NN>``; the prefix is the manifest's ``session_prefix`` or the
first word of the target name (``liger-kernel`` -> ``liger``). A manifest's
optional ``python`` (e.g. ``"3.12"`` where the upstream package requires it)
becomes the session's interpreter; otherwise nox's own interpreter is used.
All pack sessions of one target share one virtualenv (``PackSession.lane_env``).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.errors import Exit  # stdlib-only, like this module (the noxfile imports both)


@dataclass(frozen=True)
class PackSession:
    name: str
    pack: str
    target: str
    description: str
    requirements: str | None  # requirements/lane-<target>.txt when it exists
    python: str | None = None  # the manifest's ``python``: interpreter version the session needs

    def lane_env(self, python_version: str) -> str:
        """The directory name (under nox's envdir) of the virtualenv that all of this target's
        pack sessions share: ``lane-<target>-py<X.Y>``."""
        return f"lane-{self.target}-py{python_version}"


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
        lanes = len(pack.get("lanes", []))
        desc = f"pack {pid} [{pack.get('kind', '?')}, {state}, {lanes} lane(s)]: {pack.get('title', '')}"
        if not lanes:  # `harness run` exits NO_LANES: the session fails rather than pass on nothing
            desc += f" -- no lanes: validates nothing, fails with exit {int(Exit.NO_LANES)}"
        out.append(PackSession(f"{session_prefix(root, target)}_pack{pid}", pid, target, desc,
                               str(reqs.relative_to(root)) if reqs.is_file() else None,
                               session_python(root, target)))
    return out

