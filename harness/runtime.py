"""Per-base runtime dependencies: the exact wheels a base's manifest lists in ``runtime_requires``.

Two bases of one target can need incompatible versions of the same dependency
(tilelang 0.1.8 runs only with apache-tvm-ffi 0.1.9, 0.1.15 needs 0.1.12), so
they cannot share one environment. Each distinct set is installed once, with
``pip install --no-deps --target``, into ``runtime/<key>/site`` of the store,
and a lane puts that directory on ``PYTHONPATH`` right after its build. On a
host without network the wheels come from the bundle (``--no-index``).
"""

from __future__ import annotations

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
