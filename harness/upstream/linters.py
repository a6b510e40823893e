"""The upstream's own formatters and linters, run on the lines an exported series adds or changes, or on whole
changed files where the upstream's CI runs them so (``scope = "files"``, ``whole_files``).

Each target's manifest lists its checks (``[[policy.checks]]``, ``pins.Check``): a PyPI package pinned
exactly, the arguments the upstream's config gives it, the regex of files it applies to. A check runs
as ``python -m MODULE ARGS FILES`` in the patched tree, so it reads the upstream's own config files
(pyproject.toml, .pylintrc, setup.cfg) from that tree, on the files the series touches that match.

What counts is only what the series wrote, as a reviewer's CI sees it:

* a ``lint`` check's ``path:line: message`` lines, on lines the series adds or changes (warnings on
  untouched upstream lines are not ours);
* a ``format`` check's would-be rewrite: the tool rewrites the files in place, and each hunk of the
  resulting diff that overlaps a touched line is one finding;
* for every target, trailing whitespace on an added line and an added last line without a newline.

Tools are installed from PyPI (never by cloning hook repositories) into a virtual environment cached in
the store (``tools/<package>-py<X.Y>``), created in a scratch directory and renamed into place under
the store's lock, so an interrupted install leaves nothing that looks complete. Tools run as
``<env>/bin/python -m MODULE``, which stays valid after the rename (console scripts would not).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.upstream import git
from harness.errors import CheckError, ConfigError, PinError
from harness.base.interpreters import find_interpreter, python_version
from harness.upstream.pins import Check, Manifest
from harness.base.store import Store

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# path:line[:col][:] message -- pylint's, ruff's concise, codespell's and flake8's line format
_LINE = re.compile(r"^(?P<path>[^\s:][^:]*):(?P<line>\d+):(?:\d+:)?\s*(?P<msg>.*\S)\s*$")
_TIMEOUT_S = 600
# A tool reporting its own failure on a file's line (pylint: an option, plugin or config section it cannot use,
# or a fatal F-message): not a finding about the file, and never "0 findings" because the line is untouched.
_TOOL_OWN = re.compile(r"\b(?:E001[1-5]|F0\d{3})\b|\((?:unrecognized-inline-option|bad-option-value|bad-plugin-value|"
                       r"bad-configuration-section|unrecognized-option|config-parse-error|fatal|astroid-error|"
                       r"parse-error|method-check-failed)\)")


@dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int
    tool: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.tool}: {self.message}"

    def describe(self) -> dict:
        return {"path": self.path, "line": self.line, "tool": self.tool, "message": self.message}


@dataclass(frozen=True)
class Ran:
    """One check and the files it was given (none: no touched file matches its ``files``)."""

    name: str
    package: str
    files: tuple[str, ...]

    def describe(self) -> dict:
        return {"name": self.name, "package": self.package, "files": list(self.files)}


@dataclass(frozen=True)
class Report:
    findings: tuple[Finding, ...] = ()  # the series' own: each fails the export
    ran: tuple[Ran, ...] = field(default_factory=tuple)
    # whole-file checks (``scope = "files"``): findings the upstream's CI reports on the changed files that the base
    # has too (same tool, same line of the base's file, untouched by the series), and the changed files that fail a
    # whole-file check at the base already
    at_base: tuple[Finding, ...] = ()
    base_fails: tuple[str, ...] = ()

    def describe(self) -> dict:
        return {"findings": [f.describe() for f in self.findings], "checks": [r.describe() for r in self.ran],
                "at_base": [f.describe() for f in self.at_base], "base_fails": list(self.base_fails)}


def check_tree(manifest: Manifest, repo: git.Repo, base: str, store: Store, python: str | None = None,
               base_name: str | None = None) -> Report:
    """Run the target's checks on what ``base..HEAD`` of ``repo`` changes; the work tree is left as HEAD.

    ``base_name`` (the manifest's base) picks the checks read at that base (``Check.bases``). A whole-file check
    (``scope = "files"``) runs on every changed file it selects, at HEAD and at ``base``, and tells the findings
    the series introduces from those the base has too (``whole_files``).

    The tools run on ``python``, by default the manifest's interpreter (``python = "3.12"``, the
    upstream's own) where this host has it, else this one.

    Raises ``ConfigError`` when a check's config file is missing from the tree (the policy is stale),
    ``PinError`` when a tool cannot be installed, ``CheckError`` when a tool fails without a finding.
    """
    touched = touched_lines(repo, base)
    findings = list(whitespace(repo, base))
    ran = []
    at_base: list[Finding] = []
    base_fails: set[str] = set()
    if python is None and manifest.policy.checks:
        python = (find_interpreter(manifest.python) if manifest.python else None) or sys.executable
    for check in manifest.policy.checks:
        if not check.applies_at(base_name):
            continue
        files = [p for p in sorted(touched) if _selects(check, p)]
        ran.append(Ran(check.name, check.package, tuple(files)))
        if not files:
            continue
        if check.config and not (repo.path / check.config).is_file():
            raise ConfigError(f"{manifest.path}: check '{check.name}' reads {check.config}, which the patched "
                              f"tree does not have (is the [policy] still that of this base?)")
        env = tool_env(check, store, python or sys.executable)
        if check.scope == "files":
            whole = whole_files(check, env, repo, base, files, touched)
            findings += whole.findings
            at_base += whole.at_base
            base_fails.update(whole.base_fails)
        else:
            findings += run_check(check, env, repo, touched)
    return Report(tuple(sorted(set(findings))), tuple(ran), tuple(sorted(set(at_base))), tuple(sorted(base_fails)))


def _selects(check: Check, path: str) -> bool:
    return bool(re.search(check.files, path)) and not (check.exclude and re.search(check.exclude, path))


# --------------------------------------------------------------------------- what the series changes

@dataclass(frozen=True)
class _Hunk:
    old_path: str  # "" for a file the diff adds
    new_path: str  # "" for a file the diff deletes
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: tuple[str, ...]  # the hunk's body: ' ', '-', '+' lines and '\\ No newline at end of file'


def _hunks(diff: str) -> Iterable[_Hunk]:
    """The hunks of a unified git diff, read by their counts (a '+++' line inside a hunk is content)."""
    lines = diff.split("\n")
    old_path = new_path = ""
    i = 0
    while i < len(lines):
        ln = lines[i]
        i += 1
        if ln.startswith("--- "):
            old_path = ln[6:] if ln.startswith("--- a/") else ""
        elif ln.startswith("+++ "):
            new_path = ln[6:] if ln.startswith("+++ b/") else ""
        elif m := _HUNK.match(ln):
            old_start, old_count = int(m.group(1)), int(m.group(2) or 1)
            new_start, new_count = int(m.group(3)), int(m.group(4) or 1)
            body, old_left, new_left = [], old_count, new_count
            while i < len(lines) and (old_left or new_left or lines[i].startswith("\\")):
                body.append(lines[i])
                old_left -= lines[i][:1] in (" ", "-")
                new_left -= lines[i][:1] in (" ", "+")
                i += 1
            yield _Hunk(old_path, new_path, old_start, old_count, new_start, new_count, tuple(body))


def touched_lines(repo: git.Repo, base: str) -> dict[str, set[int]]:
    """Every file ``base..HEAD`` adds or modifies, with the line numbers (in HEAD) it adds or changes."""
    names = repo.run("diff", "--no-renames", "--diff-filter=d", "--name-only", "-z", base, "HEAD")
    out: dict[str, set[int]] = {p: set() for p in names.split("\0") if p}
    for h in _hunks(_diff(repo, base, "HEAD")):
        if h.new_path:
            out.setdefault(h.new_path, set()).update(range(h.new_start, h.new_start + h.new_count))
    return out


def whitespace(repo: git.Repo, base: str) -> Iterable[Finding]:
    """Trailing whitespace on an added line; an added last line without a newline (every target)."""
    for h in _hunks(_diff(repo, base, "HEAD")):
        if not h.new_path:
            continue
        line, last = h.new_start, ""
        for ln in h.lines:
            if ln.startswith("+") and ln[1:] != ln[1:].rstrip(" \t"):
                yield Finding(h.new_path, line, "whitespace", "trailing whitespace")
            if ln.startswith("\\") and last == "+":  # "\\ No newline at end of file" follows its line
                yield Finding(h.new_path, line - 1, "whitespace", "no newline at end of file")
            if ln[:1] in (" ", "+"):
                line += 1
            if ln[:1] in (" ", "+", "-"):
                last = ln[:1]


def _diff(repo: git.Repo, a: str, b: str | None, *paths: str) -> str:
    args = ["diff", "--no-color", "--no-ext-diff", "--no-renames", "--diff-filter=d", "-U0",
            "--src-prefix=a/", "--dst-prefix=b/", a]
    return repo.run(*args, *([b] if b else []), "--", *paths)


# --------------------------------------------------------------------------- running one check

def run_check(check: Check, env: Path, repo: git.Repo, touched: dict[str, set[int]]) -> list[Finding]:
    """The findings of ``check`` on the touched files it selects that fall on touched lines."""
    files = [p for p in sorted(touched) if _selects(check, p)]
    argv = [str(env / "bin" / "python"), "-m", check.module, *check.args, *files]
    run_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    run_env["PYTHONDONTWRITEBYTECODE"] = "1"
    try:
        proc = subprocess.run(argv, cwd=repo.path, env=run_env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, encoding="utf-8", errors="replace", timeout=_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CheckError(f"{check.name} ({check.package}) ran past {_TIMEOUT_S} s on {len(files)} file(s)") from None
    except OSError as exc:
        raise CheckError(f"cannot run {check.name} ({check.package}): {exc}") from None
    try:
        rewrites = list(_rewrites(check, repo, files, touched))
        said = []
        for ln in (proc.stdout + "\n" + proc.stderr).splitlines():
            m = _LINE.match(ln)
            if m and (p := _relative(m.group("path"), repo.path)) in touched:
                said.append(Finding(p, int(m.group("line")), check.name, m.group("msg")))
    finally:
        repo.run("reset", "-q", "--hard")  # each check sees the patched tree as the series left it
        repo.run("clean", "-q", "-f", "-d", "-x")
    own = [ln.strip() for ln in (proc.stdout + "\n" + proc.stderr).splitlines() if _TOOL_OWN.search(ln)]
    if proc.returncode != 0 and own:
        raise CheckError(f"{check.name} ({check.package}) failed on its own configuration (exit {proc.returncode}) "
                         f"on {', '.join(files)}: {own[0]}")
    if proc.returncode != 0 and _crashed(proc):  # findings printed before a crash are not all there were
        raise CheckError(f"{check.name} ({check.package}) crashed (exit {proc.returncode}) on {', '.join(files)} "
                         f"after reporting {len(said)} finding(s): {_last_line(proc.stderr) or 'no output'}")
    usage = _usage_error(proc)
    if proc.returncode != 0 and usage:  # it stopped on its command line: what it printed before is not a report
        raise CheckError(f"{check.name} ({check.package}) stopped on a usage error (exit {proc.returncode}) on "
                         f"{', '.join(files)} after reporting {len(said)} finding(s): {usage}")
    if proc.returncode != 0 and (check.kind == "format" or not said):
        lines = [ln.strip() for ln in (proc.stderr + "\n" + proc.stdout).splitlines() if ln.strip()]
        raise CheckError(f"{check.name} ({check.package}) failed (exit {proc.returncode}) on "
                         f"{', '.join(files)}: {lines[-1] if lines else 'no output'}")
    lint = [f for f in said if f.line in touched[f.path]] if check.kind == "lint" else []
    return rewrites + lint


def _crashed(proc: subprocess.CompletedProcess) -> bool:
    """The tool died instead of finishing its report: killed by a signal, or a Python traceback on stderr."""
    return proc.returncode < 0 or "Traceback (most recent call last):" in proc.stderr


_USAGE = re.compile(r"^(?:usage:|[\w.-]+: error: |error: (?:unexpected|unrecognized|invalid|the argument|a value))",
                    re.I)


def _usage_error(proc: subprocess.CompletedProcess) -> str:
    """The tool's usage complaint, if it printed one (argparse's ``prog: error: ...``, clap's ``error: unexpected
    argument``): a finding printed before it is no full report, whatever the exit status means for that tool."""
    lines = [ln.strip() for ln in (proc.stderr + "\n" + proc.stdout).splitlines() if ln.strip()]
    hits = [ln for ln in lines if _USAGE.match(ln)]
    if not hits:
        return ""
    return next((ln for ln in hits if not ln.lower().startswith("usage:")), hits[0])


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _rewrites(check: Check, repo: git.Repo, files: list[str], touched: dict[str, set[int]]) -> Iterable[Finding]:
    """One finding per hunk of the tool's in-place rewrite that overlaps a touched line, at the first such line."""
    for h in _hunks(_diff(repo, "HEAD", None, *files)):
        mine = touched.get(h.old_path, set())
        if h.old_count == 0:  # a pure insertion after line old_start: it sits between that line and the next
            span = [h.old_start, h.old_start + 1]
            what = f"would insert {h.new_count} line(s) after line {h.old_start}"
        else:
            span = list(range(h.old_start, h.old_start + h.old_count))
            what = (f"would reformat line {h.old_start}" if h.old_count == 1
                    else f"would reformat lines {h.old_start}-{span[-1]}")
        hit = next((n for n in span if n in mine), None)
        if hit is not None:
            yield Finding(h.old_path, hit, check.name, what)


def _relative(path: str, root: Path) -> str:
    p = Path(path)
    if p.is_absolute():
        try:
            return p.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            return path
    return p.as_posix().removeprefix("./")


# --------------------------------------------------------------------------- whole changed files, as the CI does

def whole_files(check: Check, env: Path, repo: git.Repo, base: str, files: list[str],
                touched: dict[str, set[int]]) -> Report:
    """``check`` on every line of ``files`` at HEAD, as the upstream's CI runs it on whole changed files, and on
    the same files at ``base``. A HEAD finding is the series' own (``findings``) when it falls on a line the series
    adds or changes, or the base has no finding of that tool on the same line (a lint finding: the same message);
    else the base has it too (``at_base``). ``base_fails``: the files that fail the check at the base.

    Both runs see the whole tree of their revision, as the CI's checkout is: the patched checkout itself, and a
    worktree of ``base`` beside it. A tool that classifies by what else the tree holds (isort's first-party
    modules, pylint's imports) needs it: a copy of the changed files and the config files alone once made isort
    report findings at the base that the real checkout does not have."""
    now = run_check(check, env, repo, _every_line(repo, files))
    old_files = [f for f in files if repo.call("cat-file", "-e", f"{base}:{f}").ok]
    then: list[Finding] = []
    if old_files:
        with _worktree(repo, base) as old:
            then = run_check(check, env, old, _every_line(old, old_files))
    hunks: dict[str, list[_Hunk]] = {}
    for h in _hunks(_diff(repo, base, "HEAD", *files)):
        if h.new_path:
            hunks.setdefault(h.new_path, []).append(h)
    seen = {(f.path, f.tool, f.line, f.message if check.kind == "lint" else "") for f in then}
    ours: list[Finding] = []
    theirs: list[Finding] = []
    for f in now:
        old_line = None if f.line in touched.get(f.path, set()) else _base_line(hunks.get(f.path, []), f.line)
        key = (f.path, f.tool, old_line, f.message if check.kind == "lint" else "")
        (theirs if old_line is not None and f.path in old_files and key in seen else ours).append(f)
    return Report(tuple(ours), (), tuple(theirs), tuple(sorted({f.path for f in then})))


def _every_line(repo: git.Repo, files: list[str]) -> dict[str, set[int]]:
    """Every line of each of ``files`` as HEAD of ``repo`` has it (a whole-file check's "touched" lines)."""
    return {rel: set(range(0, repo.run("show", f"HEAD:{rel}").count("\n") + 2)) for rel in files}


@contextlib.contextmanager
def _worktree(repo: git.Repo, rev: str):
    """A detached worktree of ``rev`` beside ``repo`` (the same objects, its own files), removed on the way out."""
    with tempfile.TemporaryDirectory(prefix="patchlane-lint-") as tmp:
        path = Path(tmp) / "base"
        repo.run("worktree", "add", "-q", "--detach", str(path), rev)
        try:
            yield git.repo(path)
        finally:
            repo.call("worktree", "remove", "--force", str(path))
            repo.call("worktree", "prune")


def _base_line(hunks: list[_Hunk], line: int) -> int | None:
    """The line of the base's file that HEAD's ``line`` is, outside the series' hunks (``-U0``)."""
    delta = 0
    for h in hunks:
        if h.new_count and h.new_start <= line < h.new_start + h.new_count:
            return None
        if (h.new_count and h.new_start + h.new_count <= line) or (not h.new_count and h.new_start < line):
            delta += h.old_count - h.new_count
    return line + delta


# --------------------------------------------------------------------------- the tool environments

def env_key(check: Check, python_version: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=_-]+", "-", check.package).replace("==", "-") + f"-py{python_version}"


def tool_env(check: Check, store: Store, python: str = sys.executable) -> Path:
    """The cached environment holding ``check.package`` for ``python``; installed from PyPI if missing."""
    version = _python_version(python)
    final = store.area("tools") / env_key(check, version)
    with store.locked():
        if (final / "bin" / "python").exists():
            return final
        with store.new_entry(final) as tmp:
            _install(check, python, tmp)
    return final


def _python_version(python: str) -> str:
    if python == sys.executable:
        return f"{sys.version_info[0]}.{sys.version_info[1]}"
    try:
        version = python_version(python, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        version = ""
    if not version:
        raise ConfigError(f"cannot run {python} for the upstream checks")
    return version


def _install(check: Check, python: str, dest: Path) -> None:
    """A virtual environment in ``dest`` with ``check.package`` installed (pip from this interpreter)."""
    steps = ([python, "-m", "venv", "--without-pip", str(dest)],
             [sys.executable, "-m", "pip", "--python", str(dest / "bin" / "python"), "install", "--quiet",
              "--disable-pip-version-check", "--no-input", check.package])
    for argv in steps:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PinError(f"cannot install {check.package} for check '{check.name}': {exc}") from None
        if done.returncode != 0:
            lines = [ln.strip() for ln in (done.stderr + "\n" + done.stdout).splitlines() if ln.strip()]
            raise PinError(f"cannot install {check.package} for check '{check.name}': "
                           f"{lines[-1] if lines else f'exit {done.returncode}'}",
                           hint="the checks install their tools from PyPI (or pip's configured index)")
