"""Per-base runtime dependencies: the exact wheels a base's manifest lists in ``runtime_requires``.

Two bases of one target can need incompatible versions of the same dependency
(tilelang 0.1.8 runs only with apache-tvm-ffi 0.1.9, 0.1.15 needs 0.1.12), so
they cannot share one environment. Each distinct set is installed once, with
``pip install --no-deps --target``, into ``runtime/<key>/site`` of the store,
and a lane puts that directory on ``PYTHONPATH`` right after its build. On a
host without network the wheels come from the bundle (``--no-index``).

Installed beside the build rather than inside it, such a wheel's shared
libraries are out of reach of a build library's relative RUNPATH (tilelang's
libtvm.so needs libz3.so through ``$ORIGIN/../../z3/lib``), so the lane also
puts the site's ``<package>/lib`` directories on ``LD_LIBRARY_PATH``. A host
with a system libz3 hides the problem; the GPU host has none.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from harness import ui
from harness.errors import BuildError
from harness.hashing import sha256_text
from harness.pins import Base
from harness.store import Store


def runtime_key(requirements: tuple[str, ...], python: str) -> str:
    version = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip()
    return sha256_text("\n".join(sorted(requirements)) + f"\0{version}")


def library_dirs(site: Path | None) -> list[str]:
    """The ``<package>/lib`` directories of a runtime site that hold shared libraries, sorted."""
    if site is None:
        return []
    return sorted(str(d) for d in site.glob("*/lib") if d.is_dir() and any(d.glob("*.so*")))


def with_library_path(env: dict[str, str], site: Path | None) -> dict[str, str]:
    """``env`` with the runtime site's library directories in front of its ``LD_LIBRARY_PATH``."""
    dirs = library_dirs(site)
    if dirs:
        env = dict(env, LD_LIBRARY_PATH=os.pathsep.join(dirs + [p for p in env.get("LD_LIBRARY_PATH", "")
                                                                 .split(os.pathsep) if p]))
    return env


def ensure(base: Base, store: Store, python: str, wheels: Path | None = None) -> Path | None:
    """The site directory holding ``base.runtime_requires`` (None when it lists nothing)."""
    reqs = tuple(base.runtime_requires)
    if not reqs:
        return None
    key = runtime_key(reqs, python)
    final = store.area("runtime") / key[:20]
    with store.locked():
        if (final / "site").is_dir():
            return final / "site"
        with ui.status(f"installing runtime of base {base.name}: {', '.join(reqs)}"), store.new_entry(final) as tmp:
            cmd = [python, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
                   "--target", str(tmp / "site")]
            if wheels is not None:
                cmd += ["--no-index", "--find-links", str(wheels)]
            proc = subprocess.run(cmd + list(reqs), capture_output=True, text=True)
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-6:])
                raise BuildError(f"base {base.name}: cannot install runtime_requires ({', '.join(reqs)}):\n{tail}")
            (tmp / "requirements.txt").write_text("\n".join(reqs) + "\n")
    return final / "site"
