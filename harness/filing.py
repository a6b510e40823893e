"""Filing bodies: the text a maintainer reads once and acts on, and the reproducer that goes with it.

``render`` fills ``templates/<kind>.md`` (``string.Template``) with parts that are all computed:

* ``$problem`` and ``$change``: the patch's own commit message (first paragraph: what breaks; the rest: the
  change), trailers of ours (``Upstream-Status:``, ``Pack:``) dropped, lines unwrapped. A pack without a
  patch uses its ``summary`` (and ``fix``) instead.
* ``$where``: the upstream file, line and function of every hunk in the series for the base the pack is
  filed against (``Pack.filing_base``), linked to GitHub when that base's commit is known.
* ``$evidence``: a short table of the figures that decide the claim, declared per pack as data
  (``[[packs.NN.evidence]]``, see ``tracking.EvidenceRow``) and read from the lanes' latest receipts, never
  typed: the result, its tolerance and control, timings -- plus the hosts (GPU, driver, CUDA, torch,
  triton, Python) and the builds they ran on.
* ``$reproducer``: a single self-contained script (``harness/standalone.py``) written next to the body;
  inlined when small, else uploaded as a gist by the printed ``gh`` command and linked from the body.
* ``$diff`` (issues and comments): the change itself, folded; ``$related``: the other threads as
  ``owner/repo#N``.

Before anything is shown as postable the body and the script are linted: no internal host names or
private IP addresses, no private paths, no e-mail addresses, no tokens, and (body) none of this
repository's vocabulary. Posting runs ``gh`` only after a person typed the pack id at a terminal and
records who decided and when under ``[packs.NN.filing]``.
"""

from __future__ import annotations

import ast
import getpass
import hashlib
import math
import re
import shlex
import string
import subprocess
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from harness import git, pins, receipts, series, standalone
from harness.errors import ConfigError, UpstreamError, UsageError
from harness.github import repo_slug, thread_label
from harness.tracking import EvidenceRow, Pack, Tracking

TEMPLATES = {"issue": "issue.md", "pr": "pr.md", "comment": "comment.md", "bug-report": "bug-report.md"}
INLINE_LIMIT = 4096  # bytes: a larger reproducer goes to a gist, never pasted
DIFF_LIMIT = 30000  # characters of diff folded into an issue or comment; a larger change is left to the PR
BODY_LIMIT = 65000  # GitHub refuses bodies over 65536 characters
PLACEHOLDER = "@@REPRODUCER_URL@@"  # replaced by the gist URL when the gh command runs

# (rule, pattern): each match is one lint finding. Body and reproducer alike.
LINT_RULES = (
    ("internal host name", re.compile(r"\b[a-z0-9-]+(?:\.[a-z0-9-]+)*"
                                      r"\.(?:internal|local|lan|corp|intranet|home\.arpa)\b", re.I)),
    ("private IP address", re.compile(r"\b(?:10\.\d{1,3}|169\.254|192\.168|172\.(?:1[6-9]|2\d|3[01]))"
                                      r"\.\d{1,3}(?:\.\d{1,3})?\b")),
    ("private path", re.compile(r"(?<![\w.~/-])(?:/root|/work|/home/[^/\s]+)(?=[/\s`'\")\]:,]|$)")),
    ("e-mail address", re.compile(r"\b[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+\b")),
    ("token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{20,}"
                         r"|(?:AKIA|ASIA)[0-9A-Z]{16})\b")),
)
# Body only: a temporary path or a loopback address in a filed text is a trace of one of our hosts; in a
# script they are ordinary code (a rendezvous on 127.0.0.1, a scratch directory).
BODY_RULES = (
    ("private IP address", re.compile(r"\b127\.\d{1,3}\.\d{1,3}(?:\.\d{1,3})?\b")),
    ("private path", re.compile(r"(?<![\w.~/-])/tmp(?=[/\s`'\")\]:,]|$)")),
    ("internal vocabulary", re.compile(
        r"\b(?:lanes?|receipts?|harness|tracking\.toml|patch-lane|HOST_STAMP|Upstream-Status|packs? ?\d{2})\b"
        r"|\b(?:BUG|FIX|MEMORY_SAVE|EQUIVALENCE|REGRESSION_GUARD|CONTRACT(?:_VIOLATION)?)_"
        r"(?:REPRODUCED|ABSENT|VALIDATED|FAILED|VERIFIED|MISSING|BROKEN|PASSED|HELD|DETECTED|MISSED)\b"
        r"|^Pack: ", re.I)),
)


@dataclass(frozen=True)
class Finding:
    line: int
    rule: str
    text: str
    where: str = "body"

    def describe(self, name: str | None = None) -> str:
        return f"{name or self.where}:{self.line}: {self.rule}: {self.text!r}"


def lint(text: str, body: bool = True, where: str = "body") -> list[Finding]:
    """Findings in ``text``; ``body=False`` lints a script (no vocabulary rule, temporary paths allowed)."""
    rules = LINT_RULES + (BODY_RULES if body else ())
    found = []
    for no, line in enumerate(text.splitlines(), 1):
        for rule, pattern in rules:
            for m in pattern.finditer(line):
                found.append(Finding(no, rule, m.group(0), where))
    if body and len(text) > BODY_LIMIT:
        found.append(Finding(0, "too long for GitHub", f"{len(text)} characters (limit {BODY_LIMIT})", where))
    return found


# ---------------------------------------------------------------------------------------------- the parts

@dataclass(frozen=True)
class Message:
    subject: str
    paragraphs: tuple[str, ...]


_TRAILER = re.compile(r"^(?:Upstream-Status|Pack):")
_ITEM = re.compile(r"^(?:[-*]|\d+[.)])\s")


def patch_message(path: Path) -> Message:
    """Subject and unwrapped paragraphs of a format-patch's message, our trailers dropped."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    subject, in_subject, i = "", False, 0
    while i < len(lines) and lines[i] != "":
        line = lines[i]
        if line.startswith("Subject:"):
            subject, in_subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", line[len("Subject:"):].strip()), True
        elif in_subject and line[:1] in (" ", "\t"):
            subject += " " + line.strip()
        else:
            in_subject = False
        i += 1
    body: list[str] = []
    for line in lines[i + 1:]:
        if line == "---" or line.startswith("diff --git "):
            break
        if not _TRAILER.match(line):
            body.append(line)
    paragraphs, current = [], []
    for line in body + [""]:
        if line.strip():
            current.append(line)
        elif current:
            paragraphs.append(_unwrap(current))
            current = []
    return Message(subject, tuple(paragraphs))


def _unwrap(lines: list[str]) -> str:
    """One paragraph of a hard-wrapped message as one line; list items one per line."""
    items: list[str] = []
    for line in lines:
        if _ITEM.match(line.lstrip()) or not items:
            items.append(line.strip())
        else:
            items[-1] += " " + line.strip()
    return "\n".join(items)


@dataclass(frozen=True)
class Location:
    path: str
    line: int
    context: str


_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@(.*)$")
_CONTEXT_NAME = re.compile(r"(?:async\s+)?(?:def|class)\s+(\w+)")


def hunk_locations(path: Path) -> list[Location]:
    """For each hunk: the file, the first base line it changes (or inserts before), and its function."""
    out: list[Location] = []
    current, line_no, pending, context = "?", 0, False, ""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("diff --git "):
            m = re.match(r"^diff --git a/(.+) b/(.+)$", line)
            current, pending = (m.group(2) if m else line[11:]), False
        elif (m := _HUNK.match(line)) is not None:
            line_no, pending = int(m.group(1)), True
            raw = m.group(2).strip()
            named = _CONTEXT_NAME.search(raw)
            context = named.group(1) if named else raw[:40]
        elif pending:
            if line.startswith(" "):
                line_no += 1
            elif line[:1] in ("-", "+"):
                # new top-level code after a function: git names the function before it, but it is not in it
                top_level = line[:1] == "+" and line[1:2] not in ("", " ", "\t", "#") and context
                out.append(Location(current, line_no, f"after {context}" if top_level else context))
                pending = False
    return out


def patch_diff(path: Path) -> str:
    """The diff of a format-patch: from the first 'diff --git' to the signature."""
    text = path.read_text(encoding="utf-8", errors="replace")
    start = text.find("diff --git ")
    if start < 0:
        return ""
    diff = text[start:]
    end = diff.rfind("\n-- \n")
    return (diff[:end] if end >= 0 else diff).rstrip() + "\n"


def _artifact(base):
    return getattr(base, "artifact", None)


def is_release(base) -> bool:
    """A base published as a registry artefact (else a commit of the upstream repository)."""
    art = _artifact(base)
    return art is not None and bool(getattr(art, "sha256", None))


def unchanged_label(manifest: pins.Manifest, base) -> str:
    return f"{base_label(manifest, base)} " + ("as published" if is_release(base) else "unchanged")


def base_label(manifest: pins.Manifest, base) -> str:
    """How the filed base is named to a maintainer: a release, or a commit of their repository."""
    if is_release(base):
        return f"{manifest.distribution} {base.version}"
    slug = repo_slug(manifest.repo) or manifest.repo
    return f"{slug} {base.version} at {base.commit[:10]}" if base.commit else f"{manifest.distribution} {base.version}"


def _where(manifest: pins.Manifest, base, own: list[series.Patch]) -> str:
    groups: dict[tuple[str, str], list[int]] = {}
    for patch in own:
        for loc in hunk_locations(patch.path):
            groups.setdefault((loc.path, loc.context), []).append(loc.line)
    if not groups:
        return ""
    slug = repo_slug(manifest.repo)
    items = []
    for (path, context), lines in groups.items():
        first, last = min(lines), max(lines)
        span = f"line {first}" if len(lines) == 1 else f"lines {first}-{last} ({len(lines)} places)"
        ref = f"`{path}` {span}"
        if base.commit and slug:
            ref = f"[{ref}](https://github.com/{slug}/blob/{base.commit}/{path}#L{first})"
        if context.startswith("after "):
            items.append(f"- {ref}, new code after `{context[6:]}`")
        else:
            items.append(f"- {ref}" + (f", in `{context}`" if context else ""))
    return f"Where, in {base_label(manifest, base)}:\n\n" + "\n".join(items)


# ---------------------------------------------------------------------------------------------- evidence

def number(v: float) -> str:
    if v == 0:
        return "0"
    if not math.isfinite(v):
        return str(v)
    if abs(v) < 1e-2 or abs(v) >= 1e6:
        mantissa, exp = f"{v:.1e}".split("e")
        return f"{mantissa}e{int(exp)}"
    return f"{v:.3g}"


def shown(v, unit: str | None = None) -> str:
    """A figure value as a maintainer reads it: 6.6e-8, 0.957, 31.5 GiB, 682 ms, 192.0 KiB, yes/no."""
    if isinstance(v, bool):
        text = "yes" if v else "no"
    elif isinstance(v, (int, float)) and unit == "B":
        from harness.ui import human_bytes

        return human_bytes(v)
    elif isinstance(v, int):
        text = str(v)
    elif isinstance(v, float):
        text = number(v)
    elif v is None:
        text = "n/a"
    elif isinstance(v, (list, tuple)):
        if len(v) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            text = f"{shown(v[0])}-{shown(v[1])}"
        else:
            text = ", ".join(shown(x) for x in v)
    elif isinstance(v, dict):
        text = ", ".join(f"{k} {shown(x)}" for k, x in v.items())
    else:
        text = str(v)
    return f"{text} {unit}" if unit and not isinstance(v, (bool, str)) else text


class _Shown:
    def __init__(self, value, unit):
        self.value, self.unit = value, unit

    def __format__(self, spec: str) -> str:
        return format(self.value, spec) if spec else shown(self.value, self.unit)


class _FigureFormatter(string.Formatter):
    """``{key}``, ``{key.sub}`` (into dicts) over one figure; ``{value}`` carries the figure's unit."""

    def get_field(self, field_name, args, kwargs):
        head, *rest = field_name.split(".")
        if head not in kwargs:
            raise KeyError(head)
        obj = kwargs[head]
        for part in rest:
            if not isinstance(obj, dict) or part not in obj:
                raise KeyError(field_name)
            obj = obj[part]
        return _Shown(obj, _unit(field_name, kwargs)), field_name


_SUFFIX_UNITS = (("_bytes", "B"), ("_ms", "ms"), ("_gib", "GiB"), ("_seconds", "s"))


def _unit(field_name: str, figure: dict) -> str | None:
    """``value`` carries the figure's unit; other keys name theirs by suffix (``result_bytes``, ``baseline_ms``)."""
    if field_name == "value":
        return figure.get("unit")
    last = field_name.rsplit(".", 1)[-1]
    return next((unit for suffix, unit in _SUFFIX_UNITS if last.endswith(suffix) or last == suffix[1:]), None)


_FORMATTER = _FigureFormatter()


@dataclass
class EvidenceRowResult:
    row: EvidenceRow
    label: str
    result: str
    host: str | None
    build: str
    receipt: receipts.Receipt | None


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def evaluate(row: EvidenceRow, rec: receipts.Receipt | None) -> tuple[dict | None, str | None]:
    """The placeholders of ``row`` from ``rec`` (the picked figure's keys plus counts), or a problem."""
    if rec is None:
        return None, "no receipt"
    if row.figure == VERDICT_FIGURE:  # the sentinel the run ended with, its details as the figure's keys
        last = rec.sentinels[-1] if rec.sentinels else None
        pool = [] if last is None else [{**rec.sentinel_details.get(last, {}), "name": VERDICT_FIGURE, "value": last}]
    else:
        pool = [f.data for f in rec.figures]
    figs = [f for f in pool if f.get("name") == row.figure and all(f.get(k) == v for k, v in row.where)]
    if not figs:
        where = ", ".join(f"{k} = {v!r}" for k, v in row.where)
        return None, f"no figure '{row.figure}'" + (f" with {where}" if where else "") + f" in {rec.dir.name}"
    if row.pick != "first":
        values = [f.get("value") for f in figs]
        if not all(_numeric(v) for v in values):
            return None, f"pick = '{row.pick}' needs numeric values of '{row.figure}'"
        picked = (max if row.pick == "max" else min)(figs, key=lambda f: f["value"])
    else:
        picked = figs[0]
    fields = dict(picked)
    name_key = next((k for k in ("tensor", "case", "param", "name") if k in picked), "name")
    fields.update(
        count=len(figs),
        n_ok=sum(f.get("ok") is True for f in figs),
        n_finite=sum(f.get("finite") is True for f in figs),
        n_bitwise=sum(f.get("bitwise_equal") is True for f in figs),
        n_true=sum(f.get("value") is True for f in figs),
        not_bitwise=", ".join(f"{f.get(name_key)} {shown(f.get('value'))}" for f in figs
                              if f.get("bitwise_equal") is False) or "none",
    )
    return fields, None


# An evidence row's figure name that reads the run's last sentinel instead of a FIGURE line: its details
# (what the reproducer observed, e.g. the error text) become the placeholders, its name ``{value}``.
VERDICT_FIGURE = "@verdict"


def resolve_row(row: EvidenceRow, rec: receipts.Receipt | None) -> tuple[str, str, str | None]:
    """(label, result, problem) of an evidence or performance row against ``rec``; result "(no result)" on a problem."""
    fields, problem = evaluate(row, rec)
    label, result = row.label, "(no result)"
    if fields is not None:
        try:
            label = _FORMATTER.format(row.label, **fields)
            result = _FORMATTER.format(row.show, **fields)
        except (KeyError, ValueError, TypeError) as exc:
            problem = f"placeholder {exc} not in the figure (keys: {', '.join(sorted(fields))})"
    return label, result, problem


def host_key(rec: receipts.Receipt) -> tuple:
    h = rec.host or receipts.Host({})
    return (h.gpu, h.compute_capability, h.driver, h.torch_cuda if h.gpu else None, h.torch, h.triton,
            h.host_python, _platform(h))


def _platform(h: receipts.Host) -> str:
    plat = h.platform or ""
    system = plat.split("-", 1)[0] or "?"
    machine = next((p for p in ("x86_64", "aarch64", "arm64") if p in plat), "")
    glibc = re.search(r"glibc(\d+\.\d+)", plat)
    return " ".join(x for x in (system, machine, f"(glibc {glibc.group(1)})" if glibc else "") if x)


def _host_short(rec: receipts.Receipt) -> str:
    gpu = rec.host.gpu if rec.host is not None else None
    return re.sub(r"^NVIDIA\s+", "", gpu) if gpu else "CPU"


def _host_long(rec: receipts.Receipt) -> str:
    h = rec.host or receipts.Host({})
    parts = []
    if h.gpu:
        extra = ", ".join(x for x in (f"compute capability {h.compute_capability}" if h.compute_capability
                                      else "", f"driver {h.driver}" if h.driver else "") if x)
        parts.append(f"{h.gpu}" + (f" ({extra})" if extra else ""))
        if h.torch_cuda:
            parts.append(f"CUDA {h.torch_cuda}")
    else:
        parts.append(f"no GPU, {_platform(h)}")
    for value, name in ((h.torch, "torch"), (h.triton, "triton"), (h.host_python, "Python")):
        if value:
            parts.append(f"{name} {value}")
    return ", ".join(parts)


@dataclass
class Evidence:
    text: str
    problems: list[str] = field(default_factory=list)
    receipts: list[receipts.Receipt] = field(default_factory=list)


def evidence(root: Path, manifest: pins.Manifest, pack: Pack, change_name: str, dep_subjects: list[str]) -> Evidence:
    if not pack.evidence:
        return Evidence("", [f"no evidence declared ([[packs.{pack.id}.evidence]] in tracking.toml)"])
    results: list[EvidenceRowResult] = []
    problems: list[str] = []
    used: dict[Path, receipts.Receipt] = {}
    latest = receipts.latest_by_lane(root, pack.target, pack.id)
    for i, row in enumerate(pack.evidence, 1):
        rec = latest.get(row.lane)
        label, result, problem = resolve_row(row, rec)
        if problem:
            problems.append(f"evidence row {i} ({row.lane}, {row.figure}): {problem}")
        build = "?"
        if rec is not None:
            if rec.path is not None:
                used[rec.path] = rec
            patched = rec.patched if row.build is None else row.build == "change"
            build = str(rec.base.version or rec.base.name or "?") + (f" + {change_name}" if patched else "")
        results.append(EvidenceRowResult(row, label, result, None, build, rec))
    # one short name per distinct host, numbered when two distinct hosts share a GPU name
    names: dict[tuple, str] = {}
    for r in results:
        if r.receipt is None:
            continue
        key = host_key(r.receipt)
        if key not in names:
            short = _host_short(r.receipt)
            taken = [n for n in names.values() if n == short or n.startswith(short + " (")]
            names[key] = short if not taken else f"{short} ({len(taken) + 1})"
        r.host = names[key]
    lines = ["| what | build | result | host |", "| --- | --- | --- | --- |"]
    for r in results:
        cells = (r.label, r.build, r.result, r.host or "-")
        lines.append("| " + " | ".join(table_cell(c) for c in cells) + " |")
    notes = []
    hosts = {}
    for r in results:
        if r.receipt is not None and r.host not in hosts:
            hosts[r.host] = _host_long(r.receipt)
    if hosts:
        notes.append("Hosts: " + "; ".join(f"**{name}**: {desc}" for name, desc in hosts.items()) + ".")
    bases: dict[str, str] = {}
    runtimes: dict[tuple[str, ...], None] = {}
    for r in results:
        if r.receipt is None:
            continue
        b = r.receipt.base
        version = str(b.version or b.name)
        if b.artifact:
            bases.setdefault(version, f"`{version}` is {manifest.distribution} {version} as published "
                                      f"(`{b.artifact}`)")
        elif b.commit:
            bases.setdefault(version, f"`{version}` is {repo_slug(manifest.repo) or manifest.repo} at "
                                      f"{b.commit[:10]}")
        reqs = r.receipt.runtime_requires
        if reqs:
            runtimes.setdefault(tuple(reqs), None)
    if bases:
        after = (", after " + ", ".join(f'"{s}"' for s in dep_subjects)) if dep_subjects else ""
        notes.append("Builds: " + "; ".join(bases.values()) + f"; `+ {change_name}` is that build with "
                     + ("this PR" if change_name == "this PR" else "the change below") + " applied" + after + ".")
    extras = sorted({b for r in results for lane in pack.lanes if lane.name == r.row.lane for b in lane.extra_builds})
    if extras:
        described = []
        for target, extra in extras:
            other = pins.load_manifest(root, target)
            described.append(f"{other.distribution} {other.base(extra).version} as published")
        notes.append("Also on the path: " + ", ".join(described) + ".")
    for reqs in runtimes:
        notes.append("Installed with it: " + ", ".join(f"`{r}`" for r in reqs) + ".")
    if pack.evidence_note:
        notes.append(pack.evidence_note.strip())
    text = "\n".join(lines) + "\n\n" + "\n\n".join(notes)
    return Evidence(text.strip(), problems, list(used.values()))


def table_cell(text: str) -> str:
    """``text`` as one cell of a Markdown table (pipes escaped, on one line)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


# ---------------------------------------------------------------------------------------------- reproducer

def script_name(pack: Pack) -> str:
    stem = Path(pack.reproducer or "reproducer.py").stem
    rest = re.sub(r"^(?:pack|contract)\d+_?", "", stem)
    return f"repro_{rest or pack.target.replace('-', '_')}.py"


def _runs(manifest: pins.Manifest, pack: Pack, base_name: str, name: str, change_name: str) -> list[str]:
    """The commands of the header: one per lane on the filed base, with the environment the harness sets."""
    lanes = [lane for lane in pack.lanes if lane.base == base_name]
    shared = len(lanes) > 1
    out = []
    for i, lane in enumerate(lanes, 1):
        env = [f"HARNESS_LANE={lane.name}", f"HARNESS_PATCHED={1 if lane.patched else 0}"]
        if shared:
            env.append("HARNESS_RUN_DIR=./repro-run")
        if lane.with_baseline:
            env.append("HARNESS_BASELINE_SITE=$RELEASED_SITE")
        launch = "python" if lane.nproc == 1 else f"python -m torch.distributed.run --standalone " \
                                                 f"--nproc_per_node={lane.nproc}"
        base = manifest.bases[base_name]
        build = (f"{base_label(manifest, base)} with {change_name}" if lane.patched
                 else unchanged_label(manifest, base)) \
            + (" (CUDA GPU)" if pack.lane_requires(lane) == "cuda" else " (CPU is enough)")
        cmd = " ".join([*env, launch, name, *map(shlex.quote, lane.args)])
        out.append(f"{i}. {build}:\n       {cmd}")
    return out


def reproducer_script(root: Path, manifest: pins.Manifest, pack: Pack, base_name: str, title: str,
                      change_name: str) -> tuple[str, str] | None:
    """(file name, text) of the self-contained reproducer, or None for a pack without one."""
    if not pack.reproducer:
        return None
    path = root / pack.reproducer
    name = script_name(pack)
    original = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    needs = [f"{manifest.distribution} (the package under test) importable"]
    if re.search(r"^\s*(?:import|from) torch\b", path.read_text(encoding="utf-8"), re.M):
        needs.append("torch")
    lanes = [lane for lane in pack.lanes if lane.base == base_name]
    if any(pack.lane_requires(lane) == "cuda" for lane in lanes):
        needs.append("a CUDA GPU")
    for target, extra in sorted({b for lane in lanes for b in lane.extra_builds}):
        other = pins.load_manifest(root, target)
        needs.append(f"{other.distribution} {other.base(extra).version}")
    runtime = manifest.bases[base_name].runtime_requires
    runs = _runs(manifest, pack, base_name, name, change_name)
    wrap = textwrap.TextWrapper(width=100)
    header = [f"{title}: a self-contained reproducer.", "",
              *wrap.wrap("Needs " + ", ".join(needs) + (f", with {', '.join(runtime)}" if runtime else "")
                         + ". Nothing else: every helper it uses is copied in below."), ""]
    if runs:
        header += ["Run it once per build, from one directory:", "", *[f"  {r}" for r in runs], ""]
        if any(lane.with_baseline for lane in lanes):
            base = manifest.bases[base_name]
            how = (f"'pip install --no-deps --target DIR {manifest.distribution}=={base.version}'" if is_release(base)
                   else f"'pip install --no-deps --target DIR .' in a checkout of {base_label(manifest, base)}")
            header += wrap.wrap(f"RELEASED_SITE is a directory holding {unchanged_label(manifest, base)}, e.g. made "
                                f"with {how}: the run compares the changed function with that one in one "
                                "process.") + [""]
        header += ["Each run prints one JSON line per measurement and ends with a line naming what it observed."]
    header += ["", "Method notes:", "", original]
    text = standalone.amalgamate(path, [root / "repros"], "\n".join(header))
    return name, text


def _reproducer_section(script: tuple[str, str] | None, inline: bool, needs_gpu: bool) -> str:
    if script is None:
        return "No reproducer yet."
    name, text = script
    needs = ["the package under test"] + (["torch"] if re.search(r"^\s*(?:import|from) torch\b", text, re.M) else []) \
        + (["a CUDA GPU"] if needs_gpu else [])
    needs_text = ", ".join(needs[:-1]) + " and " + needs[-1] if len(needs) > 1 else needs[0]
    rest = (f"is a single file: it needs only {needs_text}; its docstring gives the command for the published "
            "release and for the change.")
    if inline:
        return f"`{name}` {rest}\n\n```python\n{text.rstrip()}\n```"
    return f"[`{name}`]({PLACEHOLDER}) ({len(text.splitlines())} lines) {rest}"


# ---------------------------------------------------------------------------------------------- render

@dataclass
class Rendered:
    pack: Pack
    title: str
    body: str
    script: tuple[str, str] | None  # (file name, text)
    inline: bool  # the script is pasted into the body (small), else linked through PLACEHOLDER
    problems: list[str]
    findings: list[Finding]
    receipts: list[receipts.Receipt]
    filing_base: str

    @property
    def needs_upload(self) -> bool:
        return self.script is not None and not self.inline


def template_path(root: Path, pack: Pack) -> Path:
    name = TEMPLATES.get(pack.kind)
    if name is None:
        raise ConfigError(f"pack {pack.id}: kind '{pack.kind}' is not filed upstream (no template; filed kinds: "
                          f"{', '.join(TEMPLATES)})")
    return root / "templates" / name


def render(root: Path, tracking: Tracking, pack: Pack) -> Rendered:
    manifest = pins.load_manifest(root, pack.target)
    path = template_path(root, pack)
    try:
        template = Template(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: template missing") from None
    problems: list[str] = []
    base_name = pack.filing_base or manifest.filing_base or pack.base or manifest.default_base
    if base_name not in manifest.bases:
        problems.append(f"filing base '{base_name}' is not a base of {manifest.path.name}; rendered at "
                        f"{pack.base or manifest.default_base}")
        base_name = pack.base or manifest.default_base
    base = manifest.bases[base_name]
    patches = series.series_for(tracking, root, pack, base_name)
    own = [p for p in patches if p.pack == pack.id]
    deps = [p for p in patches if p.pack != pack.id]
    change_name = "this PR" if pack.kind == "pr" else "the change"
    messages = [patch_message(p.path) for p in own]
    title = messages[0].subject if pack.kind == "pr" and len(messages) == 1 else pack.title
    if messages:
        problem = messages[0].paragraphs[0] if messages[0].paragraphs else messages[0].subject
        change_parts = list(messages[0].paragraphs[1:])
        for msg in messages[1:]:
            change_parts += [f"**{msg.subject}**", *msg.paragraphs]
        change = "\n\n".join(change_parts)
    else:
        problem = pack.summary or pack.title
        fix = pack.fix
        change = f"Suggested fix: {fix}" if fix and pack.kind != "bug-report" else ""
    ev = evidence(root, manifest, pack, change_name, [patch_message(p.path).subject for p in deps])
    problems += ev.problems
    lane_base = {lane.name: lane.base for lane in pack.lanes}
    problems += [f"evidence row {i} ({row.lane}): the lane runs on {lane_base[row.lane]}, not on the filing base "
                 f"{base_name}" for i, row in enumerate(pack.evidence, 1) if lane_base[row.lane] != base_name]
    script = reproducer_script(root, manifest, pack, base_name, title, change_name)
    inline = script is not None and len(script[1].encode()) <= INLINE_LIMIT
    needs_gpu = any(pack.lane_requires(lane) == "cuda" for lane in pack.lanes if lane.base == base_name)
    diff = ""
    if own and pack.kind != "pr":
        text = "".join(patch_diff(p.path) for p in own)
        if len(text) <= DIFF_LIMIT:
            diff = (f"<details><summary>The change, as a diff against {base_label(manifest, base)}</summary>\n\n"
                    f"```diff\n{text.rstrip()}\n```\n\n</details>")
    related = [thread_label(t.url) for t in pack.threads
               if t.role == "context" and thread_label(t.url) != t.url]
    values = {
        "title": title,
        "problem": problem,
        "where": _where(manifest, base, own),
        "change": change,
        "evidence": ev.text or "No measurements yet.",
        "reproducer": _reproducer_section(script, inline, needs_gpu),
        "diff": diff,
        "related": ("Related: " + ", ".join(related)) if related else "",
        "base": base_label(manifest, base),
        "repo": manifest.repo,
    }
    try:
        body = template.substitute(values)
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"{path}: bad placeholder {exc} (known: {', '.join(sorted(values))})") from None
    body = re.sub(r"\n{3,}", "\n\n", body)
    body = re.sub(r"^#+ [^\n]*\n\n(?=#|\Z)", "", body.strip() + "\n", flags=re.M)  # a heading over nothing
    body = body.strip() + "\n"
    findings = lint(body)
    if script is not None:
        findings += lint(script[1], body=False, where=script[0])
    return Rendered(pack, title, body, script, inline, problems, findings, ev.receipts, base_name)


# ---------------------------------------------------------------------------------------------- gh

def filing_thread(pack: Pack) -> str:
    for t in pack.threads:
        if t.role == "filing target":
            return t.url
    raise ConfigError(f"pack {pack.id}: a comment needs a thread with role = \"filing target\"")


@dataclass(frozen=True)
class GhPlan:
    """The gh commands that file a body: an optional gist upload of the reproducer, then the filing."""

    create: list[str]
    body_file: Path
    gist: list[str] | None = None

    def shell(self) -> str:
        if self.gist is None:
            return shlex.join(self.create)
        body = shlex.quote(_short(self.body_file))
        return f"url=$({shlex.join(self.gist)}) && sed \"s|{PLACEHOLDER}|$url|g\" {body} | {shlex.join(self.create)}"

    @property
    def target(self) -> str:
        return self.create[3] if self.create[2] == "comment" else self.create[4]


def _short(path: Path | str) -> str:
    """``path`` relative to the working directory when it lies under it (the command is run from there)."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def gh_plan(root: Path, rendered: Rendered, body_file: Path, script_file: Path | None,
            head: str | None = None) -> GhPlan:
    pack = rendered.pack
    slug = repo_slug(pins.load_manifest(root, pack.target).repo)
    upload = rendered.needs_upload and script_file is not None
    source = "-" if upload else _short(body_file)
    if pack.kind == "comment":
        url = filing_thread(pack)
        create = ["gh", "pr" if "/pull/" in url else "issue", "comment", url, "--body-file", source]
    elif slug is None:
        raise ConfigError(f"upstream/{pack.target}.toml: key 'repo' is not a github.com repository URL")
    elif pack.kind == "pr":
        create = ["gh", "pr", "create", "--repo", slug, "--title", rendered.title, "--body-file", source,
                  "--head", head or "<fork-owner>:<branch>"]
    else:
        create = ["gh", "issue", "create", "--repo", slug, "--title", rendered.title, "--body-file", source]
    gist = (["gh", "gist", "create", "--public", "--desc", f"Reproducer: {rendered.title}", _short(script_file)]
            if upload and script_file is not None else None)
    return GhPlan(create, body_file, gist)


def decider(root: Path) -> str:
    """Who typed the decision: git config user.name, else $USER."""
    done = git.in_user_repo(root, "config", "user.name")
    return (done.stdout.strip() if done is not None else "") or getpass.getuser()


def _gh(argv: list[str], pack: Pack, stdin: str | None = None) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, input=stdin)
    except FileNotFoundError:
        raise UsageError("gh not found on PATH; nothing was posted") from None
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no message"])[0]
        raise UpstreamError(f"pack {pack.id}: {' '.join(argv[:3])} failed ({done.returncode}): {first}")
    return next((ln.strip() for ln in reversed(done.stdout.splitlines()) if ln.strip().startswith("https://")), "")


def post(root: Path, tracking: Tracking, rendered: Rendered, plan: GhPlan, confirm) -> dict:
    """Run the plan once ``confirm`` returned the pack id; record the decision."""
    pack = rendered.pack
    tracking.check_filing_slot(pack.id)  # before anything is posted
    if "<fork-owner>:<branch>" in plan.create:
        raise UsageError(f"pack {pack.id}: a PR needs --head OWNER:BRANCH before it can be posted")
    typed = confirm(f"Post pack {pack.id} ({pack.kind}) to {plan.target}? Type the pack id ({pack.id}) to confirm: ")
    if typed.strip() != pack.id:
        raise UsageError(f"pack {pack.id}: confirmation {typed.strip()!r} does not match; nothing was posted")
    body = rendered.body
    gist_url = None
    if plan.gist is not None:
        gist_url = _gh(plan.gist, pack)
        if not gist_url:
            raise UpstreamError(f"pack {pack.id}: gh gist create printed no URL; nothing else was posted")
        body = body.replace(PLACEHOLDER, gist_url)
    url = _gh(plan.create, pack, stdin=body if "-" in plan.create else None)
    entry = {
        "decided_by": decider(root),
        "decided_at": receipts.utc_now().isoformat().replace("+00:00", "Z"),
        "how": " ".join(plan.create[:3]),
        "url": url or None,
        "reproducer": gist_url,
        "body_sha256": hashlib.sha256(body.encode()).hexdigest(),
    }
    tracking.record_filing(pack.id, entry)
    tracking.save()
    return entry
