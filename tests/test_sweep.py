"""``harness sweep``: the scheduler's rules on fake jobs, and real sweeps of the fake repository.

The scheduler is a pure function (``sweep_schedule.schedule``), so its rules are checked on data: exclusive GPUs for
time and memory lanes, groups for multi-GPU lanes, disjoint GPUs, sharing within declared memory, the CPU
cap. The rest runs real sweeps (in-process and as a subprocess) of ``lane_repo`` with more packs: resume from
current receipts, failure isolation and the worst exit code, GPU assignment through CUDA_VISIBLE_DEVICES
(a fake ``torch`` makes the child harness see the GPUs it was given), SIGTERM, and lock-free cache lookups.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import alive, cli

from harness.errors import Exit
from harness.host import sweep_estimate, sweep_plan, sweep_schedule
from harness.host.sweep_schedule import Free, GpuUse, Job, Need
from harness.lane import runs
from harness.lane.receipts import find

REPO_ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- the scheduler, on data

def _gpus(n: int, gib: float | None = 80.0) -> Free:
    return Free(slots=16, gpus=[GpuUse(str(i), gib) for i in range(n)])


def _ids(started) -> dict[str, tuple[str, ...]]:
    return {job.key: ids for job, ids in started}


def test_timing_and_memory_lanes_get_their_gpu_alone():
    whole = Need(gpus=1, whole=True)
    shared = Need(gpus=1, whole=False, memory_gib=10)
    started = sweep_schedule.schedule([Job("timing", whole), Job("memory", whole), Job("a", shared)], _gpus(1))
    assert list(_ids(started)) == ["timing"]  # nothing else on its GPU
    free = _gpus(1)
    free.take(shared, ("0",))
    assert sweep_schedule.schedule([Job("timing", whole)], free) == []  # a GPU someone shares is not idle


def test_correctness_lanes_share_a_gpu_only_within_declared_memory():
    small = Need(gpus=1, whole=False, memory_gib=30)
    started = sweep_schedule.schedule([Job(f"c{i}", small) for i in range(4)], _gpus(1, gib=80))
    assert list(_ids(started)) == ["c0", "c1"]  # 30 + 30 <= 80 < 90
    assert sweep_schedule.schedule([Job("c", small)], _gpus(1, gib=None)) == []  # unknown memory: nobody shares


def test_a_shared_lane_packs_onto_a_used_gpu_and_leaves_idle_ones_for_whole_lanes():
    free = _gpus(2)
    free.take(Need(gpus=1, whole=False, memory_gib=10), ("1",))
    started = sweep_schedule.schedule([Job("shared", Need(gpus=1, whole=False, memory_gib=10)),
                              Job("whole", Need(gpus=1, whole=True))], free)
    assert _ids(started) == {"shared": ("1",), "whole": ("0",)}


def test_multi_gpu_lanes_get_a_group_and_every_assignment_is_disjoint():
    jobs = [Job("one-a", Need(gpus=1)), Job("tp2", Need(gpus=2)), Job("one-b", Need(gpus=1)),
            Job("tp4", Need(gpus=4))]
    started = _ids(sweep_schedule.schedule(jobs, _gpus(8)))
    assert set(started) == {"tp4", "tp2", "one-a", "one-b"}
    assert len(started["tp4"]) == 4 and len(started["tp2"]) == 2
    every = [g for ids in started.values() for g in ids]
    assert len(every) == len(set(every)) == 8


def test_the_largest_gpu_group_is_placed_first():
    started = _ids(sweep_schedule.schedule([Job("one", Need(gpus=1)), Job("tp4", Need(gpus=4))], _gpus(4)))
    assert list(started) == ["tp4"]  # the 1-GPU lane waits; the 4-GPU lane is not starved


def test_the_cpu_cap_bounds_how_many_children_run():
    free = Free(slots=3, gpus=[])
    started = sweep_schedule.schedule([Job(f"cpu{i}", Need(slots=1)) for i in range(5)]
                                      + [Job("tp4-cpu", Need(slots=4))], free)
    assert list(_ids(started)) == ["cpu0", "cpu1", "cpu2"]
    assert free.slots == 3  # pure: the caller's state is not changed


# --------------------------------------------------------------------------- planning

EXTRA = '''
[[packs.01.lanes]]
name = "timing"
base = "1.0"
patched = true
expect = "FIX_VALIDATED"
args = ["--timing"]

[[packs.01.lanes]]
name = "small"
base = "1.0"
patched = false
expect = "BUG_REPRODUCED"
args = ["--small"]
requires = "cuda"
gpu_memory_gib = 12

[[packs.01.lanes]]
name = "tp2"
base = "1.0"
patched = false
expect = "BUG_REPRODUCED"
args = ["--tp"]
requires = "cuda"
nproc = 2
gpu_memory_gib = 4
exclusive = true
'''


def _plan(lane_repo, *argv: str) -> dict:
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert cli("sweep", "--plan", "--json", "--quiet", *argv, *lane_repo.args()) == Exit.OK
    return json.loads(buf.getvalue())


def test_the_plan_states_each_task_and_what_it_needs(lane_repo):
    lane_repo.write_tracking(extra=EXTRA, requires="cuda")
    plan = _plan(lane_repo)
    assert plan["schema"] == 1 and plan["kind"] == "patchlane-sweep-plan"
    tasks = {",".join(t["lanes"]): t for t in plan["tasks"]}
    assert set(tasks) == {"bug,fix", "timing", "small", "tp2"}  # the patched fix lane runs after its baseline
    assert tasks["bug,fix"]["gpu_exclusive"] and "no gpu_memory_gib declared" in tasks["bug,fix"]["why"][0]
    assert tasks["timing"]["gpu_exclusive"] and "--timing" in tasks["timing"]["why"][0]
    assert not tasks["small"]["gpu_exclusive"] and tasks["small"]["gpu_memory_gib"] == 12
    assert tasks["tp2"]["gpus"] == 2 and tasks["tp2"]["gpu_exclusive"] and "exclusive = true" in tasks["tp2"]["why"][0]
    assert tasks["bug,fix"]["command"] == ["harness", "run", "01", "--lane", "bug", "--lane", "fix"]
    # a lane chosen alone brings the baseline lane it is paired with
    [only] = _plan(lane_repo, "--lane", "fix")["tasks"]
    assert only["lanes"] == ["bug", "fix"] and "runs with bug" in only["why"][-1]


def test_a_pack_qualified_pattern_selects_that_packs_lanes_only(lane_repo, capsys):
    """``--lane 01:s*`` picks pack 01's matching lanes; the same pattern for a pack without them selects nothing."""
    lane_repo.write_tracking(extra=EXTRA, requires="cuda")
    tasks = _plan(lane_repo, "--lane", "01:s*", "--lane", "01:tim*")["tasks"]
    assert sorted(lane for t in tasks for lane in t["lanes"]) == ["small", "timing"]
    assert cli("sweep", "--plan", "--json", "--quiet", "--lane", "02:small", *lane_repo.args()) == Exit.USAGE
    assert "names no lane" in capsys.readouterr().err


def test_memory_and_performance_lanes_are_exclusive_and_cannot_be_declared_otherwise(lane_repo, capsys):
    perf = '\n[[packs.01.performance]]\nlane = "fix"\nfigure = "max_err"\nlabel = "x"\n'
    lane_repo.write_tracking(extra=perf)
    from harness.lane.tracking import Tracking

    pack = Tracking.load(lane_repo.root).pack("01")
    assert "performance" in sweep_plan.exclusive_reason(pack, pack.lane("fix"))
    assert sweep_plan.exclusive_reason(pack, pack.lane("bug")) is None
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('expect = "FIX_VALIDATED"', 'expect = "FIX_VALIDATED"\nexclusive = false'))
    assert cli("sweep", "--plan", *lane_repo.args()) == Exit.USAGE
    assert "exclusive = false" in capsys.readouterr().err
    path.write_text(path.read_text().replace("exclusive = false", "gpu_memory_gib = -1"))
    assert cli("sweep", "--plan", *lane_repo.args()) == Exit.USAGE
    assert "gpu_memory_gib" in capsys.readouterr().err


def test_a_plan_file_is_a_closed_versioned_schema(lane_repo, tmp_path, capsys):
    plan = _plan(lane_repo)
    path = tmp_path / "plan.json"
    for broken, says in ((plan | {"schema": 2}, "schema 2"), (plan | {"extra": 1}, "unknown key 'extra'"),
                         (plan | {"tasks": [plan["tasks"][0] | {"lanes": ["nope"]}]}, "no lane 'nope'")):
        path.write_text(json.dumps(broken))
        assert cli("sweep", "--from-plan", str(path), "--task", "0", *lane_repo.args()) == Exit.USAGE
        assert says in capsys.readouterr().err
    path.write_text(json.dumps(plan))
    assert cli("sweep", "--from-plan", str(path), "--task", "7", *lane_repo.args()) == Exit.USAGE
    assert cli("sweep", "--from-plan", str(path), "--task", "0", "--quiet", *lane_repo.args()) == Exit.OK
    assert sorted(r.lane for r in find(lane_repo.root, "fake", "01")) == ["bug", "fix"]


# --------------------------------------------------------------------------- real sweeps

def _add_pack(lane_repo, pid: str, script: str, requires: str = "cpu", lanes: str = "") -> None:
    """Another pack on the fake target: unpatched lane(s) ``a`` (and ``lanes``) of reproducer ``script``."""
    (lane_repo.root / "repros" / "fake" / f"pack{pid}.py").write_text(script)
    with (lane_repo.root / "tracking.toml").open("a") as fh:
        fh.write(textwrap.dedent(f'''
            [packs.{pid}]
            title = "another pack"
            target = "fake"
            kind = "regression-guard"
            state = "planned"
            files = []
            depends_on = []
            requires = "{requires}"
            base = "1.0"
            reproducer = "repros/fake/pack{pid}.py"

            [[packs.{pid}.lanes]]
            name = "a"
            base = "1.0"
            patched = false
            expect = "BUG_REPRODUCED"
            timeout = 60
        ''') + lanes)


def _sweep_json(lane_repo, *argv: str, capsys) -> tuple[int, dict]:
    capsys.readouterr()
    code = cli("sweep", "--json", "--quiet", *argv, *lane_repo.args())
    return code, json.loads(capsys.readouterr().out)


def test_one_failure_never_stops_the_others_and_the_worst_exit_wins(lane_repo, capsys):
    _add_pack(lane_repo, "02", "raise SystemExit('this reproducer crashes')\n")
    _add_pack(lane_repo, "03", "import _lane\n" + '_lane.stamp("fakepkg", "fakepkg.core")\n_lane.skip("no GPU")\n')
    code, result = _sweep_json(lane_repo, capsys=capsys)
    assert code == Exit.CRASH and result["exit_name"] == "CRASH"
    by = {(o["pack"], o["lane"]): o for o in result["lanes"]}
    assert by["01", "bug"]["verdict"] == by["01", "fix"]["verdict"] == "pass"
    assert by["02", "a"]["verdict"] == "crash" and by["02", "a"]["exit_name"] == "CRASH"
    assert by["03", "a"]["exit_name"] == "SKIPPED"
    assert {r.pack for r in find(lane_repo.root, "fake")} == {"01", "02"}  # a skip writes no receipt
    for o in result["lanes"]:  # what a benchmark reads
        assert o["started"] and o["ended"] and o["duration_s"] is not None and o["gpus"] == []
    from harness.lane.tracking import Tracking

    lines = Tracking.load(lane_repo.root).verdicts()  # each pack's line, written by its own run
    assert lines["01"].startswith("2 lane(s): 2 pass; ") and lines["02"].startswith("1 lane(s): 1 crash (a); ")


RENDEZVOUS = """
import os, socket, sys, time
import _lane
_lane.stamp("fakepkg", "fakepkg.core")
# what an upstream test utility does: torch.distributed's TCP store on MASTER_PORT, 29500 when unset
server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
server.bind(("127.0.0.1", int(os.environ.get("MASTER_PORT", "29500"))))
server.listen()
meet = os.path.join(os.environ["MEET_DIR"], os.environ["HARNESS_PACK"])
open(meet, "w").close()
deadline = time.time() + 30
while len(os.listdir(os.environ["MEET_DIR"])) < 2 and time.time() < deadline:  # both listen at once
    time.sleep(0.05)
_lane.verdict("BUG_REPRODUCED", port=server.getsockname()[1])
"""


def test_one_process_lanes_running_at_once_get_distinct_rendezvous_ports(lane_repo, tmp_path, monkeypatch,
                                                                         capsys):
    """Two lanes whose tests start torch.distributed on the default port clashed (EADDRINUSE) in a sweep."""
    monkeypatch.setenv("MEET_DIR", str(tmp_path / "meet"))
    monkeypatch.delenv("MASTER_PORT", raising=False)
    (tmp_path / "meet").mkdir()
    _add_pack(lane_repo, "02", RENDEZVOUS)
    _add_pack(lane_repo, "03", RENDEZVOUS)
    code, result = _sweep_json(lane_repo, "02", "03", "--jobs", "2", capsys=capsys)
    assert code == Exit.OK, result
    by = {o["pack"]: o for o in result["lanes"]}
    assert by["02"]["verdict"] == by["03"]["verdict"] == "pass"
    ports = {r.pack: r.sentinel_details[r.sentinels[0]]["port"]
             for r in find(lane_repo.root, "fake") if r.pack in {"02", "03"}}
    assert len(set(ports.values())) == 2 and 29500 not in ports.values()


def test_a_master_port_the_caller_set_is_kept():
    assert runs.rendezvous_env({"MASTER_PORT": "6001"}, 1) == {}
    assert runs.rendezvous_env({}, 2) == {}  # torch.distributed.run --standalone picks its own
    port = int(runs.rendezvous_env({}, 1)["MASTER_PORT"])
    assert 0 < port < 65536


def test_a_sweep_run_again_skips_lanes_whose_receipt_is_current(lane_repo, capsys):
    _add_pack(lane_repo, "02", "raise SystemExit('crash')\n")
    assert cli("sweep", "--quiet", *lane_repo.args()) == Exit.CRASH
    first = {str(r.path) for r in find(lane_repo.root, "fake")}
    code, result = _sweep_json(lane_repo, capsys=capsys)
    verdicts = {(o["pack"], o["lane"]): o["verdict"] for o in result["lanes"]}
    assert verdicts == {("01", "bug"): "current", ("01", "fix"): "current", ("02", "a"): "crash"}
    assert code == Exit.CRASH  # a failed lane is run again: only a current *passing* receipt counts
    assert len({str(r.path) for r in find(lane_repo.root, "fake", "01")} - first) == 0
    # the reproducer changed: its receipts are no longer current
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    repro.write_text(repro.read_text() + "\n# changed\n")
    code, result = _sweep_json(lane_repo, "01", capsys=capsys)
    assert code == Exit.OK and {o["verdict"] for o in result["lanes"]} == {"pass"}
    code, result = _sweep_json(lane_repo, "01", "--rerun", capsys=capsys)
    assert {o["verdict"] for o in result["lanes"]} == {"pass"}
    assert len(find(lane_repo.root, "fake", "01")) == 6


def test_a_sweep_into_another_receipts_dir_skips_lanes_the_checkout_holds_current(lane_repo, capsys, tmp_path):
    assert cli("sweep", "01", "--quiet", *lane_repo.args()) == Exit.OK
    scratch = tmp_path / "host-receipts"  # a fresh GPU host's empty receipts directory
    code, result = _sweep_json(lane_repo, "01", "--receipts-dir", str(scratch), capsys=capsys)
    assert code == Exit.OK and {o["verdict"] for o in result["lanes"]} == {"current"}
    assert not scratch.exists() or find(lane_repo.root, "fake", "01", scratch) == []
    # a newer receipt in that directory counts too: the checkout's stale one does not send the lane again
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    repro.write_text(repro.read_text() + "\n# changed\n")
    code, result = _sweep_json(lane_repo, "01", "--receipts-dir", str(scratch), capsys=capsys)
    assert code == Exit.OK and {o["verdict"] for o in result["lanes"]} == {"pass"}
    assert len(find(lane_repo.root, "fake", "01", scratch)) == 2
    code, result = _sweep_json(lane_repo, "01", "--receipts-dir", str(scratch), capsys=capsys)
    assert {o["verdict"] for o in result["lanes"]} == {"current"}


FAKE_TORCH = '''
import os
__version__ = "0.0-fake"
def _ids():
    return [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
class cuda:
    is_available = staticmethod(lambda: bool(_ids()))
    device_count = staticmethod(lambda: len(_ids()))
    get_device_name = staticmethod(lambda i: "FakeGPU")
'''

GPU_REPRO = '''
import json, os, time
print("HOST_STAMP " + json.dumps({"host": "fake", "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}))
print("FIGURE " + json.dumps({"name": "visible", "value": os.environ.get("CUDA_VISIBLE_DEVICES")}))
time.sleep(1.5)
print("BUG_REPRODUCED {}")
'''


@pytest.fixture
def fake_gpus(lane_repo, tmp_path, monkeypatch):
    """A ``torch`` on PYTHONPATH that sees the GPUs CUDA_VISIBLE_DEVICES names: child harnesses run GPU lanes."""
    site = tmp_path / "fake-torch"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(FAKE_TORCH)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(REPO_ROOT)]))
    return site


def test_gpu_lanes_run_at_once_on_disjoint_gpus_and_multi_gpu_lanes_wait(lane_repo, fake_gpus, capsys):
    lanes = "".join(textwrap.dedent(f'''
        [[packs.02.lanes]]
        name = "{name}"
        base = "1.0"
        patched = false
        expect = "BUG_REPRODUCED"
    ''') for name in ("b", "c"))
    _add_pack(lane_repo, "02", GPU_REPRO, requires="cuda", lanes=lanes)
    code, result = _sweep_json(lane_repo, "02", "--gpus", "0,1", "--jobs", "4", capsys=capsys)
    assert code == Exit.OK, result
    runs = {o["lane"]: o for o in result["lanes"]}
    assert {o["verdict"] for o in runs.values()} == {"pass"}
    for o in runs.values():
        assert len(o["gpus"]) == 1
        [rec] = [r for r in find(lane_repo.root, "fake", "02") if r.lane == o["lane"]]
        assert rec.figures[0].value == o["gpus"][0]  # the reproducer saw exactly the GPU it was given
    # two GPUs, three 1-GPU lanes: two overlapped on different GPUs, the third waited for one
    spans = sorted((o["started"], o["ended"], o["gpus"][0]) for o in runs.values())
    assert spans[0][2] != spans[1][2] and spans[1][0] < spans[0][1]
    assert spans[2][0] >= min(spans[0][1], spans[1][1])


def test_a_lane_needing_more_gpus_than_the_host_has_is_skipped_after_its_build(lane_repo, fake_gpus, capsys):
    lanes = textwrap.dedent('''
        [[packs.02.lanes]]
        name = "tp4"
        base = "1.0"
        patched = false
        expect = "BUG_REPRODUCED"
        nproc = 4
    ''')
    _add_pack(lane_repo, "02", GPU_REPRO, requires="cuda", lanes=lanes)
    code, result = _sweep_json(lane_repo, "02", "--gpus", "0", capsys=capsys)
    by = {o["lane"]: o for o in result["lanes"]}
    assert code == Exit.OK or code == Exit.SKIPPED
    assert by["tp4"]["exit_name"] == "SKIPPED" and "needs 4 CUDA GPU(s)" in by["tp4"]["reason"]
    assert by["a"]["verdict"] == "pass" and code == Exit.SKIPPED


def test_no_gpu_on_the_host_skips_gpu_lanes_with_exit_3(lane_repo, capsys):
    lane_repo.write_tracking(requires="cuda")
    code, result = _sweep_json(lane_repo, "--gpus", "", capsys=capsys)
    assert code == Exit.SKIPPED and {o["exit_name"] for o in result["lanes"]} == {"SKIPPED"}
    assert find(lane_repo.root, "fake", "01") == []


# --------------------------------------------------------------------------- signals

SPAWNER = '''
import json, os, pathlib, subprocess, sys, time
print("HOST_STAMP " + json.dumps({"host": "fake"}), flush=True)
pids = pathlib.Path(os.environ["FAKE_PIDS"])
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
(pids / f"{os.getpid()}.{child.pid}").touch()
time.sleep(600)
'''


def test_sigterm_ends_every_child_and_leaves_nothing_half_written(lane_repo, tmp_path):
    pids, tmp = tmp_path / "pids", tmp_path / "tmpdir"
    pids.mkdir()
    tmp.mkdir()
    (lane_repo.root / "repros" / "fake" / "pack01.py").write_text(SPAWNER)
    _add_pack(lane_repo, "02", SPAWNER)
    before = (lane_repo.root / "tracking.toml").read_text()
    proc = subprocess.Popen([sys.executable, "-m", "harness", "sweep", "--jobs", "4", *lane_repo.args()],
                            cwd=REPO_ROOT, env=dict(os.environ, FAKE_PIDS=str(pids), TMPDIR=str(tmp)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while len(list(pids.iterdir())) < 2:  # both packs' reproducers (and their grandchildren) are running
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read() if proc.poll() else "slow"
            time.sleep(0.1)
        running = [int(x) for p in pids.iterdir() for x in p.name.split(".")]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == Exit.TERMINATED
        assert "terminated" in proc.stderr.read()
        deadline = time.time() + 10
        while any(alive(p) for p in running) and time.time() < deadline:
            time.sleep(0.1)
        assert [p for p in running if alive(p)] == []
        assert list(tmp.iterdir()) == []  # the sweep's scratch, the children's logs and run directories
        assert find(lane_repo.root, "fake") == []
        receipts = lane_repo.root / "receipts"
        assert not receipts.exists() or not [p for p in receipts.rglob("*") if p.name.startswith(".tmp")]
        assert (lane_repo.root / "tracking.toml").read_text() == before
    finally:
        for p in pids.iterdir():
            for pid in p.name.split("."):
                if alive(int(pid)):
                    os.kill(int(pid), signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


# --------------------------------------------------------------------------- the store: lock-free lookups

def test_a_fully_cached_lane_does_not_wait_for_the_store_lock(lane_repo):
    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK  # every entry made
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f'''
        import sys, time
        from filelock import FileLock
        lock = FileLock({str(lane_repo.cache / ".lock")!r})
        lock.acquire()
        print("held", flush=True)
        time.sleep(30)
    ''')], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"  # another process is "building" now
        t0 = time.monotonic()
        assert cli("run", "01", "--quiet", "--no-tracking", *lane_repo.args()) == Exit.OK
        assert time.monotonic() - t0 < 20  # it never took the lock
    finally:
        holder.kill()
        holder.wait()


# --------------------------------------------------------------------------- the estimate, on data

def _task(index: int, gpus: int = 1, whole: bool = True, memory: float | None = None) -> sweep_plan.Task:
    return sweep_plan.Task(index=index, pack=f"{index:02d}", target="fake", lanes=("lane",),
                      requires="cuda" if gpus else "cpu", need=Need(gpus=gpus, whole=whole, memory_gib=memory),
                      why=(), timeout_s=60, state="run")


def _host(n: int, jobs: int = 16) -> sweep_schedule.Host:
    return sweep_schedule.Host(tuple(sweep_schedule.Gpu(str(i), 80.0) for i in range(n)), jobs, "--gpus")


def test_the_estimate_replays_the_scheduler_longest_first():
    plan = sweep_plan.Plan((_task(0), _task(1), _task(2)))
    est = sweep_estimate.estimate(plan, {0: 10.0, 1: 10.0, 2: 30.0}, _host(2))
    # in plan order the 30 s task would start at 10 s and end at 40 s; offered first it ends at 30 s
    assert (est.serial_s, est.makespan_s, est.longest_s) == (50.0, 30.0, 30.0)
    starts = {r["index"]: (r["start_s"], r["gpus"]) for r in est.tasks}
    assert starts[2] == (0.0, ["0"]) and starts[0][0] == 0.0 and starts[1][0] == 10.0
    assert est.as_json()["makespan_over_serial"] == 0.6
    assert [t.index for t in sweep_estimate.by_length(plan.tasks, {0: 10.0, 1: None, 2: 30.0})] == [1, 2, 0]


def test_the_estimate_holds_groups_and_shares_and_names_what_it_left_out():
    plan = sweep_plan.Plan((_task(0, gpus=2), _task(1, whole=False, memory=30.0), _task(2, whole=False, memory=30.0),
                       _task(3, gpus=4), _task(4), _task(5, gpus=0)))
    est = sweep_estimate.estimate(plan, {0: 20.0, 1: 5.0, 2: 5.0, 3: 1.0, 4: None, 5: 7.0}, _host(2, jobs=1))
    rows = {r["index"]: r for r in est.tasks}
    assert set(rows) == {0, 1, 2, 5}
    assert est.unknown == ("04 lane",) and est.too_big == ("03 lane",)
    assert rows[0]["gpus"] == ["0", "1"] and rows[0]["start_s"] == 0.0
    # one CPU slot: each task waits for the one before it; the two sharers fit one GPU's 80 GiB together
    assert rows[1]["start_s"] >= 20.0 and est.makespan_s == 37.0


def test_estimate_reads_durations_from_the_receipts_and_needs_plan(lane_repo, capsys):
    import io
    from contextlib import redirect_stdout

    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK
    took = sum(r.duration_s for r in find(lane_repo.root, "fake", "01"))
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert cli("sweep", "--plan", "--estimate", "--json", "--rerun", "--gpus", "", *lane_repo.args()) == Exit.OK
    est = json.loads(buf.getvalue())
    assert est["kind"] == "patchlane-sweep-estimate" and est["unknown"] == [] and est["host"]["gpus"] == []
    assert est["serial_s"] == pytest.approx(took, abs=1e-3) and est["makespan_s"] == est["serial_s"]
    assert cli("sweep", "--estimate", *lane_repo.args()) == Exit.USAGE
    assert "--estimate goes with --plan" in capsys.readouterr().err


def test_the_plan_table_says_which_gpu_tasks_this_host_would_skip(lane_repo, capsys):
    """On a host without GPUs the table does not list GPU tasks as 'run'; the JSON plan (for any host) does."""
    lane_repo.write_tracking(extra=EXTRA, requires="cuda")
    assert cli("sweep", "--plan", "--gpus", "", "--format", "plain", *lane_repo.args()) == Exit.OK
    out = capsys.readouterr()
    rows = [line.split("\t") for line in out.out.splitlines()]
    header, rows = rows[0], rows[1:]
    states = {(r[header.index("pack")], r[header.index("lanes")]): r[header.index("state")] for r in rows}
    gpu = {k: v for k, v in states.items() if int(rows[[*states].index(k)][header.index("gpus")])}
    assert gpu and all(v.startswith("skip here (needs ") and v.endswith("this host has 0)") for v in gpu.values())
    assert "task(s) would be skipped here" in out.err
    assert {t["state"] for t in _plan(lane_repo, "--gpus", "")["tasks"] if t["gpus"]} == {"run"}
