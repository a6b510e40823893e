"""``harness stack build|check|diff``: the package a training image installs, and whether its packs agree."""

from __future__ import annotations

import json
from pathlib import Path

from harness.base import ui
from harness.base.hashing import sha256_file
from harness.commands import _args
from harness.commands._context import context
from harness.errors import ConfigError, Exit
from harness.host import stack


def register(sub) -> None:
    p = sub.add_parser(
        "stack", help="a target's carried packs built as one package (the training image's), checked together",
        description="build: every carried pack of TARGET (not absorbed, retired or dropped) whose series applies "
                    "on the base, in landing order, built once as a wheel whose version names the stack "
                    "(+pl.<hash>), with a manifest inside it and beside it; the same inputs give the same bytes. "
                    "check: each stacked pack's patched lanes run against that build; a lane that fails there runs "
                    "alone too, and one that passes alone is a composition failure named with the packs whose "
                    "files it shares (exit 1). diff: what changes between two stack manifests.")
    acts = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, what in (("build", "build the stack's wheel and manifest"),
                       ("check", "run the stacked packs' patched lanes on the stack build")):
        q = acts.add_parser(name, help=what)
        q.add_argument("target")
        q.add_argument("--base", default=None, help="the base (default: the target's default base)")
        q.add_argument("--json", action="store_true", help="one JSON document on stdout")
        if name == "build":
            q.add_argument("-o", "--output", type=_args.path, default=Path("dist/stack"),
                           help="where the wheel and its manifest go (default: dist/stack)")
            q.add_argument("--index", type=_args.path, default=None, metavar="DIR",
                           help="also add the wheel to a PEP 503 index at DIR (pip/uv --index-url file://DIR)")
        else:
            q.add_argument("--lane", action="append", default=[], metavar="NAME",
                           help="only lanes of this name (repeatable); default every patched lane on the base")
            q.add_argument("--cpu", action="store_true", help="only lanes that need no GPU")
        _args.source(q)
        _args.common(q)
    q = acts.add_parser("diff", help="what changes between two stack manifests (packs in, out, changed)")
    q.add_argument("a", type=_args.path)
    q.add_argument("b", type=_args.path)
    q.add_argument("--json", action="store_true", help="one JSON document on stdout")
    _args.common(q)


def main(args) -> int:
    if args.action == "diff":
        return _diff(args)
    ctx = context(args)
    composed = stack.compose(ctx, args.target, args.base)
    for out in composed.left_out:
        ui.info(f"left out: pack {out.pack}: {out.why}")
    if args.action == "build":
        wheel, doc = stack.build(ctx, composed, args.output)
        index = stack.write_index(wheel, args.index, ctx.manifest(args.target).distribution) if args.index else None
        digest = sha256_file(wheel)
        if args.json:
            ui.data(json.dumps({"wheel": str(wheel), "sha256": digest, "index": str(index) if index else None,
                                "manifest": doc}, indent=1, sort_keys=True))
        else:
            ui.data(str(wheel))
            ui.info(f"stack {doc['version']}: {', '.join(p['id'] for p in doc['packs'])} "
                    f"({len(composed.patches)} patch(es)); sha256 {digest}")
        return 0
    wanted = set(args.lane)

    def chosen(pack, lane) -> bool:
        return (not wanted or lane.name in wanted) and (not args.cpu or pack.lane_requires(lane) == "cpu")

    checks = stack.check(ctx, composed, chosen)
    if args.json:
        ui.data(json.dumps({"target": composed.target, "base": composed.base, "label": composed.label,
                            "packs": [p.id for p in composed.packs],
                            "left_out": [{"pack": o.pack, "why": o.why} for o in composed.left_out],
                            "lanes": [{"pack": c.pack, "lane": c.lane, "stacked": c.stacked, "alone": c.alone,
                                       "composition_failure": c.composition_failure, "meets": c.meets,
                                       "reason": c.reason or None}
                                      for c in checks]}, indent=1))
    else:
        for c in checks:
            line = f"{c.pack}\t{c.lane}\t{c.stacked}"
            if c.composition_failure:
                line += f"\tpasses alone, fails in the stack{' (meets ' + c.meets + ')' if c.meets else ''}"
            elif c.alone is not None:
                line += f"\talone: {c.alone}"
            elif c.reason:
                line += f"\tstack = false: {c.reason}"
            ui.data(line)
    return int(stack.exit_of(checks))


def _diff(args) -> int:
    docs = []
    for path in (args.a, args.b):
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not a stack manifest: {exc}") from None
        if not isinstance(doc, dict) or doc.get("kind") != "patchlane-stack":
            raise ConfigError(f"{path}: not a stack manifest (kind is not patchlane-stack)")
        docs.append(doc)
    found = stack.diff(*docs)
    if args.json:
        ui.data(json.dumps(found, indent=1))
    else:
        ui.data(f"{found['from']} -> {found['to']}")
        for key in ("added", "removed", "changed", "rerun"):
            ui.data(f"{key}\t{', '.join(found[key]) or '-'}")
    return int(Exit.OK)
