"""The harness's layers, stated as data: a module imports only modules of a lower layer.

Foundation (no harness imports but each other's lowest) < parsing and I/O < models < the series
< the context < workflows (peers: none imports another) < composite workflows < the CLI.
Imports under ``if TYPE_CHECKING:`` are annotations only and are not counted.

A sub-package (``harness/filing/``) takes its layer from ``LAYERS`` as one module, and states the order of
its own modules in ``SUBLAYERS``: inside it a module imports only modules of a lower sub-layer; from outside,
its modules count as the package. ``harness/commands/`` is one module (the CLI verbs share ``_args``).
"""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parent.parent / "harness"

LAYERS: dict[int, set[str]] = {
    0: {"__init__", "errors", "hashing", "interpreters", "stubs", "ui", "store", "guard", "fingerprint", "tarsafe",
        "pyimports"},  # pyimports: static imports of an upstream tree (ast)
    1: {"tomlutil", "runs", "github", "sessions", "standalone",
        "payloads", "fatbin",  # stdlib + layer 0: the bootstrap uses them before any dependency is installed
        "host_builds",  # stdlib + layer 0 too: the bootstrap compiles a host build with it
        "git",  # git: raises the GitError family of errors
        "kernel_cache",  # kernel-compile caches per key in the store: facts probed, entries sealed
        "settings",  # what the noxfile and the CLI both read (mirrors, cache, Python per target): stdlib + store
        "bundle_index"},  # bundle.json's top, format and file list: stdlib, read by bootstrap and bundle
    2: {"pins", "runtime", "receipts", "upstream_tests", "bootstrap",  # bootstrap: stdlib + layers 0-1
        "suite"},  # suite: a pack's upstream-suite selection (data) and its verdict
    3: {"tracking", "builds", "upstream_checks"},  # upstream_checks: a manifest's policy checks on a git tree
    4: {"series", "threads", "decisions"},  # decisions: what the filer decided, read as data
    5: {"context"},
    # workflows: peers, none imports another
    6: {"lanes", "edit", "rebase", "export", "provenance", "filing", "related", "scaffold"},
    7: {"absorbed", "bundle", "readiness"},  # composites: rebase; lanes; filing + rebase
    8: {"landing", "performance",  # filing waves need readiness; claims need readiness's currency test
        "sweep"},  # many lanes at once: which to skip is readiness's currency test
    9: {"commands", "error_handler"},  # the CLI: one module per verb, the error boundary
    10: {"main"},  # parses and dispatches
    11: {"__main__"},
}
RANK = {name: rank for rank, names in LAYERS.items() for name in names}
# Inside a sub-package: its modules by sub-layer; "" is the package's __init__ (its public surface).
SUBLAYERS: dict[str, dict[int, set[str]]] = {
    "filing": {
        0: {"lint", "parts", "pr_template"},  # what must not leave; message, hunks, diff; the upstream's template
        1: {"evidence", "reproducer", "names", "forms"},  # the table from receipts; the self-contained script; names
        # only the change adds; the upstream's issue forms
        2: {"body"},  # render: the template filled
        3: {"check", "send"},  # the body check; gh plan and post
        4: {""},  # __init__: re-exports
    },
}
SUBRANK = {(pkg, name): rank for pkg, layers in SUBLAYERS.items() for rank, names in layers.items() for name in names}


def _module_name(path: Path) -> str:
    """``lint`` for harness/lint.py, ``filing.body`` for harness/filing/body.py, ``filing`` for its __init__."""
    rel = path.relative_to(HARNESS)
    if rel.parts[0] == "commands":
        return "commands"
    if len(rel.parts) > 1:
        return rel.parts[0] if rel.stem == "__init__" else f"{rel.parts[0]}.{rel.stem}"
    return rel.stem


def _package(name: str) -> str:
    return name.split(".", 1)[0]


def _subrank(name: str) -> int:
    pkg, _, sub = name.partition(".")
    return SUBRANK[(pkg, sub)]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness"):
            parts = node.module.split(".")
            if len(parts) == 1:  # from harness import x: x is a module or a sub-package
                found.update(a.name for a in node.names)
            elif parts[1] == "commands":
                found.add("commands")
            elif parts[1] in SUBLAYERS:  # from harness.filing[.body] import x
                if len(parts) > 2:
                    found.add(f"{parts[1]}.{parts[2]}")
                else:
                    found.update(f"{parts[1]}.{a.name}" if (parts[1], a.name) in SUBRANK else parts[1]
                                 for a in node.names)
            else:
                found.add(parts[1])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("harness."):
                    parts = a.name.split(".")
                    found.add(".".join(parts[1:3]) if parts[1] in SUBLAYERS and len(parts) > 2 else parts[1])
    return found - {"__version__"}


def test_every_module_has_a_layer():
    modules = {_module_name(p) for p in HARNESS.rglob("*.py")}
    assert {_package(m) for m in modules} - set(RANK) == set(), "give each new module a layer in LAYERS"
    inner = {m for m in modules if "." in m} | {m for m in modules if m in SUBLAYERS}
    missing = {m for m in inner if (_package(m), m.partition(".")[2]) not in SUBRANK}
    assert missing == set(), "give each module of a sub-package a sub-layer in SUBLAYERS"


def test_imports_go_down_only():
    wrong = []
    for path in sorted(HARNESS.rglob("*.py")):
        me = _module_name(path)
        for dep in _imports(path):
            if me == "commands" and dep == "commands":
                continue  # the command modules share _args / _context
            if _package(dep) == _package(me) and _package(me) in SUBLAYERS:
                if _subrank(dep) >= _subrank(me):
                    wrong.append(f"{path.relative_to(HARNESS)} imports {dep} "
                                 f"(sub-layer {_subrank(dep)} >= {_subrank(me)})")
            elif RANK[_package(dep)] >= RANK[_package(me)]:
                wrong.append(f"{path.relative_to(HARNESS)} imports {dep} "
                             f"(layer {RANK[_package(dep)]} >= {RANK[_package(me)]})")
    assert wrong == []
