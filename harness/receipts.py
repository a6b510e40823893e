"""Receipts: the record of one reproducer run, kept beside its full log.

``receipts/<target>/<pack>/<UTC time>-<lane>/`` holds ``receipt.json``,
``output.log`` and ``output.log.sha256`` (``sha256sum`` format, so
``sha256sum -c`` checks it). A receipt is written into a scratch directory
and renamed into place, so a receipt directory is never half-written.
Receipts are committed exactly as the harness wrote them; ``verify`` checks
that a log still matches its recorded hash.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from harness.errors import ConfigError
from harness.hashing import sha256_file

SCHEMA = 1
LOG = "output.log"


def receipts_root(root: Path) -> Path:
    return root / "receipts"


def utc_now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def stamp_time(t: datetime) -> str:
    return t.strftime("%Y%m%dT%H%M%SZ")


@dataclass(frozen=True)
class Receipt:
    path: Path  # the receipt.json file
    data: dict

    @property
    def dir(self) -> Path:
        return self.path.parent


def write(directory: Path, target: str, pack: str, lane: str, started: datetime,
          log_file: Path, data: dict) -> Receipt:
    """Move ``log_file`` and the receipt JSON into a new receipt directory under ``directory``."""
    parent = directory / target / pack
    parent.mkdir(parents=True, exist_ok=True)
    name = f"{stamp_time(started)}-{lane}"
    final = parent / name
    n = 1
    while final.exists():
        n += 1
        final = parent / f"{name}.{n}"
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-receipt-", dir=parent))
    try:
        shutil.move(str(log_file), tmp / LOG)
        digest = sha256_file(tmp / LOG)
        data = dict(data, schema=SCHEMA, log={"file": LOG, "sha256": digest, "bytes": (tmp / LOG).stat().st_size})
        (tmp / f"{LOG}.sha256").write_text(f"{digest}  {LOG}\n")
        (tmp / "receipt.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Receipt(final / "receipt.json", data)


def load(path: Path) -> Receipt:
    try:
        return Receipt(path, json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable receipt: {exc}") from None


def verify(receipt: Receipt) -> str | None:
    """None if the log matches its recorded sha256, else what is wrong."""
    log = receipt.dir / receipt.data.get("log", {}).get("file", LOG)
    if not log.is_file():
        return f"{log}: missing"
    want = receipt.data.get("log", {}).get("sha256")
    got = sha256_file(log)
    if want != got:
        return f"{log}: sha256 {got} differs from the receipt's {want}"
    return None


def find(root: Path, target: str | None = None, pack: str | None = None) -> list[Receipt]:
    """All receipts (optionally of one target/pack), oldest first by start time."""
    base = receipts_root(root)
    pattern = f"{target or '*'}/{pack or '*'}/*/receipt.json"
    found = [load(p) for p in base.glob(pattern)]
    return sorted(found, key=lambda r: (r.data.get("started", ""), str(r.path)))


def latest(root: Path, target: str, pack: str, lane: str | None = None) -> Receipt | None:
    found = [r for r in find(root, target, pack) if lane is None or r.data.get("lane") == lane]
    return found[-1] if found else None


def summary(receipt: Receipt, root: Path) -> dict:
    """The validation entry tracking.toml keeps for a lane: the latest receipt in brief."""
    d = receipt.data
    host = d.get("host") or {}
    gpu = host.get("gpu")
    host_desc = f"{gpu} (cc {host.get('compute_capability')})" if gpu else (host.get("platform") or "unknown host")
    return {
        "verdict": d.get("verdict"),
        "expected": d.get("expected"),
        "seen": ", ".join(d.get("sentinels", [])) or "none",
        "base": d.get("base", {}).get("name"),
        "patched": d.get("patched"),
        "host": host_desc,
        "date": d.get("started"),
        "receipt": str(receipt.path.relative_to(root)) if receipt.path.is_relative_to(root) else str(receipt.path),
    }
