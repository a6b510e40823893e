"""Nox sessions as data, read from tracking.toml with the standard library only.

The noxfile imports this module before any dependency is installed, so it
must not import tomlkit, rich or GitPython. Each pack becomes a session
``<prefix>_pack<NN>``; the prefix is the manifest's ``session_prefix`` or the
first word of the target name (``liger-kernel`` -> ``liger``).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PackSession:
    name: str
    pack: str
    target: str
    description: str
    requirements: str | None  # requirements/lane-<target>.txt when it exists


def session_prefix(root: Path, target: str) -> str:
    manifest = root / "upstream" / f"{target}.toml"
    if manifest.is_file():
        with open(manifest, "rb") as fh:
            prefix = tomllib.load(fh).get("session_prefix")
        if prefix:
            return str(prefix)
    return target.split("-")[0]


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
        out.append(PackSession(f"{session_prefix(root, target)}_pack{pid}", pid, target, desc,
                               str(reqs.relative_to(root)) if reqs.is_file() else None))
    return out
