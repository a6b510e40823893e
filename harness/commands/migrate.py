"""``harness migrate``: move what each pack declares out of tracking.toml into ``patches/<target>/<NN>/pack.toml``."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import tomlkit

from harness.base import ui
from harness.base.tomlutil import load_document
from harness.commands import _args
from harness.commands._context import find_root
from harness.errors import ConfigError, WriteError
from harness.lane.tracking import SCHEMA, Tracking, layout
from harness.lane.tracking.document import locked, replace_text

JSON_SCHEMA = 1


def register(sub) -> None:
    p = sub.add_parser("migrate", help="move each pack's declarations from tracking.toml to its pack.toml",
                       description="An older tracking.toml held each pack's lanes, suites, domain, evidence, "
                                   "related decisions and notes in its [packs.NN] table, and a validation record "
                                   "per lane. This moves the declarations, key by key and unchanged, to "
                                   "patches/<target>/<NN>/pack.toml beside the pack's series, drops the validation "
                                   "records (receipts/ hold them; run 'harness receipts sync' after) and leaves "
                                   "tracking.toml with where each pack stands (docs/layout.md). The packs read the "
                                   "same before and after; the result is loaded before this returns, and on any "
                                   "failure every file is as it was. Comments written above a moved table stay in "
                                   "tracking.toml: look them over.")
    p.add_argument("--dry-run", action="store_true", help="say what would move, write nothing")
    p.add_argument("--json", action="store_true",
                   help="what moved, as JSON (keys: schema, dry_run, moved[pack, file, keys, removed])")
    _args.common(p)


def main(args) -> int:
    root = find_root(args.root)
    path = root / "tracking.toml"
    with locked(path):
        before = path.read_text(encoding="utf-8")
        doc = load_document(path)
        moved, texts = layout.split(doc, root, SCHEMA)
        if moved and not args.dry_run:
            _write_all(root, path, before, tomlkit.dumps(doc), texts)
    report = [{"pack": m.pack, "file": layout.shown(root, m.path) if m.keys else None, "keys": list(m.keys),
               "removed": list(m.removed)} for m in moved]
    if args.json:
        ui.data(json.dumps({"schema": JSON_SCHEMA, "dry_run": bool(args.dry_run), "moved": report}, indent=1))
        return 0
    for row in report:
        if row["keys"]:
            ui.data(f"pack {row['pack']}: {len(row['keys'])} key(s) to {row['file']}: {', '.join(row['keys'])}")
        if row["removed"]:
            ui.data(f"pack {row['pack']}: removed {', '.join(row['removed'])} (receipts/ hold it; 'harness receipts "
                    "sync' writes the [verdicts] lines)")
    verb = "would move" if args.dry_run else "moved"
    ui.info(f"{verb} the declarations of {len(moved)} pack(s)" if moved else
            "nothing to move: tracking.toml holds no pack's declarations")
    return 0


def _write_all(root: Path, path: Path, before: str, tracking_text: str, texts: dict[Path, str]) -> None:
    """Write the pack files and the new tracking.toml, each by a rename, then load the result; undo everything
    when a write or the load fails."""
    created: list[Path] = []
    replaced: dict[Path, str] = {}
    try:
        for target, text in texts.items():
            if target.exists():
                replaced[target] = target.read_text(encoding="utf-8")
            else:
                created.append(target)
            _replace(target, text)
        _replace(path, tracking_text)
        Tracking.load(root)
    except BaseException as exc:
        for target in created:
            with contextlib.suppress(OSError):
                target.unlink(missing_ok=True)
        for target, text in replaced.items():
            _replace(target, text)
        _replace(path, before)
        if isinstance(exc, OSError):
            raise WriteError.of(exc, "a pack file", Path(getattr(exc, "filename", None) or path),
                                hint="every file is as it was") from None
        if isinstance(exc, ConfigError):
            raise ConfigError(f"after the move: {exc}", hint="every file is as it was; fix what it names and "
                                                             "migrate again") from None
        raise


def _replace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_text(path, text)
