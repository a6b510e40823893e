"""Whether a pack is ready to file: computed from its receipts, never typed in.

A pack is *evidence-ready* when every lane has a receipt that passed, ran on
the artefact the manifest pins today, and started after the last change to the
pack's patch files (``git log`` of ``patches/<target>/<pack>``; uncommitted
changes count as changed now), and at least one lane runs on the target's
current default base. It is *ready* when, on top of that, its state lets it be
filed (not absorbed, retired, blocked, held or already filed) and every
dependency is ready, filed or absorbed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from harness import git, pins, receipts, series
from harness.tracking import Lane, Pack, Tracking

# States in which a pack is not filed, and why (shown by `status`, `waves` and `body`).
NOT_FILED = {
    "absorbed": "absorbed upstream; not filed (regression coverage only)",
    "retired": "retired; not filed",
    "blocked": "blocked",
    "held": "held back",
    "filed": "already filed",
}
DONE_STATES = ("absorbed", "filed")  # a dependency in one of these no longer gates anything


@dataclass(frozen=True)
class LaneEvidence:
    lane: Lane
    receipt: receipts.Receipt | None
    problem: str | None  # None: this lane's latest receipt counts


@dataclass(frozen=True)
class Readiness:
    pack: Pack
    lanes: tuple[LaneEvidence, ...]
    reasons: tuple[str, ...]  # why it is not ready; empty when ready

    @property
    def ready(self) -> bool:
        return not self.reasons

    @property
    def evidence_ready(self) -> bool:
        return bool(self.lanes) and all(e.problem is None for e in self.lanes) and not any(
            r.startswith("no lane on") for r in self.reasons)

    def why(self) -> str:
        return "ready" if self.ready else "; ".join(self.reasons)


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def last_patch_change(root: Path, target: str, pack: str) -> datetime | None:
    """When the pack's patch files last changed: their last commit, or now-ish if they are uncommitted."""
    d = series.series_dir(root, target, pack)
    files = [p for p in d.iterdir() if p.is_file()] if d.is_dir() else []
    if not files:
        return None
    mtime = max(datetime.fromtimestamp(p.stat().st_mtime, UTC) for p in files)
    try:
        repo = git.repo(root)
        rel = str(d.relative_to(root))
        if repo.git.status("--porcelain", "--", rel).strip():
            return mtime  # edited or new since the last commit
        committed = repo.git.log("-1", "--format=%cI", "--", rel).strip()
    except (git.git.InvalidGitRepositoryError, git.git.NoSuchPathError, git.GitCommandError, ValueError):
        return mtime  # not a git checkout (a copy on a GPU host): the files' own times
    return parse_time(committed) or mtime


def readiness(root: Path, tracking: Tracking, pack: Pack, _seen: frozenset[str] = frozenset()) -> Readiness:
    manifest = pins.load_manifest(root, pack.target)
    changed = last_patch_change(root, pack.target, pack.id)
    evidence = []
    for lane in pack.lanes:
        rec = receipts.latest(root, pack.target, pack.id, lane.name)
        evidence.append(LaneEvidence(lane, rec, _lane_problem(lane, rec, manifest, changed)))
    reasons: list[str] = []
    if pack.state in NOT_FILED:
        detail = pack.state_reason or NOT_FILED[pack.state]
        reasons.append(f"state {pack.state}: {detail}")
    if not pack.lanes:
        reasons.append("no lanes, so no receipts")
    elif not any(lane.base == manifest.default_base for lane in pack.lanes):
        reasons.append(f"no lane on the current default base {manifest.default_base}")
    reasons += [f"lane {e.lane.name}: {e.problem}" for e in evidence if e.problem]
    for dep in pack.depends_on:
        dp = tracking.packs[dep]
        if dp.state in DONE_STATES or dep in _seen:
            continue
        if not readiness(root, tracking, dp, _seen | {pack.id}).ready:
            reasons.append(f"depends on {dep}, which is not ready")
    return Readiness(pack, tuple(evidence), tuple(reasons))


def _lane_problem(lane: Lane, rec: receipts.Receipt | None, manifest: pins.Manifest,
                  changed: datetime | None) -> str | None:
    if rec is None:
        return "no receipt"
    d = rec.data
    if d.get("verdict") != "pass":
        return f"latest receipt is {d.get('verdict')}, not pass"
    want = manifest.base(lane.base).artifact.sha256
    if d.get("base", {}).get("sha256") != want:
        return f"latest receipt ran on another artefact than the {lane.base} pin"
    started = parse_time(d.get("started"))
    if changed is not None and (started is None or started < changed.replace(microsecond=0)):
        return f"latest receipt ({d.get('started')}) predates the last patch change ({changed:%Y-%m-%dT%H:%M:%SZ})"
    return None
