"""`harness status --refresh` against a local server that replays recorded GitHub answers."""

from __future__ import annotations

import json
import socket
import threading
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import cli

from harness.base import clock, ui
from harness.errors import Exit
from harness.lane.tracking import Tracking
from harness.watch import decisions

FIXTURES = Path(__file__).parent / "fixtures" / "github"
TOKEN = "ghp_" + "T" * 36

THREADS = '''
[[packs.01.threads]]
url = "https://github.com/acme/fake/pull/11"
role = "filing target"
state = "draft"

[[packs.01.threads]]
url = "https://github.com/acme/fake/pull/12"
role = "context"
state = "open"

[[packs.01.threads]]
url = "https://github.com/acme/fake/issues/13"
role = "context"
state = "open"

[[packs.01.threads]]
url = "https://github.com/acme/fake/commit/0123456789abcdef0123456789abcdef01234567"
role = "context"
state = "unknown"
'''

ROUTES = {
    "/repos/acme/fake/pulls/11": (200, {}, "pull-open.json"),
    "/repos/acme/fake/pulls/12": (200, {}, "pull-merged.json"),
    "/repos/acme/fake/issues/13": (200, {}, "issue-closed.json"),
    "/repos/acme/fake/pulls/99": (404, {}, "not-found.json"),
}
RATE_LIMITED = (403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1795435200"}, "rate-limited.json")


class FakeGitHub:
    def __init__(self, routes):
        self.routes = routes
        self.requests: list[tuple[str, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                outer.requests.append((self.path, self.headers.get("Authorization")))
                status, headers, name = outer.routes.get(self.path, (404, {}, "not-found.json"))
                body = (FIXTURES / name).read_bytes()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def github():
    servers = []

    def start(routes=ROUTES):
        s = FakeGitHub(routes)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


def test_refresh_updates_states_and_flags_transitions(lane_repo, github, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    lane_repo.write_tracking(THREADS)
    gh = github()
    assert cli("status", "--refresh", "--api-url", gh.url, *lane_repo.args()) == Exit.OK
    out = capsys.readouterr()
    text = (lane_repo.root / "tracking.toml").read_text()
    threads = Tracking.load(lane_repo.root).pack("01").threads
    assert [t.state for t in threads] == ["open", "merged", "closed", "unknown"]
    assert threads[0].verified == clock.today().isoformat() and threads[0].updated == "2026-11-20T08:00:00Z"
    assert threads[3].verified is None  # a commit is not a thread: left alone
    assert "# tracking for tests" in text and "# a pull request" in text
    assert "run `harness absorbed fake`" in out.err
    assert "draft -> open" in out.err and "issue closed" in out.err
    # the overview follows on stdout; the thread's last activity (2026-11-20) is "stale" once STALE_DAYS have passed
    quiet = (clock.today() - date(2026, 11, 20)).days > decisions.STALE_DAYS
    assert f"acme/fake#11 open {'stale ' if quiet else ''}+3" in out.out
    # the token went to the server, and nowhere else
    assert {auth for _, auth in gh.requests} == {f"Bearer {TOKEN}"}
    assert TOKEN not in text and TOKEN not in out.out + out.err


def test_missing_thread_is_named_and_others_still_written(lane_repo, github, capsys):
    lane_repo.write_tracking(THREADS.replace("pull/12", "pull/99"))
    gh = github()
    assert cli("status", "--refresh", "--api-url", gh.url, *lane_repo.args()) == Exit.USAGE
    assert "pulls/99: not found (404)" in capsys.readouterr().err
    assert Tracking.load(lane_repo.root).pack("01").threads[0].state == "open"


def test_rate_limit_writes_nothing_and_exits_9(lane_repo, github, capsys):
    lane_repo.write_tracking(THREADS)
    before = (lane_repo.root / "tracking.toml").read_text()
    gh = github(dict(ROUTES, **{"/repos/acme/fake/issues/13": RATE_LIMITED}))
    assert cli("status", "--refresh", "--api-url", gh.url, *lane_repo.args()) == Exit.UPSTREAM
    err = capsys.readouterr().err
    assert "rate-limited until" in err and "nothing was written" in err and "Traceback" not in err
    assert len([ln for ln in err.splitlines() if ln.startswith("harness: error")]) == 1
    assert (lane_repo.root / "tracking.toml").read_text() == before


def test_offline_is_one_line_and_exit_9(lane_repo, capsys):
    lane_repo.write_tracking(THREADS)
    before = (lane_repo.root / "tracking.toml").read_text()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = cli("status", "--refresh", "--api-url", f"http://127.0.0.1:{port}", "--timeout", "2", *lane_repo.args())
    err = capsys.readouterr().err
    assert code == 9 and "cannot reach" in err and "offline" in err
    assert (lane_repo.root / "tracking.toml").read_text() == before


def test_overview_without_refresh_labels_threads_with_their_repository(lane_repo, capsys, monkeypatch):
    monkeypatch.setattr(ui.out, "width", 250)
    lane_repo.write_tracking(THREADS)
    assert cli("status", *lane_repo.args()) == Exit.OK
    out = capsys.readouterr().out
    assert "acme/fake#11 draft +3" in out and "lane bug: no receipt" in out
    assert cli("status", "01", *lane_repo.args()) == Exit.OK
    story = capsys.readouterr().out
    assert "acme/fake#13  context  open" in story and "acme/fake@0123456  context  unknown" in story


def test_fixtures_are_json():
    for p in FIXTURES.glob("*.json"):
        json.loads(p.read_text())


def test_token_comes_from_github_token_then_gh_token(monkeypatch):
    from harness.upstream.github import token_from_env

    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("GH_TOKEN", raising=False)
    assert token_from_env() is None
    monkeypatch.setenv("GH_TOKEN", "b")
    assert token_from_env() == "b"
    monkeypatch.setenv("GITHUB_TOKEN", "a")
    assert token_from_env() == "a"


def test_anonymous_requests_send_no_authorization(lane_repo, github, capsys, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("GH_TOKEN", raising=False)
    lane_repo.write_tracking(THREADS)
    gh = github()
    assert cli("status", "--refresh", "--api-url", gh.url, *lane_repo.args()) == Exit.OK
    assert {auth for _, auth in gh.requests} == {None}


def test_overview_says_not_filed_and_cuts_a_long_reason_that_json_and_verbose_keep(lane_repo, capsys):
    """'- +3' read as nothing; a 900-character reason buried the overview (pack 03)."""
    long_reason = "no GPU time left in the session that measured the routes " + "(a detail, with numbers) " * 30
    lane_repo.write_tracking(THREADS.replace('role = "filing target"', 'role = "context"'))
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('state = "ready"', f'state = "blocked"\nblocked = "{long_reason}"'))
    assert cli("status", "--no-apply", *lane_repo.args()) == Exit.OK
    header, row = capsys.readouterr().out.splitlines()[:2]
    cells = dict(zip(header.split("\t"), row.split("\t"), strict=True))
    assert cells["upstream"] == "not filed, 4 other threads"
    why = cells["ready / why not"]
    assert len(why) < 260 and "... (all of it: harness status 01)" in why and why.startswith("[state] state blocked")
    assert cli("status", "--no-apply", "-v", *lane_repo.args()) == Exit.OK
    assert long_reason.strip() in capsys.readouterr().out
    assert cli("status", "--no-apply", "--json", *lane_repo.args()) == Exit.OK
    [pack] = json.loads(capsys.readouterr().out)["packs"]
    assert any(long_reason.strip() in r["text"] for r in pack["reasons"])
