"""Receipts: the record of one reproducer run, kept beside its full log.

``receipts/<target>/<pack>/<UTC time>-<lane>/`` holds ``receipt.json``,
``output.log``, ``output.log.sha256`` and ``SHA256SUMS`` (both in
``sha256sum`` format, so ``sha256sum -c`` checks them): ``SHA256SUMS`` covers
every other file of the directory, receipt.json included. A receipt is
written into a scratch directory and renamed into place, so a receipt
directory is never half-written. Receipts are committed exactly as the
harness wrote them.

``check_dir`` verifies one directory as a whole: every file listed in
``SHA256SUMS`` matches, no file is unlisted, the log matches the hash in
receipt.json and in ``output.log.sha256``, and what receipt.json says the
reproducer printed (sentinels, host stamp, figures, verdict) is what its log
says. Receipts written before ``SHA256SUMS`` existed are *legacy*: they are
checked by everything but the manifest, and reported as log-only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from harness.errors import ConfigError
from harness.hashing import sha256_file
from harness.store import default_mode

SCHEMA = 2  # 2: the directory carries SHA256SUMS; 1: legacy, only the log is covered by a digest
LOG = "output.log"
MANIFEST = "SHA256SUMS"
RECEIPT = "receipt.json"
_SUM_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


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
        os.chmod(tmp, default_mode(directory=True))
        shutil.move(str(log_file), tmp / LOG)
        os.chmod(tmp / LOG, default_mode(directory=False))  # the log was made by mkstemp (0600)
        digest = sha256_file(tmp / LOG)
        data = dict(data, schema=SCHEMA, log={"file": LOG, "sha256": digest, "bytes": (tmp / LOG).stat().st_size})
        (tmp / f"{LOG}.sha256").write_text(f"{digest}  {LOG}\n")
        (tmp / "receipt.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        write_manifest(tmp)
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


def write_manifest(directory: Path) -> None:
    """``SHA256SUMS``: the sha256 of every other file in ``directory``, sorted by name."""
    names = sorted(p.name for p in directory.iterdir() if p.name != MANIFEST)
    (directory / MANIFEST).write_text("".join(f"{sha256_file(directory / n)}  {n}\n" for n in names))


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
    legacy = not (directory / MANIFEST).exists()
    odd = sorted(p.name for p in directory.iterdir() if p.is_symlink() or not p.is_file())
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
    problems = [] if legacy else _check_manifest(directory)
    problems += _check_log(directory, data)
    if vocabulary is not None and not problems:
        problems += _check_against_log(directory, data, vocabulary)
    return Check(directory, tuple(problems), legacy)


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
    from harness import runs

    info = data["log"] if isinstance(data.get("log"), dict) else {}
    text = (directory / info.get("file", LOG)).read_text(encoding="utf-8", errors="replace")
    outcome = runs.Outcome(exit_code=data.get("exit_code"), duration_s=0.0, timed_out=bool(data.get("timed_out")))
    runs.parse_log(text, outcome, vocabulary)
    said: dict[str, object] = {
        "sentinels": [name for name, _ in outcome.sentinels],
        "host": outcome.stamp,
        "figures": outcome.figures,
    }
    if data.get("ranks") is not None:
        said["ranks"] = outcome.stamps
    if data.get("expected") is not None:
        said["verdict"] = outcome.verdict(data["expected"])[0]
    return [f"{RECEIPT}: '{key}' is {data.get(key)!r}, but the log says {value!r}"
            for key, value in said.items() if data.get(key) != value]


def verify(receipt: Receipt) -> str | None:
    """None if the receipt's directory verifies (``check_dir``), else what is wrong."""
    check = check_dir(receipt.dir)
    return "; ".join(check.problems) or None


def run_dirs(root: Path) -> list[Path]:
    """Every receipt directory (``receipts/<target>/<pack>/<run>/``), whatever it holds; scratch dirs excepted."""
    base = receipts_root(root)
    return sorted(d for d in base.glob("*/*/*") if d.is_dir() and not d.name.startswith("."))


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
