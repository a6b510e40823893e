"""sha256 of files and text (standard library only: the bootstrap uses it before any dependency exists)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _identity(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def verify_files(base: Path, expected: dict[str, str], memo: Path | None = None) -> list[str]:
    """The names in ``expected`` (paths under ``base`` -> sha256) that are missing or do not match.

    With ``memo`` (a JSON file), a file that matched before is not read again while its size,
    mtime, ctime, inode and device are unchanged: any write, truncation, replacement or
    ``touch`` moves its ctime, which no tool can set back. Files that match are recorded there.
    """
    try:
        seen = json.loads(memo.read_text()) if memo is not None else {}
    except (OSError, ValueError):
        seen = {}
    seen = seen if isinstance(seen, dict) else {}
    bad, record = [], {}
    for name, sha in expected.items():
        path = base / name
        try:
            ident = _identity(path)
        except OSError:
            bad.append(name)
            continue
        if seen.get(name) == [*ident, sha] or (path.is_file() and sha256_file(path) == sha):
            record[name] = [*ident, sha]
        else:
            bad.append(name)
    if memo is not None and record != seen:
        try:
            tmp = memo.with_name(memo.name + ".tmp")
            tmp.write_text(json.dumps(record, sort_keys=True))
            os.replace(tmp, memo)
        except OSError:
            pass  # a read-only bundle directory: verified again next time
    return bad
