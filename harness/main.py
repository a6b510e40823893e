"""Command line: parse arguments and dispatch to ``harness.commands.<verb>``; nothing else."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from harness import __version__
from harness.error_handler import handled
from harness.errors import __doc__ as EXIT_CODES

DESCRIPTION = """\
Stage upstream patches for ML-kernel libraries: pinned upstream bases, ordered
patch series, paired reproducer runs (baseline vs patched) and their receipts.
"""

EPILOG = "exit codes:\n" + "\n".join(
    "  " + line
    for line in EXIT_CODES.split("=" * 4, 1)[1].splitlines()[1:]
    if line.strip() and not line.startswith("====")
)


COMMANDS = ["run", "prepare", "materialize", "apply", "check", "list", "bundle", "receipts", "order", "waves",
            "status", "body", "edit", "regen", "rebase", "absorbed"]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The CLI parser; with ``only`` (a command name), just that command's subparser.

    Each command module imports what it needs (rich tables, GitPython, requests ...); parsing
    ``harness run 09`` need not import all sixteen of them, which costs a few tenths of a second.
    """
    parser = argparse.ArgumentParser(prog="harness", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in [only] if only in COMMANDS else COMMANDS:
        importlib.import_module(f"harness.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    # the command is the first word when no top-level option precedes it (only --help/--version exist)
    parser = build_parser(words[0] if words else None)
    args = parser.parse_args(argv)
    try:
        with handled():
            module = importlib.import_module(f"harness.commands.{args.command}")
            code = int(module.main(args))
    except SystemExit as exc:
        _result_file(args, int(exc.code or 0))
        raise
    _result_file(args, code)
    return code


def _result_file(args, code: int) -> None:
    """Callers that cannot see the exit code (nox) read it from ``--result-file``."""
    path = getattr(args, "result_file", None)
    if path is not None and not path.exists():
        path.write_text(json.dumps({"exit": code, "lanes": []}))
