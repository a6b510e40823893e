"""Whether an open upstream pull request conflicts textually with a pack's series, hunk by hunk (docs/related.md).

Our side is the series applied to the pack's base in a mirror, as one diff from the base (``-U3``), cut into
its hunks. Their side is the PR's result and what it started from:

* the mirror holds ``refs/pull/N/merge`` (GitHub's test merge onto the target branch): it and its first parent;
* else ``refs/pull/N/head`` with history down to our base: the head and its merge base with our base;
* else the PR's recorded diff (``pulls/N/files``, each file's ``patch``) applied to the mirror's branch the PR
  targets (else to our base).

A hunk of ours conflicts when it applies (``git apply --check``, three lines of context) where the PR started and
not on the PR's result: the PR changed the lines it sits on or beside. A hunk that applies on the result only
means the PR brings the file or lines our series needs. Nothing is written to the mirror: the index and every
object made live in a temporary directory (``GIT_OBJECT_DIRECTORY``, the mirror as an alternate).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.upstream import git
from harness.watch.footprint import DiffHunk, Span, parse_diff, scoped


@dataclass(frozen=True)
class Check:
    """What applying our hunks onto one PR showed."""

    conflicts: tuple[str, ...] = ()  # our hunks (path, def, base lines) that apply before the PR and not after
    carried: tuple[str, ...] = ()  # our hunks that apply only on the PR's result (it brings what they need)
    compared: str = ""  # what was compared ("refs/pull/7/merge", "its recorded diff on dev 1a2b3c4d5")
    unknown: str = ""  # why nothing could be compared ("" when compared)

    def as_json(self) -> dict:
        return {"conflicts": list(self.conflicts), "carried": list(self.carried), "compared": self.compared,
                "unknown": self.unknown or None}


class _Scratch:
    """A temporary index and object store over a (bare, read-only) mirror."""

    def __init__(self, mirror: Path, tmp: Path):
        self.mirror, self.tmp = mirror, tmp
        (tmp / "objects").mkdir()
        objects = Path(git.run(mirror, "rev-parse", "--git-path", "objects").strip())
        objects = objects if objects.is_absolute() else mirror / objects
        self.env = git.clean_env() | {"GIT_DIR": str(mirror), "GIT_INDEX_FILE": str(tmp / "index"),
                                      "GIT_OBJECT_DIRECTORY": str(tmp / "objects"),
                                      "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(objects.resolve())}
        self._n = 0
        self.paths: list[str] = []  # the files compared (ours and the PR's): the index holds only these

    def call(self, *args: str) -> git.Done:
        return git.call(self.tmp, *args, env=self.env)

    def run(self, *args: str) -> str:
        res = self.call(*args)
        if not res.ok:
            raise git.GitError(list(args), self.tmp, res.status, res.stderr)
        return res.stdout

    def file(self, text: str) -> Path:
        self._n += 1
        path = self.tmp / f"p{self._n}.diff"
        path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
        return path

    def load(self, tree: str) -> None:
        """The index of ``tree``, only the ``paths`` of interest (a whole upstream tree is slow to read)."""
        (self.tmp / "index").unlink(missing_ok=True)
        listed = self.run("ls-tree", "-r", "--full-tree", tree, "--", *self.paths) if self.paths else ""
        if listed.strip():
            res = git.call(self.tmp, "update-index", "--index-info", env=self.env, input=listed)
            if not res.ok:
                raise git.GitError(["update-index", "--index-info"], self.tmp, res.status, res.stderr)

    def applies(self, tree: str, patch: Path) -> bool:
        self.load(tree)
        return self.call("apply", "--cached", "--check", "--whitespace=nowarn", str(patch)).ok

    def apply_all(self, tree: str, patches: Iterable[Path]) -> tuple[str | None, str]:
        """The tree ``patches`` make of ``tree``'s ``paths`` (None and git's complaint when one does not apply)."""
        self.load(tree)
        for p in patches:
            res = self.call("apply", "--cached", "--whitespace=nowarn", str(p))
            if not res.ok:
                errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
                return None, (errors or res.stderr.strip().splitlines() or ["does not apply"])[0]
        return self.run("write-tree").strip(), ""


def split_hunks(diff: str) -> list[str]:
    """A unified diff as one small diff per hunk (each with its file's header lines)."""
    out: list[str] = []
    header: list[str] = []
    hunk: list[str] = []
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            if hunk:
                out.append("\n".join(header + hunk))
            header, hunk = [line], []
        elif line.startswith("@@"):
            if hunk:
                out.append("\n".join(header + hunk))
            hunk = [line]
        elif hunk:
            hunk.append(line)
        else:
            header.append(line)
    if hunk:
        out.append("\n".join(header + hunk))
    return out


def recorded_diff(files: Iterable[dict]) -> tuple[str, list[str]]:
    """A PR's ``pulls/N/files`` answer as one applicable diff, and the files it changes with no ``patch``
    recorded (GitHub leaves out the patch of large files; the recorded answers keep only the packs' files)."""
    parts, missing = [], []
    for f in files:
        name, patch, status = str(f.get("filename") or ""), f.get("patch"), str(f.get("status") or "modified")
        if not name:
            continue
        if not patch:
            missing.append(name)
            continue
        old = "/dev/null" if status == "added" else f"a/{name}"
        new = "/dev/null" if status == "removed" else f"b/{name}"
        mode = "new file mode 100644\n" if status == "added" else "deleted file mode 100644\n" \
            if status == "removed" else ""
        parts.append(f"diff --git a/{name} b/{name}\n{mode}--- {old}\n+++ {new}\n{str(patch).rstrip(chr(10))}\n")
    return "".join(parts), missing


def _label(h: DiffHunk) -> str:
    lines = f"lines {h.first}-{h.last}" if h.last > h.first else f"line {h.first}"
    return " ".join(x for x in (h.path, h.scope or h.function, lines) if x)


def check(mirror: Path, base_commit: str, series: Iterable[Path], number: int, files: list[dict] | None,
          target: str = "", spans: Callable[[str], tuple[Span, ...]] | None = None) -> Check:
    """Apply our series (``series``: its patch files, in order) to ``base_commit`` and each of its hunks onto
    PR ``number``'s result (see the module's docstring for where that comes from)."""
    with tempfile.TemporaryDirectory(prefix="harness-conflicts-") as d:
        s = _Scratch(mirror, Path(d))
        try:
            return _check(s, base_commit, list(series), number, files, target, spans)
        except git.GitError as exc:
            return Check(unknown=f"git failed: {exc}")


_OURS: dict[tuple[str, str, tuple[str, ...]], tuple[list[str], str]] = {}  # (mirror, base, series) -> hunks, why not
_APPLIES: dict[tuple[str, str], bool] = {}  # (tree or commit, hunk) -> whether it applies there


def _ref(s: _Scratch, ref: str) -> str | None:
    res = s.call("rev-parse", "-q", "--verify", f"{ref}^{{commit}}")
    return res.stdout.strip() if res.ok else None


def _check(s: _Scratch, base: str, series: list[Path], number: int, files: list[dict] | None, target: str,
           spans: Callable[[str], tuple[Span, ...]] | None) -> Check:
    patches = [p.resolve() for p in series]
    s.paths = sorted({h.path for p in patches for h in parse_diff(p.read_text(encoding="utf-8", errors="replace"))}
                     | {str(f.get("filename")) for f in files or [] if f.get("patch")})
    key = (str(s.mirror), base, tuple(str(p) for p in patches))
    if key not in _OURS:  # one pack's series is checked against many PRs: apply it once
        s.load(base)
        base_tree = s.run("write-tree").strip()
        ours, why = s.apply_all(base, patches)
        _OURS[key] = (split_hunks(s.run("diff-tree", "-p", "-U3", base_tree, ours)), "") if ours else ([], why)
    hunks, why = _OURS[key]
    if why:
        return Check(unknown=f"our series does not apply at {base[:9]}: {why}")
    if not hunks:
        return Check(unknown="our series changes nothing")
    merge, head = _ref(s, f"refs/pull/{number}/merge"), _ref(s, f"refs/pull/{number}/head")
    before = after = None
    if merge is not None and _ref(s, f"{merge}^1") is not None:
        before, after, compared = _ref(s, f"{merge}^1"), merge, f"refs/pull/{number}/merge"
    elif head is not None and (mb := s.call("merge-base", head, base)).ok:
        before, after, compared = mb.stdout.strip(), head, f"refs/pull/{number}/head"
    elif files:
        diff, missing = recorded_diff(files)
        if not diff:
            return Check(unknown=f"no diff recorded for #{number} ({', '.join(missing[:3]) or 'no files'})")
        onto = (_ref(s, f"refs/heads/{target}") if target else None) or base
        where = f"{target} {onto[:9]}" if onto != base else f"our base {base[:9]}"
        after, why = s.apply_all(onto, [s.file(diff)])
        if after is None:
            return Check(unknown=f"the recorded diff of #{number} does not apply at {where}: {why}")
        before, compared = onto, f"its recorded diff on {where}"
    else:
        return Check(unknown=f"neither refs/pull/{number}/* in the mirror nor a recorded diff")
    assert before is not None and after is not None
    conflicts: list[str] = []
    carried: list[str] = []
    for text in hunks:
        patch = s.file(text + "\n")
        on_before = _APPLIES.get((before, text))
        if on_before is None:  # PRs of one branch start from the same commit: ask once
            on_before = _APPLIES[(before, text)] = s.applies(before, patch)
        on_after = s.applies(after, patch)
        if on_before == on_after:
            continue
        parsed = parse_diff(text + "\n")
        if not parsed:
            continue
        label = _label(scoped(parsed[:1], spans)[0] if spans is not None else parsed[0])
        (conflicts if on_before else carried).append(label)
    return Check(tuple(dict.fromkeys(conflicts)), tuple(dict.fromkeys(carried)), compared)
