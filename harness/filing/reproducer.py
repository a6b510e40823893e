"""The self-contained reproducer that goes with a body (``harness/standalone.py`` amalgamates it) and the
body's section that inlines or links it."""

from __future__ import annotations

import ast
import re
import shlex
import textwrap
from pathlib import Path

from harness import pins, standalone
from harness.filing.parts import base_label, is_release, unchanged_label
from harness.tracking import Pack

PLACEHOLDER = "@@REPRODUCER_URL@@"  # replaced by the gist URL when the gh command runs


def script_name(pack: Pack) -> str:
    stem = Path(pack.reproducer or "reproducer.py").stem
    rest = re.sub(r"^(?:pack|contract)\d+_?", "", stem)
    return f"repro_{rest or pack.target.replace('-', '_')}.py"


def _runs(manifest: pins.Manifest, pack: Pack, base_name: str, name: str, change_name: str) -> list[str]:
    """The commands of the header: one per lane on the filed base, with the environment the harness sets."""
    lanes = [lane for lane in pack.lanes if lane.base == base_name]
    shared = len(lanes) > 1
    out = []
    for i, lane in enumerate(lanes, 1):
        env = [f"HARNESS_LANE={lane.name}", f"HARNESS_PATCHED={1 if lane.patched else 0}"]
        if shared:
            env.append("HARNESS_RUN_DIR=./repro-run")
        if lane.with_baseline:
            env.append("HARNESS_BASELINE_SITE=$RELEASED_SITE")
        launch = "python" if lane.nproc == 1 else f"python -m torch.distributed.run --standalone " \
                                                 f"--nproc_per_node={lane.nproc}"
        base = manifest.bases[base_name]
        build = (f"{base_label(manifest, base)} with {change_name}" if lane.patched
                 else unchanged_label(manifest, base)) \
            + (" (CUDA GPU)" if pack.lane_requires(lane) == "cuda" else " (CPU is enough)")
        cmd = " ".join([*env, launch, name, *map(shlex.quote, lane.args)])
        out.append(f"{i}. {build}:\n       {cmd}")
    return out


def reproducer_script(root: Path, manifest: pins.Manifest, pack: Pack, base_name: str, title: str,
                      change_name: str) -> tuple[str, str] | None:
    """(file name, text) of the self-contained reproducer, or None for a pack without one."""
    if not pack.reproducer:
        return None
    path = root / pack.reproducer
    name = script_name(pack)
    original = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    needs = [f"{manifest.distribution} (the package under test) importable"]
    if re.search(r"^\s*(?:import|from) torch\b", path.read_text(encoding="utf-8"), re.M):
        needs.append("torch")
    lanes = [lane for lane in pack.lanes if lane.base == base_name]
    if any(pack.lane_requires(lane) == "cuda" for lane in lanes):
        needs.append("a CUDA GPU")
    for target, extra in sorted({b for lane in lanes for b in lane.extra_builds}):
        other = pins.load_manifest(root, target)
        needs.append(f"{other.distribution} {other.base(extra).version}")
    runtime = manifest.bases[base_name].runtime_requires
    runs = _runs(manifest, pack, base_name, name, change_name)
    wrap = textwrap.TextWrapper(width=100)
    header = [f"{title}: a self-contained reproducer.", "",
              *wrap.wrap("Needs " + ", ".join(needs) + (f", with {', '.join(runtime)}" if runtime else "")
                         + ". Nothing else: every helper it uses is copied in below."), ""]
    if runs:
        header += ["Run it once per build, from one directory:", "", *[f"  {r}" for r in runs], ""]
        if any(lane.with_baseline for lane in lanes):
            base = manifest.bases[base_name]
            how = (f"'pip install --no-deps --target DIR {manifest.distribution}=={base.version}'" if is_release(base)
                   else f"'pip install --no-deps --target DIR .' in a checkout of {base_label(manifest, base)}")
            header += wrap.wrap(f"RELEASED_SITE is a directory holding {unchanged_label(manifest, base)}, e.g. made "
                                f"with {how}: the run compares the changed function with that one in one "
                                "process.") + [""]
        header += ["Each run prints one JSON line per measurement and ends with a line naming what it observed."]
    header += ["", "Method notes:", "", original]
    text = standalone.amalgamate(path, [root / "repros"], "\n".join(header))
    return name, text


def _reproducer_section(script: tuple[str, str] | None, inline: bool, needs_gpu: bool) -> str:
    if script is None:
        return "No reproducer yet."
    name, text = script
    needs = ["the package under test"] + (["torch"] if re.search(r"^\s*(?:import|from) torch\b", text, re.M) else []) \
        + (["a CUDA GPU"] if needs_gpu else [])
    needs_text = ", ".join(needs[:-1]) + " and " + needs[-1] if len(needs) > 1 else needs[0]
    rest = (f"is a single file: it needs only {needs_text}; its docstring gives the command for the published "
            "release and for the change.")
    if inline:
        return f"`{name}` {rest}\n\n```python\n{text.rstrip()}\n```"
    return f"[`{name}`]({PLACEHOLDER}) ({len(text.splitlines())} lines) {rest}"

