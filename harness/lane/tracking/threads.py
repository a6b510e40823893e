"""A pack's threads and related decisions as tracking.toml gives them, checked: thread URLs on the target's
repository, one filing target, decisions naming a ref, a relation and a reason."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

from harness.base.tomlutil import field
from harness.errors import ConfigError
from harness.lane.tracking.model import (
    RELATED_KINDS,
    RELATED_OVERLAPS,
    RELATED_REF,
    RELATED_STATES,
    RELATIONS,
    Decision,
    Thread,
    latest_today,
)
from harness.upstream import pins

# GitHub serves the same thread at www.github.com, over http, and with leading zeros in its number.
_GITHUB_THREAD = re.compile(r"^https?://(?:www\.)?github\.com/([^/\s]+)/([^/\s#?]+)/(?:pull|issues)/([0-9]+)"
                            r"(?:[/?#].*)?$", re.IGNORECASE)


def _thread_key(url: str) -> str:
    """``owner/repo#N`` in lower case for a GitHub pull request or issue (GitHub's names ignore case, a pull
    request is also an issue of the same number, ``www.`` and leading zeros name the same thread); any other URL
    lower-cased, without a trailing slash."""
    m = _GITHUB_THREAD.match(url.strip())
    if not m:
        return url.strip().rstrip("/").lower()
    return f"{m.group(1)}/{m.group(2)}#{m.group(3).lstrip('0') or '0'}".lower()


def _odd_github_host(url: str) -> str:
    """How ``url``'s host part differs from a plain ``github.com`` (a port, a trailing dot, user info), or ""
    when it is plain or not GitHub at all: such a URL names the same thread under another spelling, and slipped
    past the check of one entry per thread and of the filing target's repository."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").rstrip(".")
        port = parts.port
    except ValueError:
        return ""
    if host not in ("github.com", "www.github.com"):
        return ""
    netloc = parts.netloc.lower()
    if "@" in netloc:
        return "with user info"
    if port is not None or netloc.endswith(":"):
        return f"with a port ({netloc})"
    if netloc.endswith("."):
        return f"with a trailing dot ({netloc})"
    return ""


def _repo_slug(url: str) -> str:
    """``owner/repo`` (lower case) of a GitHub URL, "" for any other."""
    m = re.match(r"^https?://(?:www\.)?github\.com/([^/\s]+)/([^/\s#?]+?)(?:\.git)?(?:[/?#].*)?$", url.strip(),
                 re.IGNORECASE)
    return f"{m.group(1)}/{m.group(2)}".lower() if m else ""


def _located(where: str, pid: str, needle: str, nth: int = 0) -> str:
    """``where`` with ``:LINE`` after the file name: the line of the ``nth`` occurrence of ``needle`` (compared
    case-insensitively) inside the tables of pack ``pid``; ``where`` unchanged when it cannot be found."""
    path_text, sep, rest = where.partition(" [packs.")
    try:
        lines = Path(path_text).read_text(encoding="utf-8").splitlines()
    except OSError:
        return where
    inside, seen = False, 0
    for no, line in enumerate(lines, 1):
        head = line.strip()
        if head.startswith("["):
            inside = re.match(rf"^\[\[?packs\.{re.escape(pid)}[\].]", head) is not None
        elif inside and needle.lower() in line.lower():
            if seen == nth:
                return f"{path_text}:{no}{sep}{rest}"
            seen += 1
    return where


def _check_threads(threads: tuple[Thread, ...], manifest: pins.Manifest, pid: str, where: str) -> None:
    """One entry per thread (case and pull/issues aside), and a filing target in the pack's own repository."""
    seen: dict[str, tuple[int, Thread]] = {}
    count: dict[str, int] = {}
    own = _repo_slug(manifest.repo)
    for i, th in enumerate(threads):
        key = _thread_key(th.url)
        nth = count.get(th.url.lower(), 0)
        count[th.url.lower()] = nth + 1
        here = _located(f"{where} threads[{i}]", pid, th.url, nth)
        odd = _odd_github_host(th.url)
        if odd:
            raise ConfigError(f"{here}: {th.url} names GitHub's host {odd}; write it https://github.com/OWNER/REPO/"
                              "pull/N (or issues/N), as GitHub links it, so one thread is one entry")
        if key in seen:
            j, first = seen[key]
            how = (f"with contradictory states ({first.state!r} there, {th.state!r} here)" if first.state != th.state
                   else "twice")
            raise ConfigError(f"{here}: {th.url} is threads[{j}] ({first.url}) again, listed {how}; keep one "
                              "entry per thread (GitHub's names ignore case)")
        seen[key] = (i, th)
        if th.role == "filing target" and own and _repo_slug(th.url) != own:
            raise ConfigError(f"{here}: the filing target {th.url} is not in the pack's target repository "
                              f"({manifest.repo}, {manifest.path.name})")


def _load_related(entries, where: str, pid: str = "") -> tuple[Decision, ...]:
    """The pack's decisions about overlapping upstream work; a relation outside RELATIONS is refused, and so
    are one candidate decided twice (case aside) and a decision dated after today."""
    if not isinstance(entries, list):
        raise ConfigError(f"{where} .related: must be an array of tables (pack.toml's [[related]])")
    out, seen = [], set()
    for i, entry in enumerate(entries):
        rwhere = f"{where} related[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{rwhere}: must be a table (pack.toml's [[related]])")
        ref = field(entry, "ref", str, rwhere)
        if not RELATED_REF.match(ref):
            raise ConfigError(f"{rwhere}: key 'ref' is {ref!r}; write 'owner/repo#N' for a pull request or issue, "
                              "'owner/repo@<full 40-hex sha>' for a commit")
        if ref.lower() in seen:
            rwhere = _located(rwhere, pid, ref, 1)
            raise ConfigError(f"{rwhere}: {ref} is decided twice (GitHub's names ignore case); keep one entry "
                              "(edit its date when you re-decide)")
        seen.add(ref.lower())
        relation = field(entry, "relation", str, rwhere)
        if relation not in RELATIONS:
            raise ConfigError(f"{rwhere} ({ref}): relation '{relation}' is not one of {', '.join(RELATIONS)}")
        reason = field(entry, "reason", str, rwhere)
        if not reason.strip() or "\n" in reason.strip():
            raise ConfigError(f"{rwhere} ({ref}): key 'reason' must be one line, saying why")
        kind = entry.get("kind")
        if kind is not None and kind not in RELATED_KINDS:
            raise ConfigError(f"{rwhere} ({ref}): kind {kind!r} is not one of {', '.join(RELATED_KINDS)}")
        if kind is not None and ("@" in ref) != (kind == "commit"):
            raise ConfigError(f"{rwhere} ({ref}): kind '{kind}' does not fit the ref (a commit is 'owner/repo@sha' "
                              "and only that)")
        state = entry.get("state")
        if state is not None and state not in RELATED_STATES:
            raise ConfigError(f"{rwhere} ({ref}): state {state!r} is not one of {', '.join(RELATED_STATES)}")
        overlap = entry.get("overlap")
        if overlap is not None and overlap not in RELATED_OVERLAPS:
            raise ConfigError(f"{rwhere} ({ref}): overlap {overlap!r} is not one of {', '.join(RELATED_OVERLAPS)}")
        at = entry.get("at")
        if at is not None and not (isinstance(at, str) and re.fullmatch(r"[0-9a-f]{40}", at)):
            raise ConfigError(f"{_located(rwhere, pid, ref)} ({ref}): key 'at' is {at!r}; write the full 40-hex sha of "
                              "the upstream commit the candidate was compared with")
        date = _iso_date(entry.get("date"), f"{rwhere} ({ref})")
        if date > latest_today():
            raise ConfigError(f"{_located(rwhere, pid, ref)} ({ref}): key 'date' is {date.isoformat()}, after today "
                              f"({latest_today().isoformat()} at the latest anywhere); a decision is dated when it "
                              "was made (a later date would hide every newer candidate from readiness)")
        out.append(Decision(ref, relation, reason.strip(), date, kind, state, overlap, at))
    return tuple(out)


def _iso_date(value, where: str) -> datetime.date:
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    if isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            pass
    raise ConfigError(f"{where}: key 'date' must be an ISO date such as 2026-11-24 (when it was decided)")
