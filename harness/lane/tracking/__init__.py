"""tracking.toml: one entry per pack, edited by people and by the tool.

The file is read and written with tomlkit so comments, order and formatting
survive the tool's edits. Loading validates everything a run relies on and
names the pack and key at fault: unknown targets, kinds and states, unknown
packs in ``depends_on``, dependency cycles, lanes on bases the manifest lacks,
unknown sentinels.

May import: ``harness.errors``, ``harness.base``, ``harness.upstream``, ``harness.lane.suite``,
``harness.lane.upstream_tests``.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import os
import re
import stat
import string
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as field_
from functools import cache
from pathlib import Path
from typing import Any

import tomlkit
from filelock import FileLock

from harness.base import ui
from harness.base.tomlutil import choice, field, load_document, str_list
from harness.errors import ConfigError, WriteError
from harness.lane import suite, upstream_tests
from harness.upstream import pins

KINDS = ("pr", "issue", "comment", "regression-guard", "bug-report", "contract")
STATES = ("planned", "held", "ready", "filed", "absorbed", "retired", "blocked")
THREAD_STATES = ("open", "draft", "merged", "closed", "unknown")
REQUIRES = ("cuda", "cpu")
MITIGATION_STATUS = ("active", "retired")
# What a pack's change is; `harness waves` files crash fixes first and refactors late.
CLASSES = ("crash-fix", "refactor", "feature", "precision", "perf")
# Kinds that carry no patch of ours: their lanes observe upstream builds only, so a patched lane (or a lane
# expecting a fix sentinel) would claim to validate a fix that does not exist.
UNPATCHED_KINDS = ("bug-report", "regression-guard")
# Sentinels that judge our patched build; only a patched lane may expect them.
FIX_SENTINELS = ("FIX_VALIDATED", "FIX_FAILED")
PACK_ID = re.compile(r"^[0-9]{2}$")
_LANE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
DEFAULT_TIMEOUT = 900
SCHEMA = 1  # tracking.toml's top-level `schema`: the layout this module reads

# The closed schema: every key a table may hold. An unknown key is warned about (naming file, pack and key),
# the way pre-commit treats its config: a typo such as `depends-on` must not pass silently.
TOP_KEYS = frozenset({"schema", "packs"})
PACK_KEYS = frozenset({
    "title", "target", "kind", "class", "state", "files", "depends_on", "summary", "fix", "requires", "base",
    "filing_base", "reproducer", "lanes", "threads", "validation", "absorbed", "mitigation", "blocked", "held",
    "filing", "performance", "evidence", "evidence_note", "minimal_repro",
    "related",  # [[packs.NN.related]]: a decision per upstream thread or commit that overlaps the pack
    "suites",  # [[packs.NN.suites]]: the upstream suite at a base, run unpatched and patched (suites/NN/BASE.toml)
    "error",  # the error message the pack fixes, as users see it (harness related searches upstream for it)
    # free-text notes people keep next to the data
    "note", "notes", "base_note", "patch_note", "contract_note",
    # data a contract pack's reproducer documents (pack 23)
    "explicit_pre_norm", "uses_identity_norm",
})
LANE_KEYS = frozenset({"name", "base", "patched", "expect", "args", "timeout", "requires", "with_baseline", "nproc",
                       "with_builds", "minimal", "note", "upstream_tests", "expect_failed",
                       "test_requires",
                       # how `harness sweep` may place the lane on a GPU (docs/sweep.md)
                       "exclusive", "gpu_memory_gib"})
# [[packs.NN.suites]]: where and how the recorded selection (suites/NN/BASE.toml) runs; expanded into suite lanes
SUITE_KEYS = frozenset({"base", "requires", "with_builds", "test_requires", "timeout", "shards", "exclusive",
                        "gpu_memory_gib", "note"})
SUITE_SIDES = (("base", False), ("patched", True))
# The kit that runs a pack's minimal reproducer as a lane (``minimal = true``): it prints the stamp, runs the
# script unchanged and maps its exit status (1: the bug shows, 0: it does not) to the sentinel.
MINIMAL_RUNNER = "repros/kit/_minimal.py"  # not repros/_*.py: those are pinned by every receipt
THREAD_KEYS = frozenset({"url", "role", "state", "verified", "updated", "note", "ours"})
# What the person filing decided about an upstream PR, issue or commit that overlaps the pack (docs/related.md):
# upstream's work replaces ours (the pack is not filed), ours builds on it, our body goes there as a comment,
# the two are unrelated, or it repeats something of ours.
RELATIONS = ("supersedes-us", "we-extend", "comment-there", "independent", "duplicate-of-ours")
RELATED_KEYS = frozenset({"ref", "relation", "reason", "date", "kind", "state"})
# What a related ref is (key 'kind'; a commit ref is a commit) and where it stands (key 'state'): a filing body
# names both, with the decision's one-line reason, so a related thread is never described by a fixed phrase.
# Whether it is in another repository follows from its ref.
RELATED_KINDS = ("pr", "issue", "commit")
RELATED_STATES = ("open", "draft", "merged", "closed")
# 'owner/repo#N' (a pull request or issue) or 'owner/repo@<full sha>' (a commit)
RELATED_REF = re.compile(r"^(?P<slug>[\w.-]+/[\w.-]+)(?:#(?P<num>[1-9][0-9]*)|@(?P<sha>[0-9a-f]{40}))$")
# What `harness threads refresh` found of ours on a thread: our comment on it, or we opened it.
OURS = ("comment", "author")


@cache
def sentinels(root: Path) -> dict[str, str]:
    """The sentinel vocabulary, read from the reproducers' own contract module, and the upstream-test runner's."""
    spec = importlib.util.spec_from_file_location("_lane", root / "repros" / "_lane.py")
    if spec is None or spec.loader is None:
        raise ConfigError(f"{root / 'repros' / '_lane.py'}: missing")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return dict(mod.SENTINELS) | upstream_tests.SENTINELS


@dataclass(frozen=True)
class Lane:
    name: str
    base: str
    patched: bool
    expect: str
    args: tuple[str, ...] = ()
    timeout: int = DEFAULT_TIMEOUT
    requires: str | None = None  # overrides the pack's ``requires`` for this lane
    with_baseline: bool = False  # the reproducer also gets the unpatched build (HARNESS_BASELINE_SITE)
    nproc: int = 1  # >1: launched with torch.distributed.run, one process per rank (per GPU on cuda lanes)
    extra_builds: tuple[tuple[str, str], ...] = ()  # (target, base) baseline builds also put on PYTHONPATH
    minimal: bool = False  # runs the pack's minimal_repro through MINIMAL_RUNNER instead of its reproducer
    # an upstream-test lane (docs/upstream-tests.md): pytest node ids of the upstream tree run against the build,
    # the ids of those that must fail, and pip pins the tests need besides the base's runtime and pytest
    upstream_tests: tuple[str, ...] = ()
    expect_failed: tuple[str, ...] = ()
    test_requires: tuple[str, ...] = ()
    # `harness sweep` (docs/sweep.md): True, the lane's GPU(s) are its own while it runs (a time or memory figure);
    # None, decided from the lane (a performance row, a MEMORY_* sentinel, a timing/memory argument); False, not
    exclusive: bool | None = None
    gpu_memory_gib: float | None = None  # the most GPU memory one rank uses: lanes within it may share a GPU
    # a suite lane (expanded from [[packs.NN.suites]]): shard I of N of the collected cases, ids excluded with reason
    shard: tuple[int, int] | None = None
    deselect: tuple[str, ...] = ()

    @property
    def suite(self) -> bool:
        return self.shard is not None


# How an evidence row picks among the figures it matches (see EvidenceRow).
PICKS = ("first", "max", "min")
BUILDS = ("release", "change")  # an evidence row's optional 'build' (a with_baseline lane measures both)


@dataclass(frozen=True)
class EvidenceRow:
    """One row of a filing body's evidence table: figures of a lane's latest receipt, never a typed value.

    ``figure`` and ``where`` select figures (name, then equal keys); ``pick`` chooses the one shown
    (the first, or the one with the largest / smallest ``value``); ``label`` and ``show`` are format
    strings over that figure's keys (``{value}``, ``{tolerance}``, ``{value.output}`` for a dict) and
    over counts across every selected figure (``{count}``, ``{n_ok}``, ``{n_finite}``, ``{n_bitwise}``,
    ``{n_true}``, ``{not_bitwise}``). ``figure = "@verdict"`` reads the run's last sentinel instead: its
    details are the keys and ``{value}`` its name. See harness/filing/evidence.py.
    """

    lane: str
    figure: str
    label: str
    show: str = "{value}"
    pick: str = "first"
    where: tuple[tuple[str, Any], ...] = ()
    build: str | None = None  # "release" / "change": which build the figure describes, when not the lane's own


@dataclass(frozen=True)
class Validation:
    """``[packs.NN.validation.<lane>]``: the lane's latest receipt in brief, as ``harness run`` records it."""

    verdict: str
    receipt: str | None = None  # repository-relative path of the receipt directory's receipt.json
    host: str | None = None
    date: str | None = None
    expected: str | None = None
    seen: str | None = None
    base: str | None = None
    patched: bool | None = None


VALIDATION_KEYS = frozenset({"verdict", "receipt", "host", "date", "expected", "seen", "base", "patched", "note"})


@dataclass(frozen=True)
class Thread:
    url: str
    role: str
    state: str
    verified: str | None
    updated: str | None = None
    ours: str | None = None  # "comment" / "author": what threads refresh found of the filer's there


@dataclass(frozen=True)
class Decision:
    """``[[packs.NN.related]]``: one upstream PR, issue or commit overlapping the pack, and what to do about it."""

    ref: str  # owner/repo#N or owner/repo@<40-hex sha>
    relation: str  # one of RELATIONS
    reason: str
    date: datetime.date
    kind: str | None = None  # one of RELATED_KINDS; None: not recorded yet (a filing body cannot name it)
    state: str | None = None  # one of RELATED_STATES; None: not recorded yet

    @property
    def slug(self) -> str:
        m = RELATED_REF.match(self.ref)
        assert m is not None  # checked when loaded
        return m["slug"]

    @property
    def url(self) -> str:
        m = RELATED_REF.match(self.ref)
        assert m is not None  # checked when loaded
        if m["sha"]:
            return f"https://github.com/{m['slug']}/commit/{m['sha']}"
        return f"https://github.com/{m['slug']}/issues/{m['num']}"  # GitHub redirects to the pull when it is one


@dataclass(frozen=True)
class Pack:
    id: str
    title: str
    target: str
    kind: str
    state: str
    files: tuple[str, ...]
    depends_on: tuple[str, ...]
    summary: str
    requires: str
    base: str | None
    reproducer: str | None
    lanes: tuple[Lane, ...]
    threads: tuple[Thread, ...]
    absorbed: dict | None
    mitigation: dict | None
    blocked: str | None
    cls: str | None = None  # tracking.toml key 'class'
    held: str | None = None  # why a pack in state "held" is held back
    # the base a filing of this pack is made against: key 'filing_base', else the manifest's, else its base
    filing_base: str = ""
    evidence: tuple[EvidenceRow, ...] = ()  # [[packs.NN.evidence]]: what the filing body shows
    validation: dict[str, Validation] = field_(default_factory=dict)  # per lane name: its latest receipt
    # [[packs.NN.performance]]: the pack's performance claims, rows like evidence rows; each is measured on its
    # lane's base, and its value is read from that lane's latest receipt (harness/filing/evidence.py resolves both)
    performance: tuple[EvidenceRow, ...] = ()
    evidence_note: str = ""  # how the figures were obtained (prose without figures), printed under the table
    # a plain script (upstream API and torch, at most 40 lines, `python repro.py`, exit 1 while the bug shows)
    # that issue and bug-report bodies inline; lanes with ``minimal = true`` run it unchanged
    minimal_repro: str | None = None
    fix: str = ""  # what the change does, in a line (key 'fix')
    related: tuple[Decision, ...] = ()  # [[packs.NN.related]], in file order
    error: str = ""  # the error message the pack fixes (key 'error')

    @property
    def state_reason(self) -> str | None:
        """The recorded reason of a blocked or held pack (keys ``blocked`` / ``held``), if any."""
        return {"blocked": self.blocked, "held": self.held}.get(self.state)

    def lane_script(self, lane: Lane) -> str | None:
        """The script a lane runs and its receipt pins: the upstream-test runner, the minimal reproducer, or
        the pack's reproducer."""
        if lane.upstream_tests:
            return upstream_tests.SUITE_RUNNER if lane.suite else upstream_tests.RUNNER
        return self.minimal_repro if lane.minimal else self.reproducer

    def lane_runner(self, lane: Lane) -> str | None:
        """The script a lane launches (its helper modules are pinned too): the upstream-test runner, the minimal
        kit, or the reproducer."""
        if lane.upstream_tests:
            return upstream_tests.SUITE_RUNNER if lane.suite else upstream_tests.RUNNER
        return MINIMAL_RUNNER if lane.minimal else self.reproducer

    def lane_requires(self, lane: Lane) -> str:
        """What hardware ``lane`` needs: its own ``requires``, else the pack's."""
        return lane.requires or self.requires

    def lane(self, name: str) -> Lane:
        for lane in self.lanes:
            if lane.name == name:
                return lane
        known = ", ".join(lane.name for lane in self.lanes) or "none"
        raise ConfigError(f"pack {self.id} has no lane '{name}' (lanes: {known})")


class Tracking:
    """The parsed, validated tracking.toml plus its round-trippable document.

    The tool's edits go through ``edit`` (or the ``record_*`` / ``update_*`` methods built on it):
    each is applied to ``doc`` at once and remembered, and ``save`` replays them, under a lock, on
    the file as it is then. Two processes that loaded the file before either saved therefore both
    keep their edits, and a person's edit saved in the meantime survives.
    """

    def __init__(self, root: Path, path: Path, doc: tomlkit.TOMLDocument, packs: dict[str, Pack]):
        self.root = root
        self.path = path
        self.doc = doc
        self.packs = packs
        self._edits: list[tuple[Callable[[tomlkit.TOMLDocument], None], str | None]] = []

    @classmethod
    def load(cls, root: Path, path: Path | None = None) -> Tracking:
        path = path or root / "tracking.toml"
        doc = load_document(path)
        schema = doc.get("schema")
        if schema is not None and schema != SCHEMA:
            raise ConfigError(f"{path}: key 'schema' is {schema!r}; this harness reads schema {SCHEMA}",
                              hint="upgrade the harness, or check the file was not written by another tool")
        warnings = unknown_keys(path, doc)
        for line in warnings:
            ui.warn(line)
        packs_table = doc.get("packs")
        if not isinstance(packs_table, dict) or not packs_table:
            raise ConfigError(f"{path}: no [packs.NN] tables")
        packs = {}
        manifests: dict[str, pins.Manifest] = {}
        for pid, table in packs_table.items():
            where = f"{path} [packs.{pid}]"
            if not PACK_ID.match(pid):
                raise ConfigError(f"{where}: pack ids are two digits, like 09")
            if not isinstance(table, dict):
                raise ConfigError(f"{where}: must be a table")
            packs[pid] = _load_pack(root, pid, table, where, manifests)
        _check_graph(path, packs)
        return cls(root, path, doc, packs)

    def pack(self, pid: str) -> Pack:
        pid = normalize_id(pid)
        try:
            return self.packs[pid]
        except KeyError:
            raise ConfigError(f"no pack '{pid}' in {self.path} (packs: {', '.join(self.packs)})") from None

    def closure(self, pid: str) -> list[Pack]:
        """The pack's dependencies (transitively, dependencies first), then the pack."""
        order: list[Pack] = []
        seen: set[str] = set()

        def visit(p: str) -> None:
            if p in seen:
                return
            seen.add(p)
            for dep in self.packs[p].depends_on:
                visit(dep)
            order.append(self.packs[p])

        visit(self.pack(pid).id)
        return order

    # ------------------------------------------------------------------ tool edits

    def edit(self, change: Callable[[tomlkit.TOMLDocument], None], pack: str | None = None) -> None:
        """Apply ``change`` to the document now, and again to the file's current text when saving.

        ``pack`` names the pack whose table it changes, for the message when that pack is gone by then.
        """
        change(self.doc)
        self._edits.append((change, pack))

    def record_validation(self, pid: str, lane: str, entry: dict[str, Any]) -> None:
        """Set ``[packs.<pid>.validation.<lane>]`` to ``entry`` (replacing what was there)."""

        def change(doc) -> None:
            table = doc["packs"][pid]
            if "validation" not in table:
                validation = tomlkit.table(is_super_table=True)
                table.append("validation", validation)
            lane_table = tomlkit.table()
            for key, value in entry.items():
                if value is not None:
                    lane_table[key] = value
            table["validation"][lane] = lane_table

        self.edit(change, pid)

    def update_thread(self, pid: str, index: int, values: dict[str, Any]) -> None:
        """Set keys of ``[[packs.<pid>.threads]]`` entry ``index`` (existing keys keep their place)."""

        def change(doc) -> None:
            thread = doc["packs"][pid]["threads"][index]
            for key, value in values.items():
                if value is not None:
                    thread[key] = value

        self.edit(change, pid)

    def check_filing_slot(self, pid: str) -> None:
        table = self.doc["packs"][pid]
        if "filing" in table and not isinstance(table["filing"], dict):
            raise ConfigError(f"{self.path} [packs.{pid}]: key 'filing' is a note, not a table; "
                              "a filing cannot be recorded over it")

    def record_filing(self, pid: str, entry: dict[str, Any]) -> None:
        """Set ``[packs.<pid>.filing]``: who decided to post, when, and what was posted."""
        self.check_filing_slot(pid)

        def change(doc) -> None:
            filing = tomlkit.table()
            for key, value in entry.items():
                if value is not None:
                    filing[key] = value
            doc["packs"][pid]["filing"] = filing

        self.edit(change, pid)

    def save(self) -> None:
        """Write the edits made since the last save, serialized with every other process saving this file.

        Under an exclusive lock (``.<name>.lock`` beside the file) the file is read again, the edits
        are replayed on what it holds now, and the result replaces it atomically: the old file stays
        whole if anything fails.
        """
        with FileLock(str(self.path.with_name(f".{self.path.name}.lock"))):
            doc = load_document(self.path)
            for change, pid in self._edits:
                try:
                    change(doc)
                except (KeyError, IndexError) as exc:
                    packs = doc.get("packs")
                    if pid is not None and (not isinstance(packs, dict) or pid not in packs):
                        gone = f"[packs.{pid}] was removed from it"
                    else:
                        gone = f"what this command updates{f' in [packs.{pid}]' if pid else ''} is gone ({exc})"
                    raise ConfigError(f"{self.path}: changed while this command ran; {gone}, so this command's "
                                      "update cannot be applied (nothing written)") from None
            text = tomlkit.dumps(doc)
            mode = stat.S_IMODE(self.path.stat().st_mode)  # the file keeps its mode (mkstemp would make it 0600)
            try:
                fd, tmp = tempfile.mkstemp(prefix=".tracking-", suffix=".toml", dir=self.path.parent)
            except OSError as exc:
                raise WriteError.of(exc, "tracking.toml's new copy", self.path.parent) from None
            try:
                os.fchmod(fd, mode)
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(text)
                    fh.flush()
                    os.fsync(fh.fileno())  # a full disk shows here at the latest, before the old file is replaced
                os.replace(tmp, self.path)
            except OSError as exc:
                Path(tmp).unlink(missing_ok=True)
                raise WriteError.of(exc, "tracking.toml", self.path,
                                    hint=f"free space in {self.path.parent}; {self.path} is as it was") from None
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        self.doc = doc
        self._edits.clear()


def unknown_keys(path: Path, doc) -> list[str]:
    """One line per key tracking.toml holds that its schema does not declare (file, table and key named)."""
    out = []
    if doc.get("schema") is None:
        out.append(f"{path}: no top-level 'schema = {SCHEMA}'")
    out += [f"{path}: unknown top-level key '{k}'" for k in doc if k not in TOP_KEYS]
    for pid, table in (doc.get("packs") or {}).items():
        if not isinstance(table, dict):
            continue
        out += [f"{path} [packs.{pid}]: unknown key '{k}'" for k in table if k not in PACK_KEYS]
        for kind, known in (("lanes", LANE_KEYS), ("threads", THREAD_KEYS), ("related", RELATED_KEYS),
                            ("suites", SUITE_KEYS)):
            for i, entry in enumerate(table.get(kind) or []):
                if isinstance(entry, dict):
                    out += [f"{path} [packs.{pid}] {kind}[{i}]: unknown key '{k}'" for k in entry if k not in known]
        for lane, entry in (table.get("validation") or {}).items():
            if isinstance(entry, dict):
                out += [f"{path} [packs.{pid}.validation.{lane}]: unknown key '{k}'" for k in entry
                        if k not in VALIDATION_KEYS]
    return out


def _date_text(value) -> str | None:
    """A thread's ``verified`` date, written either as a TOML date or as a string."""
    return None if value is None else str(value)


def normalize_id(pid: str) -> str:
    """'9', '09', 'pack09' and 'liger_pack09' all name pack 09."""
    m = re.search(r"(\d+)$", str(pid))
    return f"{int(m.group(1)):02d}" if m else str(pid)


def _load_pack(root: Path, pid: str, t, where: str, manifests: dict) -> Pack:
    target = field(t, "target", str, where)
    if target not in manifests:
        try:
            manifests[target] = pins.load_manifest(root, target)
        except ConfigError as exc:
            raise ConfigError(f"{where}: key 'target': {exc}") from None
    manifest = manifests[target]
    base = field(t, "base", str, where, default=None)
    if base is not None and base not in manifest.bases:
        raise ConfigError(f"{where}: key 'base' is '{base}', not a base of {manifest.path.name} "
                          f"({', '.join(manifest.bases)})")
    reproducer = field(t, "reproducer", str, where, default=None)
    if reproducer is not None and not (root / reproducer).is_file():
        raise ConfigError(f"{where}: key 'reproducer': {reproducer} does not exist")
    lanes = tuple(_load_lane(root, manifest, lt, f"{where} lanes[{i}]") for i, lt in enumerate(t.get("lanes", [])))
    lanes += tuple(lane for i, st in enumerate(t.get("suites", []))
                   for lane in _suite_lanes(root, manifest, pid, st, f"{where} suites[{i}]"))
    if reproducer is None and any(not lane.upstream_tests for lane in lanes):
        raise ConfigError(f"{where}: lanes are defined but key 'reproducer' is missing")
    minimal_repro = field(t, "minimal_repro", str, where, default=None)
    if minimal_repro is not None and not (root / minimal_repro).is_file():
        raise ConfigError(f"{where}: key 'minimal_repro': {minimal_repro} does not exist")
    if minimal_repro is None and any(lane.minimal for lane in lanes):
        raise ConfigError(f"{where}: a lane has minimal = true but key 'minimal_repro' is missing")
    kind = choice(t, "kind", KINDS, where)
    _check_lanes_fit_kind(kind, lanes, where)
    names = [lane.name for lane in lanes]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ConfigError(f"{where}: duplicate lane name(s) {', '.join(sorted(dup))}")
    threads = tuple(
        Thread(
            url=field(th, "url", str, f"{where} threads[{i}]"),
            role=field(th, "role", str, f"{where} threads[{i}]", default="context"),
            state=choice(th, "state", THREAD_STATES, f"{where} threads[{i}]", default="unknown"),
            verified=_date_text(field(th, "verified", (str, datetime.date), f"{where} threads[{i}]", default=None)),
            updated=field(th, "updated", str, f"{where} threads[{i}]", default=None),
            ours=choice(th, "ours", OURS, f"{where} threads[{i}]") if "ours" in th else None,
        )
        for i, th in enumerate(t.get("threads", []))
    )
    _check_threads(threads, manifest, pid, where)
    related = _load_related(t.get("related", []), where, pid)
    mitigation = t.get("mitigation")
    if mitigation is not None:
        mwhere = f"{where} .mitigation"
        field(mitigation, "what", str, mwhere)
        field(mitigation, "retire_when", str, mwhere)
        choice(mitigation, "status", MITIGATION_STATUS, mwhere, default="active")
    absorbed = t.get("absorbed")
    if absorbed is not None:
        awhere = f"{where} .absorbed"
        field(absorbed, "version", str, awhere)
        at = field(absorbed, "base", str, awhere, default=None)  # absorbed at a base of the manifest (e.g. main)
        if at is not None and at not in manifest.bases:
            raise ConfigError(f"{awhere}: key 'base' is '{at}', not a base of {manifest.path.name} "
                              f"({', '.join(manifest.bases)})")
    filing_base = field(t, "filing_base", str, where, default=None) or manifest.filing_base \
        or base or manifest.default_base
    if filing_base not in manifest.bases:
        raise ConfigError(f"{where}: key 'filing_base' is '{filing_base}', not a base of {manifest.path.name} "
                          f"({', '.join(manifest.bases)})")
    depends = tuple(normalize_id(d) for d in str_list(t, "depends_on", where))
    evidence = tuple(_load_evidence(ev, f"{where} evidence[{i}]", {lane.name for lane in lanes})
                     for i, ev in enumerate(t.get("evidence", [])))
    validation = _load_validation(t.get("validation", {}), f"{where} .validation")
    perf = t.get("performance", [])
    if not isinstance(perf, list):
        raise ConfigError(f"{where} .performance: must be an array of tables ([[packs.NN.performance]]), each "
                          "naming a lane and a figure: performance figures are read from receipts, never typed here")
    performance = tuple(_load_evidence(pr, f"{where} performance[{i}]", {lane.name for lane in lanes})
                        for i, pr in enumerate(perf))
    for lane in lanes:
        if lane.exclusive is False and any(row.lane == lane.name for row in performance):
            raise ConfigError(f"{where}: lane '{lane.name}' has exclusive = false, but a [[packs.{pid}.performance]] "
                              "row reads its figures: a time or memory claim is measured with its GPU to itself")
    return Pack(
        id=pid,
        title=field(t, "title", str, where),
        target=target,
        kind=kind,
        state=choice(t, "state", STATES, where),
        files=tuple(str_list(t, "files", where)),
        depends_on=depends,
        summary=field(t, "summary", str, where, default=""),
        fix=field(t, "fix", str, where, default=""),
        requires=choice(t, "requires", REQUIRES, where, default="cuda"),
        base=base,
        reproducer=reproducer,
        lanes=lanes,
        threads=threads,
        absorbed=absorbed.unwrap() if absorbed is not None else None,
        mitigation=mitigation.unwrap() if mitigation is not None else None,
        blocked=field(t, "blocked", str, where, default=None),
        held=field(t, "held", str, where, default=None),
        cls=choice(t, "class", CLASSES, where) if "class" in t else None,
        filing_base=filing_base,
        evidence=evidence,
        performance=performance,
        validation=validation,
        evidence_note=field(t, "evidence_note", str, where, default=""),
        related=related,
        error=field(t, "error", str, where, default=""),
        minimal_repro=minimal_repro,
    )


_GITHUB_THREAD = re.compile(r"^https?://github\.com/([^/\s]+)/([^/\s#?]+)/(?:pull|issues)/([0-9]+)(?:[/?#].*)?$",
                            re.IGNORECASE)


def _thread_key(url: str) -> str:
    """``owner/repo#N`` in lower case for a GitHub pull request or issue (GitHub's names ignore case, and a pull
    request is also an issue of the same number); any other URL lower-cased, without a trailing slash."""
    m = _GITHUB_THREAD.match(url.strip())
    return f"{m.group(1)}/{m.group(2)}#{m.group(3)}".lower() if m else url.strip().rstrip("/").lower()


def _repo_slug(url: str) -> str:
    """``owner/repo`` (lower case) of a GitHub URL, "" for any other."""
    m = re.match(r"^https?://github\.com/([^/\s]+)/([^/\s#?]+?)(?:\.git)?(?:[/?#].*)?$", url.strip(), re.IGNORECASE)
    return f"{m.group(1)}/{m.group(2)}".lower() if m else ""


def _located(where: str, pid: str, needle: str, nth: int = 0) -> str:
    """``where`` with ``:LINE`` after the file name: the line of the ``nth`` occurrence of ``needle`` (compared
    case-insensitively) inside the tables of pack ``pid``; ``where`` unchanged when it cannot be found."""
    path_text, sep, rest = where.partition(" [packs.")
    try:
        lines = Path(path_text).read_text(encoding="utf-8").splitlines()
    except OSError:
        return where
    inside, seen = False, 0
    for no, line in enumerate(lines, 1):
        head = line.strip()
        if head.startswith("["):
            inside = re.match(rf"^\[\[?packs\.{re.escape(pid)}[\].]", head) is not None
        elif inside and needle.lower() in line.lower():
            if seen == nth:
                return f"{path_text}:{no}{sep}{rest}"
            seen += 1
    return where


def _check_threads(threads: tuple[Thread, ...], manifest: pins.Manifest, pid: str, where: str) -> None:
    """One entry per thread (case and pull/issues aside), and a filing target in the pack's own repository."""
    seen: dict[str, tuple[int, Thread]] = {}
    count: dict[str, int] = {}
    own = _repo_slug(manifest.repo)
    for i, th in enumerate(threads):
        key = _thread_key(th.url)
        nth = count.get(th.url.lower(), 0)
        count[th.url.lower()] = nth + 1
        here = _located(f"{where} threads[{i}]", pid, th.url, nth)
        if key in seen:
            j, first = seen[key]
            how = (f"with contradictory states ({first.state!r} there, {th.state!r} here)" if first.state != th.state
                   else "twice")
            raise ConfigError(f"{here}: {th.url} is threads[{j}] ({first.url}) again, listed {how}; keep one "
                              "entry per thread (GitHub's names ignore case)")
        seen[key] = (i, th)
        if th.role == "filing target" and own and _repo_slug(th.url) != own:
            raise ConfigError(f"{here}: the filing target {th.url} is not in the pack's target repository "
                              f"({manifest.repo}, {manifest.path.name})")


def _load_related(entries, where: str, pid: str = "") -> tuple[Decision, ...]:
    """The pack's decisions about overlapping upstream work; a relation outside RELATIONS is refused, and so
    are one candidate decided twice (case aside) and a decision dated after today."""
    if not isinstance(entries, list):
        raise ConfigError(f"{where} .related: must be an array of tables ([[packs.NN.related]])")
    out, seen = [], set()
    for i, entry in enumerate(entries):
        rwhere = f"{where} related[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{rwhere}: must be a table ([[packs.NN.related]])")
        ref = field(entry, "ref", str, rwhere)
        if not RELATED_REF.match(ref):
            raise ConfigError(f"{rwhere}: key 'ref' is {ref!r}; write 'owner/repo#N' for a pull request or issue, "
                              "'owner/repo@<full 40-hex sha>' for a commit")
        if ref.lower() in seen:
            rwhere = _located(rwhere, pid, ref, 1)
            raise ConfigError(f"{rwhere}: {ref} is decided twice (GitHub's names ignore case); keep one entry "
                              "(edit its date when you re-decide)")
        seen.add(ref.lower())
        relation = field(entry, "relation", str, rwhere)
        if relation not in RELATIONS:
            raise ConfigError(f"{rwhere} ({ref}): relation '{relation}' is not one of {', '.join(RELATIONS)}")
        reason = field(entry, "reason", str, rwhere)
        if not reason.strip() or "\n" in reason.strip():
            raise ConfigError(f"{rwhere} ({ref}): key 'reason' must be one line, saying why")
        kind = entry.get("kind")
        if kind is not None and kind not in RELATED_KINDS:
            raise ConfigError(f"{rwhere} ({ref}): kind {kind!r} is not one of {', '.join(RELATED_KINDS)}")
        if kind is not None and ("@" in ref) != (kind == "commit"):
            raise ConfigError(f"{rwhere} ({ref}): kind '{kind}' does not fit the ref (a commit is 'owner/repo@sha' "
                              "and only that)")
        state = entry.get("state")
        if state is not None and state not in RELATED_STATES:
            raise ConfigError(f"{rwhere} ({ref}): state {state!r} is not one of {', '.join(RELATED_STATES)}")
        date = _iso_date(entry.get("date"), f"{rwhere} ({ref})")
        if date > latest_today():
            raise ConfigError(f"{_located(rwhere, pid, ref)} ({ref}): key 'date' is {date.isoformat()}, after today "
                              f"({latest_today().isoformat()} at the latest anywhere); a decision is dated when it "
                              "was made (a later date would hide every newer candidate from readiness)")
        out.append(Decision(ref, relation, reason.strip(), date, kind, state))
    return tuple(out)


def latest_today() -> datetime.date:
    """The latest date it is now anywhere on Earth (UTC+14): a date after it is in the future for everyone."""
    return (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=14)).date()


def _iso_date(value, where: str) -> datetime.date:
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    if isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            pass
    raise ConfigError(f"{where}: key 'date' must be an ISO date such as 2026-11-24 (when it was decided)")


def _load_validation(t, where: str) -> dict[str, Validation]:
    if not isinstance(t, dict):
        raise ConfigError(f"{where}: must be a table of lanes ([packs.NN.validation.<lane>])")
    out = {}
    for lane, entry in t.items():
        lwhere = f"{where}.{lane}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{lwhere}: must be a table")
        out[str(lane)] = Validation(
            verdict=field(entry, "verdict", str, lwhere),
            receipt=field(entry, "receipt", str, lwhere, default=None),
            host=field(entry, "host", str, lwhere, default=None),
            date=str(entry["date"]) if "date" in entry else None,
            expected=field(entry, "expected", str, lwhere, default=None),
            seen=field(entry, "seen", str, lwhere, default=None),
            base=field(entry, "base", str, lwhere, default=None),
            patched=field(entry, "patched", bool, lwhere, default=None),
        )
    return out


def _load_evidence(t, where: str, lanes: set[str]) -> EvidenceRow:
    if not isinstance(t, dict):
        raise ConfigError(f"{where}: must be a table ([[packs.NN.evidence]])")
    lane = field(t, "lane", str, where)
    if lane not in lanes:
        raise ConfigError(f"{where}: key 'lane' is '{lane}', not a lane of this pack ({', '.join(sorted(lanes))})")
    row = EvidenceRow(lane=lane, figure=field(t, "figure", str, where), label=field(t, "label", str, where),
                      show=field(t, "show", str, where, default="{value}"),
                      pick=choice(t, "pick", PICKS, where, default="first"),
                      where=tuple(sorted(field(t, "where", dict, where, default={}).items())),
                      build=choice(t, "build", BUILDS, where) if "build" in t else None)
    for key in ("label", "show"):
        try:
            list(string.Formatter().parse(getattr(row, key)))
        except ValueError as exc:
            raise ConfigError(f"{where}: key '{key}' is not a valid format string: {exc}") from None
    return row


def _check_lanes_fit_kind(kind: str, lanes: tuple[Lane, ...], where: str) -> None:
    """A lane must not claim to validate a fix the pack does not carry."""
    for lane in lanes:
        if kind in UNPATCHED_KINDS and lane.patched:
            raise ConfigError(f"{where}: lane '{lane.name}' has patched = true, but a {kind} pack carries no "
                              "patch of ours; its lanes run upstream builds only (key 'patched')")
        if lane.expect in FIX_SENTINELS and not lane.patched:
            raise ConfigError(f"{where}: lane '{lane.name}' expects {lane.expect} on an unpatched build; only a "
                              "patched lane can validate a fix (key 'expect')")


def _load_lane(root: Path, manifest: pins.Manifest, t, where: str, suite_lane: bool = False) -> Lane:
    name = field(t, "name", str, where)
    if not _LANE_NAME.match(name):
        raise ConfigError(f"{where}: lane name {name!r} may hold only letters, digits, '.', '_' and '-'")
    where = f"{where} ({name})"
    base = field(t, "base", str, where)
    if base not in manifest.bases:
        raise ConfigError(f"{where}: key 'base' is '{base}', not a base of {manifest.path.name} "
                          f"({', '.join(manifest.bases)})")
    upstream = tuple(str_list(t, "upstream_tests", where))
    expect_failed = tuple(str_list(t, "expect_failed", where))
    test_requires = tuple(str_list(t, "test_requires", where))
    if upstream:
        upstream_tests.check_ids(upstream, f"{where}: key 'upstream_tests'")
        if len(set(upstream)) != len(upstream):
            raise ConfigError(f"{where}: key 'upstream_tests' lists an id twice")
        stray = [node for node in expect_failed if node not in upstream]
        if stray:
            raise ConfigError(f"{where}: key 'expect_failed' names {stray[0]!r}, not one of 'upstream_tests'")
        for key in ("args", "with_baseline", "nproc"):
            if key in t:
                raise ConfigError(f"{where}: key '{key}' does not apply to an upstream-test lane")
        wanted = upstream_tests.SENTINEL_SUITE_RAN if suite_lane else upstream_tests.expected_sentinel(expect_failed)
        if t.get("expect", wanted) != wanted:
            raise ConfigError(f"{where}: key 'expect' is '{t['expect']}'; an upstream-test lane "
                              + ("with" if expect_failed else "without") + f" 'expect_failed' expects {wanted}")
    elif expect_failed or test_requires:
        raise ConfigError(f"{where}: keys 'expect_failed' and 'test_requires' need 'upstream_tests'")
    expect = (field(t, "expect", str, where) if not upstream else upstream_tests.SENTINEL_SUITE_RAN if suite_lane
              else upstream_tests.expected_sentinel(expect_failed))
    known = sentinels(root)
    if expect not in known:
        raise ConfigError(f"{where}: key 'expect' is '{expect}', not a sentinel ({', '.join(known)})")
    timeout = field(t, "timeout", int, where, default=DEFAULT_TIMEOUT)
    if timeout <= 0:
        raise ConfigError(f"{where}: key 'timeout' must be positive")
    patched = field(t, "patched", bool, where)
    with_baseline = field(t, "with_baseline", bool, where, default=False)
    if with_baseline and not patched:
        raise ConfigError(f"{where}: key 'with_baseline' needs a patched lane (the baseline is its unpatched twin)")
    requires = choice(t, "requires", REQUIRES, where, default=None) if "requires" in t else None
    nproc = field(t, "nproc", int, where, default=1)
    if nproc < 1:
        raise ConfigError(f"{where}: key 'nproc' must be at least 1")
    extra = []
    for spec in str_list(t, "with_builds", where):
        target, sep, extra_base = spec.partition("@")
        if not sep:
            raise ConfigError(f"{where}: key 'with_builds' entry {spec!r} must read TARGET@BASE")
        try:
            other = pins.load_manifest(root, target)
        except ConfigError as exc:
            raise ConfigError(f"{where}: key 'with_builds': {exc}") from None
        if extra_base not in other.bases:
            raise ConfigError(f"{where}: key 'with_builds': {other.path.name} has no base '{extra_base}'")
        extra.append((target, extra_base))
    exclusive = field(t, "exclusive", bool, where, default=None)
    memory = field(t, "gpu_memory_gib", (int, float), where, default=None)
    if memory is not None and (isinstance(memory, bool) or not memory > 0):
        raise ConfigError(f"{where}: key 'gpu_memory_gib' must be a positive number (GiB one rank uses at most)")
    minimal = field(t, "minimal", bool, where, default=False)
    if minimal and (with_baseline or nproc > 1):
        raise ConfigError(f"{where}: key 'minimal' runs a plain script: no with_baseline, nproc 1")
    return Lane(name=name, base=base, patched=patched, expect=expect,
                args=tuple(str_list(t, "args", where)), timeout=timeout, requires=requires,
                with_baseline=with_baseline, nproc=nproc, extra_builds=tuple(extra), minimal=minimal,
                upstream_tests=upstream, expect_failed=expect_failed, test_requires=test_requires,
                exclusive=exclusive, gpu_memory_gib=float(memory) if memory is not None else None)


def suite_lane_name(base: str, side: str, shard: int, shards: int) -> str:
    return f"suite-{base}-{side}" + (f"-{shard}of{shards}" if shards > 1 else "")


def _suite_lanes(root: Path, manifest: pins.Manifest, pid: str, t, where: str) -> list[Lane]:
    """The lanes of one [[packs.NN.suites]] table: every shard, on the unpatched and on the patched build; their ids
    are the recorded selection's (suites/NN/BASE.toml), their exclusions its [[exclude]] ids."""
    extra = sorted(set(t) - SUITE_KEYS)
    if extra:
        raise ConfigError(f"{where}: unknown key '{extra[0]}' (known: {', '.join(sorted(SUITE_KEYS))})")
    base = field(t, "base", str, where)
    if base not in manifest.bases:
        raise ConfigError(f"{where}: key 'base' is '{base}', not a base of {manifest.path.name}")
    sel = suite.load_for(root, normalize_id(pid), base)
    if sel is None:
        raise ConfigError(f"{where}: no recorded selection {suite.selection_path(root, normalize_id(pid), base)}",
                          hint=f"harness suite select {pid} --base {base}")
    if not sel.ids:
        raise ConfigError(f"{where}: the selection {sel.path} holds no test file")
    shards = field(t, "shards", int, where, default=1)
    if shards < 1:
        raise ConfigError(f"{where}: key 'shards' must be at least 1")
    template = {k: t[k] for k in ("requires", "with_builds", "test_requires", "timeout", "exclusive", "gpu_memory_gib")
                if k in t}
    out = []
    for side, patched in SUITE_SIDES:
        for i in range(1, shards + 1):
            name = suite_lane_name(base, side, i, shards)
            lane = _load_lane(root, manifest, {**template, "name": name, "base": base, "patched": patched,
                                               "upstream_tests": list(sel.ids)}, f"{where} ({name})", suite_lane=True)
            out.append(dataclasses.replace(lane, shard=(i, shards), deselect=sel.deselected))
    return out


def _check_graph(path: Path, packs: dict[str, Pack]) -> None:
    for p in packs.values():
        for dep in p.depends_on:
            if dep not in packs:
                raise ConfigError(f"{path} [packs.{p.id}]: depends_on names unknown pack '{dep}'")
            if dep == p.id:
                raise ConfigError(f"{path} [packs.{p.id}]: depends_on names the pack itself")
    # Depth-first search for a cycle; report it as a path.
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(pid: str) -> None:
        state[pid] = 1
        stack.append(pid)
        for dep in packs[pid].depends_on:
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep):] + [dep]
                raise ConfigError(f"{path}: dependency cycle {' -> '.join(cycle)} (key 'depends_on')")
            if dep not in state:
                visit(dep)
        stack.pop()
        state[pid] = 2

    for pid in packs:
        if pid not in state:
            visit(pid)
