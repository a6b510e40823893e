"""One self-contained reproducer file for an upstream maintainer, derived from a pack's reproducer.

A reproducer imports helpers that live in this repository (``repros/_lane.py``, ``repros/mamba/_mamba3.py``,
another reproducer). ``amalgamate`` turns it into one file that needs only the package under test and its
own dependencies: every ``from helper import a, b`` is replaced by the definitions of ``a`` and ``b`` -- and of
whatever they use, found by walking the names their code refers to -- copied verbatim from the helper, with
the imports those definitions need. ``import helper`` (attribute use, ``helper.a``) gets the same definitions
plus a ``types.SimpleNamespace`` named like the module. Nothing is rewritten: the reproducer's own code and the
copied definitions are the original text. The result is compiled, and two different definitions of one
name are refused rather than silently shadowed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError


@dataclass
class _Module:
    name: str
    path: Path
    source: str
    tree: ast.Module
    defs: dict[str, ast.stmt] = field(default_factory=dict)  # top-level name -> the statement binding it
    future: bool = False


def _bound_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, ast.Assign):
        return [n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in stmt.names]
    return []


def _used_names(stmt: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}


def _end(stmt: ast.stmt) -> int:
    return stmt.end_lineno if stmt.end_lineno is not None else stmt.lineno


def _segment(source: str, stmt: ast.stmt) -> str:
    return ast.get_source_segment(source, stmt, padded=False) or ""


def _is_future(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"


class Amalgamator:
    def __init__(self, search: list[Path]):
        self.search = search
        self.modules: dict[str, _Module] = {}

    def find(self, name: str) -> Path | None:
        for d in self.search:
            candidate = d / f"{name}.py"
            if candidate.is_file():
                return candidate
        return None

    def load(self, name: str, path: Path) -> _Module:
        if name not in self.modules:
            source = path.read_text(encoding="utf-8")
            try:
                tree = ast.parse(source, filename=str(path))
            except SyntaxError as exc:
                raise ConfigError(f"{path}:{exc.lineno}: cannot parse: {exc.msg}") from None
            mod = _Module(name, path, source, tree)
            for stmt in tree.body:
                if _is_future(stmt):
                    mod.future = True
                    continue
                for bound in _bound_names(stmt):
                    mod.defs.setdefault(bound, stmt)
            self.modules[name] = mod
        return self.modules[name]

    def local_imports(self, mod: _Module) -> list[tuple[Any, str, list[str], bool]]:
        """(statement, module, names, star-style) for each top-level import of a local helper module."""
        found: list[tuple[Any, str, list[str], bool]] = []
        for stmt in mod.tree.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module and self.find(stmt.module):
                if any(a.name == "*" for a in stmt.names):
                    raise ConfigError(f"{mod.path}:{stmt.lineno}: 'from {stmt.module} import *' cannot be inlined")
                if any(a.asname and a.asname != a.name for a in stmt.names):
                    raise ConfigError(f"{mod.path}:{stmt.lineno}: 'import ... as' of a local helper cannot be inlined")
                found.append((stmt, stmt.module, [a.name for a in stmt.names], False))
            elif isinstance(stmt, ast.Import):
                local = [a for a in stmt.names if self.find(a.name)]
                if local and len(local) != len(stmt.names):
                    raise ConfigError(f"{mod.path}:{stmt.lineno}: split this import: local helpers and other "
                                      "modules on one line")
                for a in local:
                    used = sorted({n.attr for n in ast.walk(mod.tree) if isinstance(n, ast.Attribute)
                                   and isinstance(n.value, ast.Name) and n.value.id == (a.asname or a.name)})
                    found.append((stmt, a.name, used, True))
        return found

    def collect(self, module: str, names: list[str], need: dict[str, set[int]], where: str) -> None:
        """Mark the statements of ``module`` that define ``names`` (and what they use) as needed."""
        path = self.find(module)
        if path is None:
            raise ConfigError(f"{where}: no local module '{module}'")
        mod = self.load(module, path)
        todo = list(names)
        while todo:
            name = todo.pop()
            stmt = mod.defs.get(name)
            if stmt is None:
                raise ConfigError(f"{where}: '{name}' is not defined at the top level of {mod.path.name}")
            ids = need.setdefault(module, set())
            if id(stmt) in ids:
                continue
            ids.add(id(stmt))
            if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module and self.find(stmt.module):
                self.collect(stmt.module, [a.name for a in stmt.names if (a.asname or a.name) == name], need,
                             f"{mod.path.name}:{stmt.lineno}")
                continue
            if isinstance(stmt, ast.Import) and any(self.find(a.name) for a in stmt.names):
                raise ConfigError(f"{mod.path}:{stmt.lineno}: a helper's 'import {name}' of another helper "
                                  "cannot be inlined; use 'from ... import'")
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                continue
            for nested in self.nested_imports(mod, stmt):
                self.collect(nested.module or "", [a.name for a in nested.names], need,
                             f"{mod.path.name}:{nested.lineno}")
            for used in _used_names(stmt):
                if used in mod.defs and used != name:
                    todo.append(used)

    def nested_imports(self, mod: _Module, stmt: ast.stmt) -> list[ast.ImportFrom]:
        """The ``from helper import ...`` statements inside ``stmt`` (a function importing a helper when called):
        inlined like a top-level one, the statement itself replaced by ``pass``."""
        found = []
        for node in ast.walk(stmt):
            if node is stmt or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.Import) and any(self.find(a.name) for a in node.names):
                raise ConfigError(f"{mod.path}:{node.lineno}: 'import' of a local helper inside a function cannot "
                                  "be inlined; use 'from ... import'")
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and self.find(node.module):
                if any(a.asname and a.asname != a.name for a in node.names):
                    raise ConfigError(f"{mod.path}:{node.lineno}: 'import ... as' of a local helper cannot be "
                                      "inlined")
                found.append(node)
        return found


def _without_nested(lines: list[str], nested: list[ast.ImportFrom]) -> list[str]:
    """``lines`` with each of ``nested`` (helper imports inside functions, now inlined above) replaced by ``pass``
    at its indentation, on its first line; its other lines left empty. Line numbers do not move."""
    out = list(lines)
    for node in nested:
        first = out[node.lineno - 1]
        out[node.lineno - 1] = first[:len(first) - len(first.lstrip())] + "pass"
        for i in range(node.lineno, _end(node)):
            out[i] = ""
    return out


def amalgamate(reproducer: Path, search: list[Path], docstring: str, prologue: str = "") -> str:
    """The reproducer as one file: local helper imports replaced by the definitions they bring in.

    ``search`` are the directories local helpers are found in (the reproducer's own directory first);
    ``docstring`` replaces the reproducer's module docstring (keep the original text in it if wanted);
    ``prologue`` is code run first (after ``from __future__``), before the reproducer's own imports.
    """
    am = Amalgamator([reproducer.parent, *search])
    main = am.load("__main__", reproducer)
    imports = am.local_imports(main)
    need: dict[str, set[int]] = {}
    namespaces: list[tuple[str, list[str]]] = []
    for stmt, module, names, star in imports:
        am.collect(module, names, need, f"{reproducer.name}:{stmt.lineno}")
        if star:
            namespaces.append((module, names))
    main_nested = [n for stmt in main.tree.body for n in am.nested_imports(main, stmt)]
    for node in main_nested:
        am.collect(node.module or "", [a.name for a in node.names], need, f"{reproducer.name}:{node.lineno}")
    # Helper modules in dependency order: a module after every module its needed statements import from.
    order: list[str] = []

    def visit(name: str, seen: frozenset = frozenset()) -> None:
        if name in order or name in seen:
            return
        mod = am.modules[name]
        for stmt in mod.tree.body:
            if id(stmt) in need.get(name, ()) and isinstance(stmt, ast.ImportFrom) and stmt.module \
                    and am.find(stmt.module) and stmt.level == 0:
                visit(stmt.module, seen | {name})
        order.append(name)

    for name in need:
        visit(name)
    main_defs = {n: stmt for n, stmt in main.defs.items()
                 if not (isinstance(stmt, (ast.Import, ast.ImportFrom)) and any(stmt is s for s, *_ in imports))}
    chosen: dict[str, tuple[str, str]] = {}  # name -> (module, source text)
    blocks: list[str] = []
    seen_imports: set[str] = {_segment(main.source, stmt) for stmt in main.tree.body
                              if isinstance(stmt, (ast.Import, ast.ImportFrom))}
    future = main.future
    for name in order:
        mod = am.modules[name]
        future |= mod.future
        head, lines = [], []
        for stmt in mod.tree.body:
            if id(stmt) not in need.get(name, ()):
                continue
            if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module and am.find(stmt.module):
                continue  # a helper imported from another helper: already inlined above
            text = _segment(mod.source, stmt)
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                if text not in seen_imports:
                    seen_imports.add(text)
                    head.append(text)
                continue
            for bound in _bound_names(stmt):
                for other, src in ([chosen[bound]] if bound in chosen else []):
                    if src != text:
                        raise ConfigError(f"cannot inline {mod.path.name}: '{bound}' is also defined, differently, "
                                          f"in {other}")
                if bound in main_defs and _segment(main.source, main_defs[bound]) != text:
                    raise ConfigError(f"cannot inline {mod.path.name}: '{bound}' is also defined, differently, in "
                                      f"{reproducer.name}")
                chosen[bound] = (mod.path.name, text)
            decorated = stmt.decorator_list if hasattr(stmt, "decorator_list") else []
            start = min([stmt.lineno] + [d.lineno for d in decorated])
            lines.append("\n".join(_without_nested(mod.source.splitlines(), am.nested_imports(mod, stmt))
                                   [start - 1:_end(stmt)]))
        if lines or head:
            blocks.append(f"# ---- from {mod.path.name} (verbatim) ----\n"
                          + ("\n".join(head) + "\n\n\n" if head else "") + "\n\n\n".join(lines))
    for module, names in namespaces:
        blocks.append("import types as _types\n\n"
                      f"{module} = _types.SimpleNamespace({', '.join(f'{n}={n}' for n in names)})")
    helper_block = "\n\n\n".join(blocks)

    # The reproducer's own text: docstring replaced, __future__ hoisted, local imports replaced by the helpers.
    src_lines = _without_nested(main.source.splitlines(), main_nested)
    drop: set[int] = set()
    body = main.tree.body
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        drop.update(range(first.lineno, _end(first) + 1))
    for stmt in body:
        if _is_future(stmt):
            drop.update(range(stmt.lineno, _end(stmt) + 1))
    first_local = min((stmt.lineno for stmt, *_ in imports), default=None)
    for stmt, *_ in imports:
        drop.update(range(stmt.lineno, _end(stmt) + 1))
    out: list[str] = ['"""' + docstring.replace('"""', "'''").rstrip() + '\n"""']
    if future:
        out.append("\nfrom __future__ import annotations")
    if prologue:
        out.append("\n" + prologue.strip("\n") + "\n")
    text_lines: list[str] = []
    for no, line in enumerate(src_lines, 1):
        if no == first_local and helper_block:
            text_lines += ["", helper_block, "", "", "# ---- the reproducer ----"]
        if no not in drop:
            text_lines.append(line)
    merged = "\n".join(out) + "\n\n" + "\n".join(text_lines).strip("\n") + "\n"
    try:
        compile(merged, reproducer.name, "exec")
    except SyntaxError as exc:  # pragma: no cover - the inputs compile, and the output is their text
        raise ConfigError(f"the self-contained version of {reproducer.name} does not compile: {exc}") from None
    return merged
