"""A pack's upstream suite: which upstream test files exercise what its series touches, and the verdict.

``derive`` reads the upstream tree at a base with the pack's series applied and returns the test files a
maintainer would run for the change, each with how it was found:

* a test file the series adds or edits;
* a test file that imports a touched module, statically (``ast``: ``import a.b.c``, ``from a.b import c``,
  ``from a.b.c import x``, relative imports resolved against the file's package; imports inside functions
  count, as upstream suites import optional kernels lazily);
* a test file that imports a *helper* of the tests tree (a non-test module there, such as
  ``tests/.../parity_utils.py``) which itself imports a touched module.

The matching rule: a touched ``pkg/sub/mod.py`` is the module ``pkg.sub.mod`` (a leading ``src/`` dropped;
``pkg/sub/__init__.py`` is ``pkg.sub``). An import of ``pkg.sub.mod`` or of anything below it matches. A parent
package (``pkg.sub``) matches only where its ``__init__.py`` itself imports a matching module (it re-exports
the touched code), followed to a fixed point; importing ``pkg`` alone never matches otherwise, since every
test imports the top package;
* a test file that reaches a touched module through at most ``LIBRARY_HOPS`` library modules (imports, and
  strings naming a module), where a link that a config switch guards counts only for a test that sets that
  switch value; each such file records its chain (``_LibraryGraph``).

The selection is recorded as data, one file per pack and base (``suites/<pack>/<base>.toml``, schema
``SCHEMA``): the derived files with their reasons and case counts, ids a person added (with a reason) and
exclusions (each with its reason; one without is refused). ``harness check`` compares the recorded files with
a fresh derivation, so no file can be dropped silently.

``compare`` turns the per-case outcomes of the unpatched and the patched runs (the suite lanes' receipts) into
the suite verdict: pass when nothing that passed on the base fails, errors or goes missing on the patched build,
and every case the series adds fails on the base when the pack claims a fix.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import tomlkit

from harness.base import regular
from harness.base.pyimports import (
    TEST_TOPS,
    imported_names,
    in_tests_tree,
    is_test_file,
    loads,
    module_name,
)
from harness.base.tomlutil import field as toml_field
from harness.base.tomlutil import load_document
from harness.errors import ConfigError, WriteError

SCHEMA = 1
SUITES_DIR = "suites"
KEYS = frozenset({"schema", "pack", "base", "series", "files", "add", "exclude", "needs"})
NEED_KEYS = frozenset({"id", "ranks", "package", "reason"})  # [[needs]]: a case that may not run on every host
FILE_KEYS = frozenset({"path", "reasons", "cases"})
ADD_KEYS = frozenset({"id", "reason"})
EXCLUDE_KEYS = frozenset({"id", "reason"})
_ADDED_TEST = re.compile(r"^\+\s*(?:async\s+)?def\s+(test\w*)\s*\(", re.M)
_DIFF = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)


class SuiteError(ConfigError):
    """A suite selection file that cannot be read, breaks its schema, or records an id without a reason."""


def _source(tree: Path, rel: str) -> str:
    """A module or test of the upstream tree, read as a regular file inside it (``regular.source_text``)."""
    try:
        return regular.source_text(tree, rel)
    except regular.NotRegular as exc:
        raise SuiteError(f"{exc}: what a change reaches is derived from the upstream tree's regular files only",
                         hint="the materialized base is not as git or the release made it: remove it from the "
                              "cache and materialize it again") from None


class SuiteDrift(ConfigError):
    """A recorded suite selection that no longer matches what derivation gives from the tree."""


# ---------------------------------------------------------------------------------------------- the tree

def _matches(name: str, targets: Iterable[str], below: Iterable[str] = ()) -> str | None:
    """The most specific target ``name`` is, or lies below where the target is in ``below`` (a touched module or
    package: its submodules run it; a package that only re-exports matches by its own name)."""
    below = set(below)
    hits = [t for t in targets if name == t or (t in below and name.startswith(t + "."))]
    return max(hits, key=len) if hits else None


@dataclass(frozen=True)
class Derived:
    path: str
    reasons: tuple[str, ...]
    chains: tuple[Chain, ...] = field(default=(), compare=False)  # how the library rules reached it


def touched_files(patches: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """File -> names of the patches that change it, from ``(patch name, patch text)`` pairs in series order."""
    out: dict[str, list[str]] = {}
    for name, text in patches:
        for m in _DIFF.finditer(text):
            out.setdefault(m.group(2), [])
            if name not in out[m.group(2)]:
                out[m.group(2)].append(name)
    return out


def added_tests(patches: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    """Test file -> names of the test functions the series adds there (``+def test_...(`` lines)."""
    out: dict[str, set[str]] = {}
    for _, text in patches:
        for chunk in re.split(r"(?=^diff --git )", text, flags=re.M):
            m = _DIFF.match(chunk)
            if m and is_test_file(m.group(2)):
                found = set(_ADDED_TEST.findall(chunk))
                if found:
                    out.setdefault(m.group(2), set()).update(found)
    return out


def derive(tree: Path, touched: Mapping[str, list[str]], hops: int | None = None,
           dropped: dict[str, int] | None = None) -> list[Derived]:
    """The upstream test files of ``tree`` (a base with the series applied) that exercise ``touched``.

    ``dropped``, when given, receives the library modules the library rules did not follow because more than
    ``HUB_LIMIT`` test files enter the chain there (module -> how many)."""
    reasons: dict[str, list[str]] = {}
    chains: dict[str, list[Chain]] = {}
    for path, by in touched.items():
        if is_test_file(path) and (tree / path).is_file():
            reasons.setdefault(path, []).append(f"changed by the series ({', '.join(by)})")
    library = {m: path for path in touched if path.endswith(".py") and not in_tests_tree(path)
               and (tree / path).is_file() and (m := module_name(path))}
    if library:
        exposing = set(library)
        inits = {}  # package -> what its __init__ imports
        for init in tree.rglob("__init__.py"):
            rel = init.relative_to(tree).as_posix()
            if in_tests_tree(rel) or "/." in f"/{rel}":
                continue
            pkg = module_name(rel)
            if pkg:
                inits[pkg] = imported_names(_source(tree, rel), pkg, True)
        grew = True
        while grew:  # a package whose __init__ imports touched code re-exports it
            grew = False
            for pkg, names in inits.items():
                if pkg not in exposing and any(_matches(n, exposing, library) for n in names):
                    exposing.add(pkg)
                    grew = True
        files = sorted(p.relative_to(tree).as_posix() for top in TEST_TOPS if (tree / top).is_dir()
                       for p in (tree / top).rglob("*.py"))
        imports = {}
        for rel in files:
            mod = module_name(rel) or rel
            imports[rel] = imported_names(_source(tree, rel), mod, rel.endswith("__init__.py"))
        helpers: dict[str, str] = {}  # helper module -> the touched module it imports (or the helper it uses)
        grew = True
        while grew:
            grew = False
            for rel in files:
                name = Path(rel).name
                if is_test_file(rel) or name in ("conftest.py", "__init__.py"):
                    continue
                helper = module_name(rel)
                if helper is None or helper in helpers:
                    continue
                hit = next((n for n in sorted(imports[rel], key=lambda n: (-len(n), n))  # the most specific first
                            if _matches(n, exposing, library) or _matches(n, helpers, helpers)), None)
                if hit:
                    helpers[helper] = hit
                    grew = True
        for rel in files:
            if not is_test_file(rel):
                continue
            for n in sorted(imports[rel]):
                direct = _matches(n, exposing, library)
                if direct:
                    why = f"imports {direct}"
                    if direct not in library:
                        why += " (its __init__ imports the touched code)"
                    if why not in reasons.get(rel, []):
                        reasons.setdefault(rel, []).append(why)
                    continue
                helper = _matches(n, helpers, helpers)
                if helper:
                    via = helpers[helper]
                    why = f"imports helper {helper}, which imports {_matches(via, exposing, library) or via}"
                    if why not in reasons.get(rel, []):
                        reasons.setdefault(rel, []).append(why)
        graph = _LibraryGraph(tree, library, hops)
        found = {rel: graph.chains(rel, _source(tree, rel))
                 for rel in files if is_test_file(rel) and rel not in reasons}  # the library rules add files only
        way_in: dict[str, set[str]] = {}  # the first library module of a chain no switch guards -> its test files
        for rel, found_chains in found.items():
            for chain in found_chains:
                if not any(k.switches for k in chain.links):
                    way_in.setdefault(chain.links[0].module, set()).add(rel)
        hubs = {m: len(tests) for m, tests in way_in.items() if len(tests) > HUB_LIMIT}
        if dropped is not None:
            dropped.update(hubs)
        for rel, found_chains in found.items():
            for chain in found_chains:
                if chain.links[0].module in hubs and not any(k.switches for k in chain.links):
                    continue
                reasons.setdefault(rel, []).append(chain.reason)
                chains.setdefault(rel, []).append(chain)
    return [Derived(path, tuple(r), tuple(chains.get(path, ()))) for path, r in sorted(reasons.items())]


# ---------------------------------------------------------------------------------------------- the library graph

LIBRARY_HOPS = 2  # library modules a chain may pass between a test file and the touched module (docs/upstream-tests.md)
# A library module through which more than this many test files reach the touched code, with no config switch on
# the way, is how end-to-end tests enter the package (Megatron's GPTModel builds the output layer whose fused path
# a switch picks at run time), not a sign that they run the change: chains through it are not followed.
HUB_LIMIT = 10
RULES = ("changed by the series", "direct import", "test helper", "library imports", "module named in a string")


@dataclass(frozen=True)
class Link:
    """One step of a chain: ``path`` at ``line`` loads ``module`` (by an import, or by a string naming it)."""

    path: str
    line: int
    module: str
    by: str = "import"  # "import" or "name"
    switches: tuple[str, ...] = ()  # it loads only where a config switch holds one of these values

    def how(self) -> str:
        when = f"when a switch is {' or '.join(repr(v) for v in self.switches)}" if self.switches else ""
        if self.by == "import":
            return f" ({when})" if when else ""
        return f" (by name{', ' + when if when else ''})"


@dataclass(frozen=True)
class Chain:
    """How a test file reaches a touched module through library modules: its links, first the test file's."""

    touched: str
    links: tuple[Link, ...]

    @property
    def rule(self) -> str:
        return "module named in a string" if any(k.by == "name" for k in self.links) else "library imports"

    @property
    def reason(self) -> str:
        """``tests/t.py:13 -> pkg.block:17 -> pkg.ops.kern``: each module with the line that loads the next."""
        first = self.links[0]
        parts = [f"{first.path}:{first.line}{first.how()}"]
        for i, k in enumerate(self.links):
            nxt = self.links[i + 1] if i + 1 < len(self.links) else None
            parts.append(k.module + (f":{nxt.line}{nxt.how()}" if nxt else ""))
        return f"reaches {self.touched} through {self.rule}: " + " -> ".join(parts)

    def as_json(self) -> dict:
        return {"rule": self.rule, "touched": self.touched,
                "links": [{"file": k.path, "line": k.line, "module": k.module, "by": k.by, "switches": list(k.switches)}
                          for k in self.links]}


class _LibraryGraph:
    """The upstream package's modules (outside the tests tree) and how each loads others: import statements
    anywhere in the file, and strings that name a module (``import_module(name)``), each with its line.

    A test file reaches a touched module through at most ``LIBRARY_HOPS`` library modules; a module named as the
    value of a dict keyed by a switch value (``{"tilelang": "...dsa_tilelang_kernels"}``) counts only for a test
    file that holds that value as a string (it sets the switch, ``dsa_kernel_backend="tilelang"``)."""

    def __init__(self, tree: Path, touched: Mapping[str, str], hops: int | None = None):
        self.hops = hops = LIBRARY_HOPS if hops is None else hops
        self.touched = set(touched)
        self.paths: dict[str, str] = {}
        for p in sorted(tree.rglob("*.py")):
            rel = p.relative_to(tree).as_posix()
            if in_tests_tree(rel) or "/." in f"/{rel}" or not (m := module_name(rel)):
                continue
            self.paths.setdefault(m, rel)
        self.edges: dict[str, list[Link]] = {}
        for m, rel in self.paths.items():
            self.edges[m] = self._links(rel, m, _source(tree, rel))[0]
        self.dist = {m: 0 for m in self.touched}  # edges to the nearest touched module (switch keys aside)
        rev: dict[str, set[str]] = {}
        for m, links in self.edges.items():
            for k in links:
                rev.setdefault(k.module, set()).add(m)
        frontier = sorted(self.touched)
        for d in range(1, hops + 1):
            nxt = []
            for t in frontier:
                for m in sorted(rev.get(t, ())):
                    if m not in self.dist:
                        self.dist[m] = d
                        nxt.append(m)
            frontier = nxt

    def _links(self, rel: str, module: str, source: str) -> tuple[list[Link], set[str]]:
        """What ``rel`` loads among the package's modules, and its string constants."""
        found, strings = loads(source, module, rel.endswith("__init__.py"))
        out = []
        for name, load in sorted(found.items(),
                                 key=lambda x: (x[1].line, x[0])):
            if load.pattern:
                targets = [m for m in self.paths if re.fullmatch(name, m)]
            else:
                targets = [name] if name in self.paths else []
            out += [Link(rel, load.line, t, load.by, load.switches) for t in targets if t != module]
        return out, strings

    def chains(self, rel: str, source: str) -> list[Chain]:
        """The shortest chain of each rule from test file ``rel`` to each touched module it reaches through library
        modules (a module named in a string is one rule, imports alone the other)."""
        start, switches = self._links(rel, module_name(rel) or rel, source)
        found: dict[tuple[str, str], Chain] = {}  # (touched module, rule) -> the shortest chain
        paths: list[tuple[Link, ...]] = [(k,) for k in start if k.module not in self.touched
                                         and self._open(k, switches)
                                         and self.dist.get(k.module, self.hops + 1) <= self.hops]
        for depth in range(1, self.hops + 1):
            nxt = []
            for path in paths:
                for k in self.edges.get(path[-1].module, ()):
                    if not self._open(k, switches):
                        continue
                    if k.module in self.touched:
                        chain = Chain(k.module, (*path, k))
                        found.setdefault((k.module, chain.rule), chain)
                    elif depth < self.hops and self.dist.get(k.module, self.hops + 1) <= self.hops - depth \
                            and all(k.module != q.module for q in path):
                        nxt.append((*path, k))
            paths = nxt
        return [found[k] for k in sorted(found)]

    @staticmethod
    def _open(link: Link, switches: set[str]) -> bool:
        """Whether ``link`` loads for a test file holding ``switches`` (its string constants)."""
        return not link.switches or any(v in switches for v in link.switches)


def rule_of(reason: str) -> str:
    """Which rule of ``RULES`` a derived file's reason line comes from."""
    if reason.startswith("changed by the series"):
        return RULES[0]
    if reason.startswith("imports helper "):
        return RULES[2]
    if reason.startswith("reaches "):
        return RULES[4] if " through module named in a string: " in reason else RULES[3]
    return RULES[1]


def rule_counts(derived: Iterable[Derived]) -> dict[str, dict[str, int]]:
    """Per rule: the files it selects, and the files it adds (no other rule selects them)."""
    out = {r: {"selects": 0, "adds": 0} for r in RULES}
    for d in derived:
        rules = {rule_of(r) for r in d.reasons}
        for r in rules:
            out[r]["selects"] += 1
            if len(rules) == 1:
                out[r]["adds"] += 1
    return out


# ---------------------------------------------------------------------------------------------- the record

@dataclass(frozen=True)
class SuiteFile:
    path: str
    reasons: tuple[str, ...]
    cases: int | None = None  # cases pytest collected from the file (on the CPU lane environment), when known


@dataclass(frozen=True)
class Choice:
    id: str
    reason: str


@dataclass(frozen=True)
class Need:
    """Cases (``id``: a file, a node id, or a pattern of them) that need more ranks than a host may have, or a
    distribution the environment may lack: where that holds, the runner reports them "not run here", with the
    reason, and runs the rest (repros/upstream_suite.py ``not_here``)."""

    id: str
    reason: str
    ranks: int | None = None
    package: str | None = None

    def as_json(self) -> dict:
        return {"id": self.id, "reason": self.reason,
                **({"ranks": self.ranks} if self.ranks else {}), **({"package": self.package} if self.package else {})}


@dataclass(frozen=True)
class Selection:
    pack: str
    base: str
    series: tuple[str, ...]  # the patch files the derivation read (their names, in order)
    files: tuple[SuiteFile, ...]
    add: tuple[Choice, ...] = ()
    exclude: tuple[Choice, ...] = ()
    path: Path | None = field(default=None, compare=False)
    needs: tuple[Need, ...] = ()

    @property
    def ids(self) -> tuple[str, ...]:
        """What the suite lanes run: every selected file, then the added ids not inside a selected file."""
        files = tuple(f.path for f in self.files)
        return files + tuple(a.id for a in self.add if a.id.split("::", 1)[0] not in files)

    @property
    def deselected(self) -> tuple[str, ...]:
        return tuple(e.id for e in self.exclude)

    @property
    def cases(self) -> int | None:
        """Cases collected from the selected files, or None when any file's count is unknown."""
        counts = [f.cases for f in self.files]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)

    def derived(self) -> list[Derived]:
        return [Derived(f.path, f.reasons) for f in self.files]


def selection_path(root: Path, pack: str, base: str) -> Path:
    return root / SUITES_DIR / pack / f"{base}.toml"


def _closed(table, keys: frozenset[str], where: str) -> None:
    extra = sorted(set(table) - keys)
    if extra:
        raise SuiteError(f"{where}: unknown key '{extra[0]}' (known: {', '.join(sorted(keys))})")


def load(path: Path) -> Selection:
    """A selection file, closed schema; an exclusion or an added id without a reason is refused."""
    doc = load_document(path)
    where = str(path)
    _closed(doc, KEYS, where)
    if toml_field(doc, "schema", int, where) != SCHEMA:
        raise SuiteError(f"{where}: schema {doc['schema']}; this harness reads schema {SCHEMA}")
    files = []
    for i, t in enumerate(doc.get("files", [])):
        w = f"{where} files[{i}]"
        _closed(t, FILE_KEYS, w)
        reasons = toml_field(t, "reasons", list, w)
        if not reasons or not all(isinstance(r, str) and r.strip() for r in reasons):
            raise SuiteError(f"{w}: 'reasons' must list how the file was derived")
        cases = toml_field(t, "cases", int, w, default=None)
        files.append(SuiteFile(toml_field(t, "path", str, w), tuple(reasons), cases))
    chosen: dict[str, list[Choice]] = {"add": [], "exclude": []}
    for key, keys in (("add", ADD_KEYS), ("exclude", EXCLUDE_KEYS)):
        for i, t in enumerate(doc.get(key, [])):
            w = f"{where} {key}[{i}]"
            _closed(t, keys, w)
            node = toml_field(t, "id", str, w)
            reason = toml_field(t, "reason", str, w, default="")
            if not reason.strip():
                raise SuiteError(f"{w}: {node!r} has no 'reason'; an id is "
                                 + ("excluded" if key == "exclude" else "added") + " only with a recorded reason")
            chosen[key].append(Choice(node, reason))
    needs = []
    for i, t in enumerate(doc.get("needs", [])):
        w = f"{where} needs[{i}]"
        _closed(t, NEED_KEYS, w)
        ranks = toml_field(t, "ranks", int, w, default=None)
        package = toml_field(t, "package", str, w, default=None)
        if (ranks is None) == (package is None):
            raise SuiteError(f"{w}: a need names exactly one of 'ranks' (at least 2) or 'package'")
        if ranks is not None and ranks < 2:
            raise SuiteError(f"{w}: 'ranks' must be at least 2, got {ranks}")
        reason = toml_field(t, "reason", str, w, default="")
        if not reason.strip():
            raise SuiteError(f"{w}: {t.get('id')!r} has no 'reason'; a need is recorded only with what shows it")
        needs.append(Need(toml_field(t, "id", str, w), reason, ranks, package))
    paths = [f.path for f in files]
    for c in chosen["exclude"]:
        if c.id.split("::", 1)[0] not in paths:
            raise SuiteError(f"{where}: exclusion {c.id!r} is not inside a selected file")
    return Selection(toml_field(doc, "pack", str, where), toml_field(doc, "base", str, where),
                     tuple(toml_field(doc, "series", list, where)), tuple(files),
                     tuple(chosen["add"]), tuple(chosen["exclude"]), path, tuple(needs))


def load_for(root: Path, pack: str, base: str) -> Selection | None:
    path = selection_path(root, pack, base)
    try:
        regular.check(path, root)
    except regular.NotRegular as exc:
        raise ConfigError(f"the suite selection {exc}") from None
    return load(path) if path.is_file() else None


def refreshed(old: Selection | None, pack: str, base: str, series: Iterable[str], derived: list[Derived],
              cases: Mapping[str, int] | None = None) -> Selection:
    """The selection derived now, keeping what a person recorded (added ids, exclusions) and the case counts of
    files still selected (``cases`` given: the counts of this collection)."""
    known = {f.path: f.cases for f in old.files} if old else {}
    files = tuple(SuiteFile(d.path, d.reasons, (cases or {}).get(d.path, known.get(d.path))) for d in derived)
    paths = {d.path for d in derived}
    exclude = tuple(e for e in (old.exclude if old else ()) if e.id.split("::", 1)[0] in paths)
    return Selection(pack, base, tuple(series), files, old.add if old else (), exclude,
                     needs=old.needs if old else ())


def write(path: Path, text: str) -> None:
    """Replace the selection file ``path`` with ``text`` atomically: from a scratch file of this writer's own beside
    it (never a fixed name two writers would share), renamed into place; a file that cannot be written is
    exit IO naming it, and no scratch is left."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise WriteError.of(exc, "the suite selection", path) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; a selection is read by everyone
        os.replace(tmp, path)
    except OSError as exc:
        raise WriteError(f"cannot write the suite selection {path}: {exc.strerror or exc}; it is as it was") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def dump(sel: Selection) -> str:
    doc = tomlkit.document()
    doc.add(tomlkit.comment(f"The upstream suite of pack {sel.pack} at {sel.base}: written by "
                            f"`harness suite select {sel.pack} --base {sel.base}`."))
    doc.add(tomlkit.comment("files/reasons are derived from the tree (docs/upstream-tests.md); `harness check "
                            "--apply` compares them."))
    doc.add(tomlkit.comment("A person edits only [[add]] and [[exclude]], each with its reason."))
    doc["schema"] = SCHEMA
    doc["pack"] = sel.pack
    doc["base"] = sel.base
    doc["series"] = list(sel.series)
    for key, rows in (("files", [{"path": f.path, "reasons": list(f.reasons),
                                  **({"cases": f.cases} if f.cases is not None else {})} for f in sel.files]),
                      ("add", [{"id": a.id, "reason": a.reason} for a in sel.add]),
                      ("exclude", [{"id": e.id, "reason": e.reason} for e in sel.exclude]),
                      ("needs", [n.as_json() for n in sel.needs])):
        if rows:
            aot = tomlkit.aot()
            for row in rows:
                t = tomlkit.table()
                for k, v in row.items():
                    if isinstance(v, list) and v:
                        arr = tomlkit.array()
                        arr.extend(v)
                        arr.multiline(True)
                        t[k] = arr
                    else:
                        t[k] = v
                aot.append(t)
            doc[key] = aot
    return tomlkit.dumps(doc)


def differences(recorded: Selection, derived: list[Derived], series: Iterable[str]) -> list[str]:
    """How the recorded selection differs from a fresh derivation (empty: it matches)."""
    out = []
    if tuple(series) != recorded.series:
        out.append(f"the series is now {', '.join(series) or 'empty'}; recorded for "
                   f"{', '.join(recorded.series) or 'none'}")
    now = {d.path: d.reasons for d in derived}
    was = {f.path: f.reasons for f in recorded.files}
    out += [f"{p}: derived ({'; '.join(now[p])}) but not recorded" for p in sorted(set(now) - set(was))]
    out += [f"{p}: recorded but no longer derived" for p in sorted(set(was) - set(now))]
    out += [f"{p}: reasons differ (recorded {list(was[p])}, derived {list(now[p])})"
            for p in sorted(set(now) & set(was)) if now[p] != was[p]]
    return out


# ---------------------------------------------------------------------------------------------- the verdict

GOOD = "passed"
BAD = ("failed", "error", "not run", "timed out")  # a case the patched run did not pass, skip aside


@dataclass(frozen=True)
class Case:
    id: str
    base: str  # outcome on the unpatched build ("absent": not in that run)
    patched: str
    added: bool  # a test the series adds
    verdict: str  # "ok", "patched-only failure", "base-only failure", "fails on both", "fixed", ...
    why_base: str | None = None  # the exception a failing case ended with on that build, from the run's log
    why_patched: str | None = None


NOT_HERE = "not run here"  # the verdict of a case this host or environment cannot run (its reason beside it)


@dataclass(frozen=True)
class Comparison:
    cases: tuple[Case, ...]
    ok: bool
    reasons: tuple[str, ...]
    not_here: tuple[tuple[str, str], ...] = ()  # (node id, why): cases neither build ran here, never a failure

    def not_here_reasons(self) -> dict[str, int]:
        """why -> how many cases were not run here for it."""
        out: dict[str, int] = {}
        for _, why in self.not_here:
            out[why] = out.get(why, 0) + 1
        return out

    @property
    def patched_only(self) -> list[Case]:
        return [c for c in self.cases if c.verdict == "patched-only failure"]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.cases:
            out[c.verdict] = out.get(c.verdict, 0) + 1
        return out

    def as_json(self) -> dict:
        here = dict(self.not_here)
        return {"ok": self.ok, "reasons": list(self.reasons), "counts": self.counts(),
                "cases": [{"id": c.id, "base": c.base, "patched": c.patched, "added": c.added,
                           "verdict": c.verdict, "why": {"base": c.why_base, "patched": c.why_patched},
                           "not_here": here.get(c.id)}
                          for c in self.cases],
                "not_here": [{"id": node, "why": why} for node, why in self.not_here]}

    def explained(self, base: Mapping[str, str], patched: Mapping[str, str]) -> Comparison:
        """The same verdicts with each failing case's exception on either build (``failure_reasons``)."""
        return replace(self, cases=tuple(
            replace(c, why_base=base.get(c.id) if c.base in BAD else None,
                    why_patched=patched.get(c.id) if c.patched in BAD else None) for c in self.cases))


def _case_function(node: str) -> tuple[str, str]:
    """(file, test function) of a node id; a parametrization's brackets may hold ``::`` of their own."""
    path, _, rest = node.partition("::")
    return path, rest.split("[", 1)[0].split("::")[-1]


def compare(base: Mapping[str, str], patched: Mapping[str, str], added: Mapping[str, set[str]],
            claims_fix: bool, not_here: Mapping[str, str] | None = None) -> Comparison:
    """Per case: its outcome on both builds and what that says. Pass: no case that passed on the base fails,
    errors or is missing on the patched build; with ``claims_fix``, every test function the series adds has at
    least one case that fails on the base and passes patched. Its other cases may pass on both: a control
    parametrization at a shape that already worked (``control``) is how upstream tests pin the old behaviour.
    ``not_here`` (node id -> why): cases the runs could not run on this host or in this environment; each is a case
    of its own, verdict ``not run here`` with both outcomes ``not run here``, and fails nothing."""
    here = {n: w for n, w in (not_here or {}).items() if n not in base and n not in patched}
    cases = []
    reasons = []
    shows_fix: dict[tuple[str, str], bool] = {}
    for node in sorted(set(base) | set(patched)):
        b, p = base.get(node, "absent"), patched.get(node, "absent")
        path, func = _case_function(node)
        new = func in added.get(path, set())
        if new:
            verdict = ("fixed" if b != GOOD and p == GOOD else "control" if b == GOOD and p == GOOD
                       else "ok" if p == GOOD else "patched-only failure" if b == GOOD else "fails on both")
            shows_fix[(path, func)] = shows_fix.get((path, func), False) or verdict == "fixed"
        elif b == GOOD and p != GOOD:  # a case the change makes skip no longer shows it works
            verdict = "patched-only failure"
        elif b == "absent":  # its base shard never recorded it: nothing to compare with, whatever the patched run
            verdict = "not run on the base"
        elif b in BAD and p == GOOD:
            verdict = "fixed"
        elif b in BAD and p in BAD:
            verdict = "fails on both"
        elif b in BAD:
            verdict = "base-only failure"
        elif b == "skipped" or p == "skipped":
            verdict = "skipped"
        else:
            verdict = "ok"
        if verdict == "patched-only failure":
            reasons.append(f"{node}: {verdict} (base {b}, patched {p})")
        cases.append(Case(node, b, p, new, verdict))
    if claims_fix:
        for (path, func), fixed in sorted(shows_fix.items()):
            if not fixed:
                reasons.append(f"{path}::{func}: added test passes on the base (no case of it fails there and "
                               "passes with the change)")
                cases = [replace(c, verdict="added test passes on the base")
                         if c.added and _case_function(c.id) == (path, func) and c.verdict == "control" else c
                         for c in cases]
    for node in sorted(here):
        path, func = _case_function(node)
        cases.append(Case(node, NOT_HERE, NOT_HERE, func in added.get(path, set()), NOT_HERE))
    return Comparison(tuple(sorted(cases, key=lambda c: c.id)), not reasons, tuple(reasons),
                      tuple(sorted(here.items())))


RECORDED = "UPSTREAM_SUITE_RECORDED"  # the suite runner's sentinel (harness/lane/upstream_tests.py SENTINEL_SUITE_RAN)


@dataclass(frozen=True)
class Merged:
    """The cases of a suite's lanes, merged per build from their latest receipts' sentinel details."""

    base: dict[str, str]
    patched: dict[str, str]
    collected: int | None  # M: what pytest collected from the selection on the base build (the most any shard saw)
    missing: tuple[str, ...]  # lanes without a receipt that holds the recorded cases
    not_here: dict[str, str] = field(default_factory=dict)  # node id -> why this host/environment could not run it

    @property
    def ran(self) -> int:
        """N: the cases with an outcome on the base build (a skip counts: pytest ran it and said why not)."""
        return sum(1 for o in self.base.values() if o != "not run")

    @property
    def skipped(self) -> int:
        return sum(1 for o in self.base.values() if o == "skipped")


def merge(lanes: Iterable[tuple[str, bool]], details: Mapping[str, Mapping | None]) -> Merged:
    """``lanes``: (name, patched) of the suite's lanes; ``details``: each lane's latest ``RECORDED`` details."""
    sides: dict[bool, dict[str, str]] = {False: {}, True: {}}
    missing, collected = [], []
    here: dict[str, str] = {}
    for name, patched in lanes:
        d = details.get(name)
        if d is None:
            missing.append(name)
            continue
        sides[patched].update(d.get("cases") or {})
        for node, why in (d.get("not_here") or {}).items():
            here.setdefault(node, why)
        if not patched:
            collected.append(int(d.get("collected") or 0))
    return Merged(sides[False], sides[True], max(collected) if collected else None, tuple(missing), here)


def summary_line(merged: Merged, comparison: Comparison) -> str:
    """The suite's result in one line, as the body's evidence row and ``harness status`` state it."""
    counts = comparison.counts()
    if merged.collected is None and not merged.ran:  # no shard has reported: there is nothing to count yet
        n = len(merged.missing)
        return f"not run yet ({n} shard run{'' if n == 1 else 's'} missing)" if n else "not run yet"
    total = merged.collected if merged.collected is not None else "an unknown number of"
    both = counts.get("base-only failure", 0) + counts.get("fails on both", 0)
    here = comparison.not_here_reasons()
    return (f"{merged.ran} of {total} cases run ({merged.skipped} skipped); {len(comparison.patched_only)} fail only "
            f"with the change; {both} fail without it too"
            + (f"; {sum(here.values())} not run here ("
               + ", ".join(f"{n}: {why}" for why, n in sorted(here.items(), key=lambda kv: (-kv[1], kv[0]))) + ")"
               if here else "")
            + (f"; {len(merged.missing)} shard run{'' if len(merged.missing) == 1 else 's'} missing"
               if merged.missing else ""))
