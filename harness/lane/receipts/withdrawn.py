"""Receipts withdrawn from evidence: ``receipts/withdrawn.toml``.

A receipt is never edited or deleted, yet one can be wrong as evidence: its log fails verification for a reason of
the harness (two ranks' lines written into one, before ``rank_lines.py``), or its run is known to be invalid. Such a
receipt is *withdrawn*: an entry names its directory, pins its log by sha256 and says why. A withdrawn receipt is
nobody's evidence (``index.find`` leaves it out, so it is never a lane's latest), and ``receipts verify`` reports it
as withdrawn instead of bad, as long as its log is still the one the entry pins. An entry can only take evidence
away: nothing it says makes any receipt count.

The file (closed schema; ``harness receipts withdraw`` writes it)::

    [[withdrawn]]
    receipt = "megatron-lm/10/20261126T042640Z-fix-dev-tp2"   # under receipts/
    log_sha256 = "<sha256 of its output.log>"
    reason = "why it is no evidence"
    date = "2026-12-07"                                        # when it was withdrawn
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.base import regular
from harness.base.hashing import sha256_file
from harness.base.tomlutil import key_line
from harness.errors import ConfigError
from harness.lane.receipts.records import LOG

FILE = "withdrawn.toml"
KEYS = ("receipt", "log_sha256", "reason", "date")
_SHA = re.compile(r"^[0-9a-f]{64}$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_RUN = re.compile(r"^[^/\s]+/[^/\s]+/[^/\s]+$")


@dataclass(frozen=True)
class Withdrawal:
    receipt: str  # <target>/<pack>/<run>, relative to the receipts directory
    log_sha256: str
    reason: str
    date: str
    line: int  # where its [[withdrawn]] header is in the file


def path_in(receipts_dir: Path) -> Path:
    return receipts_dir / FILE


def load(receipts_dir: Path) -> tuple[Withdrawal, ...]:
    """The entries of ``receipts_dir/withdrawn.toml`` (none when there is no such file); a ConfigError naming the
    file and line for anything the schema does not allow."""
    path = path_in(receipts_dir)
    try:
        text = regular.read_bytes(path, follow=True).decode("utf-8")
    except FileNotFoundError:
        return ()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    extra = sorted(set(data) - {"withdrawn"})
    if extra:
        raise ConfigError(f"{path}: unknown top-level key '{extra[0]}' (the file holds [[withdrawn]] tables only)")
    entries = data.get("withdrawn", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: 'withdrawn' must be an array of tables ([[withdrawn]])")
    header = re.compile(r"^[ \t]*\[\[[ \t]*withdrawn[ \t]*\]\]", re.M)
    headers = [text.count("\n", 0, m.start()) + 1 for m in header.finditer(text)]
    lines = text.splitlines()
    out: list[Withdrawal] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        line = headers[i] if i < len(headers) else 0
        where = f"{path}:{line}" if line else f"{path} [[withdrawn]] #{i + 1}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: each [[withdrawn]] entry must be a table")
        for key in entry:
            if key not in KEYS:
                near = difflib.get_close_matches(key, KEYS, n=1, cutoff=0.6)
                said = f" (did you mean '{near[0]}'?)" if near else ""
                raise ConfigError(f"{_key_at(path, lines, line, key) or where}: unknown key '{key}'{said}"
                                  + f"; the keys are {', '.join(KEYS)}")
        values = {}
        for key, pattern, what in (("receipt", _RUN, "<target>/<pack>/<run> under receipts/"),
                                   ("log_sha256", _SHA, "64 lowercase hex digits"),
                                   ("reason", re.compile(r"\S"), "a sentence"),
                                   ("date", _DATE, "YYYY-MM-DD, in quotes")):
            value = entry.get(key)
            if not isinstance(value, str) or not pattern.search(value):
                raise ConfigError(f"{_key_at(path, lines, line, key) or where}: key '{key}' must be {what}, "
                                  f"not {value!r}")
            values[key] = value
        if values["receipt"] in seen:
            raise ConfigError(f"{where}: {values['receipt']} is withdrawn already (line {seen[values['receipt']]})")
        seen[values["receipt"]] = line
        out.append(Withdrawal(line=line, **values))
    return tuple(out)


def _key_at(path: Path, lines: list[str], header: int, key: str) -> str | None:
    """``<file>:<line>`` of ``key`` inside the entry whose header is on line ``header`` (from 1; 0: not found),
    or None."""
    line = key_line(lines, key, header - 1) if header else None
    return f"{path}:{line}" if line else None


def names(receipts_dir: Path) -> frozenset[str]:
    """The ``<target>/<pack>/<run>`` of every withdrawn receipt under ``receipts_dir``."""
    return frozenset(w.receipt for w in load(receipts_dir))


def audit(receipts_dir: Path, dirs: list[Path]) -> tuple[dict[Path, Withdrawal], list[str]]:
    """Which of the receipt directories ``dirs`` are withdrawn (their log still the one the entry pins), and a line
    for each entry that is wrong: a directory that is not there, or a log that is not the pinned one."""
    entries = {w.receipt: w for w in load(receipts_dir)}
    found: dict[Path, Withdrawal] = {}
    problems: list[str] = []
    where = path_in(receipts_dir)
    for d in dirs:
        try:
            entry = entries.pop(d.relative_to(receipts_dir).as_posix(), None)
        except ValueError:
            continue
        if entry is None:
            continue
        try:
            actual = sha256_file(d / LOG)
        except OSError as exc:
            actual = f"unreadable ({exc.strerror or exc})"
        if actual == entry.log_sha256:
            found[d] = entry
        else:
            problems.append(f"{where}:{entry.line}: {entry.receipt} is withdrawn with log sha256 {entry.log_sha256}, "
                            f"its {LOG} has {actual}: the entry names another run")
    problems += [f"{where}:{w.line}: {w.receipt} is withdrawn but no such receipt directory exists"
                 for w in entries.values()]
    return found, problems
