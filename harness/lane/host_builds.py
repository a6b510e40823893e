"""Host builds: a package compiled on the GPU host from a pinned sdist, before the run.

Some compiled parts must be built against the host's own libraries: TransformerEngine's torch extension
(``transformer_engine_torch``) is a C++ extension of the host's torch, published as an sdist only. A base
lists such a package in ``[[bases.NAME.host_builds]]`` (``harness/upstream/pins.py``: ``HostBuild``);
``harness bundle`` carries
the sdist (its sha256 in ``bundle.json``) and the wheels of its ``build_requires``; ``python -m harness.bootstrap``
calls ``ensure`` for each before it starts the harness:

* already installed in the bundle's private environment at the pinned version: nothing is done;
* else the ``build_requires`` go into a private directory put first on the build's ``PYTHONPATH`` (and its
  ``bin/`` on ``PATH``), and ``pip wheel --no-build-isolation --no-index`` builds the sdist against the
  interpreter's own packages, with ``MAX_JOBS`` the number of CPUs unless set, the manifest's ``env``, and each
  ``include_dirs`` entry found under the interpreter's site-packages directories (``purelib`` first) in front of
  ``CPLUS_INCLUDE_PATH``; the whole
  output goes to a log beside the unpacked bundle, and the build is killed, process group and all, at
  ``timeout`` seconds (``$PATCHLANE_HOST_BUILD_TIMEOUT`` overrides it);
* the built wheel and the runtime pins named in ``install_with`` (from the bundle's ``wheels/``, payloads joined
  there included) are installed into the site-packages of a private virtual environment beside the unpacked
  bundle (``host-env-X.Y``, see ``make_env``), never into the interpreter's: a package installed there would
  change what every other lane on the host imports (a TransformerEngine in site-packages broke megatron-core's
  optional ``import transformer_engine`` in the lanes running beside it). TransformerEngine finds its core
  library and its extension only beside its imported package or in ``sysconfig``'s ``purelib``, never elsewhere
  on ``PYTHONPATH``; that environment's ``purelib`` is the private directory, so only the lanes of a base with
  host builds run with its interpreter (``harness/lane/lanes.py``), every other lane with the plain one.

Every failure is a ``BuildError`` (exit 6) naming the package, the step and the log, with the log's last lines.
Standard library only: the bootstrap runs it before the harness's dependencies are installed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import site as sitemod
import subprocess
import sys
import sysconfig
import time
from importlib import metadata
from pathlib import Path

from harness.base.hashing import sha256_file
from harness.errors import BuildError

TIMEOUT_ENV = "PATCHLANE_HOST_BUILD_TIMEOUT"  # seconds; overrides the manifest's timeout (a build-only call)
TAIL = 20  # log lines quoted in an error
HEARTBEAT = 60  # seconds between progress lines while a build runs


ENV_PREFIX = "host-env-"  # + X.Y: the private environment of a bundle's host builds, beside the unpacked bundle
ENV_PTH = "patchlane-host-env.pth"  # in its site-packages: the creating interpreter's site directories after it


def site_packages() -> Path:
    """The interpreter's site-packages (``purelib``): where the build looks for ``include_dirs``."""
    return Path(sysconfig.get_paths()["purelib"])


def env_dir(work_root: Path, version: str) -> Path:
    """The private environment of the host builds of the bundle unpacked in ``work_root``, for Python ``version``."""
    return work_root / f"{ENV_PREFIX}{version}"


def env_python(env: Path) -> Path:
    return env / "bin" / "python"


def env_site(env: Path) -> Path:
    """The environment's ``purelib``: where its host builds are installed, and where TransformerEngine looks."""
    out = subprocess.run([str(env_python(env)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        raise BuildError(f"host builds: the private environment {env} does not start: {out.stderr.strip()[-300:]}")
    return Path(out.stdout.strip())


def make_env(env: Path) -> Path:
    """A virtual environment at ``env`` (made once) that sees what this interpreter sees: its own site-packages
    (``env_site``, empty but for the host builds) first, then this interpreter's site directories, added by a
    ``.pth`` file with their own ``.pth`` files processed. Not ``--system-site-packages``: the GPU host's
    interpreter is itself a virtual environment, and that option would reach its base interpreter's packages
    instead of its own (torch). Its ``.complete`` marker names this interpreter: one made by another (a host build
    compiled against another torch) is made again. Returns its site-packages."""
    marker = env / ".complete"
    if creator(env) == sys.executable:
        return env_site(env)
    shutil.rmtree(env, ignore_errors=True)
    proc = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"host builds: cannot make the private environment {env} with {sys.executable} -m venv "
                         f"(exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    site = env_site(env)
    user = [sitemod.getusersitepackages()] if sitemod.ENABLE_USER_SITE else []
    dirs = [d for d in [*getattr(sitemod, "getsitepackages", list)(), *user] if Path(d).is_dir() and Path(d) != site]
    (site / ENV_PTH).write_text("".join(f"import site; site.addsitedir({d!r})\n" for d in dirs))
    marker.write_text(sys.executable + "\n")
    return site


def creator(env: Path) -> str | None:
    """The interpreter that made the environment ``env`` (whose site directories it sees), or None if unmade."""
    marker = env / ".complete"
    return marker.read_text().strip() if marker.is_file() else None


def installed_version(name: str, site: Path) -> str | None:
    """The version of distribution ``name`` installed in ``site`` (that directory only), or None."""
    want = re.sub(r"[-_.]+", "-", name).lower()
    for dist in metadata.distributions(path=[str(site)]):
        if re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower() == want:
            return dist.version
    return None


def tail(log: Path, lines: int = TAIL) -> str:
    text = log.read_text(errors="replace") if log.is_file() else ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def cpus() -> int:
    """The CPUs this process may run on (its affinity: a container's share, not the whole machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def site_dirs(site: Path) -> list[Path]:
    """``site`` first, then the interpreter's other site-packages directories (a distribution's Python may
    keep pip's installs in one and its own packages in another)."""
    out = [site]
    for extra in [sysconfig.get_paths()["platlib"], *getattr(sitemod, "getsitepackages", list)()]:
        if Path(extra) not in out:
            out.append(Path(extra))
    return out


def include_path(include_dirs: list[str], bases: list[Path]) -> list[str]:
    """Each of ``include_dirs`` under the first of ``bases`` that holds it; one that none holds is left out."""
    out = []
    for inc in include_dirs:
        found = next((base / inc for base in bases if (base / inc).is_dir()), None)
        if found is not None:
            out.append(str(found))
    return out


def build_env(entry: dict, site: Path, tools: Path, base: dict[str, str]) -> dict[str, str]:
    """The environment of the build: ``base`` with MAX_JOBS, the manifest's env, include dirs and the tools first."""
    env = dict(base)
    env.setdefault("MAX_JOBS", str(cpus()))
    env.update(entry.get("env", {}))

    def front(key: str, first: list[str]) -> None:
        rest = [p for p in env.get(key, "").split(os.pathsep) if p]
        if first or rest:
            env[key] = os.pathsep.join(first + rest)

    front("CPLUS_INCLUDE_PATH", include_path(entry.get("include_dirs", []), site_dirs(site)))
    front("PYTHONPATH", [str(tools)])
    front("PATH", [str(tools / "bin")])
    return env


def _pip(args: list[str], what: str, name: str, log: Path, env: dict[str, str] | None = None) -> None:
    with open(log, "a") as out:
        out.write(f"$ pip {' '.join(args)}\n")
        out.flush()
        proc = subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check"], stdout=out,
                              stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        raise BuildError(f"host build {name}: {what} failed (pip exit {proc.returncode}; log {log}):\n{tail(log)}")


def _build(cmd: list[str], env: dict[str, str], log: Path, timeout: int, name: str) -> float:
    """Run the build command with its output in ``log``; seconds it took. Killed (its whole group) at ``timeout``."""
    start = time.monotonic()
    with open(log, "a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            while True:
                left = start + timeout - time.monotonic()
                try:
                    code = proc.wait(timeout=max(0.0, min(HEARTBEAT, left)))
                    break
                except subprocess.TimeoutExpired:
                    if left <= HEARTBEAT:
                        raise
                    print(f"> host build {name}: {time.monotonic() - start:.0f} s ... {tail(log, 1)[:160]}",
                          file=sys.stderr, flush=True)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise BuildError(f"host build {name}: not done after {timeout} s, killed (log {log}):\n{tail(log)}",
                             hint=f"a call that only builds may allow more ({TIMEOUT_ENV}=SECONDS) and keep "
                                  "the wheel for the next host (--host-wheels DIR)") from None
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    if code != 0:
        raise BuildError(f"host build {name}: the build failed (exit {code}; log {log}):\n{tail(log)}")
    return time.monotonic() - start


def wheel_stem(provides: str) -> str:
    """The start of the wheel file names of ``name==version`` (``transformer_engine_torch-2.20.2-``)."""
    name, version = provides.split("==", 1)
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"


def _install(wheel: Path, entry: dict, wheels: Path, site: Path, name: str, log: Path) -> None:
    # into the private environment's site-packages only: the interpreter's stays as it was
    _pip(["install", "--no-deps", "--no-index", "--upgrade", "--find-links", str(wheels), "--target", str(site),
          str(wheel), *entry.get("install_with", [])], f"installing {wheel.name} into {site}", name, log)


def _dist_name(requirement: str) -> str:
    """The normalized distribution name a PEP 508 requirement starts with (``torch>=2.1`` -> ``torch``)."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else requirement.strip().lower()


def missing_build_requires(entry: dict, sdist: Path) -> list[str]:
    """The sdist's ``[build-system] requires`` that neither the manifest's ``build_requires`` nor this interpreter
    provide. The build runs without isolation, against this interpreter's packages (torch, for a torch
    extension): a requirement missing here fails inside pip with a long traceback, so it is named first.
    Presence only (no version comparison: the standard library has no specifier parser); an sdist whose
    pyproject.toml cannot be read, or an interpreter without ``tomllib``, gives no answer ([])."""
    import tarfile

    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        return []
    try:
        with tarfile.open(sdist) as tf:
            member = next((m for m in tf.getmembers() if m.isfile() and m.name.count("/") == 1
                           and m.name.endswith("/pyproject.toml")), None)
            fh = tf.extractfile(member) if member is not None else None
            requires = tomllib.loads(fh.read().decode()).get("build-system", {}).get("requires", []) if fh else []
    except (OSError, tarfile.TarError, tomllib.TOMLDecodeError, UnicodeDecodeError, AttributeError):
        return []
    carried = {_dist_name(r) for r in entry.get("build_requires", [])}
    missing = []
    for req in requires if isinstance(requires, list) else []:
        if not isinstance(req, str) or _dist_name(req) in carried:
            continue
        try:
            metadata.distribution(_dist_name(req))
        except metadata.PackageNotFoundError:
            missing.append(req)
    return missing


def ensure(entry: dict, bundle_dir: Path, work_root: Path, prebuilt: Path | None = None) -> str:
    """Build and install one ``bundle.json`` host-build entry into the bundle's private environment
    (``env_dir(work_root, X.Y)``) unless installed there already; a line saying what was done.

    A wheel of it in ``prebuilt`` (one an earlier host of the same image built, kept in ``host-wheels/``) is
    installed instead of building; the built wheel is kept in ``work_root/host-wheels/`` for that.
    """
    name, version = entry["provides"].split("==", 1)
    site = make_env(env_dir(work_root, f"{sys.version_info[0]}.{sys.version_info[1]}"))
    have = installed_version(name, site)
    if have == version:
        return f"{name} {version} already installed in {site}: not built again"
    log = work_root / f"host-build-{name}.log"
    wheels = bundle_dir / "wheels"
    also = f" with {', '.join(entry['install_with'])}" if entry.get("install_with") else ""
    found = sorted(prebuilt.glob(wheel_stem(entry["provides"]) + "*.whl")) if prebuilt is not None else []
    if found:
        _install(found[-1], entry, wheels, site, name, log)
        return (f"installed {found[-1]} (sha256 {sha256_file(found[-1])[:16]}), built earlier, not built here, "
                f"into {site}{also}")
    missing = missing_build_requires(entry, bundle_dir / entry["file"])
    if missing:
        raise BuildError(f"host build {name}: {Path(entry['file']).name} builds against this interpreter's "
                         f"{', '.join(missing)}, and {sys.executable} has no {_dist_name(missing[0])}"
                         + (f" (nor {', '.join(_dist_name(m) for m in missing[1:])})" if missing[1:] else "")
                         + "; nothing was built",
                         hint="run the bootstrap with the interpreter that has it (the GPU image's python, with "
                              "its torch), or install it there first")
    work = work_root / f"host-build-{name}"
    shutil.rmtree(work, ignore_errors=True)
    log.unlink(missing_ok=True)
    work.mkdir(parents=True)
    tools = work / "tools"
    tools.mkdir()
    try:
        if entry.get("build_requires"):
            _pip(["install", "--no-deps", "--no-index", "--find-links", str(wheels), "--target", str(tools),
                  *entry["build_requires"]], "installing its build requirements", name, log)
        env = build_env(entry, site_packages(), tools, dict(os.environ))
        timeout = int(os.environ.get(TIMEOUT_ENV) or entry["timeout"])
        print(f"> host build {name} {version}: pip wheel {entry['file']} (MAX_JOBS={env['MAX_JOBS']}, "
              f"timeout {timeout} s, log {log})", file=sys.stderr, flush=True)
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-v",
               "--disable-pip-version-check", "-w", str(work / "dist"), str(bundle_dir / entry["file"])]
        spent = _build(cmd, env, log, timeout, name)
        built = sorted((work / "dist").glob("*.whl"))
        if len(built) != 1:
            raise BuildError(f"host build {name}: the build made {len(built)} wheels, expected one (log {log})")
        kept = work_root / "host-wheels" / built[0].name
        kept.parent.mkdir(exist_ok=True)
        shutil.copyfile(built[0], kept)
        _install(kept, entry, wheels, site, name, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return (f"built {kept.name} in {spent:.0f} s (sha256 {sha256_file(kept)[:16]}, kept in {kept.parent}), "
            f"installed into {site}{also}")
