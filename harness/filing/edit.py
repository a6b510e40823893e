"""Edit a pack's series as commits, then regenerate its patch files from them.

``start`` clones the pristine base into an edit checkout and applies, with
``git am``, the series of every same-target dependency and then the pack's own,
one commit per patch (the ``gbp pq import`` / ``devtool modify`` model). Which
commits belong to which pack is recorded in ``.git/patchlane-edit.json``.

``regenerate`` turns the pack's commits (everything after its dependencies'
last commit) back into the series with ``series_write.format_series`` (deterministic:
an unchanged commit gives a byte-identical file). A checkout made on the pack's
own base writes ``patches/<target>/<pack>/``; one made on another base (``edit
--base main``) writes the ported series ``patches/<target>/<pack>/<base>/``.

New files are written to a scratch directory beside the series, checked (they load,
and apply on the base), and swapped in with renames; the old series is kept as a
backup until the checkout's state records the new one. Signals wait during that
step; a regen cut in it by SIGKILL is finished by the next ``regen``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.base import regular, ui
from harness.base.hashing import sha256_file, sha256_text
from harness.errors import ConfigError, EditError, SeriesError
from harness.lane import series, series_write
from harness.lane.context import Context
from harness.lane.tracking import Pack
from harness.upstream import git

STATE_FILE = "patchlane-edit.json"
_PACK_TRAILER = re.compile(r"^Pack:\s*(\S+)\s*$", re.M)


@dataclass
class PackRange:
    """Commits ``start..end`` of an edit checkout are the series of ``pack``."""

    pack: str
    start: str
    end: str
    patches: dict[str, str] = field(default_factory=dict)  # file name -> sha256 when the checkout was made


@dataclass
class EditState:
    target: str
    pack: str
    base: str
    pristine: str
    ranges: list[PackRange]

    def own(self) -> PackRange:
        return next(r for r in self.ranges if r.pack == self.pack)

    def write(self, checkout: Path) -> None:
        path = git.repo(checkout).git_dir / STATE_FILE
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def read(cls, checkout: Path) -> EditState:
        try:
            path = git.repo(checkout).git_dir / STATE_FILE
            raw = json.loads(path.read_text())
        except git.GitNotFound:
            raise
        except (OSError, ValueError, git.GitError) as exc:
            raise EditError(f"{checkout}: not an edit checkout made by 'harness edit' ({exc})") from None
        raw["ranges"] = [PackRange(**r) for r in raw["ranges"]]
        return cls(**raw)


def checkout_key(root: Path) -> str:
    """A directory name for one checkout of this repository: its name and a digest of its absolute path, so two
    clones sharing a cache never share an edit checkout (``regen`` from the other clone saw a series it did not
    write)."""
    resolved = Path(root).resolve()
    return f"{resolved.name}-{sha256_text(str(resolved))[:12]}"


def default_dir(ctx: Context, pack: Pack) -> Path:
    """``<cache>/edit/<checkout key>/<target>/<pack>``: this checkout's edit of ``pack``."""
    return ctx.store.area("edit") / checkout_key(ctx.root) / pack.target / pack.id


def start(ctx: Context, pack: Pack, base_name: str | None, dest: Path, force: bool = False) -> EditState:
    """Make ``dest`` an edit checkout of ``pack`` (dependencies' commits first, then the pack's)."""
    manifest = ctx.manifest(pack.target)
    base_name = manifest.base(base_name or pack.base).name
    checkout = ctx.materialize(manifest, base_name)
    if dest.exists() and any(dest.iterdir()):
        if not force:
            raise EditError(f"{dest} already exists and is not empty",
                            hint="finish it with 'harness regen', remove it, or pass --force to replace it")
        if (dest / ".git").is_dir():  # --force replaces a checkout, never work that is not in patches/ yet
            _refuse_dirty(git.repo(dest), dest)
            _refuse_unregenerated(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".edit-{pack.id}-", dir=dest.parent))
    try:
        repo = git.clone(checkout.path, scratch / "tree", branch=f"pack-{pack.id}")
        ranges = []
        for p in series.dependency_chain(ctx.tracking, pack, base_name):
            begin = repo.head()
            patches = series.load_series(ctx.root, p.target, p.id, base_name)
            for patch in patches:
                series.apply_patch(repo, patch, checkout)
            ranges.append(PackRange(p.id, begin, repo.head(), {x.name: x.sha256 for x in patches}))
        state = EditState(pack.target, pack.id, checkout.base.name, checkout.commit, ranges)
        state.write(scratch / "tree")
        if dest.exists():
            shutil.rmtree(dest)  # empty, or a checkout whose work is all in patches/ (checked above)
        os.replace(scratch / "tree", dest)  # a series that does not apply leaves no half-made checkout
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return state


# --------------------------------------------------------------------------- regenerate

Regenerated = series_write.SeriesDiff


def _refuse_unregenerated(checkout: Path) -> None:
    try:
        state = EditState.read(checkout)
    except EditError:
        return
    head = git.repo(checkout).head()
    if head != state.own().end:
        raise EditError(f"{checkout}: HEAD {head[:12]} has commits not regenerated into patches/ yet",
                        hint=f"run 'harness regen {state.pack} --dir {checkout}' first, or remove the directory")


def _refuse_dirty(repo: git.Repo, where: Path) -> None:
    dirty = repo.dirty_paths()
    if dirty:
        shown = ", ".join(dirty[:8]) + (f" (+{len(dirty) - 8} more)" if len(dirty) > 8 else "")
        raise EditError(f"{where}: uncommitted changes in {shown}",
                        hint="commit them (git commit --amend into the patch, or a new commit) or stash them first")
    gd = repo.git_dir
    for marker, what in (("rebase-apply", "git am/rebase"), ("rebase-merge", "git rebase"),
                         ("MERGE_HEAD", "merge"), ("CHERRY_PICK_HEAD", "cherry-pick")):
        if (gd / marker).exists():
            raise EditError(f"{where}: a {what} is in progress; finish or abort it first")


def _check_commits(pack: Pack, repo: git.Repo, start: str, end: str) -> None:
    """Every commit of the pack changes something and carries its Upstream-Status (and no other pack's trailer)."""
    for sha in repo.run("rev-list", "--reverse", f"{start}..{end}").split():
        commit = repo.commit(sha)
        where = f"pack {pack.id}: commit {sha[:12]} ({commit.summary!r})"
        if commit.parents and commit.tree == repo.tree(commit.parents[0]):
            raise EditError(f"{where} is empty", hint="drop it (git rebase -i) and run regen again")
        if not re.search(r"^Upstream-Status:", commit.message, re.M):
            raise EditError(f"{where} has no 'Upstream-Status:' line",
                            hint="git commit --amend (or rebase -i with 'reword') and add e.g. "
                                 "'Upstream-Status: Pending' above the trailers")
        m = _PACK_TRAILER.search(commit.message)
        if m and m.group(1) != pack.id:
            raise EditError(f"{where} says 'Pack: {m.group(1)}'; a commit of pack {m.group(1)} belongs in that "
                            "pack's edit checkout")


def regenerate(ctx: Context, pack: Pack, checkout: Path, dry_run: bool = False) -> Regenerated:
    """Rewrite the pack's series from the checkout's commits (see the module docstring).

    The new series is checked before it replaces the old one (it loads, and applies with its dependencies'
    on the base); from the swap until the checkout's state records it, Ctrl-C, SIGTERM and SIGHUP wait
    (``_signals_held``), so an interrupt never leaves a half-finished regen. One that was cut there all the
    same (SIGKILL, a power loss) is finished by the next ``regen``: the series on disk is then exactly what
    the checkout regenerates, so only the state and the backup are left to settle.
    """
    state = EditState.read(checkout)
    if state.pack != pack.id or state.target != pack.target:
        raise EditError(f"{checkout}: edit checkout of pack {state.pack} ({state.target}), not of pack {pack.id}")
    repo = git.repo(checkout)
    _refuse_dirty(repo, checkout)
    _refuse_off_branch(repo, checkout, pack)
    own = state.own()
    if not repo.call("merge-base", "--is-ancestor", own.start, "HEAD").ok:
        raise EditError(f"{checkout}: the dependencies' commits (up to {own.start[:12]}) were rewritten; "
                        f"edit a dependency with 'harness edit <dep>' instead") from None
    dest = series.write_dir(ctx.root, pack, state.base, ctx.manifest(pack.target).default_base)
    _recover(pack, dest, dry_run)
    source = series.series_dir(ctx.root, pack.target, pack.id, state.base)  # what the checkout was made from
    current = {}
    for p in sorted(source.glob("*.patch")) if source.is_dir() else ():
        what = regular.kind(p)  # a FIFO named like a patch would block the read forever
        if what is not None:
            raise EditError(f"{p}: {what}, not a patch file; regen reads the series it replaces",
                            hint="remove it (a series holds regular NNNN-slug.patch files)")
        current[p.name] = sha256_file(p)
    dest.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".regen-{pack.id}-{os.getpid()}-", dir=dest.parent))
    leftover: Path | None = scratch  # removed on the way out unless it became the series
    try:
        _check_commits(pack, repo, own.start, "HEAD")
        try:
            files = series_write.format_series(repo, own.start, "HEAD", scratch)
        except SeriesError as exc:
            raise EditError(str(exc)) from None
        if not files:
            raise EditError(f"{checkout}: pack {pack.id} has no commit after its dependencies' (up to "
                            f"{own.start[:12]}); regenerating would empty {dest}",
                            hint="a pack's series is never emptied by regen; remove the directory by hand if "
                                 "that is really meant")
        for f in files:
            series.parse_patch(pack.id, f)  # the Upstream-Status value itself, as every loader checks it
        series_write.keep_unchanged(source, series_write.keep_names(source, files))
        result = series_write.compare(source, scratch)
        expected = {p.name: sha256_file(p) for p in sorted(scratch.glob("*.patch"))}
        if current != own.patches:
            if not result.changed and not dry_run:  # a regen cut after its swap: only its bookkeeping is left
                _settle(state, own, repo, checkout, expected, dest)
                ui.info(f"finished an interrupted regen of pack {pack.id}: {source} already held the "
                        f"regenerated series; the checkout now records it")
                return result
            backups = _backups(dest)
            raise EditError(f"{source}: changed since 'harness edit' made {checkout}; regenerating would overwrite "
                            "it", hint=(f"an interrupted regen left the previous series in {backups[0]}: move it "
                                        f"back over {dest} (or remove it to keep the current one), then run "
                                        "'harness regen' again" if backups else
                                        "commit or move those changes, then run 'harness edit --force' again"))
        if not result.changed or dry_run:
            return result
        _check_applies(ctx, pack, state.base, scratch)
        with _signals_held():  # Ctrl-C, SIGTERM, SIGHUP act once the new series and the state agree
            backup = series_write.replace_series(dest, scratch)
            leftover = None  # it is the series now
            _verify_or_restore(pack, dest, expected, backup)
            _settle(state, own, repo, checkout, expected, dest)
        return result
    finally:
        if leftover is not None:
            shutil.rmtree(leftover, ignore_errors=True)


def _recover(pack: Pack, dest: Path, dry_run: bool) -> None:
    """What a regen SIGKILLed mid-swap left: its scratch directories go, and a series left only as its backup
    (killed between the two renames) is put back, so this regen starts from the series the checkout records."""
    if not dry_run:
        recover_killed_regen(pack.id, dest)


def recover_killed_regen(pid: str, dest: Path) -> None:
    """``_recover`` for a pack id and its series directory: ``harness regen`` calls it before it loads the packs,
    since a pack's own file (pack.toml) sits in the series directory a killed regen left only as a backup."""
    for scratch in series_write.sweep_regen_scratch(dest.parent, pid):
        ui.info(f"removed {scratch}, left by a regen of pack {pid} that was killed")
    try:
        restored = series_write.recover_swap(dest)
    except ConfigError as exc:
        raise EditError(str(exc)) from None
    if restored is not None:
        ui.info(f"put back {dest} from {restored.name}: a regen of pack {pid} was killed between its two renames")


def _settle(state: EditState, own: PackRange, repo: git.Repo, checkout: Path, expected: dict[str, str],
            dest: Path) -> None:
    """Record the new series in the checkout's state, then remove the previous series' backup(s)."""
    own.end = repo.head()
    own.patches = expected
    state.write(checkout)
    for backup in _backups(dest):  # only now: the new series is verified and the checkout knows it
        shutil.rmtree(backup)


def _backups(dest: Path) -> list[Path]:
    """The previous series kept by ``series_write.replace_series`` beside ``dest`` (``.<name>.bak-<pid>``)."""
    return sorted(p for p in dest.parent.glob(f".{dest.name}.bak-*") if p.is_dir())


@contextlib.contextmanager
def _signals_held():
    """SIGINT, SIGTERM and SIGHUP are held back while the body runs and delivered when it is over.

    The swap of a series and the state that records it are then one step as far as an interrupt is
    concerned. Outside the main thread (where Python runs no signal handler) nothing is changed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _refuse_off_branch(repo: git.Repo, checkout: Path, pack: Pack) -> None:
    """Regen reads the pack's commits from its branch: a detached HEAD or another branch is refused."""
    want = f"pack-{pack.id}"
    branch = repo.branch()
    if branch is None:
        raise EditError(f"{checkout}: HEAD is detached at {repo.head()[:12]}, not on branch {want}",
                        hint=f"git checkout {want} (and bring the commits you want there) first")
    if branch != want:
        raise EditError(f"{checkout}: on branch {branch}, not on the pack's branch {want}",
                        hint=f"git checkout {want} first")


def _verify_or_restore(pack: Pack, dest: Path, expected: dict[str, str], backup: Path | None) -> None:
    """Check that ``dest`` now holds exactly the regenerated files and loads as a series; else put the backup back."""
    try:
        found = {p.name: sha256_file(p) for p in sorted(dest.glob("*.patch"))}
        if found != expected:
            raise EditError(f"{dest}: after the swap it holds {sorted(found)} (sha256s differ or files missing), "
                            f"not the regenerated {sorted(expected)}")
        for p in sorted(dest.glob("*.patch")):
            series.parse_patch(pack.id, p)
    except (EditError, ConfigError, OSError) as exc:
        if backup is not None:
            shutil.rmtree(dest, ignore_errors=True)
            os.replace(backup, dest)
            raise EditError(f"{exc}; the previous series was put back") from None
        raise


def _check_applies(ctx: Context, pack: Pack, base: str, new: Path) -> None:
    """The regenerated series in ``new``, after its dependencies', applies with ``git am`` on a throwaway
    clone of the base (checked before it replaces the series: one that does not apply is never kept)."""
    checkout = ctx.materialize(ctx.manifest(pack.target), base)
    patches = [patch for p in series.dependency_chain(ctx.tracking, pack, base) if p.id != pack.id
               for patch in series.load_series(ctx.root, p.target, p.id, base)]
    patches += [series.parse_patch(pack.id, f) for f in sorted(new.glob("*.patch"))]
    with tempfile.TemporaryDirectory(prefix=f"regen-check-{pack.id}-", dir=ctx.store.area("tmp")) as tmp:
        try:
            series.check_applies(checkout, patches, Path(tmp) / "tree")
        except SeriesError as exc:
            raise EditError(f"the regenerated series does not apply, so {pack.id}'s series was left as it was: "
                            f"{exc}") from None


def print_result(result: series_write.SeriesDiff, dest: Path) -> None:
    if not result.changed:
        ui.data(f"{dest}: unchanged (regenerated series is byte-identical)")
        return
    ui.out.print(result.diff.rstrip("\n"), markup=False, highlight=False)
    for what, names in (("modified", result.modified), ("added", result.added), ("removed", result.removed)):
        if names:
            ui.data(f"{what}: {', '.join(names)}")
