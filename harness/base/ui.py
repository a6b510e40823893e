"""Console output: results (data) on stdout, progress and messages on stderr.

Every free text that reaches a rich console goes through ``text()`` or is printed
with ``markup=False``: titles, reasons and error messages hold brackets
(``[sq,b,h,sk]``) that rich would otherwise eat as markup.

Progress: on a terminal, a spinner or a bar; anywhere else (nox, CI, a pipe) plain
lines -- what starts, a heartbeat while it runs, and what it came to (size, time) --
so a long download or install never looks like a hang. ``-q`` silences progress and
notes (warnings and errors stay), ``-v`` adds detail lines.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time

from rich.console import Console
from rich.text import Text

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)

verbosity = 0  # -1 quiet, 0 normal, 1+ verbose
_noted: set[str] = set()  # notes already shown by this command (note_once)
HEARTBEAT_S = 15.0  # seconds between "still running" lines when stderr is not a terminal


def set_verbosity(level: int) -> None:
    """Set at the start and end of each command (harness.main): also forgets the notes said once."""
    global verbosity
    verbosity = level
    _noted.clear()


def text(value, style: str | None = None) -> Text:
    """A rich Text cell: ``value`` shown literally, never parsed as markup."""
    return Text(str(value), style=style or "")


def step(message: str) -> None:
    if verbosity >= 0:
        err.print(Text.assemble(("> ", "bold cyan"), str(message)))


def note(message: str) -> None:
    if verbosity >= 0:
        err.print(f"  {message}", markup=False)


def note_once(message: str) -> None:
    """A note shown the first time this process says it (lanes sharing one build repeat the same facts)."""
    if message not in _noted:
        _noted.add(message)
        note(message)


def detail(message: str) -> None:
    """Shown with -v only."""
    if verbosity >= 1:
        err.print(f"  {message}", markup=False)


def warn(message: str) -> None:
    err.print(Text.assemble(("warning: ", "yellow"), str(message)))


def info(message: str) -> None:
    """A message for the person (not data): stderr, shown unless -q."""
    if verbosity >= 0:
        err.print(str(message), markup=False)


def data(value: str) -> None:
    """A line of data on stdout, exactly as given."""
    out.print(str(value), markup=False, highlight=False)


def json_data(value) -> None:
    """``value`` as one line of JSON on stdout, encoded by the json module's C encoder and written in one go:
    rich's ``print_json`` highlights and measures every line (a minute on a comparison of 100,000 cases), and
    ``json.dump`` or an indent fall back to the pure-Python encoder and its many small writes."""
    out.file.flush()
    sys.stdout.write(json.dumps(value, ensure_ascii=False) + "\n")
    sys.stdout.flush()


FORMATS = ("auto", "table", "plain")


def plain(fmt: str = "auto") -> bool:
    """Whether rows go out as plain lines: asked for, or ``auto`` with stdout not a terminal (a pipe, a file)."""
    return fmt == "plain" or (fmt == "auto" and not out.is_terminal)


def tabular(columns, rows, *, fmt: str = "auto", title: str | None = None, whole: tuple[str, ...] = ()) -> None:
    """Rows of cells (str or Text): a rich table on a terminal; elsewhere one line per row, the cells separated
    by tabs, the header first, nothing cut, wrapped or styled (``grep``, ``cut -f``, ``column -t`` read it).
    ``whole``: columns whose lines are never broken inside (names): at least as wide as their longest line."""
    rows = [list(r) for r in rows]
    if plain(fmt):
        lines = ["\t".join(columns)] + ["\t".join(" ".join(str(c).split("\n")) for c in r) for r in rows]
        out.file.write("\n".join(lines) + "\n")
        return
    from rich.table import Table

    table = Table(title=title)
    for i, col in enumerate(columns):
        widest = max((len(line) for r in rows for line in str(r[i]).splitlines()), default=0) if col in whole else None
        table.add_column(col, overflow="fold", min_width=widest)  # a long name wraps onto the next line, never "…"
    for r in rows:
        table.add_row(*(c if isinstance(c, Text) else text(c) for c in r))
    out.print(table)


def interactive() -> bool:
    return err.is_terminal and not os.environ.get("CI")


def human_bytes(n: float | None) -> str:
    if n is None:
        return "? B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def _seconds(t: float) -> str:
    return f"{t:.0f} s" if t >= 10 else f"{t:.1f} s"


class _Activity:
    """What a ``status`` block reports when it ends; set ``result`` (e.g. a size) inside the block."""

    def __init__(self, message: str):
        self.message = message
        self.result = ""
        self.started = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


@contextlib.contextmanager
def status(message: str):
    """A spinner on a terminal; elsewhere a start line, heartbeats, and a done line with the elapsed time."""
    act = _Activity(message)
    if verbosity < 0:
        yield act
        return
    if interactive():
        with err.status(Text(message)):
            yield act
        return
    step(message)
    sys.stderr.flush()
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            err.print(f"  ... still {message} ({_seconds(act.elapsed)})", markup=False)
            sys.stderr.flush()

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    ok = False
    try:
        yield act
        ok = True
    finally:
        stop.set()
        thread.join()
        if ok and (act.result or act.elapsed >= 2):
            err.print(f"  done in {_seconds(act.elapsed)}" + (f": {act.result}" if act.result else ""), markup=False)
            sys.stderr.flush()


class Transfer:
    """Byte progress of one download: a bar on a terminal, a line every HEARTBEAT_S seconds elsewhere."""

    def __init__(self, label: str, total: int | None):
        self.label, self.total, self.done = label, total, 0
        self.started = self._last = time.monotonic()
        self._bar = None

    def __enter__(self):
        if verbosity < 0:
            return self
        if interactive():
            from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

            self._bar = Progress("{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                 console=err, transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=self.total)
        else:
            step(f"downloading {self.label} ({human_bytes(self.total) if self.total else 'size unknown'})")
        return self

    def advance(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.advance(self._task, n)
        elif verbosity >= 0 and time.monotonic() - self._last >= HEARTBEAT_S:
            self._last = time.monotonic()
            share = f" ({100 * self.done / self.total:.0f} %)" if self.total else ""
            err.print(f"  ... {human_bytes(self.done)}{share} after {_seconds(self._last - self.started)}",
                      markup=False)
            sys.stderr.flush()

    def __exit__(self, exc_type, exc, tb):
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
        elif verbosity >= 0 and exc_type is None:
            took = time.monotonic() - self.started
            err.print(f"  downloaded {human_bytes(self.done)} in {_seconds(took)}", markup=False)
            sys.stderr.flush()
        return False


def dir_size(path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total
