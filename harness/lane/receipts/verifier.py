"""Verifying a receipt directory as a whole (``check_dir``): its digests, its log, and what receipt.json says
the reproducer printed against what the log says."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from harness.base.hashing import sha256_file
from harness.errors import ConfigError
from harness.lane import runs
from harness.lane.receipts.model import Receipt, misplaced
from harness.lane.receipts.records import LOG, MANIFEST, RECEIPT

_SUM_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


@dataclass(frozen=True)
class Check:
    """The verification of one receipt directory."""

    dir: Path
    problems: tuple[str, ...]
    legacy: bool  # written before SHA256SUMS: only the log is covered by a digest

    @property
    def ok(self) -> bool:
        return not self.problems


def check_dir(directory: Path, vocabulary: set[str] | None = None) -> Check:
    """Verify the receipt directory as a whole (see the module docstring).

    ``vocabulary`` (the sentinel names) enables the check of receipt.json against its log.
    """
    try:
        legacy = not (directory / MANIFEST).exists()
        odd = sorted(p.name for p in directory.iterdir() if p.is_symlink() or not p.is_file())
    except OSError as exc:  # the directory itself cannot be listed or searched
        return Check(directory, (f"directory unreadable ({exc.strerror or exc})",), False)
    if odd:
        return Check(directory, (f"not a regular file: {', '.join(odd)}",), legacy)
    if not (directory / RECEIPT).is_file():
        return Check(directory, (f"{RECEIPT} missing",), legacy)
    try:
        data = json.loads((directory / RECEIPT).read_text())
    except (OSError, ValueError) as exc:
        return Check(directory, (f"{RECEIPT} unreadable: {exc}",), legacy)
    if not isinstance(data, dict):
        return Check(directory, (f"{RECEIPT} is not a JSON object",), legacy)
    schema = data.get("schema")
    if legacy and (not isinstance(schema, int) or schema >= 2):  # deleting the manifest does not make it legacy
        return Check(directory, (f"{MANIFEST} missing (receipt.json has schema {schema!r}; "
                                 "receipts since schema 2 carry one)",), legacy)
    # each part is checked even when another could not be read: an unreadable file is one problem among the rest
    problems = [] if legacy else _readable(_check_manifest, directory)
    try:
        rec = Receipt.from_dict(data, directory / RECEIPT)
    except ConfigError as exc:
        problems.append(f"{RECEIPT} does not fit the receipt schema: {exc}")
    else:
        wrong = misplaced(directory, rec.target, rec.pack, rec.lane)
        if wrong is not None:
            problems.append(wrong)
    problems += _readable(_check_log, directory, data)
    if vocabulary is not None and not problems:
        problems += _readable(_check_against_log, directory, data, vocabulary)
    return Check(directory, tuple(problems), legacy)


def _unreadable(exc: OSError, where: Path) -> str:
    name = Path(exc.filename).name if exc.filename is not None else where.name
    return f"{name}: unreadable ({exc.strerror or exc})"


def _readable(check, directory: Path, *args) -> list[str]:
    """``check(directory, *args)``'s problems; a file it cannot read is one (named), not the end of the verification."""
    try:
        return check(directory, *args)
    except OSError as exc:
        return [_unreadable(exc, directory)]


def _check_manifest(directory: Path) -> list[str]:
    problems, listed = [], {}
    for no, line in enumerate((directory / MANIFEST).read_text(errors="replace").splitlines(), 1):
        m = _SUM_LINE.match(line)
        if not m or "/" in m.group(2) or m.group(2) in (".", "..", MANIFEST) or m.group(2) in listed:
            problems.append(f"{MANIFEST}:{no}: not a '<sha256>  <file>' line for a file of this directory")
            continue
        listed[m.group(2)] = m.group(1)
    for name, want in sorted(listed.items()):
        path = directory / name
        if not path.is_file():
            problems.append(f"{name}: listed in {MANIFEST} but missing")
        elif sha256_file(path) != want:
            problems.append(f"{name}: sha256 {sha256_file(path)} differs from {MANIFEST}'s {want}")
    unlisted = sorted(p.name for p in directory.iterdir() if p.name != MANIFEST and p.name not in listed)
    if unlisted:
        problems.append(f"not covered by {MANIFEST}: {', '.join(unlisted)}")
    return problems


def _check_log(directory: Path, data: dict) -> list[str]:
    info = data["log"] if isinstance(data.get("log"), dict) else {}
    name, want = info.get("file", LOG), info.get("sha256")
    if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
        return [f"{RECEIPT}: log file name {name!r} is not a file of this directory"]
    log = directory / name
    if not log.is_file():
        return [f"{name}: missing"]
    got = sha256_file(log)
    problems = [] if want == got else [f"{log}: sha256 {got} differs from the receipt's {want}"]
    sums = directory / f"{name}.sha256"
    recorded = sums.read_text(errors="replace").split() if sums.is_file() else []
    if recorded[:2] != [got, name]:
        problems.append(f"{sums.name}: says {' '.join(recorded[:2]) or 'nothing'}; the log's sha256 is {got}")
    return problems


def _check_against_log(directory: Path, data: dict, vocabulary: set[str]) -> list[str]:
    """What receipt.json says the reproducer printed must be what its log says."""
    info = data["log"] if isinstance(data.get("log"), dict) else {}
    text = (directory / info.get("file", LOG)).read_text(encoding="utf-8", errors="replace")
    outcome = runs.Outcome(exit_code=data.get("exit_code"), duration_s=0.0, timed_out=bool(data.get("timed_out")))
    runs.parse_log(text, outcome, vocabulary)
    said: dict[str, object] = {
        "sentinels": [name for name, _ in outcome.sentinels],
        "host": outcome.stamp,
        "figures": outcome.figures,
        # what the suite verdict and the evidence read (suite cases, pytest's summary): the log's, as the lane wrote it
        "sentinel_details": {name: details for name, details in outcome.sentinels},
    }
    if data.get("ranks") is not None:
        said["ranks"] = outcome.stamps
    if data.get("expected") is not None:
        said["verdict"] = outcome.verdict(data["expected"])[0]
    return [_disagreement(key, data.get(key), value, text, vocabulary)
            for key, value in said.items() if _canonical(data.get(key)) != _canonical(value)]


_SHOWN = 160  # characters of a value a verify line shows


def _disagreement(key: str, recorded, logged, text: str, vocabulary: set[str]) -> str:
    """One line: which key, and where its recorded and logged values first part (a list's first differing entry
    and, for figures and sentinels, the log line it stands on), never the whole of two long lists."""
    if isinstance(recorded, list) and isinstance(logged, list):
        pairs = zip(recorded, logged, strict=False)
        i = next((n for n, (a, b) in enumerate(pairs) if _canonical(a) != _canonical(b)),
                 min(len(recorded), len(logged)))
        where = _log_line(text, vocabulary, key, i)
        return (f"{RECEIPT}: '{key}' has {len(recorded)} entries, the log {len(logged)}; they part at entry {i + 1}"
                + (f" (log line {where})" if where else "")
                + f": receipt {_short(recorded, i)}, log {_short(logged, i)}")
    return f"{RECEIPT}: '{key}' is {_cut(repr(recorded))}, but the log says {_cut(repr(logged))}"


def _short(values: list, i: int) -> str:
    return _cut(json.dumps(values[i], sort_keys=True, default=str)) if i < len(values) else "(none)"


def _cut(text: str) -> str:
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _log_line(text: str, vocabulary: set[str], key: str, index: int) -> int | None:
    """The log line of the ``index``-th figure (key 'figures') or sentinel ('sentinels'), as parse_log reads them."""
    tags = {"figures": {"FIGURE"}, "sentinels": vocabulary}.get(key)
    if tags is None:
        return None
    seen = 0
    for no, line in runs.protocol_lines(text, vocabulary):
        if line.partition(" ")[0] in tags:
            if seen == index:
                return no
            seen += 1
    return None


def _canonical(value) -> str:
    """JSON text to compare by: a NaN the reproducer printed equals itself, a tuple its list."""
    return json.dumps(value, sort_keys=True, default=str)


def verify(receipt: Receipt) -> str | None:
    """None if the receipt's directory verifies (``check_dir``), else what is wrong."""
    check = check_dir(receipt.dir)
    return "; ".join(check.problems) or None
