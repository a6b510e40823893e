"""Command line: parse arguments and dispatch to ``harness.commands.<verb>``; nothing else."""

from __future__ import annotations

import argparse
import importlib
import json

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
            "status", "body", "edit", "regen", "rebase", "absorbed", "export", "provenance"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"harness.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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
