"""The receipt itself (``Receipt``), and its one reader and writer of text: ``load`` and ``dump``."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

from harness.errors import ConfigError
from harness.lane.receipts.records import (
    RECEIPT,
    SCHEMA,
    BaseRecord,
    BuildRecord,
    Figure,
    HarnessRecord,
    Host,
    KernelCacheRecord,
    LogRecord,
    PatchRecord,
    ReproducerRecord,
    Sentinel,
    _Record,
    _sentinel,
    _short,
    _strings,
    _take,
)
from harness.lane.runs import Verdict  # what a run came to: decided by runs.Outcome.verdict, recorded here

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
    # the lane's whole declaration when it ran (harness/lane/declaration.py); None: written before it was recorded
    declaration: dict | None = None
    path: Path | None = field(default=None, kw_only=True, compare=False, metadata={"json": False})
    _OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"log", "visible_devices", "nccl", "kernel_cache",
                                                      "declaration"})

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
            declaration=t("declaration", "dict", required=False),
            path=path, _keys=cls._present(data, where),
        )


_STAMP = re.compile(r"\d{8}T\d{6}Z-")


def misplaced(directory: Path, target: str, pack: str, lane: str) -> str | None:
    """What about a receipt's directory (``<target>/<pack>/<stamp>-<lane>``, as ``writer.write`` makes it)
    disagrees with what its receipt.json says; None when they agree. A receipt counts only where it was written:
    copied under another pack or lane, it would stand as that one's evidence."""
    m = _STAMP.match(directory.name)
    rest = directory.name[m.end():] if m else None  # the lane, or the lane and ".N" for a second run that second
    said = []
    if directory.parent.parent.name != target:
        said.append(f"target {target}")
    if directory.parent.name != pack:
        said.append(f"pack {pack}")
    if rest is None or not (rest == lane or re.fullmatch(re.escape(lane) + r"\.\d+", rest)):
        said.append(f"lane {lane}")
    if not said:
        return None
    return (f"{RECEIPT} says {', '.join(said)}, but its directory is "
            f"{directory.parent.parent.name}/{directory.parent.name}/{directory.name}")


def _verdict(value: str, where: str) -> Verdict:
    try:
        return Verdict(value)
    except ValueError:
        raise ConfigError(f"{where}: key 'verdict' is {value!r}, not one of "
                          f"{', '.join(v.value for v in Verdict)}") from None


def dump(receipt: Receipt) -> str:
    """receipt.json's text: ``to_dict`` as indented JSON with sorted keys."""
    return json.dumps(receipt.to_dict(), indent=2, sort_keys=True) + "\n"


def load(path: Path) -> Receipt:
    return Receipt.load(path)
