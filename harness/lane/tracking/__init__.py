"""tracking.toml: one entry per pack, edited by people and by the tool.

The file is read and written with tomlkit so comments, order and formatting
survive the tool's edits. Loading validates everything a run relies on and
names the pack and key at fault: unknown targets, kinds and states, unknown
packs in ``depends_on``, dependency cycles, lanes on bases the manifest lacks,
unknown sentinels.

The package, one module per concept (imports go down this list):

* ``domain``: what a widening change admits (``Domain``, ``Point``), read from ``pack.toml's [domain]``;
* ``model``: a pack as typed data (``Pack``, ``Lane``, ``EvidenceRow``, ``Thread``, ``Decision``)
  and the vocabularies its values are checked against;
* ``load``: a pack's table read into a ``Pack`` with a closed schema, naming the pack and key at fault;
* ``layout``: which of a pack's keys live in tracking.toml and which in ``patches/<target>/<NN>/pack.toml``;
* ``document``: ``Tracking``, the whole file with its round-trippable document and the tool's edits to it (the
  generated ``[verdicts]`` lines, thread states, filing records).

The names below are the package's public surface; callers use ``tracking.Pack`` and so on.

May import: ``harness.errors``, ``harness.base``, ``harness.upstream``, ``harness.lane.suite``,
``harness.lane.upstream_tests``.
"""

from __future__ import annotations

from harness.lane.tracking.document import Tracking
from harness.lane.tracking.domain import Domain, Point
from harness.lane.tracking.load import (
    LANE_KEYS,
    PACK_KEYS,
    RELATED_KEYS,
    SUITE_KEYS,
    SUITE_SIDES,
    THREAD_KEYS,
    TOP_KEYS,
    located,
    suite_lane_name,
    unknown_keys,
)
from harness.lane.tracking.model import (
    BUILDS,
    CLASSES,
    DEFAULT_TIMEOUT,
    DOMAIN_RUNNER,
    FIX_SENTINELS,
    KINDS,
    MINIMAL_RUNNER,
    MITIGATION_STATUS,
    OURS,
    PACK_ID,
    PICKS,
    RELATED_KINDS,
    RELATED_OVERLAPS,
    RELATED_REF,
    RELATED_STATES,
    RELATIONS,
    REQUIRES,
    SCHEMA,
    STATES,
    THREAD_STATES,
    UNPATCHED_KINDS,
    Decision,
    EvidenceRow,
    Lane,
    Pack,
    Thread,
    latest_today,
    normalize_id,
    sentinels,
    shown_id,
)

__all__ = [
    "BUILDS", "CLASSES", "DEFAULT_TIMEOUT", "DOMAIN_RUNNER", "Decision", "Domain", "Point",
    "EvidenceRow", "FIX_SENTINELS", "KINDS", "LANE_KEYS",
    "Lane", "MINIMAL_RUNNER", "MITIGATION_STATUS", "OURS", "PACK_ID", "PACK_KEYS", "PICKS", "Pack", "RELATED_KEYS",
    "RELATED_KINDS", "RELATED_OVERLAPS", "RELATED_REF", "RELATED_STATES", "RELATIONS", "REQUIRES", "SCHEMA",
    "STATES", "SUITE_KEYS",
    "SUITE_SIDES", "THREAD_KEYS", "THREAD_STATES", "TOP_KEYS", "Thread", "Tracking", "UNPATCHED_KINDS",
    "latest_today", "normalize_id", "sentinels", "shown_id", "suite_lane_name",
    "located",
    "unknown_keys",
]
