"""A small GitHub REST client: the state of the pull requests and issues packs live on.

The token comes from ``GITHUB_TOKEN`` or ``GH_TOKEN`` when set and is only ever
sent in the Authorization header, and only over https (or plain http to this
host's loopback, where a test server listens): it is never written to disk, a
receipt or a message, and never reaches upstream code (``harness/base/guard.py``).
``api_url`` lets tests point the client at a local server. Being
offline, rate-limited or refused is an ``UpstreamError`` (exit 9) with one line
saying which; a thread that does not exist is a ``ThreadNotFound``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from harness import __version__
from harness.errors import ConfigError, Exit, UpstreamError, UsageError

DEFAULT_API = "https://api.github.com"
_URL = re.compile(r"^https://github\.com/(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+)/(?P<kind>pull|issues)/(?P<num>\d+)/?$")
_COMMIT = re.compile(r"^https://github\.com/(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+)/commit/(?P<sha>[0-9a-f]{7,40})/?$")
_REPO = re.compile(r"^https://github\.com/(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+?)(?:\.git)?/?$")


class ThreadNotFound(ConfigError):
    """The API answered 404 for a thread URL named in tracking.toml."""


class Unreachable(UpstreamError):
    """The API could not be reached at all (no network), or gave no whole answer within the request's deadline."""


class BadAnswer(UpstreamError):
    """The API answered, but not what a GitHub REST answer is: not JSON, JSON of the wrong type (``[]``,
    ``null``, a string where an object belongs), or a body past ``MAX_BODY``. Exit 4 (an artefact that fails its
    check), one line naming the URL; nothing was written."""

    exit_code = Exit.PIN


MAX_BODY = 10 * 1024 * 1024  # bytes of one answer; GitHub's largest (100 files of a pull request) stay far below
_LISTS = ("/commits", "/comments", "/files", "/pulls")  # REST paths whose answer is an array; every other one is an object


class _Deadline(Exception):
    """Raised from SIGALRM when a whole request ran past its deadline (a server trickling bytes never trips
    the per-read timeout)."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise ``_Deadline`` in this thread once ``seconds`` pass (main thread only, and only when no other
    interval timer is set: elsewhere the per-read timeout and the body loop's own check remain)."""
    usable = (threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
              and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))
    if not usable:
        yield
        return

    def fire(signum, frame):
        raise _Deadline()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass(frozen=True)
class ThreadRef:
    owner: str
    repo: str
    kind: str  # "pull" or "issues"
    number: int

    @property
    def api_path(self) -> str:
        return f"/repos/{self.owner}/{self.repo}/{'pulls' if self.kind == 'pull' else 'issues'}/{self.number}"


@dataclass(frozen=True)
class ThreadStatus:
    url: str
    state: str  # open, draft, merged, closed
    updated: str  # ISO date-time of the last update, as GitHub gives it
    title: str


def parse_thread(url: str) -> ThreadRef | None:
    """The pull request or issue a github.com URL names (None for commits and anything else)."""
    m = _URL.match(url)
    return ThreadRef(m["owner"], m["repo"], m["kind"], int(m["num"])) if m else None


def thread_label(url: str) -> str:
    """How GitHub itself writes a reference: ``owner/repo#N`` for a PR or issue, ``owner/repo@abcdef1`` for a
    commit; anything else stays the URL."""
    ref = parse_thread(url)
    if ref is not None:
        return f"{ref.owner}/{ref.repo}#{ref.number}"
    m = _COMMIT.match(url)
    if m:
        return f"{m['owner']}/{m['repo']}@{m['sha'][:7]}"
    return url


def repo_slug(url: str) -> str | None:
    """'owner/name' of a github.com repository URL."""
    m = _REPO.match(url)
    return f"{m['owner']}/{m['repo']}" if m else None


def token_from_env() -> str | None:
    return os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN") or None


class GitHub:
    """The client. Only it imports ``requests``: a command that never talks to GitHub (``--version``,
    ``list``, ``run`` ...) does not pay for importing it, and the parsing helpers above need none."""

    def __init__(self, api_url: str = DEFAULT_API, token: str | None = None, timeout: float = 15.0):
        import requests

        self.api_url = api_url.rstrip("/")
        self.timeout = timeout
        self._session = requests.Session()
        self._session.headers.update({
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": f"patch-lane-harness/{__version__}",
        })
        plain_http = _refuse_plain_http(self.api_url, with_token=bool(token))
        if token:
            if plain_http:  # to the loopback only: no proxy from the environment may stand in between
                self._session.trust_env = False
            self._session.headers["Authorization"] = f"Bearer {token}"

    def get(self, path: str) -> Any:
        """The JSON answer of ``GET path``: an object, or an array for the paths that list (``_LISTS``).

        The whole request (connecting, headers, body) has ``timeout`` seconds, not each read of it; the body
        may hold at most ``MAX_BODY`` bytes.
        """
        import requests

        url = self.api_url + path
        try:
            with _deadline(self.timeout):
                ends = time.monotonic() + self.timeout
                with self._session.get(url, timeout=self.timeout, stream=True) as resp:
                    body = _read_capped(resp, url, ends)
        except (_Deadline, TimeoutError):
            raise Unreachable(f"{url}: no whole answer within --timeout {self.timeout:g} s",
                              hint="nothing was written; retry, or give a longer --timeout") from None
        except requests.RequestException as exc:
            raise Unreachable(f"cannot reach {self.api_url} (offline?): {type(exc).__name__}",
                                hint="nothing was written; retry when the network is back") from None
        if resp.status_code == 404:
            raise ThreadNotFound(f"{url}: not found (404)")
        if resp.status_code in (403, 429) and (resp.headers.get("X-RateLimit-Remaining") == "0"
                                               or resp.status_code == 429 or "Retry-After" in resp.headers):
            raise UpstreamError(f"{self.api_url}: rate-limited{_reset(resp)}; nothing was written",
                                hint="set GITHUB_TOKEN (or GH_TOKEN) for a higher limit, or retry later")
        if resp.status_code in (401, 403):
            raise UpstreamError(f"{self.api_url}: request refused ({resp.status_code}); check GITHUB_TOKEN/GH_TOKEN")
        if resp.status_code >= 400:
            raise UpstreamError(f"{url}: HTTP {resp.status_code}")
        try:
            data = json.loads(body)
        except ValueError:
            raise BadAnswer(f"{url}: answer is not JSON; nothing was written") from None
        want = list if urlsplit(path).path.endswith(_LISTS) else dict
        if not isinstance(data, want):
            raise BadAnswer(f"{url}: answer is JSON {type(data).__name__ if data is not None else 'null'}, not the "
                            f"{'array' if want is list else 'object'} GitHub answers there; nothing was written")
        return data

    def thread(self, url: str) -> ThreadStatus:
        return thread_status(self.get, url)

    def login(self) -> str | None:
        """The token's own GitHub login (``GET /user``); None without a token."""
        if "Authorization" not in self._session.headers:
            return None
        data = self.get("/user")
        return str(data.get("login") or "") or None


def _read_capped(resp, url: str, ends: float) -> bytes:
    """The body of ``resp``, refused past ``MAX_BODY`` bytes (announced or read) or past the deadline ``ends``."""
    announced = resp.headers.get("Content-Length", "")
    if announced.isdigit() and int(announced) > MAX_BODY:
        raise BadAnswer(f"{url}: answer of {int(announced)} bytes, more than the {MAX_BODY} an answer may have; "
                        "nothing was written")
    chunks, size = [], 0
    for chunk in resp.iter_content(65536):
        size += len(chunk)
        if size > MAX_BODY:
            raise BadAnswer(f"{url}: answer longer than the {MAX_BODY} bytes an answer may have; nothing was written")
        if time.monotonic() > ends:
            raise TimeoutError
        chunks.append(chunk)
    return b"".join(chunks)


def thread_state(kind: str, data: dict) -> str:
    """open, draft, merged or closed, from a pull request's or issue's REST answer."""
    if kind == "pull" or "pull_request" in data:
        if data.get("merged") or data.get("merged_at") or (data.get("pull_request") or {}).get("merged_at"):
            return "merged"
        if data.get("state") == "closed":
            return "closed"
        return "draft" if data.get("draft") else "open"
    return "closed" if data.get("state") == "closed" else "open"


def thread_status(get, url: str) -> ThreadStatus:
    """A thread's state through ``get`` (a ``GitHub`` or a ``Recorded`` source: the same REST paths)."""
    ref = parse_thread(url)
    if ref is None:
        raise ConfigError(f"{url}: not a github.com pull request or issue URL")
    data = get(ref.api_path)
    return ThreadStatus(url, thread_state(ref.kind, data), str(data.get("updated_at") or ""),
                        str(data.get("title") or ""))


class Recorded:
    """GitHub REST answers recorded as files, for machines without the network (CI) and for tests.

    ``GET /repos/o/r/pulls/7`` is ``<dir>/repos/o/r/pulls/7.json``, in the shape the API returns;
    ``GET /repos/o/r/pulls?state=all`` (the list) is ``<dir>/repos/o/r/pulls.json``, filtered by state.
    ``GET /search/issues?q=...`` is answered from ``<dir>/search/issues/<owner>+<repo>.json`` (a search
    answer holding every item recorded for that repository) by keeping the items GitHub's search would:
    of the ``is:pr``/``is:issue`` kind asked, updated on or after an ``updated:>=`` date, and holding the
    quoted terms in the title or body (all of them, or any one when they are joined by ``OR``;
    case-insensitive, like GitHub's own matching of a phrase).
    A path with no file is a ``ThreadNotFound``, as a 404 is.
    """

    def __init__(self, root: Path):
        self.root = root
        self.api_url = f"recorded answers in {root}"

    def get(self, path: str):
        parts = urlsplit(path)
        if parts.path == "/search/issues":
            return self._search(parse_qs(parts.query).get("q", [""])[0])
        file = self.root / (parts.path.strip("/") + ".json")
        if not file.is_file():
            raise ThreadNotFound(f"{path}: not recorded ({file} missing)")
        if parts.path.endswith("/pulls"):
            return self._pulls(file, parse_qs(parts.query))
        return _read_json(file)

    def _pulls(self, file: Path, query: dict[str, list[str]]) -> list:
        """``GET /repos/o/r/pulls?state=...&page=N`` from the recorded list of PRs (``pulls.json``): one page
        holding every recorded PR of the state asked (open: open and draft; closed: merged and closed; all),
        newest update first; later pages are empty."""
        if query.get("page", ["1"])[0] not in ("", "1"):
            return []
        state = query.get("state", ["open"])[0]
        items = _read_json(file)
        keep = [pr for pr in items if isinstance(pr, dict) and state in ("all", pr.get("state"))]
        return sorted(keep, key=lambda pr: str(pr.get("updated_at") or ""), reverse=True)

    def thread(self, url: str) -> ThreadStatus:
        return thread_status(self.get, url)

    def login(self) -> str | None:
        return None

    def _search(self, q: str) -> dict:
        repo = re.search(r"\brepo:(\S+)", q)
        if repo is None:
            raise UsageError(f"recorded search needs a repo: qualifier ({q!r})")
        file = self.root / "search" / "issues" / (repo.group(1).replace("/", "+") + ".json")
        items = _read_json(file).get("items", []) if file.is_file() else []
        terms = [t.lower() for t in re.findall(r'"([^"]+)"', q)]
        kind = re.search(r"\bis:(pr|issue)\b", q)
        since = re.search(r"\bupdated:>=(\S+)", q)
        keep = []
        for item in items:
            text = f"{item.get('title') or ''}\n{item.get('body') or ''}".lower()
            is_pr = "pull_request" in item
            if kind and (kind.group(1) == "pr") != is_pr:
                continue
            if since and item.get("updated_at") and str(item["updated_at"])[:10] < since.group(1):
                continue
            if (any if " OR " in q else all)(t in text for t in terms):
                keep.append(item)
        return {"total_count": len(keep), "incomplete_results": False, "items": keep}


def _read_json(file: Path):
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{file}: not a recorded GitHub answer ({exc})") from None


def _refuse_plain_http(api_url: str, with_token: bool = True) -> bool:
    """A token goes only over https, or over http to this host's own loopback (a local test server).
    Returns whether the URL is plain http (to the loopback, when ``with_token``).

    Judged on the URL exactly as the HTTP client will connect to it: ``requests`` prepares it and urllib3
    parses the result, and that host is the one checked (two parsers that disagree on, say, a backslash
    before an ``@`` would otherwise let one see the loopback while the other connects elsewhere). A URL
    with a backslash or with credentials is refused outright: neither has a use in an API URL.
    """
    import requests
    from urllib3.exceptions import LocationParseError
    from urllib3.util import parse_url

    hint = "use an https:// --api-url, or unset the token for an anonymous read"
    if "\\" in api_url:
        raise UsageError(f"refusing --api-url {api_url!r}: it holds a backslash, which URL parsers read differently",
                         hint=hint)
    try:
        parts = parse_url(requests.Request("GET", api_url + "/").prepare().url or "")
    except (requests.RequestException, LocationParseError, ValueError) as exc:
        raise UsageError(f"refusing --api-url {api_url!r}: not a URL the HTTP client can use ({exc})") from None
    if parts.auth or "@" in (urlsplit(api_url).netloc or ""):
        raise UsageError(f"refusing --api-url {api_url!r}: it holds credentials; the token goes in a header only",
                         hint="give the URL without 'user:password@'")
    if parts.scheme == "https" or not with_token:
        return parts.scheme == "http"
    host = (parts.host or "").lower().strip("[]")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if parts.scheme != "http" or not loopback:
        raise UsageError(f"refusing to send GITHUB_TOKEN/GH_TOKEN to {api_url}: not https", hint=hint)
    return True


def _reset(resp) -> str:
    reset = resp.headers.get("X-RateLimit-Reset")
    if reset and reset.isdigit():
        return f" until {datetime.fromtimestamp(int(reset), UTC):%H:%M} UTC"
    retry = resp.headers.get("Retry-After")
    return f" (retry after {retry} s)" if retry else ""
