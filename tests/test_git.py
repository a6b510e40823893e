"""harness.upstream.git: the one place git runs (plain subprocess), its errors, and a host without git."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, cli

from harness.errors import Exit, HarnessError
from harness.upstream import git


def _no_git_path(tmp_path: Path) -> str:
    """A PATH that really holds no git (an empty directory), checked rather than assumed."""
    empty = tmp_path / "bin-without-git"
    empty.mkdir(exist_ok=True)
    assert subprocess.run(["sh", "-c", "command -v git"], env={"PATH": str(empty)},
                          capture_output=True, executable="/bin/sh").returncode != 0
    return str(empty)


def test_snapshot_clone_and_queries(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("x = 1\n")
    sha = git.init_snapshot(src, "pristine snapshot\n\nbody line")
    base = git.repo(src)
    assert len(sha) == 40 and base.head() == sha and base.tags() == ["pristine"] and base.branch() == "base"
    commit = base.commit(sha)
    assert commit.summary == "pristine snapshot" and "body line" in commit.message and commit.parents == ()

    clone = git.clone(src, tmp_path / "clone", branch="work")
    assert clone.branch() == "work" and clone.head() == sha and clone.is_clean()
    (clone.path / "pkg" / "a.py").write_text("x = 2\n")
    (clone.path / "new.txt").write_text("n\n")
    assert sorted(clone.dirty_paths()) == ["new.txt", "pkg/a.py"] and not git.is_clean(clone)
    clone.run("commit", "-qam", "change")
    assert clone.commit("HEAD").parents == (sha,) and clone.tree() != base.tree()
    # the fixed identity, whatever the user's config says
    assert clone.run("log", "-1", "--format=%an <%ae> %cn").strip() == "patch-lane <patch-lane@invalid> patch-lane"
    clone.run("checkout", "-q", "--detach")
    assert clone.branch() is None


def test_a_failing_command_names_command_status_and_stderr(tmp_path):
    git.init_snapshot(tmp_path, "one")
    with pytest.raises(git.GitError) as info:
        git.repo(tmp_path).run("rev-parse", "--verify", "no-such-ref")
    exc = info.value
    assert isinstance(exc, HarnessError) and exc.exit_code == Exit.INTERNAL
    assert exc.argv == ("rev-parse", "--verify", "no-such-ref") and exc.status == 128
    assert "fatal" in exc.stderr and "git rev-parse --verify no-such-ref" in str(exc) and "exit 128" in str(exc)
    done = git.repo(tmp_path).call("rev-parse", "--verify", "no-such-ref")  # call never raises on an exit status
    assert done.status == 128 and not done.ok


def test_a_plain_directory_inside_a_checkout_is_not_a_repository(tmp_path):
    git.init_snapshot(tmp_path, "outer")
    inner = tmp_path / "inner"
    inner.mkdir()
    with pytest.raises(git.GitError):
        git.repo(inner).git_dir  # noqa: B018 - the property runs git
    assert git.repo(tmp_path).git_dir == (tmp_path / ".git").resolve()


def test_a_missing_directory_is_a_git_error_not_git_not_found(tmp_path):
    with pytest.raises(git.GitError) as info:
        git.run(tmp_path / "absent", "status")
    assert not isinstance(info.value, git.GitNotFound) and "no such directory" in str(info.value)


def test_without_git_on_path_calling_git_is_one_clean_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", _no_git_path(tmp_path))
    with pytest.raises(git.GitNotFound) as info:
        git.run(tmp_path, "status")
    assert info.value.exit_code == Exit.USAGE and str(info.value).startswith("git not found on PATH")
    # the receipt's view of the project checkout just has no commit
    assert git.in_user_repo(tmp_path, "rev-parse", "HEAD") is None


def test_cli_without_git_on_path_says_git_was_not_found(lane_repo, tmp_path):
    """A command that needs a git tree, run by a process whose PATH has no git: exit USAGE, one line."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PATH=_no_git_path(tmp_path), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "harness", "materialize", "fake", *lane_repo.args()],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == Exit.USAGE, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("harness:")]
    assert len(lines) == 2, proc.stderr
    assert lines[0].startswith("harness: error: git not found on PATH (needed to run 'git init"), proc.stderr
    assert lines[1].startswith("harness: hint: install git") and "Traceback" not in proc.stderr
    assert "internal error" not in proc.stderr


def test_an_unexpected_git_failure_is_an_internal_error_with_its_traceback(lane_repo, capsys, monkeypatch):
    """A cached base whose .git is broken: the git that checks the entry fails, reported as before (exit 70)."""
    assert cli("materialize", "fake", *lane_repo.args()) == Exit.OK
    capsys.readouterr()
    [entry] = (lane_repo.cache / "bases" / "fake").iterdir()
    (entry / ".git" / "HEAD").write_text("garbage\n")
    monkeypatch.setenv("PATCHLANE_HOME", str(lane_repo.cache))  # where last-error.log goes
    assert cli("materialize", "fake", *lane_repo.args()) == Exit.INTERNAL
    err = capsys.readouterr().err
    assert err.startswith("harness: internal error: GitError: git status") and "last-error.log" in err
    assert "Traceback" in (lane_repo.cache / "last-error.log").read_text()


def test_no_harness_module_imports_gitpython():
    """GitPython is no dependency any more: importing every harness module loads no ``git`` package."""
    code = ("import sys, pkgutil, importlib, harness\n"
            "for m in pkgutil.walk_packages(harness.__path__, 'harness.'):\n"
            "    if m.name != 'harness.__main__':\n"
            "        importlib.import_module(m.name)\n"
            "print(sorted(n for n in sys.modules if n == 'git' or n.startswith(('git.', 'gitdb', 'smmap'))))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
