"""``harness receipts import|verify|show``."""

from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
from pathlib import Path

from harness import receipts, ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import ConfigError


def register(sub) -> None:
    p = sub.add_parser("receipts", help="import receipts brought back from a GPU host; verify or show receipts")
    rs = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = rs.add_parser("import", help="unpack a tar of receipts into receipts/, verify logs, update tracking.toml")
    q.add_argument("archive", type=Path)
    _args.common(q)
    q = rs.add_parser("verify", help="check every receipt's log against its sha256")
    _args.common(q)
    q = rs.add_parser("show", help="print the latest receipt of each lane of a pack")
    q.add_argument("pack")
    _args.common(q)


def main(args) -> int:
    ctx = context(args)
    return {"import": _import, "verify": _verify, "show": _show}[args.action](ctx, args)


def _import(ctx, args) -> int:
    """Unpack receipts (a tar of ``receipts/<target>/<pack>/<run>/``) byte for byte, then update tracking."""
    dest_root = receipts.receipts_root(ctx.root)
    added = []
    with tempfile.TemporaryDirectory(prefix="patchlane-import-") as tmp:
        try:
            with tarfile.open(args.archive) as tf:
                tf.extractall(tmp, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise ConfigError(f"{args.archive}: cannot read: {exc}") from None
        found = sorted(Path(tmp).rglob("receipt.json"))
        if not found:
            raise ConfigError(f"{args.archive}: holds no receipt.json")
        for path in found:
            rec = receipts.load(path)
            problem = receipts.verify(rec)
            if problem:
                raise ConfigError(f"{args.archive}: {problem}")
            d = rec.data
            final = dest_root / d["target"] / d["pack"] / path.parent.name
            if final.exists():
                ui.note(f"already present: {final.relative_to(ctx.root)}")
                continue
            final.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(path.parent, final)
            added.append(receipts.load(final / "receipt.json"))
    for rec in sorted(added, key=lambda r: r.data.get("started", "")):
        d = rec.data
        ctx.tracking.pack(d["pack"]).lane(d["lane"])  # the lane must still exist
        ctx.tracking.record_validation(d["pack"], d["lane"], receipts.summary(rec, ctx.root))
        ui.data(f"imported {rec.dir.relative_to(ctx.root)}: {d['verdict']} ({', '.join(d['sentinels']) or '-'})")
    if added:
        ctx.tracking.save()
    return 0


def _verify(ctx, args) -> int:
    bad = 0
    all_receipts = receipts.find(ctx.root)
    for rec in all_receipts:
        problem = receipts.verify(rec)
        if problem:
            bad += 1
            ui.data(f"BAD {problem}")
    ui.data(f"{len(all_receipts) - bad} receipt(s) verified, {bad} bad")
    return 0 if bad == 0 else 1


def _show(ctx, args) -> int:
    pack = ctx.tracking.pack(args.pack)
    for lane in pack.lanes:
        rec = receipts.latest(ctx.root, pack.target, pack.id, lane.name)
        if rec is None:
            ui.data(f"{lane.name}: no receipt")
            continue
        d = rec.data
        ui.data(f"{lane.name}: {d['verdict']} - {d['reason']} [{rec.dir.relative_to(ctx.root)}]")
        for fig in d.get("figures", []):
            ui.data(f"    {json.dumps(fig, sort_keys=True)}")
    return 0
