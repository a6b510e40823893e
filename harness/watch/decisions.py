"""A pack's recorded decisions about overlapping upstream work (``pack.toml's [[related]]``), read as data.

Pure functions of a loaded ``Pack``: where a comment goes, whether upstream work replaces ours, the
related section of a filing body, whether its filing targets are still open and active (``target_health``),
and whether we are already on one (``already_there``). ``harness/watch/related.py`` finds the candidates;
this module only reads what the person filing decided, so the filing code can use it without the search
machinery.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from harness.base import clock
from harness.lane.tracking import Decision, Pack, Thread
from harness.upstream.github import parse_thread


def last_decision(pack: Pack) -> date | None:
    return max((d.date for d in pack.related), default=None)


def decision_for(pack: Pack, ref: str) -> Decision | None:
    return next((d for d in pack.related if d.ref.lower() == ref.lower()), None)


def superseded_by(pack: Pack) -> Decision | None:
    return next((d for d in pack.related if d.relation == "supersedes-us"), None)


def comment_target(pack: Pack) -> str | None:
    """The thread a comment pack is filed on: its ``comment-there`` decision's, else its ``filing target``."""
    d = next((d for d in pack.related if d.relation == "comment-there" and "#" in d.ref), None)
    if d is not None:
        listed = next((t.url for t in pack.threads if _label(t.url) == d.ref.lower()), None)
        return listed or d.url
    return next((t.url for t in pack.threads if t.role == "filing target"), None)


def _label(url: str) -> str:
    ref = parse_thread(url)
    return f"{ref.owner}/{ref.repo}#{ref.number}".lower() if ref else url


def thread_of(pack: Pack, url: str) -> Thread | None:
    ref = _label(url)
    return next((t for t in pack.threads if _label(t.url) == ref), None)


def targets(pack: Pack) -> list[str]:
    """Where the pack would be filed or is discussed as its own: the comment target and 'filing target' threads."""
    urls = [t.url for t in pack.threads if t.role == "filing target"]
    target = comment_target(pack) if pack.kind == "comment" else None
    if target and all(_label(u) != _label(target) for u in urls):
        urls.insert(0, target)
    return urls


# How a body names each relation: what the thread is (kind, state, whether it is another repository's) and the
# decision's one-line reason, which is written for the maintainer who reads the body (the body check lints it).
_LEADS = {
    "supersedes-us": "replaces this change",
    "we-extend": "this change builds on it",
    "comment-there": "",  # the thread the comment is posted on: not listed in its own body
    "independent": "",
    "duplicate-of-ours": "proposes the same change",
}
_KIND_WORDS = {"pr": "pull request", "issue": "issue", "commit": "commit"}
_QUIET = ("same function", "same file", "mention")  # an independent decision at these overlaps stays out of bodies


def describe(d: Decision, home: str) -> str:
    """``d`` as a maintainer of ``home`` (owner/repo) reads it: '#3574 (merged pull request)' in its own repository
    (GitHub links a bare number there), 'tile-ai/tilelang#348 (open issue in another repository)' elsewhere."""
    assert d.kind is not None and d.state is not None
    what = _KIND_WORDS[d.kind] if d.kind == "commit" else f"{d.state} {_KIND_WORDS[d.kind]}"
    if d.kind == "commit":
        what = "commit" if d.state == "merged" else f"{d.state} commit"
    if d.slug.lower() != home.lower():
        what += " in another repository"
    label = short_ref(d.ref, home) if d.kind != "commit" else f"{d.slug}@{d.ref.split('@', 1)[1][:10]}"
    return f"{label} ({what})"


def short_ref(ref: str, home: str) -> str:
    """``owner/repo#N`` as written in ``home``'s own threads: ``#N`` there, the whole reference elsewhere."""
    slug, sep, number = ref.partition("#")
    return f"#{number}" if sep and slug.lower() == home.lower() else ref


def body_lines(pack: Pack, home: str, base_commit: str = "") -> tuple[list[str], list[str]]:
    """(the filing body's related section, problems): one line per decided upstream thread or commit, from its
    recorded kind, state and reason. A decision without a recorded kind or state is a problem, never guessed.
    The thread a comment goes to and the filing base's own commit (the body's "Where" names it) are not listed, nor
    an independent thread recorded as sharing only a def or a file (``overlap``): the body keeps to the threads
    that change the same lines, conflict with the change, or that it builds on, replaces or repeats. Open
    independent PRs recorded as a textual conflict share one closing line."""
    lines, problems, conflicting = [], [], []
    for d in pack.related:
        if d.relation == "comment-there" or (base_commit and d.ref.endswith("@" + base_commit)):
            continue
        if d.relation == "independent" and d.overlap in _QUIET:
            continue  # shares a def or a file, not the lines: decided in tracking.toml, not worth a body line
        if d.relation == "independent" and d.overlap == "conflict" and d.state in ("open", "draft"):
            conflicting.append(d.ref)  # one line for all of them: a rebase, not a matter of substance
            continue
        if d.kind is None or d.state is None:
            problems.append(f"related {d.ref}: no kind/state recorded in [[related]] of {pack.declared_in} (keys "
                            "'kind': pr | issue | commit, 'state': open | draft | merged | closed)")
            continue
        lead = _LEADS[d.relation]
        lines.append(f"- {describe(d, home)}: " + (f"{lead}; " if lead else "") + d.reason.rstrip("."))
    if conflicting:
        lines.append("- Open pull requests editing the same lines (textual conflicts; whichever lands second is "
                     "rebased): " + ", ".join(short_ref(r, home) for r in conflicting))
    return lines, problems


STALE_DAYS = 90  # a filing target with no activity for this long is flagged stale


@dataclass(frozen=True)
class TargetHealth:
    url: str
    state: str
    updated: str | None
    problem: str | None  # "closed", "merged", "stale (no activity since ...)", None when healthy

    def as_json(self) -> dict:
        return {"url": self.url, "state": self.state, "updated": self.updated, "problem": self.problem}


def target_health(pack: Pack, today: date | None = None, stale_days: int = STALE_DAYS) -> list[TargetHealth]:
    today = today or clock.today()
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
