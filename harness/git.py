"""Thin wrappers over GitPython with a fixed identity, so the tool's commits are reproducible."""

from __future__ import annotations

import os
from pathlib import Path

# GitPython refuses to import when no git binary is on PATH; an offline GPU host
# may lack one, and runs from a bundle never call git.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import git  # noqa: E402

IDENTITY = {
    "GIT_AUTHOR_NAME": "patch-lane",
    "GIT_AUTHOR_EMAIL": "patch-lane@invalid",
    "GIT_COMMITTER_NAME": "patch-lane",
    "GIT_COMMITTER_EMAIL": "patch-lane@invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}

GitCommandError = git.GitCommandError


def clean_env() -> dict[str, str]:
    """The environment for every git the tool runs: fixed identity, no user or system config."""
    env = dict(os.environ)
    env.update(IDENTITY)
    # Never let a user's global hooks, templates or signing config leak in.
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return env


def repo(path: Path) -> git.Repo:
    r = git.Repo(path)
    r.git.update_environment(**clean_env())
    return r


def init_snapshot(path: Path, message: str) -> str:
    """Make ``path`` a git repository whose one commit holds every file in it; return the sha."""
    r = git.Repo.init(path, initial_branch="base")
    r.git.update_environment(**clean_env())
    r.git.config("core.autocrlf", "false")
    r.git.config("gc.auto", "0")
    r.git.add("-A", "-f", ".")
    r.git.commit("-q", "--no-verify", "--allow-empty", "-m", message)
    r.git.tag("pristine")
    return r.head.commit.hexsha


def clone(src: Path, dest: Path, branch: str) -> git.Repo:
    """A local clone of ``src`` at its HEAD, checked out on a new ``branch``."""
    git.Repo.clone_from(str(src), str(dest), no_hardlinks=False, env=clean_env())
    r = repo(dest)
    r.git.checkout("-q", "-b", branch)
    return r


def is_clean(r: git.Repo) -> bool:
    return not r.is_dirty(untracked_files=True)
