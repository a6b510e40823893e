"""Serial lanes vs ``harness sweep``, with empty and with warm kernel-compile caches, in one run on one host.

    python bench/sweep.py --lane 02:lower-bug-main-cpu --lane 07:tma-probe-baseline-main ...   # a chosen set
    python bench/sweep.py --set cpu-2targets                          # a named set (SETS below)
    python3 bench/sweep.py --set gpu-1host --bundle dist/bundle-gpu-1host.tar.xz   # a GPU host without network

Arms, in this order, each over the same lanes:

1. ``serial``: one ``harness run PACK --lane ...`` after another (a pack's chosen lanes in one call, so an
   equivalence lane finds its baseline's results), with an empty kernel-compile cache of its own;
2. ``sweep-cold``: ``harness sweep --rerun`` over the same lanes with another empty cache;
3. ``sweep-warm``: the same sweep again, reusing the cache ``sweep-cold`` filled.

Builds, runtime sites and import checks are made once before the arms (``harness prepare``, untimed), so
the arms time the lanes and their kernel compiles, not wheel builds. The caches are pointed at with
``PATCHLANE_KERNEL_CACHE`` (docs/kernel-cache.md); receipts go to a temporary directory per arm and
``tracking.toml`` is not touched. ``--bundle ARCHIVE`` runs every harness command from an offline bundle
(docs/gpu-hosts.md): unpacked and its dependency wheels installed once, as ``python -m harness.bootstrap`` does,
then each command with ``--bundle-dir``; ``--sweep-cache DIR`` keeps the sweep arms' cache (empty at the start,
so the cold arm is cold) for ``harness cache export``. Every lane must end as it expects (pass) in every arm,
else the run stops: a faster arm that failed proves nothing. The result file (JSON) and its text summary are
written under ``bench/results/`` (or ``--out-dir``) as they are, with the host's facts: wall seconds per arm, the
ratios of each sweep to the serial arm, and the GPU busy fraction (GPU-seconds the lanes held over wall seconds
times the host's GPUs; none on a host without GPUs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Named lane sets (pack:lane). Each spans two targets and at least six lanes.
SETS: dict[str, list[str]] = {
    # CPU lanes: TileLang lowering for sm_90 (megatron-lm 02 and 14, mamba 07), gloo ranks (22), eager numerics (10)
    "cpu-2targets": ["02:lower-bug-main-cpu", "02:lower-fix-main-cpu", "14:lower-bug-0.19.2-cpu",
                     "14:lower-fix-0.19.2-cpu", "22:cpu-gloo-tp2", "10:bug-dev-cpu", "10:fix-dev-cpu",
                     "10:fix-dev-cpu-tp2", "07:tma-probe-baseline-main", "07:tma-probe-patched-main"],
    # one GPU host in one 10-minute call: mamba, liger-kernel and megatron-lm lanes that passed on an H200, about
    # 130 s run one after another by their receipts. 23's two lanes, 21:parity and 01:guard declare
    # gpu_memory_gib and share the GPU; 04's pair and 09:bug-0.8.1 record timing figures and keep it to
    # themselves. Bundle: docs/sweep.md.
    "gpu-1host": ["04:baseline-2.3.2.post1", "04:equivalence-2.3.2.post1", "23:identity-drift",
                  "23:prenorm-parity", "09:bug-0.8.1", "21:parity", "01:guard-0.19.2"],
}


class BenchError(Exception):
    """The benchmark cannot go on (a lane failed, a plan does not match the chosen lanes)."""


def parse_lanes(specs: list[str]) -> dict[str, list[str]]:
    """``["02:a", "02:b", "07:c"]`` -> ``{"02": ["a", "b"], "07": ["c"]}``, in the order given."""
    out: dict[str, list[str]] = {}
    for spec in specs:
        pack, sep, lane = spec.partition(":")
        if not sep or not pack or not lane:
            raise BenchError(f"--lane {spec!r}: expected PACK:LANE")
        out.setdefault(pack, [])
        if lane not in out[pack]:
            out[pack].append(lane)
    return out


def harness(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", *args]


def run(cmd: list[str], env: dict[str, str], what: str) -> subprocess.CompletedProcess:
    print(f"bench: {what}: {' '.join(cmd[2:])}", flush=True)
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    return proc


def common(args) -> list[str]:
    out = ["--quiet"]
    if args.root:
        out += ["--root", args.root]
    if args.bundle_dir:
        out += ["--bundle-dir", args.bundle_dir]
    return out


def selection(lanes: dict[str, list[str]]) -> list[str]:
    """The sweep's arguments choosing exactly ``lanes`` (pack-qualified names; no pattern characters in them)."""
    return [*lanes, *[a for pack, names in lanes.items() for n in names for a in ("--lane", f"{pack}:{n}")]]


def plan_targets(lanes: dict[str, list[str]], env: dict[str, str], args) -> dict[str, str]:
    """pack -> target, from the sweep's own plan of the chosen lanes; the plan must hold exactly those lanes."""
    proc = run(harness("sweep", *selection(lanes), "--plan", "--json", "--rerun", *common(args)), env, "plan")
    try:
        plan = json.loads(proc.stdout)
    except ValueError:
        raise BenchError(f"plan: exit {proc.returncode}: {proc.stderr.strip()[-400:]}") from None
    planned = {(t["pack"], lane) for t in plan["tasks"] for lane in t["lanes"]}
    wanted = {(p, n) for p, names in lanes.items() for n in names}
    if planned != wanted:
        raise BenchError(f"the sweep's plan holds {sorted(planned - wanted)} beyond the chosen lanes (a patched "
                         "lane brings its baseline; lane names match across packs), "
                         f"or lacks {sorted(wanted - planned)}")
    return {t["pack"]: t["target"] for t in plan["tasks"]}


def lane_python(args, target: str) -> list[str]:
    for spec in args.lane_python:
        name, _, python = spec.partition("=")
        if name == target:
            return ["--python", python]
    return []


def prepare(lanes: dict[str, list[str]], env: dict[str, str], args) -> float:
    t0 = time.monotonic()
    for pack, names in lanes.items():
        cmd = harness("prepare", pack, *[a for n in names for a in ("--lane", n)], *common(args),
                      *lane_python(args, args.targets[pack]))
        proc = run(cmd, env, "prepare (untimed)")
        if proc.returncode != 0:
            raise BenchError(f"prepare {pack} failed (exit {proc.returncode}): {proc.stderr.strip()[-400:]}")
    return time.monotonic() - t0


def serial_arm(lanes: dict[str, list[str]], env: dict[str, str], receipts: Path, args) -> dict:
    rows = []
    t0 = time.monotonic()
    for pack, names in lanes.items():
        with tempfile.NamedTemporaryFile(suffix=".json") as res:
            cmd = harness("run", pack, *[a for n in names for a in ("--lane", n)], "--receipts-dir", str(receipts),
                          "--no-tracking", "--result-file", res.name, *common(args),
                          *lane_python(args, args.targets[pack]))
            started = time.monotonic()
            proc = run(cmd, env, "serial")
            took = time.monotonic() - started
            result = json.loads(Path(res.name).read_text() or "{}")
        if proc.returncode != 0:
            raise BenchError(f"serial: run {pack} ended with exit {proc.returncode}, not 0: "
                             f"{proc.stderr.strip()[-400:]}")
        rows.append({"pack": pack, "lanes": names, "wall_s": round(took, 3), "result": result.get("lanes")})
    return {"wall_s": round(time.monotonic() - t0, 3), "calls": rows}


def sweep_arm(lanes: dict[str, list[str]], env: dict[str, str], receipts: Path, args, name: str) -> dict:
    cmd = harness("sweep", *selection(lanes), "--rerun", "--json", "--receipts-dir", str(receipts), "--no-tracking",
                  *common(args), *[f"--lane-python={spec}" for spec in args.lane_python])
    if args.jobs:
        cmd += ["--jobs", str(args.jobs)]
    t0 = time.monotonic()
    proc = run(cmd, env, name)
    wall = time.monotonic() - t0
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise BenchError(f"{name}: no JSON from the sweep (exit {proc.returncode}): "
                         f"{proc.stderr.strip()[-400:]}") from None
    ran = {(ln["pack"], ln["lane"]) for ln in doc["lanes"]}
    wanted = {(p, n) for p, names in lanes.items() for n in names}
    if ran != wanted:
        raise BenchError(f"{name}: the sweep ran {sorted(ran - wanted)} beyond the chosen lanes, "
                         f"or missed {sorted(wanted - ran)}; choose lanes whose names select only themselves")
    if proc.returncode != 0:
        bad = [f"{ln['pack']}:{ln['lane']} {ln['verdict']}" for ln in doc["lanes"] if ln["exit"] != 0]
        raise BenchError(f"{name}: exit {proc.returncode}: {', '.join(bad)}")
    gpus = len(doc["host"]["gpus"])
    held = sum((t.get("duration_s") or 0.0) * len(t.get("gpus") or []) for t in doc["tasks"])
    return {"wall_s": round(wall, 3), "sweep_wall_s": doc["wall_s"],
            "gpu_busy_fraction": round(held / (doc["wall_s"] * gpus), 3) if gpus and doc["wall_s"] else None,
            "sweep": doc}


def serial_gpu_busy(arm: dict, gpus: int) -> float | None:
    """GPU-seconds the serial lanes held (their receipts' durations, one GPU per rank of a lane that saw
    CUDA) over the arm's wall seconds times the host's GPUs."""
    if not gpus or not arm["wall_s"]:
        return None
    held = 0.0
    for call in arm["calls"]:
        for lane in call["result"] or []:
            if not lane.get("receipt"):
                continue
            rec = json.loads(Path(lane["receipt"]).read_text())
            if (rec.get("host") or {}).get("cuda_available"):
                held += float(rec["duration_s"]) * int(rec.get("world_size") or 1)
    return round(held / (arm["wall_s"] * gpus), 3)


def from_bundle(args) -> dict[str, str]:
    """The environment of harness commands run from the bundle ``args.bundle`` (harness.bootstrap's own, with
    the bundle's dependency wheels installed once); sets ``args.bundle_dir`` to the unpacked bundle."""
    if args.bundle_dir:
        raise BenchError("--bundle and --bundle-dir: give one")
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from harness import bootstrap  # the standard library only, as on a host where nothing is installed yet
    from harness.errors import BundleError

    unpacked = bootstrap.unpacked_dir(Path(args.bundle))
    if isinstance(unpacked, int):
        raise BenchError(f"--bundle {args.bundle}: cannot unpack it (exit {unpacked})")
    mismatch = bootstrap.python_mismatch(json.loads((unpacked / "bundle.json").read_text()))
    if mismatch:
        raise BenchError(mismatch)
    args.bundle_dir = str(unpacked)
    try:
        return bootstrap.harness_env(unpacked)
    except BundleError as exc:
        raise BenchError(str(exc)) from None


def host_facts() -> dict:
    facts = {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
             "load_average": [round(x, 2) for x in os.getloadavg()]}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        facts["gpus"] = [line.strip() for line in out.splitlines() if line.strip()]
    except (OSError, subprocess.TimeoutExpired):
        facts["gpus"] = []
    return facts


def summary(doc: dict) -> str:
    s, c, w = doc["arms"]["serial"], doc["arms"]["sweep-cold"], doc["arms"]["sweep-warm"]
    host = doc["host"]
    lines = [
        f"harness sweep vs serial lanes, one run on one host ({host['cpus']} CPUs, "
        f"{len(host['gpus'])} GPU(s){': ' + ', '.join(host['gpus']) if host['gpus'] else ''}; "
        f"load average at start {host['load_average'][0]})",
        f"lanes ({sum(len(v) for v in doc['lanes'].values())}): "
        + ", ".join(f"{p}:{n}" for p, names in doc["lanes"].items() for n in names),
        f"builds prepared first (untimed): {doc['prepare_s']:.1f} s",
        "",
        f"{'arm':<12}{'wall s':>10}{'/ serial':>10}{'GPU busy':>10}",
    ]
    for name, arm in (("serial", s), ("sweep-cold", c), ("sweep-warm", w)):
        busy = arm.get("gpu_busy_fraction")
        lines.append(f"{name:<12}{arm['wall_s']:>10.1f}{arm['wall_s'] / s['wall_s']:>10.3f}"
                     f"{'n/a' if busy is None else f'{busy:.3f}':>10}")
    lines += ["", f"ratios: sweep-cold / serial {doc['ratios']['sweep_cold_over_serial']:.3f}, "
                  f"sweep-warm / serial {doc['ratios']['sweep_warm_over_serial']:.3f}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--lane", action="append", default=[], metavar="PACK:LANE", help="a lane of the set (repeatable)")
    p.add_argument("--set", choices=sorted(SETS), help="a named lane set")
    p.add_argument("--jobs", type=int, help="the sweep's CPU slots (default: its own, the host's cores)")
    p.add_argument("--bundle-dir", help="run from an unpacked offline bundle (the GPU host)")
    p.add_argument("--bundle", metavar="ARCHIVE",
                   help="run from this offline bundle (unpacked and its wheels installed once, as harness.bootstrap "
                        "does): what a GPU host without network uses")
    p.add_argument("--sweep-cache", metavar="DIR",
                   help="the kernel-compile cache of the two sweep arms, kept after the run (default: a temporary "
                        "one); it must be empty or absent, so the cold arm starts cold")
    p.add_argument("--lane-python", action="append", default=[], metavar="TARGET=PYTHON",
                   help="run TARGET's lanes with this interpreter's environment, in every arm (repeatable)")
    p.add_argument("--root", help="the repository whose lanes run (default: the one found from the working directory)")
    p.add_argument("--tag", default="", help="a word for the result file's name (e.g. the host kind)")
    p.add_argument("--out-dir", default=str(REPO / "bench" / "results"), help="where the result files go")
    args = p.parse_args(argv)
    try:
        lanes = parse_lanes(args.lane + (SETS[args.set] if args.set else []))
        if not lanes:
            raise BenchError("no lanes: give --lane PACK:LANE or --set NAME")
        environ = from_bundle(args) if args.bundle else dict(os.environ)
        if args.sweep_cache and Path(args.sweep_cache).exists() and any(Path(args.sweep_cache).iterdir()):
            raise BenchError(f"--sweep-cache {args.sweep_cache}: not empty; the cold arm must start from nothing")
        started = datetime.now(UTC)
        host = host_facts()
        with tempfile.TemporaryDirectory(prefix="patchlane-bench-") as tmp_s:
            tmp = Path(tmp_s)
            base_env = dict(environ, PATCHLANE_KERNEL_CACHE=str(tmp / "kc-prepare"))
            args.targets = plan_targets(lanes, base_env, args)
            prepare_s = prepare(lanes, base_env, args)
            serial = serial_arm(lanes, dict(environ, PATCHLANE_KERNEL_CACHE=str(tmp / "kc-serial")),
                                tmp / "r-serial", args)
            serial["gpu_busy_fraction"] = serial_gpu_busy(serial, len(host["gpus"]))
            sweep_cache = Path(args.sweep_cache).resolve() if args.sweep_cache else tmp / "kc-sweep"
            sweep_env = dict(environ, PATCHLANE_KERNEL_CACHE=str(sweep_cache))
            cold = sweep_arm(lanes, sweep_env, tmp / "r-cold", args, "sweep-cold")
            warm = sweep_arm(lanes, sweep_env, tmp / "r-warm", args, "sweep-warm")
    except BenchError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 1
    doc = {
        "schema": 1, "kind": "patchlane-sweep-bench", "started": started.isoformat().replace("+00:00", "Z"),
        "host": host, "lanes": lanes, "prepare_s": round(prepare_s, 3),
        "arms": {"serial": serial, "sweep-cold": cold, "sweep-warm": warm},
        "ratios": {"sweep_cold_over_serial": round(cold["wall_s"] / serial["wall_s"], 4),
                   "sweep_warm_over_serial": round(warm["wall_s"] / serial["wall_s"], 4)},
    }
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{started:%Y%m%d}-{args.tag + '-' if args.tag else ''}sweep-{args.set or 'lanes'}"
    (out_dir / f"{stem}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    text = summary(doc)
    (out_dir / f"{stem}.txt").write_text(text)
    print(text, end="")
    print(f"bench: wrote {out_dir / stem}.json and .txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
