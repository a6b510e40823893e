"""The one place the harness runs git: plain ``subprocess``, a fixed identity, no user or system config.

Every git the tool runs on its own trees (pristine snapshots, clones, patched trees, edit checkouts)
goes through ``run`` / ``call`` here, with ``clean_env()``: a fixed author and committer (so the
tool's commits are reproducible) and neither the user's nor the system's config (no hooks,
templates, signing or diff settings leak in). The only exceptions read what belongs to the person:
``in_user_repo`` (the project's own checkout: its HEAD for a receipt, ``user.name`` for a filing
decision) and ``user_identity`` (their ``user.name`` / ``user.email``, the identity an export files
as), where the user's config is the point. ``Repo.commit_as`` writes a commit under such an identity.

Importing this module never needs a git binary (runs from an offline bundle on a GPU host never
call git). Calling git without one raises ``GitNotFound``, one clean line naming it.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.errors import GitError, GitNotFound

__all__ = ["GitError", "GitNotFound", "Done", "Repo", "Commit", "IDENTITY", "clean_env", "call", "run",
           "in_user_repo", "user_identity", "init_snapshot", "clone", "is_clean", "repo"]

IDENTITY = {
    "GIT_AUTHOR_NAME": "patch-lane",
    "GIT_AUTHOR_EMAIL": "patch-lane@invalid",
    "GIT_COMMITTER_NAME": "patch-lane",
    "GIT_COMMITTER_EMAIL": "patch-lane@invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}


def clean_env() -> dict[str, str]:
    """The environment for every git the tool runs: fixed identity, no user or system config."""
    env = dict(os.environ)
    env.update(IDENTITY)
    # Never let a user's global hooks, templates or signing config leak in.
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    # a mirror's refs/replace/ would swap the pinned commit's objects for others, under the same ids
    env["GIT_NO_REPLACE_OBJECTS"] = "1"
    return env


@dataclass(frozen=True)
class Done:
    """A git command that ran to its end: its arguments, exit status and output."""

    args: tuple[str, ...]
    cwd: Path
    status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.status == 0

    def error(self) -> GitError:
        return GitError(self.args, self.cwd, self.status, self.stderr)


def call(cwd: Path | str, *args: str, env: Mapping[str, str] | None = None,
         timeout: float | None = None, input: str | None = None) -> Done:
    """Run ``git ARGS`` in ``cwd`` and return how it ended, whatever its exit status.

    ``env`` replaces ``clean_env()`` (callers add to it, never drop it). Raises ``GitNotFound``
    when no git is on PATH, and ``GitError`` (no status) when ``cwd`` is missing or ``timeout``
    seconds pass. ``input`` is written to git's stdin (none by default).
    """
    cwd = Path(cwd)
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, env=dict(clean_env() if env is None else env),
                              stdin=subprocess.DEVNULL if input is None else None, input=input,
                              capture_output=True, text=True, encoding="utf-8",
                              errors="replace", timeout=timeout)
    except FileNotFoundError as exc:
        if exc.filename is not None and Path(exc.filename) == cwd:
            raise GitError(args, cwd, None, f"no such directory: {cwd}") from None
        raise GitNotFound(args, cwd) from None
    except subprocess.TimeoutExpired:
        raise GitError(args, cwd, None, f"timed out after {timeout:g} s") from None
    except OSError as exc:  # not executable, cwd not a directory, ...
        raise GitError(args, cwd, None, str(exc)) from None
    return Done(tuple(args), cwd, proc.returncode, proc.stdout, proc.stderr)


def run(cwd: Path | str, *args: str, check: bool = True, env: Mapping[str, str] | None = None,
        timeout: float | None = None) -> str:
    """``git ARGS`` in ``cwd``: its stdout. A non-zero exit raises ``GitError`` unless ``check`` is false."""
    done = call(cwd, *args, env=env, timeout=timeout)
    if check and not done.ok:
        raise done.error()
    return done.stdout


def in_user_repo(cwd: Path, *args: str) -> Done | None:
    """``git ARGS`` in the project's own checkout with the user's environment and config (their
    ``safe.directory``, their ``user.name``); ``None`` when git is missing or ``cwd`` is unusable."""
    try:
        return call(cwd, *args, env=os.environ)
    except GitError:  # GitNotFound included: a copy on a GPU host may have no git
        return None


def user_identity(cwd: Path) -> tuple[str, str]:
    """The person's ``user.name`` and ``user.email`` as their own git config gives them in ``cwd``
    (repository, global and system config; "" for a key that is not set or when git cannot run)."""
    got = []
    for key in ("user.name", "user.email"):
        done = in_user_repo(cwd, "config", "--get", key)
        # only the line end git adds: a TAB or CR inside the value is the value's (and refused as such)
        got.append(done.stdout.removesuffix("\n").strip(" ") if done is not None and done.ok else "")
    return got[0], got[1]


@dataclass(frozen=True)
class Commit:
    sha: str
    tree: str
    parents: tuple[str, ...]
    message: str

    @property
    def summary(self) -> str:
        return self.message.split("\n", 1)[0]


@dataclass(frozen=True)
class Repo:
    """A git work tree whose top directory is ``path``; git never looks above it for a repository."""

    path: Path

    def _env(self) -> dict[str, str]:
        env = clean_env()
        # ``path`` itself must be the repository: a plain directory inside some other checkout is not one
        env["GIT_CEILING_DIRECTORIES"] = str(Path(os.path.abspath(self.path)).parent)
        return env

    def call(self, *args: str) -> Done:
        return call(self.path, *args, env=self._env())

    def run(self, *args: str, check: bool = True) -> str:
        done = self.call(*args)
        if check and not done.ok:
            raise done.error()
        return done.stdout

    @property
    def git_dir(self) -> Path:
        return Path(self.run("rev-parse", "--absolute-git-dir").strip())

    def borrow_objects(self, other: Path) -> None:
        """Let this repository read the objects of the repository at ``other`` (``objects/info/alternates``): a
        3-way apply finds there the blobs a patch was made against, which a clone one commit deep lacks."""
        theirs = Repo(other).git_dir / "objects"
        alternates = self.git_dir / "objects" / "info" / "alternates"
        alternates.parent.mkdir(parents=True, exist_ok=True)
        have = alternates.read_text().splitlines() if alternates.is_file() else []
        if str(theirs) not in have:
            alternates.write_text("".join(f"{line}\n" for line in [*have, str(theirs)]))

    def rev(self, rev: str = "HEAD") -> str:
        """The full sha ``rev`` names."""
        return self.run("rev-parse", "--verify", "-q", f"{rev}^{{commit}}").strip()

    def head(self) -> str:
        return self.rev("HEAD")

    def tree(self, rev: str = "HEAD") -> str:
        return self.run("rev-parse", "--verify", "-q", f"{rev}^{{tree}}").strip()

    def branch(self) -> str | None:
        """The branch HEAD is on; ``None`` when HEAD is detached."""
        done = self.call("symbolic-ref", "-q", "--short", "HEAD")
        if done.status == 1:
            return None
        if not done.ok:
            raise done.error()
        return done.stdout.strip()

    def commit(self, rev: str) -> Commit:
        out = self.run("show", "-s", "--no-show-signature", "--format=%H%n%T%n%P%n%B", rev)
        sha, tree, parents, message = (out.split("\n", 3) + ["", "", "", ""])[:4]
        return Commit(sha, tree, tuple(parents.split()), message)

    def author_date(self, rev: str) -> str:
        """The author date of ``rev`` in git's raw form (``<seconds> <zone>``)."""
        return self.run("show", "-s", "--no-show-signature", "--format=%ad", "--date=raw", rev).strip()

    def commit_as(self, tree: str, parent: str, message: str, name: str, email: str, date: str) -> str:
        """A new commit of ``tree`` on ``parent`` authored and committed by ``name <email>`` at ``date``
        (git's raw form); returns its sha. Nothing else of the fixed environment changes."""
        env = self._env()
        env.update({"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date,
                    "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email, "GIT_COMMITTER_DATE": date})
        fd, path = tempfile.mkstemp(prefix="patchlane-message-", suffix=".txt")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(message)
            done = call(self.path, "commit-tree", tree, "-p", parent, "-F", path, env=env)
        finally:
            os.unlink(path)
        if not done.ok:
            raise done.error()
        return done.stdout.strip()

    def tags(self) -> list[str]:
        return self.run("tag", "--list").split()

    def dirty_paths(self) -> list[str]:
        """Paths with changes not committed (staged, unstaged or untracked and not ignored)."""
        out = self.run("status", "--porcelain", "--untracked-files=all")
        return [ln[3:] for ln in out.splitlines() if ln.strip()]

    def is_clean(self) -> bool:
        return not self.dirty_paths()

    def stray_paths(self) -> list[str]:
        """Paths that are not the checked-out commit: changed, staged, untracked or ignored (a cache entry's check;
        git rehashes only files whose stat data changed since its index recorded them)."""
        out = self.run("status", "--porcelain", "--ignored", "--untracked-files=all")
        return [ln[3:] for ln in out.splitlines() if ln.strip()]


def repo(path: Path) -> Repo:
    return Repo(Path(path))


def init_snapshot(path: Path, message: str) -> str:
    """Make ``path`` a git repository whose one commit holds every file in it; return the sha."""
    run(path, "init", "-q", "--initial-branch=base")
    r = Repo(Path(path))
    r.run("config", "core.autocrlf", "false")
    r.run("config", "gc.auto", "0")
    r.run("add", "-A", "-f", ".")
    r.run("commit", "-q", "--no-verify", "--allow-empty", "-m", message)
    r.run("tag", "pristine")
    return r.head()


def clone(src: Path, dest: Path, branch: str) -> Repo:
    """A local clone of ``src`` at its HEAD, checked out on a new ``branch``."""
    src, dest = Path(os.path.abspath(src)), Path(os.path.abspath(dest))
    dest.parent.mkdir(parents=True, exist_ok=True)
    run(dest.parent, "clone", "-q", "--", str(src), str(dest))
    r = Repo(dest)
    r.run("checkout", "-q", "-b", branch)
    return r


def is_clean(r: Repo) -> bool:
    return r.is_clean()
