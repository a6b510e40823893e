"""Writing a receipt directory: the log, ``receipt.json``, ``output.log.sha256`` and ``SHA256SUMS``, made in a
scratch directory and renamed into place, so a receipt directory is never half-written."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from harness.base.hashing import sha256_file
from harness.base.store import default_mode
from harness.errors import WriteError
from harness.lane.receipts.model import Receipt, dump
from harness.lane.receipts.records import LOG, MANIFEST, RECEIPT, SCHEMA, LogRecord, stamp_time


def helper_digests(root: Path, reproducer: str) -> dict[str, str]:
    """The helper modules a reproducer may import, pinned: repository-relative path -> sha256 of every
    ``_*.py`` in ``repros/`` and in the reproducer's own directory, sorted by path."""
    dirs = {root / "repros", (root / reproducer).parent}
    found = {p for d in dirs if d.is_dir() for p in d.glob("_*.py") if p.is_file()}
    return {rel: sha256_file(root / rel) for rel in sorted(p.relative_to(root).as_posix() for p in found)}


def write(directory: Path, receipt: Receipt, started: datetime, log_file: Path, omitted_bytes: int = 0) -> Receipt:
    """Move ``log_file`` and the receipt JSON into a new receipt directory under ``directory``.

    A receipt directory that cannot be made or written (read-only, full, no permission) is WriteError
    naming the path; nothing of it is left, and ``log_file`` stays where it was (the caller's to remove).
    """
    parent = directory / receipt.target / receipt.pack
    tmp = None
    try:
        parent.mkdir(parents=True, exist_ok=True)
        name = f"{stamp_time(started)}-{receipt.lane}"
        final = parent / name
        n = 1
        while final.exists():
            n += 1
            final = parent / f"{name}.{n}"
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-receipt-", dir=parent))
        os.chmod(tmp, default_mode(directory=True))
        shutil.copyfile(log_file, tmp / LOG)  # copied: the log stays the caller's until the receipt is in place
        os.chmod(tmp / LOG, default_mode(directory=False))
        digest = sha256_file(tmp / LOG)
        receipt = replace(receipt, schema=SCHEMA, log=LogRecord(LOG, digest, (tmp / LOG).stat().st_size,
                                                                omitted_bytes or None))
        (tmp / f"{LOG}.sha256").write_text(f"{digest}  {LOG}\n")
        (tmp / RECEIPT).write_text(dump(receipt))
        write_manifest(tmp)
        os.replace(tmp, final)
    except OSError as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        hint = ("the reproducer ran, but without a receipt its result is not recorded: "
                "make the receipts directory writable (or pass --receipts-dir) and run again")
        raise WriteError.of(exc, f"the receipt of pack {receipt.pack} lane {receipt.lane}", parent, hint=hint) from None
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return replace(receipt, path=final / RECEIPT)


def write_manifest(directory: Path) -> None:
    """``SHA256SUMS``: the sha256 of every other file in ``directory``, sorted by name."""
    names = sorted(p.name for p in directory.iterdir() if p.name != MANIFEST)
    (directory / MANIFEST).write_text("".join(f"{sha256_file(directory / n)}  {n}\n" for n in names))
