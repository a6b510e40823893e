"""Child processes that never outlive the harness, however it ends.

Upstream code the harness starts (a reproducer, ``pip wheel`` and the build
backend it spawns) runs under a small guard process that leads its own process
group: the command and everything it starts without leaving that group.

* The harness kills the whole group at a time limit, on Ctrl-C, on SIGTERM or
  SIGHUP (``error_handler`` turns those into exceptions), or on any error
  (``kill_group``).
* If the harness dies without a chance to clean up (SIGKILL, the OOM killer),
  the kernel closes its end of the guard's stdin pipe; the guard sees end of
  file and kills its group, so nothing keeps writing into the cache after the
  store lock is gone.

The guard exits with the command's exit status, and re-raises the signal that
killed the command, so callers read the status as if they had run it directly.

Upstream code runs only through here, so this is also where our credentials
are kept from it: the command's environment never holds ``CREDENTIALS``
(the GitHub tokens the harness and ``gh`` read, and the CI runner's own).
Standard library only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

_GUARD = r"""
import ctypes, os, signal, subprocess, sys, threading
lifeline = int(sys.argv[1])
try:  # orphans of the command (a backend's child that setsid'ed, then lost its parent) become ours, not init's
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
except (OSError, AttributeError):
    pass
child = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL)
def tree():
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [os.getpid()]
    while todo:
        for pid in parents.get(todo.pop(), []):
            found.append(pid)
            todo.append(pid)
    return found
def watch():
    try:
        while os.read(lifeline, 1):
            pass
    finally:  # the harness is gone: the command and all it started go too, in its group or not (setsid)
        for _ in range(100):
            pids = tree()
            if not pids:
                break
            for pid in reversed(pids):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        os.killpg(0, signal.SIGKILL)
threading.Thread(target=watch, daemon=True).start()
code = child.wait()
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


CREDENTIALS = (
    "GITHUB_TOKEN", "GH_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN",  # harness/upstream/github.py, gh
    "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_URL",  # CI runner
)


def without_credentials(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) without ``CREDENTIALS``."""
    return {k: v for k, v in (os.environ if env is None else env).items() if k not in CREDENTIALS}


class Guarded(subprocess.Popen):
    """A guard process; ``lifeline`` is the write end of its lifeline pipe (None once closed)."""

    lifeline: int | None = None


def popen(cmd: list[str], **kwargs) -> Guarded:
    """Start ``cmd`` under a guard, in a new session; ``kwargs`` as for ``subprocess.Popen``.

    The command's stdin is /dev/null and its environment ``env`` (default: ours) without
    ``CREDENTIALS``. The guard's lifeline is a pipe whose only write end the
    harness holds (``proc.lifeline``); ``wait`` / ``kill_group`` close it.
    """
    env = without_credentials(kwargs.pop("env", None))
    read_end, write_end = os.pipe()  # both non-inheritable: no other child of the harness holds them
    try:
        # -S: the guard needs the standard library only, not site's .pth files (an editable install's import hook
        # costs every guarded command tens of milliseconds more)
        proc = Guarded([sys.executable, "-I", "-S", "-c", _GUARD, str(read_end), *cmd], stdin=subprocess.DEVNULL,
                       pass_fds=(read_end,), start_new_session=True, env=env, **kwargs)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    proc.lifeline = write_end
    return proc


def release(proc: Guarded) -> None:
    """Close the lifeline of a guard that has ended (once)."""
    if proc.lifeline is not None:
        fd, proc.lifeline = proc.lifeline, None
        os.close(fd)


def kill_group(proc: Guarded) -> None:
    """Kill everything the guard started, in its process group or not, then the group, and reap the guard.

    A process that left the group (``setsid``) is found as a descendant of the guard, which adopts the
    orphans among them (a child subreaper): they are killed while the guard lives to keep them its own."""
    kill_descendants(proc.pid)
    kill_pgid(proc.pid)
    proc.wait()
    release(proc)


def run(cmd: list[str], timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Like ``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)``, under a guard.

    Any exception while waiting (the timeout, Ctrl-C, SIGTERM turned into an exception, ...) kills
    the whole group before it propagates.
    """
    proc = popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        kill_group(proc)
        raise
    release(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def process_exists(pid: int) -> bool:
    """Whether a process ``pid`` exists (a process of another user counts: it cannot be signalled, but is there)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def descendants(pid: int) -> list[int]:
    """The live (not zombie) processes below ``pid``, read from /proc (empty where there is no /proc)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_descendants(pid: int, rounds: int = 100) -> None:
    """SIGKILL every descendant of ``pid`` until none is left (a fork racing the kill is found next round)."""
    for _ in range(rounds):
        pids = descendants(pid)
        if not pids:
            return
        for child in reversed(pids):  # the deepest first: the guard's own child, whose end ends the guard, last
            try:
                os.kill(child, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def kill_pgid(pgid: int) -> None:
    """SIGKILL every process of group ``pgid``; a group already gone (or not ours) is left as it is."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    """Whether group ``pgid`` still has a live member (a zombie nobody reaped yet does not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False
