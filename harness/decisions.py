"""A pack's recorded decisions about overlapping upstream work (``[[packs.NN.related]]``), read as data.

Pure functions of a loaded ``Pack``: where a comment goes, whether upstream work replaces ours, and the
related section of a filing body. ``harness/related.py`` finds the candidates; this module only reads
what the person filing decided, so the filing code can use it without the search machinery.
"""

from __future__ import annotations

from datetime import date

from harness.github import parse_thread
from harness.tracking import Decision, Pack, Thread


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


# How a body names each relation. The decision's own reason is our working note (it may cite our runs and
# files) and stays in tracking.toml; the body says only how the thread relates to this change.
_SENTENCES = {
    "supersedes-us": "{what} replaces this change.",
    "we-extend": "This change builds on {what}.",
    "comment-there": "",  # the thread the comment is posted on: not listed in its own body
    "independent": "{what} touches the same code; it is a separate change.",
    "duplicate-of-ours": "{what} proposes the same change.",
}


def body_lines(pack: Pack) -> list[str]:
    """The filing body's related section: one sentence per decided upstream thread (commits are not listed:
    the body's "Where" already names the base it was checked against)."""
    lines = []
    for d in pack.related:
        if "#" not in d.ref or not _SENTENCES[d.relation]:
            continue
        lines.append("- " + _SENTENCES[d.relation].format(what=d.ref))
    return lines
