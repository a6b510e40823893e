"""Upstream work that overlaps a pack, and what was decided about it (docs/related.md).

Two places are looked at:

* upstream git history, from the pack's base commit to the newest commit reachable (a mirror under
  ``--git-mirrors`` / ``$PATCHLANE_GIT_MIRRORS``). With history there, every commit that touches the pack's
  files is a candidate; a shallow mirror holds only the two trees, so the change between them is one
  candidate named by the newest commit.
* upstream pull requests and issues (GitHub's ``/search/issues`` and ``pulls/{n}/files``, or the same
  answers recorded under a directory, harness.upstream.github.Recorded) that touch the pack's files, name the
  functions its hunks change, or quote the error message it fixes (key ``error``).

Each candidate is ranked by how close it comes to the pack's footprint (``footprint``): the same lines as one
of our hunks, the same function, the same file, or only a mention. ``pack.toml's [[related]]`` holds the
decisions (harness.lane.tracking.Decision); readiness refuses a pack while a candidate newer than its last
decision is undecided (``undecided``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from harness.base import clock
from harness.errors import HarnessError, UpstreamError
from harness.lane import series
from harness.lane.tracking import RELATED_REF, Decision, Pack, Tracking
from harness.upstream import git, pins
from harness.upstream.github import ThreadNotFound, repo_slug, thread_state
from harness.watch import conflicts
from harness.watch.conflicts import Check
from harness.watch.decisions import decision_for, last_decision
from harness.watch.footprint import (
    DiffHunk,
    FileSpans,
    Footprint,
    Overlap,
    Span,
    defined_names,
    footprint,
    parse_diff,
    scoped,
    search_terms,
    text_overlap,
)

Day = date  # Candidate has a field named 'date'
SEARCH_DAYS = 365  # "recently": PRs and issues updated within this many days are searched
_TERMS_PER_QUERY = 6  # GitHub's search allows five AND/OR/NOT operators in one query
MAX_PR_FILES = 30  # pulls/{n}/files lookups per pack (newest first); the rest are ranked by their text only


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
    conflicts: tuple[str, ...] = ()  # our hunks that no longer apply once this open PR is in (conflicts.check)
    carried: tuple[str, ...] = ()  # our hunks that apply only once it is in (it brings our files or lines)
    compared: str = ""  # what the conflict check compared, or why it could not
    hunks_known: bool = True  # False: it touches our file but which lines is not known (no patch; an issue)

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
                "source": self.source, "updated": self.updated, "conflicts": list(self.conflicts),
                "carried": list(self.carried), "compared": self.compared or None, "hunks_known": self.hunks_known}


def rank(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Closest overlap first; newest first within one overlap; one entry per ref (its closest)."""
    best: dict[str, Candidate] = {}
    for c in candidates:
        old = best.get(c.ref)
        if old is None:
            best[c.ref] = c
            continue
        keep, other = (c, old) if c.overlap > old.overlap else (old, c)
        best[c.ref] = replace(keep, title=keep.title or other.title, date=keep.date or other.date,
                              state=keep.state or other.state, updated=keep.updated or other.updated,
                              conflicts=keep.conflicts or other.conflicts, carried=keep.carried or other.carried,
                              compared=keep.compared or other.compared)
    return sorted(best.values(), key=lambda c: (-bool(c.conflicts), -int(c.overlap), _neg_date(c.date), c.ref))


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


def history(mirror: Path, slug: str, base_commit: str, fp: Footprint, ref: str | None = None,
            spans: Callable[[str], tuple[Span, ...]] | None = None) -> HistoryScan:
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
            overlap, where = fp.describe(scoped(hunks, spans) if spans is not None else hunks)
            if overlap is not None:
                out.append(Candidate(f"{slug}@{sha}", "commit", subject, cdate, "", overlap, where, str(mirror)))
        return HistoryScan(tuple(out), f"history {base_commit[:9]}..{newest[:9]} ({ref}) in {mirror}", True, view)
    # A shallow mirror: two trees, no commits between them. The change is one candidate named by the newest.
    hunks = parse_diff(git.run(mirror, "diff", "-U0", base_commit, newest, "--", *files))
    overlap, where = fp.describe(scoped(hunks, spans) if spans is not None else hunks)
    note = f"trees {base_commit[:9]} and {newest[:9]} ({ref}) of {mirror}; the commits between are not there"
    if overlap is None:
        return HistoryScan((), note, view=view)
    title = f"the pack's files changed between {base_commit[:9]} and {ref.removeprefix('refs/heads/')}"
    return HistoryScan((Candidate(f"{slug}@{newest}", "tree", title, when, "", overlap, where, str(mirror)),), note,
                       view=view)


def _holds(mirror: Path, commit: str) -> bool:
    return git.call(mirror, "cat-file", "-e", f"{commit}^{{commit}}").ok


def _has_pull_refs(mirror: Path) -> bool:
    return bool(git.run(mirror, "for-each-ref", "--count=1", "--format=%(refname)", "refs/pull/").strip())


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


Conflict = Callable[[int, "list[dict] | None", str], Check]  # (PR number, its files, target branch) -> Check
MAX_LIST_PAGES = 10  # pages of GET /repos/{slug}/pulls (100 each, newest update first) read per repository
MAX_LISTED_FILES = 300  # pulls/{n}/files lookups for listed PRs per repository (newest first)


def with_check(c: Candidate, chk: Check) -> Candidate:
    return replace(c, conflicts=chk.conflicts, carried=chk.carried,
                   compared=chk.compared or f"not checked: {chk.unknown}")


def listed_pulls(get: Get, slug: str, since: str) -> dict[int, dict]:
    """Every PR of ``slug`` updated since ``since``, from ``GET /repos/{slug}/pulls`` (all states, newest update
    first, page by page until one reaches past ``since``): what a maintainer looks through, whatever the PR's
    words say."""
    out: dict[int, dict] = {}
    for page in range(1, MAX_LIST_PAGES + 1):
        query = {"state": "all", "sort": "updated", "direction": "desc", "per_page": 100, "page": page}
        try:
            answer = get(f"/repos/{slug}/pulls?" + urlencode(query))
        except ThreadNotFound:
            break
        if not isinstance(answer, list) or not answer:
            break
        older = False
        for pr in answer:
            if not isinstance(pr, dict) or not isinstance(pr.get("number"), int):
                continue
            if str(pr.get("updated_at") or pr.get("created_at") or "9")[:10] < since:
                older = True
                continue
            out.setdefault(pr["number"], pr)
        if older:
            break
    return out


def pr_hunks(files: Any, fp: Footprint, spans: Callable[[str], tuple[Span, ...]] | None) -> list[DiffHunk]:
    """The hunks of a ``pulls/{n}/files`` answer (a file of ours listed without a patch: a whole-file hunk),
    each with the def it sits in by the AST of our base's file (``spans``; a PR's line numbers are of its own
    base, so this is approximate where upstream moved code in between)."""
    hunks: list[DiffHunk] = []
    for f in files if isinstance(files, list) else []:
        name = str(f.get("filename") or "")
        patch = str(f.get("patch") or "")
        hunks += parse_diff(f"diff --git a/{name} b/{name}\n{patch}\n") if patch else []
        if name in fp.files and not patch:
            hunks.append(DiffHunk(name, 0, -1, "", frozenset(), ""))
    return scoped(hunks, spans) if spans is not None else hunks


def github_candidates(get: Get, slug: str, fp: Footprint, source: str, today: date | None = None,
                      days: int = SEARCH_DAYS, spans: Callable[[str], tuple[Span, ...]] | None = None,
                      conflict: Conflict | None = None) -> list[Candidate]:
    """PRs and issues of ``slug`` updated in the last ``days`` that change our files (every PR listed, its files
    read) or name our functions, files or error (the search). Open PRs that change our files are checked for
    textual conflicts with our series (``conflict``)."""
    since = ((today or clock.today()) - timedelta(days=days)).isoformat()
    items: dict[int, dict] = {}
    terms = search_terms(fp)
    for i in range(0, len(terms), _TERMS_PER_QUERY):  # one query per few terms: the search limit is per minute
        either = " OR ".join(f'"{t}"' for t in terms[i:i + _TERMS_PER_QUERY])
        q = f"repo:{slug} updated:>={since} ({either})"
        answer = get("/search/issues?" + urlencode({"q": q, "per_page": 50, "sort": "updated"}))
        for item in (answer.get("items") or []) if isinstance(answer, dict) else []:
            if isinstance(item, dict) and isinstance(item.get("number"), int):
                items.setdefault(item["number"], item)
    listed = listed_pulls(get, slug, since) if fp.files else {}
    by_update = lambda n: str((listed.get(n) or items.get(n) or {}).get("updated_at") or "")  # noqa: E731
    read = set(sorted((n for n, it in items.items() if "pull_request" in it), key=by_update,
                      reverse=True)[:MAX_PR_FILES])
    read |= set(sorted(listed, key=by_update, reverse=True)[:MAX_LISTED_FILES])
    out = []
    for number in sorted(set(items) | set(listed)):
        item = listed.get(number) or items[number]
        is_pr = number in listed or "pull_request" in item
        overlap, where, files, known = None, "", None, False
        if number in read:
            try:
                files = get(f"/repos/{slug}/pulls/{number}/files?per_page=100")
            except ThreadNotFound:
                files = None
            hunks = pr_hunks(files, fp, spans)
            overlap, where = fp.describe(hunks)
            known = overlap is not None and all(h.first != 0 or h.last != -1 for h in hunks if h.path in fp.files)
        if overlap is None:
            if number not in items:
                continue  # listed, and changes none of our files
            overlap, where = text_overlap(fp, f"{item.get('title') or ''}\n{item.get('body') or ''}", is_pr)
        state = thread_state("pull" if is_pr else "issue", item)
        found = Candidate(f"{slug}#{number}", "pull" if is_pr else "issue", str(item.get("title") or ""),
                          str(item.get("created_at") or ""), state, overlap, where, source,
                          str(item.get("updated_at") or ""), hunks_known=known)
        if conflict is not None and is_pr and state in ("open", "draft") and overlap >= Overlap.FILE:
            target = str(((item.get("base") or {}) if isinstance(item.get("base"), dict) else {}).get("ref") or "")
            c = conflict(number, files if isinstance(files, list) else None, target)
            found = with_check(found, c)
        out.append(found)
    return out


def _pull_refs(mirror: Path, kind: str) -> dict[int, tuple[str, str]]:
    """``refs/pull/N/<kind>`` of the mirror: N -> (ref, its commit's date)."""
    out = git.run(mirror, "for-each-ref", "--format=%(refname) %(committerdate:iso-strict)", f"refs/pull/*/{kind}")
    refs = {}
    for line in out.splitlines():
        ref, _, when = line.partition(" ")
        number = ref.split("/")[2]
        if number.isdigit():
            refs[int(number)] = (ref, when)
    return refs


def _branches(mirror: Path) -> dict[str, str]:
    """The mirror's branches: name -> commit (``refs/heads/*``)."""
    out = git.run(mirror, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads/")
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def _heads_touching(mirror: Path, files: tuple[str, ...], heads: dict[int, tuple[str, str]],
                    branches: dict[str, str]) -> set[int]:
    """The PRs among ``heads`` (refs/pull/N/head or /merge) with a commit no branch of the mirror has that changes
    one of ``files``. One walk of git over every head at once (``log --stdin --source``: each commit with the ref
    that reached it) finds them;
    a commit two heads share (a PR stacked on another) names one of them, so the walk runs again without the
    heads found until it finds no more. Thousands of PR heads cost seconds, not a merge base each."""
    if not heads or not files:
        return set()
    number_of = {ref: n for n, (ref, _) in heads.items()}
    found: set[int] = set()
    left = dict(number_of)
    while left:
        revs = [*(f"^{sha}" for sha in branches.values()), *left]
        walk = git.call(mirror, "log", "--stdin", "--source", "--format=%S", "--", *files,
                        input="\n".join(revs) + "\n")
        new = {number_of[ref] for ref in walk.stdout.split() if ref in left} if walk.ok else set()
        if not new:
            break
        found |= new
        left = {ref: n for ref, n in left.items() if n not in new}
    return found


def _fork_point(mirror: Path, head: str, branches: dict[str, str]) -> str | None:
    """Where the PR at ``head`` left the branch it targets, taken as the newest commit its history shares with any
    branch of the mirror (git alone does not know a PR's target): the newest boundary of ``head --not <every
    branch>``, found in one walk whatever the number of branches."""
    walk = git.call(mirror, "rev-list", "--boundary", "--stdin",
                    input="\n".join([*(f"^{sha}" for sha in branches.values()), head]) + "\n")
    bounds = [line[1:] for line in walk.stdout.split() if line.startswith("-")] if walk.ok else []
    if not bounds:  # the head is on a branch already (its change is in that branch's history), or git failed
        return None
    dated = git.call(mirror, "show", "-s", "--format=%ct %H", *bounds)
    stamped = [line.split(" ", 1) for line in dated.stdout.splitlines() if " " in line] if dated.ok else []
    return max(stamped, key=lambda x: int(x[0]))[1] if stamped else bounds[0]


def _landed_in(mirror: Path, commit: str, diff: str) -> bool:
    """Whether ``diff`` is already in ``commit``'s tree: it applies there in reverse (a temporary index of that
    tree; the mirror is left as it was). A PR squash-merged before our pin is one."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="patchlane-landed-") as tmp:
        env = {**git.clean_env(), "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        if not git.call(mirror, "read-tree", commit, env=env).ok:
            return False
        return git.call(mirror, "apply", "--cached", "--check", "-R", "-", env=env, input=diff).ok


def mirror_pulls(mirror: Path, slug: str, fp: Footprint, since: str, source: str,
                 spans: Callable[[str], tuple[Span, ...]] | None = None, get: Get | None = None,
                 conflict: Conflict | None = None, base_commit: str | None = None) -> list[Candidate]:
    """PRs a mirror holds as GitHub's refs (a full clone fetched with ``+refs/pull/*:...``) whose change touches
    our files, updated since ``since``: an open PR's ``refs/pull/N/merge`` against its first parent; a PR with
    only ``refs/pull/N/head`` (closed, or squashed into its branch) as its head against where it left the branch
    it targets (``_fork_point``). A head a branch holds changes nothing here: a PR merged as its commits is in
    the branch's history, which ``history`` reads. Their title and state come from ``get`` (the API or recorded
    answers) when it knows them; git has neither."""
    merges = {n: r for n, r in _pull_refs(mirror, "merge").items() if r[1][:10] >= since}
    heads = {n: r for n, r in _pull_refs(mirror, "head").items() if n not in merges and r[1][:10] >= since}
    branches = _branches(mirror)
    # one walk each, before any diff: only the refs with a commit of their own that changes our files are read
    changes: list[tuple[int, str | None, str, str]] = [
        (n, f"{merges[n][0]}^1", *merges[n]) for n in sorted(_heads_touching(mirror, fp.files, merges, branches))]
    changes += [(n, None, *heads[n]) for n in sorted(_heads_touching(mirror, fp.files, heads, branches))]
    found = []
    for number, before, ref, when in sorted(changes, key=lambda c: c[0]):  # both within ``since`` already
        start = before or _fork_point(mirror, ref, branches)  # a head alone: from where it left its branch
        if start is None:
            continue
        diff = git.call(mirror, "diff", "-U0", start, ref, "--", *fp.files)
        hunks = parse_diff(diff.stdout) if diff.ok else []
        overlap, where = fp.describe(scoped(hunks, spans) if spans is not None else hunks)
        if overlap is None:
            continue
        if before is None and base_commit and _landed_in(  # asked only of a head that overlaps: a diff and an apply
                mirror, base_commit, git.call(mirror, "diff", start, ref, "--", *fp.files).stdout):
            continue  # squash-merged before our base: its change is in what the pack is made on
        meta: dict = {}  # asked only for a PR that overlaps: an API call each
        if get is not None:
            try:
                meta = get(f"/repos/{slug}/pulls/{number}") or {}
            except (ThreadNotFound, UpstreamError):
                meta = {}
        state = thread_state("pull", meta) if meta else ""
        c = Candidate(f"{slug}#{number}", "pull", str(meta.get("title") or ""),
                      str(meta.get("created_at") or ""), state, overlap, where, source,
                      str(meta.get("updated_at") or when))
        if conflict is not None and state in ("open", "draft", ""):
            target = str((meta.get("base") or {}).get("ref") or "") if isinstance(meta.get("base"), dict) else ""
            chk = conflict(number, None, target)
            c = with_check(c, chk)
        found.append(c)
    return found


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
    return {"ref": d.ref, "relation": d.relation, "reason": d.reason, "date": d.date.isoformat(), "at": d.at}


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
    check_decided: bool = True  # False (readiness): a decided PR is not checked for conflicts again

    def until(self, slug: str) -> date:
        """The last day of the search window: ``today`` when given; for recorded answers the day they were recorded
        (else their newest activity), so a window over a frozen record does not empty as the calendar moves on;
        else today."""
        if self.today is not None:
            return self.today
        if self.recorded is not None:
            seen = recorded_view(self.recorded, slug)
            for text in (seen.recorded, seen.as_of):
                try:
                    return date.fromisoformat(text[:10])
                except ValueError:
                    continue
        return clock.today()

    def view(self, slug: str) -> View | None:
        """How old the PR and issue answers for ``slug`` are."""
        if self.get is None:
            return None
        if self.recorded is not None:
            return recorded_view(self.recorded, slug)
        return View("api", self.label, (self.today or clock.today()).isoformat())


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
    spans = FileSpans(mirror, commit) if mirror and commit and _holds(mirror, commit) else None
    fp = footprint(root, tracking, pack, base, defined_names(mirror, commit) if mirror and commit else None, spans)
    conflict: Conflict | None = None
    if mirror is not None and spans is not None and fp.hunks:
        patches = [p.path for p in series.load_series(root, pack.target, pack.id, base)]

        def conflict(number: int, files: list[dict] | None, target: str) -> Check:
            if not sources.check_decided and decision_for(pack, f"{slug}#{number}") is not None:
                return Check(unknown="decided already")  # readiness needs no answer for it
            return conflicts.check(mirror, commit, patches, number, files, target, spans)
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
                h = history(mirror, slug, commit, fp, ref, spans)
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
    until = sources.until(slug)
    since = (until - timedelta(days=sources.days)).isoformat()
    if mirror is not None and fp.files and _has_pull_refs(mirror):
        found += mirror_pulls(mirror, slug, fp, since, str(mirror), spans, sources.get, conflict,
                              commit if commit and _holds(mirror, commit) else None)
        notes.append(f"PRs of {slug} held in {mirror} as refs/pull/* (open ones' merge refs, other heads from where "
                     "they left the branch they target), their change read by git")
    if sources.get is None:
        notes.append("no GitHub answers (offline, no recorded answers): PRs and issues not searched")
    elif fp.files or fp.error_texts:
        found += github_candidates(sources.get, slug, fp, sources.label, until, sources.days, spans, conflict)
        notes.append(f"PRs of {slug} listed and their files read, issues searched, from {sources.label}"
                     + ("" if conflict else "; open PRs not checked for conflicts (no mirror holding the base, or "
                                            "no series)"))
        terms = search_terms(fp)
        views += [v] if (v := sources.view(slug)) is not None else []
    return Scan(pack, base, tuple(rank(found)), tuple(notes), tuple(views), tuple(terms))


# ---------------------------------------------------------------------------------------------- decisions

GATING = Overlap.FUNCTION  # the least overlap that needs a decision: a def of ours (or one a contract calls)


def undecided(pack: Pack, candidates: Iterable[Candidate], gating: Overlap = GATING) -> list[Candidate]:
    """Candidates at least ``gating`` close, or open PRs our series conflicts with, with no decision of their
    own, newer than the pack's last decision (an older one was there to see when the person last decided). A PR
    that changes only other defs of one of our files is listed with its overlap, and needs none."""
    last = last_decision(pack)
    out = []
    for c in candidates:
        needs = c.overlap >= gating or bool(c.conflicts) or (c.overlap == Overlap.FILE and not c.hunks_known)
        if not needs or decision_for(pack, c.ref) is not None:
            continue
        if last is None or c.day is None or c.day > last:
            out.append(c)
    return out


def offline_line(pack_ids: list[str]) -> UpstreamError:
    return UpstreamError(f"no network and no recorded GitHub answers: PRs and issues of pack(s) "
                         f"{', '.join(pack_ids)} cannot be searched",
                         hint="point --recorded at a directory of recorded answers (upstream/github), or "
                              "retry with the network")


RECORDED_ENV = "PATCHLANE_GITHUB_RECORDED"
RECORDED_DEFAULT = Path("upstream") / "github"  # the project's recorded answers, dated (CI, offline)


def recorded_dir(root: Path, given: Path | None = None) -> Path | None:
    """Recorded GitHub answers to use: ``given``, else ``$PATCHLANE_GITHUB_RECORDED``, else the repository's
    ``upstream/github`` when it holds search answers; None when there are none."""
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
                   recorded=d, check_decided=False)
