"""Python interpreters other than the running one: their version, and where to find one.

Standard library only: the noxfile and .ci/run import this before anything is installed.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

_VERSION_PROBE = "import sys; print('%d.%d' % sys.version_info[:2])"


def python_version(exe: str, timeout: float | None = None) -> str:
    """``X.Y`` as the interpreter ``exe`` reports it; empty when it prints nothing (e.g. a failing pyenv shim)."""
    return subprocess.run([exe, "-c", _VERSION_PROBE], capture_output=True, text=True, timeout=timeout).stdout.strip()


def find_interpreter(version: str) -> str | None:
    """A ``python<version>`` that runs and is that version: the one on PATH, else a pyenv install.

    pyenv hosts often have 3.12 installed but not selected; its shim is then on PATH and
    fails when run, so each candidate is tried rather than trusted.
    """
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(glob.glob(os.path.join(root, "versions", f"{version}*", "bin", f"python{version}")))
    for exe in filter(None, candidates):
        try:
            if python_version(exe, timeout=30) == version:
                return exe
        except (OSError, subprocess.SubprocessError):
            continue
    return None
