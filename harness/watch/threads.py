"""Refreshing the upstream thread states recorded in tracking.toml.

Every thread is read first; only when all reads succeeded (a 404 aside) are
the states written, in one atomic save of tracking.toml: going offline or
hitting the rate limit half-way leaves the file as it was.

Given the filer's GitHub login (``me``), each thread is also searched for what
is ours there: the thread itself (``ours = "author"``) or a comment on it
(``ours = "comment"``); readiness then refuses a second filing of the pack.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from harness.base import clock
from harness.lane.tracking import Pack, Tracking
from harness.upstream.github import ThreadNotFound, ThreadStatus, parse_thread, thread_state


@dataclass(frozen=True)
class Change:
    pack: Pack
    url: str
    old: str
    new: str
    updated: str
    action: str | None  # what a maintainer should do about it, if anything

    def describe(self) -> str:
        text = f"pack {self.pack.id}: {self.url} {self.old} -> {self.new}"
        return f"{text}: {self.action}" if self.action else text


@dataclass(frozen=True)
class Report:
    """One thread as read: its state, whether merged, its last activity, what of ours is there."""

    pack: str
    url: str
    role: str
    state: str
    updated: str
    ours: str | None  # "author", "comment", or None (nothing of ours, or no login to look for)
    looked_for_ours: bool

    @property
    def merged(self) -> bool:
        return self.state == "merged"

    def as_json(self) -> dict:
        return {"pack": self.pack, "url": self.url, "role": self.role, "state": self.state, "merged": self.merged,
                "last_activity": self.updated or None,
                "ours": self.ours if self.looked_for_ours else "unknown"}


@dataclass(frozen=True)
class Refresh:
    read: int
    changes: tuple[Change, ...]
    not_found: tuple[str, ...]
    not_threads: tuple[str, ...]  # URLs that name no pull request or issue (commits)
    reports: tuple[Report, ...] = ()
    me: str | None = None


def transition(pack: Pack, url: str, old: str, new: str) -> str | None:
    if new == old:
        return None
    if new == "merged":
        return f"merged upstream: run `harness absorbed {pack.target}`"
    if new == "closed":
        return "PR closed without merge" if "/pull/" in url else "issue closed"
    if old == "draft" and new == "open":
        return "draft -> open: marked ready for review"
    if new == "draft":
        return "back to draft"
    return None


def refresh(tracking: Tracking, client, today: date | None = None, me: str | None = None,
            packs: list[Pack] | None = None, write: bool = True) -> Refresh:
    """Read every thread of ``packs`` (all by default) through ``client`` (a ``GitHub`` or ``Recorded``);
    then, with ``write``, record states, dates and, with ``me``, what of ours is there."""
    today_s = (today or clock.today()).isoformat()
    fetched: list[tuple[Pack, int, ThreadStatus, str | None, bool]] = []
    missing, skipped = [], []
    for pack in packs if packs is not None else tracking.packs.values():
        for i, th in enumerate(pack.threads):
            ref = parse_thread(th.url)
            if ref is None:
                skipped.append(th.url)
                continue
            try:
                data = client.get(ref.api_path)
                status = ThreadStatus(th.url, thread_state(ref.kind, data), str(data.get("updated_at") or ""),
                                      str(data.get("title") or ""))
                ours, looked = _ours(client, ref, data, me) if me else (None, False)
            except ThreadNotFound as exc:
                missing.append(f"pack {pack.id}: {exc}")
                continue
            fetched.append((pack, i, status, ours, looked))
    # Every read is in: now, and only now, edit the document.
    changes, reports = [], []
    for pack, i, status, ours, looked in fetched:
        old = pack.threads[i].state
        values = {"state": status.state, "verified": today_s, "updated": status.updated or None}
        if ours:
            values["ours"] = ours
        if write:
            tracking.update_thread(pack.id, i, values)
        if old != status.state:
            changes.append(Change(pack, status.url, old, status.state, status.updated,
                                  transition(pack, status.url, old, status.state)))
        reports.append(Report(pack.id, status.url, pack.threads[i].role, status.state, status.updated, ours, looked))
    if fetched and write:
        tracking.save()
    return Refresh(len(fetched), tuple(changes), tuple(missing), tuple(skipped), tuple(reports), me)


def _ours(client, ref, data: dict, me: str) -> tuple[str | None, bool]:
    """('author', True) when ``me`` opened the thread, ('comment', True) when ``me`` commented on it (among
    its first 100 comments), (None, True) when neither, (None, False) when its comments cannot be read."""
    if str((data.get("user") or {}).get("login") or "").lower() == me.lower():
        return "author", True
    try:
        comments = client.get(f"/repos/{ref.owner}/{ref.repo}/issues/{ref.number}/comments?per_page=100")
    except ThreadNotFound:
        return None, False
    for c in comments if isinstance(comments, list) else []:
        if str((c.get("user") or {}).get("login") or "").lower() == me.lower():
            return "comment", True
    return None, True
