"""nox sessions: tests (tests_slow, tests_torch), lint, typecheck, sweep, suite_commits, bench_*, <target>_pack<NN>.

A pack session runs ``harness run <pack>`` in its target's lane environment: one
virtualenv per target (``.nox/lane-<target>-py<X.Y>``), shared by all of that
target's pack sessions, holding the harness and requirements/lane-<target>.txt.
Sharing matters: the megatron lane needs a CUDA build of torch (about 5 GB), and
five megatron packs each installing their own copy once filled a CI disk.
The interpreter is the manifest's ``python`` (``python3.12`` on PATH, or pyenv's) or
nox's own. The environment is installed once and again only when what it is made of
changes (``harness/lane/sessions.py: lane_env_stamp``: the interpreter, pyproject.toml, the
requirements file; kept in ``<env>/.patchlane-stamp.json``, delete it to force a reinstall).

Exit codes. A pack session run alone (``nox -s mamba_pack05``, what CI's .ci/run does) exits
with the harness's code (see ``harness --help``): 0 all lanes as expected, 3 a GPU lane was
skipped on this host, others failures. When several sessions are selected (``nox -s a b``,
``nox -t mamba``) every one runs and nox prints its summary: a session whose harness exited 3
is reported "skipped", any other non-zero code "aborted" (nox then exits 1); the harness's code
is in the "Session ... skipped/aborted: harness exit N (NAME)" line. When none of the selected pack sessions
validated anything (all exited 3 or 13), the run exits 3, not nox's 0. A session name that does not exist
(``nox -s mamba_pack99``) exits 2, naming those that do (nox's own code for it is 3, a skip's).

Tests: ``tests`` (the suite without the slow end-to-end tests, parallel workers: minutes), ``tests_slow`` (marker
``slow``), ``tests_torch`` (the tests that need torch, in the megatron lane environment).

Tags: each pack session carries its target's name and session prefix (``nox -t mamba``,
``nox -t megatron-lm`` or ``-t megatron``).
"""

from __future__ import annotations

import ast
import json
import os
import runpy
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from harness.base import settings  # noqa: E402  (stdlib-only module)
from harness.base.interpreters import find_interpreter  # noqa: E402  (stdlib-only module)
from harness.errors import Exit  # noqa: E402  (stdlib-only module)
from harness.lane.sessions import (  # noqa: E402  (stdlib-only)
    STAMP_FILE,
    heartbeat,
    lane_env_stamp,
    pack_sessions,
    stack_bases,
)

# Git bases (upstream main/dev): the same defaults as the CLI (harness/base/settings.py): $PATCHLANE_GIT_MIRRORS, else
# ../shared/mirrors beside the clone when it exists, else GitHub. Exported so the lane runs see the same choice.
settings.export_mirrors(ROOT)

nox.options.reuse_venv = "yes"
nox.options.sessions = ["lint", "typecheck", "tests"]


# The harness installed editable as a path in a .pth file (setuptools' "compat" mode), not its default import hook:
# that hook's module runs at the start of every Python process of the environment (tens of milliseconds each; the
# suite and a lane start thousands of them: guards, probes, reproducers).
def _editable(extra: str = "") -> list[str]:
    return ["--config-settings", "editable_mode=compat", "-e", f".{extra}"]


# pytest's options for the suites: skip reasons shown (-rs), one worker per core (pytest-xdist, pinned in
# pyproject.toml's "test" extra; each worker builds the session-scoped fixtures once).
PYTEST = ["-q", "-rs", "-n", "auto"]


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite but its slow end-to-end tests ('tests_slow'): about 5 min on 2 idle cores, 9 in CI.

    Measured 2026-12-07: pytest -n 2 took 269 s on an idle 2-core host; the whole session took 548 s in CI, with a
    chain of pack sessions running beside it."""
    session.install(*_editable("[test]"))
    session.run("pytest", *PYTEST, "-m", "not slow and not serial and not slurm", *session.posargs)
    # the tests of process-wide faults (marker 'serial'), in one plain process: no worker thread to take a signal.
    # Only their files are collected: collecting all of tests/ again (every module imported, its asserts rewritten)
    # took 2 minutes on a loaded 2-core host for 2 tests of 1 s each. -v names each test as it starts.
    session.run("pytest", "-v", "-rs", "-p", "no:xdist", "-m", "serial and not slow", *_serial_files(),
                *session.posargs)


@nox.session(default=False)
def tests_slurm(session: nox.Session) -> None:
    """The tests against a real single-node Slurm: 'sweep --slurm' submits, a task is cancelled and resubmitted."""
    session.install(*_editable("[test]"))
    session.run("pytest", "-q", "-rs", "-p", "no:xdist", "-m", "slurm", "tests/test_slurm.py", *session.posargs)


@nox.session(default=False)
def tests_slow(session: nox.Session) -> None:
    """The slow end-to-end tests (marker 'slow': real pinned artefacts, nox sessions, scans of this repository)."""
    session.install(*_editable("[test]"))
    session.run("pytest", *PYTEST, "-m", "slow and not serial", *session.posargs)
    session.run("pytest", "-v", "-rs", "-p", "no:xdist", "-m", "slow and serial", *_serial_files(),
                *session.posargs, success_codes=[0, 5])  # 5: none collected (no test is both today)


def _serial_files() -> list[str]:
    """The files of the tests marked 'serial' (tests/conftest.py's SERIAL node ids), read without importing it."""
    tree = ast.parse((ROOT / "tests" / "conftest.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SERIAL" for t in node.targets):
            return sorted({str(nodeid).split("::", 1)[0] for nodeid in ast.literal_eval(node.value)})
    raise SystemExit("noxfile: tests/conftest.py has no SERIAL tuple")


# The tests that import torch (pytest.importorskip: they skip in 'tests', whose environment has none).
TORCH_TESTS = ["tests/test_contract22.py", "tests/test_mamba_repros.py", "tests/test_packs10_11.py",
               "tests/test_repro_kit.py", "tests/test_timing_helper.py"]
TORCH_TARGET = "megatron-lm"  # its lane environment holds the lanes' torch (requirements/lane-megatron-lm.txt)


def _test_pins() -> list[str]:
    """pytest and pytest-xdist at the versions of pyproject.toml's "test" extra."""
    with open(ROOT / "pyproject.toml", "rb") as fh:
        extra = tomllib.load(fh)["project"]["optional-dependencies"]["test"]
    return [pin for pin in extra if pin.startswith("pytest")]


@nox.session(default=False, venv_backend="none")
def tests_torch(session: nox.Session) -> None:
    """The tests that need torch, in the megatron lane environment (its torch, installed once for lanes and tests).

    Run by that environment's interpreter: the lanes' own torch (PyPI's CUDA build, run on the CPU here). pytest
    goes into a directory of its own beside it
    (.nox/tests_torch-pytest), so the lane environment stays exactly what its stamp says. CI runs this while the
    megatron lane environment exists."""
    spec = next(s for s in pack_sessions(ROOT) if s.target == TORCH_TARGET)
    python = _lane_env(session, spec) / "bin" / "python"
    extra = session.cache_dir.resolve().parent / "tests_torch-pytest"
    want = sorted(_test_pins())
    stamp = extra / ".pins.json"
    if not stamp.is_file() or json.loads(stamp.read_text()) != want:
        session.run(str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--upgrade",
                    "--target", str(extra), *want, external=True)
        stamp.write_text(json.dumps(want))
    # torch's modules compiled once into the harness's bytecode cache, not by each worker (harness/base/settings.py)
    env = {"PYTHONPATH": str(extra), **settings.bytecode_env(settings.cache_home(), root=ROOT)}
    session.run(str(python), "-c", "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())",
                env=env, external=True)
    session.run(str(python), "-m", "pytest", *PYTEST, *TORCH_TESTS, *session.posargs, env=env, external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the harness, tests, reproducers, benchmarks and this file."""
    session.install("ruff==0.17.6")
    session.run("ruff", "check", "harness", "tests", "repros", "bench", "tools", "noxfile.py")


@nox.session(default=False)
def bench_overhead(session: nox.Session) -> None:
    """What the harness adds to a lane: bare reproducer vs warm harness run, bootstrap and nox session (one run)."""
    session.install(*_editable("[test]"))  # nox itself: the benchmark times a pack session of a fake repository
    session.run("python", "bench/overhead.py", *session.posargs)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy over the harness, with its dependencies installed so their own type hints are checked against."""
    session.install(*_editable("[lint]"))  # mypy (and ruff) at the versions pinned in pyproject.toml
    session.run("mypy", "harness", "--ignore-missing-imports")


def _lane_env(session: nox.Session, spec) -> Path:
    """Create and install the target's shared virtualenv when its stamp changed; return its directory."""
    python = find_interpreter(spec.python) if spec.python else sys.executable
    if python is None:
        why = (f"{spec.name} needs python{spec.python} (upstream/{spec.target}.toml sets python = "
               f"\"{spec.python}\"): none on PATH runs, nor under pyenv's versions/; its lane environment cannot be "
               f"installed: exit {int(Exit.BUILD)} (BUILD)")
        if _selected(session) > 1:
            session.error(why)  # let nox run the others and print its summary
        session.warn(why)
        raise SystemExit(int(Exit.BUILD))  # alone: 1 would read as a verdict mismatch
    version = spec.python or "{}.{}".format(*sys.version_info[:2])
    envdir = session.cache_dir.resolve().parent / spec.lane_env(version)
    stamp_path = envdir / STAMP_FILE
    stamp = lane_env_stamp(ROOT, spec, python, envdir)
    try:
        old = json.loads(stamp_path.read_text())
    except (OSError, ValueError):
        old = None
    if old == stamp and (envdir / "bin" / "harness").exists():
        session.log(f"{envdir.name}: up to date ({STAMP_FILE} unchanged), nothing to install")
        return envdir
    stamp_path.unlink(missing_ok=True)  # an install that stops half-way leaves no stamp behind
    # the interpreter the venv was made with, kept apart: a failed install must not cost the venv itself
    made_with = envdir / ".patchlane-interpreter.json"
    interpreter = json.dumps(stamp["interpreter"])
    if not (envdir / "bin" / "python").exists() or not made_with.is_file() or made_with.read_text() != interpreter:
        session.log(f"creating the {spec.target} lane environment {envdir} (shared by its pack sessions)")
        session.run(python, "-m", "venv", "--clear", str(envdir), external=True)
        made_with.write_text(interpreter)
    # pip's own lines (what it collects and downloads, with sizes; a bar on a terminal) and a heartbeat with the
    # environment's size every 15 s: the megatron one is about 5 GB, minutes of download with no line otherwise
    # --no-compile: pip would byte-compile every module of torch, triton, sympy ... (tens of thousands of files, a
    # good part of a 2-core host's install time); Python compiles the ones a lane imports when it first does
    pip = (str(envdir / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--no-compile")
    with heartbeat(f"installing the harness into {envdir.name}", grows=envdir):
        session.run_install(*pip, *_editable(), external=True)
    if spec.requirements:
        with heartbeat(f"installing {spec.requirements} into {envdir.name}", grows=envdir):
            session.run_install(*pip, "-r", spec.requirements, external=True)
    stamp_path.write_text(json.dumps(stamp, indent=1, sort_keys=True) + "\n")
    return envdir


def _selected(session: nox.Session) -> int:
    """How many sessions this nox invocation runs (1 when nox does not say)."""
    try:
        return len(session._runner.manifest)  # nox has no public accessor for the queue
    except (AttributeError, TypeError):
        return 1


def _pack_sessions_left(session: nox.Session) -> int:
    """How many pack sessions nox still has to run after this one (0 when nox does not say)."""
    queue = getattr(getattr(getattr(session, "_runner", None), "manifest", None), "_queue", None) or []
    return sum(1 for runner in queue if getattr(runner, "name", None) in _PACK_NAMES)


# What this nox invocation's pack sessions came to, by exit name: several sessions that all skipped validated
# nothing, and must not end in nox's 0 (see _pack_session).
_OUTCOMES: dict[str, int] = {}


def _pack_session(spec):
    def run_pack(session: nox.Session) -> None:
        if spec.error:  # its pack.toml does not read: this session fails in one line, the others run
            session.error(spec.error)
        started = time.monotonic()
        envdir = _lane_env(session, spec)
        env = {"VIRTUAL_ENV": str(envdir), "PATH": os.pathsep.join([str(envdir / "bin"), os.environ["PATH"]])}
        with tempfile.TemporaryDirectory() as tmp:
            result = Path(tmp) / "result.json"
            session.run(str(envdir / "bin" / "harness"), "run", spec.pack, "--result-file", str(result),
                        *session.posargs, env=env, external=True, success_codes=[int(c) for c in Exit])
            code = Exit(json.loads(result.read_text())["exit"]) if result.exists() else Exit.USAGE
        _OUTCOMES[code.name] = _OUTCOMES.get(code.name, 0) + 1
        # every outcome with its time (nox times only the sessions it calls successful: a skip's 618 s went unsaid)
        print(f"nox > {spec.name}: harness exit {int(code)} ({code.name}) in {time.monotonic() - started:.0f} s",
              file=sys.stderr, flush=True)
        several = _selected(session) > 1
        if several and not _pack_sessions_left(session) and set(_OUTCOMES) <= {Exit.SKIPPED.name, Exit.NO_LANES.name}:
            # the last of several pack sessions, and none validated anything: not nox's 0 ("all fine")
            ran = sum(_OUTCOMES.values())
            session.warn(f"none of the {ran} pack sessions validated anything on this host "
                         f"({', '.join(f'{n} {name}' for name, n in sorted(_OUTCOMES.items()))}): exit "
                         f"{int(Exit.SKIPPED)} (SKIPPED)")
            raise SystemExit(int(Exit.SKIPPED))
        if code == Exit.OK:
            return
        why = f"harness exit {int(code)} ({code.name})"
        if several:  # let nox run the others and print its summary
            if code == Exit.SKIPPED:
                session.skip(why)
            session.error(why)
        session.warn(f"{spec.name}: {why}")
        raise SystemExit(int(code))  # alone: keep the harness's exit code (nox would fold SKIPPED into 0)

    run_pack.__doc__ = spec.description
    # venv_backend="none": the session's environment is the target's shared one (_lane_env), not its own.
    return nox.session(name=spec.name, venv_backend="none", default=False, tags=spec.tags)(run_pack)


@nox.session(default=False)
def sweep(session: nox.Session) -> None:
    """Every selected lane of every pack at once on this host, each target's in its lane environment (harness sweep).

    Posargs select: ``nox -s sweep -- 05 09``, ``-- --target mamba``, ``-- --plan``. Each target's lanes run in
    its own lane environment. The session
    fails on any exit but 0 and 3 (lanes skipped for want of GPUs), naming the harness's code."""
    session.install(*_editable())  # the sweep itself needs only the harness; each lane runs in its target's env
    with tempfile.TemporaryDirectory() as tmp:
        plan = Path(tmp) / "plan.json"
        with plan.open("w") as fh:
            session.run("harness", "sweep", "--plan", "--json", "--quiet", *_selection(session.posargs), stdout=fh)
        targets = {t["target"] for t in json.loads(plan.read_text())["tasks"] if t["state"] == "run"}
    specs = {spec.target: spec for spec in pack_sessions(ROOT)}
    pythons = [f"--lane-python={target}={_lane_env(session, specs[target]) / 'bin' / 'python'}"
               for target in sorted(targets)]
    # skipped GPU lanes on a CPU host are not a failure of the session (the sweep's summary names them)
    session.run("harness", "sweep", *pythons, *session.posargs, success_codes=[int(Exit.OK), int(Exit.SKIPPED)])


@nox.session(default=False)
def refresh(session: nox.Session) -> None:
    """Every active pack re-decided at upstream's new heads (``harness refresh``; see docs/refresh.md).

    Posargs pass on (``nox -s refresh -- --target mamba --to <ref> --propose``). Bug lanes run in their target's lane
    environment, made when missing."""
    session.install(*_editable())
    chosen = [a.split("=", 1)[1] for a in session.posargs if a.startswith("--target=")]
    chosen += [b for a, b in zip(session.posargs, session.posargs[1:], strict=False) if a == "--target"]
    specs = [spec for spec in pack_sessions(ROOT) if not chosen or spec.target in chosen]
    pythons = [] if "--no-lanes" in session.posargs else \
        [f"--lane-python={spec.target}={_lane_env(session, spec) / 'bin' / 'python'}"
         for spec in {s.target: s for s in specs}.values()]
    session.run("harness", "refresh", *pythons, *session.posargs, success_codes=[int(Exit.OK), int(Exit.APPLY)])


@nox.session(venv_backend="none", default=False)
def suite_commits(session: nox.Session) -> None:
    """Each commit of a PR series against the CPU part of its recorded upstream suite (harness suite commits).

    Every commit of the PR series with a recorded suite (``suites/NN/BASE.toml``; posargs: pack ids, default all),
    applied in order on the filing base: the suite's CPU part at each vs the base (``harness suite commits``), in
    each target's lane environment. Fails on a commit that breaks a case that passes at the base."""
    specs = {spec.pack: spec for spec in pack_sessions(ROOT)}
    packs = session.posargs or sorted({p.parent.name for p in (ROOT / "suites").glob("*/*.toml")})
    by_target: dict[str, list[str]] = {}
    for pack in packs:
        if pack not in specs:
            session.error(f"suite_commits: no pack {pack} in tracking.toml")
        by_target.setdefault(specs[pack].target, []).append(pack)
    for _target, chosen in sorted(by_target.items()):
        envdir = _lane_env(session, specs[chosen[0]])
        env = {"VIRTUAL_ENV": str(envdir), "PATH": os.pathsep.join([str(envdir / "bin"), os.environ["PATH"]])}
        session.run(str(envdir / "bin" / "harness"), "suite", "commits", *chosen, env=env, external=True)


@nox.session(venv_backend="none", default=False)
def attached_scripts(session: nox.Session) -> None:
    """The scripts the bodies under docs/filings attach, each run alone (``harness body --scripts``).

    Posargs: pack ids, default every pack of every target. Each runs with ``python -I`` of the pack's lane
    environment, a plain tree of the filing base on its path and nothing of this repository, on the CPU. CI runs it
    while the lane environment exists."""
    specs = {spec.pack: spec for spec in pack_sessions(ROOT)}
    packs = session.posargs or sorted(specs)
    by_target: dict[str, list[str]] = {}
    for pack in packs:
        if pack not in specs:
            session.error(f"attached_scripts: no pack {pack} in tracking.toml")
        by_target.setdefault(specs[pack].target, []).append(pack)
    for _target, chosen in sorted(by_target.items()):
        envdir = _lane_env(session, specs[chosen[0]])
        env = {"VIRTUAL_ENV": str(envdir), "PATH": os.pathsep.join([str(envdir / "bin"), os.environ["PATH"]])}
        session.run(str(envdir / "bin" / "harness"), "body", "--scripts", *chosen, env=env, external=True)


@nox.session(default=False)
def bench_sweep(session: nox.Session) -> None:
    """Benchmark: serial lanes against harness sweep, with empty and warm kernel caches, in one run (bench/sweep.py).

    Posargs go to it: ``-- --set cpu-2targets``. Each target's lanes run in its own lane environment, as in 'sweep'."""
    session.install(*_editable())
    sets = runpy.run_path(str(ROOT / "bench" / "sweep.py"))["SETS"]
    args = list(session.posargs)
    chosen = [a for a in args if ":" in a and not a.startswith("-")]
    chosen += [lane for i, a in enumerate(args[:-1]) if a == "--set" for lane in sets.get(args[i + 1], [])]
    chosen += [lane for a in args if a.startswith("--set=") for lane in sets.get(a.split("=", 1)[1], [])]
    target_of = {spec.pack: spec for spec in pack_sessions(ROOT)}
    specs = {target_of[c.split(":")[0]].target: target_of[c.split(":")[0]] for c in chosen
             if c.split(":")[0] in target_of}
    pythons = [f"--lane-python={target}={_lane_env(session, spec) / 'bin' / 'python'}"
               for target, spec in sorted(specs.items())]
    session.run("python", "bench/sweep.py", *pythons, *args)


def _selection(posargs: list[str]) -> list[str]:
    """The posargs that choose lanes (what the plan needs), without --json or --plan (the session adds its own)."""
    return [a for a in posargs if a not in ("--json", "--plan")]


_PACK_NAMES = {spec.name for spec in pack_sessions(ROOT)}
for _spec in pack_sessions(ROOT):
    globals()[_spec.name] = _pack_session(_spec)


def _stack_session(spec):
    def stack(session: nox.Session) -> None:
        envdir = _lane_env(session, spec)
        env = {"VIRTUAL_ENV": str(envdir), "PATH": os.pathsep.join([str(envdir / "bin"), os.environ["PATH"]])}
        harness = str(envdir / "bin" / "harness")
        given = [a for a in session.posargs if a.startswith("--base")]
        bases = [None] if given else stack_bases(ROOT, spec.target)
        for base in bases:
            where = ["--base", base] if base else []
            out = ["-o", str(ROOT / "dist" / "stack" / spec.target / (base or "default"))]
            session.run(harness, "stack", "build", spec.target, *where, *out, *session.posargs, env=env,
                        external=True)
            # on this host the CPU lanes; a GPU host runs the rest (docs/stack.md)
            session.run(harness, "stack", "check", spec.target, *where, "--cpu", *session.posargs, env=env,
                        external=True)

    stack.__doc__ = (f"{spec.target}: its carried packs built as one wheel per base with carried packs, and their "
                     "CPU lanes run on it (harness stack; posargs pass on)")
    return nox.session(name=f"stack_{spec.target.replace('-', '_')}", venv_backend="none", default=False)(stack)


for _spec in {s.target: s for s in pack_sessions(ROOT)}.values():
    globals()[f"stack_{_spec.target.replace('-', '_')}"] = _stack_session(_spec)


def _requested_sessions(argv: list[str]) -> list[str]:
    """The session names given on nox's command line (-s/-e/--session(s) NAME..., --sessions=NAME) and $NOXSESSION."""
    names: list[str] = []
    taking = False
    for arg in argv:
        if arg == "--":
            break
        if arg in ("-s", "-e", "--session", "--sessions"):
            taking = True
        elif arg.startswith(("--session=", "--sessions=")):
            names += arg.split("=", 1)[1].split(",")
            taking = False
        elif arg.startswith("-"):
            taking = False
        elif taking:
            names += arg.split(",")
    if not names and os.environ.get("NOXSESSION"):
        names = os.environ["NOXSESSION"].split(",")
    return [n for n in names if n]


def _refuse_unknown_sessions() -> None:
    """nox exits 3 ("Sessions not found") for a typo, the code of a pack session whose GPU lanes were skipped: a
    name that no session has is bad input (exit 2, USAGE) here, named, with the pack sessions that do exist."""
    known = set(nox.registry.get())
    unknown = [n for n in _requested_sessions(sys.argv[1:]) if n not in known and n.split("(", 1)[0] not in known]
    if unknown:
        packs = " ".join(sorted(_PACK_NAMES))
        print(f"nox: no session named {', '.join(unknown)} (pack sessions: {packs}; 'nox -l' lists every session)",
              file=sys.stderr)
        raise SystemExit(int(Exit.USAGE))


_refuse_unknown_sessions()
