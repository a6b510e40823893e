"""One rank of a multi-process lane, its output passed on a whole line at a time.

``python rank_lines.py LOCK SCRIPT [ARGS...]`` runs ``python SCRIPT ARGS...`` (the same interpreter) with its
stdout and stderr on a pipe of its own, and copies each line it reads to this process's stdout in one write,
holding an exclusive ``flock`` on the file LOCK while it writes. Every rank of a lane runs under it
(``runs.launch_command``) and shares one LOCK, so the lane's log gets whole lines in the order they were
completed, whatever the ranks print and however they write it.

Why: ranks under ``torch.distributed.run`` inherit one pipe. Python's unbuffered ``print`` writes the text and its
newline in two calls, so one rank's line could land between another's text and newline, and two FIGURE lines
ended up on one log line (receipts/megatron-lm/10/20261126T042640Z-fix-dev-tp2: ``receipts verify`` refuses it).

A line longer than ``MAX_LINE`` bytes is passed on in pieces (it could not be held whole anyway); the last line
gets a newline if the script ended without one. SIGTERM, SIGINT and SIGHUP are passed to the script; this process
exits as the script did (its code, or the same signal). Standard library only: it runs in the lane's interpreter,
where the harness is not installed.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys

MAX_LINE = 1 << 20  # bytes held while waiting for a newline


def _write_locked(lock_fd: int, out_fd: int, data: bytes) -> None:
    fcntl.flock(lock_fd, fcntl.LOCK_EX)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(out_fd, view):]
    finally:
        fcntl.flock(lock_fd, fcntl.LOCK_UN)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        sys.stderr.write("usage: rank_lines.py LOCK SCRIPT [ARGS...]\n")
        return 2
    lock_fd = os.open(argv[0], os.O_RDWR | os.O_CREAT, 0o600)
    out_fd = sys.stdout.fileno()
    started: list[subprocess.Popen] = []

    def forward(signum: int, _frame) -> None:
        if not started:  # before the script exists: end here, as that signal would have ended this process
            sys.exit(128 + signum)
        started[0].send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    child = subprocess.Popen([sys.executable, *argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    started.append(child)
    assert child.stdout is not None
    pipe = child.stdout.fileno()
    pending = b""
    while True:
        try:
            chunk = os.read(pipe, 1 << 16)
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for older interpreters
            continue
        if not chunk:
            break
        pending += chunk
        cut = pending.rfind(b"\n") + 1
        if cut == 0 and len(pending) >= MAX_LINE:
            cut = len(pending)
        if cut:
            _write_locked(lock_fd, out_fd, pending[:cut])
            pending = pending[cut:]
    if pending:
        _write_locked(lock_fd, out_fd, pending + b"\n")
    code = child.wait()
    if code < 0:  # ended by a signal: end the same way, so the launcher sees what the rank saw
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be caught: no handler to undo
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
