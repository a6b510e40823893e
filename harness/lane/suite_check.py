"""A pack's upstream suite judged: the verdict at a base from its suite lanes' latest receipts, and the
commit-by-commit check that every case passing at the base still passes at each commit of the series."""

from __future__ import annotations

import os
from dataclasses import dataclass

from harness.base import ui
from harness.errors import ConfigError, ReceiptError
from harness.lane import (
    receipts,
    runtime,
    series,
    suite,
    suite_env,
    suite_reasons,
    upstream_tests,
)
from harness.lane.context import Context
from harness.lane.lanes import obtain_build, series_for
from harness.lane.tracking import Lane, Pack, sentinels


@dataclass(frozen=True)
class SuiteResult:
    """The suite verdict of a pack at a base, computed from its suite lanes' latest receipts."""

    pack: str
    base: str
    merged: suite.Merged
    comparison: suite.Comparison
    receipts: tuple[str, ...]  # the receipts read (paths)

    @property
    def collected(self) -> int | None:
        return self.merged.collected

    @property
    def ran(self) -> int:
        return self.merged.ran

    @property
    def missing(self) -> tuple[str, ...]:
        return self.merged.missing

    @property
    def ok(self) -> bool:
        # a case not run here (more ranks than the host has, a package the environment cannot have) is accounted
        # for by its reason, never counted as run or as failed
        return (self.comparison.ok and not self.missing and self.collected is not None
                and self.ran + len(self.comparison.not_here) >= self.collected)

    def line(self) -> str:
        return f"pack {self.pack} suite at {self.base}: " + suite.summary_line(self.merged, self.comparison)

    def as_json(self) -> dict:
        return {"pack": self.pack, "base": self.base, "collected": self.collected, "ran": self.ran,
                "skipped": self.merged.skipped, "missing": list(self.missing), "receipts": list(self.receipts),
                "line": self.line(), **self.comparison.as_json(), "ok": self.ok}  # the suite's ok, not the cases'


# classes whose tests the series adds must fail on the base (a perf or refactor change keeps behaviour)
CLAIMS_FIX = ("crash-fix", "precision", "feature")


def suite_lanes(pack: Pack, base: str) -> list[Lane]:
    return [lane for lane in pack.lanes if lane.suite and lane.base == base]


def ranks_of(receipt: receipts.Receipt) -> int | None:
    """The ranks a suite receipt's run used (None: recorded before suites ran at the upstream's ranks)."""
    env = (receipt.sentinel_details.get(upstream_tests.SENTINEL_SUITE_RAN) or {}).get(suite_env.ENV_KEY)
    return int(env["ranks"]) if isinstance(env, dict) and "ranks" in env else None


def latest_suite_receipts(ctx: Context, pack: Pack, ranks: int | None = None) -> dict[str, receipts.Receipt]:
    """Each lane's latest receipt; with ``ranks``, the latest of those whose run used that many ranks."""
    if ranks is None:
        return receipts.latest_by_lane(ctx.root, pack.target, pack.id, ctx.receipts_dir)
    return {r.lane: r for r in receipts.find(ctx.root, pack.target, pack.id, ctx.receipts_dir) if ranks_of(r) == ranks}


def suite_verdict(ctx: Context, pack: Pack, base: str, ranks: int | None = None) -> SuiteResult:
    """Merge the cases of every suite lane's latest receipt per side and compare base with patched (receipts of one
    environment only: EnvironmentMismatch otherwise). ``ranks``: read the receipts of runs at that many ranks."""
    chosen = suite_lanes(pack, base)
    if not chosen:
        raise ConfigError(f"pack {pack.id} declares no [[suites]] at base {base} ({pack.declared_in})")
    latest = latest_suite_receipts(ctx, pack, ranks)
    _verified([latest[lane.name] for lane in chosen if lane.name in latest], set(sentinels(ctx.root)))
    manifest = ctx.manifest(pack.target)
    suite_env.check_pairing(
        ((receipts.display_path(path, ctx.root) if (path := latest[lane.name].path) is not None else lane.name,
          lane.patched,
          (latest[lane.name].sentinel_details.get(upstream_tests.SENTINEL_SUITE_RAN) or {}).get(suite_env.ENV_KEY))
         for lane in chosen if lane.name in latest),
        ignore=(manifest.distribution,))
    details = {lane.name: latest[lane.name].sentinel_details.get(upstream_tests.SENTINEL_SUITE_RAN)
               for lane in chosen if lane.name in latest}
    merged = suite.merge([(lane.name, lane.patched) for lane in chosen], details)
    added = suite.added_tests([(p.name, p.path.read_text(encoding="utf-8", errors="replace"))
                               for p in series_for(ctx, pack, base) if p.pack == pack.id])
    comparison = suite.compare(merged.base, merged.patched, added, claims_fix=pack.cls in CLAIMS_FIX,
                               not_here=merged.not_here)
    comparison = suite_reasons.explain_from_logs(comparison, receipts.suite_logs(
        (lane.patched, latest[lane.name]) for lane in chosen if lane.name in latest))
    paths = [latest[lane.name].path for lane in chosen if lane.name in latest]
    read = tuple(receipts.display_path(path, ctx.root) for path in paths if path is not None)
    return SuiteResult(pack.id, base, merged, comparison, read)


def _verified(chosen: list[receipts.Receipt], vocabulary: set[str]) -> None:
    """Each receipt the verdict reads, checked as a whole against its digests and its log: a receipt.json that says
    other cases than its log is no evidence (ReceiptError, exit TAMPERED)."""
    for rec in chosen:
        check = receipts.check_dir(rec.dir, vocabulary)
        if not check.ok:
            raise ReceiptError(f"{rec.dir}: {'; '.join(check.problems)}; the suite verdict reads no such receipt",
                               hint="'harness receipts verify' lists every receipt that fails")


@dataclass(frozen=True)
class CommitStep:
    """The CPU part of a pack's suite at one commit of its series (0: the base, with only its dependencies)."""

    index: int
    patch: str  # the patch whose commit this is ("" for the base)
    cases: dict[str, str]
    complete: bool  # the runner ran to its end
    summary: str | None
    broken: tuple[str, ...] = ()  # cases that pass at the base and not at this commit


@dataclass(frozen=True)
class CommitCheck:
    pack: str
    base: str
    steps: tuple[CommitStep, ...]
    duration_s: float

    @property
    def ok(self) -> bool:
        return all(s.complete and not s.broken for s in self.steps)

    def as_json(self) -> dict:
        return {"pack": self.pack, "base": self.base, "ok": self.ok, "duration_s": self.duration_s,
                "steps": [{"index": s.index, "patch": s.patch, "complete": s.complete, "summary": s.summary,
                           "cases": s.cases, "broken": list(s.broken)} for s in self.steps]}


def commit_check(ctx: Context, pack: Pack, base_name: str, timeout_s: int = 900) -> CommitCheck:
    """Apply the pack's own commits one by one on its base (its dependencies' series first) and run the part of
    its recorded suite that runs without a GPU at each (``CUDA_VISIBLE_DEVICES`` empty; a collection error is an
    ``error`` case): every case that passes at the base must pass at every commit. The environment is the suite
    lanes' (their ``with_builds`` and ``test_requires``) in the harness's own interpreter, as a CPU lane runs."""
    import json
    import subprocess
    import time

    sel = suite.load_for(ctx.root, pack.id, base_name)
    if sel is None:
        raise ConfigError(f"pack {pack.id}: no recorded suite selection at {base_name}",
                          hint=f"harness suite select {pack.id} --base {base_name}")
    template = next(iter(suite_lanes(pack, base_name)), None)
    manifest = ctx.manifest(pack.target)
    base = manifest.base(base_name)
    patches = series_for(ctx, pack, base.name)
    deps = [p for p in patches if p.pack != pack.id]
    own = [p for p in patches if p.pack == pack.id]
    own_builds, own_requires = template.ours() if template else ((), ())
    extras = [(ctx.manifest(t), b) for t, b in own_builds]
    extra_builds = [obtain_build(ctx, other, other.base(b), [], f"{other.target} {b}") for other, b in extras]
    reqs = runtime.combine([(f"{manifest.target} {base.name}", base.runtime_requires)]
                           + [(f"{other.target} {b}", other.base(b).runtime_requires) for other, b in extras]
                           + [("the suite's tests", upstream_tests.PYTEST_REQUIRES + own_requires)])
    wheels = ctx.bundle.path / "wheels" if ctx.bundle is not None else None
    site = runtime.ensure_requirements(reqs, f"pack {pack.id} suite", ctx.store, ctx.python, wheels)
    checkout = ctx.materialize(manifest, base.name)
    started = time.monotonic()
    steps: list[CommitStep] = []
    for k in range(len(own) + 1):
        prefix = deps + own[:k]
        label = f"{manifest.target} {base.name} + pack {pack.id} commit {k}" if k else f"{manifest.target} {base.name}"
        tree = series.apply(checkout, prefix, ctx.store) if prefix else None
        source = tree.path if tree is not None else checkout.path
        build = obtain_build(ctx, manifest, base, prefix, label)
        ids = tuple(i for i in sel.ids if (source / upstream_tests.test_file(i)).is_file())
        if not ids:  # the selection's files arrive with a later commit: nothing to run here yet
            steps.append(CommitStep(k, own[k - 1].name if k else "", {}, True, "no selected file in this tree"))
            continue
        key = upstream_tests.tree_key(series.series_key(manifest.target, base.pin, prefix), ids)
        tests = upstream_tests.lookup_tree(ctx.store, key) or upstream_tests.export_tree(source, ids, key, ctx.store,
                                                                                         label)
        env = runtime.with_library_path(dict(os.environ), site)
        env.update({"PYTHONPATH": os.pathsep.join([str(build.site), *(str(b.site) for b in extra_builds),
                                                   *([str(site)] if site else []), str(ctx.root / "repros")]),
                    "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1", upstream_tests.ROOT_ENV: str(tests),
                    **upstream_tests.PYTEST_ENV})
        env.pop(upstream_tests.SUITE_STATE_ENV, None)
        cmd = [ctx.python, str(ctx.root / upstream_tests.SUITE_RUNNER), "--distribution", manifest.distribution,
               "--module", manifest.import_names[0], "--requires", "cpu", "--timeout", str(timeout_s),
               *(a for node in sel.deselected for a in ("--deselect", node)), "--", *ids]
        with ui.status(f"pack {pack.id}: the suite's CPU part at {label}"):
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace",
                                  timeout=timeout_s + 60)
        details = None
        for line in proc.stdout.splitlines():
            name, _, rest = line.partition(" ")
            if name in ("UPSTREAM_SUITE_RECORDED", "UPSTREAM_SUITE_INCOMPLETE"):
                details = (name, json.loads(rest))
        if details is None:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ConfigError(f"pack {pack.id}: the suite runner printed no verdict at {label} "
                              f"(exit {proc.returncode}): {tail[0]}")
        cases = dict(details[1].get("cases") or {})
        broken: tuple[str, ...] = ()
        if steps:
            broken = tuple(c.id for c in suite.compare(steps[0].cases, cases, {}, claims_fix=False).patched_only)
        steps.append(CommitStep(k, own[k - 1].name if k else "", cases, details[0] == "UPSTREAM_SUITE_RECORDED",
                                details[1].get("summary"), broken))
    return CommitCheck(pack.id, base.name, tuple(steps), round(time.monotonic() - started, 1))
