"""requirements/harness.lock: every runtime dependency of the harness, pinned, with wheel hashes.

pyproject.toml's ``[project] dependencies`` are the input (direct dependencies, each pinned
``==``); the lock is what pip's resolver makes of them: the transitive set, each at one
version, with the sha256 of the wheel pip picks for each GPU-host Python (CPython
``PYTHONS`` on manylinux x86_64; a pure wheel has one hash for all). ``harness bundle``
downloads exactly the lock with ``pip download --require-hashes``.

    python tools/lock.py             # regenerate (keeps the lock's transitive pins where they still fit)
    python tools/lock.py --upgrade   # regenerate, letting transitive pins move to the newest that fit
    python tools/lock.py --check     # offline: does the lock agree with pyproject.toml? (exit 1 if not)

Regenerating needs pip and PyPI; ``--check`` needs neither (tests/test_lock.py runs it).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
LOCK = ROOT / "requirements" / "harness.lock"
PYTHONS = ("3.11", "3.12", "3.13")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
DIRECT = "pyproject.toml"  # the "via" of a direct dependency
HEADER = """\
# The harness's runtime dependencies, transitive ones included, each pinned with the sha256 of its
# wheels for the GPU host (CPython {pythons}, manylinux x86_64). `harness bundle` downloads exactly
# these (pip --require-hashes). Generated from pyproject.toml's [project] dependencies by
# `python tools/lock.py`; do not edit by hand (`python tools/lock.py --check` says whether they agree).
"""
_LINE = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+)$")
_HASH = re.compile(r"^--hash=sha256:(?P<hex>[0-9a-f]{64})$")


@dataclass
class Locked:
    name: str
    version: str
    hashes: set[str] = field(default_factory=set)
    via: set[str] = field(default_factory=set)


class LockError(Exception):
    pass


def direct_requirements(pyproject: Path = PYPROJECT) -> dict[str, Requirement]:
    """pyproject.toml's ``[project] dependencies`` by normalized name."""
    deps = tomllib.loads(pyproject.read_text())["project"].get("dependencies", [])
    out = {}
    for text in deps:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            raise LockError(f"{pyproject}: dependency {text!r} is not a requirement: {exc}") from None
        out[canonicalize_name(req.name)] = req
    return out


def parse_lock(text: str, where: str = "harness.lock") -> dict[str, Locked]:
    """The lock's entries by normalized name (``name==version``, its ``--hash`` lines, its ``# via`` line)."""
    entries: dict[str, Locked] = {}
    current: Locked | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip().removesuffix("\\").strip()
        if not line:
            continue
        if line.startswith("# via "):
            if current is None:
                raise LockError(f"{where}:{n}: '# via' before any requirement")
            current.via.update(v.strip() for v in line.removeprefix("# via ").split(","))
            continue
        if line.startswith("#"):
            continue
        m = _HASH.match(line)
        if m:
            if current is None:
                raise LockError(f"{where}:{n}: --hash before any requirement")
            current.hashes.add(m["hex"])
            continue
        m = _LINE.match(line)
        if not m:
            raise LockError(f"{where}:{n}: expected 'name==version', '--hash=sha256:...' or '# via ...': {line!r}")
        name = canonicalize_name(m["name"])
        if name in entries:
            raise LockError(f"{where}:{n}: {name} is locked twice")
        current = entries[name] = Locked(name, m["version"])
    return entries


def check(pyproject: Path = PYPROJECT, lock: Path = LOCK) -> list[str]:
    """Where the lock and pyproject.toml disagree (empty: they agree)."""
    if not lock.is_file():
        return [f"{lock}: missing; run python tools/lock.py"]
    try:
        direct = direct_requirements(pyproject)
        entries = parse_lock(lock.read_text(), str(lock))
    except LockError as exc:
        return [str(exc)]
    problems = []
    for name, req in sorted(direct.items()):
        pins = [s.version for s in req.specifier if s.operator == "=="]
        if len(pins) != 1 or len(req.specifier) != 1:
            problems.append(f"{pyproject.name}: {req} is not pinned with one '=='")
            continue
        got = entries.get(name)
        if got is None:
            problems.append(f"{name}=={pins[0]} is in {pyproject.name} but not in the lock")
        elif got.version != pins[0]:
            problems.append(f"{name}: {pyproject.name} pins {pins[0]}, the lock {got.version}")
        elif DIRECT not in got.via:
            problems.append(f"{name}: the lock does not mark it as a direct dependency (# via {DIRECT})")
    for name, got in sorted(entries.items()):
        if DIRECT in got.via and name not in direct:
            problems.append(f"{name}=={got.version}: the lock has it as a direct dependency; {pyproject.name} does not")
        if not got.hashes:
            problems.append(f"{name}=={got.version}: no --hash in the lock")
        unknown = sorted(v for v in got.via if v != DIRECT and canonicalize_name(v) not in entries)
        if unknown or not got.via:
            problems.append(f"{name}=={got.version}: needed by nothing in the lock "
                            f"({'via ' + ', '.join(unknown) if unknown else 'no via'}); regenerate it")
    return problems


# --------------------------------------------------------------------------- regenerating (pip, PyPI)

def resolve(requirements: list[str], constraints: list[str], python: str) -> list[dict]:
    """pip's resolution of ``requirements`` for CPython ``python`` on manylinux x86_64 (its --report)."""
    with tempfile.TemporaryDirectory(prefix="harness-lock-") as tmp:
        report, cons = Path(tmp) / "report.json", Path(tmp) / "constraints.txt"
        cons.write_text("".join(c + "\n" for c in constraints))
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--disable-pip-version-check", "--only-binary=:all:", "--python-version", python,
               "--implementation", "cp", "--target", str(Path(tmp) / "never-written"), "--report", str(report),
               "-c", str(cons)]
        for plat in PLATFORMS:
            cmd += ["--platform", plat]
        proc = subprocess.run(cmd + requirements, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
            raise LockError(f"pip cannot resolve {' '.join(requirements)} for Python {python}:\n{tail}")
        return json.loads(report.read_text())["install"]


def generate(pyproject: Path = PYPROJECT, current: Path | None = LOCK, upgrade: bool = False,
             pythons: tuple[str, ...] = PYTHONS) -> str:
    """The lock's text for pyproject.toml's dependencies (transitive pins of ``current`` kept unless ``upgrade``)."""
    direct = direct_requirements(pyproject)
    kept = {} if upgrade or current is None or not current.is_file() else parse_lock(current.read_text())
    constraints = [f"{e.name}=={e.version}" for name, e in sorted(kept.items()) if name not in direct]
    requirements = [str(r) for _, r in sorted(direct.items())]
    entries: dict[str, Locked] = {}
    needed_by: dict[str, set[str]] = {}
    for python in pythons:
        resolved = resolve(requirements, constraints, python)
        names = {canonicalize_name(item["metadata"]["name"]) for item in resolved}
        for item in resolved:
            meta = item["metadata"]
            name = canonicalize_name(meta["name"])
            entry = entries.setdefault(name, Locked(name, meta["version"]))
            if entry.version != meta["version"]:
                raise LockError(f"{name}: Python {python} resolves {meta['version']}, another {entry.version}; "
                                "one lock cannot hold both")
            digest = item["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
            if not digest:
                raise LockError(f"{name}=={entry.version}: pip's report gives no sha256 for {item['download_info']}")
            entry.hashes.add(digest)
            if name in direct:
                entry.via.add(DIRECT)
            env = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
                   "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
                   "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
            for text in meta.get("requires_dist", []):
                req = Requirement(text)
                dep = canonicalize_name(req.name)
                if dep in names and (req.marker is None or req.marker.evaluate(env)):
                    needed_by.setdefault(dep, set()).add(name)
    for name, via in needed_by.items():
        entries[name].via |= via
    return render(entries, pythons)


def render(entries: dict[str, Locked], pythons: tuple[str, ...] = PYTHONS) -> str:
    out = [HEADER.format(pythons=", ".join(pythons))]
    for name, e in sorted(entries.items()):
        out.append(f"{name}=={e.version} \\\n")
        hashes = [f"    --hash=sha256:{h}" for h in sorted(e.hashes)]
        out.append(" \\\n".join(hashes) + "\n")
        out.append(f"    # via {', '.join(sorted(e.via, key=lambda v: (v != DIRECT, v)))}\n")
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/lock.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether the lock agrees with pyproject.toml")
    parser.add_argument("--upgrade", action="store_true", help="let transitive pins move to the newest that fit")
    parser.add_argument("--pyproject", type=Path, default=PYPROJECT)
    parser.add_argument("--lock", type=Path, default=LOCK)
    parser.add_argument("--output", type=Path, help="write here instead of --lock")
    args = parser.parse_args(argv)
    if args.check:
        problems = check(args.pyproject, args.lock)
        for p in problems:
            print(f"lock: {p}", file=sys.stderr)
        return 1 if problems else 0
    try:
        text = generate(args.pyproject, args.lock, args.upgrade)
    except LockError as exc:
        print(f"lock: error: {exc}", file=sys.stderr)
        return 1
    (args.output or args.lock).write_text(text)
    problems = check(args.pyproject, args.output or args.lock)
    for p in problems:
        print(f"lock: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
