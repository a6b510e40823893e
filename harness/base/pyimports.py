"""Static imports of Python files in an upstream tree (``ast`` only; nothing is imported or run).

The suite selection (``harness/lane/suite.py``) asks which test files import touched modules; the test-tree export
(``harness/lane/upstream_tests.py``) asks which conftest files and helper modules selected test files need.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.base import regular
from harness.errors import ConfigError

TEST_TOPS = ("tests", "test")  # top directories of an upstream tree that hold its tests
_TEST_NAME = re.compile(r"^(test_.*|.*_test)\.py$")


def is_test_file(path: str) -> bool:
    """``tests/a/test_b.py`` or ``tests/a/b_test.py`` under a test top directory."""
    parts = Path(path).parts
    return len(parts) > 1 and parts[0] in TEST_TOPS and bool(_TEST_NAME.match(parts[-1]))


def in_tests_tree(path: str) -> bool:
    return Path(path).parts[0] in TEST_TOPS if Path(path).parts else False


def module_name(path: str) -> str | None:
    """The dotted module of a ``.py`` path (``src/`` dropped; a package's ``__init__`` is the package)."""
    p = Path(path)
    if p.suffix != ".py":
        return None
    parts = list(p.with_suffix("").parts)
    if parts and parts[0] == "src":
        parts = parts[1:]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or None


def imported_names(source: str, module: str, is_package: bool) -> set[str]:
    """Every absolute module name an import statement of ``source`` may load, anywhere in the file.

    ``from a.b import c`` gives both ``a.b`` and ``a.b.c`` (``c`` may be a submodule); relative imports are
    resolved against ``module``. A file that does not parse imports nothing we can see (returned empty).
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    package = module.split(".") if is_package else module.split(".")[:-1]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package[:len(package) - (node.level - 1)] if node.level - 1 <= len(package) else []
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            if base:
                names.add(base)
            names.update(f"{base}.{alias.name}" if base else alias.name for alias in node.names
                         if alias.name != "*")
    return names


@dataclass(frozen=True)
class Load:
    """How a source file loads a module: an import statement, or a string naming it (``import_module(name)``)."""

    line: int
    by: str  # "import" or "name"
    switches: tuple[str, ...] = ()  # it loads only where a config switch holds one of these values; () always
    pattern: bool = False  # an f-string with a placeholder: the name is a regex (``pkg\\.\\w+_kernels``)


_DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")


def loads(source: str, module: str, is_package: bool) -> tuple[dict[str, Load], set[str]]:
    """Every module name ``source`` may load, with the first line that loads it, and every string constant of the
    file (the switch values a test sets, ``dsa_kernel_backend="tilelang"``). A file that does not parse loads
    nothing we can see.

    * import statements anywhere (``from a.b import c`` gives ``a.b`` and ``a.b.c``; relative ones resolved against
      ``module``). One inside a function that the module calls only under ``if switch == "value"`` (or that sits
      under such an ``if`` itself) loads only for those values;
    * strings naming a module: an argument of a call whose name holds ``import`` (``import_module("a.b")``), and a
      value of a dict with string keys (``{"tilelang": "a.b.tilelang_kernels"}``: the key is the switch value
      that picks it). An f-string there is a pattern (``f"a.b.{kind}"``).
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}, set()
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: list[tuple[str, int, str, str | None, frozenset[str], bool]] = []  # name, line, by, func, guards, regex
    guarded_calls: dict[str, list[frozenset[str]]] = {}  # function name -> the switch values around each call
    strings: set[str] = set()

    def visit(node: ast.AST, func: str | None, guard: frozenset[str]) -> None:
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno, "import", func, guard, False) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package[:len(package) - (node.level - 1)] if node.level - 1 <= len(package) else []
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            if base:
                found.append((base, node.lineno, "import", func, guard, False))
            found.extend((f"{base}.{alias.name}" if base else alias.name, node.lineno, "import", func, guard, False)
                         for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.add(node.value)
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if isinstance(k, ast.Constant) and isinstance(k.value, str) and v is not None and (named := _named(v)):
                    found.append((named[0], v.lineno, "name", None, frozenset({k.value}), named[1]))
        elif isinstance(node, ast.Call):
            called = node.func.id if isinstance(node.func, ast.Name) else (
                node.func.attr if isinstance(node.func, ast.Attribute) else "")
            guarded_calls.setdefault(called, []).append(guard)
            if "import" in called and node.args and (named := _named(node.args[0])):
                found.append((named[0], node.lineno, "name", func, guard, named[1]))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for child in ast.iter_child_nodes(node):
                visit(child, node.name, frozenset())
        elif isinstance(node, ast.If):
            visit(node.test, func, guard)
            inner = guard | _compared(node.test)
            for child in node.body:
                visit(child, func, inner)
            for child in node.orelse:
                visit(child, func, guard)
        else:
            for child in ast.iter_child_nodes(node):
                visit(child, func, guard)

    visit(tree, None, frozenset())
    names: dict[str, Load] = {}
    for name, line, by, func, guard, regex in found:
        switches = guard
        if not switches and func is not None:  # a function's import: the switches around every call of it here
            around = guarded_calls.get(func, [])
            switches = frozenset().union(*around) if around and all(around) else frozenset()
        load = Load(line, by, tuple(sorted(switches)), regex)
        if name not in names or (line, by) < (names[name].line, names[name].by):
            names[name] = load
    return names, strings


def _compared(test: ast.AST) -> set[str]:
    """String constants an ``if`` test compares with (``x == "a"``, ``x in ("a", "b")``)."""
    out: set[str] = set()
    for n in ast.walk(test):
        if isinstance(n, ast.Compare) and all(isinstance(op, (ast.Eq, ast.In, ast.Is)) for op in n.ops):
            out |= {c.value for side in (n.left, *n.comparators) for c in ast.walk(side)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return out


def _named(node: ast.AST) -> tuple[str, bool] | None:
    """A dotted module name (``"a.b.c"``) or an f-string pattern with a dot (``f"a.b.{x}"``, a regex) in ``node``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and _DOTTED.match(node.value):
        return node.value, False
    if isinstance(node, ast.JoinedStr):
        literal = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
        if "." in literal and re.fullmatch(r"[\w.]*", literal):
            return "".join(re.escape(v.value) if isinstance(v, ast.Constant) and isinstance(v.value, str)
                           else r"\w+" for v in node.values), True
    return None


def helper_files(tree: Path, selected: Iterable[str]) -> list[str]:
    """What pytest needs beside ``selected`` test files of ``tree``: the ``conftest.py`` and ``__init__.py``
    of every directory from the root down to each file, and the modules of the tests tree they import
    (statically, to a fixed point; ``tests.x.y`` or a relative import), relative paths, sorted."""
    need: set[str] = set()
    todo = list(selected)
    seen: set[str] = set()
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        parts = Path(rel).parts
        for depth in range(len(parts)):
            for name in ("conftest.py", "__init__.py"):
                cand = Path(*parts[:depth], name).as_posix()
                if cand not in seen and (tree / cand).is_file():
                    need.add(cand)
                    todo.append(cand)
        if not (tree / rel).is_file():
            continue
        mod = module_name(rel) or rel
        try:
            text = regular.source_text(tree, rel)
        except regular.NotRegular as exc:
            raise ConfigError(f"{exc}: the tests a change reaches are read from the tree's regular files "
                              "only") from None
        for name in imported_names(text, mod, rel.endswith("__init__.py")):
            if name.split(".")[0] not in TEST_TOPS:
                continue
            path = Path(*name.split("."))
            for cand in (path.with_suffix(".py").as_posix(), (path / "__init__.py").as_posix()):
                if (tree / cand).is_file() and cand not in seen:
                    need.add(cand)
                    todo.append(cand)
    return sorted(need - set(selected))
