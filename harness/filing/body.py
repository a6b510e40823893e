"""``render``: fill ``templates/<kind>.md`` (``string.Template``) with the computed parts of a pack's body."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

from harness import decisions, pins, receipts, series
from harness.errors import ConfigError
from harness.filing import pr_template
from harness.filing.evidence import evidence
from harness.filing.lint import Finding, lint
from harness.filing.parts import _where, base_label, patch_diff, patch_message, split_problem
from harness.filing.reproducer import (
    PLACEHOLDER,
    _reproducer_section,
    minimal_problems,
    minimal_section,
    reproducer_script,
)
from harness.github import repo_slug, thread_label
from harness.tracking import Pack, Tracking

TEMPLATES = {"issue": "issue.md", "pr": "pr.md", "comment": "comment.md", "bug-report": "bug-report.md"}
INLINE_LIMIT = 4096  # bytes: a larger reproducer goes to a gist, never pasted
DIFF_LIMIT = 30000  # characters of diff folded into an issue or comment; a larger change is left to the PR


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
    diff: str = ""  # the pack's own patches as one diff (the body check compares names and anchors with it)
    base_text: str = ""  # the files that diff touches, as the filing base has them (names the prose may use)

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
        head, rest = split_problem(messages[0].paragraphs)
        problem = "\n\n".join(head) or messages[0].subject
        change_parts = rest
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
    reproducer_text = _reproducer_section(script, inline, needs_gpu)
    if script is not None and not inline:  # as an attachment under the minimal one
        reproducer_text = (f"The script behind the measurements above: [`{script[0]}`]({PLACEHOLDER}) "
                           f"({len(script[1].splitlines())} lines).")
    minimal = minimal_section(root, pack, base_name, reproducer_text if script is not None else "")
    if minimal is not None:
        problems += [f"minimal reproducer: {text}" for _, text in minimal_problems(root, pack, manifest.import_names)]
        reproducer_text = minimal
    else:
        reproducer_text = _reproducer_section(script, inline, needs_gpu)
    related, related_problems = decisions.body_lines(pack, repo_slug(manifest.repo) or manifest.repo)
    problems += related_problems
    values = {
        "title": title,
        "problem": problem,
        "where": _where(manifest, base, own),
        "change": change,
        "evidence": ev.text or "No measurements yet.",
        "reproducer": reproducer_text,
        "diff": diff,
        "related": ("Related upstream work:\n\n" + "\n".join(related)) if related else "",
        "base": base_label(manifest, base),
        "repo": manifest.repo,
    }
    try:
        body = template.substitute(values)
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"{path}: bad placeholder {exc} (known: {', '.join(sorted(values))})") from None
    body = _outside_code(body, lambda text: re.sub(r"\n{3,}", "\n\n", text))
    body = re.sub(r"^#+ [^\n]*\n\n(?=#|\Z)", "", body.strip() + "\n", flags=re.M)  # a heading over nothing
    body = body.strip() + "\n"
    own_diff = "".join(patch_diff(p.path) for p in own)
    if pack.kind == "pr":
        body = _upstream_template(manifest, base, body, own_diff, pack, problems)
    findings = lint(body)
    if script is not None:
        findings += lint(script[1], body=False, where=script[0])
    touched = pr_template.tree_text(manifest, base, pr_template.touched_paths(own_diff))
    return Rendered(pack, title, body, script, inline, problems, findings, ev.receipts, base_name, own_diff, touched)



def _upstream_template(manifest: pins.Manifest, base, body: str, diff: str, pack: Pack, problems: list[str]) -> str:
    """``body`` inside the upstream's own PR template at the filing base, when it has one."""
    found = pr_template.read_template(manifest, base)
    if found.problem:
        problems.append(found.problem)
    if found.text is None:
        return body
    fixes = [thread_label(t.url) for t in pack.threads if t.role == "fixes" and "/issues/" in t.url]
    facts = pr_template.Facts(adds_tests=pr_template.touches_tests(diff),
                              linked=", ".join(f"Fixes {label}" for label in fixes))
    return pr_template.fill(found.text, body, facts)


def _outside_code(body: str, edit) -> str:
    """``edit`` applied to the text between fenced code blocks; the blocks stay as they are."""
    parts = re.split(r"(^```[^\n]*\n.*?^```[ \t]*$)", body, flags=re.M | re.S)
    return "".join(part if i % 2 else edit(part) for i, part in enumerate(parts))
