"""The series as it is filed: ``git am``-able patches for an upstream base, with nothing of ours in them.

``export`` takes a pack's series for a base (its ported series where it has one), applies it to a
clone of that base, and writes it back with the deterministic format of ``series_write.format_series``
minus this repository's own trailers (``Upstream-Status:``, ``Pack:``). It then proves the result:
the written files must apply with plain ``git am`` to a fresh clone of the base and give the same
tree. When the pack's own series does not apply alone, the same-target dependencies that are not
absorbed at that base go underneath and the export says it is stacked on them.

The export files as a person: every commit's author (and, where the target's policy asks for the
DCO, a ``Signed-off-by:`` that goes last among the trailers) is the filer's identity, from
``--identity "Name <email>"`` or else their own git config (``user.name`` / ``user.email``). The
stored series keeps its fixed identity; only the exported files carry the person's. The target's own
formatters and linters (``linters``) then run on the lines the series adds or changes, or on whole changed files
where the upstream's CI runs them so; a file that fails at the base already needs the pack's recorded decision.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from harness.errors import CheckError, IdentityError, SeriesError, UsageError
from harness.lane import series, series_write
from harness.lane.context import Context
from harness.lane.tracking import Pack
from harness.lane.tracking.model import LintAtBase
from harness.upstream import git, linters

# Lines of a commit message that are this repository's bookkeeping, not part of the filed change.
_OURS = re.compile(r"^(Upstream-Status|Pack):.*$")
# The identities the stored series and the tool's own commits carry: nobody to file as.
PLACEHOLDERS = frozenset({"patch-lane@users.noreply.github.com", git.IDENTITY["GIT_AUTHOR_EMAIL"]})
_EMAIL = re.compile(r"^[^@\s<>]+@[^@\s<>]+\.[^@\s<>.]+$")
_TRAILER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*: ")
# C0 controls (LF, CR, TAB, NUL, ...) and DEL: a line break in a name forges a trailer of its own.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Beyond C0: C1 controls (U+0085 NEL ...), line and paragraph separators, format characters (bidi overrides and
# isolates, marks, BOM), which other tools split or reorder a line on. The two joiners some scripts' names need stay.
_UNICODE_KINDS = {"Cc": "a control character", "Zl": "a line separator", "Zp": "a paragraph separator",
                  "Cf": "a format or bidi control character", "Cs": "a lone surrogate"}
_JOINERS = frozenset("\u200c\u200d")
# Written into every export directory: only a directory holding it (or an empty one) is replaced by the next export.
MARKER = ".harness-export"


@dataclass(frozen=True)
class Identity:
    name: str
    email: str
    source: str  # where it came from: "--identity" or "git config user.name/user.email"

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


def parse_identity(text: str, source: str = "--identity") -> Identity:
    """``Name <email>`` as a person's identity; a placeholder or a malformed one is refused."""
    _no_control(text.strip(" "), "identity", source)
    m = re.fullmatch(r"\s*([^<>]*?)\s*<([^<>]*)>\s*", text)
    if not m:
        raise IdentityError(f"{source}: {text!r} is not 'Name <email>'")
    return _checked(m.group(1), m.group(2), source)


def _no_control(text: str, what: str, source: str) -> None:
    """Refuse ``text`` holding a control character (named escaped, so the refusal stays one line)."""
    found = _CONTROL.search(text)
    bad, kind = (found.group() if found else None), "a control character"
    if bad is None:  # what other tools split lines on (U+0085, U+2028, U+2029) or reorder them by (bidi controls)
        bad = next((c for c in text if unicodedata.category(c) in _UNICODE_KINDS and c not in _JOINERS), None)
        kind = _UNICODE_KINDS[unicodedata.category(bad)] if bad else kind
    if bad is not None:
        raise IdentityError(f"{source}: the {what} {text!r} holds {kind} ({ascii(bad)}); "
                            "an identity is one plain line 'Name <email>'")


def _checked(name: str, email: str, source: str) -> Identity:
    _no_control(name, "name", source)
    _no_control(email, "email", source)
    if not name.strip():
        raise IdentityError(f"{source}: no name (it must read 'Name <email>')")
    if email.lower() in PLACEHOLDERS or name.strip().lower() in ("patch lane", "patch-lane"):
        raise IdentityError(f"{source}: {name} <{email}> is this repository's placeholder, not a person; "
                            "file under your own name")
    if not _EMAIL.match(email):
        raise IdentityError(f"{source}: {email!r} does not look like an email address")
    return Identity(name.strip(), email, source)


def find_identity(root: Path, explicit: str | None, *, target: str, signoff: bool) -> Identity:
    """The filer: ``explicit`` ("Name <email>"), else the person's git config; one line when neither is set."""
    if explicit is not None:
        return parse_identity(explicit)
    name, email = git.user_identity(root)
    if not name or not email:
        why = f"{target} requires a Signed-off-by (DCO) from the filer" if signoff else "the export is authored by you"
        raise IdentityError(f"no identity to export as ({why}): pass --identity \"Your Name <you@example.com>\" "
                            "or set git config --global user.name and user.email")
    return _checked(name, email, "git config user.name/user.email")


def signed_off(message: str, identity: Identity) -> str:
    """``message`` with ``Signed-off-by: identity`` as its last trailer (an earlier identical one is dropped)."""
    sob = f"Signed-off-by: {identity}"
    lines = [ln for ln in message.rstrip("\n").split("\n") if ln != sob]
    while lines and not lines[-1].strip():
        lines.pop()
    block = []
    for ln in reversed(lines):
        if not ln.strip():
            break
        block.append(ln)
    has_trailers = bool(block) and len(block) < len(lines) and all(_TRAILER.match(ln) for ln in block)
    return "\n".join(lines + ([] if has_trailers else [""]) + [sob]) + "\n"


@dataclass(frozen=True)
class Export:
    pack: str
    target: str
    base: str
    commit: str  # the base's commit the files apply to
    files: tuple[Path, ...]
    stacked_on: tuple[str, ...]  # packs whose patches go first (their files are part of the export)
    tree: str  # the tree id after applying everything
    identity: Identity
    signed_off: bool  # each commit ends with the filer's Signed-off-by (the target asks for it)
    checks: linters.Report
    lint_at_base: LintAtBase | None = None  # what the series does about files the CI's checks fail at the base


def at_base_decision(pack: str, where: str, report: linters.Report, decided: LintAtBase | None,
                     declared_in: str = "the pack's pack.toml") -> None:
    """Refuse an export whose changed files fail the upstream's whole-file checks at the base already unless the
    pack records what the series does about them (``pack.toml's [[lint_at_base]]``), and a record that no longer
    matches: other files, a formatting commit that leaves findings, or files that no longer fail."""
    fails = list(report.base_fails)
    hint = (f"record a [[lint_at_base]] table in {declared_in}: base, files = {fails}, decision = \"leave\" or "
            "\"format-commit\" (as the upstream's contributing rules ask) and reason (docs/upstream-policy.md)")
    if decided is None:
        if fails:
            raise CheckError(f"pack {pack} on {where}: the upstream's CI checks fail at the base already on "
                             f"{', '.join(fails)} ({len(report.at_base)} finding(s) the CI reports that are not "
                             "the series'); the pack records no decision about them: "
                             + "; ".join(str(f) for f in report.at_base[:3]), hint=hint)
        return
    if tuple(sorted(decided.files)) != tuple(fails):
        raise CheckError(f"pack {pack} on {where}: [[lint_at_base]] records {', '.join(decided.files)} as failing "
                         f"at the base; the checks find {', '.join(fails) or 'none'}", hint=hint)
    if decided.decision == "format-commit" and report.at_base:
        raise CheckError(f"pack {pack} on {where}: [[lint_at_base]] says the series formats "
                         f"{', '.join(decided.files)} in a commit of its own, but the CI would still report "
                         f"{len(report.at_base)} finding(s) there: " + "; ".join(str(f) for f in report.at_base[:3]))

def export(ctx: Context, pack: Pack, base_name: str | None, out: Path, *, identity: str | None = None,
           report_only: bool = False) -> Export:
    """Write the filed series to ``out`` (replaced whole) and return what was written.

    Raises ``IdentityError`` before any work when there is no identity to file as, ``SeriesError``
    when the series does not apply, and ``CheckError`` (one line per finding, nothing written) when
    the upstream's checks find something, unless ``report_only``.
    """
    manifest = ctx.manifest(pack.target)
    policy = manifest.policy
    _replaceable(out)
    who = find_identity(ctx.root, identity, target=pack.target, signoff=policy.signoff)
    base = manifest.base(base_name or pack.filing_base).name
    own = series.load_series(ctx.root, pack.target, pack.id, base)
    if not own:
        raise SeriesError(f"pack {pack.id} has no series for {pack.target} {base} (nothing to export)")
    checkout = ctx.materialize(manifest, base)
    deps = [p for p in series.dependency_chain(ctx.tracking, pack, base) if p.id != pack.id]
    work = Path(tempfile.mkdtemp(prefix=f"patchlane-export-{pack.id}-"))
    try:
        stacked: list[str] = []
        try:
            repo = _applied(checkout, own, work / "alone")
        except SeriesError:
            if not deps:
                raise
            stacked = [p.id for p in deps]
            dep_patches = [x for p in deps for x in series.load_series(ctx.root, p.target, p.id, base)]
            repo = _applied(checkout, dep_patches + own, work / "stacked")
        _file_as(repo, checkout.commit, who, policy.signoff)
        fmt = work / "formatted"
        files = series_write.format_series(repo, checkout.commit, "HEAD", fmt)
        for f in files:
            f.write_bytes(strip_ours(f.read_bytes()))
        tree = repo.tree()
        _prove(checkout.path, files, tree, work / "proof")
        report = linters.check_tree(manifest, repo, checkout.commit, ctx.store, base_name=base)
        if report.findings and not report_only:
            raise CheckError(f"pack {pack.id} on {pack.target} {base}: {len(report.findings)} finding(s) of the "
                             "upstream's own checks that the series introduces:\n"
                             + "\n".join(str(f) for f in report.findings))
        decided = pack.lint_decision(base)
        if not report_only:
            at_base_decision(pack.id, f"{pack.target} {base}", report, decided, pack.declared_in)
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
        for f in files:
            shutil.copyfile(f, staging / f.name)
        (staging / MARKER).write_text("written by harness export; the next export replaces this directory\n")
        os.chmod(staging, 0o755)
        if _replaceable(out):
            shutil.rmtree(out)
        os.replace(staging, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Export(pack.id, pack.target, base, checkout.commit, tuple(out / f.name for f in files),
                  tuple(stacked), tree, who, policy.signoff, report, decided)


def _replaceable(out: Path) -> bool:
    """Whether ``out`` exists and may be replaced: an empty directory or one an earlier export wrote (it holds
    ``MARKER``). Anything else there (a file, a link, a directory of someone's) is refused, never deleted."""
    if not os.path.lexists(out):
        return False
    if out.is_dir() and not out.is_symlink() and ((out / MARKER).is_file() or not any(out.iterdir())):
        return True
    raise UsageError(f"-o {out}: already exists and is not a directory an earlier export wrote (no {MARKER} in "
                     "it); nothing was written or removed", hint="name a new directory, or remove this one yourself")


def _file_as(repo: git.Repo, start: str, who: Identity, signoff: bool) -> None:
    """Rewrite ``start..HEAD`` as authored (and signed off, if asked) by ``who``; trees and dates are kept."""
    parent = start
    for sha in repo.run("rev-list", "--reverse", f"{start}..HEAD").split():
        commit = repo.commit(sha)
        message = strip_message(commit.message)
        if signoff:
            message = signed_off(message, who)
        parent = repo.commit_as(commit.tree, parent, message, who.name, who.email, repo.author_date(sha))
    repo.run("reset", "-q", "--hard", parent)


def _applied(checkout, patches: list[series.Patch], dest: Path) -> git.Repo:
    repo = git.clone(checkout.path, dest, branch="export")
    for patch in patches:
        series.apply_patch(repo, patch, checkout)
    return repo


def strip_ours(data: bytes) -> bytes:
    """The patch without our trailers in its message (the diff after ``---`` is left as it is)."""
    head, sep, rest = data.partition(b"\n---\n")
    if not sep:
        return data
    return strip_message(head.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape") + sep[1:] + rest


def strip_message(message: str) -> str:
    """A commit message (or a patch's head) without our trailers, ending in one newline."""
    lines = [ln for ln in message.split("\n") if not _OURS.match(ln)]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).rstrip("\n") + "\n"


def _prove(base: Path, files: list[Path], tree: str, dest: Path) -> None:
    """Plain ``git am`` of the exported files on a fresh clone of the base must give ``tree``."""
    repo = git.clone(base, dest, branch="proof")
    done = repo.call("am", "--quiet", *[str(f) for f in files])
    if not done.ok:
        said = (done.stderr.strip() or done.stdout.strip() or f"exit {done.status}").splitlines()[-1]
        raise SeriesError(f"the exported series does not apply with plain git am: {said}")
    got = repo.tree()
    if got != tree:
        raise SeriesError(f"the exported series gives tree {got[:12]} with plain git am, not {tree[:12]}")
