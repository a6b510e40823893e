"""`harness body`: rendering, lint, the gh command, the post gate; readiness computed from receipts."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import textwrap

import pytest
from conftest import REPO, cli

from harness import filing, readiness
from harness.tracking import Tracking

GH = textwrap.dedent('''\
    #!/bin/sh
    printf '%s\\n' "$@" > "$GH_ARGS_FILE"
    echo "https://github.com/acme/fake/pull/77"
''')


class Stdin:
    def __init__(self, tty: bool):
        self.tty = tty

    def isatty(self):
        return self.tty


@pytest.fixture
def ran(lane_repo, capsys):
    """The fake pack with passing receipts for both lanes (a real CPU run)."""
    assert cli("run", "01", "--quiet", *lane_repo.args()) == 0
    capsys.readouterr()
    return lane_repo


@pytest.fixture
def fake_gh(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    gh = bindir / "gh"
    gh.write_text(GH)
    gh.chmod(gh.stat().st_mode | stat.S_IEXEC)
    args_file = tmp_path / "gh-args.txt"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GH_ARGS_FILE", str(args_file))
    return args_file


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("see build01.corp.internal for logs", "internal host name"),
        ("runner at 10.1.2.3 and 192.168.0.4", "private IP address"),
        ("log at /home/alice/run.log", "private path"),
        ("cache in /root/.cache/patchlane", "private path"),
        ("ran from /work/main", "private path"),
        ("mail dev@example.com", "e-mail address"),
        ("token ghp_" + "a" * 36, "token"),
        ("hf_" + "B" * 30, "token"),
        ("AKIA" + "ABCDEFGHIJKLMNOP", "token"),
    ],
)
def test_lint_finds_private_things(text, rule):
    [finding] = [f for f in filing.lint(f"ok line\n{text}\n") if f.rule == rule][:1]
    assert finding.line == 2


def test_lint_leaves_public_text_alone():
    text = ("receipt `receipts/fake/01/x/receipt.json`, https://github.com/acme/fake/pull/1, torch 2.11.0+cu130, "
            "`src/fakepkg/core.py`, 1e-06, a/tmp/b")
    assert filing.lint(text) == []


def test_body_renders_receipts_and_prints_gh_command(ran, capsys):
    _github_repo(ran)
    assert cli("body", "01", *ran.args()) == 0
    out = capsys.readouterr()
    assert "lane `bug` (1.0, baseline): expected `BUG_REPRODUCED`, saw `BUG_REPRODUCED` - **pass**" in out.out
    assert "figure `max_err`" in out.out and "log sha256 `" in out.out and "receipt `receipts/fake/01/" in out.out
    assert "```python" in out.out  # the fake reproducer is small: inlined
    body_file = ran.root / "dist" / "filing" / "01-pr.md"
    assert body_file.is_file()
    assert f"--body-file {body_file} --head '<fork-owner>:<branch>'" in out.out
    assert "readiness: ready" in out.err


def test_large_reproducer_is_attached_not_inlined(ran, capsys, monkeypatch):
    _github_repo(ran)
    monkeypatch.setattr(filing, "INLINE_LIMIT", 10)
    assert cli("body", "01", *ran.args()) == 0
    out = capsys.readouterr().out
    assert "Reproducer attached: `repros/fake/pack01.py`" in out and "```python" not in out


def test_lint_failure_is_one_line_each_and_exit_10(lane_repo, capsys):
    _github_repo(lane_repo)
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace(
        'requires = "cpu"', 'requires = "cpu"\nsummary = "seen in /home/alice/x on gpu7.lab.internal"', 1))
    assert cli("body", "01", *lane_repo.args()) == 10
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("pack 01 body:")]
    assert lines == ["pack 01 body:1: internal host name: 'gpu7.lab.internal'",
                     "pack 01 body:1: private path: '/home/alice'"]
    assert not (lane_repo.root / "dist" / "filing" / "01-pr.md").exists()


def _github_repo(lane_repo):
    """The fake target on a github.com repository, with this repository's filing templates."""
    shutil.copytree(REPO / "templates", lane_repo.root / "templates", dirs_exist_ok=True)
    m = lane_repo.root / "upstream" / "fake.toml"
    m.write_text(m.read_text().replace("https://example.invalid/fake", "https://github.com/acme/fake"))


def test_post_refuses_without_a_terminal(ran, fake_gh, capsys, monkeypatch):
    _github_repo(ran)
    monkeypatch.setattr(sys, "stdin", Stdin(tty=False))
    assert cli("body", "01", "--post", "--head", "me:fix", *ran.args()) == 2
    assert "stdin is not a terminal" in capsys.readouterr().err
    assert not fake_gh.exists()


def test_post_with_typed_id_runs_gh_and_records_the_decision(ran, fake_gh, capsys, monkeypatch):
    _github_repo(ran)
    monkeypatch.setattr(sys, "stdin", Stdin(tty=True))
    monkeypatch.setattr("builtins.input", lambda prompt: "01")
    monkeypatch.setenv("USER", "tester")
    assert cli("body", "01", "--post", "--head", "me:fix", *ran.args()) == 0
    out = capsys.readouterr().out
    assert "gh pr create --repo acme/fake --title 'scale uses w[0] for every element' --body-file" in out
    args = fake_gh.read_text().splitlines()
    assert args[:4] == ["pr", "create", "--repo", "acme/fake"] and args[-2:] == ["--head", "me:fix"]
    entry = Tracking.load(ran.root).doc["packs"]["01"]["filing"]
    assert entry["url"] == "https://github.com/acme/fake/pull/77" and entry["how"] == "gh pr create"
    assert entry["decided_by"] and entry["decided_at"].endswith("Z")


def test_post_with_wrong_id_posts_nothing(ran, fake_gh, capsys, monkeypatch):
    _github_repo(ran)
    monkeypatch.setattr(sys, "stdin", Stdin(tty=True))
    monkeypatch.setattr("builtins.input", lambda prompt: "yes")
    assert cli("body", "01", "--post", "--head", "me:fix", *ran.args()) == 2
    assert "does not match; nothing was posted" in capsys.readouterr().err
    assert not fake_gh.exists() and "filing" not in Tracking.load(ran.root).doc["packs"]["01"]


def test_readiness_is_computed_from_receipts(lane_repo, ran):
    t = Tracking.load(ran.root)
    assert readiness.readiness(ran.root, t, t.pack("01")).ready
    # a patch edited after the receipts makes them stale
    patch = next((ran.root / "patches" / "fake" / "01").iterdir())
    later = patch.stat().st_mtime + 3600
    os.utime(patch, (later, later))
    r = readiness.readiness(ran.root, t, t.pack("01"))
    assert not r.ready and "predates the last patch change" in r.why()


def test_not_ready_without_receipts_and_post_refused(lane_repo, capsys, monkeypatch):
    _github_repo(lane_repo)
    t = Tracking.load(lane_repo.root)
    assert readiness.readiness(lane_repo.root, t, t.pack("01")).why() == "lane bug: no receipt; lane fix: no receipt"
    monkeypatch.setattr(sys, "stdin", Stdin(tty=True))
    assert cli("body", "01", "--post", "--head", "me:fix", *lane_repo.args()) == 2
    assert "is not ready to post" in capsys.readouterr().err
