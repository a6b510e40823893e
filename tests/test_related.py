"""`harness related`, the [[packs.NN.related]] decisions, and what readiness makes of them.

The upstream is a temporary git repository mirrored as ``acme+fake.git`` (full history); GitHub's answers are
recorded files (harness.upstream.github.Recorded) or a local server on 127.0.0.1 for the rate limit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote_plus

import pytest
from conftest import CORE_BUGGY, REPO, cli, make_patch

from harness.base import clock
from harness.errors import ConfigError, Exit
from harness.filing.readiness import ReasonCode
from harness.lane.tracking import Tracking
from harness.watch import decisions, footprint, related

SLUG = "acme/fake"


def _git(cwd: Path, *args: str, when: str = "2026-01-01T00:00:00+0000") -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@invalid", "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when,
           "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_GLOBAL": "/dev/null"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


class Upstream:
    """A work tree of the fake upstream plus its bare mirror ``<mirrors>/acme+fake.git``."""

    def __init__(self, tmp: Path):
        self.work = tmp / "upstream-work"
        self.mirrors = tmp / "mirrors"
        (self.work / "src" / "fakepkg").mkdir(parents=True)
        (self.work / "src" / "fakepkg" / "core.py").write_text(CORE_BUGGY)
        (self.work / "README").write_text("fake\n")
        _git(self.work, "init", "-q", "-b", "main")
        _git(self.work, "add", "-A")
        _git(self.work, "commit", "-q", "-m", "release 1.0")
        self.base = _git(self.work, "rev-parse", "HEAD").strip()
        self.mirrors.mkdir()
        _git(tmp, "clone", "-q", "--bare", str(self.work), str(self.mirrors / "acme+fake.git"))

    def commit(self, path: str, text: str, message: str, when: str) -> str:
        (self.work / path).write_text(text)
        _git(self.work, "commit", "-q", "-am", message, when=when)
        _git(self.work, "push", "-q", str(self.mirrors / "acme+fake.git"), "main")
        return _git(self.work, "rev-parse", "HEAD").strip()


@pytest.fixture
def upstream(lane_repo, tmp_path, monkeypatch) -> Upstream:
    """lane_repo's target on github.com, its base 1.0 pinned at the upstream's first commit."""
    up = Upstream(tmp_path)
    manifest = lane_repo.root / "upstream" / "fake.toml"
    text = manifest.read_text().replace("https://example.invalid/fake", f"https://github.com/{SLUG}")
    manifest.write_text(text.replace(f'commit = "{"a" * 40}"', f'commit = "{up.base}"'))
    monkeypatch.delenv("PATCHLANE_GIT_MIRRORS", raising=False)
    monkeypatch.delenv(related.RECORDED_ENV, raising=False)
    return up


def _status(lane_repo, up: Upstream, capsys) -> dict:
    capsys.readouterr()
    assert cli("status", "01", "--json", "--no-apply", "--git-mirrors", str(up.mirrors),
               *lane_repo.args()) == Exit.OK
    return json.loads(capsys.readouterr().out)["packs"][0]


def _codes(pack_json: dict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in pack_json["reasons"]:
        out.setdefault(r["code"], []).append(r["text"])
    return out


def _decide(lane_repo, ref: str, relation: str, day: str, reason: str = "checked by hand") -> None:
    with (lane_repo.root / "tracking.toml").open("a") as fh:
        fh.write(f'\n[[packs.01.related]]\nref = "{ref}"\nrelation = "{relation}"\nreason = "{reason}"\n'
                 f'date = {day}\n')


# ---------------------------------------------------------------------------------------------- ranking

PACK_DIFF = """diff --git a/m.py b/m.py
--- a/m.py
+++ b/m.py
@@ -10,7 +10,7 @@ def scale(xs, w):
 a
 b
 c
-    return [x * w[0] for x in xs]
+    return [x * wi for x, wi in zip(xs, w)]
 d
 e
 f
"""


def _hunk(start: int, function: str, text: str = "-x\n+y") -> str:
    return f"diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -{start},1 +{start},1 @@ {function}\n{text}\n"


def test_parse_diff_finds_changed_lines_and_function():
    (h,) = footprint.parse_diff(PACK_DIFF)
    assert (h.path, h.first, h.last, h.function) == ("m.py", 13, 13, "scale")
    # git's header names the def before the hunk; a def among the context lines above the change wins
    (h,) = footprint.parse_diff(PACK_DIFF.replace(" b\n", " def inner():\n", 1))
    assert (h.first, h.function) == (13, "inner")


def test_candidates_rank_same_hunk_then_function_then_file_then_mention():
    fp = footprint.Footprint("1.0", ("m.py",), tuple(footprint.parse_diff(PACK_DIFF)))
    found = []
    for ref, diff in (("o/r#1", _hunk(80, "def other(a):")),  # same file only
                      ("o/r#2", _hunk(14, "def scale(xs, w):")),  # within our hunk's lines
                      ("o/r#3", _hunk(60, "def scale(xs, w):"))):  # same function, other lines
        overlap, where = fp.describe(footprint.parse_diff(diff))
        assert overlap is not None
        found.append(related.Candidate(ref, "pull", "", "2026-01-01", "open", overlap, where, "test"))
    found.append(related.Candidate("o/r#4", "issue", "", "2026-02-01", "open", footprint.Overlap.MENTION, "", "t"))
    assert [c.ref for c in related.rank(found)] == ["o/r#2", "o/r#3", "o/r#1", "o/r#4"]
    assert [c.overlap.label for c in related.rank(found)] == ["same hunk", "same function", "same file", "mention"]
    other = footprint.parse_diff(_hunk(14, "def scale(xs, w):").replace("m.py", "n.py"))
    assert fp.describe(other) == (None, "")  # not our file


# ---------------------------------------------------------------------------------------------- git history

def test_a_new_overlapping_commit_drops_readiness_until_decided(lane_repo, upstream, capsys):
    before = _status(lane_repo, upstream, capsys)
    assert ReasonCode.RELATED.value not in _codes(before)
    assert before["related"]["candidates"] == []

    sha = upstream.commit("src/fakepkg/core.py", CORE_BUGGY.replace("w[0]", "w[-1]"), "core: weight from the end",
                          when="2026-03-01T00:00:00+0000")
    after = _status(lane_repo, upstream, capsys)
    texts = _codes(after)[ReasonCode.RELATED.value]
    assert len(texts) == 1 and f"{SLUG}@{sha}" in texts[0] and "same hunk" in texts[0]
    (cand,) = after["related"]["candidates"]
    assert (cand["ref"], cand["kind"], cand["overlap"]) == (f"{SLUG}@{sha}", "commit", "same hunk")

    _decide(lane_repo, f"{SLUG}@{sha}", "independent", "2026-03-02", "renames nothing we touch")
    decided = _status(lane_repo, upstream, capsys)
    assert ReasonCode.RELATED.value not in _codes(decided)
    assert decided["related"]["decisions"][0]["relation"] == "independent"


def test_a_commit_elsewhere_in_the_repository_is_no_candidate(lane_repo, upstream, capsys):
    upstream.commit("README", "fake, renamed\n", "docs", when="2026-03-01T00:00:00+0000")
    assert _status(lane_repo, upstream, capsys)["related"]["candidates"] == []


def test_a_shallow_mirror_compares_the_two_trees(lane_repo, upstream, tmp_path, capsys):
    new = upstream.commit("src/fakepkg/core.py", CORE_BUGGY + "\n\ndef mean(xs):\n    return total(xs) / len(xs)\n",
                          "core: mean", when="2026-03-01T00:00:00+0000")
    shallow = tmp_path / "shallow"
    (shallow / "acme+fake.git").mkdir(parents=True)
    bare = shallow / "acme+fake.git"
    _git(bare, "init", "-q", "--bare")
    for sha in (upstream.base, new):
        _git(bare, "fetch", "-q", "--depth", "1", str(upstream.mirrors / "acme+fake.git"), sha)
    _git(bare, "update-ref", "refs/heads/main", new)
    upstream.mirrors = shallow
    (cand,) = _status(lane_repo, upstream, capsys)["related"]["candidates"]
    assert (cand["ref"], cand["kind"], cand["overlap"]) == (f"{SLUG}@{new}", "tree", "same file")


# ---------------------------------------------------------------------------------------------- recorded PRs

def _record(d: Path, number: int, created: str, patch: str | None, title: str = "core: faster scale") -> None:
    search = d / "search" / "issues" / "acme+fake.json"
    search.parent.mkdir(parents=True, exist_ok=True)
    items = json.loads(search.read_text())["items"] if search.is_file() else []
    items.append({"number": number, "title": title, "state": "open", "created_at": created, "updated_at": created,
                  "user": {"login": "someone"}, "body": "reworks scale in core.py",
                  "pull_request": {"merged_at": None}})
    search.write_text(json.dumps({"total_count": len(items), "incomplete_results": False, "items": items}))
    files = d / "repos" / "acme" / "fake" / "pulls" / str(number) / "files.json"
    files.parent.mkdir(parents=True, exist_ok=True)
    entry = {"filename": "src/fakepkg/core.py", "status": "modified"}
    if patch is not None:
        entry["patch"] = patch
    files.write_text(json.dumps([entry]))


SAME_LINES = "@@ -4,3 +4,3 @@ def scale(xs, w):\n     # multiply each element by its weight\n-    return [x * w[0] " \
             "for x in xs]\n+    return list(map(lambda x: x * w[0], xs))\n"


def test_a_new_overlapping_pr_drops_readiness_and_a_later_decision_restores_it(lane_repo, upstream, tmp_path,
                                                                               capsys, monkeypatch):
    rec = tmp_path / "recorded"
    _record(rec, 41, "2025-12-01T00:00:00Z", None, title="unrelated docs")  # same file, no patch: file overlap
    monkeypatch.setenv(related.RECORDED_ENV, str(rec))
    _decide(lane_repo, f"{SLUG}#41", "independent", "2026-01-05", "documentation only")
    assert ReasonCode.RELATED.value not in _codes(_status(lane_repo, upstream, capsys))

    _record(rec, 42, clock.today().isoformat() + "T00:00:00Z", SAME_LINES)
    texts = _codes(_status(lane_repo, upstream, capsys))[ReasonCode.RELATED.value]
    assert len(texts) == 1 and f"{SLUG}#42" in texts[0] and "same hunk" in texts[0]

    # a decision dated after the PR, here about the PR itself, makes the pack pass this check again
    _decide(lane_repo, f"{SLUG}#42", "we-extend", clock.today().isoformat(), "ours keeps their map form")
    assert ReasonCode.RELATED.value not in _codes(_status(lane_repo, upstream, capsys))


def test_a_candidate_older_than_the_last_decision_does_not_block(lane_repo, upstream, tmp_path, capsys,
                                                                 monkeypatch):
    rec = tmp_path / "recorded"
    _record(rec, 7, "2026-01-10T00:00:00Z", SAME_LINES)
    monkeypatch.setenv(related.RECORDED_ENV, str(rec))
    _decide(lane_repo, f"{SLUG}#6", "independent", "2026-01-09", "seen before #7 opened")
    assert f"{SLUG}#7" in _codes(_status(lane_repo, upstream, capsys))[ReasonCode.RELATED.value][0]
    _decide(lane_repo, f"{SLUG}#5", "independent", "2026-01-11", "looked at everything open that day")
    assert ReasonCode.RELATED.value not in _codes(_status(lane_repo, upstream, capsys))


def test_an_issue_quoting_the_error_message_counts_and_gates(lane_repo, upstream, tmp_path, capsys, monkeypatch):
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('requires = "cpu"', 'requires = "cpu"\nerror = "wrong weight used"', 1))
    rec = tmp_path / "recorded"
    (rec / "search" / "issues").mkdir(parents=True)
    items = [{"number": 77, "title": "scaling is off", "state": "open", "created_at": "2026-02-01T00:00:00Z",
              "updated_at": clock.today().isoformat(), "body": "I get: Wrong weight used for element 2"},
             {"number": 78, "title": "unrelated", "state": "open", "created_at": "2026-02-01T00:00:00Z",
              "updated_at": clock.today().isoformat(), "body": "docs typo"}]
    (rec / "search" / "issues" / "acme+fake.json").write_text(json.dumps({"total_count": 2, "items": items}))
    monkeypatch.setenv(related.RECORDED_ENV, str(rec))
    pack = _status(lane_repo, upstream, capsys)
    (c,) = pack["related"]["candidates"]  # #78 matches none of the terms
    assert (c["ref"], c["kind"], c["overlap"], c["where"]) == (f"{SLUG}#77", "issue", "same function",
                                                               "names the error message")
    assert f"{SLUG}#77" in _codes(pack)[ReasonCode.RELATED.value][0]


def test_supersedes_us_keeps_the_pack_from_being_filed(lane_repo, upstream, capsys):
    _decide(lane_repo, f"{SLUG}#9", "supersedes-us", "2026-02-01", "upstream fixed it their way")
    texts = _codes(_status(lane_repo, upstream, capsys))[ReasonCode.SUPERSEDED.value]
    assert f"{SLUG}#9" in texts[0]


def test_related_command_json_and_text(lane_repo, upstream, tmp_path, capsys):
    rec = tmp_path / "recorded"
    _record(rec, 42, "2026-02-01T00:00:00Z", SAME_LINES)
    capsys.readouterr()
    assert cli("related", "01", "--offline", "--recorded", str(rec), "--json", "--git-mirrors",
               str(upstream.mirrors), *lane_repo.args()) == Exit.OK
    data = json.loads(capsys.readouterr().out)
    (scan,) = data["packs"]
    assert [c["ref"] for c in scan["candidates"]] == [f"{SLUG}#42"] and scan["undecided"] == [f"{SLUG}#42"]
    assert cli("related", "01", "--offline", "--recorded", str(rec), *lane_repo.args()) == Exit.OK
    assert "UNDECIDED" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- symbols, errors, age

CORE_RAISES = CORE_BUGGY.replace(
    "    return [x * w[0] for x in xs]\n",
    "    if len(w) != 1:\n        raise ValueError(f\"scale takes one weight per call, got {len(w)}\")\n"
    "    return [x * w[0] for x in xs]\n")
CORE_RAISES_FIXED = CORE_BUGGY.replace("    return [x * w[0] for x in xs]\n",
                                       "    return [x * wi for x, wi in zip(xs, total(w) and w)]\n")


def test_symbols_and_error_texts_come_from_the_changed_lines():
    diff = ("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -3,4 +3,4 @@ def pick_arch(cc):\n"
            "-        raise ValueError(f\"Unsupported architecture: {cc[0]}\")\n"
            "-    assert n > 0, \"n must be positive\"\n"
            "+    return fallback_impl(cc)  # comment\n"
            "+from pkg.utils import mark_keep_in_fp32, other as o\n")
    hunks = footprint.parse_diff(diff)
    # the removed lines' messages, an f-string by its longest literal part; "n must be positive" is short
    assert footprint.error_texts(hunks) == ("Unsupported architecture", "n must be positive")
    assert {"fallback_impl", "mark_keep_in_fp32", "other"} <= footprint.called_names(hunks)
    fp = footprint.Footprint("1.0", ("m.py",), tuple(hunks), "", frozenset({"mark_keep_in_fp32"}),
                           footprint.error_texts(hunks))
    terms = footprint.search_terms(fp)
    assert {"pick_arch", "mark_keep_in_fp32", "m", "Unsupported architecture"} <= set(terms)
    assert fp.mentions("we hit Unsupported architecture: 12 on a 5090") == ["the error message"]
    assert fp.mentions("mark_keep_in_fp32 loses the tag") == ["mark_keep_in_fp32"]
    # a file's subject as prose names it, abbreviations spelled out; names every module has are not searched
    assert footprint.file_phrase("pkg/ops/mamba3_siso_bwd.py") == "siso backward"
    assert footprint.file_phrase("pkg/core.py") == ""
    generic = footprint.Footprint("1.0", ("pkg/ops/mamba3_siso_bwd.py",), (footprint.DiffHunk(
        "pkg/ops/mamba3_siso_bwd.py", 3, 3, "forward", frozenset(), "-x"),))
    assert footprint.search_terms(generic) == ["mamba3_siso_bwd", "siso backward"]
    assert generic.mentions("the forward pass") == []


def test_an_issue_quoting_a_message_the_series_removes_is_found_without_an_error_key(lane_repo, upstream,
                                                                                       tmp_path, capsys):
    """No ``error`` key: the message comes from the raise the series deletes; a symbol the changed lines
    call (``total``, defined upstream in the same file) is searched for too; the output says how old
    the mirror and the recorded answers are."""
    assert CORE_RAISES != CORE_BUGGY and CORE_RAISES_FIXED != CORE_BUGGY
    upstream.commit("src/fakepkg/core.py", CORE_RAISES, "core: check the weights", "2026-01-02T00:00:00+0000")
    base = _git(upstream.work, "rev-parse", "HEAD").strip()
    manifest = lane_repo.root / "upstream" / "fake.toml"
    manifest.write_text(manifest.read_text().replace(upstream.base, base))
    lane_repo.write_patch(make_patch(tmp_path, CORE_RAISES, CORE_RAISES_FIXED))
    rec = tmp_path / "recorded"
    (rec / "search" / "issues").mkdir(parents=True)
    today = clock.today().isoformat()
    items = [{"number": 90, "title": "scale fails", "state": "open", "created_at": "2026-03-01T00:00:00Z",
              "updated_at": "2026-03-05T00:00:00Z", "body": "ValueError: scale takes one weight per call, got 3"},
             {"number": 91, "title": "total() of an empty list", "state": "open",
              "created_at": "2026-03-02T00:00:00Z", "updated_at": "2026-03-04T00:00:00Z", "body": "see title"},
             {"number": 92, "title": "unrelated", "state": "open", "created_at": "2026-03-03T00:00:00Z",
              "updated_at": "2026-03-03T00:00:00Z", "body": "docs"}]
    (rec / "search" / "issues" / "acme+fake.json").write_text(json.dumps({"total_count": 3, "items": items}))
    (rec / "recorded.json").write_text(json.dumps({"recorded": "2026-03-06"}))
    capsys.readouterr()
    assert cli("related", "01", "--offline", "--recorded", str(rec), "--json", "--days", "100000",
               "--git-mirrors", str(upstream.mirrors), *lane_repo.args()) == Exit.OK
    (scan,) = json.loads(capsys.readouterr().out)["packs"]
    got = {c["ref"]: (c["overlap"], c["where"]) for c in scan["candidates"]}
    assert got == {f"{SLUG}#90": ("same function", "names scale, the error message"),
                   f"{SLUG}#91": ("same file", "names total")}
    assert "scale takes one weight per call, got" in scan["searched_for"] and "total" in scan["searched_for"]
    views = {v["source"]: v for v in scan["upstream_as_of"]}
    assert views["mirror"]["as_of"] == "2026-01-02" and "acme+fake.git main" in views["mirror"]["where"]
    assert (views["recorded"]["as_of"], views["recorded"]["recorded"]) == ("2026-03-05", "2026-03-06")
    assert cli("related", "01", "--offline", "--recorded", str(rec), "--days", "100000",
               "--git-mirrors", str(upstream.mirrors), *lane_repo.args()) == Exit.OK
    text = capsys.readouterr().out
    assert "upstream as of: mirror acme+fake.git" in text and "newest thread activity 2026-03-05" in text
    assert today not in text  # the view's age is the recorded items', not today's


def test_recorded_answers_without_a_date_say_unknown(tmp_path):
    (tmp_path / "search" / "issues").mkdir(parents=True)
    view = related.recorded_view(tmp_path, "acme/fake")
    assert (view.as_of, view.recorded) == ("", "") and "unknown" in view.describe()


# ---------------------------------------------------------------------------------------------- no GitHub

class Server:
    def __init__(self, answer):
        outer = self
        self.paths: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                outer.paths.append(self.path)
                status, headers, body = answer(self.path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("status,headers,says", [
    (403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1795435200"}, "rate-limited until"),
    (429, {"Retry-After": "60"}, "rate-limited (retry after 60 s)"),
    (403, {"Retry-After": "30"}, "rate-limited (retry after 30 s)"),  # a secondary limit
])
def test_rate_limit_stops_with_one_line(lane_repo, upstream, capsys, status, headers, says):
    def answer(path):
        if path.startswith("/rate_limit"):
            return 200, {}, {"resources": {}}
        return status, headers, {"message": "API rate limit exceeded"}

    server = Server(answer)
    try:
        code = cli("related", "01", "--api-url", server.url, "--git-mirrors", str(upstream.mirrors),
                   *lane_repo.args())
    finally:
        server.close()
    err = capsys.readouterr().err
    assert code == Exit.UPSTREAM
    assert says in err and "Traceback" not in err
    assert server.paths[0].startswith("/rate_limit") and len(server.paths) == 2  # stopped at the first refusal


def test_a_live_answer_is_used_when_the_api_answers(lane_repo, upstream, capsys):
    def answer(path):
        if path.startswith("/search/issues"):
            return 200, {}, {"total_count": 1, "items": [{"number": 3, "title": "t", "state": "open",
                                                          "created_at": "2026-02-01T00:00:00Z", "body": "core"}]}
        if "/pulls?" in path:  # the PR list: none open or updated here
            return 200, {}, []
        return 200, {}, {"resources": {}}

    server = Server(answer)
    try:
        assert cli("related", "01", "--api-url", server.url, "--json", "--git-mirrors", str(upstream.mirrors),
                   *lane_repo.args()) == Exit.OK
    finally:
        server.close()
    (c,) = json.loads(capsys.readouterr().out)["packs"][0]["candidates"]
    assert (c["ref"], c["kind"], c["overlap"], c["source"]) == (f"{SLUG}#3", "issue", "mention", server.url)
    # one query for the pack's terms (the search limit is per minute), each quoted, joined by OR
    (search,) = [unquote_plus(p) for p in server.paths if p.startswith("/search/issues")]
    assert f"repo:{SLUG}" in search and '("scale" OR "core")' in search  # our function, our file's stem


def test_without_history_in_the_mirror_the_commits_api_lists_the_commits(lane_repo, upstream, tmp_path, capsys):
    new = "c" * 40
    upstream.mirrors = tmp_path / "no-mirrors"
    upstream.mirrors.mkdir()

    def answer(path):
        if path.startswith(f"/repos/{SLUG}/commits/{upstream.base}"):
            return 200, {}, {"sha": upstream.base, "commit": {"committer": {"date": "2026-01-01T00:00:00Z"}}}
        if path.startswith(f"/repos/{SLUG}/commits?"):
            return 200, {}, [{"sha": new}, {"sha": upstream.base}]
        if path.startswith(f"/repos/{SLUG}/commits/{new}"):
            return 200, {}, {"sha": new, "commit": {"message": "core: weight from the end\n\nbody",
                                                    "committer": {"date": "2026-03-01T00:00:00Z"}},
                             "files": [{"filename": "src/fakepkg/core.py", "patch": SAME_LINES}]}
        if path.startswith("/search/issues"):
            return 200, {}, {"total_count": 0, "items": []}
        if "/pulls?" in path:
            return 200, {}, []
        return 200, {}, {"resources": {}}

    server = Server(answer)
    try:
        assert cli("related", "01", "--api-url", server.url, "--json", "--git-mirrors", str(upstream.mirrors),
                   *lane_repo.args()) == Exit.OK
    finally:
        server.close()
    (c,) = json.loads(capsys.readouterr().out)["packs"][0]["candidates"]
    assert (c["ref"], c["kind"], c["overlap"], c["title"]) == (f"{SLUG}@{new}", "commit", "same hunk",
                                                                "core: weight from the end")
    listed = [unquote_plus(p) for p in server.paths if p.startswith(f"/repos/{SLUG}/commits?")]
    assert listed and "path=src/fakepkg/core.py" in listed[0] and "since=2026-01-01T00:00:00Z" in listed[0]


def test_neither_network_nor_recorded_answers_is_one_clear_line(lane_repo, upstream, capsys):
    # nothing listens on port 9 of the loopback: the API cannot be reached
    assert cli("related", "01", "--api-url", "http://127.0.0.1:9", "--timeout", "2", *lane_repo.args()) \
        == Exit.UPSTREAM
    err = capsys.readouterr().err
    assert "no network and no recorded GitHub answers" in err and "Traceback" not in err
    assert cli("related", "01", "--offline", *lane_repo.args()) == Exit.UPSTREAM
    assert "no network and no recorded GitHub answers" in capsys.readouterr().err


def test_unreachable_api_falls_back_to_recorded_answers(lane_repo, upstream, tmp_path, capsys):
    rec = tmp_path / "recorded"
    _record(rec, 42, "2026-02-01T00:00:00Z", SAME_LINES)
    assert cli("related", "01", "--api-url", "http://127.0.0.1:9", "--timeout", "2", "--recorded", str(rec),
               "--json", *lane_repo.args()) == Exit.OK
    out = capsys.readouterr()
    assert "using the recorded answers" in out.err
    assert json.loads(out.out)["packs"][0]["candidates"][0]["ref"] == f"{SLUG}#42"


# ---------------------------------------------------------------------------------------------- the schema

@pytest.mark.parametrize("entry,says", [
    ('ref = "acme/fake#3"\nrelation = "maybe"\nreason = "r"\ndate = 2026-01-01', "relation 'maybe' is not one of"),
    ('ref = "acme/fake@abc123"\nrelation = "independent"\nreason = "r"\ndate = 2026-01-01', "full 40-hex sha"),
    ('ref = "acme/fake#3"\nrelation = "independent"\nreason = "r"', "key 'date'"),
    ('ref = "acme/fake#3"\nrelation = "independent"\ndate = 2026-01-01', "'reason'"),
])
def test_a_bad_decision_is_refused_naming_file_and_pack(lane_repo, entry, says):
    with (lane_repo.root / "tracking.toml").open("a") as fh:
        fh.write(f"\n[[packs.01.related]]\n{entry}\n")
    with pytest.raises(ConfigError) as exc:
        Tracking.load(lane_repo.root)
    assert says in str(exc.value) and "tracking.toml [packs.01] related[0]" in str(exc.value)


def test_an_unknown_key_in_a_decision_is_refused(lane_repo, capsys):
    _decide(lane_repo, "acme/fake#3", "independent", "2026-01-01")
    with (lane_repo.root / "tracking.toml").open("a") as fh:
        fh.write('relaton = "typo"\n')
    with pytest.raises(ConfigError) as exc:
        Tracking.load(lane_repo.root)
    assert "[packs.01] related[0]: unknown key 'relaton'" in str(exc.value)
    assert "did you mean 'relation'?" in str(exc.value)


def _decide_with(lane_repo, ref: str, relation: str, reason: str, kind: str | None, state: str | None) -> None:
    with (lane_repo.root / "tracking.toml").open("a") as fh:
        fh.write(f'\n[[packs.01.related]]\nref = "{ref}"\nrelation = "{relation}"\nreason = "{reason}"\n'
                 'date = 2026-01-02\n' + (f'kind = "{kind}"\n' if kind else "")
                 + (f'state = "{state}"\n' if state else ""))


def test_body_lines_name_kind_state_repository_and_the_recorded_reason(lane_repo):
    _decide_with(lane_repo, "acme/fake#3", "comment-there", "the thread where the bug is discussed", "issue", "open")
    _decide_with(lane_repo, "acme/fake@" + "b" * 40, "we-extend", "adds the helper the change calls.", "commit",
                 "merged")
    _decide_with(lane_repo, "acme/fake#4", "independent", "the merge that dropped the wiring: the regression's origin",
                 "pr", "merged")
    _decide_with(lane_repo, "other/down#5", "independent", "a downstream opt-out for the same need", "pr", "merged")
    _decide_with(lane_repo, "acme/fake#6", "independent", "an open report of spills in this kernel", "issue", "open")
    t = Tracking.load(lane_repo.root)
    lines, problems = decisions.body_lines(t.pack("01"), "acme/fake")
    # the thread commented on is not listed; no fixed phrase: another repository is never "the same code"
    assert lines == [
        "- acme/fake@bbbbbbbbbb (commit): this change builds on it; adds the helper the change calls",
        "- #4 (merged pull request): the merge that dropped the wiring: the regression's origin",
        "- other/down#5 (merged pull request in another repository): a downstream opt-out for the same need",
        "- #6 (open issue): an open report of spills in this kernel",
    ]
    assert problems == [] and not any("separate change" in line or "same code" in line for line in lines)
    # the filing base's own commit is what the body's "Where" names: not a related line
    lines, _ = decisions.body_lines(t.pack("01"), "acme/fake", "b" * 40)
    assert not any(line.startswith("- acme/fake@") for line in lines)


def test_a_decision_without_kind_or_state_is_a_problem_not_a_guess(lane_repo):
    _decide_with(lane_repo, "acme/fake#4", "independent", "same file, other function", None, "open")
    lines, problems = decisions.body_lines(Tracking.load(lane_repo.root).pack("01"), "acme/fake")
    assert lines == [] and problems and "acme/fake#4: no kind/state recorded" in problems[0]


@pytest.mark.parametrize("extra,says", [
    ('kind = "thread"', "kind 'thread' is not one of"),
    ('kind = "commit"', "kind 'commit' does not fit the ref"),
    ('state = "gone"', "state 'gone' is not one of"),
    ('overlap = "close"', "overlap 'close' is not one of"),
])
def test_a_bad_kind_or_state_is_refused(lane_repo, extra, says):
    _decide(lane_repo, "acme/fake#3", "independent", "2026-01-01")
    with (lane_repo.root / "tracking.toml").open("a") as fh:
        fh.write(extra + "\n")
    with pytest.raises(ConfigError) as exc:
        Tracking.load(lane_repo.root)
    assert says in str(exc.value)


# ---------------------------------------------------------------------------------------------- threads

COMMENT_PACK = '''
[[packs.01.threads]]
url = "https://github.com/acme/fake/pull/11"
role = "filing target"
state = "open"
updated = "2026-01-01T00:00:00Z"

[[packs.01.threads]]
url = "https://github.com/acme/fake/pull/12"
role = "context"
state = "open"
'''


def test_comment_goes_to_the_thread_the_decision_names_and_stale_targets_show(lane_repo, upstream, capsys):
    text = (lane_repo.root / "tracking.toml").read_text().replace('kind = "pr"  # a pull request', 'kind = "comment"')
    (lane_repo.root / "tracking.toml").write_text(text + COMMENT_PACK)
    t = Tracking.load(lane_repo.root)
    assert decisions.comment_target(t.pack("01")) == "https://github.com/acme/fake/pull/11"
    health = decisions.target_health(t.pack("01"), today=date(2026, 11, 24))
    assert [h.problem for h in health] == ["stale (no activity since 2026-01-01)"]
    _decide(lane_repo, "acme/fake#12", "comment-there", "2026-01-03", "the live thread")
    t = Tracking.load(lane_repo.root)
    assert decisions.comment_target(t.pack("01")) == "https://github.com/acme/fake/pull/12"
    assert [h.url for h in decisions.target_health(t.pack("01"))][0] == "https://github.com/acme/fake/pull/12"
    # the thread the decision names is closed: readiness refuses the comment, status shows it
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('pull/12"\nrole = "context"\nstate = "open"',
                                             'pull/12"\nrole = "context"\nstate = "closed"'))
    pack = _status(lane_repo, upstream, capsys)
    assert "acme/fake#12 is closed" in _codes(pack)[ReasonCode.THREAD.value][0]
    assert [(t["url"][-2:], t["problem"]) for t in pack["targets"]] == [
        ("12", "closed"), ("11", "stale (no activity since 2026-01-01)")]


def _recorded_threads(d: Path, comment_by: str) -> None:
    base = d / "repos" / "acme" / "fake"
    (base / "pulls").mkdir(parents=True)
    (base / "issues" / "11").mkdir(parents=True)
    (d / "search" / "issues").mkdir(parents=True)
    (base / "pulls" / "11.json").write_text(json.dumps({"number": 11, "state": "open", "merged": False,
                                                        "updated_at": "2026-11-20T08:00:00Z",
                                                        "user": {"login": "upstream-dev"}}))
    (base / "pulls" / "12.json").write_text(json.dumps({"number": 12, "state": "closed", "merged": True,
                                                        "merged_at": "2026-10-01T00:00:00Z",
                                                        "updated_at": "2026-10-01T00:00:00Z",
                                                        "user": {"login": "Patch-Filer"}}))
    (base / "issues" / "11" / "comments.json").write_text(json.dumps([{"user": {"login": "someone"}},
                                                                      {"user": {"login": comment_by}}]))


def _serve(rec: Path) -> Server:
    """A local API answering from recorded files (404 for anything not recorded)."""
    from harness.upstream.github import Recorded, ThreadNotFound

    def answer(path):
        try:
            return 200, {}, Recorded(rec).get(path)
        except ThreadNotFound:
            return 404, {}, {"message": "Not Found"}

    return Server(answer)


def test_threads_refresh_finds_our_comment_and_refuses_a_second_filing(lane_repo, upstream, tmp_path, capsys):
    text = (lane_repo.root / "tracking.toml").read_text().replace('kind = "pr"  # a pull request', 'kind = "comment"')
    (lane_repo.root / "tracking.toml").write_text(text + COMMENT_PACK)
    rec = tmp_path / "recorded"
    _recorded_threads(rec, comment_by="patch-filer")
    capsys.readouterr()
    server = _serve(rec)
    try:
        assert cli("threads", "refresh", "--api-url", server.url, "--me", "patch-filer", "--json",
                   *lane_repo.args()) == Exit.OK
    finally:
        server.close()
    data = json.loads(capsys.readouterr().out)
    assert [(r["url"][-2:], r["state"], r["merged"], r["last_activity"], r["ours"]) for r in data["threads"]] == [
        ("11", "open", False, "2026-11-20T08:00:00Z", "comment"),
        ("12", "merged", True, "2026-10-01T00:00:00Z", "author"),
    ]
    threads = Tracking.load(lane_repo.root).pack("01").threads
    assert [(t.state, t.ours) for t in threads] == [("open", "comment"), ("merged", "author")]
    texts = _codes(_status(lane_repo, upstream, capsys))[ReasonCode.ALREADY_THERE.value]
    assert "acme/fake#11" in texts[0] and "second filing is refused" in texts[0]


def test_threads_refresh_offline_reports_and_writes_nothing(lane_repo, upstream, tmp_path, capsys):
    (lane_repo.root / "tracking.toml").write_text((lane_repo.root / "tracking.toml").read_text() + COMMENT_PACK)
    before = (lane_repo.root / "tracking.toml").read_text()
    rec = tmp_path / "recorded"
    _recorded_threads(rec, comment_by="patch-filer")
    assert cli("threads", "refresh", "--offline", "--recorded", str(rec), "--me", "patch-filer", "--json",
               *lane_repo.args()) == Exit.OK
    out = capsys.readouterr()
    assert [r["ours"] for r in json.loads(out.out)["threads"]] == ["comment", "author"]
    assert "tracking.toml not changed" in out.err
    assert (lane_repo.root / "tracking.toml").read_text() == before


def test_threads_refresh_without_a_login_or_comments_does_not_guess(lane_repo, upstream, tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.delenv("GITHUB_USER", raising=False)
    (lane_repo.root / "tracking.toml").write_text((lane_repo.root / "tracking.toml").read_text() + COMMENT_PACK)
    rec = tmp_path / "recorded"
    _recorded_threads(rec, comment_by="patch-filer")
    assert cli("threads", "refresh", "--offline", "--recorded", str(rec), "--json", *lane_repo.args()) == Exit.OK
    out = capsys.readouterr()
    assert {r["ours"] for r in json.loads(out.out)["threads"]} == {"unknown"}
    assert "is not checked" in out.err
    # a login, but #12's comments are not there to read: unknown, not "nothing of ours"
    assert cli("threads", "refresh", "--offline", "--recorded", str(rec), "--me", "nobody", "--json",
               *lane_repo.args()) == Exit.OK
    assert [r["ours"] for r in json.loads(capsys.readouterr().out)["threads"]] == [None, "unknown"]


# ---------------------------------------------------------------------------------------------- this repository

MIRRORS = REPO.parent / "shared" / "mirrors"  # ../shared/mirrors beside the checkout


@pytest.mark.skipif(not (MIRRORS / "NVIDIA+Megatron-LM.git").is_dir() or shutil.which("git") is None,
                    reason="needs the shared offline mirrors beside the checkout")
def test_this_repository_offline(capsys, tmp_path):
    """The recorded answers and mirrors CI uses: pack 10's filing target #3345 changes the same lines."""
    assert cli("related", "10", "--offline", "--json", "--git-mirrors", str(MIRRORS), "--root", str(REPO),
               "--cache", str(tmp_path)) == Exit.OK
    (scan,) = json.loads(capsys.readouterr().out)["packs"]
    first = scan["candidates"][0]
    assert (first["ref"], first["overlap"]) == ("NVIDIA/Megatron-LM#3345", "same hunk")


@pytest.mark.skipif(not (MIRRORS / "state-spaces+mamba.git").is_dir() or shutil.which("git") is None,
                    reason="needs the shared offline mirrors beside the checkout")
def test_this_repository_offline_finds_the_siso_retile_and_says_how_old_its_view_is(capsys, tmp_path):
    """Pack 04: mamba#1025 names no function of ours, only the "SISO backward" its file stem abbreviates;
    every candidate the scan finds carries a decision; the views are the mirror's main and the recorded day."""
    assert cli("related", "04", "--offline", "--json", "--git-mirrors", str(MIRRORS), "--root", str(REPO),
               "--cache", str(tmp_path)) == Exit.OK
    (scan,) = json.loads(capsys.readouterr().out)["packs"]
    found = {c["ref"]: c for c in scan["candidates"]}
    assert found["state-spaces/mamba#1025"]["overlap"] == "same file" and "siso backward" in scan["searched_for"]
    decided = {d["ref"] for d in scan["decisions"]}
    assert {r for r, c in found.items() if c["overlap"] != "mention"} <= decided
    views = {v["source"]: v for v in scan["upstream_as_of"]}
    assert views["mirror"]["as_of"] == "2026-07-23" and views["recorded"]["recorded"]


# ---------------------------------------------------------------------------------------------- files and hunks

CORE_LONG = CORE_BUGGY.replace("def total(xs):\n    return sum(xs)\n",
                               "def total(xs):\n    s = 0\n    n = 0\n    for x in xs:\n        n += 1\n"
                               "        s += x\n    return s\n")


def _record_pull(d: Path, number: int, title: str, patch: str | None, filename: str = "src/fakepkg/core.py",
                 state: str = "open", updated: str = "") -> None:
    """A PR in the recorded list (``repos/acme/fake/pulls.json``) and its ``files.json``; no search item: it can
    only be found by the files it changes."""
    (d / "search" / "issues").mkdir(parents=True, exist_ok=True)
    search = d / "search" / "issues" / "acme+fake.json"
    if not search.is_file():
        search.write_text(json.dumps({"total_count": 0, "items": []}))
    listed = d / "repos" / "acme" / "fake" / "pulls.json"
    listed.parent.mkdir(parents=True, exist_ok=True)
    pulls = json.loads(listed.read_text()) if listed.is_file() else []
    when = updated or clock.today().isoformat() + "T00:00:00Z"
    pulls.append({"number": number, "title": title, "state": state, "created_at": when, "updated_at": when,
                  "merged_at": None, "draft": False, "base": {"ref": "main"}, "body": "no words of ours"})
    listed.write_text(json.dumps(pulls))
    entry = {"filename": filename, "status": "modified"} | ({"patch": patch} if patch is not None else {})
    files = d / "repos" / "acme" / "fake" / "pulls" / str(number) / "files.json"
    files.parent.mkdir(parents=True, exist_ok=True)
    files.write_text(json.dumps([entry]))


def _pr_patch(old: str, new: str) -> str:
    """A PR file's ``patch`` as GitHub gives it: the hunks, three lines of context, no file header."""
    import difflib

    lines = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=3)
    return "\n".join(list(lines)[2:]) + "\n"


PR_SAME_LINES = _pr_patch(CORE_BUGGY, CORE_BUGGY.replace("[x * w[0] for x in xs]", "list(map(lambda x: x * w[0], xs))"))
OTHER_DEF = _pr_patch(CORE_LONG, CORE_LONG.replace("        s += x\n", "        s = s + x\n")).replace(
    " @@\n", " @@ def scale(xs, w):\n", 1)  # a header naming the wrong def; the AST puts the line in total


def _related_json(lane_repo, up: Upstream, rec: Path, capsys) -> dict:
    capsys.readouterr()
    assert cli("related", "01", "--offline", "--recorded", str(rec), "--json", "--git-mirrors", str(up.mirrors),
               *lane_repo.args()) == Exit.OK
    (scan,) = json.loads(capsys.readouterr().out)["packs"]
    return scan


def test_prs_are_found_by_their_files_and_ranked_by_the_def_the_ast_puts_them_in(lane_repo, upstream, tmp_path,
                                                                                 capsys):
    new = upstream.commit("src/fakepkg/core.py", CORE_LONG, "core: longer total", when="2025-12-01T00:00:00+0000")
    manifest = lane_repo.root / "upstream" / "fake.toml"
    manifest.write_text(manifest.read_text().replace(upstream.base, new))
    rec = tmp_path / "recorded"
    _record_pull(rec, 51, "refactor loops", OTHER_DEF)  # same file, another def (git's header says scale)
    _record_pull(rec, 52, "tidy", PR_SAME_LINES)  # our very lines: same hunk, and it conflicts
    _record_pull(rec, 53, "docs", "@@ -1,1 +1,1 @@\n-fake\n+fake, renamed\n", filename="README")  # no file of ours
    scan = _related_json(lane_repo, upstream, rec, capsys)
    by_ref = {c["ref"]: c for c in scan["candidates"]}
    assert set(by_ref) == {f"{SLUG}#51", f"{SLUG}#52"}  # #53 changes none of our files: not listed at all
    other = by_ref[f"{SLUG}#51"]
    assert other["overlap"] == "same file" and "total" in other["where"] and other["conflicts"] == []
    same = by_ref[f"{SLUG}#52"]
    assert same["overlap"] == "same hunk"
    assert same["conflicts"] == ["src/fakepkg/core.py scale line 6"], (same["compared"], same["carried"])
    assert same["compared"].startswith("its recorded diff on")
    # a PR in another def of our file is reported with its lower overlap and needs no decision; the
    # conflicting one does
    assert scan["undecided"] == [f"{SLUG}#52"]


def test_a_pr_in_the_same_def_elsewhere_ranks_same_function(lane_repo, upstream, tmp_path, capsys):
    # upstream's scale grows a line above ours; a PR changes that line, far enough from our hunk to be no hunk
    # overlap, and git names no def in its header
    long_scale = CORE_BUGGY.replace("    # multiply each element by its weight\n",
                                    "    # multiply each element by its weight\n" + "    pass\n" * 6 +
                                    "    # done\n")
    new = upstream.commit("src/fakepkg/core.py", long_scale, "core: longer scale", when="2025-12-01T00:00:00+0000")
    manifest = lane_repo.root / "upstream" / "fake.toml"
    manifest.write_text(manifest.read_text().replace(upstream.base, new))
    lane_repo.write_patch(make_patch(tmp_path, long_scale, long_scale.replace("w[0] for", "wi for").replace(
        "in xs]", "in zip(xs, w)]").replace("[x * wi for x", "[x * wi for x, wi")))
    rec = tmp_path / "recorded"
    _record_pull(rec, 61, "comments", "@@ -5,1 +5,1 @@\n-    # multiply each element by its weight\n"
                                      "+    # each element times its own weight\n")
    scan = _related_json(lane_repo, upstream, rec, capsys)
    (c,) = scan["candidates"]
    assert (c["ref"], c["overlap"]) == (f"{SLUG}#61", "same function") and "scale" in c["where"]
    assert scan["undecided"] == [f"{SLUG}#61"]


def test_a_keyword_match_without_a_file_of_ours_is_no_overlap(lane_repo, upstream, tmp_path, capsys):
    rec = tmp_path / "recorded"
    _record(rec, 71, clock.today().isoformat() + "T00:00:00Z", None, title="make scale faster in core")
    files = rec / "repos" / "acme" / "fake" / "pulls" / "71" / "files.json"
    files.write_text(json.dumps([{"filename": "docs/speed.md", "status": "modified", "patch": "@@ -1 +1 @@\n-a\n+b"}]))
    scan = _related_json(lane_repo, upstream, rec, capsys)
    (c,) = scan["candidates"]
    assert (c["ref"], c["overlap"]) == (f"{SLUG}#71", "mention")  # its words name scale; its files are not ours
    assert scan["undecided"] == []


def test_the_conflict_check_reads_a_merge_ref_in_the_mirror(lane_repo, upstream, tmp_path, capsys):
    """A mirror fetched with GitHub's refs/pull/*: the PR's merge ref is found by git and checked against it."""
    work = upstream.work
    _git(work, "checkout", "-q", "-b", "pr")
    (work / "src" / "fakepkg" / "core.py").write_text(CORE_BUGGY.replace("w[0] for x in xs", "w[0] for x in list(xs)"))
    _git(work, "commit", "-q", "-am", "pr: copy", when=clock.today().isoformat() + "T00:00:00+0000")
    _git(work, "checkout", "-q", "main")
    _git(work, "merge", "-q", "--no-ff", "-m", "Merge pr into main", "pr",
         when=clock.today().isoformat() + "T00:00:00+0000")
    merge = _git(work, "rev-parse", "HEAD").strip()
    _git(work, "reset", "-q", "--hard", "HEAD^")
    _git(work, "push", "-q", str(upstream.mirrors / "acme+fake.git"), f"{merge}:refs/pull/9/merge")
    rec = tmp_path / "recorded"
    (rec / "search" / "issues").mkdir(parents=True)
    (rec / "search" / "issues" / "acme+fake.json").write_text(json.dumps({"total_count": 0, "items": []}))
    scan = _related_json(lane_repo, upstream, rec, capsys)
    (c,) = scan["candidates"]
    assert (c["ref"], c["overlap"], c["compared"]) == (f"{SLUG}#9", "same hunk", "refs/pull/9/merge")
    assert c["conflicts"] == ["src/fakepkg/core.py scale line 6"]


def test_pr_heads_without_a_merge_ref_are_read_against_their_merge_base(lane_repo, upstream, tmp_path, capsys):
    """#54: only refs/pull/N/merge were read, so a closed PR (or one merged after our pin) was never seen by the
    code. Its head is now compared with its merge base with our base; a head our base holds, or one that changes
    none of our files, is not a candidate."""
    work, mirror = upstream.work, upstream.mirrors / "acme+fake.git"
    today = clock.today().isoformat() + "T00:00:00+0000"

    def pr(number: int, path: str, text: str) -> None:
        _git(work, "checkout", "-q", "-B", f"pr{number}", upstream.base)
        (work / path).write_text(text)
        _git(work, "commit", "-q", "-am", f"pr {number}", when=today)
        _git(work, "push", "-q", str(mirror), f"HEAD:refs/pull/{number}/head")

    pr(12, "src/fakepkg/core.py", CORE_BUGGY.replace("return sum(xs)", "return sum(xs, 0)"))  # closed, unmerged
    # a PR stacked on #12's branch: its own commit changes none of our files, #12's commit under it does
    (work / "README").write_text("fake, stacked\n")
    _git(work, "commit", "-q", "-am", "pr 15", when=today)
    _git(work, "push", "-q", str(mirror), "HEAD:refs/pull/15/head")
    pr(14, "README", "fake, described\n")  # none of our files
    # squash-merged before our pin: its head is on no branch, its change is in the base
    squashed = CORE_BUGGY.replace("# multiply each element by its weight", "# each element times its weight")
    pr(16, "src/fakepkg/core.py", squashed)
    _git(work, "checkout", "-q", "main")
    (work / "src" / "fakepkg" / "core.py").write_text(squashed)
    _git(work, "commit", "-q", "-am", "squash of #16", when=today)
    pin = _git(work, "rev-parse", "HEAD").strip()
    _git(work, "push", "-q", str(mirror), "HEAD:refs/heads/main")
    manifest = lane_repo.root / "upstream" / "fake.toml"
    manifest.write_text(manifest.read_text().replace(upstream.base, pin))
    _git(work, "push", "-q", str(mirror), f"{upstream.base}:refs/pull/13/head")  # merged before our pin
    rec = tmp_path / "recorded"
    (rec / "search" / "issues").mkdir(parents=True)
    (rec / "search" / "issues" / "acme+fake.json").write_text(json.dumps({"total_count": 0, "items": []}))
    (rec / "repos" / "acme" / "fake" / "pulls").mkdir(parents=True)
    (rec / "repos" / "acme" / "fake" / "pulls" / "12.json").write_text(json.dumps(
        {"number": 12, "title": "total from zero", "state": "closed", "merged_at": None,
         "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-02T00:00:00Z", "base": {"ref": "main"}}))
    scan = _related_json(lane_repo, upstream, rec, capsys)
    by_ref = {c["ref"]: c for c in scan["candidates"]}
    assert set(by_ref) == {f"{SLUG}#12", f"{SLUG}#15"}, by_ref  # the walk names one head per commit: both
    c = by_ref[f"{SLUG}#12"]
    assert (c["state"], c["title"], c["overlap"]) == ("closed", "total from zero", "same file")
    assert "total" in c["where"]
    assert any("refs/pull/*" in n and "from where they left the branch" in n for n in scan["notes"])


def test_a_contract_is_scanned_for_the_defs_its_script_calls():
    script = ("from megatron.core import tensor_parallel\nfrom megatron.core.x import Thing\n"
              "def f():\n    tensor_parallel.vocab_ce(1)\n    return Thing()\n")
    base = {"megatron/core/tensor_parallel/cross_entropy.py":
            "class _VocabCE:\n    def forward(self):\n        return 1\n\n\ndef vocab_ce(x):\n"
            "    return _VocabCE.apply(x)\n\n\ndef unrelated():\n    return 2\n"}

    class Spans:
        def text(self, path):
            return base.get(path, "")

        def __call__(self, path):
            return footprint.ast_spans(self.text(path))

    targets = footprint.contract_targets(script, list(base), Spans())
    assert targets == {"vocab_ce": "megatron/core/tensor_parallel/cross_entropy.py",
                       "_VocabCE": "megatron/core/tensor_parallel/cross_entropy.py"}  # one call deep, not unrelated
    fp = footprint.Footprint("b", tuple(base), (), targets=frozenset(targets), target_files=targets)
    in_forward = footprint.scoped(footprint.parse_diff(
        "diff --git a/megatron/core/tensor_parallel/cross_entropy.py b/megatron/core/tensor_parallel/cross_entropy.py\n"
        "@@ -3,1 +3,1 @@\n-        return 1\n+        return 2\n"), Spans())
    elsewhere = footprint.scoped(footprint.parse_diff(
        "diff --git a/megatron/core/tensor_parallel/cross_entropy.py b/megatron/core/tensor_parallel/cross_entropy.py\n"
        "@@ -11,1 +11,1 @@ def vocab_ce(x):\n-    return 2\n+    return 3\n"), Spans())
    assert fp.describe(in_forward)[0] == footprint.Overlap.FUNCTION  # _VocabCE.forward: inside a called def
    assert fp.describe(elsewhere)[0] == footprint.Overlap.FILE  # unrelated, whatever git's header says


def test_body_lines_leave_out_defs_in_common_and_group_open_conflicts(lane_repo):
    with (lane_repo.root / "tracking.toml").open("a") as fh:
        for ref, state, overlap in (("acme/fake#11", "open", "same function"), ("acme/fake#12", "open", "conflict"),
                                    ("acme/fake#13", "open", "conflict"), ("acme/fake#14", "merged", "conflict"),
                                    ("acme/fake#15", "open", "same hunk")):
            fh.write(f'\n[[packs.01.related]]\nref = "{ref}"\nrelation = "independent"\nkind = "pr"\n'
                     f'state = "{state}"\noverlap = "{overlap}"\nreason = "touches {ref}"\ndate = 2026-01-02\n')
    lines, problems = decisions.body_lines(Tracking.load(lane_repo.root).pack("01"), "acme/fake")
    assert problems == []
    assert lines == [
        "- #14 (merged pull request): touches acme/fake#14",  # merged: the change is rebased onto it
        "- #15 (open pull request): touches acme/fake#15",  # the same lines: its own line
        "- Open pull requests editing the same lines (textual conflicts; whichever lands second is "
        "rebased): #12, #13",
    ]  # #11 shares only a def: decided, not in the body
