"""Re-decide every pack when upstream moves: ``harness refresh``.

A git base (upstream main or dev) pins one commit; upstream moves on. For a new head of such a base (``--to
REF``: a branch, tag or commit; default: the ref the base follows, as the mirror or the repository has it now)
every pack with a series on that base is tried there as ``rebase`` tries it, and given one class:

``unchanged``   every patch applies exactly where it says
``offsets``     it applies, some hunks moved (the series' context is regenerated in the proposal)
``conflicts``   a patch does not apply; the upstream commits between the pin and the head that changed the lines
                of the conflicting hunks are named
``landed``      the series reverse-applies at the head and an upstream commit has its patch-id: taken as it is
``landed-modified``  it reverse-applies, and no commit has its patch-id: the first commit after which it does is
                named, with ``git range-diff`` of our series against it
``superseded``  the series still changes the head, but the pack's bug lane printed BUG_ABSENT there: upstream
                fixed it another way (a lane that needs a GPU is planned instead, and the class waits for it)
``still-needed``  the series applies and the bug lane still reproduces the bug at the head

The history between the pin and the head comes from the same mirror (or URL) the base is fetched from; a shallow
mirror that holds only the head has none, and then the classes that need it say so instead of guessing.

Where a pack's class is known, ``propose`` writes the move as one commit on a branch of its own: the new pin in
the manifest, the series that moved regenerated from the head, and a note listing each pack's class, the lanes
whose evidence the move made stale and the mitigations whose retirement condition came true.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import tomlkit

from harness.base import clock
from harness.errors import ConfigError, Exit, HarnessError, PinError
from harness.lane import receipts, series
from harness.lane.context import Context
from harness.lane.tracking import Pack
from harness.upstream import git, pins
from harness.watch import rebase

UNCHANGED, OFFSETS, CONFLICTS = "unchanged", "offsets", "conflicts"
LANDED, LANDED_MODIFIED, SUPERSEDED, STILL_NEEDED = "landed", "landed-modified", "superseded", "still-needed"
CLASSES = (UNCHANGED, OFFSETS, CONFLICTS, LANDED, LANDED_MODIFIED, SUPERSEDED, STILL_NEEDED)
_SHA = re.compile(r"^[0-9a-f]{40}$")
_DIFF_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class RefreshError(HarnessError):
    """A new head that cannot be resolved or fetched, or a base that is not a git base."""

    exit_code = PinError.exit_code


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str

    def __str__(self) -> str:
        return f"{self.sha[:12]} {self.subject}"


@dataclass
class History:
    """The upstream between the pin and the new head, in a scratch repository that has both."""

    repo: git.Repo
    old: str
    new: str
    commits: list[Commit]  # old..new, oldest first; empty when ``known`` is False
    known: bool  # False: the source holds no path from the pin to the head (a shallow mirror)
    why_unknown: str = ""

    def mainline(self, old: str, new: str) -> list[Commit]:
        """The first-parent chain of old..new, oldest first: the commits ``new``'s branch itself went through
        (a merge stands for the branch it brought in), where ``commits`` mixes every branch by date."""
        log = git.run(self.repo.path, "log", "--reverse", "--first-parent", "--format=%H%x09%s", f"{old}..{new}")
        return [Commit(*line.split("\t", 1)) for line in log.splitlines() if "\t" in line]

    def parents(self, sha: str) -> list[str]:
        return git.run(self.repo.path, "rev-list", "--parents", "-n", "1", sha).split()[1:]

    def touching(self, path: str, first: int, last: int) -> list[Commit]:
        """The commits of old..new that changed lines ``first``..``last`` of ``path`` as it was at the pin, the
        range followed through every earlier commit's hunks (lines added above it move it down)."""
        hits: list[Commit] = []
        lo, hi = first, last
        for c in self.commits:
            diff = git.call(self.repo.path, "diff", "-U0", f"{c.sha}^", c.sha, "--", path).stdout
            shift, touched = 0, False
            for line in diff.splitlines():
                m = _DIFF_HUNK.match(line)
                if not m:
                    continue
                o_start, o_len = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
                n_len = int(m.group(4) if m.group(4) is not None else 1)
                o_end = o_start + max(o_len, 1) - 1
                if o_end < lo and o_len > 0 or (o_len == 0 and o_start < lo):
                    shift += n_len - o_len
                elif o_start <= hi:
                    touched = True
            if touched:
                hits.append(c)
            lo, hi = lo + shift, hi + shift
        return hits


def resolve(pin: pins.GitPin, to: str | None, sources: pins.Sources) -> tuple[str, str]:
    """(the commit ``to`` names, where it was read): a full sha as given, else a ref (``main``,
    ``refs/heads/dev``, a tag) looked up with ``git ls-remote`` in the base's mirror, else its URL."""
    ref = to or pin.ref
    if _SHA.match(ref):
        return ref, "given"
    candidates, _ = pins.git_sources(pin, sources.git_mirrors)
    wanted = [ref] if ref.startswith("refs/") else [f"refs/heads/{ref}", f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}"]
    for source in candidates:
        done = git.call(Path.cwd(), "ls-remote", source, *wanted, env=git.clean_env())
        if not done.ok:
            continue
        found: dict[str, str] = {}
        for line in done.stdout.splitlines():
            sha, _, name = line.partition("\t")
            if name:
                found[name] = sha
        for name in wanted:
            if name in found:
                return found[name], source
    raise RefreshError(f"no ref {ref!r} in {', '.join(candidates) or pin.url}",
                       hint="name a branch, a tag or a full commit id with --to")


def history(pin: pins.GitPin, new: str, sources: pins.Sources, scratch: Path) -> History:
    """A scratch repository holding the pin and ``new`` with whatever history its source has between them."""
    candidates, _ = pins.git_sources(pin, sources.git_mirrors)
    repo = git.Repo(scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    git.run(scratch, "init", "-q", "--initial-branch=refresh")
    env = {**git.clean_env(), "GIT_TERMINAL_PROMPT": "0"}
    errors = []
    shallow_source = False
    for source in candidates:
        wanted = sorted({pin.commit, new})
        done = git.call(scratch, "fetch", "-q", "--no-tags", source, *wanted, env=env, timeout=1800)
        if not done.ok:  # a shallow source cannot send history it does not hold: the two commits alone, then
            done = git.call(scratch, "fetch", "-q", "--no-tags", "--depth", "1", source, *wanted, env=env,
                            timeout=1800)
            shallow_source = done.ok
        if done.ok:
            break
        errors.append(f"{source}: {(done.stderr.strip().splitlines() or [str(done.status)])[-1]}")
    else:
        raise RefreshError(f"cannot fetch {pin.commit[:12]} and {new[:12]}: {'; '.join(errors) or 'no source'}")
    old = pin.commit
    if old == new:
        return History(repo, old, new, [], True)
    raw = git.call(scratch, "cat-file", "commit", new).stdout
    parents = [line.split()[1] for line in raw.splitlines() if line.startswith("parent ")]
    shallow = shallow_source or (scratch / ".git" / "shallow").is_file() or any(
        not git.call(scratch, "cat-file", "-e", f"{p}^{{commit}}").ok for p in parents)
    if not git.call(scratch, "merge-base", "--is-ancestor", old, new).ok:
        why = ("the source is shallow: it holds the pin and the head but no history between them" if shallow
               else "the pin is not an ancestor of the head (upstream rewrote history, or another branch)")
        return History(repo, old, new, [], False, why)
    log = git.run(scratch, "log", "--reverse", "--format=%H%x09%s", f"{old}..{new}")
    commits = [Commit(*line.split("\t", 1)) for line in log.splitlines() if "\t" in line]
    return History(repo, old, new, commits, True)


def patch_id(path: Path, cwd: Path) -> str:
    """``git patch-id --stable`` of a patch file (whitespace and line numbers do not count)."""
    out = subprocess.run(["git", "patch-id", "--stable"], input=path.read_bytes(), capture_output=True,
                         cwd=cwd, env=git.clean_env(), check=False).stdout.decode()
    return out.split()[0] if out.strip() else ""


def upstream_patch_ids(hist: History) -> dict[str, Commit]:
    """patch-id -> the commit of old..new that has it."""
    if not hist.commits:
        return {}
    log = git.run(hist.repo.path, "log", "-p", "--format=commit %H", f"{hist.old}..{hist.new}")
    out = subprocess.run(["git", "patch-id", "--stable"], input=log.encode(), capture_output=True,
                         cwd=hist.repo.path, env=git.clean_env(), check=False).stdout.decode()
    subjects = {c.sha: c for c in hist.commits}
    return {pid: subjects[sha] for pid, sha in (line.split() for line in out.splitlines() if line.strip())
            if sha in subjects}


@dataclass
class PackMove:
    """One pack on one base, at the new head."""

    pack: Pack
    base: str
    klass: str
    detail: str
    report: rebase.PackReport
    commits: list[Commit] = field(default_factory=list)  # that took it, or that touched its conflicting hunks
    range_diff: str = ""
    bug_lane: str | None = None
    bug_sentinel: str | None = None  # what the bug lane printed at the head; None: not run
    planned: bool = False  # the bug lane needs hardware this host lacks: decided by a planned sweep
    applies: str = ""  # for still-needed: how the series applies at the head (unchanged or offsets)

    def as_json(self) -> dict:
        return {"pack": self.pack.id, "base": self.base, "class": self.klass, "detail": self.detail,
                "applies": self.applies or (self.klass if self.klass in (UNCHANGED, OFFSETS) else ""),
                "patches": [{"patch": r.patch, "result": r.status, "detail": r.detail} for r in self.report.results],
                "commits": [{"sha": c.sha, "subject": c.subject} for c in self.commits],
                "range_diff": self.range_diff, "bug_lane": self.bug_lane, "bug_sentinel": self.bug_sentinel,
                "planned": self.planned}


def _series_commits(hist: History, patches: list[series.Patch], scratch: Path) -> str | None:
    """Our series as commits on the pin, in a clone of the history repo: the tip, or None if it does not apply."""
    work = scratch / "ours"
    if work.exists():
        shutil.rmtree(work)
    git.run(hist.repo.path, "worktree", "add", "-q", "--detach", str(work), hist.old)
    for p in patches:
        if not git.call(work, "am", "-q", "--3way", "--keep-cr", str(p.path)).ok:
            git.call(work, "am", "--abort")
            return None
    return git.run(work, "rev-parse", "HEAD").strip()


def _first_containing(hist: History, patches: list[series.Patch], scratch: Path) -> Commit | None:
    """The first commit of old..new at which every patch reverse-applies (a binary search: once upstream has a
    change it keeps it; the commit that took it is where the search lands)."""
    work = scratch / "probe"
    if not work.exists():
        git.run(hist.repo.path, "worktree", "add", "-q", "--detach", str(work), hist.new)

    def contains(c: Commit) -> bool:
        git.run(work, "checkout", "-q", "--detach", c.sha)
        return all(git.call(work, "apply", "-R", "--check", str(p.path)).ok for p in patches)

    lo, hi = 0, len(hist.commits) - 1
    if hi < 0 or not contains(hist.commits[hi]):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if contains(hist.commits[mid]):
            hi = mid
        else:
            lo = mid + 1
    return hist.commits[lo]


def classify(ctx: Context, pack: Pack, checkout: pins.Checkout, hist: History, scratch: Path) -> PackMove:
    """The pack's class at the new head, before its bug lane is asked (``judge_lane`` does that)."""
    report = rebase.try_pack(ctx, pack, checkout, scratch / "tree")
    base = checkout.base.name
    patches = series.load_series(ctx.root, pack.target, pack.id, base)
    move = PackMove(pack, base, STILL_NEEDED, "", report)
    if report.contained:
        ids = upstream_patch_ids(hist)
        taken = [ids.get(patch_id(p.path, hist.repo.path)) for p in patches]
        if taken and all(taken):
            move.klass, move.commits = LANDED, list(dict.fromkeys(c for c in taken if c))
            move.detail = "patch-id equal to " + ", ".join(str(c) for c in move.commits)
            return move
        move.klass = LANDED_MODIFIED
        if not hist.known:
            move.detail = f"the head already has the change; which commit took it is unknown: {hist.why_unknown}"
            return move
        took = _first_containing(hist, patches, scratch)
        if took is not None:
            move.commits = [took]
            tip = _series_commits(hist, patches, scratch)
            if tip is not None:
                move.range_diff = git.call(hist.repo.path, "range-diff", "--no-color", f"{hist.old}..{tip}",
                                           f"{took.sha}^..{took.sha}").stdout
        move.detail = (f"taken in another form by {took}" if took else "the head already has the change")
        return move
    if report.status == rebase.CONFLICT:
        move.klass = CONFLICTS
        bad = [r for r in report.results if r.status == rebase.CONFLICT]
        move.detail = "; ".join(f"{r.patch}: {r.detail}" for r in bad) or (report.blocked_by or "")
        if hist.known:
            hits: list[Commit] = []
            for r in bad:
                patch = next(p for p in patches if p.name == r.patch)
                for h in patch.hunks:
                    hits += hist.touching(h.path, *h.old_range)
            move.commits = list(dict.fromkeys(hits))
            if move.commits:
                move.detail += "; changed there by " + ", ".join(str(c) for c in move.commits)
            elif hist.commits:
                move.detail += "; no commit between the pin and the head changed those lines (context moved)"
            else:
                move.detail += "; the head is the pin: the series does not apply at its own pin"
        else:
            move.detail += f"; which commits changed it is unknown: {hist.why_unknown}"
        return move
    move.klass = OFFSETS if report.status in rebase.MOVED else UNCHANGED
    move.detail = "; ".join(r.detail for r in report.results if r.detail)
    return move


def bug_lane(pack: Pack, base: str):
    """The unpatched lane on ``base`` that expects the bug (the lane whose verdict decides ``superseded``)."""
    return next((lane for lane in pack.lanes if lane.base == base and not lane.patched
                 and not lane.upstream_tests and lane.expect == "BUG_REPRODUCED"), None)


def judge_lane(move: PackMove, sentinel: str | None, planned: bool) -> None:
    """Fold the bug lane's word at the head into the class: BUG_ABSENT makes an applying series superseded."""
    move.bug_sentinel, move.planned = sentinel, planned
    if move.klass in (LANDED, LANDED_MODIFIED):
        return
    if sentinel == "BUG_ABSENT":  # the series may still apply (or conflict): upstream fixed it another way
        move.detail = (f"{move.detail}; " if move.detail else "") + \
            f"the bug lane {move.bug_lane} printed BUG_ABSENT at the head"
        move.klass = SUPERSEDED
    elif sentinel == "BUG_REPRODUCED" and move.klass in (UNCHANGED, OFFSETS):
        move.applies = move.klass
        move.klass = STILL_NEEDED


def with_head(manifest: pins.Manifest, base_name: str, new: str) -> pins.Manifest:
    """The manifest with ``base_name`` pinned at ``new`` (same ref, same URL)."""
    base = manifest.base(base_name)
    if base.git is None:
        raise ConfigError(f"{manifest.path.name}: base '{base_name}' is a release, not a git base: refresh moves "
                          "git bases (upstream main/dev); a release moves with 'harness rebase --to-version'")
    moved = replace(base, commit=new, git=replace(base.git, commit=new))
    return pins.with_base(manifest, moved)


def move_pin(path: Path, base_name: str, new: str, hist: History) -> None:
    """Pin ``base_name`` of the manifest at ``path`` to ``new`` (its ``git.commit``, the date of that commit, and a
    ``version`` of the form ``name@sha7`` follows); comments and layout stay as they are."""
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    table = doc["bases"][base_name]  # type: ignore[index]
    gitpin = table["git"]  # type: ignore[index]
    old = str(gitpin["commit"])  # type: ignore[index]
    gitpin["commit"] = new  # type: ignore[index]
    if "date" in gitpin:  # type: ignore[operator]
        done = git.call(hist.repo.path, "show", "-s", "--format=%cs", new)
        if done.ok and done.stdout.strip():
            gitpin["date"] = done.stdout.strip()  # type: ignore[index]
    version = str(table.get("version", ""))  # type: ignore[union-attr]
    if version.endswith(f"@{old[:7]}"):
        table["version"] = f"{version[: -len(old[:7])]}{new[:7]}"  # type: ignore[index]
    path.write_text(tomlkit.dumps(doc), encoding="utf-8")


def regenerate(ctx: Context, pack: Pack, checkout: pins.Checkout, scratch: Path) -> tuple[str, ...]:
    """Rewrite the pack's series on this base from the head (its context regenerated), as ``rebase --refresh``."""
    return rebase.try_pack(ctx, pack, checkout, scratch / "tree", refresh=True).refreshed


def branch_name(target: str, base: str, new: str) -> str:
    return f"refresh/{target}-{base}-{new[:12]}"


def commit_proposal(tree: Path, target: str, base: str, hist: History, moves: list[PackMove],
                    stale: list[dict], suites: Sequence[dict] = (), threads: Sequence[dict] = (),
                    stack: Sequence[str] = ()) -> tuple[str, str]:
    """Commit the proposal worktree: the new pin, the regenerated series, the suite selections derived again; the
    message lists each pack's class, the commits that matter, the suites' drift, the threads whose state changed,
    the next stack (``stack``: its lines) and the lanes the move made stale. Returns (branch, commit)."""
    lines = [f"Move {target} {base} to {hist.new[:12]}", "",
             f"Proposed by harness refresh: {target} {base} moves from {hist.old[:12]} to {hist.new[:12]}"
             + (f" ({len(hist.commits)} upstream commit(s))." if hist.known else f" ({hist.why_unknown})."), ""]
    for m in moves:
        lines.append(f"- pack {m.pack.id}: {m.klass}" + (f": {m.detail}" if m.detail else ""))
    drifted = [sel for sel in suites if sel["drift"]]
    if drifted:
        lines += ["", "Suites derived again at the head (suites/<pack>/<base>.toml):"]
        lines += [f"- pack {sel['pack']}: " + "; ".join(sel["drift"]) for sel in drifted]
    if threads:
        lines += ["", "Threads whose state changed:"]
        lines += [f"- pack {t['pack']}: {t['url']} {t['old']} -> {t['new']}" for t in threads]
    if stack:
        lines += ["", *stack]
    gpu = sum(1 for t in stale if t["gpus"])
    lines += ["", f"Lanes made stale: {len(stale)} task(s), {gpu} of them on a GPU; run them before the move "
                  f"lands: harness sweep --target {target} --base {base}"]
    git.run(tree, "add", "-A", "upstream", "patches", *(["suites"] if (tree / "suites").is_dir() else []))
    git.run(tree, "commit", "-q", "--allow-empty", "-m", wrapped(lines), env=proposer_env(tree))
    branch = git.run(tree, "rev-parse", "--abbrev-ref", "HEAD").strip()
    return branch, git.run(tree, "rev-parse", "HEAD").strip()


def wrapped(lines: list[str], width: int = 72) -> str:
    """A commit message with every line at most ``width`` wide: a bullet's continuation indented under its text."""
    out = []
    for line in lines:
        indent = "  " if line.startswith("- ") else ""
        out += textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False,
                             break_on_hyphens=False) or [""]
    return "\n".join(out)


def proposer_env(tree: Path) -> dict[str, str]:
    """The environment of a proposal's commit: the person's own git identity (their user.name and user.email) and
    the time now; the harness's fixed identity only where they have none configured, still dated now."""
    env = git.clean_env()
    name, email = git.user_identity(tree)
    if name and email:
        for who in ("AUTHOR", "COMMITTER"):
            env[f"GIT_{who}_NAME"], env[f"GIT_{who}_EMAIL"] = name, email
    stamp = clock.now().strftime("%Y-%m-%dT%H:%M:%S+0000")
    env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = stamp
    return env


def git_bases(manifest: pins.Manifest) -> list[str]:
    return [b.name for b in manifest.bases.values() if b.git is not None]


def scratch_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"patchlane-refresh-{prefix}-"))


def summary_counts(moves: Iterable[PackMove]) -> dict[str, int]:
    counts = dict.fromkeys(CLASSES, 0)
    for m in moves:
        counts[m.klass] += 1
    return {k: v for k, v in counts.items() if v}


def moved_tree(root: Path, target: str, base_name: str, new: str, hist: History, tree: Path, propose: bool) -> Path:
    """The checkout with the base moved to ``new``: a worktree on a branch of its own when ``propose``, else a
    scratch copy of the files the harness reads (the checkout itself never changes)."""
    if propose:
        if not git.call(root, "rev-parse", "--is-inside-work-tree").ok:
            raise ConfigError(f"{root}: --propose writes a commit, and this checkout is not a git repository")
        branch = branch_name(target, base_name, new)
        done = git.call(root, "worktree", "add", "-q", "-b", branch, str(tree), "HEAD")
        if not done.ok:
            raise ConfigError(f"cannot make branch {branch}: {done.stderr.strip()}",
                              hint=f"delete the earlier proposal: git branch -D {branch}")
    else:
        ignore = shutil.ignore_patterns(".git", ".nox", ".venv", ".ci-venv", ".ci-cache", "dist", "receipts",
                                        "__pycache__", ".slurm-sweep")
        shutil.copytree(root, tree, ignore=ignore, symlinks=True)
        if (root / "receipts").exists():  # read (a sweep plan), never written: runs go to a scratch directory
            (tree / "receipts").symlink_to((root / "receipts").resolve(), target_is_directory=True)
    move_pin(tree / "upstream" / f"{target}.toml", base_name, new, hist)
    return tree


def run_lane_at(ctx: Context, pack: Pack, lane, receipts_dir: Path, options: list[str]) -> tuple[str | None, bool]:
    """Run ``lane`` in a child harness on ``ctx.root`` (a moved tree), receipts into ``receipts_dir``, tracking
    untouched: the sentinel it printed; (None, True) where it needs hardware this host lacks (to be planned)."""
    receipts_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "harness", "run", pack.id, "--lane", lane.name, "--root", str(ctx.root),
           "--cache", str(ctx.store.root), "--receipts-dir", str(receipts_dir), "--no-tracking", "-q", *options]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode == int(Exit.SKIPPED):
        return None, True
    found = [r for r in receipts.find(ctx.root, pack.target, pack.id, receipts_dir=receipts_dir)
             if r.lane == lane.name]
    if not found:
        said = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RefreshError(f"pack {pack.id}: lane {lane.name} left no receipt (exit {proc.returncode}): {said}")
    latest = max(found, key=lambda r: r.started)
    return (latest.sentinels[0] if latest.sentinels else None), False


@dataclass(frozen=True)
class Retirement:
    """A mitigation's retirement conditions, each judged: True holds, False does not, None cannot be told."""

    pack: str
    what: str
    conditions: tuple[tuple[str, bool | None, str], ...]  # (the condition, its value, what showed it)

    @property
    def holds(self) -> bool | None:
        values = [v for _, v, _ in self.conditions]
        if not values or any(v is False for v in values):
            return False if values else None
        return None if any(v is None for v in values) else True

    def as_json(self) -> dict:
        return {"pack": self.pack, "what": self.what, "holds": self.holds,
                "conditions": [{"condition": c, "holds": v, "why": why} for c, v, why in self.conditions]}


def required_version(tree: Path, package: str) -> str | None:
    """The requirement of ``package`` in a source tree's ``pyproject.toml`` ([project] dependencies), as written;
    None when it names none (or has no such file)."""
    import tomllib

    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        doc = tomllib.loads((tree / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for text in doc.get("project", {}).get("dependencies", []):
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == canonicalize_name(package):
            return str(req)
    return None


def _bound_holds(requirement: str, bound: str) -> tuple[bool | None, str]:
    """Whether what ``requirement`` installs meets ``bound``: an exact pin is judged by its version, a range by
    its lowest admitted version (``>=``); anything else cannot be told."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    req, want = Requirement(requirement), SpecifierSet(bound)
    exact = [s.version for s in req.specifier if s.operator in ("==", "===")]
    if exact:
        return exact[0] in want, f"pins {requirement}"
    lowest = [s.version for s in req.specifier if s.operator == ">="]
    if lowest:
        return lowest[0] in want, f"requires {requirement} (judged by its lowest version)"
    return None, f"requires {requirement}: no pin or lower bound to judge"


def evaluate_retirements(ctx: Context, trees: dict[tuple[str, str], Path]) -> list[Retirement]:
    """Every active mitigation's ``[[...mitigation.retire]]`` conditions, judged now: a requirement against the
    tree of its target's base (``trees``: the new heads a refresh moved to; others are materialized at their pin),
    a lane against its latest receipt, a thread against the state tracking.toml records."""
    out = []
    for pack in ctx.tracking.packs.values():
        m = pack.mitigation or {}
        if not m.get("retire") or m.get("status", "active") != "active":
            continue
        judged = []
        for c in m["retire"]:
            if c["kind"] == "requirement":
                key = (c["target"], c["base"])
                tree = trees.get(key) or ctx.materialize(ctx.manifest(c["target"]), c["base"]).path
                text = f"{c['target']} {c['base']} requires {c['package']}{c['version']}"
                found = required_version(tree, c["package"])
                judged.append((text, *(_bound_holds(found, c["version"]) if found else
                                       (None, f"its pyproject.toml names no {c['package']}"))))
            elif c["kind"] == "lane":
                other = ctx.tracking.pack(c["pack"])
                rec = receipts.latest_by_lane(ctx.root, other.target, other.id).get(c["lane"])
                text = f"lane {other.id}:{c['lane']} {c['verdict']}"
                judged.append((text, None if rec is None else rec.verdict == c["verdict"],
                               f"latest receipt {rec.verdict} ({receipts.display_path(rec.dir, ctx.root)})"
                               if rec else "no receipt"))
            else:
                states = [th.state for p in ctx.tracking.packs.values() for th in p.threads
                          if th.url.rstrip("/").endswith(c["ref"].replace("#", "/pull/"))
                          or th.url.rstrip("/").endswith(c["ref"].replace("#", "/issues/"))]
                states += [d.state for p in ctx.tracking.packs.values() for d in p.related
                           if d.ref == c["ref"] and d.state]
                text = f"{c['ref']} {c['state']}"
                judged.append((text, (c["state"] in states) if states else None,
                               f"tracking.toml records {', '.join(sorted(set(states)))}" if states
                               else "tracking.toml records no state for it"))
        out.append(Retirement(pack.id, str(m.get("what", "")), tuple(judged)))
    return out
