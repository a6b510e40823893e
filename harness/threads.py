"""Refreshing the upstream thread states recorded in tracking.toml.

Every thread is read first; only when all reads succeeded (a 404 aside) are
the states written, in one atomic save of tracking.toml: going offline or
hitting the rate limit half-way leaves the file as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from harness.github import GitHub, ThreadNotFound, ThreadStatus, parse_thread
from harness.tracking import Pack, Tracking


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
class Refresh:
    read: int
    changes: tuple[Change, ...]
    not_found: tuple[str, ...]
    not_threads: tuple[str, ...]  # URLs that name no pull request or issue (commits)


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


def refresh(tracking: Tracking, client: GitHub, today: date | None = None) -> Refresh:
    today_s = (today or date.today()).isoformat()
    fetched: list[tuple[Pack, int, ThreadStatus]] = []
    missing, skipped = [], []
    for pack in tracking.packs.values():
        for i, th in enumerate(pack.threads):
            if parse_thread(th.url) is None:
                skipped.append(th.url)
                continue
            try:
                fetched.append((pack, i, client.thread(th.url)))
            except ThreadNotFound as exc:
                missing.append(f"pack {pack.id}: {exc}")
    # Every read is in: now, and only now, edit the document.
    changes = []
    for pack, i, status in fetched:
        old = pack.threads[i].state
        tracking.update_thread(pack.id, i, {"state": status.state, "verified": today_s,
                                            "updated": status.updated or None})
        if old != status.state:
            changes.append(Change(pack, status.url, old, status.state, status.updated,
                                  transition(pack, status.url, old, status.state)))
    if fetched:
        tracking.save()
    return Refresh(len(fetched), tuple(changes), tuple(missing), tuple(skipped))
