"""Arguments several commands share."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def path(text: str) -> Path:
    """A path option, made absolute against the working directory once, where it is parsed.

    Every path the harness passes on (to pip with another ``cwd``, into ``tracking.toml``, to a
    receipt) is then the one the person meant, whichever directory the code that uses it runs in.
    ``~`` is expanded; symbolic links are kept as given.
    """
    return Path(os.path.abspath(os.path.expanduser(text)))


def common(p: argparse.ArgumentParser) -> None:

    add_verbosity(p)
    p.add_argument("--root", type=path, default=None,
                   help="repository root (default: found from the current directory)")
    p.add_argument("--cache", type=path, default=None,
                   help="cache for artefacts, bases and builds (default: $PATCHLANE_HOME, else "
                        "$XDG_CACHE_HOME/patchlane, else ~/.cache/patchlane)")


def artifacts(p: argparse.ArgumentParser) -> None:
    """Where bases come from: artefact directories and git mirrors, tried before the network."""
    p.add_argument("--artifacts", type=path, action="append", default=[], metavar="DIR",
                   help="look for pinned artefacts in DIR before downloading (repeatable)")
    p.add_argument("--git-mirrors", type=path, action="append", default=[], metavar="DIR",
                   help="fetch git bases from the bare mirror DIR/<owner>+<name>.git before the repository URL "
                        "(repeatable; also $PATCHLANE_GIT_MIRRORS, os.pathsep-separated)")


def source(p: argparse.ArgumentParser) -> None:
    artifacts(p)
    p.add_argument("--bundle-dir", type=path, default=None, metavar="DIR",
                   help="take every build from this unpacked offline bundle (see 'python -m harness.bootstrap')")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter that imports the builds and runs reproducers (default: this one)")


def add_verbosity(p: argparse.ArgumentParser, top: bool = False) -> None:
    """-v / -q, accepted before the command and after it."""
    default = 0 if top else argparse.SUPPRESS
    p.add_argument("-v", "--verbose", action="count", default=default, help="more detail on stderr (repeatable)")
    p.add_argument("-q", "--quiet", action="count", default=default,
                   help="no progress or notes on stderr (warnings and errors stay)")


def output_format(p: argparse.ArgumentParser) -> None:
    """--format for commands that print rows: a table on a terminal, plain tab-separated lines elsewhere."""
    from harness.base.ui import FORMATS

    p.add_argument("--format", choices=FORMATS, default="auto",
                   help="table (rich, fitted to the terminal) or plain (one tab-separated line per row, nothing "
                        "cut); default auto: table on a terminal, plain when stdout is a pipe or a file")


def per_target(values: list[str]) -> dict[str, str]:
    """``--lane-python TARGET=PYTHON`` values as {target: python}; a value without both halves is a usage error."""
    from harness.errors import UsageError

    out = {}
    for value in values:
        target, sep, python = value.partition("=")
        if not sep or not target or not python:
            raise UsageError(f"--lane-python {value!r}: write TARGET=PYTHON")
        out[target] = python
    return out


def artifact_options(args) -> list[str]:
    """The ``--git-mirrors`` and ``--artifacts`` a command was given, as a child harness's arguments."""
    opts: list[str] = []
    for d in args.git_mirrors:
        opts += ["--git-mirrors", str(d)]
    for d in args.artifacts:
        opts += ["--artifacts", str(d)]
    return opts
