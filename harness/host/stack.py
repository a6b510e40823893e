"""The stack a training image installs: a target's carried packs built as one package, and checked together.

Every pack of a target that is still carried (its state is none of ``DROPPED``, upstream has not absorbed it at
the base) and has a series for the base goes in, in landing order (dependencies first), as long as its series
applies on top of the packs before it; a pack that does not is left out with the reason. The build of that
combined series is repacked as a wheel whose version gains a PEP 440 local label naming the stack
(``0.20.0+pl.1a2b3c4d``, or ``+...pl.1a2b3c4d`` after a local label the build had), with a manifest inside its
``.dist-info`` (``patchlane-stack.json``: the packs, each patch's sha256, threads and mitigations, and what was
left out) and the same file beside it. The repacking is deterministic (sorted members, fixed dates and modes),
so the same inputs give the same bytes.

``check`` runs every included pack's patched lanes against the stack build (``Options.stack``: a lane of a
stacked pack takes the whole stack instead of its own series) and, where one fails there, the same lane alone:
a lane that passes alone and fails in the stack is a composition failure, named with the stacked packs whose
files it shares. Receipts go under ``stacks/<target>/<base>/receipts`` (never ``receipts/``: readiness judges
each pack alone).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
import shutil
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness.base import ui
from harness.base.hashing import sha256_file
from harness.errors import ConfigError, Exit, SeriesError
from harness.filing.landing import landing_order
from harness.lane import builds, lanes, series
from harness.lane.context import Context, StackSeries
from harness.lane.receipts import Verdict
from harness.lane.tracking import Pack

DROPPED = ("absorbed", "retired", "dropped")  # states whose packs a training image no longer carries
OPTED_OUT = "opted out"  # a lane's verdict in the stack check when it declares stack = false
MANIFEST = "patchlane-stack.json"
SCHEMA = 1
_DATE = (1980, 1, 1, 0, 0, 0)  # the zip format's earliest date: no clock in the bytes


@dataclass(frozen=True)
class LeftOut:
    pack: str
    why: str


@dataclass(frozen=True)
class Stack:
    target: str
    base: str
    pin: str  # the base's artefact sha256 or commit id
    packs: tuple[Pack, ...]  # in landing order
    patches: tuple[series.Patch, ...]
    left_out: tuple[LeftOut, ...]

    @property
    def key(self) -> str:
        return series.series_key(self.target, self.pin, list(self.patches))

    @property
    def label(self) -> str:
        """The local version label that names this stack: ``pl.`` and 8 hex digits of its series key."""
        return f"pl.{self.key[:8]}"

    def series_option(self) -> StackSeries:
        return StackSeries(self.target, self.base, tuple(p.id for p in self.packs), self.patches)


def compose(ctx: Context, target: str, base: str | None = None, leave: Mapping[str, str] | None = None) -> Stack:
    """The stack of ``target`` at ``base`` (default: the target's default base): which packs, which patches.
    ``leave`` (pack id -> why): packs left out whatever their state says (``refresh``: landed at the new head)."""
    manifest = ctx.manifest(target)
    if not any(p.target == target for p in ctx.tracking.packs.values()):
        known = sorted({p.target for p in ctx.tracking.packs.values()})
        raise ConfigError(f"no pack targets {target!r} (targets: {', '.join(known)})")
    pin = manifest.base(base or manifest.default_base)
    checkout = ctx.materialize(manifest, pin.name)
    packs: list[Pack] = []
    patches: list[series.Patch] = []
    out: list[LeftOut] = []
    for pack in landing_order(ctx.tracking):
        if pack.target != target:
            continue
        if pack.state in DROPPED:
            out.append(LeftOut(pack.id, f"state {pack.state}"))
            continue
        if leave and pack.id in leave:
            out.append(LeftOut(pack.id, leave[pack.id]))
            continue
        if series.absorbed_at(pack, pin.name):
            out.append(LeftOut(pack.id, f"absorbed upstream at {pin.name}"))
            continue
        own = series.load_series(ctx.root, target, pack.id, pin.name)
        if not own:
            out.append(LeftOut(pack.id, "no series (a contract or a report)"))
            continue
        missing = [d for d in pack.depends_on if ctx.tracking.packs[d].target == target
                   and d not in {p.id for p in packs} and not series.absorbed_at(ctx.tracking.packs[d], pin.name)]
        if missing:
            out.append(LeftOut(pack.id, f"depends on {', '.join(missing)}, not in the stack"))
            continue
        with tempfile.TemporaryDirectory(prefix="patchlane-stack-") as tmp:
            try:
                series.check_applies(checkout, [*patches, *own], Path(tmp))
            except SeriesError as exc:
                try:  # alone on the base, or only on top of the others?
                    series.check_applies(checkout, own, Path(tmp) / "alone")
                except SeriesError as alone:
                    out.append(LeftOut(pack.id, f"does not apply on {pin.name}: {alone}"))
                    continue
                meets = _meeting(own, patches)
                out.append(LeftOut(pack.id, f"applies on {pin.name} alone but not on top of the stack"
                                            f"{' (meets ' + meets + ')' if meets else ''}: {exc}"))
                continue
        packs.append(pack)
        patches.extend(own)
    return Stack(target, pin.name, pin.pin, tuple(packs), tuple(patches), tuple(out))


def _series_json(patches) -> list[dict]:
    """A pack's series as a manifest names it: each patch's file name and sha256, in order."""
    return [{"name": p.name, "sha256": p.sha256} for p in patches]


def _files(patches) -> set[str]:
    return {f for p in patches for f in p.files}


def _meeting(own, others) -> str:
    """The packs among ``others`` whose patches change a file ``own`` changes, with those files."""
    mine = _files(own)
    hits: dict[str, set[str]] = {}
    for p in others:
        common = mine & set(p.files)
        if common:
            hits.setdefault(p.pack, set()).update(common)
    return "; ".join(f"pack {pid} in {', '.join(sorted(files))}" for pid, files in sorted(hits.items()))


def manifest_of(ctx: Context, stack: Stack, version: str) -> dict:
    """The stack's manifest: what a person reads to know which fixes an installed package carries."""
    packs = []
    for pack in stack.packs:
        own = [p for p in stack.patches if p.pack == pack.id]
        packs.append({"id": pack.id, "title": pack.title, "kind": pack.kind, "state": pack.state,
                      "series": _series_json(own),
                      "files": sorted(_files(own)),
                      "threads": [{"url": t.url, "role": t.role, "state": t.state} for t in pack.threads],
                      "mitigation": pack.mitigation})
    return {"schema": SCHEMA, "kind": "patchlane-stack", "target": stack.target, "base": stack.base,
            "base_pin": stack.pin, "version": version, "series_key": stack.key, "packs": packs,
            "left_out": [{"pack": o.pack, "why": o.why} for o in stack.left_out]}


# ---------------------------------------------------------------------------------------------- the wheel

def build(ctx: Context, stack: Stack, out_dir: Path) -> tuple[Path, dict]:
    """Build the stack and write its wheel and manifest into ``out_dir``; (the wheel, the manifest)."""
    if not stack.packs:
        raise ConfigError(f"{stack.target} at {stack.base}: no carried pack applies, so there is no stack to build",
                          hint="harness stack TARGET --json lists each pack left out and why")
    manifest = ctx.manifest(stack.target)
    base = manifest.base(stack.base)
    made = lanes.obtain_build(ctx, manifest, base, list(stack.patches),
                              f"{stack.target} {stack.base} stack of {len(stack.packs)} pack(s)")
    built_version, metadata, tag = _original_metadata(made)
    version = _stack_version(built_version or base.version, stack.label)
    doc = manifest_of(ctx, stack, version)
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"  # the same bytes inside the wheel and beside it
    wheel = _repack(made, manifest.distribution, version, metadata, tag, text, out_dir)
    (out_dir / f"{wheel.stem}.{MANIFEST}").write_text(text)
    return wheel, doc


def _stack_version(version: str, label: str) -> str:
    try:
        v = Version(version)
    except InvalidVersion:
        return f"0+{re.sub(r'[^A-Za-z0-9.]+', '.', version).strip('.')}.{label}"
    return f"{v}{'.' if v.local else '+'}{label}"


def _original_metadata(made: builds.Build) -> tuple[str | None, str | None, str]:
    """The version and METADATA text of the build's installed distribution (None where it has no .dist-info: an
    overlay build), and its wheel tag."""
    for info in sorted(made.site.glob("*.dist-info")):
        text = (info / "METADATA").read_text(encoding="utf-8") if (info / "METADATA").is_file() else ""
        wheel = (info / "WHEEL").read_text(encoding="utf-8") if (info / "WHEEL").is_file() else ""
        tags = re.findall(r"^Tag:\s*(\S+)", wheel, re.M)
        return HeaderParser().parsestr(text).get("Version"), text, tags[0] if tags else "py3-none-any"
    return None, None, "py3-none-any"


def _repack(made: builds.Build, distribution: str, version: str, metadata: str | None, tag: str, manifest: str,
            out_dir: Path) -> Path:
    """The build's files as a wheel of ``distribution`` at ``version``, written the same way every time."""
    name = re.sub(r"[-_.]+", "_", distribution).lower()
    info = f"{name}-{version}.dist-info"
    files: dict[str, bytes] = {}
    for path in sorted(made.site.rglob("*")):
        rel = path.relative_to(made.site).as_posix()
        top = rel.split("/", 1)[0]
        if (not path.is_file() or top.endswith(".dist-info") or "__pycache__" in rel.split("/")
                or top in made.stubs or top == "bin"):
            continue
        files[rel] = path.read_bytes()
    if metadata:
        metadata = re.sub(r"^Version:.*$", f"Version: {version}", metadata, count=1, flags=re.M)
    else:
        metadata = f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n"
    files[f"{info}/METADATA"] = metadata.encode()
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: patchlane-stack\nRoot-Is-Purelib: "
                              f"{'true' if tag.endswith('-any') else 'false'}\nTag: {tag}\n").encode()
    files[f"{info}/{MANIFEST}"] = manifest.encode()
    record = [f"{rel},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
              f"{len(data)}" for rel, data in sorted(files.items())]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{name}-{version}-{tag}.whl"
    tmp = wheel.with_name(f".{wheel.name}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for rel, data in sorted(files.items()):
            zi = zipfile.ZipInfo(rel, _DATE)
            zi.external_attr = (0o644 & 0xFFFF) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data, compresslevel=9)
    tmp.replace(wheel)  # never a half-written wheel under its name
    return wheel


def write_index(wheel: Path, index: Path, distribution: str) -> Path:
    """A PEP 503 simple index holding ``wheel`` (``index/<name>/``); pip or uv take it with ``--index-url``."""
    name = re.sub(r"[-_.]+", "-", distribution).lower()
    d = index / name
    d.mkdir(parents=True, exist_ok=True)
    target = d / wheel.name
    shutil.copyfile(wheel, target)
    digests = {n: sha256_file(d / n) for n in sorted(p.name for p in d.glob("*.whl"))}
    body = "".join(f'<a href="{n}#sha256={digest}">{n}</a><br>\n' for n, digest in digests.items())
    (d / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{body}</body></html>\n")
    names = sorted(p.name for p in index.iterdir() if p.is_dir())
    (index / "index.html").write_text("<!DOCTYPE html>\n<html><body>\n"
                                      + "".join(f'<a href="{n}/">{n}</a><br>\n' for n in names)
                                      + "</body></html>\n")
    ui.detail(f"index {index}: {target.name} sha256 {digests[target.name][:12]}")
    return target


# ---------------------------------------------------------------------------------------------- the check

@dataclass(frozen=True)
class LaneCheck:
    pack: str
    lane: str
    stacked: str  # the verdict in the stack ("opted out" for a lane with stack = false)
    alone: str | None  # the verdict alone, where the stacked one was not a pass
    meets: str  # the stacked packs whose files this pack's series shares
    reason: str = ""  # why an opted-out lane is not run in the stack (its stack_reason)

    @property
    def composition_failure(self) -> bool:
        return self.stacked != Verdict.PASS and self.alone == Verdict.PASS


def check(ctx: Context, stack: Stack, lane_filter=None) -> list[LaneCheck]:
    """Run each stacked pack's patched lanes on the stack build; a lane that fails there runs alone too."""
    stack_dir = ctx.root / "stacks" / stack.target / stack.base / "receipts"
    in_stack = Context(ctx.root, ctx.tracking, ctx.store,
                       dataclasses.replace(ctx.options, stack=stack.series_option(), receipts_dir=stack_dir))
    alone_ctx = Context(ctx.root, ctx.tracking, ctx.store,
                        dataclasses.replace(ctx.options, receipts_dir=stack_dir.parent / "alone"))
    out: list[LaneCheck] = []
    for pack in stack.packs:
        chosen = [lane for lane in pack.lanes if lane.patched and lane.base == stack.base
                  and (lane_filter is None or lane_filter(pack, lane))]
        out += [LaneCheck(pack.id, lane.name, OPTED_OUT, None, "", lane.stack_reason)
                for lane in chosen if not lane.stack]
        names = [lane.name for lane in chosen if lane.stack]
        if not names:
            continue
        others = [p for p in stack.patches if p.pack != pack.id]
        meets = _meeting([p for p in stack.patches if p.pack == pack.id], others)
        with ui.status(f"stack {stack.target} {stack.base}: pack {pack.id}, {len(names)} lane(s)"):
            stacked = lanes.run_pack(in_stack, pack, names, update_tracking=False)
        failed = [r.lane for r in stacked if r.verdict not in (Verdict.PASS, Verdict.SKIPPED)]
        alone = {r.lane: r.verdict for r in lanes.run_pack(alone_ctx, pack, failed, update_tracking=False)} \
            if failed else {}
        out += [LaneCheck(pack.id, r.lane, str(r.verdict), str(alone[r.lane]) if r.lane in alone else None, meets)
                for r in stacked]
    return out


def exit_of(checks: list[LaneCheck]) -> Exit:
    if any(c.stacked not in (Verdict.PASS, Verdict.SKIPPED, OPTED_OUT) for c in checks):
        return Exit.MISMATCH
    return Exit.OK


def summary(stack: Stack) -> dict:
    """What a manifest says of a stack without building it: its label, pin, packs with their series, what is out."""
    return {"version": stack.label, "base": stack.base, "base_pin": stack.pin, "series_key": stack.key,
            "packs": [{"id": p.id, "series": _series_json(x for x in stack.patches if x.pack == p.id)}
                      for p in stack.packs],
            "left_out": [{"pack": o.pack, "why": o.why} for o in stack.left_out]}


def proposal(now: Stack, then: Stack) -> dict:
    """The next stack beside the current one (``harness refresh``): both summaries, the packs that come in and go
    out (with why), those whose series changed, and the packs whose lanes to run again on the next stack."""
    a, b = summary(now), summary(then)
    moved = diff(a, b)
    why = {o.pack: o.why for o in then.left_out}
    return {"current": a, "next": b, "added": moved["added"], "changed": moved["changed"], "rerun": moved["rerun"],
            "removed": [{"pack": pid, "why": why.get(pid, "")} for pid in moved["removed"]]}


def diff(a: dict, b: dict) -> dict:
    """What changes from stack manifest ``a`` to ``b``: packs in and out, patches changed, the versions."""
    pa = {p["id"]: p for p in a.get("packs", [])}
    pb = {p["id"]: p for p in b.get("packs", [])}
    changed = sorted(pid for pid in set(pa) & set(pb) if pa[pid]["series"] != pb[pid]["series"])
    return {"from": a.get("version"), "to": b.get("version"), "base": [a.get("base_pin"), b.get("base_pin")],
            "added": sorted(set(pb) - set(pa)), "removed": sorted(set(pa) - set(pb)), "changed": changed,
            "rerun": sorted(set(pb) - set(pa)) + changed if a.get("base_pin") == b.get("base_pin") else sorted(pb)}
