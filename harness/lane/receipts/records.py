"""The parts of a receipt and the closed schema they are read with: the run's base, build, patches,
reproducer, harness, log, kernel cache, host and figures, and the receipt directory's file names."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import ClassVar

from harness.base import clock, ui
from harness.errors import ConfigError

SCHEMA = 2  # 2: the directory carries SHA256SUMS; 1: legacy, only the log is covered by a digest
LOG = "output.log"
MANIFEST = "SHA256SUMS"
RECEIPT = "receipt.json"


def utc_now() -> datetime:
    return clock.now()


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
    # repository-relative path -> sha256 of every repository file the lane's processes imported, read from their
    # module tables at exit (harness/lane/loaded.py); None: not recorded (older receipts, or a run cut short)
    loaded: dict[str, str] | None = None
    _OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"helpers", "loaded"})

    @classmethod
    def from_dict(cls, data: dict, where: str) -> ReproducerRecord:
        digests = {}
        for key in ("helpers", "loaded"):
            digests[key] = found = _take(data, key, "dict", where, required=False)
            if found is not None and not all(isinstance(v, str) for v in found.values()):
                raise ConfigError(f"{where}: key '{key}' must map each file to its sha256")
        return cls(path=_take(data, "path", "str", where), sha256=_take(data, "sha256", "str", where),
                   args=_strings(_take(data, "args", "list", where), "args", where), helpers=digests["helpers"],
                   loaded=digests["loaded"], _keys=cls._present(data, where))


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
