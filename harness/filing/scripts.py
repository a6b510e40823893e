"""The attached scripts run alone: each script a body links (``docs/filings/repro_*.py``) against a plain source tree
of the filing base, with nothing of this repository on its path.

A maintainer saves the script and runs it with the package under test importable. ``run_script`` does the same,
as strictly as it can: ``python -I`` (no environment variables, no user site, not the script's own directory) with
the base's tree -- or that tree with the series applied, for a step the script's docstring says runs with the
change -- and the packages the script's header names (the other upstream builds of its lanes and the base's
runtime requirements), nothing else; ``harness`` and the reproducers' helper modules cannot be imported. It:

* fails on a word of this repository's vocabulary anywhere in the script (``BUG_REPRODUCED``, ``receipt``,
  ``lane``, ``_lane``, ``HARNESS_*``, ...);
* fails on an import (top level or nested in a function) of a module the environment does not have, unless the
  import sits in a ``try`` that handles its failure;
* runs the script with ``--help``: through its imports and its argument parsing;
* runs every step of the docstring's "Run it once per build" list marked "(CPU is enough)", as written, on the
  CPU (``CUDA_VISIBLE_DEVICES`` empty); each must exit 0.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.filing.lint import VOCABULARY_RULES

# this repository's words that the plain dialect (reproducer.public_dialect) must have taken out of a script,
# beyond the lint's: helper module names such as ``_lane`` and ``_numerics`` that only exist in repros/
_OWN = re.compile(r"(?<![A-Za-z0-9])_(?:lane|numerics|timing|minimal|mamba3?)\b|\brepros\b|\bpatch_?lane\b", re.I)
_STEP = re.compile(r"^\s*\d+\.\s+(?P<build>.+?)\s+\((?P<where>CPU is enough|CUDA GPU)\):\s*$")
# the wrapper a script runs under: the tree and sites first on sys.path, harness and the helpers made unimportable
_WRAPPER = """\
import runpy, sys
paths, script, args = sys.argv[1].split({sep!r}), sys.argv[2], sys.argv[3:]
sys.path[:0] = [p for p in paths if p]
for name in ("harness", "_lane", "_numerics", "_timing", "_minimal", "repros"):
    sys.modules[name] = None  # import fails: nothing of the project is there for a maintainer
sys.argv = [script, *args]
runpy.run_path(script, run_name="__main__")
"""
_FIND = """\
import importlib.util, sys
sys.path[:0] = [p for p in sys.argv[1].split({sep!r}) if p]
missing = [n for n in sys.argv[2:] if n in ("harness", "_lane", "_numerics", "_timing", "_minimal", "repros")
           or importlib.util.find_spec(n) is None]
print("\\n".join(missing))
"""


@dataclass
class Step:
    """One command of the script's docstring."""

    number: int
    build: str
    cpu: bool
    command: str
    patched: bool


@dataclass
class Outcome:
    script: str
    findings: list[str] = field(default_factory=list)
    ran: list[tuple[str, float]] = field(default_factory=list)  # (what, seconds)

    @property
    def ok(self) -> bool:
        return not self.findings


def steps(text: str) -> list[Step]:
    """The numbered commands of the script's docstring, with the build each one needs."""
    doc = ast.get_docstring(ast.parse(text)) or ""
    lines = doc.splitlines()
    out: list[Step] = []
    for i, line in enumerate(lines):
        m = _STEP.match(line)
        if m is None or i + 1 >= len(lines):
            continue
        build = m["build"]
        out.append(Step(len(out) + 1, build, m["where"] == "CPU is enough", lines[i + 1].strip(),
                        not build.rstrip().endswith(("unchanged", "as published"))))
    return out


def vocabulary(text: str) -> list[str]:
    """Each line of ``text`` holding one of this repository's words, as 'line N: word'."""
    found = []
    for no, line in enumerate(text.splitlines(), 1):
        for _, pattern in VOCABULARY_RULES:
            found += [f"line {no}: {m.group(0)!r} is this project's word" for m in pattern.finditer(line)]
        found += [f"line {no}: {m.group(0)!r} is this project's word" for m in _OWN.finditer(line)]
    return found


def imported(text: str) -> list[tuple[int, str]]:
    """(line, top-level module) of every absolute import in ``text``, nested ones included, except those in a
    ``try`` whose handlers catch the import's failure (ImportError, ModuleNotFoundError, Exception)."""
    tree = ast.parse(text)
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_import(h) for h in node.handlers):
            guarded |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    out = []
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module and node.module != "__future__":
            out.append((node.lineno, node.module.split(".")[0]))
    return sorted(set(out))


def _catches_import(handler: ast.ExceptHandler) -> bool:
    names = [handler.type] if not isinstance(handler.type, ast.Tuple) else list(handler.type.elts)
    return handler.type is None or any(isinstance(n, ast.Name) and n.id in
                                       ("ImportError", "ModuleNotFoundError", "Exception", "BaseException")
                                       for n in names)


def run_script(script: Path, python: str, plain: Path, patched: Path | None, sites: list[Path],
               timeout_s: int = 600) -> Outcome:
    """Check and run ``script`` as a maintainer would (module docstring). ``plain``: the filing base's tree;
    ``patched``: it with the series applied (None: the steps with the change are not run); ``sites``: the
    directories holding the packages the script's header names."""
    text = script.read_text(encoding="utf-8")
    out = Outcome(script.name)
    out.findings += vocabulary(text)
    path = os.pathsep.join(str(p) for p in [plain, *sites])
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
           "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
    names = sorted({name for _, name in imported(text)} - set(sys.stdlib_module_names))
    found = subprocess.run([python, "-I", "-c", _FIND.format(sep=os.pathsep), path, *names], capture_output=True,
                           text=True, env=env, timeout=120)
    if found.returncode != 0:
        out.findings.append(f"the import check did not run: {found.stderr.strip()[-300:]}")
    missing = set(found.stdout.split())
    out.findings += [f"line {no}: imports {name}, which a plain environment does not have"
                     for no, name in imported(text) if name in missing]
    with tempfile.TemporaryDirectory(prefix="attached-") as tmp:
        work = Path(tmp)
        (work / script.name).write_text(text, encoding="utf-8")
        wrapper = work / ".run.py"
        wrapper.write_text(_WRAPPER.format(sep=os.pathsep), encoding="utf-8")
        runs = [("--help", path, [script.name, "--help"])]
        for step in steps(text):
            if not step.cpu:
                continue
            if step.patched and patched is None:
                out.findings.append(f"step {step.number} ({step.build}) runs with the change: no patched tree")
                continue
            tree = patched if step.patched else plain
            argv = shlex.split(step.command.replace("$RELEASED_SITE", str(plain)))
            if argv[:1] != ["python"]:
                out.findings.append(f"step {step.number}: not a python command: {step.command}")
                continue
            runs.append((f"step {step.number}", os.pathsep.join(str(p) for p in [tree, *sites]), argv[1:]))
        # -I ignores PYTHON* variables: the bytecode goes to the harness's cache by option, never into the trees
        # (a .pyc beside the base's sources makes its cache entry differ from the pinned commit)
        prefix = sys.pycache_prefix
        bytecode = ["-X", f"pycache_prefix={prefix}"] if prefix else ["-B"]
        rank_bytecode = {"PYTHONPYCACHEPREFIX": prefix} if prefix else {"PYTHONDONTWRITEBYTECODE": "1"}
        for what, where, argv in runs:
            if argv[:2] == ["-m", "torch.distributed.run"]:
                # the launcher starts the script's ranks as plain `python script`: they find the tree by PYTHONPATH
                # (the launcher itself runs isolated)
                cmd = [python, "-I", *bytecode, *argv]
                step_env = dict(env, PYTHONPATH=where, OMP_NUM_THREADS="1", **rank_bytecode)
            else:
                cmd = [python, "-I", *bytecode, str(wrapper), where, *argv]
                step_env = env
            started = time.monotonic()
            try:
                proc = subprocess.run(cmd, cwd=work, env=step_env, capture_output=True, text=True, errors="replace",
                                      timeout=timeout_s)
            except subprocess.TimeoutExpired:
                out.findings.append(f"{what}: still running after {timeout_s} s")
                continue
            out.ran.append((what, time.monotonic() - started))
            if proc.returncode != 0:
                tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
                out.findings.append(f"{what} ({' '.join(argv)}) exited {proc.returncode}: " + " | ".join(tail))
    return out


def check_pack(ctx, pack, docs_dir: Path, timeout_s: int = 600) -> Outcome | None:
    """``run_script`` on the script ``docs_dir`` holds for ``pack`` (None: the pack attaches none), against the
    filing base's tree from ``ctx`` (harness.lane.context.Context) and, for the steps with the change, that tree
    with the series for the base applied."""
    from harness.filing.reproducer import script_name
    from harness.lane import runtime, series
    from harness.lane.lanes import obtain_build

    if not pack.reproducer:
        return None
    script = docs_dir / script_name(pack)
    if not script.is_file():
        return Outcome(script.name, [f"{script} is missing: run harness body --all-docs"])
    manifest = ctx.manifest(pack.target)
    base_name = pack.filing_base or manifest.filing_base or pack.base or manifest.default_base
    base = manifest.base(base_name)
    checkout = ctx.materialize(manifest, base_name)
    patches = series.series_for(ctx.tracking, ctx.root, pack, base_name)
    patched = series.apply(checkout, patches, ctx.store).path if patches else None
    # the CPU steps run what the CPU lanes ran: their other upstream builds (a GPU lane's, such as 11's mamba-ssm
    # for its Mamba layers, is the GPU steps' need)
    lanes = [lane for lane in pack.lanes if lane.base == base_name and not lane.minimal and not lane.suite
             and pack.lane_requires(lane) != "cuda"]
    extras = sorted({b for lane in lanes for b in lane.extra_builds})
    others = [(ctx.manifest(t), b) for t, b in extras]
    sites = [obtain_build(ctx, other, other.base(b), [], f"{other.target} {b}").site for other, b in others]
    reqs = runtime.combine([(f"{manifest.target} {base_name}", base.runtime_requires)]
                           + [(f"{other.target} {b}", other.base(b).runtime_requires) for other, b in others])
    site = runtime.ensure_requirements(reqs, f"pack {pack.id} attached script", ctx.store, ctx.python)
    return run_script(script, ctx.python, checkout.path, patched, [*sites, *([site] if site else [])], timeout_s)
