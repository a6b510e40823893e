"""``harness order``: the landing order, plus the checks that keep depends_on honest (``--json``)."""

from __future__ import annotations

import json

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.errors import Exit, worst
from harness.filing import landing

JSON_SCHEMA = 1


def register(sub) -> None:
    p = sub.add_parser("order", help="landing order across targets; check each series applies with only its "
                                      "declared dependencies, and that overlapping packs are ordered")
    p.add_argument("--no-apply", action="store_true",
                   help="skip applying series (no artefact download); only the graph and hunk overlaps")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout (keys: docs/cli.md)")
    _args.artifacts(p)
    _args.output_format(p)
    _args.common(p)


def main(args) -> int:
    ctx = context(args)  # loading rejects unknown dependencies and cycles
    order = landing.landing_order(ctx.tracking)
    checks = [] if args.no_apply else landing.apply_checks(ctx)
    found = landing.overlaps(ctx.root, ctx.tracking)
    codes = [Exit.OK] + [Exit.APPLY for c in checks if c.error] + [Exit.USAGE for _ in found]
    if args.json:
        data = {"schema": JSON_SCHEMA,
                "order": [{"position": i, "id": p.id, "target": p.target, "kind": p.kind, "class": p.cls,
                           "state": p.state, "depends_on": list(p.depends_on), "title": p.title}
                          for i, p in enumerate(order, 1)],
                "apply_checks": None if args.no_apply else [
                    {"pack": c.pack, "target": c.target, "base": c.base, "patches": c.patches, "ok": c.error is None,
                     "error": c.error} for c in checks],
                "overlaps": [{"target": ov.target, "path": ov.path,
                              "a": dict(zip(("pack", "patch", "first", "last"), ov.a, strict=True)),
                              "b": dict(zip(("pack", "patch", "first", "last"), ov.b, strict=True))} for ov in found]}
        ui.out.file.write(json.dumps(data, indent=2) + "\n")
        return int(worst(codes))
    ui.tabular(("#", "pack", "target", "kind", "class", "state", "depends on", "title"),
               [(str(i), p.id, p.target, p.kind, p.cls or "-", p.state, ", ".join(p.depends_on) or "-", p.title)
                for i, p in enumerate(order, 1)], fmt=getattr(args, "format", "auto"), title="landing order")
    if ui.plain(getattr(args, "format", "auto")):
        # piped: the checks as tab-separated rows too (a header of their own), never space-aligned prose between
        rows = [("apply", c.pack, c.target, c.base, "FAIL" if c.error else "ok",
                 c.error or f"{c.patches} patch(es) apply with only its declared dependencies") for c in checks]
        rows += [("overlap", ov.a[0], ov.target, "-", "FAIL", f"{ov.describe()}; add a depends_on") for ov in found]
        if not found:
            rows.append(("overlap", "-", "-", "-", "ok", "no two unordered packs touch the same lines"))
        ui.tabular(("check", "pack", "target", "base", "result", "detail"), rows, fmt="plain")
        return int(worst(codes))
    for check in checks:
        if check.error:
            ui.data(f"FAIL pack {check.pack}: series does not apply on {check.target} {check.base} with only its "
                    f"declared dependencies: {check.error}")
        else:
            ui.data(f"ok   pack {check.pack}: {check.patches} patch(es) apply on {check.target} {check.base} with "
                    "only its declared dependencies")
    for ov in found:
        ui.data(f"OVERLAP {ov.describe()}; add a depends_on")
    if not found:
        ui.data("no two unordered packs touch the same lines")
    return int(worst(codes))
