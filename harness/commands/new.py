"""``harness new PACK --target T``: scaffold a pack (tracking entry, series directory, reproducer from the kit)."""

from __future__ import annotations

import subprocess
import sys

from harness.base import guard, ui
from harness.commands import _args
from harness.commands._context import context
from harness.lane import scaffold
from harness.lane.tracking import KINDS


def register(sub) -> None:
    p = sub.add_parser("new", help="scaffold a pack: tracking.toml entry, pack.toml, series directory, reproducer",
                       description="Adds [packs.NN] to tracking.toml (state planned) and patches/<target>/NN/pack.toml "
                                   "with its lanes: a bug lane "
                                   "(unpatched, expects BUG_REPRODUCED) and, for kinds that carry a patch, a fix "
                                   "lane (patched, expects FIX_VALIDATED), on the base and again on the target's "
                                   "filing base when that is another one (upstream main or dev): 4 lanes for a PR "
                                   "on mamba (bug-<base>, fix-<base>, bug-main, fix-main). Creates "
                                   "patches/<target>/NN/ and writes repros/<target>/packNN_<slug>.py from "
                                   "repros/_lane.py's kit. All or nothing. Next: write the reproducer's check, "
                                   "then 'harness edit NN' to make the series.")
    p.add_argument("pack", help="the new pack's id, e.g. 24")
    p.add_argument("--target", required=True, help="an upstream/<target>.toml, e.g. mamba")
    p.add_argument("--title", default=None, help="one line: what breaks (default: 'TODO: title')")
    p.add_argument("--kind", default="pr", choices=KINDS, help="what will be filed (default: %(default)s)")
    p.add_argument("--base", default=None, help="the base its lanes run on (default: the manifest's default_base)")
    p.add_argument("--requires", default=None, choices=("cpu", "cuda"),
                   help="what its lanes need (default: cpu where a pack of the target already runs a lane on a CPU "
                        "host, so they run here instead of being skipped; else cuda)")
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    requires = args.requires
    if requires is None:
        requires, why = scaffold.default_requires(ctx.tracking, args.target)
        ui.info(f"its lanes require {requires} ({why}; --requires chooses)")
    made = scaffold.new_pack(ctx.tracking, args.pack, args.target, args.title or "TODO: title", args.kind,
                             args.base, requires)
    ui.data(str(made.reproducer.relative_to(ctx.root)))
    ui.info(f"pack {made.pack}: [packs.{made.pack}] in tracking.toml, its lanes ({', '.join(made.lanes)}) in "
            f"{made.series_dir.relative_to(ctx.root)}/pack.toml, "
            f"{made.series_dir.relative_to(ctx.root)}/, {made.reproducer.relative_to(ctx.root)}")
    _pack_pages(ctx.root, made.pack)
    ui.info(f"next (docs/adding-a-pack.md): write check() in the reproducer, the pack's files, summary and "
            f"evidence labels in {made.series_dir.relative_to(ctx.root)}/pack.toml; 'harness edit {made.pack}' to "
            f"make the series; 'harness run "
            f"{made.pack}'; 'harness status {made.pack}' until it says ready")
    return 0


def _pack_pages(root, pack: str) -> None:
    """docs/packs/ is generated (tools/pack_pages.py --check runs in CI): write the new pack's page now."""
    tool = root / "tools" / "pack_pages.py"
    if not tool.is_file():
        return
    try:
        with ui.status(f"writing docs/packs/{pack}.md (python tools/pack_pages.py)"):
            proc = guard.run([sys.executable, str(tool)], cwd=root, timeout=600)
        why = f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}" if proc.returncode else ""
    except (OSError, subprocess.SubprocessError) as exc:
        why = str(exc)
    if why:
        ui.warn(f"tools/pack_pages.py failed ({why}); run 'python tools/pack_pages.py' before committing "
                "(CI checks the pages)")

