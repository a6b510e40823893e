"""Static imports of Python files in an upstream tree (``ast`` only; nothing is imported or run).

The suite selection (``harness/lane/suite.py``) asks which test files import touched modules; the test-tree export
(``harness/lane/upstream_tests.py``) asks which conftest files and helper modules selected test files need.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

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
        for name in imported_names((tree / rel).read_text(encoding="utf-8", errors="replace"), mod,
                                   rel.endswith("__init__.py")):
            if name.split(".")[0] not in TEST_TOPS:
                continue
            path = Path(*name.split("."))
            for cand in (path.with_suffix(".py").as_posix(), (path / "__init__.py").as_posix()):
                if (tree / cand).is_file() and cand not in seen:
                    need.add(cand)
                    todo.append(cand)
    return sorted(need - set(selected))
