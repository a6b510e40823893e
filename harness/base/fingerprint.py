"""Keys for remembered answers: what an interpreter imports, what a host's torch sees, what an env holds.

Standard library only (the noxfile imports it before anything is installed).

A remembered answer is only as good as its key, and a stale answer is worse than a slow one:
every key here covers everything known to change the answer, and the cost of computing
one is a single interpreter start without third-party imports (tens of milliseconds)
instead of the answer's own cost (an import of torch: seconds).

* ``interpreter`` -- the interpreter as the check will see it: ``sys.executable``, its real
  path and that file's size/mtime/inode, ``sys.version``, prefixes and flags, and every
  ``sys.path`` entry the given environment produces (``PYTHONPATH`` included) with its
  listing: each file's size, mtime and inode, each directory's inode (not its mtime, which
  moves when Python writes ``__pycache__`` into it; ``__pycache__`` itself is left out).
  Installing, upgrading or removing a package (a new directory, a renamed ``dist-info``),
  adding a ``.pth`` file or a user site, or swapping the interpreter changes it; so do the
  listings of the ``LD_LIBRARY_PATH`` directories and ``/etc/ld.so.cache`` (rewritten when
  system libraries are installed). Not seen:
  an edit in place of a file inside an installed package's directory (set
  ``PATCHLANE_RECHECK=1`` to ignore every remembered answer).
* ``environment`` -- the environment minus variables that only describe the terminal or
  the login session (``PWD``, ``SSH_*``, ``TERM`` ...); anything else, known or not, is part of the key.
* ``gpu_driver`` -- the NVIDIA driver as the kernel exposes it: boot id, driver version,
  the GPUs and their descriptions under ``/proc/driver/nvidia``, MIG capabilities, device nodes.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

RECHECK_ENV = "PATCHLANE_RECHECK"

# Variables that describe the terminal, the shell or the login, never what Python imports or torch sees.
_VOLATILE = {"PWD", "OLDPWD", "SHLVL", "_", "TERM", "COLORTERM", "COLUMNS", "LINES", "DISPLAY", "XAUTHORITY",
             "LS_COLORS", "PS1", "PS2", "PROMPT_COMMAND", "MAIL", "STY", "WINDOW", "WINDOWID", "HISTFILE",
             "HISTSIZE", "HISTFILESIZE", "HISTCONTROL", "DBUS_SESSION_BUS_ADDRESS", "LESSOPEN", "LESSCLOSE",
             "HARNESS_RUN_DIR", "NOX_CURRENT_SESSION", RECHECK_ENV,
             # where bytecode is cached (harness/base/settings.py), never what is imported
             "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE", "PATCHLANE_PYCACHE"}
_VOLATILE_PREFIXES = ("SSH_", "TMUX", "TERM_", "XDG_SESSION_", "VSCODE_", "KITTY_", "ITERM_", "GPG_")

_PROBE = r"""
import json, os, sys
def entry(e):
    try:
        st = e.stat()
    except OSError:
        return [e.name, None]
    # a directory by identity only: its mtime moves when Python adds __pycache__ to it
    return [e.name, "dir", st.st_ino] if e.is_dir() else [e.name, st.st_size, st.st_mtime_ns, st.st_ino]
def listing(p):
    try:
        with os.scandir(p) as it:
            return sorted(entry(e) for e in it if e.name != "__pycache__")
    except OSError:
        return None
def ident(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev]
real = os.path.realpath(sys.executable)
print(json.dumps({
    "executable": sys.executable, "real": real, "real_stat": ident(real), "version": sys.version,
    "prefix": sys.prefix, "base_prefix": sys.base_prefix, "flags": repr(sys.flags), "cwd": os.getcwd(),
    "path": [[p, listing(p or ".")] for p in sys.path],
    "ld_library_path": [[d, listing(d)] for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d],
    "ld_so_cache": ident("/etc/ld.so.cache"),
}))
"""


class ProbeError(RuntimeError):
    """The interpreter could not be started or did not answer."""


def interpreter(python: str, env: dict[str, str] | None = None, cwd: Path | str | None = None) -> dict:
    """The fingerprint of ``python`` run with ``env`` (default: this process's) in ``cwd``."""
    try:
        proc = subprocess.run([python, "-c", _PROBE], env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ProbeError(f"cannot run {python}: {exc}") from None
    if proc.returncode != 0 or not proc.stdout.strip():
        raise ProbeError(f"{python} did not answer the probe (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) without the terminal and login-session variables."""
    source: Mapping[str, str] = os.environ if env is None else env
    return {k: v for k, v in sorted(source.items())
            if k not in _VOLATILE and not k.startswith(_VOLATILE_PREFIXES)}


def file_identity(path: str | Path) -> list | None:
    """Real path, size, mtime and inode of ``path`` (None when it does not exist)."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return None
    return [real, st.st_size, st.st_mtime_ns, st.st_ino]


def gpu_driver(proc_root: Path = Path("/proc"), dev_root: Path = Path("/dev")) -> dict:
    """What the kernel says about NVIDIA GPUs, read from files (no driver call, no CUDA init)."""
    def read(path: Path) -> str | None:
        try:
            return path.read_text(errors="replace")
        except OSError:
            return None

    nv = proc_root / "driver" / "nvidia"
    gpus = {}
    if (nv / "gpus").is_dir():
        for gpu in sorted((nv / "gpus").iterdir()):
            gpus[gpu.name] = read(gpu / "information")
    caps = []
    if (nv / "capabilities").is_dir():
        caps = sorted(str(p.relative_to(nv)) for p in (nv / "capabilities").rglob("*"))
    try:
        nodes = sorted(p.name for p in dev_root.iterdir() if p.name.startswith("nvidia"))
    except OSError:
        nodes = []
    return {"boot_id": read(proc_root / "sys" / "kernel" / "random" / "boot_id"),
            "version": read(nv / "version"), "gpus": gpus, "capabilities": caps, "nodes": nodes}


def digest(*parts) -> str:
    """sha256 of the parts as canonical JSON."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def source(*modules) -> str:
    """sha256 of the named modules' source files: a remembered answer dies with the code that gave it."""
    h = hashlib.sha256()
    for module in modules:
        h.update(Path(module.__file__).read_bytes())
    return h.hexdigest()


def recheck_requested() -> bool:
    return os.environ.get(RECHECK_ENV, "") not in ("", "0")


class Memo:
    """Answers remembered as small JSON files in one directory, one file per key.

    ``get`` returns None for an unknown key, a damaged file, or when ``PATCHLANE_RECHECK`` is set;
    ``put`` writes atomically and never fails the caller (a read-only cache only makes runs slower).
    """

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / f"{key[:32]}.json"

    def get(self, key: str):
        if recheck_requested():
            return None
        try:
            record = json.loads(self._path(key).read_text())
        except (OSError, ValueError):
            return None
        return record.get("value") if isinstance(record, dict) and record.get("key") == key else None

    def put(self, key: str, value, **context) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=self.directory)
        except OSError:
            return
        try:
            mask = os.umask(0o022)
            os.umask(mask)
            os.fchmod(fd, 0o666 & ~mask)  # mkstemp makes 0600; a cache file gets the umask's mode like the rest
            with os.fdopen(fd, "w") as fh:
                json.dump({"key": key, "value": value, **context}, fh, indent=1, sort_keys=True, default=str)
            os.replace(tmp, self._path(key))
        except OSError:
            Path(tmp).unlink(missing_ok=True)
