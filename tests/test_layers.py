"""The harness's layers, stated as data: a module imports only what sits below it.

``harness/`` holds a few top-level modules and one package per stage of the lane. ``LAYERS`` orders the
top-level entries: the shared base < the pinned upstreams < the lane < watching upstream < the filing < the
GPU host < the command line (and the bootstrap, the GPU host's front door) < ``main`` < ``__main__``. A module
of one entry imports only entries of a lower layer.

Inside a package, ``SUBLAYERS`` orders its modules: a module imports only modules of a lower sub-layer of its
own package. ``""`` is the package's ``__init__`` (its public surface, where it has one); ``"*"`` stands for
every module not named otherwise (the command line's verbs, which share ``_args``, ``_context`` and
``error_handler`` and never import one another).

Imports under ``if TYPE_CHECKING:`` count like any other: a module that must name something above it states
what it needs instead (``lane.context.Offline``), so not even the type checker sees a circle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

HARNESS = Path(__file__).resolve().parent.parent / "harness"

LAYERS: dict[int, set[str]] = {
    0: {"__init__", "errors"},  # the version; exit codes and the exception families
    1: {"base"},  # shared utilities that know no pack
    2: {"upstream"},  # manifests and their materialization, git, GitHub, the upstream's linters
    3: {"lane"},  # tracking, series, builds, runs, receipts, lanes end to end
    4: {"watch"},  # threads, overlapping work, rebase trials, absorbed packs, provenance
    5: {"filing"},  # bodies and their check, edit, export, readiness, landing, performance
    6: {"host"},  # offline bundles, payloads, fatbin, the sweep (which skips lanes readiness calls current)
    7: {"commands",  # one module per verb, the error boundary
        "bootstrap"},  # the GPU host's front door: stdlib + base, lane.host_builds, host.index/payloads
    8: {"main"},  # parses and dispatches
    9: {"__main__"},
}
RANK = {name: rank for rank, names in LAYERS.items() for name in names}

SUBLAYERS: dict[str, dict[int, set[str]]] = {
    "base": {
        0: {"hashing", "interpreters", "ui", "store", "guard", "fingerprint", "tarsafe",
            "regular",  # files read from a tree: regular files inside it
            "clock"},  # the one wall clock ($PATCHLANE_CLOCK_SHIFT)
        1: {"settings",  # what the noxfile and the CLI both read (mirrors, cache, Python per target): + store
            "tomlutil",  # TOML read with located errors: + regular
            "pyimports"},  # static imports of an upstream tree (ast), its files read through regular
        2: {""},
    },
    "upstream": {
        0: {"git", "github"},  # the one place git runs; the REST client
        1: {"pins"},  # manifests, bases, materialization
        2: {"linters"},  # a manifest's policy checks on a git tree
        3: {""},
    },
    "upstream.pins": {
        0: {"model"},  # a manifest as typed data
        1: {"load", "downloads"},  # upstream/<target>.toml read into it; an artefact found or fetched
        2: {"checkout", "releases"},  # a base materialized; a release read from the registry and written in
        3: {""},  # __init__: re-exports
    },
    "lane": {
        0: {"stubs", "runs", "runtime", "suite", "upstream_tests", "sessions",
            "kernel_key",  # what a lane's compiled kernels depend on
            "host_builds",  # stdlib + base: the bootstrap compiles a host build with it
            "loaded",  # the repository files a lane's processes imported, recorded at their exit
            "rank_lines"},  # one rank's output passed on whole lines (stdlib only: runs in the lane's python)
        1: {"tracking", "builds", "receipts",  # the packs (with their suites); builds (with stubs); run records
            "kernel_cache",  # compiled kernels kept per key
            "suite_reasons",  # why a suite's cases failed, read from the lanes' pytest logs
            "suite_env"},  # the environment a suite ran in: pairing refused across two, the upstream CI's or not
        2: {"series", "scaffold",  # the one owner of patch files; a new pack's first files
            "declaration"},  # a lane's whole declaration as its receipt records it
        3: {"context",  # repository + frozen run options
            "series_write"},  # a series written back (format-patch normalized, swapped in)
        4: {"lanes"},  # base -> series -> build -> reproducer -> receipt
        5: {"suite_check"},  # the upstream suite's verdict from its lanes; the commit-by-commit check
        6: {""},
    },
    "lane.receipts": {
        0: {"records"},  # the parts of a receipt, the closed schema
        1: {"model", "withdrawn"},  # Receipt, load, dump; receipts taken out of evidence (withdrawn.toml)
        2: {"writer", "verifier", "index"},  # a directory written; checked; found
        3: {""},  # __init__: re-exports
    },
    "lane.tracking": {
        0: {"domain",  # what a widening change admits ([domain] of pack.toml), as data
            "layout"},  # which keys live in tracking.toml, which in patches/<target>/<NN>/pack.toml
        1: {"model"},  # a pack as typed data
        2: {"threads"},  # its threads and related decisions, checked
        3: {"load"},  # a pack's table read with a closed schema
        4: {"document"},  # Tracking: the file, its document and the tool's edits
        5: {""},  # __init__: re-exports
    },
    "watch": {
        0: {"threads", "decisions", "rebase", "provenance",
            "footprint"},  # what a series touches, and how close upstream work comes to it
        1: {"conflicts"},  # whether an open upstream PR conflicts with a series, hunk by hunk (uses footprint)
        2: {"related", "absorbed",  # overlapping work needs decisions, footprints, conflicts; absorbed needs rebase
            "refresh"},  # a new upstream head: every pack classified there (rebase's trial, patch-ids, history)
        3: {""},
    },
    "filing": {
        0: {"lint", "parts", "pr_template",  # what must not leave; message, hunks, diff; the upstream's template
            "standalone",  # one self-contained reproducer file
            "edit", "export"},  # the series as commits; the series as filed
        1: {"evidence", "reproducer", "names", "forms"},  # the table from receipts; the script; names only the
        # change adds; the upstream's issue forms
        2: {"body", "scripts"},  # render: the template filled; the attached scripts run alone
        3: {"check", "send"},  # the body check; gh plan and post
        4: {"", "readiness"},  # __init__: re-exports; whether a pack is ready (renders and checks its body)
        5: {"landing", "performance"},  # filing waves; claims judged current by readiness's test
    },
    "host": {
        0: {"index", "payloads", "fatbin",  # standard library only: the bootstrap uses them
            "wheels",  # the harness's pinned dependencies and each base's runtime pins, downloaded
            "sweep_schedule"},  # what a task needs, the host's GPUs and slots, the pure scheduler
        1: {"bundle",  # made from lanes
            "stack",  # a target's carried packs as one package, in landing order, and checked together
            "unpacked",  # a bundle opened on the GPU host (lane.context.Offline)
            "sweep_plan"},  # lanes into tasks (readiness says which are current)
        2: {"sweep_estimate",  # the scheduler replayed over recorded durations
            "slurm"},  # the plan as Slurm array jobs, and their state
        3: {"ready_plan"},  # what to run to make packs ready, fitted to a device budget
        4: {"sweep"},  # the runner
        5: {""},
    },
    "commands": {
        0: {"_args", "_context", "error_handler"},  # what the verbs share
        1: {"_sweep_slurm"},  # sweep's Slurm side: submit, watch, cancel, gather
        2: {"*"},  # the verbs
        3: {""},
    },
}
SUBRANK = {(pkg, name): rank for pkg, layers in SUBLAYERS.items() for rank, names in layers.items() for name in names}


def _module_name(path: Path, root: Path = HARNESS) -> str:
    """``errors`` for harness/errors.py, ``lane.series`` for harness/lane/series.py, ``lane.`` for the package's
    __init__ (``lane.receipts.`` one level down), ``__init__`` for harness/__init__.py."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        return ".".join(parts[:-1]) + "."
    return ".".join(parts)


def _entry(name: str) -> str:
    return name.split(".", 1)[0]


def _subrank(pkg: str, child: str) -> int:
    """``child``'s sub-layer inside package ``pkg`` (``""``: its __init__); -1 when it has none."""
    return SUBRANK.get((pkg, child), SUBRANK.get((pkg, "*"), -1))


def _resolve(parts: list[str], root: Path) -> str:
    """The module name of ``harness.<parts>``: a package (its __init__) or a module."""
    return ".".join(parts) + ("." if (root.joinpath(*parts) / "__init__.py").is_file() else "")


def _imports(path: Path, root: Path = HARNESS) -> set[str]:
    """What ``path`` imports of the harness, as module names (``lane.series``, ``errors``, ``filing.``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "harness":
            parts = node.module.split(".")[1:]
            here = root.joinpath(*parts)
            for a in node.names:
                if not parts and a.name == "__version__":
                    found.add("__init__")
                elif (here / f"{a.name}.py").is_file() or (here / a.name / "__init__.py").is_file():
                    found.add(_resolve([*parts, a.name], root))  # from harness.lane import series: a module
                else:
                    found.add(_resolve(parts, root))  # a name the module (or the package's __init__) defines
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "harness" and len(parts) > 1:
                    found.add(_resolve(parts[1:], root))
    return found


def _places(name: str) -> list[tuple[str, str]]:
    """Each (package, child) a module sits in, outermost first: ``lane.receipts.model`` sits in ``lane`` as
    ``receipts`` and in ``lane.receipts`` as ``model``."""
    parts = name.split(".")
    return [(".".join(parts[:k]), parts[k]) for k in range(1, len(parts))]


def _unplaced(root: Path) -> set[str]:
    """Modules under ``root`` that LAYERS / SUBLAYERS give no place."""
    modules = {_module_name(p, root) for p in root.rglob("*.py")}
    return {m for m in modules if _entry(m) not in RANK or any(_subrank(pkg, c) < 0 for pkg, c in _places(m))}


def _wrong(me: str, dep: str) -> str | None:
    """Why ``me`` may not import ``dep`` (None when it may): compared where their paths part."""
    a, b = me.split("."), dep.split(".")
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    if k == len(a) == len(b):
        return None
    if k == 0:
        ra, rb = RANK[a[0]], RANK[b[0]]
        return None if rb < ra else f"layer {rb} >= {ra}"
    pkg = ".".join(a[:k])
    ra, rb = _subrank(pkg, a[k]), _subrank(pkg, b[k])
    return None if rb < ra else f"sub-layer {rb} >= {ra} in {pkg}"


def _wrong_imports(root: Path) -> list[str]:
    wrong = []
    for path in sorted(root.rglob("*.py")):
        me = _module_name(path, root)
        for dep in sorted(_imports(path, root)):
            why = _wrong(me, dep)
            if why:
                wrong.append(f"{path.relative_to(root)} imports {dep} ({why})")
    return wrong


def test_every_module_has_a_layer():
    assert _unplaced(HARNESS) == set(), "give each top-level entry a layer in LAYERS, each package module a sub-layer"
    modules = {_module_name(p) for p in HARNESS.rglob("*.py")}
    missing = {f"{pkg}.{name}" for pkg, name in SUBRANK
               if name != "*" and not {f"{pkg}.{name}", f"{pkg}.{name}."} & modules}
    assert missing == set(), "SUBLAYERS names a module that is not there"


def test_every_package_says_what_it_owns_and_may_import():
    for pkg in SUBLAYERS:
        init = HARNESS.joinpath(*pkg.split(".")) / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "May import" in doc, f"{init}: say what the package owns and what it may import"


def test_imports_go_down_only():
    assert _wrong_imports(HARNESS) == []


def test_the_checks_see_a_wrong_import_and_a_stray_module(tmp_path):
    """The checks can fail: a lane module importing the filing, an upward import inside a package, a module
    without a sub-layer."""
    fake = tmp_path / "harness"
    (fake / "lane").mkdir(parents=True)
    (fake / "lane" / "__init__.py").write_text('"""May import nothing."""\n')
    (fake / "lane" / "tracking.py").write_text("from harness.filing import readiness\nfrom harness.lane import lanes\n")
    (fake / "lane" / "lanes.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                            "    from harness.host import bundle\n")
    (fake / "host").mkdir()
    (fake / "host" / "bundle.py").write_text("")
    (fake / "lane" / "stray.py").write_text("")
    (fake / "filing").mkdir()
    (fake / "filing" / "readiness.py").write_text("")
    assert sorted(_wrong_imports(fake)) == ["lane/lanes.py imports host.bundle (layer 6 >= 3)",
                                            "lane/tracking.py imports filing.readiness (layer 5 >= 3)",
                                            "lane/tracking.py imports lane.lanes (sub-layer 4 >= 1 in lane)"]
    assert _unplaced(fake) == {"lane.stray"}


def _undrawn(doc: str, root: Path = HARNESS) -> set[str]:
    """Modules and packages under ``root`` that docs/layout.md's tree does not name (the verbs aside)."""
    words = set(re.findall(r"[A-Za-z_]+", doc))
    names = {p.stem for p in root.rglob("*.py") if p.parent.name != "commands" and p.stem != "__init__"}
    names |= {p.name for p in root.rglob("*") if (p / "__init__.py").is_file()}
    return {n for n in names if n not in words}


def test_the_layout_doc_draws_every_module(tmp_path):
    assert _undrawn((HARNESS.parent / "docs" / "layout.md").read_text()) == set(), \
        "docs/layout.md: name the new module in the tree of 'The harness, by stage of the lane'"
    fake = tmp_path / "harness"
    (fake / "lane").mkdir(parents=True)
    (fake / "lane" / "__init__.py").write_text("")
    (fake / "lane" / "stray.py").write_text("")
    assert _undrawn("lane", fake) == {"stray"}
