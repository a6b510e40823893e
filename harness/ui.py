"""Console output: one rich console on stderr for progress, stdout for results."""

from __future__ import annotations

import contextlib
import os
import sys

from rich.console import Console

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)


def step(message: str) -> None:
    err.print(f"[bold cyan]>[/] {message}")


def note(message: str) -> None:
    err.print(f"  {message}")


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {message}")


@contextlib.contextmanager
def status(message: str):
    """A spinner on a terminal, a plain line elsewhere (CI logs stay readable)."""
    if err.is_terminal and not os.environ.get("CI"):
        with err.status(message):
            yield
    else:
        step(message)
        sys.stderr.flush()
        yield
