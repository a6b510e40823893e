"""The parts of a body computed from the patch series: the commit message (subject, paragraphs), the upstream
file, line and function of every hunk, the diff, and how the filed base is named to a maintainer."""

from __future__ import annotations

import ast
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
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    # the header as a mail reader takes it: folded lines joined, RFC 2047 words (a non-ASCII subject) decoded
    subject = series.subject_of(text)
    i = 0
    while i < len(lines) and lines[i] != "":
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


def _where(manifest: pins.Manifest, base, own: list[series.Patch], under: list[series.Patch] | None = None,
           files: dict[str, str] | None = None) -> str:
    """The "Where" list: each changed line's file, base line and enclosing symbol. With ``files`` (the touched
    files as the filing base has them, ``tree_files``) the anchors come from the patched tree's syntax
    (``syntax_locations``); without, from the hunks (``hunk_locations``)."""
    if files is not None:
        locations = syntax_locations([p.path for p in under or []], [p.path for p in own], files)
    else:
        locations = [loc for patch in own for loc in hunk_locations(patch.path)]
    return where_list(manifest, base, locations, files)


def where_list(manifest: pins.Manifest, base, locations: list[Location], files: dict[str, str] | None = None) -> str:
    groups: dict[tuple[str, str], list[int]] = {}
    for loc in locations:
        groups.setdefault((loc.path, loc.context), []).append(loc.line)
    if not groups:
        return ""
    slug = repo_slug(manifest.repo)
    items = []
    for (path, context), lines in groups.items():
        first, last = min(lines), max(lines)
        span = f"line {first}" if len(lines) == 1 else f"lines {first}-{last} ({len(lines)} places)"
        ref = f"`{path}` {span}"
        # a link only to a line the file has at that commit (a new file, or none read: no link)
        exists = files is None or (path in files and first <= max(1, len(files[path].splitlines())))
        if base.commit and slug and exists:
            ref = f"[{ref}](https://github.com/{slug}/blob/{base.commit}/{path}#L{first})"
        if context.startswith("after "):
            items.append(f"- {ref}, new code after `{context[6:]}`")
        else:
            items.append(f"- {ref}" + (f", in `{context}`" if context else ""))
    return f"Where, in {base_label(manifest, base)}:\n\n" + "\n".join(items)


# ------------------------------------------------------------------------------------------ anchors from syntax

@dataclass
class _Hunk:
    old_start: int
    new_start: int
    lines: list[str]  # ' ', '-', '+' prefixed


def _file_hunks(path: Path) -> list[tuple[str, str | None, list[_Hunk]]]:
    """(new path, old path or None for a new file, hunks) for each file a format-patch changes."""
    out: list[tuple[str, str | None, list[_Hunk]]] = []
    old_path: str | None = None
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("diff --git "):
            m = re.match(r"^diff --git a/(.+) b/(.+)$", line)
            out.append((m.group(2) if m else line[11:], m.group(1) if m else None, []))
            old_path = m.group(1) if m else None
        elif line.startswith("--- ") and out:
            old_path = None if line[4:].strip() == "/dev/null" else old_path
            out[-1] = (out[-1][0], old_path, out[-1][2])
        elif line.startswith("+++ "):
            continue
        elif (m := re.match(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@", line)) is not None and out:
            out[-1][2].append(_Hunk(int(m.group(1)), int(m.group(2)), []))
        elif out and out[-1][2] and line[:1] in (" ", "-", "+", ""):
            out[-1][2][-1].lines.append(line if line else " ")
        elif out and out[-1][2] and line.startswith("\\"):
            continue
    return out


# A line of a file being patched: its text and its line number in the filing base (None: added by a patch).
_Line = tuple[str, "int | None"]


def _apply(lines: list[_Line], hunks: list[_Hunk]) -> tuple[list[_Line], list[tuple[_Hunk, int]]]:
    """``lines`` with ``hunks`` applied (each hunk where its old lines are, nearest its stated start); and each hunk
    with the 0-based index of its first line in the result."""
    out: list[_Line] = []
    placed: list[tuple[_Hunk, int]] = []
    pos = 0
    texts = [t for t, _ in lines]
    for hunk in hunks:
        old = [ln[1:] for ln in hunk.lines if ln[:1] in (" ", "-")]
        at = hunk.old_start - 1 if old else hunk.old_start
        if texts[at:at + len(old)] != old:
            found = [i for i in range(pos, len(texts) - len(old) + 1) if texts[i:i + len(old)] == old]
            if not found:
                raise ValueError(f"hunk at line {hunk.old_start} does not apply")
            at = min(found, key=lambda i: abs(i - at))
        out += lines[pos:at]
        placed.append((hunk, len(out)))
        i = at
        for ln in hunk.lines:
            if ln[:1] == "+":
                out.append((ln[1:], None))
            else:
                if ln[:1] == " ":
                    out.append(lines[i])
                i += 1
        pos = i
    out += lines[pos:]
    return out, placed


def _scopes(text: str) -> list[tuple[int, int, str, int]] | None:
    """(first line, last line, name, depth) of every def and class of ``text`` that a reader would name: top-level
    ones and the methods of classes (``Class.method``); what a function defines inside itself is part of that
    function. None if ``text`` does not parse as Python."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    out: list[tuple[int, int, str, int]] = []

    def walk(node: ast.AST, prefix: str, depth: int) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                name = f"{prefix}{child.name}"
                out.append((start, child.end_lineno or child.lineno, name, depth))
                if isinstance(child, ast.ClassDef):
                    walk(child, name + ".", depth + 1)
            elif not isinstance(child, (ast.expr, ast.Lambda)):
                walk(child, prefix, depth)

    walk(tree, "", 0)
    return out


def _enclosing(scopes: list[tuple[int, int, str, int]], line: int, added: frozenset[int] = frozenset()) -> str:
    """The innermost scope holding ``line`` that the change does not add whole (a new method is anchored to its
    class, a new top-level def to nothing: the caller says what it follows)."""
    inside = [s for s in scopes if s[0] <= line <= s[1]
              and not all(i in added for i in range(s[0], s[1] + 1))]
    return max(inside, key=lambda s: s[3])[2] if inside else ""


def _top_level_before(text: str, line: int, changed: set[int]) -> str:
    """What new top-level code at ``line`` (1-based) follows: the nearest earlier top-level statement that the
    change leaves alone -- a def or class by its name, else its whole first line."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return ""
    source = text.splitlines()
    before = [n for n in tree.body if (n.end_lineno or n.lineno) < line
              and not all(i in changed for i in range(n.lineno, (n.end_lineno or n.lineno) + 1))]
    if not before:
        return ""
    node = before[-1]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    return source[node.lineno - 1].strip()


def syntax_locations(under: list[Path], own: list[Path], files: dict[str, str]) -> list[Location]:
    """Every changed line of ``own`` (format-patches applied in order after ``under``, onto ``files``: path ->
    the filing base's text) with its file, the filing base's line it changes (or is inserted before; after the
    last line for an addition at the end) and its anchor, read from the syntax of the tree the patch makes: the
    innermost function or class that holds the line (``Class.method``), or for new top-level code ``after X``,
    X the def or class (or the whole line) it follows. Consecutive lines with one anchor are one location.
    A file that is not Python, or that no patch leaves parseable, keeps the hunk header's anchor."""
    state: dict[str, list[_Line]] = {}

    def current(path: str, old: str | None) -> list[_Line]:
        if path not in state:
            text = files.get(old or path, "") if old is not None else ""
            state[path] = [(t, i) for i, t in enumerate(text.splitlines(), 1)]
        return state[path]

    out: list[Location] = []
    for patch in [*under, *own]:
        mine = patch in own
        for path, old, hunks in _file_hunks(patch):
            before = current(path, old)
            try:
                after, placed = _apply(before, hunks)
            except ValueError:
                if mine:
                    out += [loc for loc in hunk_locations(patch) if loc.path == path]
                state[path] = before
                continue
            state[path] = after
            if not mine:
                continue
            new_text = "\n".join(t for t, _ in after) + "\n"
            old_text = "\n".join(t for t, _ in before) + "\n"
            new_scopes, old_scopes = _scopes(new_text), _scopes(old_text)
            if new_scopes is None or old_scopes is None or not path.endswith(".py"):
                out += [loc for loc in hunk_locations(patch) if loc.path == path]
                continue
            total = len([n for _, n in before if n is not None])
            added_at: set[int] = set()
            for hunk, start in placed:  # the new-side lines each hunk adds (1-based), for _top_level_before
                n = start
                for ln in hunk.lines:
                    if ln[:1] == "+":
                        added_at.add(n + 1)
                    if ln[:1] in (" ", "+"):
                        n += 1
            frozen = frozenset(added_at)
            for hunk, start in placed:
                new_no, old_idx = start, None
                # the index in ``before`` of the hunk's first old line
                old_lines = [ln for ln in hunk.lines if ln[:1] in (" ", "-")]
                old_idx = _index_of(before, [ln[1:] for ln in old_lines], hunk.old_start)
                last: tuple[str, int] | None = None
                for ln in hunk.lines:
                    kind = ln[:1]
                    if kind == " ":
                        new_no, old_idx, last = new_no + 1, old_idx + 1, None
                        continue
                    if kind == "-":
                        base_no = _base_line(before, old_idx, total)
                        anchor = _enclosing(old_scopes, old_idx + 1)
                        old_idx += 1
                    else:
                        new_no += 1
                        if not ln[1:].strip():
                            continue  # a blank line belongs to the code around it
                        base_no = _base_line(before, old_idx, total)
                        anchor = _enclosing(new_scopes, new_no, frozen)
                        if not anchor and ln[1:].startswith("#"):
                            continue  # a top-level comment goes with the code it comments
                        if not anchor and ln[1:2] not in ("", " ", "\t", "#"):
                            follows = _top_level_before(new_text, new_no, added_at)
                            anchor = f"after {follows}" if follows else ""
                        elif not anchor and last is not None:
                            continue  # the indented rest of new top-level code
                    if last is not None and last[0] == anchor:
                        continue
                    last = (anchor, base_no)
                    out.append(Location(path, base_no, anchor))
    return out


def _index_of(lines: list[_Line], old: list[str], start: int) -> int:
    texts = [t for t, _ in lines]
    at = start - 1 if old else start
    if texts[at:at + len(old)] == old:
        return at
    found = [i for i in range(len(texts) - len(old) + 1) if texts[i:i + len(old)] == old]
    return min(found, key=lambda i: abs(i - at)) if found else at


def _base_line(lines: list[_Line], idx: int, total: int) -> int:
    """The filing base's line at or after index ``idx`` of ``lines`` (the line a change replaces or goes
    before); an addition after the base's last line is placed on that last line."""
    for _, n in lines[idx:]:
        if n is not None:
            return n
    for _, n in reversed(lines[:idx]):
        if n is not None:
            return n
    return max(1, total)
