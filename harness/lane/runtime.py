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

A lane with ``with_builds`` (another target's build on its path, e.g. megatron-core's
Float16Module around mamba-ssm's Mamba3) needs those bases' runtime requirements too:
``combine`` merges the lane's own base's list with theirs (one pin per distribution; two
different pins of one distribution is a configuration error) and ``ensure_requirements``
installs the merged set as one site.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from harness.base import guard, ui
from harness.base.hashing import check_seal, seal, sha256_text
from harness.base.interpreters import python_version
from harness.base.store import Store
from harness.errors import BuildError, ConfigError


def runtime_key(requirements: tuple[str, ...], python: str) -> str:
    return sha256_text("\n".join(sorted(requirements)) + f"\0{python_version(python)}")


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


def _requirement(requirement: str) -> Requirement:
    """A PEP 508 requirement; a malformed one is bad input naming it."""
    try:
        return Requirement(requirement)
    except InvalidRequirement as exc:
        raise ConfigError(f"runtime_requires: {requirement!r} is not a valid requirement: {exc}") from None


def _dist_name(requirement: str) -> str:
    """The normalized distribution name of a pin like ``apache-tvm-ffi==0.1.9`` (PEP 503)."""
    return canonicalize_name(_requirement(requirement).name)


def _spec(requirement: str) -> tuple[str, str, str]:
    """``(normalized name, specifier, marker)``: 'Einops == 0.8.2' and 'einops==0.8.2' are one pin."""
    req = _requirement(requirement)
    return canonicalize_name(req.name), str(req.specifier), str(req.marker or "")


def combine(sources: list[tuple[str, tuple[str, ...]]]) -> tuple[str, ...]:
    """The requirements of several bases (``(label, runtime_requires)`` pairs), merged in order, duplicates once.

    Two sources pinning one distribution differently cannot share a site: ConfigError naming both.
    """
    out: list[str] = []
    seen: dict[str, tuple[str, str]] = {}
    for label, reqs in sources:
        for req in reqs:
            name = _dist_name(req)
            if name in seen:
                first, first_label = seen[name]
                if _spec(first) != _spec(req):
                    raise ConfigError(f"runtime_requires conflict: {first_label} pins {first!r}, {label} pins {req!r}; "
                                      "one lane cannot have both on its path")
                continue
            seen[name] = (req, label)
            out.append(req)
    return tuple(out)


def ensure_requirements(reqs: tuple[str, ...], label: str, store: Store, python: str,
                        wheels: Path | None = None) -> Path | None:
    """The site directory holding exactly ``reqs`` (None when empty), installed once per distinct set."""
    reqs = tuple(reqs)
    if not reqs:
        return None
    key = runtime_key(reqs, python)
    final = store.area("runtime") / key[:20]
    if (final / "site").is_dir() and not check_seal(final):  # lock-free; the lock only to make it (look again)
        return final / "site"
    with store.locked():
        if (final / "site").is_dir():
            damage = check_seal(final)  # sealed when made; a changed file means building the site again
            if not damage:
                return final / "site"
            ui.warn(f"{label}: the runtime entry {final} is not as it was made ({damage[0]}); installing it again")
        with ui.status(f"installing runtime of {label}: {', '.join(reqs)}") as act, store.new_entry(final) as tmp:
            cmd = [python, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
                   "--target", str(tmp / "site")]
            if wheels is not None:
                cmd += ["--no-index", "--find-links", str(wheels)]
            (tmp / "pip-tmp").mkdir()  # pip's temporary files stay inside the scratch entry
            proc = guard.run(cmd + list(reqs), env=dict(os.environ, TMPDIR=str(tmp / "pip-tmp")))
            shutil.rmtree(tmp / "pip-tmp", ignore_errors=True)
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-6:])
                raise BuildError(f"{label}: cannot install runtime_requires ({', '.join(reqs)}):\n{tail}")
            (tmp / "requirements.txt").write_text("\n".join(reqs) + "\n")
            seal(tmp)
            act.result = f"{len(reqs)} distribution(s), {ui.human_bytes(ui.dir_size(tmp / 'site'))}"
    return final / "site"
