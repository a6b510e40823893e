"""A pack as typed data: its kind, state, lanes, evidence rows, threads and related decisions, and
the vocabularies tracking.toml's values are checked against."""

from __future__ import annotations

import datetime
import importlib.util
import re
import textwrap
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from harness.base import clock
from harness.errors import ConfigError
from harness.lane import suite, upstream_tests
from harness.lane.tracking import layout
from harness.lane.tracking.domain import Domain

KINDS = ("pr", "issue", "comment", "regression-guard", "bug-report", "contract")
STATES = ("planned", "held", "ready", "filed", "absorbed", "retired", "blocked")
THREAD_STATES = ("open", "draft", "merged", "closed", "unknown")
RETIRE_KINDS = ("requirement", "lane", "thread")  # pack.toml's [[mitigation.retire]]: what a condition reads
REQUIRES = ("cuda", "cpu")
MITIGATION_STATUS = ("active", "retired")
# What a pack's change is; `harness waves` files crash fixes first and refactors late.
CLASSES = ("crash-fix", "refactor", "feature", "precision", "perf")
# Kinds that carry no patch of ours: their lanes observe upstream builds only, so a patched lane (or a lane
# expecting a fix sentinel) would claim to validate a fix that does not exist.
UNPATCHED_KINDS = ("bug-report", "regression-guard")
# Sentinels that judge our patched build; only a patched lane may expect them.
FIX_SENTINELS = ("FIX_VALIDATED", "FIX_FAILED")
PACK_ID = re.compile(r"^[0-9]{2}$")
DEFAULT_TIMEOUT = 900
SCHEMA = 1  # tracking.toml's top-level `schema`: the layout this module reads
# tracking.toml's generated table: one line per pack of its lanes' latest verdicts, derived from receipts/ (never
# edited by hand; `harness receipts sync` writes it again, e.g. after a merge)
VERDICTS = "verdicts"
VERDICTS_NOTE = ("Generated from receipts/ by `harness run` and `harness receipts sync|import` (each lane's latest "
                 "receipt, the rule every command uses): do not edit, do not merge by hand; after a merge run "
                 "`harness receipts sync`.")
VERDICTS_NOTE_LINES = tuple(f"# {part}" for part in textwrap.wrap(VERDICTS_NOTE, 116))  # as the file shows it
# The kit that runs a pack's minimal reproducer as a lane (``minimal = true``): it prints the stamp, runs the
# script unchanged and maps its exit status (1: the bug shows, 0: it does not) to the sentinel.
MINIMAL_RUNNER = "repros/kit/_minimal.py"  # not repros/_*.py: those are pinned by every receipt
# The kit that sweeps a pack's declared domain (``domain = true``): one child process per point of
# ``pack.toml's [domain]``, each running the domain's ``point`` script (docs/domain.md).
DOMAIN_RUNNER = "repros/kit/_domain.py"
# What the person filing decided about an upstream PR, issue or commit that overlaps the pack (docs/related.md):
# upstream's work replaces ours (the pack is not filed), ours builds on it, our body goes there as a comment,
# the two are unrelated, or it repeats something of ours.
RELATIONS = ("supersedes-us", "we-extend", "comment-there", "independent", "duplicate-of-ours")
# What a related ref is (key 'kind'; a commit ref is a commit) and where it stands (key 'state'): a filing body
# names both, with the decision's one-line reason, so a related thread is never described by a fixed phrase.
# Whether it is in another repository follows from its ref.
RELATED_KINDS = ("pr", "issue", "commit")
RELATED_STATES = ("open", "draft", "merged", "closed")
# How close the candidate came when it was decided (key 'overlap', harness related's ranking): an 'independent'
# thread that shares only a def or a file with the change is kept out of the filing body's related section.
RELATED_OVERLAPS = ("conflict", "same hunk", "same function", "same file", "mention")
# 'owner/repo#N' (a pull request or issue) or 'owner/repo@<full sha>' (a commit)
RELATED_REF = re.compile(r"^(?P<slug>[\w.-]+/[\w.-]+)(?:#(?P<num>[1-9][0-9]*)|@(?P<sha>[0-9a-f]{40}))$")
# What `harness threads refresh` found of ours on a thread: our comment on it, or we opened it.
OURS = ("comment", "author")


@cache
def sentinels(root: Path) -> dict[str, str]:
    """The sentinel vocabulary, read from the reproducers' own contract module, and the upstream-test runner's."""
    spec = importlib.util.spec_from_file_location("_lane", root / "repros" / "_lane.py")
    if spec is None or spec.loader is None:
        raise ConfigError(f"{root / 'repros' / '_lane.py'}: missing")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return dict(mod.SENTINELS) | upstream_tests.SENTINELS


@dataclass(frozen=True)
class Lane:
    name: str
    base: str
    patched: bool
    expect: str
    args: tuple[str, ...] = ()
    timeout: int = DEFAULT_TIMEOUT
    requires: str | None = None  # overrides the pack's ``requires`` for this lane
    with_baseline: bool = False  # the reproducer also gets the unpatched build (HARNESS_BASELINE_SITE)
    nproc: int = 1  # >1: launched with torch.distributed.run, one process per rank (per GPU on cuda lanes)
    extra_builds: tuple[tuple[str, str], ...] = ()  # (target, base) baseline builds also put on PYTHONPATH
    minimal: bool = False  # runs the pack's minimal_repro through MINIMAL_RUNNER instead of its reproducer
    # an upstream-test lane (docs/upstream-tests.md): pytest node ids of the upstream tree run against the build,
    # the ids of those that must fail, and pip pins the tests need besides the base's runtime and pytest
    upstream_tests: tuple[str, ...] = ()
    expect_failed: tuple[str, ...] = ()
    test_requires: tuple[str, ...] = ()
    # `harness sweep` (docs/sweep.md): True, the lane's GPU(s) are its own while it runs (a time or memory figure);
    # None, decided from the lane (a performance row, a MEMORY_* sentinel, a timing/memory argument); False, not
    exclusive: bool | None = None
    gpu_memory_gib: float | None = None  # the most GPU memory one rank uses: lanes within it may share a GPU
    # a suite lane (expanded from pack.toml's [[suites]]): shard I of N of the collected cases, ids excluded with reason
    shard: tuple[int, int] | None = None
    deselect: tuple[str, ...] = ()
    domain: bool = False  # sweeps the pack's pack.toml's [domain] through DOMAIN_RUNNER, one process per point
    # a suite lane in the upstream CI's environment (the base's [bases.NAME.ci]): its processes per node (0: one
    # process, no launcher), the gloo ranks a CPU run may use, and the selection's cases that may not run here
    ranks: int = 0
    cpu_ranks: int = 0
    needs: tuple[suite.Need, ...] = ()
    from_ci: tuple[str, ...] = ()  # the with_builds (TARGET@BASE) and test pins the CI's environment added
    # `harness stack check` (docs/stack.md) runs a patched lane on the stack build too, unless it opts out with why
    # (a lane that only means something on the pack's own series: its figure compares against the series alone)
    stack: bool = True
    stack_reason: str = ""

    def ours(self) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
        """(extra builds, test pins) without what the upstream CI's environment added: the CPU-only `suite commits`
        runs in the harness's environment (TransformerEngine's torch extension is built only on a GPU host)."""
        return (tuple(b for b in self.extra_builds if f"{b[0]}@{b[1]}" not in self.from_ci),
                tuple(r for r in self.test_requires if r not in self.from_ci))

    @property
    def suite(self) -> bool:
        return self.shard is not None


# How an evidence row picks among the figures it matches (see EvidenceRow).
PICKS = ("first", "max", "min")
BUILDS = ("release", "change")  # an evidence row's optional 'build' (a with_baseline lane measures both)


@dataclass(frozen=True)
class EvidenceRow:
    """One row of a filing body's evidence table: figures of a lane's latest receipt, never a typed value.

    ``figure`` and ``where`` select figures (name, then equal keys); ``pick`` chooses the one shown
    (the first, or the one with the largest / smallest ``value``); ``label`` and ``show`` are format
    strings over that figure's keys (``{value}``, ``{tolerance}``, ``{value.output}`` for a dict) and
    over counts across every selected figure (``{count}``, ``{n_ok}``, ``{n_finite}``, ``{n_bitwise}``,
    ``{n_true}``, ``{not_bitwise}``). ``figure = "@verdict"`` reads the run's last sentinel instead: its
    details are the keys and ``{value}`` its name. See harness/filing/evidence.py.
    """

    lane: str
    figure: str
    label: str
    show: str = "{value}"
    pick: str = "first"
    where: tuple[tuple[str, Any], ...] = ()
    build: str | None = None  # "release" / "change": which build the figure describes, when not the lane's own
    # a benchmark file (bench/results/*.json of a tool such as tools/kernel_registers.py) read instead of a lane's
    # receipt; ``lane`` is then "" (harness/filing/evidence.py: bench_figures)
    bench: str = ""


@dataclass(frozen=True)
class Thread:
    url: str
    role: str
    state: str
    verified: str | None
    updated: str | None = None
    ours: str | None = None  # "comment" / "author": what threads refresh found of the filer's there


@dataclass(frozen=True)
class Decision:
    """``pack.toml's [[related]]``: one upstream PR, issue or commit overlapping the pack, and what to do about it."""

    ref: str  # owner/repo#N or owner/repo@<40-hex sha>
    relation: str  # one of RELATIONS
    reason: str
    date: datetime.date
    kind: str | None = None  # one of RELATED_KINDS; None: not recorded yet (a filing body cannot name it)
    state: str | None = None  # one of RELATED_STATES; None: not recorded yet
    overlap: str | None = None  # one of RELATED_OVERLAPS: how close it came when decided; None: not recorded
    at: str | None = None  # the upstream commit (full sha) the candidate's change was compared with when decided

    @property
    def slug(self) -> str:
        m = RELATED_REF.match(self.ref)
        assert m is not None  # checked when loaded
        return m["slug"]

    @property
    def url(self) -> str:
        m = RELATED_REF.match(self.ref)
        assert m is not None  # checked when loaded
        if m["sha"]:
            return f"https://github.com/{m['slug']}/commit/{m['sha']}"
        return f"https://github.com/{m['slug']}/issues/{m['num']}"  # GitHub redirects to the pull when it is one


LINT_DECISIONS = ("leave", "format-commit")


@dataclass(frozen=True)
class LintAtBase:
    """``pack.toml's [[lint_at_base]]``: changed files that the upstream's whole-file CI checks fail at a base already,
    and what the series does about it, as that upstream's contributing rules ask (docs/upstream-policy.md):
    ``leave`` them as they are (no unrelated formatting), or add a separate ``format-commit``."""

    base: str
    files: tuple[str, ...]
    decision: str  # one of LINT_DECISIONS
    reason: str  # the upstream's rule behind the decision, where it is written


@dataclass(frozen=True)
class Pack:
    id: str
    title: str
    target: str
    kind: str
    state: str
    files: tuple[str, ...]
    depends_on: tuple[str, ...]
    summary: str
    requires: str
    base: str | None
    reproducer: str | None
    lanes: tuple[Lane, ...]
    threads: tuple[Thread, ...]
    absorbed: dict | None
    mitigation: dict | None
    blocked: str | None
    cls: str | None = None  # tracking.toml key 'class'
    held: str | None = None  # why a pack in state "held" is held back
    # the base a filing of this pack is made against: key 'filing_base', else the manifest's, else its base
    filing_base: str = ""
    evidence: tuple[EvidenceRow, ...] = ()  # pack.toml's [[evidence]]: what the filing body shows
    # pack.toml's [[performance]]: the pack's performance claims, rows like evidence rows; each is measured on its
    # lane's base, and its value is read from that lane's latest receipt (harness/filing/evidence.py resolves both)
    performance: tuple[EvidenceRow, ...] = ()
    evidence_note: str = ""  # how the figures were obtained (prose without figures), printed under the table
    # a plain script (upstream API and torch, at most 40 lines, `python repro.py`, exit 1 while the bug shows)
    # that issue and bug-report bodies inline; lanes with ``minimal = true`` run it unchanged
    minimal_repro: str | None = None
    fix: str = ""  # what the change does, in a line (key 'fix')
    related: tuple[Decision, ...] = ()  # pack.toml's [[related]], in file order
    error: str = ""  # the error message the pack fixes (key 'error')
    domain: Domain | None = None  # pack.toml's [domain]: what the change newly admits (harness/lane/tracking/domain.py)
    lint_at_base: tuple[LintAtBase, ...] = ()  # pack.toml's [[lint_at_base]], one per base at most

    @property
    def declared_in(self) -> str:
        """Where the pack declares its lanes, suites, domain and the rest (repository-relative; docs/layout.md)."""
        return str(layout.pack_file(Path(), self.target, self.id))

    def lint_decision(self, base: str) -> LintAtBase | None:
        return next((d for d in self.lint_at_base if d.base == base), None)

    @property
    def state_reason(self) -> str | None:
        """The recorded reason of a blocked or held pack (keys ``blocked`` / ``held``), if any."""
        return {"blocked": self.blocked, "held": self.held}.get(self.state)

    def lane_script(self, lane: Lane) -> str | None:
        """The script a lane runs and its receipt pins: the upstream-test runner, the minimal reproducer, or
        the pack's reproducer."""
        if lane.upstream_tests:
            return upstream_tests.SUITE_RUNNER if lane.suite else upstream_tests.RUNNER
        if lane.domain:
            return self.domain.point if self.domain is not None else None
        return self.minimal_repro if lane.minimal else self.reproducer

    def lane_runner(self, lane: Lane) -> str | None:
        """The script a lane launches (its helper modules are pinned too): the upstream-test runner, the minimal
        kit, or the reproducer."""
        if lane.upstream_tests:
            return upstream_tests.SUITE_RUNNER if lane.suite else upstream_tests.RUNNER
        if lane.domain:
            return DOMAIN_RUNNER
        return MINIMAL_RUNNER if lane.minimal else self.reproducer

    def lane_requires(self, lane: Lane) -> str:
        """What hardware ``lane`` needs: its own ``requires``, else the pack's."""
        return lane.requires or self.requires

    def lane(self, name: str) -> Lane:
        for lane in self.lanes:
            if lane.name == name:
                return lane
        known = ", ".join(lane.name for lane in self.lanes) or "none"
        raise ConfigError(f"pack {self.id} has no lane '{name}' (lanes: {known})")


def normalize_id(pid: str) -> str:
    """'9', '09', 'pack09' and 'liger_pack09' all name pack 09."""
    m = re.search(r"([0-9]+)$", str(pid))  # ASCII digits, as text: int() of thousands of digits raises
    return (m.group(1).lstrip("0") or "0").rjust(2, "0") if m else str(pid)


def shown_id(pid: str) -> str:
    """``pid`` cut short enough to name in a one-line message."""
    pid = str(pid)
    return pid if len(pid) <= 24 else f"{pid[:12]}...{pid[-6:]} ({len(pid)} characters)"


def latest_today() -> datetime.date:
    """The latest date it is now anywhere on Earth (UTC+14): a date after it is in the future for everyone."""
    return (clock.now() + datetime.timedelta(hours=14)).date()
