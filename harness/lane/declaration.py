"""A lane's whole declaration as a receipt records it: what decides what the run did, and nothing that only
schedules it.

Two receipts of a lane are evidence of the same thing only when the lane was declared the same way: its
expected sentinel, its arguments, the host it requires, its ranks, the builds it puts beside its own, the
upstream tests it selects, the base's build recipe and runtime. A receipt records this (``Receipt.declaration``)
and readiness compares it with today's (``harness.filing.readiness.lane_problem``). What only places or bounds
a run (``timeout``, ``exclusive``, ``gpu_memory_gib``) is left out: changing it changes no result.
"""

from __future__ import annotations

from typing import Any

from harness.lane.builds import RECIPE_VERSION
from harness.lane.tracking import Lane, Pack
from harness.upstream import pins

VERSION = 1  # bump when a key is added: receipts of an older version are compared on the keys both have


def of(pack: Pack, lane: Lane, manifest: pins.Manifest) -> dict[str, Any]:
    """``lane``'s declaration (JSON-ready, keys sorted when dumped)."""
    base = manifest.bases.get(lane.base)
    return {
        "version": VERSION,
        "base": lane.base,
        "patched": lane.patched,
        "expect": lane.expect,
        "args": list(lane.args),
        "requires": pack.lane_requires(lane) or "cpu",
        "with_baseline": lane.with_baseline,
        "nproc": lane.nproc,
        "extra_builds": [list(b) for b in lane.extra_builds],
        "minimal": lane.minimal,
        "domain": lane.domain,
        "upstream_tests": list(lane.upstream_tests),
        "expect_failed": list(lane.expect_failed),
        "test_requires": list(lane.test_requires),
        "shard": list(lane.shard) if lane.shard else None,
        "deselect": list(lane.deselect),
        "ranks": lane.ranks,
        "cpu_ranks": lane.cpu_ranks,
        "needs": [n.as_json() for n in lane.needs],
        "build": {"kind": manifest.build, "recipe": RECIPE_VERSION, "stubs": dict(sorted(manifest.stubs.items()))},
        "runtime_requires": list(base.runtime_requires) if base is not None else [],
    }


def differences(recorded: dict[str, Any], today: dict[str, Any]) -> list[str]:
    """The keys whose value differs between a receipt's declaration and today's (sorted); a key only one side
    has counts only when the recorded version knows it (an older receipt is not stale for a key added later)."""
    old_version = recorded.get("version", 0)
    keys = set(recorded) | set(today)
    out = []
    for key in sorted(keys - {"version"}):
        if key not in recorded and old_version < VERSION:
            continue
        if _plain(recorded.get(key)) != _plain(today.get(key)):
            out.append(key)
    return out


def _plain(value: Any) -> Any:
    """Lists and tuples alike, dicts by key: what JSON makes of a value."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in sorted(value.items())}
    return value
