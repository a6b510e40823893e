"""Whether a pack is ready to file: computed, never typed in.

Everything is judged at the base the pack will be filed against, ``filing_base(pack, manifest)``: the
pack's ``filing_base`` key, else the manifest's ``filing_base`` (upstream main where the manifest has
one), else the pack's ``base``. The series for that base is ``patches/<target>/<pack>/<base>/`` when that
directory exists, else the pack's top-level series, after its same-target dependencies' series (a
dependency recorded absorbed at that base, ``[packs.NN.absorbed] base = ...``, contributes nothing).

A pack is **ready** when all of these hold:

* its state and kind let it be filed (not absorbed, retired, blocked, held or filed; not a contract or
  regression guard) and the filing base is a base of its manifest;
* the series applies to the filing base -- checked with ``git am`` on the materialized base and cached
  per (base pin, patch sha256s) in the store; ``--no-apply`` uses only a cached result and otherwise
  says "not checked", which is never ready;
* every lane on the filing base has a latest receipt that passed, came from the kind of host the lane
  requires (a cuda lane's from a host with a GPU), ran on the artefact (or commit) pinned today, ran the
  reproducer file as it is now, and -- patched lanes -- applied exactly the series files of the filing
  base (their sha256s); at least one lane runs there;
* the filing body renders from receipts, its evidence rows all resolve, body and reproducer lint, and
  the body passes the body check (``filing.check``: layout, budget, anchors, evidence bases, names);
* nothing says upstream absorbed it: every patch reverse-applies on the filing base, a passing
  ``BUG_ABSENT`` lane on it (a superseded fix), or a thread whose role says it is absorbed or fixed;
* every dependency is ready, filed, or absorbed (at that base).

Each unmet condition is one ``Reason`` with a stable ``code`` (documented in the README), shown by
``status``, ``waves`` and ``body``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from harness.base.hashing import sha256_file
from harness.errors import ConfigError, HarnessError, PinError
from harness.filing import body as filing_body
from harness.filing import check as body_check
from harness.lane import declaration, loaded, receipts, series, suite, suite_check, upstream_tests
from harness.lane.receipts import Sentinel, Verdict
from harness.lane.suite_reasons import host_failures
from harness.lane.tracking import Lane, Pack, Tracking, sentinels
from harness.lane.tracking import domain as domain_model
from harness.upstream import git, pins
from harness.upstream.github import thread_label
from harness.watch import decisions, rebase, related

# States in which a pack is not filed, and why (shown by `status`, `waves` and `body`).
NOT_FILED = {
    "absorbed": "absorbed upstream; not filed (regression coverage only)",
    "retired": "retired; not filed",
    "blocked": "blocked",
    "held": "held back",
    "filed": "already filed",
}
DONE_STATES = ("absorbed", "filed")  # a dependency in one of these no longer gates anything
FILED_KINDS = ("pr", "issue", "comment", "bug-report")  # kinds with a filing template
ABSORBING_ROLES = ("absorbed", "fixed upstream", "superseded")  # a thread role with one of these words

class ReasonCode(StrEnum):
    """Why a pack is not ready (stable; ``status --json`` carries the value; docs/filing.md lists them)."""

    STATE = "state"
    KIND = "kind"
    FILING_BASE = "filing-base"
    NO_LANES = "no-lanes"
    NO_LANE_ON_BASE = "no-lane-on-base"
    LANE = "lane"
    SERIES = "series"
    BASE = "base"
    APPLY = "apply"
    ABSORBED = "absorbed"
    EVIDENCE = "evidence"
    BODY = "body"
    LINT = "lint"
    BODY_CHECK = "body-check"
    DEPENDENCY = "dependency"
    THREAD = "thread"
    RELATED = "related-undecided"
    SUPERSEDED = "superseded"
    ALREADY_THERE = "already-there"
    SUITE = "suite"
    DOMAIN = "domain"


REASON_CODES = {
    ReasonCode.STATE: "the pack's state keeps it from being filed",
    ReasonCode.KIND: "the pack's kind is not filed upstream",
    ReasonCode.FILING_BASE: "the filing base is not a base of the manifest",
    ReasonCode.NO_LANES: "the pack declares no lanes",
    ReasonCode.NO_LANE_ON_BASE: "no lane runs on the filing base",
    ReasonCode.LANE: "a lane on the filing base has no current passing receipt",
    ReasonCode.SERIES: "the series for the filing base is missing or unreadable",
    ReasonCode.BASE: "the filing base could not be fetched, so nothing could be checked on it",
    ReasonCode.APPLY: "the series does not apply to the filing base, or that was not checked",
    ReasonCode.ABSORBED: "upstream has (or may have) the change, or no longer shows the bug",
    ReasonCode.EVIDENCE: "an evidence row of the body does not resolve from the receipts",
    ReasonCode.BODY: "the body cannot be rendered",
    ReasonCode.LINT: "the body or its reproducer fails the lint",
    ReasonCode.BODY_CHECK: "the body fails the body check (layout, budget, anchors, names; harness body --check)",
    ReasonCode.DEPENDENCY: "a dependency is not ready, filed or absorbed",
    ReasonCode.THREAD: "the thread a comment would go to is closed or merged",
    ReasonCode.RELATED: "upstream work overlapping the pack, newer than its last decision, is undecided "
                        "(harness related PACK; decide it in pack.toml's [[related]])",
    ReasonCode.SUPERSEDED: "a decision says upstream work supersedes the pack (relation supersedes-us)",
    ReasonCode.ALREADY_THERE: "our comment or PR is already on the thread (threads refresh found it)",
    ReasonCode.SUITE: "a PR without a complete upstream-suite run at the filing base that shows no patched-only "
                      "failure (pack.toml's [[suites]]; harness suite compare)",
    ReasonCode.DOMAIN: "the pack declares a domain (pack.toml's [domain]) that no current passing domain lane on the "
                       "filing base shows",
}
# codes that mean the pack is not to be filed at all (nothing else is worth checking)
NOT_FILEABLE = frozenset({ReasonCode.STATE, ReasonCode.KIND, ReasonCode.FILING_BASE})


class ApplyStatus(StrEnum):
    """Apply-check outcomes (cached in the store by value)."""

    APPLIES = "applies"
    CONFLICT = "conflict"
    ABSORBED = "absorbed"
    PARTLY = "partly absorbed"
    FUZZ = "fuzz"
    NOT_CHECKED = "not checked"
    UNAVAILABLE = "base unavailable"  # the base could not be fetched (network, mirrors, its pin): never cached
    ERROR = "error"


APPLIES, CONFLICT, ABSORBED, PARTLY, FUZZ, NOT_CHECKED, ERROR = (
    ApplyStatus.APPLIES, ApplyStatus.CONFLICT, ApplyStatus.ABSORBED, ApplyStatus.PARTLY, ApplyStatus.FUZZ,
    ApplyStatus.NOT_CHECKED, ApplyStatus.ERROR)


class LaneProblemCode(StrEnum):
    """Why a lane on the filing base does not count (a ``lane`` reason)."""

    NO_RECEIPT = "no-receipt"
    VERDICT = "verdict"  # the latest receipt did not pass
    PIN = "pin"  # it ran on another artefact or commit than the one pinned today
    SERIES = "series"  # it applied other series files than the filing base's
    REPRODUCER = "reproducer"  # the reproducer file changed since
    HELPERS = "helpers"  # a helper module the reproducer could import changed since (receipts without `loaded`)
    LOADED = "loaded"  # a repository file the run imported changed since
    DECLARATION = "declaration"  # the lane's declaration (expect, args, ranks, builds ...) changed since
    UNVERIFIED = "unverified"  # the receipt directory does not verify (digests, or its JSON against its log)
    HOST = "host"  # a suite shard whose cases failed for want of the host's resources (GPU memory, a port)
    DOMAIN = "domain"  # a domain lane that swept another declaration, or ran on a device the claim is not for
    HOST_KIND = "host-kind"  # a lane that requires cuda, whose latest receipt came from a host without a GPU


@dataclass(frozen=True)
class LaneProblem:
    code: LaneProblemCode
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Reason:
    code: ReasonCode
    text: str


@dataclass(frozen=True)
class ApplyCheck:
    base: str
    status: ApplyStatus
    detail: str = ""
    checked_at: str | None = None
    cached: bool = False

    def describe(self) -> str:
        return f"{self.status}" + (f": {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class LaneEvidence:
    lane: Lane
    receipt: receipts.Receipt | None
    problem: LaneProblem | None  # None: counts (on the filing base), or not judged (elsewhere)
    on_filing_base: bool = True


@dataclass(frozen=True)
class Readiness:
    pack: Pack
    filing_base: str
    lanes: tuple[LaneEvidence, ...]
    reasons: tuple[Reason, ...]  # why it is not ready; empty when ready
    apply: ApplyCheck | None = None
    related: related.Scan | None = None  # the upstream work found overlapping it (None: not looked for)
    suite: suite_check.SuiteResult | None = None  # the upstream suite at the filing base (None: none declared)

    @property
    def ready(self) -> bool:
        return not self.reasons

    def why(self) -> str:
        return "ready" if self.ready else "; ".join(r.text for r in self.reasons)


# ---------------------------------------------------------------------------------------------- the base

def filing_base(pack: Pack, manifest: pins.Manifest) -> str:
    """The base the pack will be filed against (resolved when tracking.toml loads: the pack's key
    ``filing_base``, else the manifest's, else the pack's base)."""
    return pack.filing_base or manifest.filing_base or pack.base or manifest.default_base


def series_at(root: Path, tracking: Tracking, pack: Pack, base: str) -> list[series.Patch]:
    """Every patch filing ``pack`` at ``base`` rests on (``series.series_for``)."""
    return series.series_for(tracking, root, pack, base)


def _same_pin(recorded: receipts.BaseRecord, base: pins.Base) -> bool:
    """Whether a receipt's base record names today's pin (newer receipts say ``pin``; older ones ``sha256``)."""
    return recorded.recorded_pin == base.pin


# ---------------------------------------------------------------------------------------------- apply check

APPLY_RULES = 2  # the classification's version: 2 added the 3-way apply (a cached conflict may merge now)


def apply_key(target: str, base_name: str, base, patches: list[series.Patch]) -> str:
    text = json.dumps([APPLY_RULES, target, base_name, base.pin, [[p.pack, p.name, p.sha256] for p in patches]])
    return hashlib.sha256(text.encode()).hexdigest()


def apply_check(ctx, pack: Pack, base_name: str, patches: list[series.Patch], allow_download: bool = True,
                unavailable: dict | None = None) -> ApplyCheck:
    """Whether ``patches`` (dependencies', then the pack's) apply on ``base_name``; cached in the store.

    ``unavailable`` (one command's): bases that could not be fetched, so each is tried once per command."""
    manifest = ctx.manifest(pack.target)
    base = manifest.base(base_name)
    key = apply_key(pack.target, base_name, base, patches)
    cache = ctx.store.area("apply-checks") / f"{key[:32]}.json"
    if cache.is_file():
        try:
            d = json.loads(cache.read_text())
            return ApplyCheck(base_name, ApplyStatus(d["status"]), d.get("detail", ""), d.get("checked_at"),
                              cached=True)
        except (ValueError, KeyError, TypeError):
            cache.unlink(missing_ok=True)
    if not allow_download:
        return ApplyCheck(base_name, NOT_CHECKED, "not checked (--no-apply): no cached result for this series on "
                                                  f"{base_name}; run without --no-apply")
    gone = unavailable if unavailable is not None else {}
    if (pack.target, base_name) in gone:
        return gone[(pack.target, base_name)]
    try:
        checkout = ctx.materialize(manifest, base_name)
    except PinError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        gone[(pack.target, base_name)] = ApplyCheck(base_name, ApplyStatus.UNAVAILABLE,
                                                    f"cannot fetch {pack.target} {base_name}: {exc}{hint}")
        return gone[(pack.target, base_name)]
    except HarnessError as exc:
        return ApplyCheck(base_name, ERROR, f"cannot materialize {pack.target} {base_name}: {exc}")
    status, detail = _try(checkout, pack, patches,
                          rebase.Blobs(ctx, series.dependency_chain(ctx.tracking, pack, base_name), base_name))
    result = ApplyCheck(base_name, status, detail, receipts.utc_now().isoformat().replace("+00:00", "Z"))
    tmp = cache.with_suffix(".partial")
    tmp.write_text(json.dumps({"status": status, "detail": detail, "checked_at": result.checked_at,
                               "patches": [p.sha256 for p in patches], "pin": base.pin}))
    tmp.replace(cache)
    return result


def _try(checkout: pins.Checkout, pack: Pack, patches: list[series.Patch],
         blobs: rebase.Blobs | None = None) -> tuple[ApplyStatus, str]:
    with tempfile.TemporaryDirectory(prefix="patchlane-ready-") as tmp:
        repo = git.clone(checkout.path, Path(tmp) / "tree", branch="readiness")
        results = []
        for patch in patches:
            if patch.pack != pack.id:
                try:
                    series.apply_patch(repo, patch, checkout)
                except HarnessError as exc:
                    return CONFLICT, f"dependency {patch.pack} does not apply: {exc}"
                continue
            result = rebase.classify(repo, patch, checkout, blobs)
            results.append(result)
            if result.status == rebase.CONFLICT:
                return CONFLICT, f"{patch.name}: {result.detail}"
    own = [r for r in results]
    if own and all(r.status == rebase.CONTAINED for r in own):
        return ABSORBED, f"every patch reverse-applies on {checkout.base.name}: upstream already has the change"
    contained = [r.patch for r in own if r.status == rebase.CONTAINED]
    if contained:
        return PARTLY, f"already upstream: {', '.join(contained)}; the series for {checkout.base.name} needs them " \
                       "removed"
    fuzzy = [r for r in own if r.status in (rebase.FUZZ, rebase.THREE_WAY)]
    if fuzzy:
        kinds = {r.status for r in fuzzy}
        how = ("reduced context" if kinds == {rebase.FUZZ} else "a 3-way merge (git am -3)"
               if kinds == {rebase.THREE_WAY} else "reduced context or a 3-way merge")
        return FUZZ, f"applies only with {how}: {'; '.join(f'{r.patch} ({r.detail})' for r in fuzzy)}; regenerate " \
                     f"the series for {checkout.base.name}"
    moved = [f"{r.patch}: {r.detail}" for r in own if r.status == rebase.OFFSET]
    return APPLIES, ("with offsets: " + "; ".join(moved)) if moved else ""


# ---------------------------------------------------------------------------------------------- related work

def _related(ctx, pack: Pack) -> tuple[related.Scan | None, list[Reason]]:
    """Upstream work overlapping the pack (mirrors and recorded answers only, never the network), and what
    about it keeps the pack from being filed."""
    reasons = []
    d = decisions.superseded_by(pack)
    if d is not None:
        reasons.append(Reason(ReasonCode.SUPERSEDED, f"{d.ref} supersedes it (decided {d.date}): {d.reason}"))
    there = decisions.already_there(pack)
    if there is not None:
        what = "our comment is" if there.ours == "comment" else "our own thread is"
        reasons.append(Reason(ReasonCode.ALREADY_THERE, f"{what} already on {thread_label(there.url)}: "
                                                        "a second filing is refused"))
    try:
        scan = related.scan(ctx.root, ctx.tracking, pack,
                            related.offline_sources(ctx.root, ctx.options.git_mirrors))
    except HarnessError as exc:
        return None, reasons + [Reason(ReasonCode.RELATED, f"cannot look for overlapping upstream work: {exc}")]
    for c in related.undecided(pack, scan.candidates):
        last = decisions.last_decision(pack)
        since = f"newer than the last decision ({last})" if last else "no decision recorded"
        reasons.append(Reason(ReasonCode.RELATED, f"{c.ref} ({c.kind}{', ' + c.state if c.state else ''}, "
                                                  f"{c.date[:10]}, {c.overlap.label}: {c.where}) is undecided, "
                                                  f"{since}"))
    return scan, reasons


# ---------------------------------------------------------------------------------------------- readiness

def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def lane_problem(root: Path, pack: Pack, lane: Lane, rec: receipts.Receipt | None, base,
                 patches: list[series.Patch], manifest: pins.Manifest | None = None) -> LaneProblem | None:
    """Why ``rec`` is not ``lane``'s current passing receipt on ``base`` with ``patches``; None if it is.

    A receipt counts only as a whole: its directory verifies (digests, and its JSON against its own log). It is
    current while what decided the run is unchanged: the pin, the series, the lane's declaration (``manifest``
    given: all of it, as ``harness.lane.declaration`` records it; else its expected sentinel and arguments), the
    reproducer, and the repository files the run imported (``loaded``; a receipt without that record falls back
    to every ``_*.py`` helper it could have imported, and says so)."""
    if rec is None:
        return LaneProblem(LaneProblemCode.NO_RECEIPT, "no receipt")
    if rec.path is not None:
        check = receipts.check_dir(rec.dir, _vocabulary(root))
        if not check.ok:
            return LaneProblem(LaneProblemCode.UNVERIFIED, f"latest receipt does not verify "
                                                           f"({receipts.display_path(rec.dir, root)}: "
                                                           f"{_short(check.problems[0])}): harness receipts verify")
    if rec.verdict != Verdict.PASS:
        return LaneProblem(LaneProblemCode.VERDICT, f"latest receipt is {rec.verdict}, not pass")
    if pack.lane_requires(lane) == "cuda" and (rec.host is None or not rec.host.gpu):
        # a pack switched from cpu to cuda: a CPU host's pass says nothing of the GPU the lane now requires
        return LaneProblem(LaneProblemCode.HOST_KIND, "latest receipt is from a host without a GPU; the lane "
                                                      "requires cuda (run it on a GPU host)")
    if not _same_pin(rec.base, base):
        return LaneProblem(LaneProblemCode.PIN, f"latest receipt ran on another artefact than the {lane.base} pin")
    if lane.patched:
        got = [p.sha256 for p in rec.patches]
        want = [p.sha256 for p in patches]
        if got != want:
            changed = sum(1 for a, b in zip(got, want, strict=False) if a != b) + abs(len(got) - len(want))
            return LaneProblem(LaneProblemCode.SERIES,
                               f"latest receipt applied another series than the one for {lane.base} "
                               f"({changed} of {max(len(got), len(want))} patch file(s) differ)")
    if lane.upstream_tests:  # the test files come from the series on every such lane, patched or not
        tree = upstream_tests.tree_key(series.series_key(pack.target, base.pin, patches), lane.upstream_tests)
        if upstream_tests.recorded_tree(rec.reproducer.args) != tree:
            return LaneProblem(LaneProblemCode.SERIES, "latest receipt ran the upstream tests of another series "
                                                       f"or another choice of ids than today's for {lane.base}")
    found = declaration_problem(pack, lane, rec, manifest)
    if found is not None:
        return found
    if lane.domain and pack.domain is not None:
        found = domain_problem(pack, rec)
        if found is not None:
            return found
    log = receipts.log_text(rec) if lane.suite else None
    if log is not None:
        starved = host_failures(rec.sentinel_details.get(suite.RECORDED), log)
        if starved:
            return LaneProblem(LaneProblemCode.HOST,
                               f"{len(starved)} case(s) of its latest run failed for want of the host's resources, "
                               f"not of the code ({next(iter(starved.values()))[:90]}): run the shard again")
    script = pack.lane_script(lane)
    if script:
        path = root / script
        if path.is_file() and sha256_file(path) != rec.reproducer.sha256:
            return LaneProblem(LaneProblemCode.REPRODUCER,
                               f"latest receipt ran an older {script} (it changed since)")
        if rec.reproducer.loaded is not None:  # what the run imported, as its processes recorded it
            edited = loaded.changed(rec.reproducer.loaded, root)
            if edited:
                return LaneProblem(LaneProblemCode.LOADED,
                                   f"latest receipt's run imported {_listed(edited)}, changed since")
        elif rec.reproducer.helpers is not None:  # receipts before helpers were pinned: the file alone, as above
            now = receipts.helper_digests(root, pack.lane_runner(lane) or script)
            changed_helpers = sorted(name for name in set(now) | set(rec.reproducer.helpers)
                                     if now.get(name) != rec.reproducer.helpers.get(name))
            if changed_helpers:
                return LaneProblem(LaneProblemCode.HELPERS,
                                   f"latest receipt ran {script} with other helper modules than today's "
                                   f"({_listed(changed_helpers)} changed, added or removed since; it has no record "
                                   "of what it imported, so every _*.py it could import counts)")
    return None


def _vocabulary(root: Path) -> set[str]:
    """The sentinel names (``tracking.sentinels``), read once per content of ``repros/_lane.py``."""
    path = root / "repros" / "_lane.py"
    return _vocabulary_of(root, sha256_file(path) if path.is_file() else "")


@functools.lru_cache(maxsize=8)
def _vocabulary_of(root: Path, _digest: str) -> set[str]:
    return set(sentinels(root))


def declaration_problem(pack: Pack, lane: Lane, rec: receipts.Receipt,
                        manifest: pins.Manifest | None) -> LaneProblem | None:
    """Why ``rec`` ran another declaration of ``lane`` than today's, if it did. Every receipt records the sentinel
    it expected and the arguments a plain lane was given; newer ones the whole declaration."""
    if str(rec.expected) != lane.expect:
        return LaneProblem(LaneProblemCode.DECLARATION, f"latest receipt expected {rec.expected}; the lane now "
                                                        f"expects {lane.expect} ({pack.declared_in})")
    if not (lane.upstream_tests or lane.domain) and tuple(rec.reproducer.args) != tuple(lane.args):
        return LaneProblem(LaneProblemCode.DECLARATION, f"latest receipt ran with args {list(rec.reproducer.args)}; "
                                                        f"the lane now declares {list(lane.args)}")
    if manifest is not None and rec.declaration is not None:
        changed = declaration.differences(rec.declaration, declaration.of(pack, lane, manifest))
        if changed:
            return LaneProblem(LaneProblemCode.DECLARATION, f"latest receipt ran another declaration of the lane "
                                                            f"({', '.join(changed)} changed since)")
    return None


def _listed(names: list[str], most: int = 3) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _short(text: str, most: int = 160) -> str:
    return text if len(text) <= most else text[:most] + "..."


def domain_problem(pack: Pack, rec: receipts.Receipt) -> LaneProblem | None:
    """Why a domain lane's receipt does not show today's ``pack.toml's [domain]``: it swept another declaration, or
    ran on a device the domain does not claim."""
    assert pack.domain is not None
    if domain_model.declared(rec.reproducer.args) != pack.domain.declaration():
        return LaneProblem(LaneProblemCode.DOMAIN, f"latest receipt swept another declaration than today's "
                                                   f"[domain] of {pack.declared_in} (its points or devices changed "
                                                   "since)")
    summary = next((f.data for f in rec.figures if f.data.get("name") in ("domain_summary", "domain_probe_summary")),
                   None)
    device = summary.get("device") if summary else None
    if device not in pack.domain.devices:
        return LaneProblem(LaneProblemCode.DOMAIN, f"latest receipt ran on {device or 'an unrecorded device'}; "
                                                   f"the domain is claimed for {', '.join(pack.domain.devices)}")
    return None


def domain_reasons(pack: Pack, fbase: str, lanes: list[LaneEvidence]) -> list[Reason]:
    """Why the declared domain is not shown at ``fbase``: no patched domain lane runs there, or one does not
    count (each named, with its problem)."""
    if pack.domain is None:
        return []
    on = [e for e in lanes if e.lane.domain and e.on_filing_base]
    if not any(e.lane.patched and not domain_model.is_probe(e.lane.args) for e in on):
        return [Reason(ReasonCode.DOMAIN, f"[domain] of {pack.declared_in} is declared but no patched domain lane "
                                          f"(domain = true) runs on the filing base {fbase}")]
    out = [Reason(ReasonCode.DOMAIN, f"domain lane {e.lane.name}: {e.problem}") for e in on if e.problem]
    bound = pack.domain.bound_declines
    if bound and not any(e.lane.patched and domain_model.is_probe(e.lane.args) for e in on):
        out.append(Reason(ReasonCode.DOMAIN, f"[domain] of {pack.declared_in} declines {len(bound)} point(s) by the "
                                             "change's own bound (bound = true), and no patched domain lane with "
                                             f"{domain_model.PROBE_FLAG} runs on {fbase}: nothing shows the code "
                                             "fails beyond the bound"))
    return out


def suite_reasons(ctx, pack: Pack, fbase: str) -> tuple[list[Reason], suite_check.SuiteResult | None]:
    """Why the pack's upstream suite at ``fbase`` does not yet vouch for it (each suite lane's currency is a
    ``lane`` reason already): none declared, a shard without a complete receipt, a case short of full
    coverage, or a case that fails only when patched."""
    recorded = (ctx.root / "suites" / pack.id / f"{fbase}.toml").is_file()
    if not suite_check.suite_lanes(pack, fbase):
        if not recorded:  # not yet required of a pack without a recorded selection (docs/upstream-tests.md)
            return [], None
        return [Reason(ReasonCode.SUITE, f"no [[suites]] at {fbase} in {pack.declared_in}: the upstream's own tests of "
                                         "the touched code never ran base vs patched")], None
    try:
        result = suite_check.suite_verdict(ctx, pack, fbase)
    except HarnessError as exc:
        return [Reason(ReasonCode.SUITE, f"suite at {fbase}: {exc}")], None
    out = []
    if result.missing:
        out.append(Reason(ReasonCode.SUITE, f"suite at {fbase}: {len(result.missing)} lane(s) without a complete "
                                            f"receipt, first {result.missing[0]}"))
    elif result.collected is None:  # pytest reported no count ("0 of ? cases" said nothing a person can act on)
        out.append(Reason(ReasonCode.SUITE, f"suite at {fbase}: its runs reported no number of cases collected "
                                            f"({result.ran} ran on the base): run the shards again"))
    elif result.ran < result.collected:
        out.append(Reason(ReasonCode.SUITE, f"suite at {fbase}: {result.ran} of {result.collected} cases run on "
                                            "the base"))
    out += [Reason(ReasonCode.SUITE, f"suite at {fbase}: {why}") for why in result.comparison.reasons[:3]]
    return out, result


def readiness(ctx, pack: Pack, allow_download: bool = True, _memo: dict | None = None) -> Readiness:
    """Why ``pack`` is not ready to file (``ctx``: harness.lane.lanes.Context), computed from receipts and the base."""
    memo = {} if _memo is None else _memo
    if pack.id in memo:
        return memo[pack.id]
    root, tracking = ctx.root, ctx.tracking
    manifest = ctx.manifest(pack.target)
    fbase = filing_base(pack, manifest)
    reasons: list[Reason] = []
    if pack.state in NOT_FILED:
        reasons.append(Reason(ReasonCode.STATE, f"state {pack.state}: {pack.state_reason or NOT_FILED[pack.state]}"))
    if pack.kind not in FILED_KINDS:
        reasons.append(Reason(ReasonCode.KIND, f"kind {pack.kind}: not filed upstream"))
    base = manifest.bases.get(fbase)
    if base is None:
        reasons.append(Reason(ReasonCode.FILING_BASE, f"filing base '{fbase}' is not a base of {manifest.path.name} "
                                             f"({', '.join(manifest.bases)})"))
    patches: list[series.Patch] = []
    if base is not None:
        try:
            patches = series_at(root, tracking, pack, fbase)
        except ConfigError as exc:
            reasons.append(Reason(ReasonCode.SERIES, str(exc)))
    lanes = []
    latest = receipts.latest_by_lane(root, pack.target, pack.id)
    for lane in pack.lanes:
        rec = latest.get(lane.name)
        on = lane.base == fbase
        problem = lane_problem(root, pack, lane, rec, base, patches, manifest) if on and base is not None else None
        lanes.append(LaneEvidence(lane, rec, problem, on))
    if not pack.lanes:
        reasons.append(Reason(ReasonCode.NO_LANES, "no lanes, so no receipts"))
    elif base is not None and not any(e.on_filing_base for e in lanes):
        reasons.append(Reason(ReasonCode.NO_LANE_ON_BASE, f"no lane runs on the filing base {fbase} (lanes on "
                                                 f"{', '.join(sorted({ln.base for ln in pack.lanes}))})"))
    reasons += [Reason(ReasonCode.LANE, f"lane {e.lane.name}: {e.problem}") for e in lanes
                if e.problem and not e.lane.domain]
    if base is not None:
        reasons += domain_reasons(pack, fbase, lanes)
    for t in pack.threads:
        if any(word in t.role for word in ABSORBING_ROLES):
            reasons.append(Reason(ReasonCode.ABSORBED,
                                  f"upstream may already have it: {thread_label(t.url)} ({t.role})"))
    if pack.kind == "comment":
        target = decisions.comment_target(pack)
        th = decisions.thread_of(pack, target) if target else None
        if th is not None and th.state in ("closed", "merged"):
            reasons.append(Reason(ReasonCode.THREAD,
                                  f"{thread_label(th.url)} is {th.state}: a comment there reaches nobody"))
    scan = None
    if pack.state not in NOT_FILED and pack.kind in FILED_KINDS:
        scan, found = _related(ctx, pack)
        reasons += found
    for e in lanes:  # only a current receipt that printed it says the bug is gone
        if e.on_filing_base and not e.lane.patched and e.lane.expect == Sentinel.BUG_ABSENT and e.problem is None \
                and e.receipt is not None and Sentinel.BUG_ABSENT in e.receipt.sentinels:
            reasons.append(Reason(ReasonCode.ABSORBED, f"the bug no longer shows on {fbase}: lane {e.lane.name} saw "
                                              "BUG_ABSENT (superseded upstream)"))
    fileable = not any(r.code in NOT_FILEABLE for r in reasons)
    check = None
    own = [p for p in patches if p.pack == pack.id]
    if fileable and own:
        check = apply_check(ctx, pack, fbase, patches, allow_download, memo.setdefault("unavailable-bases", {}))
        if check.status == ABSORBED:
            reasons.append(Reason(ReasonCode.ABSORBED, check.detail))
        elif check.status == ApplyStatus.UNAVAILABLE:
            reasons.append(Reason(ReasonCode.BASE, check.detail))
        elif check.status != APPLIES:
            where = "" if check.status == NOT_CHECKED else f"series on {fbase}: "
            reasons.append(Reason(ReasonCode.APPLY, f"{where}{check.describe()}" if where else check.detail))
    elif fileable and pack.kind == "pr" and base is not None:
        reasons.append(Reason(ReasonCode.SERIES, f"a PR with no series for {fbase} "
                                        f"({series.series_dir(root, pack.target, pack.id, fbase).relative_to(root)}/)"))
    suite_result = None
    if fileable and pack.kind == "pr" and base is not None:
        found_suite, suite_result = suite_reasons(ctx, pack, fbase)
        reasons += found_suite
    if fileable:

        try:
            rendered = filing_body.render(root, tracking, pack)
        except HarnessError as exc:
            reasons.append(Reason(ReasonCode.BODY, f"body cannot be rendered: {exc}"))
        else:
            reasons += [Reason(ReasonCode.EVIDENCE, p) for p in rendered.problems]
            if rendered.findings:
                first = rendered.findings[0]
                reasons.append(Reason(ReasonCode.LINT, f"body fails lint: {len(rendered.findings)} finding(s), first "
                                              f"{first.describe()}"))
            checked = body_check.own_findings(rendered)
            if rendered.stacked and own and check is not None and check.status == APPLIES:
                alone = apply_check(ctx, pack, fbase, own, allow_download, memo.setdefault("unavailable-bases", {}))
                checked += body_check.export_build(rendered, alone.status == APPLIES
                                                     if alone.status in (APPLIES, CONFLICT) else None)
            if checked:
                reasons.append(Reason(ReasonCode.BODY_CHECK, f"body fails the body check: {len(checked)} finding(s), "
                                                             f"first {checked[0].describe()}"))
    for dep in pack.depends_on:
        dp = tracking.packs[dep]
        if dp.state in DONE_STATES or series.absorbed_at(dp, fbase):
            continue
        if not readiness(ctx, dp, allow_download, memo).ready:
            reasons.append(Reason(ReasonCode.DEPENDENCY, f"depends on {dep}, which is not ready"))
    result = Readiness(pack, fbase, tuple(lanes), tuple(reasons), check, scan, suite_result)
    memo[pack.id] = result
    return result
