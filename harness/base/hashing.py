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
            # one scratch name per process: concurrent lock-free readers of one entry each replace the memo whole
            tmp = memo.with_name(f"{memo.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(record, sort_keys=True))
            os.replace(tmp, memo)
        except OSError:
            pass  # a read-only bundle directory: verified again next time
    return bad


# --------------------------------------------------------------------------- sealed cache entries

SEAL = ".sealed-sha256.json"  # name -> sha256 of every file of an entry, written when the entry is made
SEAL_SEEN = ".sealed-seen.json"  # the stat identities of files that matched their seal (verify_files' memo)
_NEVER_SEALED = "__pycache__"  # Python writes bytecode next to what it imports; it checks it against the source


def _entry_files(entry: Path, mutable: tuple[str, ...]) -> list[str]:
    """Every file under ``entry`` (relative names) but the seal, bytecode caches and ``mutable`` top-level names."""
    found = []
    for dirpath, dirnames, files in os.walk(entry):
        rel = os.path.relpath(dirpath, entry)
        top = rel == "."
        dirnames[:] = sorted(d for d in dirnames if d != _NEVER_SEALED and not (top and d in mutable))
        for name in files:
            # the seal, the seen-memo and their scratch files (a concurrent reader or resealer may be writing
            # one: '<name>.<pid>.tmp') are not the entry's
            if top and (name.startswith((SEAL, SEAL_SEEN)) or name in mutable):
                continue
            found.append(name if top else os.path.join(rel, name))
    return sorted(found)


def seal(entry: Path, mutable: tuple[str, ...] = ()) -> dict[str, str]:
    """Record the sha256 of every file of a new cache entry in ``entry/SEAL``; return the digests.

    ``mutable`` names top-level files or directories the entry keeps changing after it is made (a memo),
    which are left out. Call it as the last step in the entry's scratch directory, before it is renamed in.
    """
    digests = {name: sha256_file(entry / name) for name in _entry_files(entry, mutable)}
    _write_atomically(entry / SEAL, json.dumps(digests, indent=0, sort_keys=True))
    return digests


def reseal(entry: Path, names: list[str], keep: dict[str, str] | None = None) -> dict[str, str]:
    """Seal an entry that grows in place (a kernel-compile cache) anew over ``names``; return the digests.

    A file whose stat identity is the one it had when it last matched keeps its digest without being read
    (as ``verify_files`` does); any other is hashed. ``keep``: files sealed again with the digest given, never
    read (what an earlier seal said of files that may since have been half rewritten: a check then finds them
    changed). The seal is replaced atomically: a process killed while resealing leaves the previous seal
    whole, never a half-written one.
    """
    memo = entry / SEAL_SEEN
    try:
        seen = json.loads(memo.read_text())
    except (OSError, ValueError):
        seen = {}
    seen = seen if isinstance(seen, dict) else {}
    digests, record = {}, {}
    for name, sha in (keep or {}).items():
        digests[name] = sha
        known = seen.get(name)
        if isinstance(known, list) and known[-1:] == [sha]:
            record[name] = known
    for name in names:
        if name in digests:
            continue
        path = entry / name
        ident = _identity(path)
        known = seen.get(name)
        if isinstance(known, list) and known[:-1] == ident and isinstance(known[-1], str):
            sha = known[-1]
        else:
            sha = sha256_file(path)
            ident = _identity(path)  # as hashed: a write while hashing moves it, and the next check hashes again
        digests[name], record[name] = sha, [*ident, sha]
    _write_atomically(entry / SEAL, json.dumps(digests, indent=0, sort_keys=True))
    try:
        _write_atomically(memo, json.dumps(record, sort_keys=True))
    except OSError:
        pass  # only a memo: the next check hashes again
    return digests


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # a name _entry_files leaves out
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def sealed(entry: Path) -> dict[str, str] | None:
    """The digests an entry was sealed with (None: no seal, or an unreadable one)."""
    try:
        digests = json.loads((entry / SEAL).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(digests, dict) and all(isinstance(v, str) for v in digests.values())
    return digests if ok else None


def check_seal(entry: Path, mutable: tuple[str, ...] = ()) -> list[str]:
    """What is wrong with a sealed entry: one line per missing, changed or added file (empty: intact).

    Cheap when nothing changed: a file whose size, mtime, ctime, inode and device are those it had when it
    last matched is not read again (``verify_files``); any other file is hashed in full. An entry
    without a readable seal (made by an older harness, or its seal damaged) is never trusted.
    """
    digests = sealed(entry)
    problems = sealed_damage(entry, digests)
    if digests is None:
        return problems
    problems += [f"{name}: not in the seal" for name in _entry_files(entry, mutable) if name not in digests]
    return problems


def sealed_damage(entry: Path, digests: dict[str, str] | None) -> list[str]:
    """What is wrong with the files an entry's seal lists (``digests``, as ``sealed`` read them): one line per
    missing or changed file, or one saying there is no readable seal. Files the seal does not list are the
    caller's to judge (an entry that grows in place has some while it is in use)."""
    if digests is None:
        return [f"{SEAL}: missing or unreadable"]
    return [f"{name}: missing or not as sealed" for name in verify_files(entry, digests, entry / SEAL_SEEN)]
