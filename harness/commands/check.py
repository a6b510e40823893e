"""``harness check``: validate everything a run relies on; optionally apply every series."""

from __future__ import annotations

from harness.base import ui
from harness.base.tomlutil import load_document
from harness.commands import _args
from harness.commands._context import context, find_root
from harness.errors import ConfigError
from harness.filing import landing
from harness.lane import lanes, series, suite, tracking
from harness.lane.tracking import layout
from harness.upstream import pins


def register(sub) -> None:
    p = sub.add_parser("check", help="validate tracking.toml, manifests and patch headers; with --apply, "
                                      "apply every series on its bases")
    p.add_argument("--apply", action="store_true", help="also apply every pack's series on each base its lanes use")
    _args.artifacts(p)
    _args.common(p)


def main(args) -> int:
    root = find_root(getattr(args, "root", None))
    unknown = unknown_keys(root)  # every one, before loading refuses the first
    if unknown:
        for line in unknown[1:]:
            ui.warn(tracking.located(line, root))
        raise ConfigError(f"{len(unknown)} unknown key(s), the first: {tracking.located(unknown[0], root)}",
                          hint="every command refuses a misspelt key: fix or remove it")
    ctx = context(args)  # loading validates tracking.toml and the manifests it names
    for target in pins.list_targets(ctx.root):
        pins.load_manifest(ctx.root, target)
    committed = _committed_pack_files(ctx.root)
    for pack in ctx.tracking.packs.values():  # a deleted pack.toml leaves a pack that declares nothing: no lanes
        if pack.declared_in in committed and not (ctx.root / pack.declared_in).is_file():
            raise ConfigError(f"pack {pack.id}: {pack.declared_in} is committed but missing here, so the pack "
                              "declares nothing (no files, reproducer or lanes)",
                              hint=f"git checkout -- {pack.declared_in} (deleted by mistake?), or 'git rm' it "
                                   "with the pack")
    n_patches = n_ported = 0
    ported_bases: set[str] = set()
    for pack in ctx.tracking.packs.values():
        loaded = series.load_series(ctx.root, pack.target, pack.id)  # parses headers
        patched = [lane.name for lane in pack.lanes if lane.patched]
        where = series.series_dir(ctx.root, pack.target, pack.id)
        if patched and not loaded and not where.is_dir():  # gone (a regen killed mid-swap, a bad checkout)
            raise ConfigError(f"pack {pack.id}: lane(s) {', '.join(patched)} run the patched build, but "
                              f"{where} is missing",
                              hint="put the pack's patches back (git checkout -- patches/, or 'harness regen "
                                   f"{pack.id}' after a killed regen), or make those lanes unpatched")
        if patched and not loaded:  # a pack just scaffolded by 'harness new': its series is still to be written
            ui.warn(f"pack {pack.id}: {where} holds no patch yet; lane(s) {', '.join(patched)} cannot run until "
                    "it does ('harness edit', docs/adding-a-pack.md)")
        n_patches += len(loaded)
        # the ported series (patches/<target>/<pack>/<base>/: main, dev) are patch files too: parse and count them
        top = series.series_dir(ctx.root, pack.target, pack.id)
        for base in sorted(d.name for d in top.iterdir() if d.is_dir()) if top.is_dir() else []:
            ported = series.load_series(ctx.root, pack.target, pack.id, base)
            n_ported += len(ported)
            ported_bases.add(base)
    for pid, keys in layout.inline_declarations(ctx.tracking.doc).items():
        ui.warn(f"tracking.toml [packs.{pid}] holds what the pack declares ({', '.join(keys)}): the single-file "
                f"form; 'harness migrate' moves it to {ctx.tracking.packs[pid].declared_in} "
                "(docs/layout.md)")
    ui.data(f"tracking.toml: {len(ctx.tracking.packs)} packs; manifests: {len(pins.list_targets(ctx.root))}; "
            f"patch files: {n_patches + n_ported} with valid Upstream-Status ({n_patches} in the packs' own series, "
            f"{n_ported} in series ported to {', '.join(sorted(ported_bases)) or 'no other base'})")
    recorded = suite_selections(ctx)  # schema and reasons: a file that breaks them raises here
    if not args.apply:
        return 0
    for check in landing.apply_checks(ctx, keep_going=False):  # the first failure raises (exit 5)
        ui.data(f"pack {check.pack}: {check.patches} patch(es) apply on {check.target} {check.base}")
    for sel in recorded:  # derived again from the tree: nobody drops a file silently
        pack = ctx.tracking.pack(sel.pack)
        source = lanes.suite_source(ctx, pack, sel.base)
        diffs = suite.differences(sel, source.derive(), [p.name for p in source.own])
        if diffs:
            raise suite.SuiteDrift(f"{sel.path}: " + "; ".join(diffs),
                                   hint=f"harness suite select {sel.pack} --base {sel.base} (and commit the file)")
        ui.data(f"pack {sel.pack}: suite selection at {sel.base} matches its derivation ({len(sel.files)} file(s))")
    return 0


def suite_selections(ctx) -> list[suite.Selection]:
    """Every recorded suite selection (suites/NN/BASE.toml), loaded: closed schema, a reason per exclusion, and
    the pack and base it names match where it lies."""
    out = []
    top = ctx.root / suite.SUITES_DIR
    for path in sorted(top.glob("*/*.toml")) if top.is_dir() else []:
        sel = suite.load(path)
        if (sel.pack, sel.base) != (path.parent.name, path.stem):
            raise suite.SuiteError(f"{path}: names pack {sel.pack} at {sel.base}; it lies where pack "
                                   f"{path.parent.name} at {path.stem} belongs")
        ctx.tracking.pack(sel.pack)
        out.append(sel)
    return out


def _committed_pack_files(root) -> set[str]:
    """The pack.toml files git's index holds (none outside a git checkout): one deleted from the working tree is a
    pack that silently declares nothing, so check names it."""
    from harness.upstream import git

    done = git.call(root, "ls-files", "-z", "--", "patches/*/*/pack.toml")
    return {p for p in done.stdout.split("\0") if p} if done.ok else set()


def unknown_keys(root) -> list[str]:
    """Every key of tracking.toml and the manifests that their schemas do not declare (file, table, key)."""
    path = root / "tracking.toml"
    lines = tracking.unknown_keys(path, load_document(path), root)
    lines = [line for line in lines if "unknown" in line]  # a missing 'schema' line is a note, not a key
    for target in pins.list_targets(root):
        mpath = pins.manifest_path(root, target)
        lines += pins.manifest_unknown_keys(mpath, load_document(mpath))
    return lines
