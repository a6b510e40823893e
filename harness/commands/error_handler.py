"""Turn any failure into one clean line on stderr and a documented exit code."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import NoReturn

from harness.base.store import default_root
from harness.errors import Exit, HarnessError, Terminated

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _raise_terminated(signum, frame):
    for s in _STOP_SIGNALS:  # a second signal must not interrupt the cleanup the first one started
        signal.signal(s, signal.SIG_IGN)
    raise Terminated(signum)


@contextlib.contextmanager
def _stop_signals_raise():
    """While the body runs, SIGTERM and SIGHUP raise ``Terminated`` (they would otherwise end the
    process at once, leaving the reproducer running and scratch files behind)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise_terminated) for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def handled(cache: Path | None = None):
    """Run the body; map HarnessError / Ctrl-C / SIGTERM / unexpected errors to ``SystemExit(code)``.

    ``cache`` is the command's ``--cache`` (default: ``default_root()``); ``last-error.log`` goes there.
    """
    try:
        with _stop_signals_raise():
            yield
    except HarnessError as exc:
        if exc.exit_code == Exit.INTERNAL:  # e.g. a git command that should not fail: keep its traceback
            _internal(exc, cache)
        print(f"harness: error: {exc}", file=sys.stderr)
        if exc.hint:
            print(f"harness: hint: {exc.hint}", file=sys.stderr)
        raise SystemExit(int(exc.exit_code)) from None
    except Terminated as exc:
        print(f"harness: terminated ({signal.Signals(exc.signum).name})", file=sys.stderr)
        raise SystemExit(int(Exit.TERMINATED)) from None
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        raise SystemExit(int(Exit.INTERRUPT)) from None
    except Exception as exc:  # a bug in the harness: keep the traceback, print one line
        _internal(exc, cache)


def _internal(exc: BaseException, cache: Path | None = None) -> NoReturn:
    log = (cache or default_root()) / "last-error.log"
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(traceback.format_exc())
        where = f" (traceback in {log})"
    except OSError:
        where = ""
    print(f"harness: internal error: {type(exc).__name__}: {exc}{where}", file=sys.stderr)
    raise SystemExit(int(Exit.INTERNAL)) from None
