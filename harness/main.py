"""Command line: parse arguments and dispatch to ``harness.commands.<verb>``; nothing else."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

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


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=Path, default=None,
                   help="repository root (default: found from the current directory)")
    p.add_argument("--cache", type=Path, default=None,
                   help="cache for artefacts, bases and builds (default: $PATCHLANE_HOME or ~/.cache/patchlane)")


def _source(p: argparse.ArgumentParser) -> None:
    p.add_argument("--artifacts", type=Path, action="append", default=[], metavar="DIR",
                   help="look for pinned artefacts in DIR before downloading (repeatable)")
    p.add_argument("--bundle-dir", type=Path, default=None, metavar="DIR",
                   help="take every build from this unpacked offline bundle (see 'python -m harness.bootstrap')")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter that imports the builds and runs reproducers (default: this one)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("run", help="run a pack's lanes: build, import-check, reproducer, receipt",
                       description="Build each lane of PACK (baseline and patched), import-check it, run the "
                                   "pack's reproducer against it, write a receipt per lane and update "
                                   "tracking.toml. Lanes that need a GPU this host lacks are reported as skipped.")
    p.add_argument("pack", help="pack id, e.g. 09")
    p.add_argument("--lane", action="append", default=[], help="run only this lane (repeatable)")
    p.add_argument("--receipts-dir", type=Path, default=None, help="write receipts here (default: receipts/)")
    p.add_argument("--no-tracking", action="store_true", help="do not update tracking.toml")
    p.add_argument("--quiet", action="store_true", help="do not echo the reproducer's output")
    p.add_argument("--result-file", type=Path, default=None,
                   help="also write {\"exit\": N, \"lanes\": [...]} here (used by the nox sessions)")
    _source(p)
    _common(p)

    p = sub.add_parser("prepare", help="materialize, apply, build and import-check a pack's lanes (no reproducer)")
    p.add_argument("pack")
    p.add_argument("--lane", action="append", default=[])
    p.add_argument("--no-import-check", action="store_true")
    _source(p)
    _common(p)

    p = sub.add_parser("materialize", help="fetch, verify and unpack a pinned base into a git checkout")
    p.add_argument("target", help="a target in upstream/, e.g. liger-kernel")
    p.add_argument("--base", default=None, help="base name (default: the manifest's default_base)")
    p.add_argument("--artifacts", type=Path, action="append", default=[], metavar="DIR")
    _common(p)

    p = sub.add_parser("apply", help="apply a pack's series (with its dependencies') on a base; print the tree")
    p.add_argument("pack")
    p.add_argument("--base", default=None, help="base name (default: the pack's base, else the target's default)")
    p.add_argument("--artifacts", type=Path, action="append", default=[], metavar="DIR")
    _common(p)

    p = sub.add_parser("check", help="validate tracking.toml, manifests and patch headers; with --apply, "
                                      "apply every series on its bases")
    p.add_argument("--apply", action="store_true", help="also apply every pack's series on each base its lanes use")
    p.add_argument("--artifacts", type=Path, action="append", default=[], metavar="DIR")
    _common(p)

    p = sub.add_parser("list", help="table of packs: target, kind, state, lanes, latest verdicts")
    _common(p)

    p = sub.add_parser("bundle", help="write an offline bundle (builds + wheels) for GPU hosts without network")
    p.add_argument("packs", nargs="+", help="pack ids")
    p.add_argument("-o", "--output", type=Path, required=True, help="output file, e.g. dist/bundle-09.tar.xz")
    p.add_argument("--python-version", default="3.12", help="Python version of the GPU host (default 3.12)")
    p.add_argument("--wheels", type=Path, default=None, metavar="DIR",
                   help="take the dependency wheels from DIR instead of downloading them")
    p.add_argument("--artifacts", type=Path, action="append", default=[], metavar="DIR")
    _common(p)

    p = sub.add_parser("receipts", help="import receipts brought back from a GPU host; verify or show receipts")
    rs = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = rs.add_parser("import", help="unpack a tar of receipts into receipts/, verify logs, update tracking.toml")
    q.add_argument("archive", type=Path)
    _common(q)
    q = rs.add_parser("verify", help="check every receipt's log against its sha256")
    _common(q)
    q = rs.add_parser("show", help="print the latest receipt of each lane of a pack")
    q.add_argument("pack")
    _common(q)
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
