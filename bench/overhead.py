"""What the harness adds to a lane: the bare reproducer vs a warm ``harness run``, bootstrap and nox session.

    python bench/overhead.py                       # a small fake pack built here (no download of a real base)
    python bench/overhead.py --no-nox              # ... without the nox rows (no virtualenv, no index needed)
    python bench/overhead.py --pack 13 --lane retire-0.1.15 --python python3.12   # a real lane of this repo
    python3 bench/overhead.py --pack 09 --lane regression-0.8.5 --bundle dist/bundle-09.tar.xz --python python3 --no-nox

Everything is measured in one run, on one host, warm: each way of running the lane is run
once untimed first (builds, runtime sites, import checks and lane environments exist after
that), then ``--rounds`` times in turn, and the medians are compared. "bare" is exactly the
command and environment the harness gives the reproducer (caught once by a stand-in
interpreter that records them, then replayed without the harness); "harness" is
``python -m harness run PACK --lane LANE``, "bootstrap" the same through
``python -m harness.bootstrap BUNDLE --`` (with a real pack and ``--bundle``, only that one: a
GPU host has no network to build with), "nox" ``nox -s <session> -- --lane LANE``. Every
timed run must end as the lane expects (exit 0), else the benchmark stops. Receipts go to a
temporary directory and tracking.toml is not touched (``--no-tracking``).

The fake pack (default): target ``fake`` with one overlay base built here from a tiny sdist,
a CPU lane whose reproducer calls the package, prints its verdict and sleeps ``--work``
seconds in place of real kernel work, and the same lane marked ``requires = "cuda"``: on a
host without a GPU that lane is skipped after its build, import check and CUDA probe, which
is the whole cost of a warm ``nox -s mamba_pack05`` on a CPU host (the "nothing to do" rows).
It needs no network except for the nox rows (the lane environment installs the harness's
dependencies once, from the package index).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from harness.base.store import default_root  # noqa: E402  (standard library only)

REPRO = textwrap.dedent('''\
    import sys, time
    import _lane

    _lane.stamp("fakepkg", "fakepkg")
    from fakepkg import scale
    got = scale([1.0, 2.0], [3.0, 4.0])
    time.sleep(float(sys.argv[1]))  # stands for the reproducer's real work
    _lane.verdict("BUG_ABSENT" if got == [3.0, 8.0] else "BUG_REPRODUCED", got=got)
''')

# Records the reproducer's command, environment and directory, then runs it: the harness is
# given this as --python once, so "bare" replays exactly what the harness started.
CAPTURE = textwrap.dedent('''\
    #!/bin/sh
    case "$1" in
      *.py) "{python}" -c 'import json, os, sys; json.dump({{"argv": sys.argv[2:], "env": dict(os.environ),
    "cwd": os.getcwd()}}, open(sys.argv[1], "w"))' "{out}" "$@" ;;
    esac
    exec "{python}" "$@"
''')


def _sdist(dest: Path) -> Path:
    files = {
        "fakepkg-1.0/PKG-INFO": "Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.0\n",
        "fakepkg-1.0/src/fakepkg/__init__.py": "def scale(xs, w):\n    return [x * wi for x, wi in zip(xs, w)]\n",
    }
    path = dest / "fakepkg-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tf.addfile(info, io.BytesIO(text.encode()))
    return path


def fake_repo(root: Path, work: float, with_nox: bool) -> None:
    """A patch-lane repository with one fake target and one pack (lanes ``cpu`` and ``gpu``)."""
    (root / "upstream").mkdir(parents=True)
    (root / "repros" / "fake").mkdir(parents=True)
    shutil.copy(REPO / "repros" / "_lane.py", root / "repros" / "_lane.py")
    (root / "repros" / "fake" / "pack01.py").write_text(REPRO)
    sdist = _sdist(root.parent)
    (root / "upstream" / "fake.toml").write_text(textwrap.dedent(f'''\
        target = "fake"
        repo = "https://example.invalid/fake"
        distribution = "fakepkg"
        import_names = ["fakepkg"]
        build = "overlay"
        default_base = "1.0"

        [bases."1.0"]
        version = "1.0"
        commit = "{"a" * 40}"
        role = "benchmark pin"

        [bases."1.0".artifact]
        kind = "sdist"
        filename = "{sdist.name}"
        url = "{sdist.as_uri()}"
        sha256 = "{hashlib.sha256(sdist.read_bytes()).hexdigest()}"
    '''))
    lanes = "".join(textwrap.dedent(f'''
        [[packs.01.lanes]]
        name = "{name}"
        base = "1.0"
        patched = false
        requires = "{requires}"
        expect = "BUG_ABSENT"
        args = ["{work}"]
        timeout = 600
    ''') for name, requires in (("cpu", "cpu"), ("gpu", "cuda")))
    (root / "tracking.toml").write_text(textwrap.dedent('''\
        schema = 1

        [packs.01]
        title = "benchmark pack"
        target = "fake"
        kind = "regression-guard"
        state = "ready"
        files = ["src/fakepkg/__init__.py"]
        depends_on = []
        requires = "cpu"
        base = "1.0"
        reproducer = "repros/fake/pack01.py"
    ''') + lanes)
    if with_nox:  # the noxfile builds its sessions from this root, and installs the harness from it
        shutil.copy(REPO / "noxfile.py", root / "noxfile.py")
        shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
        shutil.copytree(REPO / "harness", root / "harness", ignore=shutil.ignore_patterns("__pycache__"))


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, codes: tuple[int, ...] = (0,),
        must_print: str | None = None) -> tuple[float, float, int]:
    """Run ``cmd``: its wall time, CPU time (user + sys, children included) and exit code.

    An exit code not in ``codes``, or ``must_print`` not printed as a line's first word, stops the benchmark.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in codes or (must_print and f"\n{must_print} " not in "\n" + proc.stdout):
        sys.exit(f"bench: {' '.join(cmd)} exited {proc.returncode}"
                 f"{f' without printing {must_print}' if must_print else ''}:\n{proc.stdout[-3000:]}")
    return took, cpu, proc.returncode


def nox_env() -> dict[str, str]:
    """This environment without the variables of an enclosing nox session."""
    return {k: v for k, v in os.environ.items() if not k.startswith("NOX_")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pack", help="measure this pack of the repository instead of the fake one")
    ap.add_argument("--lane", help="its lane (required with --pack; one process, nproc = 1)")
    ap.add_argument("--python", default=None, help="lane interpreter (default: the nox lane environment's, "
                                                    "or this one with --no-nox)")
    ap.add_argument("--bundle", type=Path, help="also run through 'python -m harness.bootstrap BUNDLE'")
    ap.add_argument("--no-nox", action="store_true", help="leave out the nox rows")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", type=float, default=1.0, help="fake reproducer: seconds of stand-in work")
    args = ap.parse_args(argv)
    if bool(args.pack) != bool(args.lane):
        ap.error("--pack and --lane go together")

    scratch = Path(tempfile.mkdtemp(prefix="patchlane-bench-"))
    receipts = scratch / "receipts"
    common = ["--no-tracking", "--receipts-dir", str(receipts), "--quiet"]
    rows: dict[str, list[float]] = {}
    try:
        if args.pack:
            root, pack, lane, session = REPO, args.pack, args.lane, None
            home = os.environ.get("PATCHLANE_HOME")
            env = dict(os.environ)
        else:
            root, pack, lane = scratch / "repo", "01", "cpu"
            fake_repo(root, args.work, not args.no_nox)
            home = str(scratch / "cache")
            env = dict(os.environ, PATCHLANE_HOME=home)
            session = "fake_pack01"
        if args.pack and not args.no_nox:
            from harness.lane.sessions import pack_sessions

            session = next(s.name for s in pack_sessions(REPO) if s.pack == args.pack)
        nox_cmd = [sys.executable, "-m", "nox", "-f", str(root / "noxfile.py"), "-s", str(session), "--"]
        python = args.python
        if not args.no_nox:
            print(f"bench: warming the nox session {session} (creates its lane environment once)", file=sys.stderr)
            run(nox_cmd + ["--lane", lane, *common], root, dict(nox_env(), **({"PATCHLANE_HOME": home} if home
                                                                               else {})))
            if python is None:  # the interpreter of the session's lane environment
                target = _target(args.pack) if args.pack else "fake"
                python = str(next((root / ".nox").glob(f"lane-{target}-py*/bin/python")))
        python = shutil.which(python) if python and os.sep not in python else (python or sys.executable)
        # this repository's harness, whatever the current directory and this interpreter's site hold
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
        def harness_run(lane: str) -> list[str]:
            return [sys.executable, "-m", "harness", "run", pack, "--lane", lane, "--python", python, *common]

        harness = harness_run(lane)
        bundle = args.bundle.resolve() if args.bundle else None
        if bundle is None and not args.pack:  # the fake pack's bundle: its build, no dependency wheels
            bundle, wheels = scratch / "bundle-01.tar.xz", scratch / "no-wheels"
            wheels.mkdir()
            run([sys.executable, "-m", "harness", "bundle", "01", "-o", str(bundle), "--wheels", str(wheels)],
                root, env)
        bootstrap = ([sys.executable, "-m", "harness.bootstrap", str(bundle), "--", "run", pack,
                      "--lane", lane, "--python", python, *common] if bundle else None)

        # catch the reproducer's command and environment, as the harness starts it
        # a fixed path: the stand-in's remembered import checks stay valid from one benchmark to the next
        capture_dir = (Path(home) if home else default_root()) / "bench"
        capture_dir.mkdir(parents=True, exist_ok=True)
        wrapper, seen = capture_dir / "capture-python", scratch / "seen.json"
        wrapper.write_text(CAPTURE.format(python=python, out=seen))
        wrapper.chmod(0o755)
        launcher = bootstrap or harness
        run([str(wrapper) if launcher[i - 1] == "--python" else a for i, a in enumerate(launcher)], root, env)
        record = json.loads(seen.read_text())
        bare = [python, *record["argv"]]  # the script and its arguments

        ways = {"bare reproducer": (bare, Path(record["cwd"]), record["env"])}
        if not (args.pack and args.bundle):  # a real pack with a bundle: the host may have no network
            ways["harness run"] = (harness, root, env)
        if bootstrap:
            ways["bootstrap (bundle) run"] = (bootstrap, root, env)
        if not args.no_nox:
            ways["nox session"] = (nox_cmd + ["--lane", lane, *common], root,
                                   dict(nox_env(), **({"PATCHLANE_HOME": home} if home else {})))
        extra = {}
        if not args.pack:  # the GPU lane: skipped on a CPU host after build, import check and CUDA probe
            extra["harness run, gpu lane"] = (harness_run("gpu"), root, env)
            if not args.no_nox:
                extra["nox session, gpu lane"] = (nox_cmd + ["--lane", "gpu", *common], root,
                                                  dict(nox_env(), PATCHLANE_HOME=home))
        expect = _expect(root, pack, lane)

        def once(name: str) -> tuple[float, float, int]:
            cmd, cwd, e = {**ways, **extra}[name]
            return run(cmd, cwd, e, codes=(0, 3) if name in extra else (0,),
                       must_print=expect if name == "bare reproducer" else None)

        for name in {**ways, **extra}:  # warm-up, untimed
            once(name)
        codes: dict[str, int] = {}
        cpus: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for name in {**ways, **extra}:
                took, cpu, codes[name] = once(name)
                rows.setdefault(name, []).append(took)
                cpus.setdefault(name, []).append(cpu)
        report(rows, cpus, codes, args, python, extra)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _target(pack: str) -> str:
    return tomllib.loads((REPO / "tracking.toml").read_text())["packs"][pack]["target"]


def _expect(root: Path, pack: str, lane: str) -> str:
    """The sentinel the lane expects (the bare run must print it too)."""
    lanes = tomllib.loads((root / "tracking.toml").read_text())["packs"][pack]["lanes"]
    return next(entry["expect"] for entry in lanes if entry["name"] == lane)


def report(rows: dict[str, list[float]], cpus: dict[str, list[float]], codes: dict[str, int], args,
           python: str, extra: dict) -> None:
    med = {name: statistics.median(times) for name, times in rows.items()}
    cpu = {name: statistics.median(times) for name, times in cpus.items()}
    base, cpu_base = med["bare reproducer"], cpu["bare reproducer"]
    what = f"pack {args.pack} lane {args.lane}" if args.pack else f"fake pack, cpu lane, {args.work:g} s of work"
    load = os.getloadavg()[0]
    print(f"\noverhead of the harness: {what}; lane python {python}")
    print(f"median of {args.rounds} warm runs each, one host ({os.cpu_count()} CPUs, load average {load:.1f}), "
          "one run of this benchmark")
    print("wall: elapsed seconds; cpu: user + sys seconds of the command and its children (less sensitive "
          "to other work on the host)\n")
    print(f"{'':28} {'wall':>6} {'min':>6} {'max':>6} {'- bare':>7} {'/ bare':>6} {'cpu':>7} {'- bare':>7}")
    for name, times in rows.items():
        line = f"{name:28} {med[name]:6.2f} {min(times):6.2f} {max(times):6.2f}"
        if name == "bare reproducer":
            print(f"{line} {'':7} {'':6} {cpu[name]:7.2f}")
        elif name in extra and codes[name] == 3:
            print(f"{line} {'':7} {'':6} {cpu[name]:7.2f}   skipped (no GPU here): all of it is overhead")
        else:
            print(f"{line} {med[name] - base:+7.2f} {med[name] / base:6.2f} {cpu[name]:7.2f} "
                  f"{cpu[name] - cpu_base:+7.2f}")
    compared = [n for n in med if n != "bare reproducer" and not (n in extra and codes[n] == 3)]
    worst = max(compared, key=lambda n: med[n] - base)
    print(f"\nlargest warm overhead over the bare reproducer: {worst}, {med[worst] - base:+.2f} s wall, "
          f"{cpu[worst] - cpu_base:+.2f} s cpu ({'within' if med[worst] - base <= 2.0 else 'OVER'} "
          "the 2 s goal of issue 14)")


if __name__ == "__main__":
    raise SystemExit(main())
