"""The parts of a body computed from the patch series: the commit message (subject, paragraphs), the upstream
file, line and function of every hunk, the diff, and how the filed base is named to a maintainer."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness import pins, series
from harness.github import repo_slug


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

