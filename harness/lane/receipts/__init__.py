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

May import: ``harness.errors``, ``harness.base``, ``harness.lane.runs``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import ClassVar

from harness.base import ui
from harness.base.hashing import sha256_file
from harness.base.store import default_mode
from harness.errors import ConfigError, WriteError
from harness.lane import runs
from harness.lane.runs import Verdict  # what a run came to: decided by runs.Outcome.verdict, recorded here

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


class Sentinel(StrEnum):
    """The sentinel names of ``repros/_lane.py`` (``SENTINELS``) and of the upstream-test runner
    (``upstream_tests.SENTINELS``); a test keeps them equal."""

    BUG_REPRODUCED = "BUG_REPRODUCED"
    BUG_ABSENT = "BUG_ABSENT"
    FIX_VALIDATED = "FIX_VALIDATED"
    FIX_FAILED = "FIX_FAILED"
    MEMORY_SAVE_VERIFIED = "MEMORY_SAVE_VERIFIED"
    MEMORY_SAVE_MISSING = "MEMORY_SAVE_MISSING"
    EQUIVALENCE_VERIFIED = "EQUIVALENCE_VERIFIED"
    EQUIVALENCE_BROKEN = "EQUIVALENCE_BROKEN"
    REGRESSION_GUARD_PASSED = "REGRESSION_GUARD_PASSED"
    REGRESSION_GUARD_FAILED = "REGRESSION_GUARD_FAILED"
    CONTRACT_HELD = "CONTRACT_HELD"
    CONTRACT_BROKEN = "CONTRACT_BROKEN"
    CONTRACT_VIOLATION_DETECTED = "CONTRACT_VIOLATION_DETECTED"
    CONTRACT_VIOLATION_MISSED = "CONTRACT_VIOLATION_MISSED"
    UPSTREAM_TESTS_PASSED = "UPSTREAM_TESTS_PASSED"
    UPSTREAM_TESTS_FAILED_AS_EXPECTED = "UPSTREAM_TESTS_FAILED_AS_EXPECTED"
    UPSTREAM_TESTS_UNEXPECTED = "UPSTREAM_TESTS_UNEXPECTED"
    UPSTREAM_SUITE_RECORDED = "UPSTREAM_SUITE_RECORDED"
    UPSTREAM_SUITE_INCOMPLETE = "UPSTREAM_SUITE_INCOMPLETE"


# ---------------------------------------------------------------------------------------------- the schema
#
# receipt.json is a closed schema, like tracking.toml: a key the records below do not declare is warned
# about (file, record and key named) and dropped; a required key missing, or a value of the wrong type, is
# a ConfigError naming the file. What the reproducer printed (the host stamp, figures, sentinel details)
# is the reproducer's own JSON and is kept verbatim. A record loaded from a file remembers which of its
# keys the file held, so ``to_dict`` gives back exactly the JSON that was read (older receipts lack keys
# newer ones carry); a record made by the harness gives every key the harness writes today.

_warned: set[str] = set()


def _warn_unknown(where: str, data: dict, known) -> None:
    for key in data:
        if key not in known:
            line = f"{where}: unknown key '{key}' (not part of the receipt schema; ignored)"
            if line not in _warned:  # once per process: status reads every receipt more than once
                _warned.add(line)
                ui.warn(line)


_KINDS: dict[str, tuple[type, ...]] = {"str": (str,), "bool": (bool,), "int": (int,), "number": (int, float),
                                       "list": (list,), "dict": (dict,)}


def _take(data: dict, key: str, kind: str, where: str, *, required: bool = True, nullable: bool = False,
          default=None):
    """``data[key]`` checked to be of ``kind`` (see ``_KINDS``; a bool is never an int or a number)."""
    if key not in data:
        if required:
            raise ConfigError(f"{where}: required key '{key}' missing")
        return default
    value = data[key]
    if value is None and nullable:
        return None
    if isinstance(value, bool) and kind != "bool" or not isinstance(value, _KINDS[kind]):
        raise ConfigError(f"{where}: key '{key}' is {type(value).__name__} {_short(value)}, not {kind}"
                          + (" or null" if nullable else ""))
    return value


def _short(value) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:59] + "…"


def _strings(values: list, key: str, where: str) -> tuple[str, ...]:
    bad = [v for v in values if not isinstance(v, str)]
    if bad:
        raise ConfigError(f"{where}: key '{key}' holds {_short(bad[0])}, not a string")
    return tuple(values)


def _plain(value):
    """A record's value as JSON data."""
    if isinstance(value, (_Record, Host, Figure)):
        return value.to_dict()
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class _Record:
    """A record of receipt.json: its fields are its keys, in the order the harness writes them."""

    _OMIT_NONE: ClassVar[frozenset[str]] = frozenset()  # keys written only when they have a value
    # the keys the source file held, in its order (None: made by the harness, every key it writes)
    _keys: tuple[str, ...] | None = field(default=None, kw_only=True, compare=False, repr=False)

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.metadata.get("json", True) and f.name != "_keys")

    def to_dict(self) -> dict:
        names = self._keys if self._keys is not None else tuple(
            n for n in self._names() if not (n in self._OMIT_NONE and getattr(self, n) is None))
        return {n: _plain(getattr(self, n)) for n in names}

    @classmethod
    def _present(cls, data: dict, where: str) -> tuple[str, ...]:
        _warn_unknown(where, data, cls._names())
        known = set(cls._names())
        return tuple(k for k in data if k in known)


@dataclass(frozen=True)
class BaseRecord(_Record):
    """The base a lane ran on (``pins.Base.describe``). Receipts before git bases lack ``kind`` and ``pin``."""

    name: str
    version: str
    commit: str
    kind: str | None = None
    pin: str | None = None
    artifact: str | None = None  # a release artefact's file name (sdist or wheel bases)
    sha256: str | None = None  # its sha256 (the pin of older receipts)
    repo: str | None = None  # git bases: where the commit comes from, the ref it was read from, its date
    ref: str | None = None
    ref_date: str | None = None
    _OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"kind", "pin", "artifact", "sha256", "repo", "ref",
                                                      "ref_date"})

    @property
    def recorded_pin(self) -> str | None:
        """The pin the receipt names (newer receipts say ``pin``; older ones only the artefact's ``sha256``)."""
        return self.pin or self.sha256

    @classmethod
    def from_dict(cls, data: dict, where: str) -> BaseRecord:
        opt = {k: _take(data, k, "str", where, required=False) for k in sorted(cls._OMIT_NONE)}
        return cls(name=_take(data, "name", "str", where), version=_take(data, "version", "str", where),
                   commit=_take(data, "commit", "str", where), **opt, _keys=cls._present(data, where))


@dataclass(frozen=True)
class BuildRecord(_Record):
    """An installed build (``builds.Build.describe``); the lane's own build also says where it came from."""

    key: str
    kind: str
    stubbed_modules: tuple[str, ...] | None = None
    wheel: str | None = None
    wheel_sha256: str | None = None
    source: str | None = None  # "local" or "bundle"; only the lane's own build says
    _OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"stubbed_modules", "wheel", "wheel_sha256", "source"})

    @classmethod
    def from_dict(cls, data: dict, where: str) -> BuildRecord:
        stubs = _take(data, "stubbed_modules", "list", where, required=False)
        return cls(key=_take(data, "key", "str", where), kind=_take(data, "kind", "str", where),
                   stubbed_modules=None if stubs is None else _strings(stubs, "stubbed_modules", where),
                   wheel=_take(data, "wheel", "str", where, required=False),
                   wheel_sha256=_take(data, "wheel_sha256", "str", where, required=False),
                   source=_take(data, "source", "str", where, required=False), _keys=cls._present(data, where))


@dataclass(frozen=True)
class PatchRecord(_Record):
    """One patch file a patched lane applied."""

    file: str
    sha256: str
    upstream_status: str | None

    @classmethod
    def from_dict(cls, data: dict, where: str) -> PatchRecord:
        return cls(file=_take(data, "file", "str", where), sha256=_take(data, "sha256", "str", where),
                   upstream_status=_take(data, "upstream_status", "str", where, nullable=True),
                   _keys=cls._present(data, where))


@dataclass(frozen=True)
class ReproducerRecord(_Record):
    """The reproducer file that ran, its arguments, and the helper modules it could import."""

    path: str
    sha256: str
    args: tuple[str, ...] = ()
    # repository-relative path -> sha256 of each ``_*.py`` in repros/ and beside the reproducer (sorted);
    # receipts written before helpers were pinned have none
    helpers: dict[str, str] | None = None
    _OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"helpers"})

    @classmethod
    def from_dict(cls, data: dict, where: str) -> ReproducerRecord:
        helpers = _take(data, "helpers", "dict", where, required=False)
        if helpers is not None and not all(isinstance(v, str) for v in helpers.values()):
            raise ConfigError(f"{where}: key 'helpers' must map each helper file to its sha256")
        return cls(path=_take(data, "path", "str", where), sha256=_take(data, "sha256", "str", where),
                   args=_strings(_take(data, "args", "list", where), "args", where), helpers=helpers,
                   _keys=cls._present(data, where))


@dataclass(frozen=True)
class HarnessRecord(_Record):
    """The harness that wrote the receipt and the repository commit it ran from."""

    version: str
    repo_commit: str | None
    repo_dirty: bool | None  # None: a copy without .git, which cannot tell
    repo_commit_source: str | None = None  # set when the commit came from PATCHLANE_REPO_COMMIT
    _OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"repo_commit_source"})

    @classmethod
    def from_dict(cls, data: dict, where: str) -> HarnessRecord:
        return cls(version=_take(data, "version", "str", where),
                   repo_commit=_take(data, "repo_commit", "str", where, nullable=True),
                   repo_dirty=_take(data, "repo_dirty", "bool", where, nullable=True),
                   repo_commit_source=_take(data, "repo_commit_source", "str", where, required=False),
                   _keys=cls._present(data, where))


@dataclass(frozen=True)
class LogRecord(_Record):
    """The log file beside receipt.json, with its digest and size."""

    file: str
    sha256: str
    bytes: int
    omitted_bytes: int | None = None  # output the log's size cap left out between its head and its tail
    _OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"omitted_bytes"})

    @classmethod
    def from_dict(cls, data: dict, where: str) -> LogRecord:
        return cls(file=_take(data, "file", "str", where), sha256=_take(data, "sha256", "str", where),
                   bytes=_take(data, "bytes", "int", where),
                   omitted_bytes=_take(data, "omitted_bytes", "int", where, required=False),
                   _keys=cls._present(data, where))


@dataclass(frozen=True)
class KernelCacheRecord(_Record):
    """The kernel-compile cache a lane's reproducer was given (``kernel_cache.Lease.describe``).

    ``mode``: ``store`` (the store's entry of ``key``), ``off`` (``PATCHLANE_KERNEL_CACHE=off``: an empty
    throwaway directory) or ``throwaway`` (the entry could not be used); ``warm``: the entry held sealed
    files when the lane started (``files`` of them). Receipts written before kernel caches lack the record.
    """

    key: str
    mode: str
    warm: bool
    files: int

    @classmethod
    def from_dict(cls, data: dict, where: str) -> KernelCacheRecord:
        return cls(key=_take(data, "key", "str", where), mode=_take(data, "mode", "str", where),
                   warm=_take(data, "warm", "bool", where), files=_take(data, "files", "int", where),
                   _keys=cls._present(data, where))


@dataclass(frozen=True)
class Host:
    """A ``HOST_STAMP`` as the reproducer printed it (``repros/_lane.py`` ``stamp``), kept verbatim."""

    facts: dict

    @classmethod
    def from_dict(cls, data, where: str) -> Host:
        if not isinstance(data, dict) or not data:
            raise ConfigError(f"{where}: a host stamp must be a non-empty JSON object, not {_short(data)}")
        return cls(dict(data))

    def to_dict(self) -> dict:
        return _plain(self.facts)

    def _str(self, key: str) -> str | None:
        value = self.facts.get(key)
        return None if value is None else str(value)

    @property
    def gpu(self) -> str | None:
        return self._str("gpu")

    @property
    def compute_capability(self) -> str | None:
        return self._str("compute_capability")

    @property
    def driver(self) -> str | None:
        return self._str("driver")

    @property
    def torch(self) -> str | None:
        return self._str("torch")

    @property
    def torch_cuda(self) -> str | None:
        return self._str("torch_cuda")

    @property
    def triton(self) -> str | None:
        return self._str("triton")

    @property
    def host_python(self) -> str | None:
        return self._str("host_python")

    @property
    def platform(self) -> str | None:
        return self._str("platform")


@dataclass(frozen=True)
class Figure:
    """One ``FIGURE`` line: ``name``, ``value``, ``unit`` and whatever context the reproducer added, verbatim."""

    data: dict

    @classmethod
    def from_dict(cls, data, where: str) -> Figure:
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: a figure must be a JSON object, not {_short(data)}")
        return cls(dict(data))

    def to_dict(self) -> dict:
        return _plain(self.data)

    def get(self, key: str, default=None):
        return self.data.get(key, default)

    @property
    def name(self) -> str | None:
        name = self.data.get("name")
        return name if isinstance(name, str) else None

    @property
    def value(self):
        return self.data.get("value")

    @property
    def unit(self):
        return self.data.get("unit")


def _sentinel(value, key: str, where: str) -> Sentinel:
    try:
        return Sentinel(value)
    except ValueError:
        raise ConfigError(f"{where}: key '{key}' names {_short(value)}, not a sentinel of repros/_lane.py") from None


# keys receipts written before the harness recorded them lack, and what such a receipt means by their absence
_LEGACY_DEFAULTS: dict[str, object] = {"baseline_build": None, "extra_builds": (), "world_size": 1, "ranks": None,
                                       "runtime_requires": ()}


@dataclass(frozen=True)
class Receipt(_Record):
    """receipt.json: one run of one lane's reproducer (see the module docstring)."""

    pack: str
    title: str
    lane: str
    target: str
    base: BaseRecord
    patched: bool
    patches: tuple[PatchRecord, ...]
    build: BuildRecord
    baseline_build: BuildRecord | None  # the unpatched build of a lane ``with_baseline``
    extra_builds: tuple[BuildRecord, ...]
    world_size: int
    ranks: tuple[Host, ...] | None  # every rank's stamp, on multi-process lanes
    runtime_requires: tuple[str, ...]
    imported: dict[str, str]  # import check: module -> where it was imported from
    reproducer: ReproducerRecord
    harness: HarnessRecord
    host: Host | None  # None: the reproducer never stamped the host (a crash)
    expected: Sentinel
    sentinels: tuple[Sentinel, ...]
    sentinel_details: dict[str, dict]
    figures: tuple[Figure, ...]
    verdict: Verdict
    reason: str
    exit_code: int | None  # None: killed at the time limit
    timed_out: bool
    timeout_s: int | float
    started: str  # UTC, ISO 8601 with a Z
    duration_s: float
    schema: int = SCHEMA
    log: LogRecord | None = None  # set by ``write``
    # a cuda lane: the CUDA_VISIBLE_DEVICES it was launched with (None: all of the host's, or a CPU lane)
    visible_devices: str | None = None
    nccl: str | None = None  # a multi-rank cuda lane: the NCCL version of the lane's torch
    kernel_cache: KernelCacheRecord | None = None  # the kernel-compile cache the lane ran with (since issue 28)
    path: Path | None = field(default=None, kw_only=True, compare=False, metadata={"json": False})
    _OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"log", "visible_devices", "nccl", "kernel_cache"})

    @property
    def dir(self) -> Path:
        if self.path is None:
            raise ValueError("a receipt not yet written has no directory")
        return self.path.parent

    @property
    def started_at(self) -> datetime | None:
        try:
            t = datetime.fromisoformat(self.started.replace("Z", "+00:00"))
        except ValueError:
            return None
        return t if t.tzinfo else t.replace(tzinfo=UTC)

    @classmethod
    def load(cls, path: Path) -> Receipt:
        """The receipt in ``path`` (a receipt.json), checked against the schema."""
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not a readable receipt: {exc}") from None
        return cls.from_dict(data, path)

    @classmethod
    def from_dict(cls, data, path: Path | None = None) -> Receipt:
        where = str(path) if path is not None else "receipt"
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: a receipt is a JSON object, not {_short(data)}")

        def sub(key: str) -> str:
            return f"{where} [{key}]"

        def t(key: str, kind: str, **kw):
            return _take(data, key, kind, where, **kw)

        baseline = t("baseline_build", "dict", required=False, nullable=True)
        ranks = t("ranks", "list", required=False, nullable=True)
        host = t("host", "dict", nullable=True)
        imported = t("imported", "dict")
        if not all(isinstance(v, str) for v in imported.values()):
            raise ConfigError(f"{where}: key 'imported' must map each module to where it was imported from")
        details = t("sentinel_details", "dict")
        if not all(isinstance(v, dict) for v in details.values()):
            raise ConfigError(f"{where}: key 'sentinel_details' must map each sentinel to a JSON object")
        log = t("log", "dict", required=False)
        kcache = t("kernel_cache", "dict", required=False)
        return cls(
            pack=t("pack", "str"), title=t("title", "str"), lane=t("lane", "str"), target=t("target", "str"),
            base=BaseRecord.from_dict(t("base", "dict"), sub("base")),
            patched=t("patched", "bool"),
            patches=tuple(PatchRecord.from_dict(_take({"patch": p}, "patch", "dict", sub(f"patches[{i}]")),
                                                sub(f"patches[{i}]")) for i, p in enumerate(t("patches", "list"))),
            build=BuildRecord.from_dict(t("build", "dict"), sub("build")),
            baseline_build=None if baseline is None else BuildRecord.from_dict(baseline, sub("baseline_build")),
            extra_builds=tuple(BuildRecord.from_dict(_take({"build": b}, "build", "dict", sub(f"extra_builds[{i}]")),
                                                     sub(f"extra_builds[{i}]"))
                               for i, b in enumerate(t("extra_builds", "list", required=False, default=[]))),
            world_size=t("world_size", "int", required=False, default=_LEGACY_DEFAULTS["world_size"]),
            ranks=None if ranks is None else tuple(Host.from_dict(s, sub(f"ranks[{i}]")) for i, s in enumerate(ranks)),
            runtime_requires=_strings(t("runtime_requires", "list", required=False, default=[]),
                                      "runtime_requires", where),
            imported=dict(imported),
            reproducer=ReproducerRecord.from_dict(t("reproducer", "dict"), sub("reproducer")),
            harness=HarnessRecord.from_dict(t("harness", "dict"), sub("harness")),
            host=None if host is None else Host.from_dict(host, sub("host")),
            expected=_sentinel(t("expected", "str"), "expected", where),
            sentinels=tuple(_sentinel(s, "sentinels", where) for s in t("sentinels", "list")),
            sentinel_details={k: dict(v) for k, v in details.items()},
            figures=tuple(Figure.from_dict(f, sub(f"figures[{i}]")) for i, f in enumerate(t("figures", "list"))),
            verdict=_verdict(t("verdict", "str"), where),
            reason=t("reason", "str"),
            exit_code=t("exit_code", "int", nullable=True),
            timed_out=t("timed_out", "bool"),
            timeout_s=t("timeout_s", "number"),
            started=t("started", "str"),
            duration_s=t("duration_s", "number"),
            schema=t("schema", "int"),
            log=None if log is None else LogRecord.from_dict(log, sub("log")),
            visible_devices=t("visible_devices", "str", required=False),
            nccl=t("nccl", "str", required=False),
            kernel_cache=None if kcache is None else KernelCacheRecord.from_dict(kcache, sub("kernel_cache")),
            path=path, _keys=cls._present(data, where),
        )


def _verdict(value: str, where: str) -> Verdict:
    try:
        return Verdict(value)
    except ValueError:
        raise ConfigError(f"{where}: key 'verdict' is {value!r}, not one of "
                          f"{', '.join(v.value for v in Verdict)}") from None


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


def dump(receipt: Receipt) -> str:
    """receipt.json's text: ``to_dict`` as indented JSON with sorted keys."""
    return json.dumps(receipt.to_dict(), indent=2, sort_keys=True) + "\n"


def load(path: Path) -> Receipt:
    return Receipt.load(path)


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
        Receipt.from_dict(data, directory / RECEIPT)
    except ConfigError as exc:
        problems.append(f"{RECEIPT} does not fit the receipt schema: {exc}")
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
    """Every receipt directory (``receipts/<target>/<pack>/<run>/``), whatever it holds; scratch dirs excepted.

    A target or pack directory that cannot be listed is returned itself, in place of the runs it hides, so
    that ``check_dir`` reports it as unreadable instead of it being skipped in silence.
    """
    found: list[Path] = []

    def walk(directory: Path, depth: int) -> None:
        try:
            children = sorted(d for d in directory.iterdir() if d.is_dir() and not d.name.startswith("."))
        except OSError:
            found.append(directory)
            return
        for child in children:
            if depth == 2:
                found.append(child)
            else:
                walk(child, depth + 1)

    base = receipts_root(root)
    if base.is_dir():
        walk(base, 0)
    return sorted(found)


def find(root: Path, target: str | None = None, pack: str | None = None,
         receipts_dir: Path | None = None) -> list[Receipt]:
    """All receipts (optionally of one target/pack), oldest first by start time; under ``receipts_dir`` when
    given (a run's ``--receipts-dir``), else the repository's ``receipts/``."""
    base = receipts_dir or receipts_root(root)
    pattern = f"{target or '*'}/{pack or '*'}/*/receipt.json"
    found = [load(p) for p in base.glob(pattern)]
    return sorted(found, key=lambda r: (r.started, str(r.path)))


def latest(root: Path, target: str, pack: str, lane: str | None = None) -> Receipt | None:
    found = [r for r in find(root, target, pack) if lane is None or r.lane == lane]
    return found[-1] if found else None


def latest_by_lane(root: Path, target: str, pack: str, receipts_dir: Path | None = None) -> dict[str, Receipt]:
    """Each lane's latest receipt, from one scan of the pack's receipts (callers that loop over lanes)."""
    return {r.lane: r for r in find(root, target, pack, receipts_dir)}  # oldest first: the last one per lane stays


def display_path(path: Path, root: Path) -> str:
    """``path`` relative to the repository root when it lies inside it (as tracking.toml names receipts)."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def host_description(receipt: Receipt) -> str:
    """'<GPU> (cc <x.y>)', else the platform, as tracking.toml's validation entries name the host."""
    host = receipt.host
    if host is not None and host.gpu:
        return f"{host.gpu} (cc {host.compute_capability})"
    return (host.platform if host is not None else None) or "unknown host"


def summary(receipt: Receipt, root: Path) -> dict:
    """The validation entry tracking.toml keeps for a lane: the latest receipt in brief."""
    path = receipt.path
    assert path is not None, "only a written receipt is summarized"
    return {
        "verdict": receipt.verdict.value,
        "expected": receipt.expected.value,
        "seen": ", ".join(receipt.sentinels) or "none",
        "base": receipt.base.name,
        "patched": receipt.patched,
        "host": host_description(receipt),
        "date": receipt.started,
        "receipt": display_path(path, root),
    }
