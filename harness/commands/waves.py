"""``harness waves``: proposed filing waves of 2-4 packs per target repository (``--json`` for machines)."""

from __future__ import annotations

import json

from harness.base import ui
from harness.commands import _args
from harness.commands._context import context
from harness.filing import landing, readiness

JSON_SCHEMA = 1


def register(sub) -> None:
    p = sub.add_parser("waves", help="propose filing waves (2-4 packs per target repo): crash fixes, comments "
                                      "on open threads, other fixes, refactors, bug reports; says which are ready",
                       description="The plan orders every pack that may be filed; the 'ready' column says whether "
                                   "it can be filed now (readiness as in 'harness status', including the check that "
                                   "its series applies to the base it is filed against).")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout (keys: docs/cli.md)")
    p.add_argument("--no-apply", action="store_true",
                   help="do not materialize bases for the apply check; use cached results only")
    _args.artifacts(p)
    _args.output_format(p)
    _args.common(p)


def main(args) -> int:
    ctx = context(args)
    waves, skipped = landing.plan_waves(ctx.tracking)
    memo: dict = {}
    ready = {p.id: readiness.readiness(ctx, p, allow_download=not args.no_apply, _memo=memo)
             for wave in waves for p in wave.packs}
    if args.json:
        data = {"schema": JSON_SCHEMA, "waves": [{
            "number": w.number, "target": w.target, "note": w.note or None,
            "packs": [{"id": p.id, "kind": p.kind, "class": p.cls,
                       "category": landing.CATEGORIES[landing.category(p)], "depends_on": list(p.depends_on),
                       "title": p.title, "ready": ready[p.id].ready,
                       "reasons": [{"code": r.code.value, "text": r.text} for r in ready[p.id].reasons]}
                      for p in w.packs]} for w in waves],
            "left_out": [{"id": s.pack.id, "target": s.pack.target, "reason": s.reason} for s in skipped]}
        ui.out.file.write(json.dumps(data, indent=2) + "\n")
        return 0
    plain = ui.plain(args.format)
    rows: list[list] = []
    for wave in waves:
        for i, p in enumerate(wave.packs):
            r = ready[p.id]
            first = i == 0 or plain  # a plain line stands alone: every one names its wave
            verdict = ui.text("yes", "green") if r.ready else ui.text(
                f"no ({len(r.reasons)}): {r.reasons[0].text}" if plain else f"no ({len(r.reasons)})", "yellow")
            rows.append([str(wave.number) if first else "", wave.target if first else "", p.id, p.kind,
                         p.cls or "-", landing.CATEGORIES[landing.category(p)], ", ".join(p.depends_on) or "-",
                         verdict, p.title])
        if wave.note:
            note = [str(wave.number), wave.target, "", "", "", f"note: {wave.note}", "", "", ""] if plain else \
                ["", "", "", "", "", ui.text(wave.note, "dim"), "", "", ""]
            rows.append(note)
    if plain:  # the packs left out are rows too, so one grep finds a pack wherever it is
        rows += [["-", s.pack.target, s.pack.id, s.pack.kind, s.pack.cls or "-", "left out",
                  ", ".join(s.pack.depends_on) or "-", f"no: {s.reason}", s.pack.title] for s in skipped]
    ui.tabular(("wave", "target", "pack", "kind", "class", "category", "depends on", "ready", "title"), rows,
               fmt=args.format, title="filing waves")
    if skipped and not plain:
        ui.data("not in any wave:")
        for s in skipped:
            ui.data(f"  {s.pack.id} ({s.pack.target}): {s.reason}")
    not_ready = [p for p in ready.values() if not p.ready]
    if not_ready:
        ui.info("not ready yet: " + "; ".join(f"{r.pack.id}: {r.reasons[0].text}" for r in not_ready)
                + " (all reasons: harness status <pack>)")
    return 0
