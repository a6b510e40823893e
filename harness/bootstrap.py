"""Start the harness from an offline bundle, with nothing but the standard library and pip.

Usage, on a GPU host without network, from the repository root::

    python3 -m harness.bootstrap dist/bundle.tar.xz -- run 09
    python3 -m harness.bootstrap dist/bundle.tar.xz [--parts DIR] [--stage SRC] [--host-wheels DIR] -- [args]

It unpacks the bundle under the harness's cache (``$PATCHLANE_HOME``, else
``$XDG_CACHE_HOME/patchlane``, else ``~/.cache/patchlane``) into a directory named
by the archive's sha256, checks every file against ``bundle.json``, installs the
harness's dependency wheels with ``pip --no-index`` into a directory of that one
per interpreter (``site-<cache tag>``, e.g. ``site-cpython-312``), and re-executes
``python -m harness <args> --bundle-dir`` so the run takes its builds from the
bundle only. A later call with the same archive reuses all of it: it hashes the
archive, finds the directory complete, and starts the harness. Exit code 4 (PIN)
when the archive is missing, holds a foreign member, or a file fails its sha256.

A bundle with payloads (files too large for one carry, see ``harness/host/payloads.py``) needs their parts, which
may arrive over several calls: ``--stage SRC`` checks the parts found in ``SRC`` and copies them into the
parts directory (``--parts DIR``, default ``parts/`` beside the unpacked bundle), which outlives the call. A
call with nothing after ``--`` only stages, joins a payload once all its parts are there, and says which parts
are still missing (exit 0). A call that runs the harness first joins every payload into the bundle's
``wheels/``, checked part by part and as a whole;
a part missing or damaged is exit 4 naming it, and leaves no payload file behind.

A bundle with host builds (``harness/lane/host_builds.py``: a package compiled on the GPU host from a pinned sdist,
e.g. TransformerEngine's torch extension) has each built and installed into a private environment beside the
unpacked bundle (``host-env-X.Y``; never the interpreter's site-packages, which every other lane imports from)
after the payloads are joined and before the harness starts, unless that version is installed there already; only
the lanes of a base with host builds run with that environment's interpreter (``harness/lane/lanes.py``); a
failed or timed-out build is exit 6 naming it, with the tail of its log (``host-build-NAME.log`` beside the
unpacked bundle). The built wheel is kept in ``host-wheels/`` there; ``--host-wheels DIR`` installs such a
wheel from DIR instead of building (a later host of the same image, when one call cannot hold build and run).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from harness.base import tarsafe
from harness.base.hashing import sha256_file, verify_files
from harness.base.store import default_root
from harness.errors import BuildError, BundleError, Exit, cannot_write
from harness.host import payloads
from harness.host.index import TOP, VERIFIED, expected_files
from harness.lane import host_builds


def _fail(message: str) -> int:
    print(f"harness.bootstrap: error: {message}", file=sys.stderr)
    return int(Exit.PIN)


def unpack(archive: Path, dest: Path) -> int:
    """Extract and verify ``archive`` into ``dest`` (marked ``.complete`` when done); 0 or an exit code.

    The archive is unpacked into a scratch directory beside ``dest``, renamed into place only once every file
    matched: a truncated, damaged or hostile archive (a member or link leaving the directory) is exit 4 in one
    line and leaves nothing (nor does a full disk, exit 74)."""
    print(f"> unpacking {archive} into {dest}", file=sys.stderr)
    dest.parent.mkdir(parents=True, exist_ok=True)
    scratch = dest.with_name(f"{dest.name}.partial-{os.getpid()}")
    try:
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        code = _unpack_into(archive, scratch)
        if code:
            return code
        if not (dest / ".complete").exists():  # else another call unpacked the same archive meanwhile: use it
            shutil.rmtree(dest, ignore_errors=True)  # an incomplete one of an older harness
            os.replace(scratch, dest)
    except OSError as exc:
        if cannot_write(exc):
            print(f"harness.bootstrap: error: cannot write {dest}: {exc.strerror or exc}; nothing was kept",
                  file=sys.stderr)
            return int(Exit.IO)
        return _fail(f"cannot unpack bundle {archive}: {exc}")
    except (tarfile.TarError, EOFError, lzma.LZMAError, zlib.error) as exc:
        return _fail(f"cannot unpack bundle {archive}: {exc}; nothing was kept")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _unpack_into(archive: Path, dest: Path) -> int:
    with tarfile.open(archive) as tf:
        for m in tf.getmembers():
            if not (m.name == TOP or m.name.startswith(TOP + "/")):
                return _fail(f"{archive}: unexpected member {m.name!r}")
        tarsafe.extractall(tf, dest)
    bundle_dir = dest / TOP
    try:
        index = json.loads((bundle_dir / "bundle.json").read_text())
        bad = verify_files(bundle_dir, expected_files(index), bundle_dir / VERIFIED)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return _fail(f"bundle {archive}: bundle.json is missing or not a bundle's index ({type(exc).__name__}: "
                     f"{exc}); nothing was kept")
    if bad:
        return _fail(f"{bad[0]} fails its sha256")
    (dest / ".complete").write_text("ok\n")
    return 0


def _tied_wheel(name: str, version: tuple[int, int]) -> bool:
    """Whether wheel file ``name`` cannot install on CPython ``version``: a ``cpXY``/``pyXY`` tag of another
    version (``abi3`` only of a later one); ``py3-none-any`` and the like install anywhere."""
    parts = Path(name).name[:-len(".whl")].split("-") if name.endswith(".whl") else []
    if len(parts) < 5:
        return False
    pythons, abi = parts[-3].split("."), parts[-2]
    fits = []
    for tag in pythons:
        digits = tag[2:]
        if tag[:2] not in ("cp", "py") or not digits.isdigit():
            fits.append(True)  # not a tag this check reads: leave it to pip
        elif len(digits) == 1:
            fits.append(int(digits) == version[0])
        else:
            tagged = (int(digits[0]), int(digits[1:]))
            fits.append(tagged <= version if abi == "abi3" else tagged == version)
    return not any(fits)


def python_mismatch(index: dict, version: tuple[int, int] | None = None) -> str | None:
    """Why this interpreter cannot run the bundle, naming both versions (None when it can).

    A bundle is tied to its Python (``bundle.json``'s ``python``) when it holds a wheel build (keyed by the
    interpreter that built it) or a wheel tagged for that Python; overlay builds and pure wheels run on any."""
    here = version or (sys.version_info[0], sys.version_info[1])
    made_for = str(index.get("python") or "")
    if not made_for or made_for == f"{here[0]}.{here[1]}":
        return None
    tied = [e.get("file", "") for e in index.get("builds", {}).values() if e.get("kind") == "wheel"]
    tied += [e["file"] for e in index.get("wheels", []) if _tied_wheel(e["file"], here)]
    if not tied:
        return None
    return (f"the bundle was made for Python {made_for}, but this is Python {here[0]}.{here[1]} "
            f"({sys.executable}); {Path(tied[0]).name}{f' and {len(tied) - 1} more' if len(tied) > 1 else ''} "
            f"cannot run here (hint: start it with python{made_for} -m harness.bootstrap ..., or make the bundle "
            f"with --python-version {here[0]}.{here[1]})")


def install_site(bundle_dir: Path, site: Path) -> None:
    """The bundle's dependency wheels, installed for this interpreter into ``site`` (once)."""
    marker = site.with_name(site.name + ".complete")
    if marker.exists():
        return
    index = json.loads((bundle_dir / "bundle.json").read_text())
    # the harness's own dependencies only: the bases' runtime wheels go into each lane's runtime site (one
    # pip run over both could meet one distribution at two versions); bundles made before the split list none
    names = index.get("harness_wheels", [w["file"] for w in index["wheels"]])
    wheels = [str(bundle_dir / name) for name in names]
    if wheels:
        print(f"> installing {len(wheels)} wheel(s) offline for {sys.implementation.cache_tag}", file=sys.stderr)
        try:
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                            "--no-compile", "--disable-pip-version-check", "--upgrade", "--target", str(site),
                            *wheels], check=True)
        except subprocess.CalledProcessError as exc:
            raise BundleError(f"pip could not install the bundle's wheels for Python "
                              f"{sys.version_info[0]}.{sys.version_info[1]} into {site} (exit {exc.returncode})"
                              ) from None
    marker.write_text("ok\n")


def _options(argv: list[str]) -> tuple[Path, dict[str, Path], list[str]] | str:
    """(archive, {--parts, --stage, --host-wheels}, harness args), or why the command line is wrong."""
    split = argv.index("--")
    head, options = argv[:split], {}
    if not head:
        return "no bundle archive before '--'"
    rest = head[1:]
    while rest:
        flag = rest.pop(0)
        if flag not in ("--parts", "--stage", "--host-wheels") or not rest:
            return f"unexpected {flag!r} (options before '--': --parts DIR, --stage SRC, --host-wheels DIR)"
        options[flag] = Path(rest.pop(0))
    return Path(head[0]), options, argv[split + 1:]


def payload_step(bundle_dir: Path, parts_dir: Path, stage_from: Path | None, run: bool) -> int:
    """Stage the parts a call brought, and join every payload whose parts are all there into place (before a run:
    every payload, a missing part being an error); 0 or an exit code."""
    index = json.loads((bundle_dir / "bundle.json").read_text())
    entries = index.get("payloads", [])
    try:
        for entry in entries:
            if stage_from is not None:
                copied = payloads.stage(entry, stage_from, parts_dir)
                print(f"> payload {entry['name']}: staged {len(copied)} part(s) from {stage_from} into {parts_dir}",
                      file=sys.stderr)
            absent = payloads.missing(entry, parts_dir)
            if not run and absent:
                have = len(entry["parts"]) - len(absent)
                print(f"> payload {entry['name']}: {have} of {len(entry['parts'])} part(s) in {parts_dir}; "
                      f"missing: {', '.join(absent)}", file=sys.stderr)
                continue
            dest = payloads.assemble(entry, parts_dir, bundle_dir / entry["file"])
            print(f"> payload {entry['name']}: joined into {dest} ({entry['size']} bytes, sha256 checked)",
                  file=sys.stderr)
    except BundleError as exc:
        return _fail(f"{exc}" + (f" (hint: {exc.hint})" if exc.hint else ""))
    return 0


def host_step(bundle_dir: Path, work_root: Path, prebuilt: Path | None = None) -> int:
    """Build and install every host build of the bundle not installed yet; 0 or an exit code (BUILD)."""
    for entry in json.loads((bundle_dir / "bundle.json").read_text()).get("host_builds", []):
        try:
            done = host_builds.ensure(entry, bundle_dir, work_root, prebuilt)
        except BuildError as exc:
            print(f"harness.bootstrap: error: {exc}" + (f"\n  hint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
            return int(Exit.BUILD)
        print(f"> host build {entry['name']}: {done}", file=sys.stderr, flush=True)
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help") or "--" not in argv:
        print(__doc__.strip())
        return int(Exit.USAGE) if not argv or argv[0] not in ("-h", "--help") else int(Exit.OK)
    parsed = _options(argv)
    if isinstance(parsed, str):
        print(f"harness.bootstrap: error: {parsed}", file=sys.stderr)
        return int(Exit.USAGE)
    archive, options, harness_args = parsed
    if not archive.is_file():
        return _fail(f"bundle {archive} not found")
    stage_from = options.get("--stage")
    if stage_from is not None and not stage_from.is_dir():
        return _fail(f"--stage {stage_from}: not a directory")
    unpacked = unpacked_dir(archive)
    if isinstance(unpacked, int):
        return unpacked
    bundle_dir, dest = unpacked, unpacked.parent
    if not harness_args and not json.loads((bundle_dir / "bundle.json").read_text()).get("payloads"):
        print("harness.bootstrap: error: nothing after '--' to run, and the bundle has no payload parts to stage",
              file=sys.stderr)
        return int(Exit.USAGE)
    mismatch = python_mismatch(json.loads((bundle_dir / "bundle.json").read_text())) if harness_args else None
    if mismatch:  # before payloads are joined and pip runs (pip would only say "not a supported wheel")
        return _fail(mismatch)
    code = payload_step(bundle_dir, options.get("--parts", dest / "parts"), stage_from, run=bool(harness_args))
    if code or not harness_args:
        return code
    code = host_step(bundle_dir, dest, options.get("--host-wheels"))
    if code:
        return code
    try:
        env = harness_env(bundle_dir)
    except BundleError as exc:
        return _fail(str(exc))
    cmd = [sys.executable, "-m", "harness", *harness_args, "--bundle-dir", str(bundle_dir)]
    return subprocess.call(cmd, env=env)


@contextlib.contextmanager
def _node_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (``flock``: released with the process, also when it is killed). Array tasks
    of one Slurm sweep that start on one node together take turns: the first unpacks, the others find it done."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"> waiting for another bootstrap on this node ({path})", file=sys.stderr, flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def unpacked_dir(archive: Path) -> Path | int:
    """The bundle directory of ``archive`` under the cache, unpacked and checked once per node, under a lock
    (a later or concurrent call with the same archive finds it complete); or the exit code of what went wrong."""
    dest = default_root() / "bundles" / sha256_file(archive)[:16]
    if not (dest / ".complete").exists():
        # the lock lives outside the directory: an unpack replaces the directory whole (a scratch renamed in)
        with _node_lock(default_root() / "locks" / f"bundle-{dest.name}.lock"):
            if not (dest / ".complete").exists():  # looked at again under the lock: another task may have done it
                code = unpack(archive, dest)
                if code:
                    return code
    return dest / TOP


def harness_env(bundle_dir: Path) -> dict[str, str]:
    """The environment that runs ``python -m harness ... --bundle-dir BUNDLE_DIR`` with this interpreter: this
    checkout and the bundle's dependency wheels, installed once per interpreter beside the bundle directory,
    first on ``PYTHONPATH``. A script that starts harness commands itself (bench/sweep.py) uses it too."""
    site = bundle_dir.parent / f"site-{sys.implementation.cache_tag}"
    if not site.with_name(site.name + ".complete").exists():
        with _node_lock(site.with_name(f".{site.name}.lock")):
            install_site(bundle_dir, site)
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent.parent)
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([here, str(site), *inherited])
    return env


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
