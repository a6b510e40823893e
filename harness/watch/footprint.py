"""A pack's footprint: what its series touches (files, the lines of each hunk, the functions they change, the
names it calls, the error messages it fixes), and how close an upstream diff or text comes to it (``Overlap``).

``related`` ranks upstream commits, pull requests and issues by it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.lane import series
from harness.lane.tracking import Pack, Tracking
from harness.upstream import git

_MARGIN = 3  # lines either side of one of our hunks that still count as the same hunk
_DEF = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)")
_CONTEXT_DEF = re.compile(r"(?:async\s+)?(?:def|class)\s+(\w+)")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@(.*)$")


class Overlap(enum.IntEnum):
    """How close a candidate comes to the pack (higher ranks first)."""

    MENTION = 0  # names a function, file or the error message, changes none of them
    FILE = 1
    FUNCTION = 2
    HUNK = 3

    @property
    def label(self) -> str:
        return {Overlap.HUNK: "same hunk", Overlap.FUNCTION: "same function", Overlap.FILE: "same file",
                Overlap.MENTION: "mention"}[self]


# ---------------------------------------------------------------------------------------------- diffs

@dataclass(frozen=True)
class DiffHunk:
    path: str
    first: int  # first and last line of the old side the hunk changes (an insertion: the line it follows)
    last: int
    function: str  # the enclosing def/class git names in the hunk header ("" when none)
    defines: frozenset[str]  # functions and classes whose def/class line the hunk adds or removes
    text: str  # the changed lines
    scope: str = ""  # the def/class the changed base lines sit in, read from the base file's AST (a dotted
    # qualname: "HybridModel.forward"); "" when the base file was not read or the lines are at module level


def parse_diff(text: str) -> list[DiffHunk]:
    """The hunks of a unified diff (``git diff``, a format-patch, a PR file's ``patch``), changed lines only."""
    out: list[DiffHunk] = []
    path = ""
    cur: dict | None = None

    def close() -> None:
        nonlocal cur
        if cur is not None and cur["changed"]:
            first = cur["first"] if cur["first"] is not None else cur["insert"]
            last = cur["last"] if cur["last"] is not None else first
            out.append(DiffHunk(path, first, last, cur["function"], frozenset(cur["defines"]),
                                "\n".join(cur["changed"])))
        cur = None

    for line in text.splitlines():
        if line.startswith("diff --git "):
            close()
            m = re.match(r"^diff --git a/(.+) b/(.+)$", line)
            path = m.group(2) if m else path
        elif line.startswith("+++ ") and cur is None:
            name = line[4:].strip()
            path = name[2:] if name.startswith("b/") else (path if name == "/dev/null" else name)
        elif line.startswith("--- ") and cur is None:
            continue
        elif (m := _HUNK.match(line)) is not None:
            close()
            named = _CONTEXT_DEF.search(m.group(3))
            start = int(m.group(1))
            # -U0 style "@@ -12,0 +13 @@" inserts after line 12; otherwise the old side starts at line 12
            cur = {"line": start if (m.group(2) != "0") else start + 1, "first": None, "last": None,
                   "insert": start, "function": named.group(1) if named else "", "defines": set(), "changed": []}
            # git names the last def *before* the hunk; a def among the context lines above the first change
            # is the one the change sits in
            if start == 0:  # "@@ -0,0 ...": the file is created (or, in another tree, exists whole)
                cur["first"] = cur["last"] = 0
        elif cur is not None:
            d = _DEF.match(line[1:]) if line[:1] in " -" and not cur["changed"] else None
            if d:
                cur["function"] = d.group(1)
            if line.startswith("-"):
                cur["first"] = cur["line"] if cur["first"] is None else cur["first"]
                cur["last"] = cur["line"]
                cur["line"] += 1
                cur["changed"].append(line)
            elif line.startswith("+"):
                if cur["first"] is None:
                    cur["insert"] = max(cur["line"] - 1, 1)
                cur["changed"].append(line)
            elif line.startswith(" "):
                cur["line"] += 1
            elif line.startswith("\\"):
                continue
            else:
                close()
                continue
            d = _DEF.match(line[1:]) if line[:1] in "+-" else None
            if d:
                cur["defines"].add(d.group(1))
    close()
    return out


# ---------------------------------------------------------------------------------------------- the AST

Span = tuple[str, int, int]  # a def/class qualname and its first and last line


def ast_spans(source: str) -> tuple[Span, ...]:
    """Every def and class of a Python file with its line range (decorators included), outermost first; ()
    when the text does not parse."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ()
    out: list[Span] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                name = f"{prefix}{child.name}"
                out.append((name, first, child.end_lineno or child.lineno))
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return tuple(out)


def enclosing(spans: Iterable[Span], first: int, last: int) -> str:
    """The innermost def/class whose lines hold the whole range ``first``..``last`` ("" at module level): a
    range across two defs is in neither (its first line decides nothing)."""
    best = ""
    width = None
    for name, a, b in spans:
        if a <= first and last <= b and (width is None or b - a < width):
            best, width = name, b - a
    return best


def scoped(hunks: Iterable[DiffHunk], spans: Callable[[str], tuple[Span, ...]]) -> list[DiffHunk]:
    """``hunks`` with ``scope`` set from the AST of the base file each one changes (``spans(path)``). An insertion
    sits in the def around the line it follows; a hunk changing a whole file (line 0) has no scope."""
    import dataclasses

    out = []
    for h in hunks:
        sp = spans(h.path) if h.path.endswith(".py") and h.first > 0 else ()
        last = max(h.last, h.first)
        out.append(dataclasses.replace(h, scope=enclosing(sp, h.first, last)) if sp else h)
    return out


_IDENT = re.compile(r"\b([A-Za-z_]\w*)\s*\(")  # a name called in a changed line
_IMPORTED = re.compile(r"^[-+]\s*from\s+[\w.]+\s+import\s+\(?([\w\s,]+)\)?")
_RAISED = re.compile(r"^-.*\b(?:raise\s+\w+\s*\(|assert\b[^#]*?,)\s*(?:[rbuf]{0,2})(['\"])(.+?)\1")
_FSTRING_FIELD = re.compile(r"\{[^{}]*\}")
_MIN_ERROR_TEXT = 12  # a shorter literal fragment of a message matches too much to search for


def called_names(hunks: Iterable[DiffHunk]) -> frozenset[str]:
    """Names the changed lines call or import (``name(``, ``from x import name``): what the series touches
    beyond the functions its hunks sit in. Filtered against the upstream's own definitions by the caller."""
    out: set[str] = set()
    for h in hunks:
        for line in h.text.splitlines():
            out.update(_IDENT.findall(line[1:]))
            if (m := _IMPORTED.match(line)) is not None:
                out.update(n.strip().split(" as ")[0] for n in m.group(1).split(",") if n.strip())
    return frozenset(out)


def error_texts(hunks: Iterable[DiffHunk]) -> tuple[str, ...]:
    """The messages upstream raises in lines the series removes (``raise X("...")``, ``assert c, "..."``):
    the error a user of upstream sees, so the text an issue would quote. An f-string keeps its longest
    literal fragment; fragments shorter than _MIN_ERROR_TEXT are left out."""
    out: list[str] = []
    for h in hunks:
        for line in h.text.splitlines():
            m = _RAISED.match(line)
            if m is None:
                continue
            frag = max((p.strip(" :,.") for p in _FSTRING_FIELD.split(m.group(2))), key=len, default="")
            if len(frag) >= _MIN_ERROR_TEXT:
                out.append(frag)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Footprint:
    """What of upstream the pack changes: files, the base lines of each hunk, the functions they sit in, the
    upstream symbols its changed lines use, and the error messages it is about."""

    base: str  # the base the hunks' line numbers refer to
    files: tuple[str, ...]
    hunks: tuple[DiffHunk, ...]
    error: str = ""  # the pack's own ``error`` key (the message its reproducer shows)
    symbols: frozenset[str] = frozenset()  # upstream functions/classes the changed lines call or import
    errors: tuple[str, ...] = ()  # messages upstream raises in the lines the series removes
    targets: frozenset[str] = frozenset()  # upstream defs a contract exercises (qualnames), read from its script
    target_files: dict[str, str] = field(default_factory=dict)  # target -> the file upstream defines it in

    @property
    def functions(self) -> frozenset[str]:
        return frozenset(n for h in self.hunks for n in ({h.function} | h.defines) if n) | frozenset(
            t.rsplit(".", 1)[-1] for t in self.targets)

    @property
    def scopes(self) -> frozenset[str]:
        """The defs our hunks sit in (AST qualnames) and the defs a contract exercises."""
        return frozenset(h.scope for h in self.hunks if h.scope) | self.targets

    @property
    def error_texts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(([self.error] if self.error else []) + list(self.errors)))

    def classify(self, hunk: DiffHunk) -> Overlap | None:
        """How ``hunk`` (of an upstream change) overlaps ours; None when it touches none of our files."""
        if hunk.path not in self.files:
            return None
        mine = [h for h in self.hunks if h.path == hunk.path]
        if hunk.first > 0 and any(hunk.first <= h.last + _MARGIN and h.first - _MARGIN <= hunk.last for h in mine):
            return Overlap.HUNK
        scopes = {h.scope for h in mine if h.scope} | {t for t in self.targets if self._target_in(t, hunk.path)}
        if hunk.scope and scopes:
            # both sides read from the AST: the same def (or one inside a def a contract exercises), or a
            # changed line that names one of ours; git's hunk header (the def *before* the hunk) is not asked
            if any(hunk.scope == s or hunk.scope.startswith(s + ".") for s in scopes):
                return Overlap.FUNCTION
        else:
            names = {n for h in mine for n in ({h.function} | h.defines) if n}
            if names & ({hunk.function} | hunk.defines):
                return Overlap.FUNCTION
        named = {s.rsplit(".", 1)[-1] for s in scopes} | {n for h in mine for n in h.defines}
        named |= {h.function for h in mine if h.function and not scopes}
        if any(re.search(rf"\b{re.escape(n)}\b", hunk.text) for n in named - GENERIC_NAMES):
            return Overlap.FUNCTION
        if scopes and hunk.defines & {s.rsplit(".", 1)[-1] for s in scopes}:
            return Overlap.FUNCTION
        return Overlap.FILE

    def _target_in(self, target: str, path: str) -> bool:
        file = self.target_files.get(target, "")
        return not file or file == path

    def describe(self, hunks: Iterable[DiffHunk]) -> tuple[Overlap | None, str]:
        """The closest overlap of ``hunks`` and where it is (file, function, lines)."""
        best: tuple[Overlap, DiffHunk] | None = None
        for h in hunks:
            o = self.classify(h)
            if o is not None and (best is None or o > best[0]):
                best = (o, h)
        if best is None:
            return None, ""
        o, h = best
        lines = "the whole file" if h.first == 0 else f"lines {h.first}-{h.last}" if h.last >= h.first else ""
        where = " ".join(x for x in (h.path, h.scope or h.function, lines) if x)
        return o, where

    def mentions(self, text: str) -> list[str]:
        """Which of our functions, symbols, files and error messages ``text`` names."""
        names = (self.functions | self.symbols) - GENERIC_NAMES
        found = [n for n in sorted(names) if re.search(rf"\b{re.escape(n)}\b", text)]
        found += [f for f in self.files if f in text or Path(f).name in text]
        if any(e.lower() in text.lower() for e in self.error_texts):
            found.append("the error message")
        return found


def footprint(root: Path, tracking: Tracking, pack: Pack, base: str,
              defined: Callable[[str], frozenset[str]] | None = None,
              spans: Callable[[str], tuple[Span, ...]] | None = None) -> Footprint:
    """The pack's own patches for ``base`` (its ported series there, else its top-level one) as a footprint.

    ``defined(path)`` names the functions and classes upstream defines in one of the pack's files at the base
    (read from a mirror); a name the changed lines call or import counts as a symbol of the series when
    upstream defines it there, or when the changed lines import it. Without ``defined``, only imports count.

    ``spans(path)`` gives the defs of upstream's file at the base (``ast_spans`` of it, read from a mirror): each
    hunk's ``scope`` is the def its changed lines sit in. A contract (no series) has as ``targets`` the upstream
    defs its script calls (``contract_targets``)."""
    hunks: list[DiffHunk] = []
    for patch in series.load_series(root, pack.target, pack.id, base):
        hunks += parse_diff(series_diff_text(patch.path))
    if spans is not None:
        hunks = scoped(hunks, spans)
    targets: dict[str, str] = {}
    if pack.kind == "contract" and pack.reproducer and (root / pack.reproducer).is_file():
        targets = contract_targets((root / pack.reproducer).read_text(encoding="utf-8"), pack.files, spans)
    files = tuple(dict.fromkeys([*pack.files, *(h.path for h in hunks)]))
    known: set[str] = set()
    if defined is not None:
        for f in files:
            known |= defined(f)
    imported = {n for h in hunks for line in h.text.splitlines() if (m := _IMPORTED.match(line)) is not None
                for n in (x.strip().split(" as ")[0] for x in m.group(1).split(",")) if n}
    code = [h for h in hunks if not _is_test(h.path)]
    symbols = frozenset(n for n in called_names(code) if (n in known or n in imported) and not n.startswith("_")
                        and len(n) > 3)
    return Footprint(base, files, tuple(hunks), pack.error, symbols, error_texts(code), frozenset(targets),
                     targets)


def _package(path: str) -> str:
    """The import name a file of upstream's tree belongs to: its first directory, under ``src/`` when there."""
    parts = Path(path).parts
    parts = parts[1:] if parts[:1] == ("src",) else parts
    return parts[0] if len(parts) > 1 else ""


def contract_targets(script: str, files: Iterable[str],
                     spans: Callable[[str], tuple[Span, ...]] | None = None) -> dict[str, str]:
    """The upstream defs a contract's script exercises, by the script's AST: names it imports from upstream's
    package (``from megatron.core.x import Y``) and attributes it reads off an imported upstream module
    (``tensor_parallel.vocab_parallel_cross_entropy``). With ``spans`` (the pack's files at the base), only
    defs those files hold are kept, each mapped to its file, plus the top-level defs of the same file that a
    kept def's body names (one call deep: ``vocab_parallel_cross_entropy`` -> ``_VocabParallelCrossEntropy``).
    Without ``spans`` every imported name is kept, mapped to no file ("")."""
    import ast

    files = tuple(files)
    packages = {p for f in files if (p := _package(f))}
    try:
        tree = ast.parse(script)
    except (SyntaxError, ValueError):
        return {}
    names: set[str] = set()
    modules: set[str] = set()  # local names bound to an upstream module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in packages:
            for a in node.names:
                names.add(a.name)
                if a.name[:1].islower():  # may be a module (from megatron.core import tensor_parallel)
                    modules.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in packages:
                    modules.add(a.asname or a.name.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            names.add(node.attr)
    if spans is None:
        return {n: "" for n in sorted(names)}
    out: dict[str, str] = {}
    for f in files:
        sp = spans(f)
        top = {name for name, _, _ in sp if "." not in name}
        for n in sorted(names & top):
            out.setdefault(n, f)
        source_names = _names_in_defs(spans, f, [n for n in out if out[n] == f])
        for n in sorted(source_names & top):
            out.setdefault(n, f)
    return out


def _names_in_defs(spans: Callable[[str], tuple[Span, ...]], path: str, defs: list[str]) -> set[str]:
    """The names the bodies of ``defs`` (top-level defs of ``path``) use, when ``spans`` carries the file's text
    (``FileSpans``); empty otherwise."""
    import ast

    text = getattr(spans, "text", None)
    source = text(path) if callable(text) else ""
    if not source or not defs:
        return set()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in defs:
            out |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return out


class FileSpans:
    """``path`` -> the AST spans of upstream's file at one commit of a mirror (cached); ``text(path)`` its source."""

    def __init__(self, mirror: Path, commit: str):
        self.mirror, self.commit = mirror, commit
        self._text: dict[str, str] = {}
        self._spans: dict[str, tuple[Span, ...]] = {}

    def text(self, path: str) -> str:
        if path not in self._text:
            res = git.call(self.mirror, "show", f"{self.commit}:{path}")
            self._text[path] = res.stdout if res.ok else ""
        return self._text[path]

    def __call__(self, path: str) -> tuple[Span, ...]:
        if path not in self._spans:
            self._spans[path] = ast_spans(self.text(path)) if path.endswith(".py") else ()
        return self._spans[path]


def _is_test(path: str) -> bool:
    name = Path(path).name
    return "tests/" in path or name.startswith("test_") or name.endswith("_test.py")


def defined_names(mirror: Path, commit: str) -> Callable[[str], frozenset[str]]:
    """``path`` -> the top-level and nested def/class names upstream's file holds at ``commit`` (empty when
    the mirror lacks the file)."""
    def names(path: str) -> frozenset[str]:
        res = git.call(mirror, "show", f"{commit}:{path}")
        if not res.ok:
            return frozenset()
        return frozenset(m.group(1) for line in res.stdout.splitlines() if (m := _DEF.match(line)) is not None)
    return names


def series_diff_text(path: Path) -> str:
    text = path.read_text(encoding="utf-8", errors="replace")
    start = text.find("diff --git ")
    return text[start:] if start >= 0 else ""


# Names too common to search for: every module has them, so they find everything and rank nothing.
GENERIC_NAMES = frozenset({"forward", "backward", "apply", "setup", "main", "run", "call", "module", "build",
                           "update", "reset", "init", "step", "load", "save", "get", "set"})
_SPELLED = {"bwd": "backward", "fwd": "forward"}  # how a thread spells what a file stem abbreviates


def file_phrase(path: str) -> str:
    """How people name a file's subject in prose: the last two words of its stem, abbreviations spelled out
    (``mamba3_siso_bwd.py`` -> "siso backward"); "" for a stem of one word (the stem itself is searched)."""
    words = [_SPELLED.get(w, w) for w in Path(path).stem.split("_") if w]
    return " ".join(words[-2:]) if len(words) >= 2 else ""


def search_terms(fp: Footprint) -> list[str]:
    """What to search upstream threads for: our functions and the upstream symbols the series uses, our files'
    names and the phrase a thread would use for them, and the error messages (the pack's own and those
    raised in lines the series removes)."""
    terms = sorted(n for n in fp.functions | fp.symbols if not n.startswith("__") and n not in GENERIC_NAMES)
    code = [f for f in fp.files if not _is_test(f)]
    terms += [Path(f).stem for f in fp.files]  # GitHub's search splits words on '.', so the stem finds the file
    terms += [p for f in code if (p := file_phrase(f))]
    terms += [e.replace('"', " ").strip() for e in fp.error_texts]
    return list(dict.fromkeys(t for t in terms if t))


def text_overlap(fp: Footprint, text: str, is_pr: bool) -> tuple[Overlap, str]:
    """How close a thread comes by what it says. An issue that quotes our error or names our function is
    about the same failure or code (ranked as the same function), one naming our file as the same file; a
    PR's own files decide its rank, so a PR that only talks about them is a mention."""
    named = fp.mentions(text)
    where = "names " + ", ".join(named) if named else "matched the search"
    if is_pr or not named:
        return Overlap.MENTION, where
    # a def our hunks change; a def a contract only calls is named in too many threads about other things
    # ("Mamba3") to rank a thread by it: such a thread is listed as a mention
    ours = frozenset(n for h in fp.hunks for n in ({h.function} | h.defines) if n)
    if "the error message" in named or any(n in ours for n in named):
        return Overlap.FUNCTION, where
    only_called = {t.rsplit(".", 1)[-1] for t in fp.targets} - ours - fp.symbols
    if all(n in only_called for n in named):
        return Overlap.MENTION, where
    return Overlap.FILE, where
