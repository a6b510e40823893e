"""Reading a pack's table of tracking.toml into a ``Pack``, with a closed schema: every key a table may hold is
declared here, an unknown one is warned about, and a value that does not fit (an unknown kind, state, base or
sentinel, a dependency cycle) is a ConfigError naming the file, the pack and the key."""

from __future__ import annotations

import dataclasses
import datetime
import re
import string
from collections.abc import Mapping
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from harness.base import regular
from harness.base.tomlutil import choice, field, key_line, str_list
from harness.errors import ConfigError
from harness.lane import suite, upstream_tests
from harness.lane.tracking import layout
from harness.lane.tracking.domain import load_domain
from harness.lane.tracking.model import (
    BUILDS,
    CLASSES,
    DEFAULT_TIMEOUT,
    FIX_SENTINELS,
    KINDS,
    LINT_DECISIONS,
    MITIGATION_STATUS,
    OURS,
    PACK_ID,
    PICKS,
    REQUIRES,
    RETIRE_KINDS,
    SCHEMA,
    STATES,
    THREAD_STATES,
    UNPATCHED_KINDS,
    VERDICTS,
    EvidenceRow,
    Lane,
    LintAtBase,
    Pack,
    Thread,
    normalize_id,
    sentinels,
)
from harness.lane.tracking.threads import _check_threads, _load_related
from harness.upstream import pins

# The closed schema: every key a table may hold. An unknown key is warned about (naming file, pack and key),
# the way pre-commit treats its config: a typo such as `depends-on` must not pass silently.
_LANE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
TOP_KEYS = frozenset({"schema", "packs", VERDICTS})
# A pack's keys, in two places (layout.py): where it stands in tracking.toml, what it declares in its own file.
PACK_KEYS = layout.STANDING_KEYS | layout.DECLARED_KEYS
LANE_KEYS = frozenset({"name", "base", "patched", "expect", "args", "timeout", "requires", "with_baseline", "nproc",
                       "with_builds", "minimal", "note", "upstream_tests", "expect_failed",
                       "test_requires",
                       # how `harness sweep` may place the lane on a GPU (docs/sweep.md)
                       "exclusive", "gpu_memory_gib",
                       "domain",  # sweeps pack.toml's [domain], one process per point
                       "stack", "stack_reason"})  # `harness stack check` leaves the lane out, saying why
# pack.toml's [[suites]]: where and how the recorded selection (suites/NN/BASE.toml) runs; expanded into suite lanes
SUITE_KEYS = frozenset({"base", "requires", "with_builds", "test_requires", "timeout", "shards", "exclusive",
                        "gpu_memory_gib", "note"})
SUITE_SIDES = (("base", False), ("patched", True))
THREAD_KEYS = frozenset({"url", "role", "state", "verified", "updated", "note", "ours"})
RELATED_KEYS = frozenset({"ref", "relation", "reason", "date", "kind", "state", "overlap", "at"})


LINT_AT_BASE_KEYS = frozenset({"base", "files", "decision", "reason"})


# keys an older tracking.toml held that are no longer kept, and what replaced them
_GONE = {"validation": " (no longer kept: receipts/ hold each lane's runs and [verdicts] sums them up; 'harness "
                       "migrate' removes it)"}


_KNOWN = sorted(PACK_KEYS | LANE_KEYS | SUITE_KEYS | THREAD_KEYS | RELATED_KEYS | LINT_AT_BASE_KEYS)
_UNKNOWN = re.compile(r"^(?P<file>[^\s:\[]+?)(?: \[| \w|:).*?unknown (?:top-level )?key '(?P<key>[^']+)'")


_AT_KEY = re.compile(r"^(?P<file>[^\s:\[]+\.toml)(?: (?P<table>[a-z_]+)\[(?P<i>\d+)\]| \[(?P<named>[a-z_.]+)\])?"
                     r"(?P<rest>[^:]*): (?:key|unknown key) '(?P<key>[^']+)'")


def key_located(message: str, root: Path | None = None) -> str:
    """``message`` (``FILE [TABLE[i] (...)]: key 'K' ...``) with ``:LINE`` after the file name: the line of key K
    in the i-th ``[[TABLE]]`` of the file (or in ``[NAMED]``, or at its top); the message unchanged when it names
    no key or the key's line cannot be found. Errors in pack.toml said which table and key, never the line."""
    m = _AT_KEY.match(message)
    if m is None:
        return message
    path = Path(m.group("file"))
    path = path if path.is_absolute() or root is None else root / path
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return message
    if m.group("table"):
        aot = re.compile(rf"^\s*\[\[\s*{re.escape(m.group('table'))}\s*\]\]")
        starts = [n for n, line in enumerate(lines) if aot.match(line)]
        i = int(m.group("i"))
        if i >= len(starts):
            return message
        start = starts[i]
    elif m.group("named"):
        named = re.compile(rf"^\s*\[\s*{re.escape(m.group('named'))}\s*\]")
        start = next((n for n, line in enumerate(lines) if named.match(line)), -1)
        if start < 0:
            return message
    else:
        start = -1  # the top of the file, before its first table
    line = key_line(lines, m.group("key"), start) or (start + 1 if start >= 0 else None)
    return f"{m.group('file')}:{line}{message[len(m.group('file')):]}" if line else message


def located(line: str, root: Path | None = None) -> str:
    """An unknown-key line with where the key sits (``line N`` of its file) and the nearest key the schema knows."""
    import difflib

    m = _UNKNOWN.match(line)
    if m is None:
        return line
    key, extra = m.group("key"), []
    path = Path(m.group("file"))
    path = path if path.is_absolute() or root is None else root / path
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    at = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=", re.M).search(text)
    if at is not None:
        extra.append(f"line {text.count(chr(10), 0, at.start()) + 1}")
    near = difflib.get_close_matches(key, _KNOWN, n=1, cutoff=0.6)
    if near:
        extra.append(f"did you mean '{near[0]}'?")
    return line + (f" ({'; '.join(extra)})" if extra else "")


def _unknown_entries(where: str, table, pid: str, sub: str = "") -> list[str]:
    """Unknown keys of the arrays of tables a pack's table (or its file) holds."""
    out = []
    for kind, known in (("lanes", LANE_KEYS), ("threads", THREAD_KEYS), ("related", RELATED_KEYS),
                        ("suites", SUITE_KEYS), ("lint_at_base", LINT_AT_BASE_KEYS)):
        for i, entry in enumerate(table.get(kind) or []):
            if isinstance(entry, dict):
                out += [f"{where} {kind}[{i}]: unknown key '{k}'" for k in entry if k not in known]
    return out


def unknown_keys(path: Path, doc, root: Path | None = None,
                 declared: Mapping[str, layout.Declarations] | None = None) -> list[str]:
    """One line per key tracking.toml holds that its schema does not declare (file, table and key named), and, with
    ``root``, per key of each pack's file (``patches/<target>/<NN>/pack.toml``) that the pack file's schema lacks
    (``declared``: those files as the caller loaded them already, per pack)."""
    out = []
    if doc.get("schema") is None:
        out.append(f"{path}: no top-level 'schema = {SCHEMA}'")
    out += [f"{path}: unknown top-level key '{k}'" for k in doc if k not in TOP_KEYS]
    for pid, table in (doc.get("packs") or {}).items():
        if not isinstance(table, dict):
            continue
        out += [f"{path} [packs.{pid}]: unknown key '{k}'" + (_GONE.get(k, "")) for k in table if k not in PACK_KEYS]
        out += _unknown_entries(f"{path} [packs.{pid}]", table, pid)
        target = table.get("target")
        if root is None or not isinstance(target, str) or not PACK_ID.match(str(pid)):
            continue
        try:
            decl = declared[str(pid)] if declared is not None else layout.load_declarations(root, target, str(pid),
                                                                                            SCHEMA)
        except ConfigError:
            continue  # loading the tracking reports it, whole
        if decl.exists:
            out += layout.unknown_in_pack_file(root, decl)
            out += _unknown_entries(layout.shown(root, decl.path), decl.doc, pid)
    return out


def _date_text(value) -> str | None:
    """A thread's ``verified`` date, written either as a TOML date or as a string."""
    return None if value is None else str(value)


_RETIRE_KEYS = {"requirement": {"kind", "target", "base", "package", "version"},
                "lane": {"kind", "pack", "lane", "verdict"},
                "thread": {"kind", "ref", "state"}}


def _check_retire(conditions, where: str) -> None:
    """``pack.toml's [[mitigation.retire]]``: the conditions, all of which retire the mitigation, as data that
    ``harness refresh`` evaluates (docs/refresh.md): a version bound on what a base of a target requires of a
    package, a lane's latest verdict, or a thread's state. Closed: every key named, every value checked."""
    if not isinstance(conditions, list):
        raise ConfigError(f"{where}: 'retire' must be an array of tables [[...mitigation.retire]]")
    for i, c in enumerate(conditions):
        cwhere = f"{where}.retire[{i}]"
        kind = choice(c, "kind", RETIRE_KINDS, cwhere)
        extra = sorted(set(c) - _RETIRE_KEYS[kind])
        if extra:
            raise ConfigError(f"{cwhere}: unknown key '{extra[0]}' for kind '{kind}' (keys: "
                              f"{', '.join(sorted(_RETIRE_KEYS[kind]))})")
        for key in sorted(_RETIRE_KEYS[kind] - {"kind"}):
            field(c, key, str, cwhere)
        if kind == "requirement":
            try:
                SpecifierSet(c["version"])
            except InvalidSpecifier:
                raise ConfigError(f"{cwhere}: version {c['version']!r} is not a version bound (e.g. '>=0.1.12')"
                                  ) from None
        elif kind == "lane":
            choice(c, "verdict", ("pass", "mismatch"), cwhere)
        else:
            choice(c, "state", THREAD_STATES, cwhere)


def _regular_in(root: Path, rel: str | None, key: str, where: str) -> None:
    """The file a key names must be a regular file of the checkout (a FIFO blocks, a link reads elsewhere)."""
    if rel is None:
        return
    try:
        regular.check(root / rel, root)
    except regular.NotRegular as exc:
        raise ConfigError(f"{where}: key '{key}': {exc}") from None


def _load_pack(root: Path, pid: str, t, d, where: str, dwhere: str, manifests: dict,
               missing_selections_ok: bool = False) -> Pack:
    """Pack ``pid`` from ``t`` (its tracking.toml table: where it stands, named ``where`` in messages) and ``d`` (its
    pack.toml: what it declares, named ``dwhere``)."""
    target = field(t, "target", str, where)
    if target not in manifests:
        try:
            manifests[target] = pins.load_manifest(root, target)
        except ConfigError as exc:
            raise ConfigError(f"{where}: key 'target': {exc}") from None
    manifest = manifests[target]
    base = field(d, "base", str, dwhere, default=None)
    if base is not None and base not in manifest.bases:
        raise ConfigError(f"{dwhere}: key 'base' is '{base}', not a base of {manifest.path.name} "
                          f"({', '.join(manifest.bases)})")
    reproducer = field(d, "reproducer", str, dwhere, default=None)
    _regular_in(root, reproducer, "reproducer", dwhere)
    if reproducer is not None and not (root / reproducer).is_file():
        raise ConfigError(f"{dwhere}: key 'reproducer': {reproducer} does not exist")
    lanes = tuple(_load_lane(root, manifest, lt, f"{dwhere} lanes[{i}]") for i, lt in enumerate(d.get("lanes", [])))
    lanes += tuple(lane for i, st in enumerate(d.get("suites", []))
                   for lane in _suite_lanes(root, manifest, pid, st, f"{dwhere} suites[{i}]", missing_selections_ok,
                                            d.get("requires")))
    domain = load_domain(root, d["domain"], dwhere) if "domain" in d else None
    if domain is None and any(lane.domain for lane in lanes):
        raise ConfigError(f"{dwhere}: a lane has domain = true but there is no [domain] to sweep")
    if reproducer is None and any(not lane.upstream_tests and not lane.domain for lane in lanes):
        raise ConfigError(f"{dwhere}: lanes are defined but key 'reproducer' is missing")
    minimal_repro = field(d, "minimal_repro", str, dwhere, default=None)
    _regular_in(root, minimal_repro, "minimal_repro", dwhere)
    if minimal_repro is not None and not (root / minimal_repro).is_file():
        raise ConfigError(f"{dwhere}: key 'minimal_repro': {minimal_repro} does not exist")
    if minimal_repro is None and any(lane.minimal for lane in lanes):
        raise ConfigError(f"{dwhere}: a lane has minimal = true but key 'minimal_repro' is missing")
    kind = choice(t, "kind", KINDS, where)
    _check_lanes_fit_kind(kind, lanes, where)
    names = [lane.name for lane in lanes]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ConfigError(f"{dwhere}: duplicate lane name(s) {', '.join(sorted(dup))}")
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
    related = _load_related(d.get("related", []), dwhere, pid)
    mitigation = t.get("mitigation")
    if mitigation is not None:
        mwhere = f"{where} .mitigation"
        field(mitigation, "what", str, mwhere)
        field(mitigation, "retire_when", str, mwhere)
        choice(mitigation, "status", MITIGATION_STATUS, mwhere, default="active")
        _check_retire(mitigation.get("retire", []), mwhere)
    absorbed = t.get("absorbed")
    if absorbed is not None:
        awhere = f"{where} .absorbed"
        field(absorbed, "version", str, awhere)
        at = field(absorbed, "base", str, awhere, default=None)  # absorbed at a base of the manifest (e.g. main)
        if at is not None and at not in manifest.bases:
            raise ConfigError(f"{awhere}: key 'base' is '{at}', not a base of {manifest.path.name} "
                              f"({', '.join(manifest.bases)})")
    filing_base = field(d, "filing_base", str, dwhere, default=None) or manifest.filing_base \
        or base or manifest.default_base
    if filing_base not in manifest.bases:
        raise ConfigError(f"{dwhere}: key 'filing_base' is '{filing_base}', not a base of {manifest.path.name} "
                          f"({', '.join(manifest.bases)})")
    depends = tuple(normalize_id(dep) for dep in str_list(t, "depends_on", where))
    evidence = tuple(_load_evidence(ev, f"{dwhere} evidence[{i}]", {lane.name for lane in lanes})
                     for i, ev in enumerate(d.get("evidence", [])))
    perf = d.get("performance", [])
    if not isinstance(perf, list):
        raise ConfigError(f"{dwhere} .performance: must be an array of tables ([[performance]]), each "
                          "naming a lane and a figure: performance figures are read from receipts, never typed here")
    performance = tuple(_load_evidence(pr, f"{dwhere} performance[{i}]", {lane.name for lane in lanes})
                        for i, pr in enumerate(perf))
    for lane in lanes:
        if lane.exclusive is False and any(row.lane == lane.name for row in performance):
            raise ConfigError(f"{dwhere}: lane '{lane.name}' has exclusive = false, but a [[performance]] "
                              "row reads its figures: a time or memory claim is measured with its GPU to itself")
    return Pack(
        id=pid,
        title=field(t, "title", str, where),
        target=target,
        kind=kind,
        state=choice(t, "state", STATES, where),
        files=tuple(str_list(d, "files", dwhere)),
        depends_on=depends,
        summary=field(d, "summary", str, dwhere, default=""),
        fix=field(d, "fix", str, dwhere, default=""),
        requires=choice(d, "requires", REQUIRES, dwhere, default="cuda"),
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
        evidence_note=field(d, "evidence_note", str, dwhere, default=""),
        related=related,
        error=field(d, "error", str, dwhere, default=""),
        minimal_repro=minimal_repro,
        domain=domain,
        lint_at_base=_load_lint_at_base(d.get("lint_at_base", []), dwhere, manifest),
    )


def _load_lint_at_base(rows, where: str, manifest) -> tuple[LintAtBase, ...]:
    out: list[LintAtBase] = []
    for i, row in enumerate(rows):
        w = f"{where} lint_at_base[{i}]"
        base = field(row, "base", str, w)
        if base not in manifest.bases:
            raise ConfigError(f"{w}: key 'base' is '{base}', not a base of {manifest.path.name}")
        if any(d.base == base for d in out):
            raise ConfigError(f"{w}: a second decision for base '{base}'")
        files = tuple(str_list(row, "files", w))
        reason = field(row, "reason", str, w)
        if not files or not reason.strip():
            raise ConfigError(f"{w}: 'files' and 'reason' must say which files fail at the base and which rule "
                              "the decision follows")
        out.append(LintAtBase(base, files, choice(row, "decision", LINT_DECISIONS, w), reason))
    return tuple(out)


def _load_evidence(t, where: str, lanes: set[str]) -> EvidenceRow:
    if not isinstance(t, dict):
        raise ConfigError(f"{where}: must be a table (pack.toml's [[evidence]])")
    bench = field(t, "bench", str, where, default="")
    if bench and "lane" in t:
        raise ConfigError(f"{where}: a row reads either a lane ('lane') or a benchmark file ('bench'), not both")
    lane = "" if bench else field(t, "lane", str, where)
    if not bench and lane not in lanes:
        raise ConfigError(f"{where}: key 'lane' is '{lane}', not a lane of this pack ({', '.join(sorted(lanes))})")
    row = EvidenceRow(lane=lane, bench=bench, figure=field(t, "figure", str, where),
                      label=field(t, "label", str, where),
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
    domain = field(t, "domain", bool, where, default=False)
    if domain and (minimal or upstream or nproc > 1):
        raise ConfigError(f"{where}: key 'domain' sweeps the pack's domain one process per point: not with "
                          "'minimal', 'upstream_tests' or nproc > 1")
    stack = field(t, "stack", bool, where, default=True)
    stack_reason = " ".join(field(t, "stack_reason", str, where, default="").split())
    if not stack and not stack_reason:
        raise ConfigError(f"{where}: key 'stack' is false: say why the lane is left out of the stack check "
                          "(stack_reason = \"...\")")
    if stack and stack_reason:
        raise ConfigError(f"{where}: key 'stack_reason' goes with stack = false (the lane is in the stack check)")
    return Lane(name=name, base=base, patched=patched, expect=expect,
                args=tuple(str_list(t, "args", where)), timeout=timeout, requires=requires,
                with_baseline=with_baseline, nproc=nproc, extra_builds=tuple(extra), minimal=minimal,
                upstream_tests=upstream, expect_failed=expect_failed, test_requires=test_requires,
                exclusive=exclusive, gpu_memory_gib=float(memory) if memory is not None else None, domain=domain,
                stack=stack, stack_reason=stack_reason)


def suite_lane_name(base: str, side: str, shard: int, shards: int) -> str:
    return f"suite-{base}-{side}" + (f"-{shard}of{shards}" if shards > 1 else "")


def ci_template(manifest: pins.Manifest, base: str, template: dict, where: str, gpu: bool = True) -> dict:
    """A suite lane's keys in the upstream CI's environment (the base's ``[bases.NAME.ci]``): its builds
    (``with_builds``; a cuda lane only, ``gpu``) and test pins join the lane's; a pin of one distribution in both
    must agree."""
    ci = manifest.base(base).ci
    if ci is None:
        return template
    builds = [*template.get("with_builds", [])]
    builds += [b for b in ci.with_builds if b not in builds] if gpu else []
    pins_: dict[str, str] = {}
    for req in [*ci.requires, *template.get("test_requires", [])]:
        name = req.split("==", 1)[0].lower().replace("_", "-")
        if pins_.get(name, req) != req:
            raise ConfigError(f"{where}: test_requires {req!r} differs from the upstream CI's {pins_[name]!r} "
                              f"({manifest.path.name} [bases.{base}.ci])")
        pins_[name] = req
    return {**template, "with_builds": builds, "test_requires": list(pins_.values())}


def _suite_lanes(root: Path, manifest: pins.Manifest, pid: str, t, where: str, missing_ok: bool = False,
                 pack_requires: str | None = None) -> list[Lane]:
    """The lanes of one pack.toml's [[suites]] table: every shard, on the unpatched and on the patched build; their ids
    are the recorded selection's (suites/NN/BASE.toml), their exclusions its [[exclude]] ids. A cuda suite at a base
    whose manifest records the upstream CI's environment (``[bases.NAME.ci]``) runs in it, at its ranks."""
    extra = sorted(set(t) - SUITE_KEYS)
    if extra:
        raise ConfigError(f"{where}: unknown key '{extra[0]}' (known: {', '.join(sorted(SUITE_KEYS))})")
    base = field(t, "base", str, where)
    if base not in manifest.bases:
        raise ConfigError(f"{where}: key 'base' is '{base}', not a base of {manifest.path.name}")
    sel = suite.load_for(root, normalize_id(pid), base)
    if sel is None and missing_ok:
        return []
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
    # a cuda lane runs in the CI's environment at its ranks; a cpu lane, where the CI allows gloo ranks, with its
    # test pins only (TransformerEngine's torch extension is built on a GPU host)
    ci = manifest.base(base).ci
    gpu = t.get("requires", pack_requires) == "cuda"
    in_ci = ci is not None and (gpu or ci.cpu_ranks > 0)
    if in_ci:
        template = ci_template(manifest, base, template, where, gpu)
    out = []
    for side, patched in SUITE_SIDES:
        for i in range(1, shards + 1):
            name = suite_lane_name(base, side, i, shards)
            lane = _load_lane(root, manifest, {**template, "name": name, "base": base, "patched": patched,
                                               "upstream_tests": list(sel.ids)}, f"{where} ({name})", suite_lane=True)
            lane = dataclasses.replace(lane, shard=(i, shards), deselect=sel.deselected)
            if in_ci and ci is not None:
                lane = dataclasses.replace(
                    lane, ranks=ci.ranks, cpu_ranks=ci.cpu_ranks, needs=sel.needs,
                    from_ci=tuple(b for b in ci.with_builds if gpu and b not in t.get("with_builds", []))
                    + tuple(r for r in ci.requires if r not in t.get("test_requires", [])))
            out.append(lane)
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
