"""The parts of a body computed from the patch series: the commit message (subject, paragraphs), the upstream
file, line and function of every hunk, the diff, and how the filed base is named to a maintainer."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness.lane import series
from harness.upstream import pins
from harness.upstream.github import repo_slug


@dataclass(frozen=True)
class Message:
    subject: str
    paragraphs: tuple[str, ...]


_TRAILER = re.compile(r"^(?:Upstream-Status|Pack):")
ITEM = re.compile(r"^(?:[-*]|\d+[.)])\s")  # a list item



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
    paragraphs: list[str] = []
    current: list[str] = []
    for line in body + [""]:
        if line.strip():
            current.append(line)
        elif current:
            if current[0][:1] in (" ", "\t") and paragraphs and _is_list(paragraphs[-1]):
                # an indented paragraph after a list item is that item's next paragraph
                paragraphs[-1] += "\n\n  " + _unwrap(current)
            else:
                paragraphs.append(_unwrap(current))
            current = []
    return Message(subject, tuple(paragraphs))


def split_problem(paragraphs: tuple[str, ...] | list[str]) -> tuple[list[str], list[str]]:
    """(problem, the rest) of a message's paragraphs: the first paragraph, kept together with what it
    introduces -- a paragraph ending in ':' takes the next one, and a list runs on over the list
    paragraphs that follow it."""
    paras = list(paragraphs)
    if not paras:
        return [], []
    n = 1
    while n < len(paras):
        last = paras[n - 1].rstrip()
        if last.endswith(":") or (_is_list(paras[n - 1]) and _is_list(paras[n])):
            n += 1
        else:
            break
    return paras[:n], paras[n:]


def _is_list(paragraph: str) -> bool:
    """Every line an item, or an indented continuation of one."""
    lines = [line for line in paragraph.splitlines() if line.strip()]
    return bool(lines) and ITEM.match(lines[0]) is not None and \
        all(ITEM.match(line) or line[:1] in (" ", "\t") for line in lines)


def _unwrap(lines: list[str]) -> str:
    """One paragraph of a hard-wrapped message as one line; list items one per line."""
    items: list[str] = []
    for line in lines:
        if ITEM.match(line.lstrip()) or not items:
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
    """For each hunk: the file, the first base line it changes (or inserts before), and its anchor.

    An anchor is whole, never cut: the function or class the hunk is in (``in name``), the one a new
    top-level block follows (``after name``), or, for top-level code after anything else (imports,
    constants), the whole base line it follows (``after <line>``); else none. Git's hunk-header text is
    used only when it names a ``def`` or ``class`` (git cuts that text to a fixed width).
    """
    out: list[Location] = []
    current, line_no, pending, context, previous = "?", 0, False, "", ""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("diff --git "):
            m = re.match(r"^diff --git a/(.+) b/(.+)$", line)
            current, pending = (m.group(2) if m else line[11:]), False
        elif (m := _HUNK.match(line)) is not None:
            line_no, pending, previous = int(m.group(1)), True, ""
            named = _CONTEXT_NAME.search(m.group(2).strip())
            context = named.group(1) if named else ""
        elif pending:
            if line.startswith(" "):
                line_no += 1
                previous = line[1:]
            elif line[:1] in ("-", "+"):
                # new top-level code: git names the function before it, but it is not in it
                top_level = line[:1] == "+" and line[1:2] not in ("", " ", "\t", "#")
                if top_level and context:
                    anchor = f"after {context}"
                elif top_level and previous.strip() and previous[:1] not in (" ", "\t"):
                    anchor = f"after {previous.strip()}"
                else:
                    anchor = context
                out.append(Location(current, line_no, anchor))
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
    if not base.commit:
        return f"{manifest.distribution} {base.version}"
    # a git base's version names its commit already ("main@d98e8a6"): name the branch and the commit once
    name, _, short = str(base.version).partition("@")
    return f"{slug} {name if short and base.commit.startswith(short) else base.version} at {base.commit[:10]}"


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

