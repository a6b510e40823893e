"""Landing order and filing waves across targets.

``landing_order`` is the dependency graph (validated by tracking.py: no cycles,
no unknown packs) in topological order, ties broken by target then pack id.
``apply_checks`` applies each pack's series on its base with only its declared
dependencies' series underneath, so a pack that silently needs another pack's
patch fails and is named. ``overlaps`` finds two packs whose hunks touch the
same lines of the same file of one target without a ``depends_on`` ordering
them. ``plan_waves`` groups packs that can be filed into waves of 2-4 packs per
target repository, in the order the articles give: crash fixes, comments on open
threads, other fixes, refactors, bug reports without a fix.
"""

from __future__ import annotations

import heapq
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.base import ui
from harness.errors import HarnessError
from harness.filing.readiness import DONE_STATES, NOT_FILED
from harness.lane import receipts, series
from harness.lane.context import Context
from harness.lane.tracking import Pack, Tracking


def landing_order(tracking: Tracking) -> list[Pack]:
    """Dependencies first; among packs free to go, by (target, id)."""
    packs = tracking.packs
    waiting = {pid: set(p.depends_on) for pid, p in packs.items()}
    ready = [(p.target, pid) for pid, p in packs.items() if not waiting[pid]]
    heapq.heapify(ready)
    order: list[Pack] = []
    while ready:
        _, pid = heapq.heappop(ready)
        order.append(packs[pid])
        for other, deps in waiting.items():
            if pid in deps:
                deps.discard(pid)
                if not deps:
                    heapq.heappush(ready, (packs[other].target, other))
    return order  # complete: tracking.py already rejected cycles


def ordered(tracking: Tracking, a: str, b: str) -> bool:
    """Whether depends_on (transitively) puts one of the two packs before the other."""
    return a in {p.id for p in tracking.closure(b)} or b in {p.id for p in tracking.closure(a)}


# ---------------------------------------------------------------------------------------------- series checks

@dataclass(frozen=True)
class ApplyCheck:
    pack: str
    target: str
    base: str
    patches: int
    error: str | None  # None: the series applied


def bases_to_check(ctx: Context, pack: Pack) -> list[str]:
    """The bases a pack's series declares: its own base (top-level series), every base it was ported to
    (``patches/<target>/<pack>/<base>/``) and the bases of its patched lanes."""
    manifest = ctx.manifest(pack.target)
    declared = {pack.base or manifest.default_base, *series.ported_bases(ctx.root, pack.target, pack.id)}
    return sorted(declared | {lane.base for lane in pack.lanes if lane.patched})


def apply_checks(ctx: Context, packs: list[Pack] | None = None, keep_going: bool = True) -> list[ApplyCheck]:
    """Apply every pack's series (declared dependencies underneath) on each base it must apply on.

    A series that applied is remembered in the store under the key of its base's pin and its patches'
    sha256s (``series.series_key``, as patched trees and builds are): the same check later is answered
    without materializing or applying anything. A failure is never remembered.
    """
    out = []
    todo = [(pack, base) for pack in packs or list(ctx.tracking.packs.values())
            if series.load_series(ctx.root, pack.target, pack.id) for base in bases_to_check(ctx, pack)]
    for n, (pack, base) in enumerate(todo, 1):
        manifest = ctx.manifest(pack.target)
        patches = series.series_for(ctx.tracking, ctx.root, pack, base)
        memo = ctx.store.area("apply-ok") / f"{series.series_key(pack.target, manifest.base(base).pin, patches)}.json"
        where = f"[{n}/{len(todo)}] pack {pack.id} on {pack.target} {base}"
        error = None
        if memo.is_file():
            ui.note(f"{where}: applies (not applied now; remembered in {memo.parent} from an earlier check of the "
                    "same pin and patches, by any clone on this host)")
        else:
            try:
                with ui.status(f"{where}: applying {len(patches)} patch(es)"):
                    checkout = ctx.materialize(manifest, base)
                    with tempfile.TemporaryDirectory(prefix="patchlane-check-") as tmp:
                        series.check_applies(checkout, patches, Path(tmp) / "tree")
                _remember(memo, pack, base, patches)
            except HarnessError as exc:
                if not keep_going:
                    raise
                error = str(exc)
        out.append(ApplyCheck(pack.id, pack.target, base, len(patches), error))
    return out


def _remember(memo: Path, pack: Pack, base: str, patches: list[series.Patch]) -> None:
    tmp = memo.with_name(f".tmp-{os.getpid()}-{memo.name}")
    tmp.write_text(json.dumps({"pack": pack.id, "target": pack.target, "base": base,
                               "patches": [f"{p.pack}/{p.name} {p.sha256}" for p in patches],
                               "checked_at": receipts.utc_now().isoformat().replace("+00:00", "Z")}))
    tmp.replace(memo)


@dataclass(frozen=True)
class Overlap:
    target: str
    path: str
    a: tuple[str, str, int, int]  # pack, patch file, first line, last line (in the base the patch was cut from)
    b: tuple[str, str, int, int]

    def describe(self) -> str:
        (pa, fa, sa, ea), (pb, fb, sb, eb) = self.a, self.b
        return (f"packs {pa} and {pb} both change {self.target} {self.path} (pack {pa} {fa} lines {sa}-{ea}, "
                f"pack {pb} {fb} lines {sb}-{eb}) but depends_on orders neither before the other")


def overlaps(root: Path, tracking: Tracking) -> list[Overlap]:
    """Hunks of two unordered packs that touch overlapping line ranges of the same file and target."""
    spans: dict[tuple[str, str], list[tuple[str, str, int, int]]] = {}
    for pack in tracking.packs.values():
        for patch in series.load_series(root, pack.target, pack.id):
            for h in patch.hunks:
                first, last = h.old_range
                spans.setdefault((pack.target, h.path), []).append((pack.id, patch.name, first, last))
    found: dict[tuple[str, str, str, str], Overlap] = {}
    for (target, path), items in sorted(spans.items()):
        for i, a in enumerate(items):
            for b in items[i + 1:]:
                if a[0] == b[0] or a[3] < b[2] or b[3] < a[2] or ordered(tracking, a[0], b[0]):
                    continue
                first_id, second_id = sorted((a[0], b[0]))
                key = (target, path, first_id, second_id)
                found.setdefault(key, Overlap(target, path, *sorted((a, b))))
    return list(found.values())


# ---------------------------------------------------------------------------------------------- waves

# The articles' filing order; a pack's category is its rank here.
CATEGORIES = ("crash fix", "comment on an open thread", "other fix", "refactor", "bug report (no fix)")
NOT_FILED_KINDS = ("regression-guard", "contract")
MIN_WAVE, MAX_WAVE = 2, 4


def category(pack: Pack) -> int:
    if pack.kind == "bug-report":
        return 4
    if pack.kind == "comment":
        return 1
    if pack.cls == "crash-fix":
        return 0
    if pack.cls == "refactor":
        return 3
    return 2


@dataclass(frozen=True)
class Wave:
    number: int
    target: str
    packs: tuple[Pack, ...]
    note: str = ""


@dataclass(frozen=True)
class Skipped:
    pack: Pack
    reason: str


def plan_waves(tracking: Tracking) -> tuple[list[Wave], list[Skipped]]:
    order = landing_order(tracking)
    skipped: dict[str, str] = {}
    for pack in order:  # dependencies come first, so their verdict is known
        if pack.state in NOT_FILED:
            skipped[pack.id] = f"{pack.state}: " + (pack.state_reason or NOT_FILED[pack.state])
        elif pack.kind in NOT_FILED_KINDS:
            skipped[pack.id] = f"kind {pack.kind}: nothing to file"
        else:
            gating = [d for d in pack.depends_on if d in skipped and tracking.packs[d].state not in DONE_STATES]
            if gating:
                skipped[pack.id] = "depends on " + ", ".join(
                    f"{d} ({tracking.packs[d].state})" for d in gating) + ", which is not being filed"
    # A pack never lands in an earlier category than its dependencies.
    rank: dict[str, int] = {}
    for pack in order:
        if pack.id not in skipped:
            rank[pack.id] = max([category(pack)] + [rank[d] for d in pack.depends_on if d in rank])
    position = {p.id: i for i, p in enumerate(order)}
    by_target: dict[str, list[Pack]] = {}
    for pack in sorted((p for p in order if p.id in rank), key=lambda p: (rank[p.id], position[p.id])):
        by_target.setdefault(pack.target, []).append(pack)
    groups: list[tuple[str, list[Pack]]] = []
    for target, packs in by_target.items():
        groups += [(target, chunk) for chunk in _chunks(packs)]
    waves = _order_waves(tracking, groups, rank)
    return waves, [Skipped(tracking.packs[pid], why) for pid, why in sorted(skipped.items())]


def _chunks(packs: list[Pack]) -> list[list[Pack]]:
    """Consecutive groups of at most MAX_WAVE, never leaving a lone pack behind when avoidable."""
    n = len(packs)
    count = -(-n // MAX_WAVE)
    sizes = [n // count + (1 if i < n % count else 0) for i in range(count)]
    out, i = [], 0
    for size in sizes:
        out.append(packs[i:i + size])
        i += size
    return out


def _order_waves(tracking: Tracking, groups: list[tuple[str, list[Pack]]], rank: dict[str, int]) -> list[Wave]:
    """Waves by (earliest category, target), each after every wave holding one of its dependencies."""
    home = {p.id: gi for gi, (_, packs) in enumerate(groups) for p in packs}
    needs = {gi: {home[d] for p in packs for d in p.depends_on if d in home} - {gi}
             for gi, (_, packs) in enumerate(groups)}
    key = {gi: (min(rank[p.id] for p in packs), target, packs[0].id) for gi, (target, packs) in enumerate(groups)}
    done: list[int] = []
    pending = set(key)
    while pending:
        free = [g for g in pending if needs[g] <= set(done)] or list(pending)  # mutual needs: fall back to key
        gi = min(free, key=key.__getitem__)
        done.append(gi)
        pending.discard(gi)
    waves = []
    for n, gi in enumerate(done, 1):
        target, packs = groups[gi]
        note = "" if len(packs) >= MIN_WAVE else f"only one pack of {target} can be filed now"
        waves.append(Wave(n, target, tuple(packs), note))
    return waves
