"""Builds of a base or patched tree, cached by content.

Two build kinds, named per target in its manifest:

* ``wheel``   -- ``pip wheel`` of the tree (the package's own build backend).
* ``overlay`` -- for targets whose compiled parts cannot be built here: the
  package directories of the tree (Python sources, and whatever compiled files
  the released artefact carries) are laid out as an importable directory,
  without running the native build.

A build entry lives at ``builds/<key>`` where the key hashes the tree's key
(base sha256 + patch sha256s) and the build kind; the directory appears only
when the build finished, so an interrupted build is never mistaken for one.
Each entry holds ``site/`` (what goes on ``PYTHONPATH``) and, for wheels,
the wheel itself, which the offline bundle carries. The last step of making an
entry seals it: the sha256 of each of its files goes into the entry
(``harness.base.hashing.seal``). Every use checks the seal first (by stat, hashing
only a file that changed since it last matched): an entry with a file missing,
changed or added, or with no seal, is removed and built again, never used.
Every build runs in a
throwaway clone of the tree inside its scratch entry: the cached base and
patched trees are never written to, and nothing left in them reaches a build.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from harness.base import fingerprint, guard, interpreters, tarsafe, ui
from harness.base.hashing import check_seal, seal, sealed, sha256_file, sha256_text
from harness.base.store import Store
from harness.errors import BuildError, BundleError, WriteError, cannot_write, write_reason
from harness.lane import stubs as stubs_mod
from harness.upstream import git
from harness.upstream.pins import Manifest, extract_artifact

RECIPE_VERSION = "1"  # bump when the way builds are made changes
MUTABLE = ("import-checks",)  # what an entry keeps changing after it is sealed (remembered import checks)


@dataclass(frozen=True)
class Build:
    key: str
    kind: str
    path: Path  # the entry directory
    site: Path  # put this on PYTHONPATH
    wheel: Path | None
    stubs: tuple[str, ...] = ()  # modules the overlay replaced with stubs (harness/lane/stubs.py)
    wheel_sha256: str = ""  # the wheel's digest as sealed when the entry was made

    def describe(self) -> dict:
        info: dict[str, object] = {"key": self.key, "kind": self.kind}
        if self.stubs:
            info["stubbed_modules"] = list(self.stubs)
        if self.wheel is not None:
            info["wheel"] = self.wheel.name
            info["wheel_sha256"] = self.wheel_sha256 or sha256_file(self.wheel)
        return info

    def damage(self) -> list[str]:
        """What differs from the entry's seal (empty: every file as it was made)."""
        return check_seal(self.path, MUTABLE)


def build_key(tree_key: str, manifest: Manifest, python_version: str = "") -> str:
    """The content key of a build. A wheel build also depends on the interpreter that builds it (a
    compiled extension is tagged for that Python: a cp311 wheel does not install on 3.12)."""
    text = f"{tree_key}\0{manifest.build}\0{RECIPE_VERSION}"
    if manifest.build == "wheel":
        text += f"\0python {python_version}"
    if manifest.build == "overlay" and manifest.stubs:
        text += f"\0stubs {stubs_mod.STUB_VERSION}\0" + json.dumps(manifest.stubs, sort_keys=True)
    return sha256_text(text)


def lookup(store: Store, key: str) -> Build | None:
    """The entry of ``key`` as recorded (None when there is none); ``Build.damage`` says whether it is intact."""
    path = store.root / "builds" / key[:20]
    meta = path / "build.json"
    if not meta.is_file():
        return None
    try:
        info = json.loads(meta.read_text())
        wheel = path / info["wheel"] if info.get("wheel") else None
        kind, stubs = info["kind"], tuple(info.get("stubs", ()))
    except (OSError, ValueError, KeyError, TypeError):  # build.json itself damaged: the seal check says so
        kind, wheel, stubs = "damaged", None, ()
    digest = (sealed(path) or {}).get(wheel.name, "") if wheel is not None else ""
    return Build(key, kind, path, path / "site", wheel, stubs, digest)


def build(tree: Path, tree_key: str, manifest: Manifest, store: Store, label: str,
          python: str = sys.executable) -> Build:
    """The cached build of ``tree``; builds it on first use (a wheel with ``python``'s pip)."""
    key = build_key(tree_key, manifest, interpreter_version(python))

    def make(tmp: Path, info: dict) -> None:
        source = _throwaway_copy(tree, tmp / ".source", label)
        if manifest.build == "wheel":
            wheel = _pip_wheel(source, tmp, label, python)
            install_wheel(wheel, tmp / "site", label, python)
            info["wheel"] = wheel.name
        else:
            info["stubs"] = _overlay(source, manifest, tmp / "site", label)
        shutil.rmtree(source)

    return _create(key, manifest, store, make, f"building {label} ({manifest.build})", label)


def adopt_wheel(wheel: Path, key: str, manifest: Manifest, store: Store, label: str) -> Build:
    """Register a prebuilt wheel (from an offline bundle) as the build for ``key``."""

    def make(tmp: Path, info: dict) -> None:
        shutil.copy2(wheel, tmp / wheel.name)
        install_wheel(tmp / wheel.name, tmp / "site", label)
        info["wheel"] = wheel.name

    return _create(key, manifest, store, make, f"installing {label} from the bundle", label)


def adopt_site_tar(site_tar: Path, key: str, manifest: Manifest, store: Store, label: str) -> Build:
    """Register an overlay build (a tar of its ``site/``) from an offline bundle as the build for ``key``."""

    def make(tmp: Path, info: dict) -> None:
        try:
            with tarfile.open(site_tar) as tf:
                tarsafe.extractall(tf, tmp)
        except (tarfile.TarError, EOFError) as exc:  # a member or link leaving the build, a damaged archive
            raise BundleError(f"{site_tar}: cannot unpack {label} from the bundle: {exc}; nothing was kept") from None
        info["stubs"] = sorted(manifest.stubs)

    return _create(key, manifest, store, make, f"unpacking {label} from the bundle", label)


def adopt_overlay_wheel(wheel: Path, key: str, manifest: Manifest, store: Store, label: str) -> Build:
    """Register the overlay build of an unpatched published wheel (an offline bundle carries the wheel, not a
    second copy of its files) as the build for ``key``: laid out from the wheel as ``build`` lays it out."""

    def make(tmp: Path, info: dict) -> None:
        info["stubs"] = overlay_from_wheel(wheel, manifest, tmp / "site", label, tmp / ".source")

    return _create(key, manifest, store, make, f"laying out {label} from its wheel in the bundle", label)


def overlay_from_wheel(wheel: Path, manifest: Manifest, site: Path, label: str, scratch: Path) -> list[str]:
    """The overlay of an unpatched wheel base: the wheel unpacked in ``scratch`` as its base's tree is
    (``pins.extract_artifact``), laid out under ``site`` as ``build`` lays out that tree; the stubbed names."""
    try:
        extract_artifact(wheel, "wheel", scratch)
        return _overlay(scratch, manifest, site, label)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _create(key: str, manifest: Manifest, store: Store, make, what: str, label: str) -> Build:
    """The build entry for ``key``: reused when complete, else made by ``make(tmp, info)`` and renamed in.

    Looked up without the store lock first (a cached build never waits behind another process's build); the
    lock is taken only to make the entry, and the lookup is repeated under it.
    """
    found = lookup(store, key)
    if found is not None and not found.damage():
        ui.note_once(f"build {label}: cached ({key[:12]})")
        return found
    with store.locked():
        found = lookup(store, key)
        if found is not None:
            damage = found.damage()
            if not damage:
                ui.note_once(f"build {label}: cached ({key[:12]})")
                return found
            ui.warn(f"build {label}: the cache entry {found.path} is not as it was made "
                    f"({damage[0]}{f' and {len(damage) - 1} more' if len(damage) > 1 else ''}); building it again")
        entry = store.area("builds") / key[:20]
        try:
            with ui.status(what) as act, store.new_entry(entry) as tmp:
                info = {"kind": manifest.build, "key": key, "target": manifest.target}
                make(tmp, info)
                act.result = ui.human_bytes(ui.dir_size(tmp))
                (tmp / "build.json").write_text(json.dumps(info, indent=2, sort_keys=True))
                seal(tmp, MUTABLE)
        except OSError as exc:  # shutil.Error (a copy of a tree) included; the scratch entry is gone already
            if cannot_write(exc):
                reason = exc.strerror if exc.errno is not None and exc.strerror else write_reason(str(exc))
                raise WriteError(f"cannot write build {label} into {entry.parent}: {reason}; nothing was written",
                                 hint=f"free space in {entry.parent}") from None
            raise
    made = lookup(store, key)
    if made is None:  # renamed in complete a moment ago: only something outside the harness removes it
        raise BuildError(f"build {label}: the cache entry {store.root / 'builds' / key[:20]} vanished as it was made")
    return made


def _throwaway_copy(tree: Path, dest: Path, label: str) -> Path:
    """A local clone of ``tree``'s commit (its committed files only) to build from.

    A build backend writes into the directory it builds (setuptools: ``build/``, ``*.egg-info``),
    and reuses what an earlier build left there. The cached base and patched trees must stay
    exactly their commit, so every build runs in a fresh copy inside the build's scratch entry,
    which goes away with the entry whether the build succeeds or not.
    """
    try:
        git.clone(tree, dest, branch="build")
    except git.GitNotFound:
        raise
    except git.GitError as exc:
        if cannot_write(exc.stderr):
            raise WriteError(f"cannot write build {label}: the copy of {tree} to build from in {dest.parent}: "
                             f"{write_reason(exc.stderr)}; nothing was written",
                             hint=f"free space in {dest.parent}") from None
        raise BuildError(f"build {label}: cannot copy {tree} to build from: {exc.stderr.strip() or exc}") from None
    _refuse_links_leaving(dest, tree, label)
    return dest


def _refuse_links_leaving(copy: Path, tree: Path, label: str) -> None:
    """A build reads nothing outside its tree: a symbolic link that leaves it (absolute, or climbing out) is refused."""
    leaving = tarsafe.links_leaving(copy)
    if leaving:
        rel, target = leaving[0]
        more = f" (and {len(leaving) - 1} more)" if len(leaving) > 1 else ""
        raise BuildError(f"build {label}: {tree / rel} is a symbolic link to {target!r}, outside the tree{more}; "
                         "a build never reads outside its tree")


@functools.cache
def interpreter_version(python: str) -> str:
    """``X.Y`` of ``python`` (asked once per executable and process)."""
    if python == sys.executable:
        return f"{sys.version_info[0]}.{sys.version_info[1]}"
    return interpreters.python_version(python)


def _pip_wheel(tree: Path, out: Path, label: str, python: str = sys.executable) -> Path:
    cmd = [python, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(out), str(tree)]
    _run(cmd, label, "pip wheel", cwd=tree, scratch=out)
    wheels = sorted(out.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"build {label}: expected one wheel from pip, got {[w.name for w in wheels]}")
    return wheels[0]


def install_wheel(wheel: Path, site: Path, label: str, python: str = sys.executable) -> None:
    cmd = [python, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile",
           "--target", str(site), str(wheel)]
    _run(cmd, label, "pip install", scratch=site.parent)


def _overlay(tree: Path, manifest: Manifest, site: Path, label: str) -> list[str]:
    """Lay out the tree's packages under ``site``, plus the manifest's stubs; return the stubbed names."""
    _refuse_links_leaving(tree, tree, label)  # the copy below follows links
    site.mkdir(parents=True)
    roots = [tree / "src", tree]
    for name in manifest.import_names:
        src = next((r / name for r in roots if (r / name).is_dir()), None)
        if src is None:
            raise BuildError(f"build {label}: package directory '{name}' not found in the tree (looked in src/ and /)")
        shutil.copytree(src, site / name, ignore=shutil.ignore_patterns("__pycache__", ".git"))
    for info in tree.glob("*.dist-info"):
        shutil.copytree(info, site / info.name)
    clash = [n for n in manifest.stubs if (site / n.split(".")[0]).exists()]
    if clash:
        raise BuildError(f"build {label}: stubs {clash} would overwrite a package of the tree")
    return stubs_mod.write(site, manifest.stubs, manifest.target)


def _run(cmd: list[str], label: str, what: str, cwd: Path | None = None, scratch: Path | None = None) -> None:
    """Run pip; its temporary files go under ``scratch`` (the build's scratch entry), so a pip killed
    with the harness leaves them where the entry's removal, or the next run's sweep, takes them."""
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    tmpdir = None
    if scratch is not None:
        tmpdir = scratch / ".tmp-pip"
        tmpdir.mkdir(parents=True, exist_ok=True)
        env["TMPDIR"] = str(tmpdir)
    proc = guard.run(cmd, cwd=cwd, env=env)  # pip and the backend it starts die with the harness
    if tmpdir is not None:
        shutil.rmtree(tmpdir, ignore_errors=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise BuildError(f"build {label}: {what} failed (exit {proc.returncode}):\n{tail}")


IMPORT_CHECK_VERSION = "1"  # bump when the check's code or what it accepts changes


def import_check(build: Build, modules: list[str], python: str, label: str,
                 extra_path: list[str] | None = None, env: dict[str, str] | None = None) -> dict[str, str]:
    """Import each module from the build with ``python``; check it comes from the build, not elsewhere.

    ``extra_path`` (the base's runtime dependencies) goes on ``PYTHONPATH`` right after the build;
    ``env`` replaces the inherited environment (the lane's ``LD_LIBRARY_PATH`` for those dependencies).
    For a build with stubs, the answer also says, per stubbed module, whether the stub or a real
    installation was imported (key ``stub:<module>``).

    A passed check is remembered in the build's entry (``import-checks/``) under a key of everything
    that can change its answer (``harness/base/fingerprint.py``): this module's and fingerprint's source,
    the build, the modules, the check's code,
    the interpreter and every ``sys.path`` directory it sees with this environment, and the
    environment itself. A later check with the same key is answered from there without importing
    anything (an import of torch and a kernel library costs seconds); a failed check is never remembered.
    """
    code = (
        "import importlib, json, sys\n"
        + stubs_mod.REPORT_CODE
        + "out = {}\n"
        "for name in sys.argv[1:]:\n"
        "    mod = importlib.import_module(name)\n"
        "    out[name] = [mod.__file__] if mod.__file__ else list(getattr(mod, '__path__', []))\n"
        f"out.update({{'stub:' + k: v for k, v in _stub_report({list(build.stubs)!r}).items()}})\n"
        "print(json.dumps(out))\n"
    )
    # Run in the build's own directory (the caller's working directory is not on a reproducer's
    # path either), with relative PYTHONPATH entries made absolute against the caller's, where
    # the reproducer resolves them.
    path = [str(build.site), *(extra_path or []), *inherited_pythonpath()]
    env = dict(env if env is not None else os.environ, PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in path))
    cwd = build.site
    memo = fingerprint.Memo(build.path / "import-checks")
    try:
        key = fingerprint.digest(IMPORT_CHECK_VERSION, fingerprint.source(sys.modules[__name__], fingerprint),
                                 build.key, str(build.site.resolve()), list(build.stubs),
                                 modules, code, python, fingerprint.interpreter(python, env, cwd),
                                 fingerprint.environment(env))
    except fingerprint.ProbeError as exc:
        raise BuildError(f"import check of {label}: {exc}") from None
    remembered = memo.get(key)
    if isinstance(remembered, dict):
        ui.note_once("import checks that passed before with nothing they depend on changed are not run again "
                     "(remembered in the cache every clone on this host shares; PATCHLANE_RECHECK=1 runs them; "
                     "-v names each)")
        ui.detail(f"import check of {label}: not run now; remembered in {memo.directory} (key {key[:12]})")
        return remembered
    proc = guard.run([python, "-c", code, *modules], env=env, cwd=cwd)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-6:])
        raise BuildError(f"import check of {label} failed for {', '.join(modules)}:\n{tail}")
    # A namespace package (megatron has no __init__.py) has no __file__: every directory on its
    # __path__ must then be in the build, so no other installation contributes modules to it.
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    site = str(build.site.resolve())
    for name, files in found.items():
        if name.startswith("stub:"):
            continue
        outside = [f for f in files if not str(Path(f).resolve()).startswith(site)]
        if outside or not files:
            raise BuildError(f"import check of {label}: {name} was imported from "
                             f"{', '.join(outside) or 'nowhere'}, not from the build at {site}")
    answer = {name: value if name.startswith("stub:") else value[0] for name, value in found.items()}
    memo.put(key, answer, python=python, modules=modules, label=label)
    return answer


def inherited_pythonpath() -> list[str]:
    """The caller's PYTHONPATH entries, kept after a build's own directories."""
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]

