"""``render``: fill ``templates/<kind>.md`` (``string.Template``) with the computed parts of a pack's body."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

from harness.errors import ConfigError
from harness.filing import forms, names, pr_template
from harness.filing.evidence import domain_text, evidence
from harness.filing.lint import Finding, lint
from harness.filing.parts import _where, base_label, patch_diff, patch_message, split_problem
from harness.filing.reproducer import (
    PLACEHOLDER,
    _reproducer_section,
    minimal_problems,
    minimal_section,
    reproducer_script,
    script_needs,
)
from harness.lane import receipts, series
from harness.lane.tracking import Pack, Tracking
from harness.upstream import pins
from harness.upstream.github import repo_slug, thread_label
from harness.watch import decisions

TEMPLATES = {"issue": "issue.md", "pr": "pr.md", "comment": "comment.md", "bug-report": "bug-report.md"}
LINKED_ISSUE = "@@LINKED_ISSUE_URL@@"  # replaced by the linked issue's URL once it is filed
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
    sections: tuple[str, ...] = ()  # the upstream form's or PR template's section lines the body must keep
    form: str = ""  # the upstream issue form it is filed in (path in the upstream tree), or "" for none
    companion: tuple[str, str] | None = None  # (title, body) of the issue a PR links, filed first
    minimal: str = ""  # the inline minimal reproducer's text (the check compares its names with the base)
    home: str = ""  # owner/repo of the upstream (a bare #N in the body is one of its threads)
    known_threads: frozenset[str] = frozenset()  # owner/repo#N (lower case) recorded in tracking.toml
    circular: tuple[Finding, ...] = ()  # reproducer names only the change introduces (filing.names.circular)
    stacked: tuple[str, ...] = ()  # the packs whose series go under this one's on the filing base
    own_files: tuple[str, ...] = ()  # the pack's own patch files (repository paths), as receipts name them
    stacked_subjects: tuple[str, ...] = ()  # the subjects of the patches under the pack's own
    where: str = ""  # the "Where" list as computed from the patched tree (the check compares the body's with it)
    base_files: dict[str, str] | None = None  # the touched files at the filing base (None: none could be read)
    base_commit: str = ""  # the filing base's commit, which the "Where" links name
    typed: tuple[str, ...] = ()  # figures typed into an evidence row's show that its receipt does not hold
    backed: frozenset[str] = frozenset()  # the PR template's facts (pr_template.Facts) that something backs
    own_threads: frozenset[str] = frozenset()  # owner/repo#N (lower case) of the pack and its dependencies

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
    # what is stacked under the change is named as what it is filed as (its pull request or issue, by its title),
    # never by a commit subject of ours
    under_packs = [tracking.packs[i] for i in dict.fromkeys(p.pack for p in deps) if i in tracking.packs]
    dep_names = tuple(f'the {"pull request" if d.kind == "pr" else "issue"} "{d.title}"' for d in under_packs)
    ev = evidence(root, manifest, pack, change_name, list(dep_names))
    problems += ev.problems
    shown_domain, domain_problems = domain_text(root, pack, base_name, change_name)
    problems += domain_problems
    problems += _evidence_builds(root, ev.receipts, patches, pack.id)
    lane_base = {lane.name: lane.base for lane in pack.lanes}
    problems += [f"evidence row {i} ({row.lane}): the lane runs on {lane_base[row.lane]}, not on the filing base "
                 f"{base_name}" for i, row in enumerate(pack.evidence, 1)
                 if not row.bench and lane_base[row.lane] != base_name]
    # the script's steps with the change build it on what it is stacked on: they say so, naming each by its filing
    needs = script_needs(root, manifest, pack, base_name)
    script = reproducer_script(root, manifest, pack, base_name, title,
                               f"{change_name} and, under it, {' and '.join(dep_names)}" if dep_names else change_name,
                               needs)
    inline = script is not None and len(script[1].encode()) <= INLINE_LIMIT
    diff = ""
    if own and pack.kind != "pr":
        text = "".join(patch_diff(p.path) for p in own)
        if len(text) <= DIFF_LIMIT:
            diff = (f"<details><summary>The change, as a diff against {base_label(manifest, base)}</summary>\n\n"
                    f"```diff\n{text.rstrip()}\n```\n\n</details>")
    reproducer_text = _reproducer_section(script, inline, needs)
    if script is not None and not inline:  # as an attachment under the minimal one
        reproducer_text = (f"The script behind the measurements in this report: [`{script[0]}`]({PLACEHOLDER}) "
                           f"({len(script[1].splitlines())} lines).")
    minimal = minimal_section(root, pack, base_name, reproducer_text if script is not None else "")
    if minimal is not None:
        problems += [f"minimal reproducer: {text}" for _, text in minimal_problems(root, pack, manifest.import_names)]
        reproducer_text = minimal
    else:
        reproducer_text = _reproducer_section(script, inline, needs)
    dep_subjects = tuple(d.title for d in under_packs)
    if dep_subjects and any(rec.patched and any(r.file not in {_rel(root, p.path) for p in own} for r in rec.patches)
                            for rec in ev.receipts):
        under = ", ".join(dep_names)
        values_note = f"The `+ {change_name}` rows ran with {under} underneath, filed separately."
    else:
        values_note = ""
    related, related_problems = decisions.body_lines(pack, repo_slug(manifest.repo) or manifest.repo,
                                                       base.commit or "")
    problems += related_problems
    own_diff = "".join(patch_diff(p.path) for p in own)
    files = pr_template.tree_files(manifest, base, pr_template.touched_paths(
        "".join(patch_diff(p.path) for p in patches)))
    where = _where(manifest, base, own, deps, files)
    values = {
        "title": title,
        "problem": problem,
        "where": where,
        "change": change,
        "evidence": _under_table(ev.text or "No measurements yet.", values_note)
                    + (f"\n\n{shown_domain}" if shown_domain else ""),
        "reproducer": reproducer_text,
        "diff": diff,
        "related": ("Related upstream work:\n\n" + "\n".join(related)) if related else "",
        "base": base_label(manifest, base),
        "repo": manifest.repo,
    }
    template_text = pr_template.read_template(manifest, base).text if pack.kind == "pr" else None
    companion = _linked_issue(manifest, base, pack, values, template_text, problems) if pack.kind == "pr" else None
    try:  # a PR filed after the issue it links says the change; the issue says the need, where and what is related
        body = template.substitute(dict(values, related="", problem="", where="") if companion is not None
                                   else values)
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"{path}: bad placeholder {exc} (known: {', '.join(sorted(values))})") from None
    body = _outside_code(body, lambda text: re.sub(r"\n{3,}", "\n\n", text))
    body = re.sub(r"^#+ [^\n]*\n\n(?=#|\Z)", "", body.strip() + "\n", flags=re.M)  # a heading over nothing
    body = body.strip() + "\n"
    sections: tuple[str, ...] = ()
    form_path = ""
    if pack.kind in forms.ISSUE_KINDS:
        filled = _in_issue_form(root, manifest, base, pack, values, diff, problems)
        if filled is not None:
            body, form_path, sections = filled
    elif pack.kind == "pr":
        body = _upstream_template(manifest, base, body, own_diff, pack, problems, companion is not None)
        sections = tuple(pr_template.section_lines(template_text or ""))
    findings = lint(body)
    if script is not None:
        findings += lint(script[1], body=False, where=script[0], vocabulary=True)
    if companion is not None:
        findings += lint(companion[1], where="linked issue")
    touched = pr_template.tree_text(manifest, base, pr_template.touched_paths(own_diff))
    minimal_text = (root / pack.minimal_repro).read_text(encoding="utf-8") \
        if minimal is not None and pack.minimal_repro else ""
    scripts = ([("minimal reproducer", minimal_text)] if minimal_text else []) + ([script] if script else [])
    circular = names.circular(own_diff, touched, scripts, lambda names: pr_template.tree_has(manifest, base, names))
    return Rendered(pack, title, body, script, inline, problems, findings, ev.receipts, base_name, own_diff, touched,
                    sections, form_path, companion, minimal_text, repo_slug(manifest.repo) or manifest.repo,
                    recorded_threads(tracking), tuple(circular), tuple(dict.fromkeys(p.pack for p in deps)),
                    tuple(_rel(root, p.path) for p in own), dep_subjects, where, files, base.commit or "",
                    tuple(ev.typed), _backed(root, manifest, pack, base_name, own_diff),
                    pack_threads(tracking, pack))


def pack_threads(tracking: Tracking, pack: Pack) -> frozenset[str]:
    """The threads a body of ``pack`` may cite: its own threads and related decisions, and those of the packs it
    depends on (owner/repo#N, lower case)."""
    out = set()
    for p in [pack, *(tracking.packs[d] for d in pack.depends_on if d in tracking.packs)]:
        out |= {thread_label(t.url).lower() for t in p.threads if "/commit/" not in t.url}
        out |= {d.ref.lower() for d in p.related if "#" in d.ref}
    return frozenset(out)


def _backed(root: Path, manifest: pins.Manifest, pack: Pack, base_name: str, own_diff: str) -> frozenset[str]:
    """The facts of the PR template's boxes that the records back: ``adds_tests`` where the series adds tests and
    a patched run of the upstream's tests at the filing base passed (its latest receipt); ``formatted`` where the
    upstream's formatters are among its checks (``harness export`` refuses a series they would rewrite)."""
    out = set()
    if pr_template.touches_tests(own_diff):
        latest = receipts.latest_by_lane(root, pack.target, pack.id)
        if any(lane.base == base_name and lane.patched and (lane.upstream_tests or lane.suite)
               and lane.name in latest and latest[lane.name].verdict == receipts.Verdict.PASS for lane in pack.lanes):
            out.add("adds_tests")
    if any(c.kind == "format" for c in manifest.policy.checks):
        out.add("formatted")
    return frozenset(out)


def _under_table(text: str, note: str) -> str:
    """``note`` right under the evidence table (before its notes and folded hosts), where a reader of the rows is."""
    if not note:
        return text
    lines = text.split("\n\n", 1)
    return "\n\n".join([lines[0], note, *lines[1:]])


def _rel(root: Path, path: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def recorded_threads(tracking: Tracking) -> frozenset[str]:
    """Every upstream thread tracking.toml records (threads and related decisions of every pack), as
    'owner/repo#N' in lower case: what a body may cite."""
    out = set()
    for p in tracking.packs.values():
        out |= {thread_label(t.url).lower() for t in p.threads if "/commit/" not in t.url}
        out |= {d.ref.lower() for d in p.related if "#" in d.ref}
    return frozenset(out)


def _evidence_builds(root: Path, used: list[receipts.Receipt], patches: list, pack_id: str) -> list[str]:
    """An evidence figure measured on another build than the one filed: a patched run whose applied patches are
    not exactly the series exported for the filing base (another pack's patches under it, or other content)."""
    filed = {(_rel(root, p.path), p.sha256) for p in patches}
    out = []
    for rec in used:
        if not rec.patched:
            continue
        applied = {(r.file, r.sha256) for r in rec.patches}
        if applied == filed:
            continue
        extra = {f for f, _ in applied - filed}
        missing = {f for f, _ in filed - applied}
        older = sorted(extra & missing)  # the same file name, other content: an earlier version of that patch
        parts = ([f"an older version of {', '.join(older)}"] if older else []) \
            + ([f"{', '.join(sorted(extra - missing))} applied"] if extra - missing else []) \
            + ([f"without {', '.join(sorted(missing - extra))}"] if missing - extra else [])
        out.append(f"evidence build: {rec.lane} was measured with {'; '.join(parts)} of the series filed for pack "
                   f"{pack_id}; measure the exported series, or stack what it ran on under it")
    return out


def _expected(root: Path, pack: Pack) -> str:
    """What the minimal reproducer prints as expected (its ``print("expected: ...")`` line), as a sentence."""
    if not pack.minimal_repro:
        return ""
    text = (root / pack.minimal_repro).read_text(encoding="utf-8")
    m = re.search(r"""print\(f?(["'])expected: (.+?)\1\)""", text)
    if m is None or "{" in m.group(2):
        return ""
    said = m.group(2).strip()
    return said[:1].upper() + said[1:].rstrip(".") + "."


def _in_issue_form(root: Path, manifest: pins.Manifest, base, pack: Pack, values: dict[str, str], diff: str,
                   problems: list[str]) -> tuple[str, str, tuple[str, ...]] | None:
    """(body, form path, its section lines) of an issue filed in the upstream's own form; None where the upstream
    has no fitting form and takes blank issues (the template's layout is used), or its forms could not be read."""
    found = forms.read_forms(manifest, base)
    if found.problem:
        problems.append(found.problem)
    if found.forms is None:
        return None
    form = forms.choose(found.forms, forms.purpose_of(pack), repo_slug(manifest.repo) or manifest.repo)
    if form is None:
        return None
    has = {forms.role_of(s) for s in form.sections}
    change = values["change"]
    if change and diff:
        change += "\n\nThe patch below does this; we can open it as a pull request.\n\n" + diff
    expected = _expected(root, pack)
    context = []
    if "change" not in has and (expected or "expected" not in has) and change:
        context.append(change)
    context.append("Measurements:\n\n" + values["evidence"])
    if "alternatives" not in has and values["related"]:
        context.append(values["related"])
    parts = {
        "problem": "\n\n".join(p for p in (values["problem"], values["where"]) if p),
        "reproducer": values["reproducer"],
        "change": change if "change" in has else "",
        "expected": expected or (change if "change" not in has else ""),
        "alternatives": values["related"],
        "version": values["base"],
        "context": "\n\n".join(context),
    }
    body, form_problems = forms.fill(form, parts)
    problems += form_problems
    return body, form.path, tuple(forms.headings(form))


def _linked_issue(manifest: pins.Manifest, base, pack: Pack, values: dict[str, str], template: str | None,
                  problems: list[str]) -> tuple[str, str] | None:
    """(title, body) of the issue a PR links, where the upstream's PR template asks an outside contributor for
    one (a feature request for a pack of class 'feature', else a bug report) and no thread of the pack is it;
    None otherwise."""
    purpose = forms.purpose_of(pack)
    if not template or not pr_template.asks_linked_issue(template, purpose == "feature"):
        return None
    if any(t.role in ("fixes", "feature request") for t in pack.threads):
        return None
    found = forms.read_forms(manifest, base)
    if found.forms is None:
        problems.append(found.problem or "the upstream's issue forms could not be read for the linked issue")
        return None
    form = forms.choose(found.forms, purpose, repo_slug(manifest.repo) or manifest.repo)
    # the need, in this issue; the change, its measurements and the script behind them, in the pull request only
    wanted = f"The pull request that links here does this: {values['title'].rstrip('.')}."
    context = "The pull request carries the change, its measurements and the script behind them."
    parts = {"problem": "\n\n".join(p for p in (values["problem"], values["where"]) if p),
             "change": wanted if purpose == "feature" else "",
             "expected": wanted if purpose != "feature" else "",
             "alternatives": values["related"],
             "reproducer": "" if purpose == "feature" else "The script attached to the pull request shows it.",
             "context": context if purpose == "feature" else context + ("\n\n" + values["related"]
                                                                        if values["related"] else "")}
    if form is None:
        return pack.title, "\n\n".join(p for p in parts.values() if p) + "\n"
    body, form_problems = forms.fill(form, parts)
    problems += [f"linked issue: {p}" for p in form_problems]
    return pack.title, body


def _upstream_template(manifest: pins.Manifest, base, body: str, diff: str, pack: Pack, problems: list[str],
                       with_linked_issue: bool = False) -> str:
    """``body`` inside the upstream's own PR template at the filing base, when it has one."""
    found = pr_template.read_template(manifest, base)
    if found.problem:
        problems.append(found.problem)
    if found.text is None:
        return body
    fixes = [thread_label(t.url) for t in pack.threads
             if t.role in ("fixes", "feature request") and "/issues/" in t.url]
    verb = "Closes" if pack.cls == "feature" else "Fixes"
    linked = [f"Fixes {label}" for label in fixes] + ([f"{verb} {LINKED_ISSUE}"] if with_linked_issue else [])
    decided = pack.lint_decision(base.name)
    formatted = any(c.kind == "format" and c.applies_at(base.name) for c in manifest.policy.checks)
    facts = pr_template.Facts(adds_tests=pr_template.touches_tests(diff), linked=", ".join(linked),
                              formatted=formatted and (decided is None or decided.decision == "format-commit"))
    if decided is not None:
        body = body.rstrip("\n") + "\n\n" + lint_at_base_note(decided) + "\n"
    return pr_template.fill(found.text, body, facts)


def lint_at_base_note(decided) -> str:
    """What the body says about changed files that the upstream's whole-file lint fails at the base already."""
    files = ", ".join(f"`{f}`" for f in decided.files)
    said = (f"At `{decided.base}`, {files} already fail the upstream's linting job (its formatters and linters on "
            "whole changed files) before this change.")
    if decided.decision == "leave":
        return (f"{said} This PR leaves their formatting as it is ({decided.reason}), so the job reports those "
                "files, and the autoformatter box is left unticked.")
    return f"{said} A separate commit of this PR only reformats them ({decided.reason})."


def _outside_code(body: str, edit) -> str:
    """``edit`` applied to the text between fenced code blocks; the blocks stay as they are."""
    parts = re.split(r"(^```[^\n]*\n.*?^```[ \t]*$)", body, flags=re.M | re.S)
    return "".join(part if i % 2 else edit(part) for i, part in enumerate(parts))
