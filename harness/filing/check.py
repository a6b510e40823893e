"""The body check: what a maintainer needs to read a body in two minutes, each failure named by its line.

Rules (``docs/body-check.md`` explains them; ``check`` returns every finding, ``lint`` findings included):

* ``layout``: a sentence ending in ':' is followed by what it introduces (a list, code, a table, a quote, a
  folded block), never by a heading or another paragraph;
* ``budget``: words of prose at most ``BUDGETS[kind]`` (code blocks, tables, ``<details>`` blocks, link
  targets and the upstream template's checklist lines are not counted);
* ``cut anchor``: a "Where" item names a whole symbol or a whole line of the diff, never a cut one;
* ``evidence base``: every evidence row is read from a lane on the filing base;
* ``name``: an identifier in the prose that the diff spells differently (a near miss of a name the change
  adds, itself absent from the whole diff, context and removed lines included, and from the touched files as
  the filing base has them: a real upstream name the change leaves alone is no misspelling);
* the lint rules (``filing.lint``): nothing private, none of this repository's vocabulary.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass

from harness.filing.body import LINKED_ISSUE, Rendered
from harness.filing.lint import Finding
from harness.filing.parts import ITEM
from harness.filing.reproducer import PLACEHOLDER

BUDGETS = {"pr": 350, "issue": 350, "bug-report": 350, "comment": 250}  # words of prose
NEAR_MISS = 0.85  # difflib ratio from which two distinct names count as one misspelt

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^#{1,6}\s")
_CHECKBOX = re.compile(r"^\s*[-*]\s\[[ xX]\]\s")
_LINK = re.compile(r"\]\([^)\s]*\)")
_ANCHOR = re.compile(r", (?:new code after|in) `([^`]+)`")
_IDENT = re.compile(r"(?<![\w.:/-])([A-Za-z_][A-Za-z0-9_]*)(?![\w(:/-])")
_SYMBOL = re.compile(r"[A-Za-z_][\w.]*")


@dataclass(frozen=True)
class Block:
    """A run of body lines of one kind: prose, list, heading, code, table, details, quote."""

    kind: str
    start: int  # 1-based line of its first line
    lines: tuple[str, ...]
    info: str = ""  # a code block's language


def blocks(body: str) -> list[Block]:
    """``body`` cut into blocks; blank lines separate them and belong to none."""
    lines = body.splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        start = i
        if (fence := _FENCE.match(line)) is not None:
            i += 1
            while i < len(lines) and not lines[i].lstrip().startswith(fence.group(1)):
                i += 1
            out.append(Block("code", start + 1, tuple(lines[start:i + 1]), line.strip()[3:].strip()))
            i += 1
            continue
        if line.lstrip().startswith("<details"):
            while i < len(lines) and "</details>" not in lines[i]:
                i += 1
            out.append(Block("details", start + 1, tuple(lines[start:i + 1])))
            i += 1
            continue
        if _HEADING.match(line):
            out.append(Block("heading", i + 1, (line,)))
            i += 1
            continue
        kind = ("table" if line.lstrip().startswith("|") else "quote" if line.lstrip().startswith(">")
                else "list" if ITEM.match(line.lstrip()) else "prose")
        while i < len(lines) and lines[i].strip() and not _FENCE.match(lines[i]) and not _HEADING.match(lines[i]):
            if i > start and kind == "prose" and ITEM.match(lines[i].lstrip()):
                break  # a list right under its sentence
            i += 1
        out.append(Block(kind, start + 1, tuple(lines[start:i])))
    return out


def prose_words(body: str, sections: tuple[str, ...] = ()) -> int:
    """Words a reader reads as prose: not code, tables, folded blocks, link targets, checklist lines or the lines
    of the upstream form's or template's own sections (``sections``)."""
    count = 0
    own = {line.strip() for line in sections}
    for b in blocks(body):
        if b.kind in ("code", "table", "details"):
            continue
        for line in b.lines:
            if _CHECKBOX.match(line) or line.strip() in own:
                continue
            count += len(_LINK.sub("]", line).replace("#", " ").split())
    return count


def _layout(bs: list[Block]) -> list[Finding]:
    found = []
    for here, after in zip(bs, bs[1:], strict=False):
        if here.kind == "prose" and here.lines[-1].rstrip().endswith(":") and after.kind in ("heading", "prose"):
            what = "a heading" if after.kind == "heading" else "another paragraph"
            found.append(Finding(after.start, "layout", f"{what} interrupts the sentence ending in ':' at line "
                                 f"{here.start + len(here.lines) - 1}: {after.lines[0][:60]}"))
    return found


def _diff_lines(diff: str) -> tuple[set[str], set[str], set[str]]:
    """(whole code lines of the diff, every identifier in it, identifiers on its added lines)."""
    whole, known, added = set(), set(), set()
    for line in diff.splitlines():
        if line.startswith(("diff --git", "--- ", "+++ ")):  # file names: a module named in the prose
            known |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", line))
            continue
        if line.startswith(("index ", "@@")) or not line:
            continue
        code = line[1:]
        whole.add(code.strip())
        names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code))
        known |= names
        if line.startswith("+"):
            added |= names
    return whole, known, added


def _anchors(body: str, whole: set[str]) -> list[Finding]:
    found = []
    for no, line in enumerate(body.splitlines(), 1):
        if not ITEM.match(line.lstrip()):
            continue
        for m in _ANCHOR.finditer(line):
            anchor = m.group(1)
            if not _SYMBOL.fullmatch(anchor) and anchor.strip() not in whole:
                found.append(Finding(no, "cut anchor", f"`{anchor}` is neither a symbol nor a whole line of the "
                                                       "diff"))
    return found


def _looks_like_a_name(token: str) -> bool:
    return len(token) >= 6 and ("_" in token.strip("_") or re.search(r"[a-z][A-Z]", token) is not None)


def _names(bs: list[Block], known: set[str], added: set[str]) -> list[Finding]:
    found = []
    candidates = sorted(a for a in added if _looks_like_a_name(a))
    for b in bs:
        if b.kind in ("code", "details"):
            continue
        for offset, line in enumerate(b.lines):
            for m in _IDENT.finditer(_LINK.sub("]", line)):
                token = m.group(1)
                if token in known or not _looks_like_a_name(token):
                    continue
                close = difflib.get_close_matches(token, candidates, n=1, cutoff=NEAR_MISS)
                if close:
                    found.append(Finding(b.start + offset, "name", f"the prose says `{token}`, the diff spells it "
                                                                   f"`{close[0]}`"))
    return found


def _evidence_bases(rendered: Rendered, body: str) -> list[Finding]:
    pack = rendered.pack
    lane_base = {lane.name: lane.base for lane in pack.lanes}
    lines = body.splitlines()
    header = next((i for i, ln in enumerate(lines, 1) if ln.startswith("| what |")), 0)
    found = []
    for i, row in enumerate(pack.evidence, 1):
        base = lane_base.get(row.lane)
        if base is not None and base != rendered.filing_base:
            found.append(Finding(header + 1 + i if header else 0, "evidence base",
                                 f"row {i} is measured at {base}, the body is filed against {rendered.filing_base}"))
    return found


_THREAD = re.compile(r"(?<![\w/.#-])(?:(?P<slug>[\w.-]+/[\w.-]+))?#(?P<num>[1-9][0-9]*)\b")
_CLOSES = re.compile(r"\b(?:fix(?:es|ed)?|close[sd]?|resolve[sd]?)\s+(?:[\w.-]+/[\w.-]+)?#([1-9][0-9]*)", re.I)
_PERF_WORD = re.compile(r"\b(?:faster|slower|speed-?ups?|fewer registers|more registers|less memory|lower memory"
                        r"|higher throughput|lower latency|\d+(?:\.\d+)?\s?[x×])(?![\w])", re.I)
# an evidence table row that carries a measured performance figure (a time, a ratio, registers, memory)
_PERF_ROW = re.compile(r"(?:\bms\b|µs|\bus\b|\bs\b|time|speed|ratio|register|spill|memory|MiB|GiB|bytes|throughput"
                       r"|\d[x×])", re.I)


def _prose_lines(bs: list[Block]):
    for b in bs:
        if b.kind in ("code", "details", "table"):
            continue
        for offset, line in enumerate(b.lines):
            yield b.start + offset, _LINK.sub("]", line)


def _threads(rendered: Rendered, bs: list[Block]) -> list[Finding]:
    """Every thread number the body cites is one the pack records (its threads and related decisions, and its
    dependencies'); 'fixes #N' only for a thread the pack fixes."""
    found = []
    fixes = {t.url.rstrip("/").rsplit("/", 1)[-1] for t in rendered.pack.threads if t.role == "fixes"}
    for b in bs:
        if b.kind == "code":
            continue
        for offset, line in enumerate(b.lines):
            for m in _THREAD.finditer(_LINK.sub("]", line)):
                label = f"{m['slug'] or rendered.home}#{m['num']}".lower()
                if label not in rendered.known_threads:
                    found.append(Finding(b.start + offset, "thread", f"{label} is recorded nowhere (no thread or "
                                                                     "related decision names it)"))
                elif rendered.own_threads and label not in rendered.own_threads:
                    found.append(Finding(b.start + offset, "thread", f"{label} is not a thread of this change (it is "
                                                                     "recorded for another one)"))
    for no, line in _prose_lines(bs):
        for m in _CLOSES.finditer(line):
            if m.group(1) not in fixes:
                found.append(Finding(no, "claim", f"'{m.group(0)}': #{m.group(1)} is not a thread this change "
                                                  "fixes (role 'fixes')"))
    return found


def _performance(bs: list[Block]) -> list[Finding]:
    """A performance word in the prose needs a measured figure in the body's evidence table."""
    rows = [line for b in bs if b.kind == "table" for line in b.lines[2:]]
    backed = any(_PERF_ROW.search(row) and re.search(r"\d", row) for row in rows)
    if backed:
        return []
    return [Finding(no, "claim", f"'{m.group(0)}' with no measured figure in the evidence table")
            for no, line in _prose_lines(bs) for m in _PERF_WORD.finditer(line)]


def _sections(rendered: Rendered, body: str) -> list[Finding]:
    """Every section, field and box of the upstream's form or PR template is still in the body."""
    lines = [ln.rstrip() for ln in body.splitlines()]
    boxes = {re.sub(r"^\s*[-*]\s\[[ xX]\]\s", "", ln) for ln in lines if _CHECKBOX.match(ln)}
    found = []
    for want in rendered.sections:
        if _CHECKBOX.match(want):
            ok = re.sub(r"^\s*[-*]\s\[[ xX]\]\s", "", want) in boxes
        elif want.endswith(":") and not want.startswith(("#", "*")):
            ok = any(ln.startswith(want) for ln in lines)
        else:
            ok = want in lines
        if not ok:
            found.append(Finding(0, "template", f"the upstream's {rendered.form or 'PR template'} has "
                                                f"'{want}', the body does not"))
    return found


_RELATED_LINE = re.compile(r"^- (?P<ref>[\w.-]+/[\w.-]+(?:#\d+|@[0-9a-f]+)) \((?P<what>[^)]*)\): (?P<says>.*)$")
_SAME_CODE = re.compile(r"\bsame (?:code|file|function|kernel|lines?)\b", re.I)
_CAUSED = re.compile(r"\b(?:regress\w*|caused|broke|lost|dropped|introduced)\b", re.I)
_SEPARATE = re.compile(r"\b(?:separate|independent|unrelated)\b", re.I)


def _relations(bs: list[Block]) -> list[Finding]:
    """A related thread in words that are true: another repository's thread is never 'the same code', and one the
    body names as the cause of the problem is no 'separate' change."""
    found = []
    prose = [(no, line) for no, line in _prose_lines(bs) if not _RELATED_LINE.match(line)]
    for no, line in _prose_lines(bs):
        m = _RELATED_LINE.match(line)
        if m is None:
            continue
        if "another repository" in m["what"] and _SAME_CODE.search(m["says"]):
            found.append(Finding(no, "relation", f"{m['ref']} is in another repository; it is not the same code"))
        number = m["ref"].split("#")[-1] if "#" in m["ref"] else None
        if number and _SEPARATE.search(m["says"]):
            cites = [n for n, text in prose if re.search(rf"#{number}\b", text) and _CAUSED.search(text)]
            if cites:
                found.append(Finding(no, "relation", f"{m['ref']} is called separate, while line {cites[0]} names it "
                                                      "in what caused the problem"))
    return found


_WHERE_ITEM = re.compile(r"^- \[?`(?P<path>[^`]+)` lines? (?P<first>\d+)[^\]\n]*?(?:\]\((?P<url>[^)\s]+)\))?"
                         r"(?:, (?P<how>in|new code after) `(?P<anchor>[^`]+)`)?\s*$")
_BLOB = re.compile(r"^https://github\.com/[^/]+/[^/]+/blob/(?P<commit>[0-9a-f]{7,40})/(?P<path>[^#]+)#L(?P<line>\d+)$")


def _where_items(text: str):
    for no, line in enumerate(text.splitlines(), 1):
        m = _WHERE_ITEM.match(line)
        if m is not None:
            anchor = ("after " if m["how"] == "new code after" else "") + (m["anchor"] or "")
            yield no, m["path"], int(m["first"]), anchor, m["url"]


def _where(rendered: Rendered, body: str) -> list[Finding]:
    """Each "Where" item names the symbol the patched tree holds the line in (as computed from its syntax), and
    each of its links points at a line its file has at the commit the link names."""
    computed: dict[tuple[str, int], list[str]] = {}
    for _, path, first, anchor, _ in _where_items(rendered.where):
        computed.setdefault((path, first), []).append(anchor)
    found = []
    for no, path, first, anchor, url in _where_items(body):
        wants = computed.get((path, first))
        if computed and wants is None:
            found.append(Finding(no, "anchor", f"{path} line {first}: the change has no line there"))
        elif computed and wants is not None and anchor not in wants:
            said = f"`{anchor.removeprefix('after ')}`" if anchor else "nothing"
            wanted = " or ".join((f"new code after `{w[6:]}`" if w.startswith("after ") else f"in `{w}`") if w
                                 else "in no symbol" for w in wants)
            found.append(Finding(no, "anchor", f"{path} line {first} names {said}; the patched tree has it {wanted}"))
        m = _BLOB.match(url or "")
        if url and m is None:
            found.append(Finding(no, "anchor", f"{url} is not a link to a line of a file at a commit"))
            continue
        if m is None:
            continue
        if rendered.base_commit and m["commit"] != rendered.base_commit:
            found.append(Finding(no, "anchor", f"the link names commit {m['commit'][:10]}, the body is filed against "
                                               f"{rendered.base_commit[:10]}"))
        files = rendered.base_files
        if files is None:
            continue
        if m["path"] not in files:
            found.append(Finding(no, "anchor", f"{m['path']} does not exist at {m['commit'][:10]}"))
        elif int(m["line"]) > len(files[m["path"]].splitlines()):
            found.append(Finding(no, "anchor", f"{m['path']} has {len(files[m['path']].splitlines())} lines at "
                                               f"{m['commit'][:10]}; the link names line {m['line']}"))
    return found


def _boxes(rendered: Rendered, body: str) -> list[Finding]:
    """A ticked box of the PR template stands for a fact something backs (``Rendered.backed``): the unit-tests box a
    passing patched run of the upstream's tests, the formatter box the upstream's formatters in the export."""
    from harness.filing.pr_template import TICKS

    found = []
    for no, line in enumerate(body.splitlines(), 1):
        m = re.match(r"^\s*[-*]\s\[[xX]\]\s(.*)$", line)
        if m is None:
            continue
        facts = [fact for pattern, fact in TICKS if pattern.search(m.group(1))]
        if not facts or not any(f in rendered.backed for f in facts):
            found.append(Finding(no, "checkbox", f"'{m.group(1)[:60]}' is ticked, and "
                                                 + ("nothing the tool records backs it" if not facts else
                                                    f"no record backs it ({', '.join(facts)})")))
    return found


def _units(text: str) -> list[tuple[int, str]]:
    """(line, text) of the paragraphs, list items, quotes, tables and sentences of ``text`` that a reader reads,
    whitespace-normalised: what two texts must not both say."""
    out = []
    for b in blocks(text):
        if b.kind in ("code", "details", "heading"):
            continue
        if b.kind == "list":
            out += [(b.start + i, " ".join(line.split())) for i, line in enumerate(b.lines)
                    if not _CHECKBOX.match(line)]
            continue
        joined = " ".join(" ".join(b.lines).split())
        out.append((b.start, joined))
        if b.kind == "prose":
            out += [(b.start, sentence) for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z`])", joined)]
    return [(no, u) for no, u in out if len(u.split()) >= 8]


def shared(first: str, second: str) -> list[tuple[int, str]]:
    """(line in ``second``, text) of each paragraph, item or sentence of ``second`` that ``first`` also has."""
    have = {u for _, u in _units(first)}
    seen: set[str] = set()
    out = []
    for no, u in _units(second):
        if u in have and u not in seen:
            seen.add(u)
            out.append((no, u))
    return out


def _one_text(rendered: Rendered) -> list[Finding]:
    """A PR and the issue it links each say their own part: no paragraph, item or sentence in both."""
    if rendered.companion is None:
        return []
    return [Finding(no, "repeated", f"the linked issue says this too: {text[:70]}")
            for no, text in shared(rendered.companion[1], rendered.body)]


# the check's own rules; lint's findings carry lint's rule names
RULES = ("layout", "budget", "cut anchor", "evidence base", "name", "render", "template", "thread", "claim",
         "circular reproducer", "relation", "evidence build", "committed", "incomplete", "anchor", "typed figure",
         "checkbox", "repeated")


def check(rendered: Rendered) -> list[Finding]:
    """Every finding of the body check on ``rendered`` (lint findings included), body first, by line."""
    found = rendered.findings + own_findings(rendered) + [Finding(0, "render", p) for p in rendered.problems]
    return sorted(found, key=lambda f: (f.where != "body", f.line))


def export_build(rendered: Rendered, alone_applies: bool | None) -> list[Finding]:
    """Evidence from another build than the one filed: where the pack's series applies on the filing base by
    itself, the export holds it alone, so a figure measured with another pack's patches under it is not this
    change's unless the body says so in its prose (``alone_applies`` None: not checked, nothing said)."""
    if not alone_applies or not rendered.stacked:
        return []
    prose = " ".join(line for _, line in _prose_lines(blocks(rendered.body)))
    if rendered.stacked_subjects and all(f'"{s}"' in prose for s in rendered.stacked_subjects):
        return []  # the body says, outside its folded notes, what the figures ran on under the change
    found = []
    for rec in rendered.receipts:
        under = sorted({r.file for r in rec.patches} - set(rendered.own_files)) if rec.patched else []
        if under:
            found.append(Finding(0, "evidence build", f"{rec.lane} was measured with {', '.join(under)} under the "
                                                      f"change; the export is the series alone (it applies alone on "
                                                      f"{rendered.filing_base})"))
    return found


def own_findings(rendered: Rendered) -> list[Finding]:
    """The findings of the check's own rules (``RULES``), without the lint's."""
    body = rendered.body
    bs = blocks(body)
    whole, known, added = _diff_lines(rendered.diff)
    known |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", rendered.base_text))
    found = _layout(bs)
    budget = BUDGETS.get(rendered.pack.kind)
    words = prose_words(body, rendered.sections)
    if budget is not None and words > budget:
        found.append(Finding(0, "budget", f"{words} words of prose (at most {budget} in a body of kind "
                                          f"{rendered.pack.kind})"))
    found += _anchors(body, whole)
    found += _where(rendered, body)
    found += _boxes(rendered, body)
    found += _one_text(rendered)
    found += [Finding(0, "typed figure", text) for text in rendered.typed]
    if rendered.companion is not None:  # the issue a PR links: its Where list and the threads it cites
        issue = rendered.companion[1]
        found += [dataclasses.replace(f, where="linked issue")
                  for f in _where(rendered, issue) + _threads(rendered, blocks(issue))]
    found += _evidence_bases(rendered, body)
    found += _names(bs, known, added)
    found += _sections(rendered, body)
    found += _threads(rendered, bs)
    found += _performance(bs)
    found += _relations(bs)
    for no, line in enumerate(body.splitlines(), 1):
        if line.strip() in ("No measurements yet.", "No reproducer yet."):
            found.append(Finding(no, "incomplete", f"'{line.strip()}': a body is filed with its evidence and its "
                                                   "reproducer"))
    found += rendered.circular
    return sorted(found, key=lambda f: f.line)


def linked_issue_name(pack) -> str:
    """The file name of the issue a PR links: ``NN-feature-request.md`` or ``NN-bug-report.md``."""
    return f"{pack.id}-{'feature-request' if pack.cls == 'feature' else 'bug-report'}.md"


def docs_texts(rendered: Rendered) -> dict[str, str]:
    """The files ``docs/filings/`` holds for ``rendered``: the body (the reproducer linked by its file name), the
    script, and the feature request a PR links."""
    pack = rendered.pack
    body = rendered.body
    out = {}
    if rendered.script is not None:
        body = body.replace(PLACEHOLDER, rendered.script[0])
        out[rendered.script[0]] = rendered.script[1]
    out[f"{pack.id}-{pack.kind}.md"] = body
    if rendered.companion is not None:
        body = body.replace(LINKED_ISSUE, linked_issue_name(pack))  # the issue beside it, as the script is
        out[f"{pack.id}-{pack.kind}.md"] = body
        text = rendered.companion[1]
        if rendered.script is not None:
            text = text.replace(PLACEHOLDER, rendered.script[0])
        out[linked_issue_name(pack)] = f"# {rendered.companion[0]}\n\n{text}"
    return out


def committed(rendered: Rendered, docs_dir) -> list[Finding]:
    """Each committed file of the pack under ``docs_dir`` equals a fresh render (a hand edit, a removed
    reproducer or evidence, a stripped template, all show as a difference). Nothing is required of a repository
    without the directory."""
    if not docs_dir.is_dir():
        return []
    found = []
    for name, want in docs_texts(rendered).items():
        path = docs_dir / name
        have = path.read_text(encoding="utf-8") if path.is_file() else None
        if have is None:
            found.append(Finding(0, "committed", f"{path.name} is missing; run harness body --all-docs", name))
        elif have != want:
            line = next((i for i, (a, b) in enumerate(zip(have.splitlines(), want.splitlines(), strict=False), 1)
                         if a != b), min(len(have.splitlines()), len(want.splitlines())) + 1)
            found.append(Finding(line, "committed", f"{path.name} differs from the render from line {line}; "
                                                    "re-render with harness body --all-docs", name))
        if have is not None and name.endswith(".py"):
            from harness.filing.lint import lint

            found += lint(have, body=False, where=name, vocabulary=True)
        elif have is not None:
            from harness.filing.lint import lint

            found += lint(have, where=name)
    return found
