"""Upstream work that overlaps a pack, and what was decided about it (docs/related.md).

Two places are looked at:

* upstream git history, from the pack's base commit to the newest commit reachable (a mirror under
  ``--git-mirrors`` / ``$PATCHLANE_GIT_MIRRORS``). With history there, every commit that touches the pack's
  files is a candidate; a shallow mirror holds only the two trees, so the change between them is one
  candidate named by the newest commit.
* upstream pull requests and issues (GitHub's ``/search/issues`` and ``pulls/{n}/files``, or the same
  answers recorded under a directory, harness.upstream.github.Recorded) that touch the pack's files, name the
  functions its hunks change, or quote the error message it fixes (key ``error``).

Each candidate is ranked by how close it comes: the same lines as one of our hunks, the same function,
the same file, or only a mention. ``[[packs.NN.related]]`` holds the decisions (harness.lane.tracking.Decision);
readiness refuses a pack while a candidate newer than its last decision is undecided (``undecided``).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from harness.errors import HarnessError, UpstreamError
from harness.lane import series
from harness.lane.tracking import RELATED_REF, Decision, Pack, Thread, Tracking
from harness.upstream import git, pins
from harness.upstream.github import ThreadNotFound, repo_slug, thread_state
from harness.watch.decisions import comment_target, decision_for, last_decision, targets, thread_of

Day = date  # Candidate has a field named 'date'
STALE_DAYS = 90  # a filing target with no activity for this long is flagged stale
SEARCH_DAYS = 365  # "recently": PRs and issues updated within this many days are searched
_MARGIN = 3  # lines either side of one of our hunks that still count as the same hunk
_TERMS_PER_QUERY = 6  # GitHub's search allows five AND/OR/NOT operators in one query
MAX_PR_FILES = 30  # pulls/{n}/files lookups per pack (newest first); the rest are ranked by their text only
_DEF = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)")
_CONTEXT_DEF = re.compile(r"(?:async\s+)?(?:def|class)\s+(\w+)")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@(.*)$")


class Overlap(enum.IntEnum):
    """How close a candidate comes to the pack (higher ranks first)."""

    MENTION = 0  # names a function, file or the error message, changes none of them
    FILE = 1
    FUNCTION = 2
    HUNK = 3

    @property
    def label(self) -> str:
        return {Overlap.HUNK: "same hunk", Overlap.FUNCTION: "same function", Overlap.FILE: "same file",
                Overlap.MENTION: "mention"}[self]


# ---------------------------------------------------------------------------------------------- diffs

@dataclass(frozen=True)
class DiffHunk:
    path: str
    first: int  # first and last line of the old side the hunk changes (an insertion: the line it follows)
    last: int
    function: str  # the enclosing def/class git names in the hunk header ("" when none)
    defines: frozenset[str]  # functions and classes whose def/class line the hunk adds or removes
    text: str  # the changed lines


def parse_diff(text: str) -> list[DiffHunk]:
    """The hunks of a unified diff (``git diff``, a format-patch, a PR file's ``patch``), changed lines only."""
    out: list[DiffHunk] = []
    path = ""
    cur: dict | None = None

    def close() -> None:
        nonlocal cur
        if cur is not None and cur["changed"]:
            first = cur["first"] if cur["first"] is not None else cur["insert"]
            last = cur["last"] if cur["last"] is not None else first
            out.append(DiffHunk(path, first, last, cur["function"], frozenset(cur["defines"]),
                                "\n".join(cur["changed"])))
        cur = None

    for line in text.splitlines():
        if line.startswith("diff --git "):
            close()
            m = re.match(r"^diff --git a/(.+) b/(.+)$", line)
            path = m.group(2) if m else path
        elif line.startswith("+++ ") and cur is None:
            name = line[4:].strip()
            path = name[2:] if name.startswith("b/") else (path if name == "/dev/null" else name)
        elif line.startswith("--- ") and cur is None:
            continue
        elif (m := _HUNK.match(line)) is not None:
            close()
            named = _CONTEXT_DEF.search(m.group(3))
            start = int(m.group(1))
            # -U0 style "@@ -12,0 +13 @@" inserts after line 12; otherwise the old side starts at line 12
            cur = {"line": start if (m.group(2) != "0") else start + 1, "first": None, "last": None,
                   "insert": start, "function": named.group(1) if named else "", "defines": set(), "changed": []}
            # git names the last def *before* the hunk; a def among the context lines above the first change
            # is the one the change sits in
            if start == 0:  # "@@ -0,0 ...": the file is created (or, in another tree, exists whole)
                cur["first"] = cur["last"] = 0
        elif cur is not None:
            d = _DEF.match(line[1:]) if line[:1] in " -" and not cur["changed"] else None
            if d:
                cur["function"] = d.group(1)
            if line.startswith("-"):
                cur["first"] = cur["line"] if cur["first"] is None else cur["first"]
                cur["last"] = cur["line"]
                cur["line"] += 1
                cur["changed"].append(line)
            elif line.startswith("+"):
                if cur["first"] is None:
                    cur["insert"] = max(cur["line"] - 1, 1)
                cur["changed"].append(line)
            elif line.startswith(" "):
                cur["line"] += 1
            elif line.startswith("\\"):
                continue
            else:
                close()
                continue
            d = _DEF.match(line[1:]) if line[:1] in "+-" else None
            if d:
                cur["defines"].add(d.group(1))
    close()
    return out


_IDENT = re.compile(r"\b([A-Za-z_]\w*)\s*\(")  # a name called in a changed line
_IMPORTED = re.compile(r"^[-+]\s*from\s+[\w.]+\s+import\s+\(?([\w\s,]+)\)?")
_RAISED = re.compile(r"^-.*\b(?:raise\s+\w+\s*\(|assert\b[^#]*?,)\s*(?:[rbuf]{0,2})(['\"])(.+?)\1")
_FSTRING_FIELD = re.compile(r"\{[^{}]*\}")
_MIN_ERROR_TEXT = 12  # a shorter literal fragment of a message matches too much to search for


def called_names(hunks: Iterable[DiffHunk]) -> frozenset[str]:
    """Names the changed lines call or import (``name(``, ``from x import name``): what the series touches
    beyond the functions its hunks sit in. Filtered against the upstream's own definitions by the caller."""
    out: set[str] = set()
    for h in hunks:
        for line in h.text.splitlines():
            out.update(_IDENT.findall(line[1:]))
            if (m := _IMPORTED.match(line)) is not None:
                out.update(n.strip().split(" as ")[0] for n in m.group(1).split(",") if n.strip())
    return frozenset(out)


def error_texts(hunks: Iterable[DiffHunk]) -> tuple[str, ...]:
    """The messages upstream raises in lines the series removes (``raise X("...")``, ``assert c, "..."``):
    the error a user of upstream sees, so the text an issue would quote. An f-string keeps its longest
    literal fragment; fragments shorter than _MIN_ERROR_TEXT are left out."""
    out: list[str] = []
    for h in hunks:
        for line in h.text.splitlines():
            m = _RAISED.match(line)
            if m is None:
                continue
            frag = max((p.strip(" :,.") for p in _FSTRING_FIELD.split(m.group(2))), key=len, default="")
            if len(frag) >= _MIN_ERROR_TEXT:
                out.append(frag)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Footprint:
    """What of upstream the pack changes: files, the base lines of each hunk, the functions they sit in, the
    upstream symbols its changed lines use, and the error messages it is about."""

    base: str  # the base the hunks' line numbers refer to
    files: tuple[str, ...]
    hunks: tuple[DiffHunk, ...]
    error: str = ""  # the pack's own ``error`` key (the message its reproducer shows)
    symbols: frozenset[str] = frozenset()  # upstream functions/classes the changed lines call or import
    errors: tuple[str, ...] = ()  # messages upstream raises in the lines the series removes

    @property
    def functions(self) -> frozenset[str]:
        return frozenset(n for h in self.hunks for n in ({h.function} | h.defines) if n)

    @property
    def error_texts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(([self.error] if self.error else []) + list(self.errors)))

    def classify(self, hunk: DiffHunk) -> Overlap | None:
        """How ``hunk`` (of an upstream change) overlaps ours; None when it touches none of our files."""
        if hunk.path not in self.files:
            return None
        mine = [h for h in self.hunks if h.path == hunk.path]
        if hunk.first > 0 and any(hunk.first <= h.last + _MARGIN and h.first - _MARGIN <= hunk.last for h in mine):
            return Overlap.HUNK
        names = {n for h in mine for n in ({h.function} | h.defines) if n}
        theirs = {hunk.function} | hunk.defines
        if names & theirs or any(re.search(rf"\b{re.escape(n)}\b", hunk.text) for n in names):
            return Overlap.FUNCTION
        return Overlap.FILE

    def describe(self, hunks: Iterable[DiffHunk]) -> tuple[Overlap | None, str]:
        """The closest overlap of ``hunks`` and where it is (file, function, lines)."""
        best: tuple[Overlap, DiffHunk] | None = None
        for h in hunks:
            o = self.classify(h)
            if o is not None and (best is None or o > best[0]):
                best = (o, h)
        if best is None:
            return None, ""
        o, h = best
        lines = "the whole file" if h.first == 0 else f"lines {h.first}-{h.last}" if h.last >= h.first else ""
        where = " ".join(x for x in (h.path, h.function, lines) if x)
        return o, where

    def mentions(self, text: str) -> list[str]:
        """Which of our functions, symbols, files and error messages ``text`` names."""
        names = (self.functions | self.symbols) - GENERIC_NAMES
        found = [n for n in sorted(names) if re.search(rf"\b{re.escape(n)}\b", text)]
        found += [f for f in self.files if f in text or Path(f).name in text]
        if any(e.lower() in text.lower() for e in self.error_texts):
            found.append("the error message")
        return found


def footprint(root: Path, tracking: Tracking, pack: Pack, base: str,
              defined: Callable[[str], frozenset[str]] | None = None) -> Footprint:
    """The pack's own patches for ``base`` (its ported series there, else its top-level one) as a footprint.

    ``defined(path)`` names the functions and classes upstream defines in one of the pack's files at the base
    (read from a mirror); a name the changed lines call or import counts as a symbol of the series when
    upstream defines it there, or when the changed lines import it. Without ``defined``, only imports count."""
    hunks: list[DiffHunk] = []
    for patch in series.load_series(root, pack.target, pack.id, base):
        hunks += parse_diff(series_diff_text(patch.path))
    files = tuple(dict.fromkeys([*pack.files, *(h.path for h in hunks)]))
    known: set[str] = set()
    if defined is not None:
        for f in files:
            known |= defined(f)
    imported = {n for h in hunks for line in h.text.splitlines() if (m := _IMPORTED.match(line)) is not None
                for n in (x.strip().split(" as ")[0] for x in m.group(1).split(",")) if n}
    code = [h for h in hunks if not _is_test(h.path)]
    symbols = frozenset(n for n in called_names(code) if (n in known or n in imported) and not n.startswith("_")
                        and len(n) > 3)
    return Footprint(base, files, tuple(hunks), pack.error, symbols, error_texts(code))


def _is_test(path: str) -> bool:
    name = Path(path).name
    return "tests/" in path or name.startswith("test_") or name.endswith("_test.py")


def defined_names(mirror: Path, commit: str) -> Callable[[str], frozenset[str]]:
    """``path`` -> the top-level and nested def/class names upstream's file holds at ``commit`` (empty when
    the mirror lacks the file)."""
    def names(path: str) -> frozenset[str]:
        res = git.call(mirror, "show", f"{commit}:{path}")
        if not res.ok:
            return frozenset()
        return frozenset(m.group(1) for line in res.stdout.splitlines() if (m := _DEF.match(line)) is not None)
    return names


def series_diff_text(path: Path) -> str:
    text = path.read_text(encoding="utf-8", errors="replace")
    start = text.find("diff --git ")
    return text[start:] if start >= 0 else ""


# ---------------------------------------------------------------------------------------------- candidates

@dataclass(frozen=True)
class Candidate:
    ref: str  # owner/repo#N or owner/repo@<sha>: what a decision names
    kind: str  # commit, tree (two trees of a shallow mirror), pull, issue
    title: str
    date: str  # ISO date: a PR's or issue's creation, a commit's committer date
    state: str  # open, draft, merged, closed ("" for commits)
    overlap: Overlap
    where: str  # what overlaps
    source: str  # where it was found (a mirror path, the API root, a recorded directory)
    updated: str = ""  # last activity (PRs and issues)

    @property
    def day(self) -> Day | None:
        try:
            return date.fromisoformat(self.date[:10])
        except ValueError:
            return None

    @property
    def url(self) -> str:
        m = RELATED_REF.match(self.ref)
        if m is None:
            return self.ref
        if m["sha"]:
            return f"https://github.com/{m['slug']}/commit/{m['sha']}"
        return f"https://github.com/{m['slug']}/{'pull' if self.kind == 'pull' else 'issues'}/{m['num']}"

    def as_json(self) -> dict:
        return {"ref": self.ref, "url": self.url, "kind": self.kind, "title": self.title, "date": self.date,
                "state": self.state, "overlap": self.overlap.label, "rank": int(self.overlap), "where": self.where,
                "source": self.source, "updated": self.updated}


def rank(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Closest overlap first; newest first within one overlap; one entry per ref (its closest)."""
    best: dict[str, Candidate] = {}
    for c in candidates:
        if c.ref not in best or c.overlap > best[c.ref].overlap:
            best[c.ref] = c
    return sorted(best.values(), key=lambda c: (-int(c.overlap), _neg_date(c.date), c.ref))


def _neg_date(text: str) -> float:
    try:
        return -datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


# ---------------------------------------------------------------------------------------------- git history

@dataclass(frozen=True)
class View:
    """How old one source's view of upstream is: a mirror's newest commit, recorded answers, or the live API."""

    source: str  # mirror, recorded, api
    where: str  # the mirror path and ref, the recorded directory, the API root
    as_of: str  # ISO date: the mirror's newest commit, the newest activity among the recorded items, today
    recorded: str = ""  # recorded answers: the day they were recorded (their ``recorded.json``), when known

    def describe(self) -> str:
        if self.source == "mirror":
            return f"mirror {self.where}: newest commit {self.as_of}"
        if self.source == "recorded":
            made = f", recorded {self.recorded}" if self.recorded else ""
            return f"recorded answers {self.where}: newest thread activity {self.as_of or 'unknown'}{made}"
        return f"live API {self.where}: {self.as_of}"

    def as_json(self) -> dict:
        return {"source": self.source, "where": self.where, "as_of": self.as_of or None,
                "recorded": self.recorded or None}


@dataclass(frozen=True)
class HistoryScan:
    candidates: tuple[Candidate, ...]
    note: str  # what was compared, or why nothing was
    complete: bool = False  # every commit since the base was looked at (not just two trees)
    view: View | None = None  # the newest commit the mirror holds (its date is how old the view is)


def find_mirror(repo_url: str, mirrors: tuple[Path, ...]) -> Path | None:
    name = pins.mirror_name(repo_url)
    for d in (*mirrors, *pins.mirrors_from_env()):
        path = Path(d) / name
        if path.is_dir():
            return path
    return None


def newest_commit(mirror: Path, ref: str | None = None) -> tuple[str, str, str] | None:
    """(sha, committer date, ref) of the mirror's ``ref`` (a git base's own branch) when it holds it, else of
    its newest branch head (for a release base: upstream's main line)."""
    out = git.run(mirror, "for-each-ref", "--format=%(objectname) %(committerdate:iso-strict) %(refname)",
                  "refs/heads")
    heads = [ln.split(" ", 2) for ln in out.splitlines() if ln.strip()]
    if not heads:
        return None
    same = [h for h in heads if h[2] == ref]
    if same:
        return same[0][0], same[0][1], same[0][2]
    sha, when, ref = max(heads, key=lambda h: _ts(h[1]))
    return sha, when, ref


def _ts(text: str) -> float:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return 0.0


def history(mirror: Path, slug: str, base_commit: str, fp: Footprint, ref: str | None = None) -> HistoryScan:
    """Commits between ``base_commit`` and the newest commit of ``ref`` (else of the mirror's newest branch)
    that touch the footprint's files."""
    head = newest_commit(mirror, ref)
    if head is None:
        return HistoryScan((), f"{mirror}: no branch heads")
    newest, when, ref = head
    view = View("mirror", f"{mirror.name} {ref.removeprefix('refs/heads/')} {newest[:9]}", when[:10])
    if newest == base_commit:
        return HistoryScan((), f"the base {base_commit[:9]} is the newest commit reachable ({ref})", True, view)
    if not git.call(mirror, "cat-file", "-e", f"{base_commit}^{{commit}}").ok:
        return HistoryScan((), f"{mirror} does not hold the base commit {base_commit[:9]}", view=view)
    files = list(fp.files)
    if git.call(mirror, "merge-base", "--is-ancestor", base_commit, newest).ok and _has_history(mirror, newest):
        log = git.run(mirror, "log", "--format=%H%x1f%cI%x1f%s", f"{base_commit}..{newest}", "--", *files)
        out = []
        for line in log.splitlines():
            sha, cdate, subject = line.split("\x1f", 2)
            hunks = parse_diff(git.run(mirror, "diff", "-U0", f"{sha}^", sha, "--", *files))
            overlap, where = fp.describe(hunks)
            if overlap is not None:
                out.append(Candidate(f"{slug}@{sha}", "commit", subject, cdate, "", overlap, where, str(mirror)))
        return HistoryScan(tuple(out), f"history {base_commit[:9]}..{newest[:9]} ({ref}) in {mirror}", True, view)
    # A shallow mirror: two trees, no commits between them. The change is one candidate named by the newest.
    hunks = parse_diff(git.run(mirror, "diff", "-U0", base_commit, newest, "--", *files))
    overlap, where = fp.describe(hunks)
    note = f"trees {base_commit[:9]} and {newest[:9]} ({ref}) of {mirror}; the commits between are not there"
    if overlap is None:
        return HistoryScan((), note, view=view)
    title = f"the pack's files changed between {base_commit[:9]} and {ref.removeprefix('refs/heads/')}"
    return HistoryScan((Candidate(f"{slug}@{newest}", "tree", title, when, "", overlap, where, str(mirror)),), note,
                       view=view)


def _has_history(mirror: Path, commit: str) -> bool:
    """Whether ``commit``'s ancestry is there (a shallow mirror lists its cut-off commits in ``shallow``)."""
    shallow = Path(git.run(mirror, "rev-parse", "--git-dir").strip())
    shallow = shallow if shallow.is_absolute() else mirror / shallow
    return not (shallow / "shallow").is_file()


# ---------------------------------------------------------------------------------------------- GitHub

MAX_API_COMMITS = 20  # commits read one by one (GET /repos/{slug}/commits/{sha}) per pack


def api_history(get: Get, slug: str, base_commit: str, fp: Footprint, source: str,
                branch: str | None = None) -> HistoryScan:
    """Commits since the base that touch the footprint's files, through GitHub's commits API (the mirror
    had no history): the base's date, then ``commits?path=FILE&since=DATE`` per file, then each commit's
    files and patches."""
    try:
        base = get(f"/repos/{slug}/commits/{base_commit}")
        since = str(((base.get("commit") or {}).get("committer") or {}).get("date") or "")
        shas: dict[str, None] = {}
        for f in fp.files:
            query = {"path": f, "since": since, "per_page": MAX_API_COMMITS} | ({"sha": branch} if branch else {})
            listed = get(f"/repos/{slug}/commits?" + urlencode(query))
            for c in listed if isinstance(listed, list) else []:
                if isinstance(c, dict) and c.get("sha") and c["sha"] != base_commit:
                    shas.setdefault(str(c["sha"]), None)
        out = []
        for sha in list(shas)[:MAX_API_COMMITS]:
            data = get(f"/repos/{slug}/commits/{sha}")
            if not isinstance(data, dict):
                continue
            hunks = []
            for f in data.get("files") or []:
                name, patch = str(f.get("filename") or ""), str(f.get("patch") or "")
                hunks += parse_diff(f"diff --git a/{name} b/{name}\n{patch}\n") if patch else []
                if name in fp.files and not patch:
                    hunks.append(DiffHunk(name, 0, 0, "", frozenset(), ""))
            overlap, where = fp.describe(hunks)
            if overlap is not None:
                commit = data.get("commit") or {}
                out.append(Candidate(f"{slug}@{sha}", "commit", str(commit.get("message") or "").split("\n")[0],
                                     str((commit.get("committer") or {}).get("date") or ""), "", overlap, where,
                                     source))
    except ThreadNotFound as exc:
        return HistoryScan((), f"commits since {base_commit[:9]} not read from {source}: {exc}")
    capped = f" (the newest {MAX_API_COMMITS})" if len(shas) > MAX_API_COMMITS else ""
    return HistoryScan(tuple(out), f"commits since {base_commit[:9]} from {source}{capped}", True)


Get = Callable[[str], Any]  # a JSON answer: a dict or a list


# Names too common to search for: every module has them, so they find everything and rank nothing.
GENERIC_NAMES = frozenset({"forward", "backward", "apply", "setup", "main", "run", "call", "module", "build",
                           "update", "reset", "init", "step", "load", "save", "get", "set"})
_SPELLED = {"bwd": "backward", "fwd": "forward"}  # how a thread spells what a file stem abbreviates


def file_phrase(path: str) -> str:
    """How people name a file's subject in prose: the last two words of its stem, abbreviations spelled out
    (``mamba3_siso_bwd.py`` -> "siso backward"); "" for a stem of one word (the stem itself is searched)."""
    words = [_SPELLED.get(w, w) for w in Path(path).stem.split("_") if w]
    return " ".join(words[-2:]) if len(words) >= 2 else ""


def search_terms(fp: Footprint) -> list[str]:
    """What to search upstream threads for: our functions and the upstream symbols the series uses, our files'
    names and the phrase a thread would use for them, and the error messages (the pack's own and those
    raised in lines the series removes)."""
    terms = sorted(n for n in fp.functions | fp.symbols if not n.startswith("__") and n not in GENERIC_NAMES)
    code = [f for f in fp.files if not _is_test(f)]
    terms += [Path(f).stem for f in fp.files]  # GitHub's search splits words on '.', so the stem finds the file
    terms += [p for f in code if (p := file_phrase(f))]
    terms += [e.replace('"', " ").strip() for e in fp.error_texts]
    return list(dict.fromkeys(t for t in terms if t))


def github_candidates(get: Get, slug: str, fp: Footprint, source: str, today: date | None = None,
                      days: int = SEARCH_DAYS) -> list[Candidate]:
    """PRs and issues of ``slug`` updated in the last ``days`` that name our files, functions or error."""
    since = ((today or datetime.now(UTC).date()) - timedelta(days=days)).isoformat()
    items: dict[int, dict] = {}
    terms = search_terms(fp)
    for i in range(0, len(terms), _TERMS_PER_QUERY):  # one query per few terms: the search limit is per minute
        either = " OR ".join(f'"{t}"' for t in terms[i:i + _TERMS_PER_QUERY])
        q = f"repo:{slug} updated:>={since} ({either})"
        answer = get("/search/issues?" + urlencode({"q": q, "per_page": 50, "sort": "updated"}))
        for item in (answer.get("items") or []) if isinstance(answer, dict) else []:
            if isinstance(item, dict) and isinstance(item.get("number"), int):
                items.setdefault(item["number"], item)
    newest_prs = sorted((n for n, it in items.items() if "pull_request" in it),
                        key=lambda n: str(items[n].get("updated_at") or ""), reverse=True)[:MAX_PR_FILES]
    out = []
    for number, item in sorted(items.items()):
        is_pr = "pull_request" in item
        overlap, where = None, ""
        if number in newest_prs:
            try:
                files = get(f"/repos/{slug}/pulls/{number}/files?per_page=100")
            except ThreadNotFound:
                files = []
            hunks = []
            for f in files if isinstance(files, list) else []:
                name = str(f.get("filename") or "")
                patch = str(f.get("patch") or "")
                hunks += parse_diff(f"diff --git a/{name} b/{name}\n{patch}\n") if patch else []
                if name in fp.files and not patch:
                    hunks.append(DiffHunk(name, 0, -1, "", frozenset(), ""))
            overlap, where = fp.describe(hunks)
        if overlap is None:
            overlap, where = text_overlap(fp, f"{item.get('title') or ''}\n{item.get('body') or ''}", is_pr)
        out.append(Candidate(f"{slug}#{number}", "pull" if is_pr else "issue", str(item.get("title") or ""),
                             str(item.get("created_at") or ""), thread_state("pull" if is_pr else "issue", item),
                             overlap, where, source, str(item.get("updated_at") or "")))
    return out


def text_overlap(fp: Footprint, text: str, is_pr: bool) -> tuple[Overlap, str]:
    """How close a thread comes by what it says. An issue that quotes our error or names our function is
    about the same failure or code (ranked as the same function), one naming our file as the same file; a
    PR's own files decide its rank, so a PR that only talks about them is a mention."""
    named = fp.mentions(text)
    where = "names " + ", ".join(named) if named else "matched the search"
    if is_pr or not named:
        return Overlap.MENTION, where
    if "the error message" in named or any(n in fp.functions for n in named):
        return Overlap.FUNCTION, where
    return Overlap.FILE, where


# ---------------------------------------------------------------------------------------------- one pack

@dataclass(frozen=True)
class Scan:
    pack: Pack
    base: str
    candidates: tuple[Candidate, ...]  # ranked
    notes: tuple[str, ...] = ()  # what was looked at, and what could not be
    views: tuple[View, ...] = ()  # how old each source's view of upstream is
    terms: tuple[str, ...] = ()  # what PRs and issues were searched for

    def as_json(self) -> dict:
        return {"pack": self.pack.id, "base": self.base, "notes": list(self.notes),
                "upstream_as_of": [v.as_json() for v in self.views], "searched_for": list(self.terms),
                "candidates": [c.as_json() for c in self.candidates],
                "decisions": [decision_json(d) for d in self.pack.related],
                "undecided": [c.ref for c in undecided(self.pack, self.candidates)]}


def decision_json(d: Decision) -> dict:
    return {"ref": d.ref, "relation": d.relation, "reason": d.reason, "date": d.date.isoformat()}


def scan_base(pack: Pack, manifest: pins.Manifest) -> tuple[str, str, str | None]:
    """The base the pack's hunks are compared from, its commit ('' when none is known) and, for a git base,
    the branch it was read from: the pack's own base when its commit is known, else the filing base."""
    own = pack.base or manifest.default_base
    for name in (own, pack.filing_base):
        b = manifest.bases.get(name)
        if b is not None and b.commit:
            return name, b.commit, b.git.ref if b.git is not None else None
    return own, "", None


@dataclass
class Sources:
    """Where one invocation looks: mirror directories, and a GitHub client or recorded answers (or none)."""

    mirrors: tuple[Path, ...] = ()
    get: Get | None = None
    label: str = ""  # the API root or the recorded directory, for the candidates' ``source``
    today: date | None = None
    days: int = SEARCH_DAYS
    notes: list[str] = field(default_factory=list)
    recorded: Path | None = None  # set when ``get`` answers from recorded files (their age is read from them)

    def view(self, slug: str) -> View | None:
        """How old the PR and issue answers for ``slug`` are."""
        if self.get is None:
            return None
        if self.recorded is not None:
            return recorded_view(self.recorded, slug)
        return View("api", self.label, (self.today or datetime.now(UTC).date()).isoformat())


RECORDED_META = "recorded.json"  # {"recorded": "YYYY-MM-DD", ...}: when the recorded answers were made


def recorded_view(directory: Path, slug: str) -> View:
    """The recorded answers' age for ``slug``: the newest creation or activity among its recorded items, and
    the day they were recorded (``recorded.json``), when that file says."""
    import json

    newest = ""
    file = directory / "search" / "issues" / (slug.replace("/", "+") + ".json")
    try:
        items = json.loads(file.read_text(encoding="utf-8")).get("items") or []
    except (OSError, ValueError):
        items = []
    for item in items if isinstance(items, list) else []:
        for key in ("updated_at", "created_at", "closed_at"):
            value = str(item.get(key) or "")[:10] if isinstance(item, dict) else ""
            newest = max(newest, value)
    made = ""
    try:
        meta = json.loads((directory / RECORDED_META).read_text(encoding="utf-8"))
        made = str(meta.get("recorded") or "") if isinstance(meta, dict) else ""
    except (OSError, ValueError):
        pass
    return View("recorded", str(directory), newest, made)


def scan(root: Path, tracking: Tracking, pack: Pack, sources: Sources) -> Scan:
    manifest = pins.load_manifest(root, pack.target)
    base, commit, ref = scan_base(pack, manifest)
    slug = repo_slug(manifest.repo)
    found: list[Candidate] = []
    notes: list[str] = []
    views: list[View] = []
    if slug is None:
        return Scan(pack, base, (), (f"upstream/{pack.target}.toml: repo is not on github.com; nothing searched",))
    mirror = find_mirror(manifest.repo, sources.mirrors)
    fp = footprint(root, tracking, pack, base, defined_names(mirror, commit) if mirror and commit else None)
    if not fp.files:
        notes.append("the pack names no files and has no series: nothing to compare")
    elif not commit:
        notes.append(f"base {base} has no known upstream commit: history not compared")
    else:
        h = None
        if mirror is None:
            notes.append(f"no mirror of {slug} ({pins.mirror_name(manifest.repo)})")
        else:
            try:
                h = history(mirror, slug, commit, fp, ref)
            except HarnessError as exc:
                notes.append(f"history not compared: {exc}")
            else:
                notes.append(h.note)
                views += [h.view] if h.view is not None else []
        if (h is None or not h.complete) and sources.get is not None:
            api = api_history(sources.get, slug, commit, fp, sources.label,
                              ref.removeprefix("refs/heads/") if ref else None)
            notes.append(api.note)
            h = api if api.complete else h  # the commits themselves replace the two trees' difference
        if h is not None:
            found += h.candidates
    terms: list[str] = []
    if sources.get is None:
        notes.append("no GitHub answers (offline, no recorded answers): PRs and issues not searched")
    elif fp.files or fp.error_texts:
        found += github_candidates(sources.get, slug, fp, sources.label, sources.today, sources.days)
        notes.append(f"PRs and issues of {slug} from {sources.label}")
        terms = search_terms(fp)
        views += [v] if (v := sources.view(slug)) is not None else []
    return Scan(pack, base, tuple(rank(found)), tuple(notes), tuple(views), tuple(terms))


# ---------------------------------------------------------------------------------------------- decisions

def undecided(pack: Pack, candidates: Iterable[Candidate], gating: Overlap = Overlap.FILE) -> list[Candidate]:
    """Candidates at least ``gating`` close with no decision of their own, newer than the pack's last decision
    (an older one was there to see when the person last decided)."""
    last = last_decision(pack)
    out = []
    for c in candidates:
        if c.overlap < gating or decision_for(pack, c.ref) is not None:
            continue
        if last is None or c.day is None or c.day > last:
            out.append(c)
    return out


@dataclass(frozen=True)
class TargetHealth:
    url: str
    state: str
    updated: str | None
    problem: str | None  # "closed", "merged", "stale (no activity since ...)", None when healthy

    def as_json(self) -> dict:
        return {"url": self.url, "state": self.state, "updated": self.updated, "problem": self.problem}


def target_health(pack: Pack, today: date | None = None, stale_days: int = STALE_DAYS) -> list[TargetHealth]:
    today = today or datetime.now(UTC).date()
    out = []
    for url in targets(pack):
        t = thread_of(pack, url)
        state = t.state if t else "unknown"
        updated = t.updated if t else None
        problem = None
        if state in ("closed", "merged"):
            problem = state
        elif updated:
            try:
                last = date.fromisoformat(updated[:10])
            except ValueError:
                last = None
            if last is not None and (today - last).days > stale_days:
                problem = f"stale (no activity since {last.isoformat()})"
        out.append(TargetHealth(url, state, updated, problem))
    return out


def already_there(pack: Pack) -> Thread | None:
    """A thread on which threads refresh found our comment (comment packs) or our own PR/issue (others)."""
    if pack.kind == "comment":
        target = comment_target(pack)
        t = thread_of(pack, target) if target else None
        return t if t is not None and t.ours is not None else None
    return next((t for t in pack.threads if t.ours == "author" and t.role == "filing target"), None)


def offline_line(pack_ids: list[str]) -> UpstreamError:
    return UpstreamError(f"no network and no recorded GitHub answers: PRs and issues of pack(s) "
                         f"{', '.join(pack_ids)} cannot be searched",
                         hint="point --recorded at a directory of recorded answers (tests/fixtures/github), or "
                              "retry with the network")


RECORDED_ENV = "PATCHLANE_GITHUB_RECORDED"
RECORDED_DEFAULT = Path("tests") / "fixtures" / "github"  # the repository's own recorded answers (CI, offline)


def recorded_dir(root: Path, given: Path | None = None) -> Path | None:
    """Recorded GitHub answers to use: ``given``, else ``$PATCHLANE_GITHUB_RECORDED``, else the repository's
    ``tests/fixtures/github`` when it holds search answers; None when there are none."""
    import os

    for d in (given, os.environ.get(RECORDED_ENV) or None, root / RECORDED_DEFAULT):
        if d is not None and (Path(d) / "search" / "issues").is_dir():
            return Path(d)
    return None


def offline_sources(root: Path, mirrors: tuple[Path, ...] = (), today: date | None = None) -> Sources:
    """What readiness looks at: the mirrors and the recorded answers, never the network."""
    from harness.upstream.github import Recorded

    d = recorded_dir(root)
    rec = Recorded(d) if d is not None else None
    return Sources(mirrors=mirrors, get=rec.get if rec else None, label=str(d) if d else "", today=today,
                   recorded=d)
