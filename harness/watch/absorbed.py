"""The weekly upstream diff: which packs upstream has absorbed, which still differ, what nobody tracks.

Three outcomes per target, at a (newer) base:

* **absorbed**: every patch of a pack reverse-applies (or applying it is a no-op) on the base —
  propose retiring the pack: ``state = "absorbed"`` plus an ``[absorbed]`` table with the version;
  its lanes stay, so its reproducer keeps running as regression coverage;
* **differs**: the pack's series still changes the base (applies, or conflicts) — expected, listed;
* **superseded**: the series still differs, but tracking.toml marks the pack absorbed and a passing
  unpatched lane on this base printed ``BUG_ABSENT``: upstream fixed the bug with another change;
* **untracked drift**: a change with no pack behind it — a directory ``patches/<target>/<pack>/``
  whose pack is not in tracking.toml (or belongs to another target), a file under ``patches/``
  that is not ``<target>/<pack>/NNNN-slug.patch``, or any file under ``overlays/`` (local files laid
  over an upstream tree bypass the series) — an error with its own exit code.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import tomlkit

from harness.lane import receipts, series
from harness.lane.context import Context
from harness.lane.tracking import PACK_ID, Tracking, layout
from harness.upstream import pins
from harness.watch import rebase

_TRANSIENT = (".regen-", ".refresh-")  # the tool's own scratch directories while it runs


@dataclass(frozen=True)
class Drift:
    path: Path
    why: str


def scan_drift(root: Path, tracking: Tracking, target: str | None = None) -> list[Drift]:
    found: list[Drift] = []
    overlays = root / "overlays"
    if overlays.is_dir():
        for f in sorted(p for p in overlays.rglob("*") if p.is_file()):
            rel = f.relative_to(overlays)
            if target is None or rel.parts[0] == target:
                found.append(Drift(f, "overlay file: a local change outside any pack's series"))
    patches = root / "patches"
    if not patches.is_dir():
        return found
    targets = set(pins.list_targets(root))
    for tdir in sorted(patches.iterdir()):
        if target is not None and tdir.name != target:
            continue
        if not tdir.is_dir():
            found.append(Drift(tdir, "file directly under patches/ (expected patches/<target>/<pack>/)"))
            continue
        if tdir.name not in targets:
            found.append(Drift(tdir, f"no manifest upstream/{tdir.name}.toml"))
            continue
        for pdir in sorted(tdir.iterdir()):
            if pdir.name.startswith(_TRANSIENT):
                continue
            pack = tracking.packs.get(pdir.name)
            if not pdir.is_dir():
                found.append(Drift(pdir, "file outside a pack directory"))
            elif not PACK_ID.match(pdir.name) or pack is None:
                found.append(Drift(pdir, f"no pack '{pdir.name}' in tracking.toml"))
            elif pack.target != tdir.name:
                found.append(Drift(pdir, f"pack {pack.id} targets {pack.target}, not {tdir.name}"))
            else:
                found.extend(_series_drift(pdir, pins.load_manifest(root, tdir.name)))
    return found


def _series_drift(pdir: Path, manifest: pins.Manifest) -> list[Drift]:
    """Files of a pack directory that are not its series: NNNN-slug.patch at the top (the pack's own base)
    or in ``<base>/`` for a base of the manifest (a ported series), nothing else."""
    found = []
    for f in sorted(pdir.rglob("*")):
        if not f.is_file() or any(part.startswith(_TRANSIENT) for part in f.relative_to(pdir).parts):
            continue
        rel = f.relative_to(pdir).parts
        if rel == (layout.PACK_FILE,):
            continue  # the pack's declarations (docs/layout.md)
        if len(rel) == 2 and rel[0] not in manifest.bases:
            found.append(Drift(f, f"'{rel[0]}/' is not a base of upstream/{manifest.target}.toml "
                                  f"(bases: {', '.join(manifest.bases)})"))
        elif len(rel) > 2 or not series.PATCH_NAME.match(f.name):
            found.append(Drift(f, "not a NNNN-slug.patch file of the pack's series"))
    return found


@dataclass(frozen=True)
class Verdict:
    report: rebase.PackReport
    state: str  # "absorbed" | "superseded" | "differs"
    proposal: str = ""  # the tracking.toml change, as a unified diff
    evidence: str = ""  # for "superseded": the passing BUG_ABSENT lane on this base


def bug_absent_evidence(tracking: Tracking, pid: str, base_name: str) -> str:
    """A passing unpatched lane on ``base_name`` that expects BUG_ABSENT, as 'lane (receipt)'; '' if none."""
    pack = tracking.packs[pid]
    latest = receipts.latest_by_lane(tracking.root, pack.target, pack.id)
    for lane in pack.lanes:
        v = latest.get(lane.name)
        if v is not None and lane.base == base_name and not lane.patched \
                and lane.expect == receipts.Sentinel.BUG_ABSENT and v.verdict == receipts.Verdict.PASS:
            where = receipts.display_path(v.path, tracking.root) if v.path is not None else "no receipt"
            return f"lane {lane.name} saw BUG_ABSENT on {receipts.host_description(v)} ({where})"
    return ""


def drifted_packs(root: Path, drift: list[Drift]) -> set[str]:
    """Packs whose series directory holds drift: their series is not loaded until it is cleaned up."""
    out = set()
    for d in drift:
        rel = d.path.relative_to(root).parts
        if rel[0] == "patches" and len(rel) > 3:
            out.add(rel[2])
    return out


def classify(tracking: Tracking, manifest: pins.Manifest, base_name: str, report: rebase.PackReport) -> Verdict:
    """absorbed / superseded / differs for one pack's rebase report on ``base_name``."""
    if report.contained:
        version = manifest.base(base_name).version
        proposal = retire_diff(tracking, report.pack.id, version) if report.pack.state != "absorbed" else ""
        return Verdict(report, "absorbed", proposal)
    if report.pack.state == "absorbed" and (evidence := bug_absent_evidence(tracking, report.pack.id, base_name)):
        # Upstream fixed it with a different change: the text differs, the reproducer says the bug is gone.
        return Verdict(report, "superseded", evidence=evidence)
    return Verdict(report, "differs")


def check(ctx: Context, manifest: pins.Manifest, base_name: str, skip: Collection[str] = frozenset()) -> list[Verdict]:
    chosen = [p.id for p in ctx.tracking.packs.values() if p.target == manifest.target and p.id not in skip]
    reports = rebase.rebase_target(ctx, manifest, base_name, packs=chosen) if chosen else []
    return [classify(ctx.tracking, manifest, base_name, report) for report in reports]


def _mark(doc, pid: str, version: str) -> None:
    table = doc["packs"][pid]
    table["state"] = "absorbed"
    note = f"found by 'harness absorbed': every patch of the series reverse-applies on {version}"
    if "absorbed" in table:
        table["absorbed"]["version"] = version
    else:
        absorbed = tomlkit.table()
        absorbed["version"] = version
        absorbed["note"] = note
        table.append("absorbed", absorbed)


def retire_diff(tracking: Tracking, pid: str, version: str) -> str:
    """The exact change ``retire`` would make to tracking.toml, as a unified diff."""
    before = tomlkit.dumps(tracking.doc)
    doc = tomlkit.parse(before)
    _mark(doc, pid, version)
    after = tomlkit.dumps(doc)
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        "a/tracking.toml", "b/tracking.toml"))


def retire(tracking: Tracking, pid: str, version: str) -> None:
    """Mark the pack absorbed at ``version`` (comments, order and lanes untouched) and save."""
    tracking.edit(lambda doc: _mark(doc, pid, version), pid)
    tracking.save()
