"""A pack's lanes, end to end: base -> series -> build -> import check -> reproducer -> receipt.

A lane (declared in tracking.toml) names a base, whether the pack's series is
applied, and the sentinel the reproducer must print. ``prepare`` turns a lane
into an installed build; ``execute`` runs the reproducer against it and writes
the receipt; ``run_pack`` does both for every lane of a pack and updates
tracking.toml. Builds come either from this machine (materialize, apply, build)
or from an offline bundle (``bundle`` is given), never a mix.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import __version__
from harness.base import fingerprint, guard, ui
from harness.base.hashing import sha256_file
from harness.errors import BuildError, ConfigError, Exit, WriteError
from harness.lane import (
    builds,
    declaration,
    host_builds,
    kernel_cache,
    kernel_key,
    loaded,
    receipts,
    runs,
    runtime,
    series,
    suite,
    upstream_tests,
)
from harness.lane.context import Context
from harness.lane.receipts import Verdict
from harness.lane.tracking import Lane, Pack, sentinels
from harness.upstream import git, pins


@dataclass(frozen=True)
class Prepared:
    pack: Pack
    lane: Lane
    manifest: pins.Manifest
    base: pins.Base
    patches: tuple[series.Patch, ...]
    build: builds.Build
    imported: dict[str, str]
    baseline: builds.Build | None = None  # the unpatched build, for lanes with ``with_baseline``
    extras: tuple[builds.Build, ...] = ()
    runtime_site: Path | None = None  # runtime_requires of the base and of the extra builds' bases, for this lane only
    runtime_requires: tuple[str, ...] = ()  # what runtime_site holds
    tests_tree: Path | None = None  # upstream-test lanes: the upstream's test files (the pack's series applied)
    tests_tree_key: str | None = None
    python: str | None = None  # the interpreter the lane runs with, when not the context's (see lane_python)

    @property
    def path_entries(self) -> list[str]:
        """PYTHONPATH entries of this lane, in order: the build, its extra builds, the runtime deps."""
        return ([str(self.build.site)] + [str(b.site) for b in self.extras]
                + ([str(self.runtime_site)] if self.runtime_site else []))

    @property
    def build_keys(self) -> tuple[str, ...]:
        """The keys of every build the lane's reproducer can import: its own, its baseline, its extra builds."""
        return (self.build.key, *([self.baseline.key] if self.baseline is not None else []),
                *(b.key for b in self.extras))

    @property
    def label(self) -> str:
        return f"{self.manifest.target} {self.base.name}{' + series' if self.lane.patched else ''}"


@dataclass(frozen=True)
class LaneResult:
    pack: str
    lane: str
    verdict: Verdict
    reason: str
    exit: Exit
    receipt: receipts.Receipt | None = None


def series_for(ctx: Context, pack: Pack, base: str | None = None) -> list[series.Patch]:
    """Every patch a patched lane of ``pack`` on ``base`` applies (see ``series.series_for``); under a stack check
    (``Options.stack``), a stacked pack's lanes on the stack's base apply the whole stack."""
    name = base or pack.base or ctx.manifest(pack.target).default_base
    stack = ctx.options.stack
    if stack is not None and stack.target == pack.target and stack.base == name and pack.id in stack.packs:
        return list(stack.patches)
    return series.series_for(ctx.tracking, ctx.root, pack, name)


def _build_key(ctx: Context, manifest: pins.Manifest, base: pins.Base, patches: list[series.Patch]) -> str:
    return builds.build_key(series.series_key(manifest.target, base.pin, patches), manifest,
                            builds.interpreter_version(ctx.python))


def obtain_build(ctx: Context, manifest: pins.Manifest, base: pins.Base, patches: list[series.Patch],
                 label: str) -> builds.Build:
    """The build of ``base`` + ``patches``: from the bundle when running offline, else made (or reused) here."""
    key = _build_key(ctx, manifest, base, patches)
    if ctx.bundle is not None:
        return ctx.bundle.build_for(key, manifest, ctx.store, label, ctx.python)
    checkout = ctx.materialize(manifest, base.name)
    ui.note_once(f"base {manifest.target} {base.name}: {checkout.path} (git {checkout.commit[:12]})")
    if patches:
        tree = series.apply(checkout, patches, ctx.store)
        # once per base and series: pack 07's 31 patched lanes share one build and printed it 31 times
        ui.note_once(f"applied {len(patches)} patch(es) on {manifest.target} {base.name}: "
                     + ", ".join(f"{p.pack}/{p.name}" for p in patches))
        tree_path, tree_key = tree.path, tree.key
    else:
        tree_path, tree_key = checkout.path, series.series_key(manifest.target, base.pin, [])
    build = builds.build(tree_path, tree_key, manifest, ctx.store, label, ctx.python)
    assert build.key == key
    return build


@dataclass(frozen=True)
class SuiteSource:
    """What a suite selection is derived from: the base's tree with the pack's series applied."""

    pack: Pack
    base: str
    tree: Path
    own: tuple[series.Patch, ...]  # the pack's own patches (a dependency's are under it, not selected for)

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return [(p.name, p.path.read_text(encoding="utf-8", errors="replace")) for p in self.own]

    def derive(self, dropped: dict[str, int] | None = None) -> list[suite.Derived]:
        return suite.derive(self.tree, suite.touched_files(self.pairs), dropped=dropped)

    def added(self) -> dict[str, set[str]]:
        return suite.added_tests(self.pairs)


def suite_source(ctx: Context, pack: Pack, base_name: str) -> SuiteSource:
    """The tree a suite selection of ``pack`` at ``base_name`` is derived from (materialized, series applied)."""
    manifest = ctx.manifest(pack.target)
    base = manifest.base(base_name)
    patches = series_for(ctx, pack, base.name)
    own = tuple(p for p in patches if p.pack == pack.id)
    if not own:
        raise ConfigError(f"pack {pack.id}: no series at {base.name}; a suite is derived from what a series touches")
    checkout = ctx.materialize(manifest, base.name)
    return SuiteSource(pack, base.name, series.apply(checkout, patches, ctx.store).path, own)


def tests_tree_key(manifest: pins.Manifest, base: pins.Base, patches: list[series.Patch], lane: Lane) -> str:
    return upstream_tests.tree_key(series.series_key(manifest.target, base.pin, patches), lane.upstream_tests)


def obtain_tests_tree(ctx: Context, manifest: pins.Manifest, base: pins.Base, patches: list[series.Patch],
                      lane: Lane, label: str) -> Path:
    """The upstream test files an upstream-test lane runs: from the bundle offline, else exported from the
    base's tree with ``patches`` applied. ``patches`` is the pack's series on every lane, patched or not:
    the tests are the ones the series files upstream, so an unpatched lane runs them against the old code
    (a test the series adds must fail there) and a patched lane against the new."""
    key = tests_tree_key(manifest, base, patches, lane)
    if ctx.bundle is not None:
        return ctx.bundle.tests_tree_for(key, ctx.store, label)
    found = upstream_tests.lookup_tree(ctx.store, key)
    if found is not None:
        return found
    checkout = ctx.materialize(manifest, base.name)
    source = series.apply(checkout, patches, ctx.store).path if patches else checkout.path
    return upstream_tests.export_tree(source, lane.upstream_tests, key, ctx.store, label)


def lane_python(ctx: Context, bases: Sequence[pins.Base]) -> str:
    """The interpreter of a lane whose builds come from ``bases``: the context's, unless one of them has host
    builds and the builds come from a bundle; then the private environment the bootstrap installed them into
    (``harness/lane/host_builds.py``), the one place besides the interpreter's site-packages where such a package
    (TransformerEngine's core library and torch extension) is found, and one no other lane runs with."""
    hosted = [b for b in bases if b.host_builds]
    if not hosted or ctx.bundle is None:
        return ctx.python
    env = host_builds.env_dir(ctx.bundle.path.parent, builds.interpreter_version(ctx.python))
    python = host_builds.env_python(env)
    names = ", ".join(h.provides for b in hosted for h in b.host_builds)
    made_by = host_builds.creator(env)
    if made_by is None or not python.exists():
        raise BuildError(f"the lane needs the host build(s) {names}, but {env} holds none",
                         hint="start the harness through python3 -m harness.bootstrap BUNDLE -- ..., which builds "
                              "them into that environment")
    if made_by != ctx.python:
        raise BuildError(f"the lane needs the host build(s) {names}, but those in {env} were built for {made_by}, "
                         f"not {ctx.python}",
                         hint=f"start the bootstrap with {ctx.python}, which builds them again for it")
    return str(python)


def prepare(ctx: Context, pack: Pack, lane: Lane, import_check: bool = True) -> Prepared:
    manifest = ctx.manifest(pack.target)
    base = manifest.base(lane.base)
    patches = series_for(ctx, pack, base.name) if lane.patched else []
    label = f"{pack.target} {base.name}{' + pack ' + pack.id + ' series' if lane.patched else ' (baseline)'}"
    if lane.patched and not patches:
        raise ConfigError(f"pack {pack.id}: lane '{lane.name}' is patched but "
                          f"{series.series_dir(ctx.root, pack.target, pack.id, base.name).relative_to(ctx.root)}/ "
                          "holds no patch")
    build = obtain_build(ctx, manifest, base, patches, label)
    extras = []
    for target, extra_base in lane.extra_builds:
        other = ctx.manifest(target)
        xbase = other.base(extra_base)
        extras.append((other, xbase, obtain_build(ctx, other, xbase, [], f"{target} {extra_base}")))
    wheels = ctx.bundle.path / "wheels" if ctx.bundle is not None else None
    # an extra build needs its own base's runtime (mamba's tilelang) on this lane's path as well
    reqs = runtime.combine([(f"{manifest.target} {base.name}", base.runtime_requires)]
                           + [(f"{other.target} {xbase.name}", xbase.runtime_requires) for other, xbase, _ in extras]
                           + ([(f"lane {lane.name}'s upstream tests",
                                upstream_tests.pytest_requires(lane.test_requires))] if lane.upstream_tests else []))
    tests_tree = tests_key = None
    if lane.upstream_tests:
        pack_series = series_for(ctx, pack, base.name)
        tests_key = tests_tree_key(manifest, base, pack_series, lane)
        tests_tree = obtain_tests_tree(ctx, manifest, base, pack_series, lane, label)
    runtime_site = runtime.ensure_requirements(reqs, label, ctx.store, ctx.python, wheels) if import_check else None
    runtime_path = [str(runtime_site)] if runtime_site else []
    python = lane_python(ctx, [base, *(xbase for _, xbase, _ in extras)]) if import_check else ctx.python
    imported = {}
    if import_check:
        env = runtime.with_library_path(dict(os.environ), runtime_site)
        modules = list(manifest.import_names) + [m for m in _pack_modules(pack, manifest.import_names)
                                                 if m not in manifest.import_names]
        imported = builds.import_check(build, modules, python, label, extra_path=runtime_path, env=env)
        for other, _, extra in extras:
            imported.update(builds.import_check(extra, list(other.import_names), python, other.target,
                                                extra_path=runtime_path, env=env))
        ui.note_once(f"import check ok: {', '.join(imported)} from the build(s)")
    baseline = None
    if lane.with_baseline:
        twin = Lane(name=f"{lane.name}.baseline", base=lane.base, patched=False, expect=lane.expect)
        baseline = prepare(ctx, pack, twin, import_check=False).build
    return Prepared(pack, lane, manifest, base, tuple(patches), build, imported, baseline=baseline,
                    extras=tuple(b for _, _, b in extras), runtime_site=runtime_site, runtime_requires=reqs,
                    tests_tree=tests_tree, tests_tree_key=tests_key,
                    python=python if python != ctx.python else None)


def _pack_modules(pack: Pack, packages: Sequence[str]) -> list[str]:
    """Modules named by the pack's files (``src/a/b.py`` -> ``a.b``) for the import check: only those inside
    the build's ``packages`` (the manifest's import names). A pack's file outside them (an upstream test under
    ``tests/``, a setup script) is in the source tree, never in the build, so importing it would fail."""
    tops = {name.split(".")[0] for name in packages}
    mods = []
    for f in pack.files:
        if f.endswith(".py"):
            parts = Path(f).with_suffix("").parts
            if parts and parts[0] == "src":
                parts = parts[1:]
            if parts and parts[-1] != "__init__" and parts[0] in tops:
                mods.append(".".join(parts))
    return mods


def suite_state(ctx: Context, prep: Prepared, facts: kernel_key.Facts, python: str, env: dict[str, str],
                fresh: bool | None = None) -> Path:
    """The per-case progress file of a suite lane (see repros/upstream_suite.py): one per lane, test tree, build
    and what decides a case's outcome besides them (the kernel-cache key's facts: builds, runtime requirements,
    compilers, nvcc, GPUs and driver; and the lane's own interpreter), in the store. Removed first when ``fresh``
    (``$PATCHLANE_SUITE_RERUN=1``: decide every case again), or when it is not as the last lane that ran it sealed
    it (``seal_suite_state``): a line edited by hand, or written by a run whose harness was killed outright."""
    key = fingerprint.digest("suite-state", prep.pack.id, prep.lane.name, prep.tests_tree_key or "", *prep.build_keys,
                             facts.key, python, kernel_key.interpreter(python, env))
    path = ctx.store.area("suite-state") / f"{prep.pack.id}-{prep.lane.name}-{key[:16]}.jsonl"
    seal = path.with_name(path.name + ".seal")
    if fresh if fresh is not None else os.environ.get("PATCHLANE_SUITE_RERUN") == "1":
        path.unlink(missing_ok=True)
    elif path.exists() and _progress_seal(path) != _read_seal(seal):
        ui.warn(f"pack {prep.pack.id} lane {prep.lane.name}: the suite progress {path} is not as its last run sealed "
                "it (edited, or left by a harness killed outright): every case of the shard runs again")
        path.unlink(missing_ok=True)
    if not path.exists():
        seal.unlink(missing_ok=True)
    return path


def seal_suite_state(path: Path) -> None:
    """Seal the progress file as the lane that just ended left it (whatever ended it): the next run resumes from it
    only while it is exactly so."""
    if not path.exists():
        return
    seal = path.with_name(path.name + ".seal")
    scratch = seal.with_name(f".{seal.name}.{os.getpid()}")
    try:
        scratch.write_text(json.dumps(_progress_seal(path)) + "\n")
        os.replace(scratch, seal)
    except OSError as exc:  # no seal: the next run starts afresh, which costs time, never a wrong outcome
        scratch.unlink(missing_ok=True)
        ui.warn(f"cannot seal the suite progress {path}: {exc.strerror or exc}")


def _progress_seal(path: Path) -> dict:
    try:
        return {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    except OSError:
        return {}


def _read_seal(seal: Path) -> dict | None:
    try:
        data = json.loads(seal.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def run_dir_for(pack: Pack) -> Path:
    """The directory the lanes of one ``run_pack`` share (``HARNESS_RUN_DIR`` in their environment).

    Lanes that compare across builds use it: an equivalence pack's baseline lane writes its
    results there and the patched lane reads them (one build per process). A ``HARNESS_RUN_DIR``
    already set by the caller is used as is, so lanes run by separate commands can share one.
    """
    given = os.environ.get("HARNESS_RUN_DIR")
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return Path(tempfile.mkdtemp(prefix=f"{_RUN_PREFIX}{os.getpid()}-{pack.id}-"))


# What a run keeps in the temporary directory while it runs, named with its process id, so that a later run can
# tell the leftovers of a harness killed outright (SIGKILL, the OOM killer: no cleanup ran) from a live run's.
# _TMP_PREFIX: the TMPDIR of one lane's reproducer, so what it leaves there (an upstream-test runner's
# upstream-suite-* when it is killed) goes with the lane, or with the next run once this harness is gone.
_LOG_PREFIX, _RUN_PREFIX, _TMP_PREFIX = "patchlane-log-", "patchlane-run-", "patchlane-tmp-"


def sweep_stale_temp(tmp: Path | None = None,
                     prefixes: tuple[str, ...] = (_LOG_PREFIX, _RUN_PREFIX, _TMP_PREFIX)) -> list[Path]:
    """Remove this user's temporary logs and run directories (``<prefix><pid>-...`` for each of ``prefixes``)
    whose harness process is gone; return them.

    An entry whose process still exists (a concurrent run, or a reused id) is kept: never a live run's.
    """
    tmp = Path(tmp or tempfile.gettempdir())
    removed = []
    for entry in [e for prefix in prefixes for e in tmp.glob(prefix + "*")]:
        prefix = next(p for p in prefixes if entry.name.startswith(p))
        pid = entry.name[len(prefix):].split("-", 1)[0]
        try:
            if not pid.isdigit() or entry.lstat().st_uid != os.getuid() or guard.process_exists(int(pid)):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError:
            continue  # gone meanwhile, or not ours to remove
        removed.append(entry)
    return removed


def execute(ctx: Context, prep: Prepared, run_dir: Path | None = None) -> LaneResult:
    """Run the lane's reproducer against the prepared build and write its receipt."""
    pack, lane = prep.pack, prep.lane
    pinned, launched = pack.lane_script(lane), pack.lane_runner(lane)  # what the receipt pins; what runs
    if pinned is None or launched is None:  # tracking.load refuses lanes without a reproducer
        raise ConfigError(f"tracking.toml [packs.{pack.id}]: lane {lane.name} but no key 'reproducer'")
    script, runner, args = ctx.root / pinned, ctx.root / launched, list(lane.args)
    requires = pack.lane_requires(lane) or "cpu"
    if lane.minimal:  # the plain script runs unchanged under the kit that speaks the lane protocol
        args = [str(script), *lane.args]
    elif lane.domain:  # the kit runs the point script once per declared point; the receipt records the declaration
        assert pack.domain is not None  # tracking.load refuses a domain lane without pack.toml's [domain]
        args = [*lane.args, "--point-script", pinned, "--domain", pack.domain.declaration()]
    elif lane.upstream_tests:
        assert prep.tests_tree_key is not None  # prepare sets it for every upstream-test lane
        args = upstream_tests.runner_args(lane.upstream_tests, lane.expect_failed, prep.manifest.distribution,
                                          prep.manifest.import_names[0], requires, lane.timeout, prep.tests_tree_key)
        if lane.shard is not None:  # a suite lane: its shard and the recorded exclusions go before the ids
            cut = args.index("--")
            args[cut:cut] = ["--shard", f"{lane.shard[0]}/{lane.shard[1]}",
                             *(a for node in lane.deselect for a in ("--deselect", node)),
                             *suite_rank_args(lane)]
    started = receipts.utc_now()
    env = runtime.with_library_path(dict(os.environ), prep.runtime_site)
    env.update({
        "PYTHONPATH": os.pathsep.join([*prep.path_entries, str(ctx.root / "repros"),
                                       *builds.inherited_pythonpath()]),
        "PYTHONUNBUFFERED": "1",
        "HARNESS_PACK": pack.id,
        "HARNESS_LANE": lane.name,
        "HARNESS_TARGET": pack.target,
        "HARNESS_BASE": prep.base.name,
        "HARNESS_BASE_COMMIT": prep.base.commit,
        "HARNESS_PATCHED": "1" if lane.patched else "0",
        "HARNESS_BUILD_KEY": prep.build.key,
        "HARNESS_RUN_DIR": str(run_dir or run_dir_for(pack)),
    })
    if prep.baseline is not None:
        env["HARNESS_BASELINE_SITE"] = str(prep.baseline.site)
    if prep.tests_tree is not None:
        env[upstream_tests.ROOT_ENV] = str(prep.tests_tree)
        env.update(upstream_tests.PYTEST_ENV)
    if lane.nproc > 1:
        env.update(runs.MULTI_GPU_ENV)
    env.update(runs.rendezvous_env(env, lane.nproc))
    python = prep.python or ctx.python
    nccl = runs.nccl_version(python, env) if lane.nproc > 1 and requires == "cuda" else None
    ui.step(f"pack {pack.id} lane {lane.name}: {prep.label}, expecting {lane.expect}")
    # upstream suites take a GPU over (autotuning, tens of GB): one upstream-test process per GPU at a time
    # (a suite lane that declares gpu_memory_gib shares its GPU as the sweep placed it: no lock)
    exclusive_tests = lane.upstream_tests and requires == "cuda" and not (lane.suite and lane.gpu_memory_gib)
    gpus = upstream_tests.visible_gpus(env) if exclusive_tests else []
    fd, tmp_log = tempfile.mkstemp(prefix=f"{_LOG_PREFIX}{os.getpid()}-", suffix=".log")
    os.close(fd)
    try:
        env["TMPDIR"] = lane_tmp = tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{os.getpid()}-{lane.name}-")
        # every Python process of the lane records the repository files it imported (harness/lane/loaded.py)
        hook_env, hook_site = loaded.install(Path(lane_tmp), ctx.root)
    except OSError as exc:
        Path(tmp_log).unlink(missing_ok=True)
        raise WriteError.of(exc, "the reproducer's temporary directory", tempfile.gettempdir()) from None
    env.update(hook_env)
    env["PYTHONPATH"] = os.pathsep.join([str(hook_site), env["PYTHONPATH"]])
    cmd = runs.launch_command(python, lane.nproc, runner, args, Path(lane_tmp) / "rank-lines.lock")
    # The log goes once the lane is over, whatever ended it: copied into the receipt, a skip (no receipt),
    # Ctrl-C or SIGTERM (the reproducer's group is killed), a receipt that could not be written.
    try:
        kfacts = kernel_key.facts(prep.build_keys, prep.runtime_requires, ctx.python, env, ctx.store.area("memo"))
        progress = None
        if lane.suite:  # per-case progress, kept across runs of the same shard, tree, build, interpreter and GPUs
            progress = suite_state(ctx, prep, kfacts, python, env)
            env[upstream_tests.SUITE_STATE_ENV] = str(progress)
        seed = ctx.bundle.kernel_cache_seed(kfacts.key) if ctx.bundle is not None else None
        with kernel_cache.lane(ctx.store, kfacts, f"{_RUN_PREFIX}{os.getpid()}-kcache-", seed) as kcache:
            env.update(kcache.env)
            finished = False
            try:
                with upstream_tests.gpu_lock(gpus, lane.timeout, f"pack {pack.id} lane {lane.name}"):
                    # the echo keeps stack traces to their head and pytest's failure reports to one line (all
                    # of them are in the log): a bug lane prints its bug's trace, a test lane its expected failures;
                    # -v shows every line
                    echo = (runs.FOLD_TRACES if ui.verbosity < 1 else True) if ctx.echo else False
                    outcome = runs.run(cmd, env, Path(tmp_log), lane.timeout, set(sentinels(ctx.root)), echo=echo)
                finished = not outcome.timed_out and outcome.exit_code is not None and outcome.exit_code >= 0
            finally:
                # the child ended by itself: all it compiled is whole; killed (its limit, Ctrl-C, SIGTERM; its
                # process group is gone by now): only what the libraries write whole (kernel_cache.WHOLE_WRITES)
                kcache.seal(finished)
                if progress is not None:  # its lines are whole whatever ended the lane (each is written and synced)
                    seal_suite_state(progress)
        verdict, reason = outcome.verdict(lane.expect)
        if verdict == Verdict.SKIPPED:
            return LaneResult(pack.id, lane.name, verdict, reason, Exit.SKIPPED)
        where = f"pack {pack.id} lane {lane.name}"
        receipt = receipts.Receipt(
            pack=pack.id,
            title=pack.title,
            lane=lane.name,
            target=pack.target,
            base=receipts.BaseRecord.from_dict(prep.base.describe(), f"{where} base"),
            patched=lane.patched,
            patches=tuple(receipts.PatchRecord(str(p.path.relative_to(ctx.root)), p.sha256, p.upstream_status)
                          for p in prep.patches),
            build=receipts.BuildRecord.from_dict(
                prep.build.describe() | {"source": "bundle" if ctx.bundle is not None else "local"}, f"{where} build"),
            baseline_build=(receipts.BuildRecord.from_dict(prep.baseline.describe(), f"{where} baseline build")
                            if prep.baseline is not None else None),
            extra_builds=tuple(receipts.BuildRecord.from_dict(b.describe(), f"{where} extra build")
                               for b in prep.extras),
            world_size=lane.nproc,
            ranks=tuple(receipts.Host(s) for s in outcome.stamps) if lane.nproc > 1 else None,
            runtime_requires=tuple(prep.runtime_requires),
            imported=dict(prep.imported),
            reproducer=receipts.ReproducerRecord(pinned, sha256_file(script),
                                                 # an upstream-test lane's ids and test tree are its arguments
                                                 # and a domain lane's, the declaration it swept
                                                 tuple(args if lane.upstream_tests or lane.domain else lane.args),
                                                 receipts.helper_digests(ctx.root, launched),
                                                 loaded.collect(Path(hook_env[loaded.DIR_ENV]), ctx.root, runner)),
            harness=receipts.HarnessRecord(version=__version__, **_repo_state(ctx.root)),
            host=receipts.Host(outcome.stamp) if outcome.stamp is not None else None,
            expected=receipts.Sentinel(lane.expect),
            sentinels=tuple(receipts.Sentinel(name) for name, _ in outcome.sentinels),
            sentinel_details={name: details for name, details in outcome.sentinels},
            figures=tuple(receipts.Figure(f) for f in outcome.figures),
            verdict=verdict,
            reason=reason,
            exit_code=outcome.exit_code,
            timed_out=outcome.timed_out,
            timeout_s=lane.timeout,
            started=started.isoformat().replace("+00:00", "Z"),
            duration_s=outcome.duration_s,
            visible_devices=env.get("CUDA_VISIBLE_DEVICES") if requires == "cuda" else None,
            nccl=nccl,
            kernel_cache=receipts.KernelCacheRecord.from_dict(kcache.describe(), f"{where} kernel cache"),
            declaration=declaration.of(pack, lane, prep.manifest),
        )
        out_dir = ctx.receipts_dir or receipts.receipts_root(ctx.root)
        written = receipts.write(out_dir, receipt, started, Path(tmp_log), outcome.omitted_bytes)
        return LaneResult(pack.id, lane.name, verdict, reason, runs.VERDICT_EXIT[verdict], written)
    finally:
        Path(tmp_log).unlink(missing_ok=True)
        shutil.rmtree(lane_tmp, ignore_errors=True)


def suite_rank_args(lane: Lane) -> list[str]:
    """The suite runner's arguments for a lane in the upstream CI's environment: its ranks (capped there at the
    host's GPUs), the gloo ranks of a CPU run, and the cases that may not run here (the selection's [[needs]])."""
    if not lane.ranks:
        return []
    import json

    return ["--ranks", str(lane.ranks), "--cpu-ranks", str(lane.cpu_ranks),
            "--needs", json.dumps([n.as_json() for n in lane.needs], sort_keys=True)]


def _repo_state(root: Path) -> dict:
    """The repository commit the run used. A copy without .git (a GPU host) names it in PATCHLANE_REPO_COMMIT."""
    head = git.in_user_repo(root, "rev-parse", "HEAD")  # None: no git on this host
    if head is not None and head.ok:
        dirty = git.in_user_repo(root, "status", "--porcelain", "--untracked-files=no")
        return {"repo_commit": head.stdout.strip(), "repo_dirty": bool(dirty and dirty.stdout.strip())}
    return {"repo_commit": os.environ.get("PATCHLANE_REPO_COMMIT"), "repo_dirty": None,
            "repo_commit_source": "PATCHLANE_REPO_COMMIT (no .git in this copy)"}


def run_pack(ctx: Context, pack: Pack, lane_names: list[str] | None = None,
             update_tracking: bool = True, current: dict[str, receipts.Receipt] | None = None) -> list[LaneResult]:
    """Prepare and run the pack's lanes (all, or the named ones). ``current``: lanes whose latest receipt passed
    and still counts for today's inputs (the caller decides, as readiness does): each is built and import-checked
    like the rest, and answered by that receipt instead of running its reproducer again."""
    if not pack.lanes:
        return []  # the caller says so (exit NO_LANES): nothing was validated
    lanes = [pack.lane(n) for n in lane_names] if lane_names else list(pack.lanes)
    needs_gpu = any(pack.lane_requires(lane) == "cuda" for lane in lanes)
    gpus, gpu_desc = (runs.cuda_devices(ctx.python, ctx.store.area("memo") / "cuda-devices") if needs_gpu
                      else (0, "not needed"))
    # A cuda lane is built and import-checked even where it cannot run, except one in the upstream CI's
    # environment: that environment's builds (TransformerEngine's torch extension) are made on a GPU host only,
    # and its import check without them fails; on a host short of its GPUs it is skipped before it is prepared.
    unprepared = {lane.name for lane in lanes
                  if lane.from_ci and pack.lane_requires(lane) == "cuda" and gpus < lane.nproc}
    prepared = [prepare(ctx, pack, lane) for lane in lanes if lane.name not in unprepared]
    results = [LaneResult(pack.id, name, Verdict.SKIPPED,
                          f"needs {pack.lane(name).nproc} CUDA GPU(s) and the upstream CI's GPU builds; {gpu_desc}",
                          Exit.SKIPPED) for name in sorted(unprepared)]
    for stale in sweep_stale_temp():
        ui.detail(f"removed {stale}, left by a harness that was killed")
    run_dir = run_dir_for(pack)
    made_here = not os.environ.get("HARNESS_RUN_DIR")  # a directory the caller gave is the caller's to remove
    try:
        for prep in prepared:
            # a cuda lane needs one GPU per rank; a cpu lane with nproc > 1 runs its ranks on the CPU (gloo)
            need = prep.lane.nproc if pack.lane_requires(prep.lane) == "cuda" else 0
            if gpus < need:
                why = f"needs {need} CUDA GPU(s); {gpu_desc}"
                results.append(LaneResult(pack.id, prep.lane.name, Verdict.SKIPPED, why, Exit.SKIPPED))
                continue
            rec = (current or {}).get(prep.lane.name)
            if rec is not None:
                where = receipts.display_path(rec.path, ctx.root) if rec.path is not None else "?"
                results.append(LaneResult(pack.id, prep.lane.name, Verdict.PASS,
                                          f"current: {where} passed on this pin, series, declaration, reproducer "
                                          "and what it imported; not run again", Exit.OK, rec))
                continue
            result = execute(ctx, prep, run_dir)
            results.append(result)
            if update_tracking and result.receipt is not None:
                # the pack's line of tracking.toml's generated [verdicts], from every lane's latest receipt by the
                # one rule (receipts.latest_per_lane): the only thing a run writes there
                ctx.tracking.record_verdicts(lambda: verdict_lines(ctx, [pack]), pack.id)  # made again under the lock
                ctx.tracking.save()
    finally:
        if made_here:
            shutil.rmtree(run_dir, ignore_errors=True)
    return results


def verdict_lines(ctx, packs) -> dict[str, str]:
    """Per pack, its line of tracking.toml's generated ``[verdicts]``: its lanes' latest receipts under the
    checkout's ``receipts/`` by ``receipts.latest_per_lane`` (a run that writes its receipts elsewhere, with
    ``--receipts-dir``, counts once they are imported)."""
    return {pack.id: receipts.verdict_line([lane.name for lane in pack.lanes],
                                           receipts.latest_by_lane(ctx.root, pack.target, pack.id))
            for pack in packs}
