"""Arguments several commands share."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=Path, default=None,
                   help="repository root (default: found from the current directory)")
    p.add_argument("--cache", type=Path, default=None,
                   help="cache for artefacts, bases and builds (default: $PATCHLANE_HOME, else "
                        "$XDG_CACHE_HOME/patchlane, else ~/.cache/patchlane)")


def artifacts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--artifacts", type=Path, action="append", default=[], metavar="DIR",
                   help="look for pinned artefacts in DIR before downloading (repeatable)")


def source(p: argparse.ArgumentParser) -> None:
    artifacts(p)
    p.add_argument("--bundle-dir", type=Path, default=None, metavar="DIR",
                   help="take every build from this unpacked offline bundle (see 'python -m harness.bootstrap')")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter that imports the builds and runs reproducers (default: this one)")
