"""The harness's layers, stated as data: a module imports only modules of a lower layer.

Foundation (no harness imports but each other's lowest) < parsing and I/O < models < the series
< the context < workflows (peers: none imports another) < composite workflows < the CLI.
Imports under ``if TYPE_CHECKING:`` are annotations only and are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parent.parent / "harness"

LAYERS: dict[int, set[str]] = {
    0: {"__init__", "errors", "hashing", "interpreters", "stubs", "ui", "store", "guard", "fingerprint"},
    1: {"tomlutil", "runs", "github", "sessions", "standalone", "bootstrap",  # bootstrap: stdlib + layer 0
        "git"},  # git: raises the GitError family of errors
    2: {"pins", "runtime", "receipts", "upstream_tests"},
    3: {"tracking", "builds"},
    4: {"series", "threads"},
    5: {"context"},
    6: {"lanes", "edit", "rebase", "export", "provenance", "filing"},  # workflows: peers, none imports another
    7: {"absorbed", "bundle", "readiness"},  # composites: rebase; lanes; filing + rebase
    8: {"landing", "performance"},  # filing waves need readiness; claims need readiness's currency test
    9: {"commands", "error_handler"},  # the CLI: one module per verb, the error boundary
    10: {"main"},  # parses and dispatches
    11: {"__main__"},
}
RANK = {name: rank for rank, names in LAYERS.items() for name in names}


def _module_name(path: Path) -> str:
    rel = path.relative_to(HARNESS)
    return "commands" if rel.parts[0] == "commands" else rel.stem


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
            if len(parts) == 1:
                found.update(a.name for a in node.names)
            else:
                found.add("commands" if parts[1] == "commands" else parts[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("harness."))
    return found - {"__version__"}


def test_every_module_has_a_layer():
    modules = {_module_name(p) for p in HARNESS.rglob("*.py")}
    assert modules - set(RANK) == set(), "give each new module a layer in LAYERS"


def test_imports_go_down_only():
    wrong = []
    for path in sorted(HARNESS.rglob("*.py")):
        me = _module_name(path)
        for dep in _imports(path):
            if me == "commands" and dep == "commands":
                continue  # the command modules share _args / _context
            if RANK[dep] >= RANK[me]:
                wrong.append(f"{path.relative_to(HARNESS)} imports {dep} (layer {RANK[dep]} >= {RANK[me]})")
    assert wrong == []
