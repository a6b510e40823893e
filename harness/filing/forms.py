"""The upstream's issue forms, as data: read from the filing base's tree, chosen by the pack's kind, filled.

An upstream says how it takes issues in ``.github/ISSUE_TEMPLATE/``: YAML issue forms (``body`` items with an
``id``, a ``label`` and ``validations.required``), Markdown templates (front matter, then ``**Section**`` or
``## Section`` headings with instructions under them) and ``config.yml`` (``blank_issues_enabled``).
``read_forms`` reads them at the base's commit from a local mirror (never from the network); ``choose`` picks
the bug-report or the feature-request form for a pack and refuses a kind the upstream does not take (a blank
issue where blank issues are off, a feature request where it has no such form); ``fill`` renders the body's
parts into the form's sections, as GitHub shows a submitted form. Each section keeps its label; one the body
has nothing for says so. The YAML read is the small subset issue forms use (no YAML library is needed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError
from harness.filing.pr_template import pinned_files, pinned_has
from harness.upstream import pins

FORMS_DIR = ".github/ISSUE_TEMPLATE"
ISSUE_KINDS = ("issue", "bug-report")  # pack kinds filed as a new issue (in the upstream's form when it has one)


@dataclass(frozen=True)
class Section:
    label: str
    required: bool = False
    id: str = ""
    type: str = "textarea"  # a YAML form's item type; "section" for a Markdown template's heading


@dataclass(frozen=True)
class IssueForm:
    path: str  # in the upstream tree
    name: str
    labels: tuple[str, ...]
    sections: tuple[Section, ...]
    markdown: bool  # a Markdown template (else a YAML issue form)

    @property
    def purpose(self) -> str:
        """'bug', 'feature' or 'other', from the form's name, file name and labels."""
        text = " ".join((self.name, Path(self.path).stem, *self.labels)).lower()
        if re.search(r"feature|enhancement", text):
            return "feature"
        if re.search(r"\bbug", text):
            return "bug"
        return "other"


@dataclass(frozen=True)
class Forms:
    commit: str
    blank_issues: bool  # config.yml's blank_issues_enabled (GitHub's default: true)
    issue_forms: tuple[IssueForm, ...]


@dataclass(frozen=True)
class Lookup:
    forms: Forms | None
    problem: str | None = None


def read_forms(manifest: pins.Manifest, base) -> Lookup:
    """The issue forms in the tree of ``base`` (a git base), read from a mirror; a release base has none read."""
    pin = getattr(base, "git", None)
    if pin is None:
        return _recorded(manifest)
    sources, _missing = pins.git_sources(pin)
    mirrors = [s for s in sources if Path(s).is_dir()]
    if not mirrors:
        return Lookup(None, f"the issue forms ({FORMS_DIR}) of {manifest.target} at {pin.commit[:10]} were not read: "
                            f"no mirror of {pin.url} (${pins.MIRRORS_ENV})")
    for mirror in mirrors:
        if not pinned_has(mirror, pin.commit):
            continue
        # exactly the pinned commit's tree: its regular files, by object id, no replacement objects
        return Lookup(parse_forms(pin.commit, pinned_files(mirror, pin.commit, FORMS_DIR)))
    return Lookup(None, f"the issue forms ({FORMS_DIR}) of {manifest.target} were not read: no mirror holds "
                        f"{pin.commit[:10]}")


def _recorded(manifest: pins.Manifest) -> Lookup:
    """For a release base (no tree to read): the forms recorded under ``templates/upstream/<target>/`` with their
    source commit, when the repository has them; else none."""
    from harness.filing.pr_template import recorded_commit, recorded_dir, recorded_files

    directory = recorded_dir(manifest)
    if directory is None:
        return Lookup(None)
    files = recorded_files(directory, FORMS_DIR)  # a link there, or another kind of file: ConfigError
    if not files:
        return Lookup(None)
    return Lookup(parse_forms(recorded_commit(directory), files))


def parse_forms(commit: str, files: dict[str, str]) -> Forms:
    """``files`` (name -> text, the directory's files) as data."""
    blank = True
    forms = []
    for name in sorted(files):
        text = files[name]
        if name in ("config.yml", "config.yaml"):
            m = re.search(r"^blank_issues_enabled:\s*(\w+)", text, re.M)
            blank = m is None or m.group(1).lower() != "false"
        elif name.endswith((".yml", ".yaml")):
            forms.append(parse_yaml_form(f"{FORMS_DIR}/{name}", text))
        elif name.endswith(".md"):
            forms.append(parse_markdown_template(f"{FORMS_DIR}/{name}", text))
    return Forms(commit, blank, tuple(forms))


def _scalar(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _list(value: str) -> tuple[str, ...]:
    value = value.strip()
    if value.startswith("[") and value.endswith("]"):
        return tuple(_scalar(v) for v in value[1:-1].split(",") if v.strip())
    return (_scalar(value),) if value else ()


def parse_yaml_form(path: str, text: str) -> IssueForm:
    """A YAML issue form: its name, labels and, per body item (markdown items carry no input), label/id/required."""
    lines = text.splitlines()
    name, labels = "", tuple[str, ...]()
    sections: list[Section] = []
    item: dict | None = None
    item_indent = 0
    in_validations = False

    def close() -> None:
        if item is not None and item.get("type") != "markdown" and item.get("label"):
            sections.append(Section(item["label"], item.get("required", False), item.get("id", ""), item["type"]))

    for i, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        if (m := re.match(r"^(\s*)- type:\s*(\S+)", line)) is not None:  # body items may sit at column 0
            close()
            item, item_indent, in_validations = {"type": _scalar(m.group(2))}, len(m.group(1)), False
            continue
        if indent == 0:
            close()
            item = None
            if (m := re.match(r"^name:\s*(.*)$", line)) is not None:
                name = _scalar(m.group(1))
            elif (m := re.match(r"^labels:\s*(.*)$", line)) is not None:
                labels = _list(m.group(1))
            continue
        if item is None or indent <= item_indent:
            continue
        stripped = line.strip()
        if stripped.startswith("- "):
            continue  # an option of a dropdown or a checkbox list: not a section
        key, _, value = stripped.partition(":")
        if key == "validations":
            in_validations = True
        elif key == "attributes":
            in_validations = False
        elif key == "id" and "id" not in item:
            item["id"] = _scalar(value)
        elif key == "label" and "label" not in item and not in_validations:
            label = _scalar(value)
            if label in (">", ">-", "|", "|-"):  # a folded label: its more-indented lines
                parts = []
                for nxt in lines[i + 1:]:
                    if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                        break
                    parts.append(nxt.strip())
                label = " ".join(p for p in parts if p)
            item["label"] = label
        elif key == "required" and in_validations:
            item["required"] = value.strip().lower() == "true"
    close()
    return IssueForm(path, name, labels, tuple(sections), markdown=False)


# matched against a stripped line: no trailing ``\s*`` after a lazy group (one long line would take quadratic time)
_MD_SECTION = re.compile(r"^(?:\*\*(?P<bold>[^*]+)\*\*|#{1,6}\s+(?P<heading>.+))$")


def parse_markdown_template(path: str, text: str) -> IssueForm:
    """A Markdown template: front matter (name, labels) and its sections, each a ``**Label**`` or heading line."""
    name, labels, body = "", tuple[str, ...](), text
    m = re.match(r"^---\n(.*?)\n---\n?(.*)$", text, re.S)
    if m is not None:
        front, body = m.group(1), m.group(2)
        if (n := re.search(r"^name:\s*(.*)$", front, re.M)) is not None:
            name = _scalar(n.group(1))
        if (n := re.search(r"^labels:\s*(.*)$", front, re.M)) is not None:
            labels = tuple(v for v in _list(n.group(1)) if v)
    sections = []
    for line in body.splitlines():
        if (s := _MD_SECTION.match(line.strip())) is not None:
            sections.append(Section((s.group("bold") or s.group("heading")).strip(), type="section"))
    return IssueForm(path, name, labels, tuple(sections), markdown=True)


def purpose_of(pack) -> str:
    """The form a pack's issue needs: a feature request for class 'feature', else a bug report."""
    return "feature" if pack.cls == "feature" else "bug"


class FormError(ConfigError):
    """The upstream does not take an issue of this kind (or its forms could not be matched)."""


def choose(forms: Forms, purpose: str, repo: str) -> IssueForm | None:
    """The form for ``purpose``; None where the upstream has none and takes blank issues; else FormError."""
    fitting = [f for f in forms.issue_forms if f.purpose == purpose]
    if fitting:
        return fitting[0]
    if forms.blank_issues:
        return None
    have = ", ".join(f"{f.path} ({f.purpose})" for f in forms.issue_forms) or "none"
    raise FormError(f"{repo} at {forms.commit[:10]} takes no blank issues (config.yml: blank_issues_enabled: false) "
                    f"and has no {purpose} form; its forms: {have}")


# (label pattern, the part of the body that fills it); a section no pattern names says there is nothing for it
ROLES = (
    (re.compile(r"reproduc|steps|to reproduce", re.I), "reproducer"),
    (re.compile(r"expected", re.I), "expected"),
    (re.compile(r"alternative", re.I), "alternatives"),
    (re.compile(r"solution|proposed fix|how to fix", re.I), "change"),
    (re.compile(r"describe the (?:bug|regression|problem)|related to a problem|what happened|motivation"
                r"|^description|problem", re.I), "problem"),
    (re.compile(r"version", re.I), "version"),
    (re.compile(r"system|environment", re.I), "environment"),
    (re.compile(r"additional context|context", re.I), "context"),
)
NOTHING = "Nothing to add."


def role_of(section: Section) -> str | None:
    return next((role for pattern, role in ROLES if pattern.search(section.label)), None)


def fill(form: IssueForm, parts: dict[str, str]) -> tuple[str, list[str]]:
    """(the body in ``form``'s sections, problems): each section's label as the form shows it, then its part.
    A required section without a part is a problem; an optional one says there is nothing to add."""
    out, problems, used = [], [], set()
    present = {role_of(s) for s in form.sections}
    moved = [r for r in ("change", "reproducer") if parts.get(r) and r not in present]
    if moved and "context" in present:  # a part the form has no section for goes under its additional context
        parts = {**parts, "context": "\n\n".join([*(parts[r] for r in moved), parts.get("context", "")]).strip()}
        parts.update({r: "" for r in moved})
    for section in form.sections:
        role = role_of(section)
        text = (parts.get(role) or "").strip() if role and role not in used else ""
        if role:
            used.add(role)
        if not text and section.required:
            problems.append(f"{form.path}: required section '{section.label}' has nothing to fill it")
        heading = f"**{section.label}**" if form.markdown else f"### {section.label}"
        out += [heading, "", text or NOTHING, ""]
    left = [role for role in ("problem", "change", "reproducer") if parts.get(role) and role not in used]
    if left:
        problems.append(f"{form.path}: no section takes the body's {', '.join(left)}")
    return "\n".join(out).strip() + "\n", problems


def headings(form: IssueForm) -> list[str]:
    """The section lines a body filed in ``form`` must keep (the body check requires each)."""
    return [f"**{s.label}**" if form.markdown else f"### {s.label}" for s in form.sections]
