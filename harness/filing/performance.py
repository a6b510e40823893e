"""A pack's performance claims, each resolved against the receipt it rests on.

``pack.toml's [[performance]]`` rows name a lane and a figure (like evidence rows, see
``tracking.EvidenceRow``); nothing numeric is typed in tracking.toml. A claim is measured on
its lane's base, so the base -- a release artefact or an upstream commit -- comes from the
lane, and the value from that lane's latest receipt. A claim is *current* when that receipt
passed and still matches today's pin, series, reproducer and helper modules (the same test
readiness applies to a filing's lanes): a claim whose receipt went stale is shown, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import ConfigError
from harness.filing import readiness
from harness.filing.evidence import resolve_row
from harness.lane import receipts
from harness.lane.tracking import Pack


@dataclass(frozen=True)
class Claim:
    pack: str
    lane: str
    base: str  # the lane's base name
    base_pin: str | None  # that base's artefact sha256 or full commit id (None: not a base of the manifest)
    label: str
    result: str
    problem: str | None  # why no value could be read (no receipt, no such figure, a bad placeholder)
    stale: str | None  # why the receipt no longer counts for today's lane, None when current
    receipt: str | None  # repository-relative path of the receipt.json
    host: str | None
    started: str | None

    @property
    def current(self) -> bool:
        """The value was read and its receipt still counts for today's lane."""
        return self.stale is None and self.problem is None

    def as_json(self) -> dict:
        return {"pack": self.pack, "lane": self.lane, "base": self.base, "base_pin": self.base_pin,
                "label": self.label, "result": self.result, "problem": self.problem, "current": self.current,
                "stale": self.stale, "receipt": self.receipt, "host": self.host, "started": self.started}


def claims(ctx, pack: Pack) -> list[Claim]:
    """Every performance row of ``pack`` (``ctx``: harness.lane.context.Context), resolved."""
    root = ctx.root
    manifest = ctx.manifest(pack.target)
    lanes = {lane.name: lane for lane in pack.lanes}
    series_memo: dict[str, list | str] = {}
    latest = receipts.latest_by_lane(root, pack.target, pack.id)
    out = []
    for row in pack.performance:
        lane = lanes[row.lane]  # tracking.load checked that the row names a lane of the pack
        base = manifest.bases.get(lane.base)
        rec = latest.get(lane.name)
        label, result, problem = resolve_row(row, rec)
        stale: str | None = None
        if base is None:
            stale = f"lane base '{lane.base}' is not a base of {manifest.path.name}"
        else:
            if lane.base not in series_memo:
                try:
                    series_memo[lane.base] = readiness.series_at(root, ctx.tracking, pack, lane.base)
                except ConfigError as exc:
                    series_memo[lane.base] = str(exc)
            patches = series_memo[lane.base]
            if isinstance(patches, str):
                stale = patches
            else:
                found = readiness.lane_problem(root, pack, lane, rec, base, patches, manifest)
                stale = None if found is None else str(found)
        path = rec.path if rec is not None else None
        out.append(Claim(
            pack=pack.id, lane=lane.name, base=lane.base, base_pin=base.pin if base is not None else None,
            label=label, result=result, problem=problem, stale=stale,
            receipt=receipts.display_path(path, root) if path is not None else None,
            host=receipts.host_description(rec) if rec is not None else None,
            started=rec.started if rec is not None else None,
        ))
    return out
