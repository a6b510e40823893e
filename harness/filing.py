"""Filing bodies: render, lint, and (behind a typed confirmation) post a pack's upstream text.

The body comes from ``templates/<kind>.md`` (``string.Template``) filled with
the pack's fields and its latest receipts. Before anything is shown as
postable it is linted: no internal host names or private IP addresses, no
private paths, no e-mail addresses, no tokens. Posting runs ``gh`` only after a
person typed the pack id at a terminal, and records who decided and when under
``[packs.NN.filing]``.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from string import Template

from harness import pins, receipts, series
from harness.errors import ConfigError, UpstreamError, UsageError
from harness.github import repo_slug
from harness.tracking import Pack, Tracking

TEMPLATES = {"issue": "issue.md", "pr": "pr.md", "comment": "comment.md", "bug-report": "bug-report.md"}
INLINE_LIMIT = 4096  # bytes: a larger reproducer is attached by path, never pasted
MAX_FIGURES = 16  # per lane; the receipt has them all
_HOST_KEYS = (("gpu", "{}"), ("compute_capability", "cc {}"), ("driver", "driver {}"), ("torch_cuda", "CUDA {}"),
              ("torch", "torch {}"), ("triton", "triton {}"), ("host_python", "Python {}"))

# (rule, pattern): each match is one lint finding.
LINT_RULES = (
    ("internal host name", re.compile(r"\b[a-z0-9-]+(?:\.[a-z0-9-]+)*"
                                      r"\.(?:internal|local|lan|corp|intranet|home\.arpa)\b", re.I)),
    ("private IP address", re.compile(r"\b(?:10\.\d{1,3}|127\.\d{1,3}|169\.254|192\.168|172\.(?:1[6-9]|2\d|3[01]))"
                                      r"\.\d{1,3}(?:\.\d{1,3})?\b")),
    ("private path", re.compile(r"(?<![\w.~/-])(?:/root|/work|/tmp|/home/[^/\s]+)(?=[/\s`'\")\]:,]|$)")),
    ("e-mail address", re.compile(r"\b[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+\b")),
    ("token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{20,}"
                         r"|(?:AKIA|ASIA)[0-9A-Z]{16})\b")),
)


@dataclass(frozen=True)
class Finding:
    line: int
    rule: str
    text: str

    def describe(self, name: str = "body") -> str:
        return f"{name}:{self.line}: {self.rule}: {self.text!r}"


def lint(text: str) -> list[Finding]:
    found = []
    for no, line in enumerate(text.splitlines(), 1):
        for rule, pattern in LINT_RULES:
            for m in pattern.finditer(line):
                found.append(Finding(no, rule, m.group(0)))
    return found


# ---------------------------------------------------------------------------------------------- rendering

def template_path(root: Path, pack: Pack) -> Path:
    name = TEMPLATES.get(pack.kind)
    if name is None:
        raise ConfigError(f"pack {pack.id}: kind '{pack.kind}' is not filed upstream (no template; filed kinds: "
                          f"{', '.join(TEMPLATES)})")
    return root / "templates" / name


def render(root: Path, tracking: Tracking, pack: Pack) -> str:
    manifest = pins.load_manifest(root, pack.target)
    path = template_path(root, pack)
    try:
        template = Template(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: template missing") from None
    fix = str(tracking.doc["packs"][pack.id].get("fix", "")) or "-"
    values = {
        "pack": pack.id,
        "title": pack.title,
        "summary": pack.summary or pack.title,
        "fix": fix,
        "target": pack.target,
        "repo": manifest.repo,
        "files": ", ".join(f"`{f}`" for f in pack.files) or "-",
        "threads": "\n".join(f"- {t.url} ({t.role}, {t.state})" for t in pack.threads) or "-",
        "patches": _patches(root, pack),
        "reproducer": _reproducer(root, pack),
        "evidence": _evidence(root, pack),
    }
    try:
        body = template.substitute(values)
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"{path}: bad placeholder {exc} (known: {', '.join(sorted(values))})") from None
    return body.rstrip() + "\n"


def _patches(root: Path, pack: Pack) -> str:
    patches = series.load_series(root, pack.target, pack.id)
    return "\n".join(f"- `{p.path.relative_to(root)}`: {p.subject} (Upstream-Status: {p.upstream_status})"
                     for p in patches) or "- none in this repository yet"


def _reproducer(root: Path, pack: Pack) -> str:
    if not pack.reproducer:
        return "Reproducer: not written yet."
    path = root / pack.reproducer
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if len(data) <= INLINE_LIMIT:
        return f"Reproducer (`{pack.reproducer}`, sha256 `{digest}`):\n\n```python\n{data.decode().rstrip()}\n```"
    return (f"Reproducer attached: `{pack.reproducer}` ({len(data)} bytes, sha256 `{digest}`); "
            "too long to paste here.")


def _evidence(root: Path, pack: Pack) -> str:
    blocks = []
    for lane in pack.lanes:
        rec = receipts.latest(root, pack.target, pack.id, lane.name)
        if rec is None:
            blocks.append(f"- lane `{lane.name}`: no receipt yet")
            continue
        d = rec.data
        host = d.get("host") or {}
        hw = ", ".join(fmt.format(host[k]) for k, fmt in _HOST_KEYS if host.get(k))
        target_v = f"{pack.target} {host.get('target_version') or d.get('base', {}).get('version')}"
        lines = [
            f"- lane `{lane.name}` ({d.get('base', {}).get('name')}, {'patched' if d.get('patched') else 'baseline'}): "
            f"expected `{d.get('expected')}`, saw `{', '.join(d.get('sentinels', [])) or 'none'}` - "
            f"**{d.get('verdict')}**, {d.get('started')}",
            f"  - host: {hw or 'unknown'}; {target_v}",
        ]
        figures = d.get("figures", [])
        for fig in figures[:MAX_FIGURES]:
            lines.append(f"  - figure {_figure(fig)}")
        if len(figures) > MAX_FIGURES:
            lines.append(f"  - ({len(figures) - MAX_FIGURES} more figures in the receipt)")
        rel = rec.path.relative_to(root) if rec.path.is_relative_to(root) else rec.path.name
        lines.append(f"  - log sha256 `{d.get('log', {}).get('sha256')}`; receipt `{rel}`")
        blocks.append("\n".join(lines))
    return "\n".join(blocks) or "No lanes have run yet."


def _figure(fig: dict) -> str:
    value = fig.get("value")
    shown = f"{value:.4g}" if isinstance(value, float) else json.dumps(value)
    unit = f" {fig['unit']}" if fig.get("unit") else ""
    extra = {k: v for k, v in fig.items() if k not in ("name", "value", "unit")}
    detail = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(extra.items()))
    return f"`{fig.get('name')}` = {shown}{unit}" + (f" ({detail})" if detail else "")


# ---------------------------------------------------------------------------------------------- gh

def filing_thread(pack: Pack) -> str:
    for t in pack.threads:
        if t.role == "filing target":
            return t.url
    raise ConfigError(f"pack {pack.id}: a comment needs a thread with role = \"filing target\"")


def gh_command(root: Path, pack: Pack, body_file: Path, head: str | None = None) -> list[str]:
    slug = repo_slug(pins.load_manifest(root, pack.target).repo)
    if pack.kind == "comment":
        url = filing_thread(pack)
        return ["gh", "pr" if "/pull/" in url else "issue", "comment", url, "--body-file", str(body_file)]
    if slug is None:
        raise ConfigError(f"upstream/{pack.target}.toml: key 'repo' is not a github.com repository URL")
    if pack.kind == "pr":
        return ["gh", "pr", "create", "--repo", slug, "--title", pack.title, "--body-file", str(body_file),
                "--head", head or "<fork-owner>:<branch>"]
    return ["gh", "issue", "create", "--repo", slug, "--title", pack.title, "--body-file", str(body_file)]


def show_command(argv: list[str]) -> str:
    return shlex.join(argv)


def decider(root: Path) -> str:
    """Who typed the decision: git config user.name, else $USER."""
    try:
        name = subprocess.run(["git", "config", "user.name"], cwd=root, capture_output=True, text=True).stdout.strip()
    except OSError:
        name = ""
    return name or getpass.getuser()


def post(root: Path, tracking: Tracking, pack: Pack, argv: list[str], body: str, confirm) -> dict:
    """Run ``argv`` (a gh command) once ``confirm`` returned the pack id; record the decision."""
    tracking.check_filing_slot(pack.id)  # before anything is posted
    if "<fork-owner>:<branch>" in argv:
        raise UsageError(f"pack {pack.id}: a PR needs --head OWNER:BRANCH before it can be posted")
    typed = confirm(f"Post pack {pack.id} ({pack.kind}) to {argv[3] if argv[2] == 'comment' else argv[4]}? "
                    f"Type the pack id ({pack.id}) to confirm: ")
    if typed.strip() != pack.id:
        raise UsageError(f"pack {pack.id}: confirmation {typed.strip()!r} does not match; nothing was posted")
    try:
        done = subprocess.run(argv, capture_output=True, text=True)
    except FileNotFoundError:
        raise UsageError("gh not found on PATH; nothing was posted") from None
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no message"])[0]
        raise UpstreamError(f"pack {pack.id}: {' '.join(argv[:3])} failed ({done.returncode}): {first}")
    url = next((ln.strip() for ln in reversed(done.stdout.splitlines()) if ln.strip().startswith("https://")), None)
    entry = {
        "decided_by": decider(root),
        "decided_at": receipts.utc_now().isoformat().replace("+00:00", "Z"),
        "how": " ".join(argv[:3]),
        "url": url,
        "body_sha256": hashlib.sha256(body.encode()).hexdigest(),
    }
    tracking.record_filing(pack.id, entry)
    tracking.save()
    return entry
