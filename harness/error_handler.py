"""Turn any failure into one clean line on stderr and a documented exit code."""

from __future__ import annotations

import contextlib
import sys
import traceback

from harness.errors import Exit, HarnessError
from harness.store import default_root


class _Done(Exception):
    def __init__(self, code: int):
        self.code = code


@contextlib.contextmanager
def handled():
    """Run the body; map HarnessError / Ctrl-C / unexpected errors to ``SystemExit(code)``."""
    try:
        yield
    except HarnessError as exc:
        print(f"harness: error: {exc}", file=sys.stderr)
        if exc.hint:
            print(f"harness: hint: {exc.hint}", file=sys.stderr)
        raise SystemExit(int(exc.exit_code)) from None
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        raise SystemExit(int(Exit.INTERRUPT)) from None
    except Exception as exc:  # a bug in the harness: keep the traceback, print one line
        log = default_root() / "last-error.log"
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(traceback.format_exc())
            where = f" (traceback in {log})"
        except OSError:
            where = ""
        print(f"harness: internal error: {type(exc).__name__}: {exc}{where}", file=sys.stderr)
        raise SystemExit(int(Exit.INTERNAL)) from None
