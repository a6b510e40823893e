"""``harness sweep --slurm``: the plan as Slurm array jobs, followed, cancelled, resumed and gathered.

The state parsing and the exit mapping are tested on recorded Slurm output. The end-to-end test runs against a
real single-node Slurm (``.ci/slurm-up.sh``: munged, slurmctld and slurmd with four fake GPUs as GRES); where
Slurm cannot start it is skipped with the reason, except where ``PATCHLANE_REQUIRE_SLURM=1`` (CI) makes that a
failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from conftest import REPO, cli
from test_sweep import _add_pack

from harness.errors import Exit
from harness.host import slurm
from harness.host.sweep_plan import Plan
from harness.lane.receipts import find
from harness.lane.tracking import Tracking

# ------------------------------------------------------------------------------------ recorded Slurm output

SCONTROL = """\
JobId=41 ArrayJobId=40 ArrayTaskId=0 JobName=patchlane-sweep-0gpu JobState=COMPLETED Reason=None ExitCode=0:0
JobId=42 ArrayJobId=40 ArrayTaskId=1 JobName=patchlane-sweep-0gpu JobState=CANCELLED Reason=None ExitCode=0:15
JobId=40 ArrayJobId=40 ArrayTaskId=2-4,7%2 JobName=patchlane-sweep-0gpu JobState=PENDING Reason=Resources ExitCode=0:0
JobId=45 ArrayJobId=40 ArrayTaskId=5 JobName=patchlane-sweep-0gpu JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15
"""


def test_scontrol_lines_give_every_array_task_its_state_and_exit():
    states = {}
    for line in SCONTROL.splitlines():
        states.update(slurm.parse_scontrol_line(line))
    assert sorted(states) == ["40_0", "40_1", "40_2", "40_3", "40_4", "40_5", "40_7"]
    assert states["40_0"] == slurm.TaskState("COMPLETED", 0, 0)
    assert states["40_1"].state == "CANCELLED" and states["40_1"].signal == 15 and not states["40_1"].active
    assert states["40_3"].state == "PENDING" and states["40_3"].active


def test_sacct_lines_read_cancelled_by_and_pending_ranges():
    assert slurm.parse_sacct_line("77_3|CANCELLED by 0|0:15") == {"77_3": slurm.TaskState("CANCELLED", 0, 15)}
    assert slurm.parse_sacct_line("77_[4-5]|PENDING|0:0") == {"77_4": slurm.TaskState("PENDING", 0, 0),
                                                              "77_5": slurm.TaskState("PENDING", 0, 0)}
    assert slurm.parse_sacct_line("77.batch|COMPLETED|0:0") == {}  # a step, not a task


@pytest.mark.parametrize(("state", "code"), [("CANCELLED", Exit.TERMINATED), ("TIMEOUT", Exit.TIMEOUT),
                                             ("NODE_FAIL", Exit.TERMINATED), ("OUT_OF_MEMORY", Exit.CRASH),
                                             ("FAILED", Exit.CRASH), ("COMPLETED", Exit.CRASH)])
def test_a_task_without_a_result_exits_as_a_local_lane_would(state, code):
    from harness.host.sweep_plan import Task
    from harness.host.sweep_schedule import Need

    task = Task(0, "01", "fake", ("bug",), "cpu", Need(0, True, None, 1), (), 60, "run")
    end = slurm.TaskEnd(task, None, None, slurm.TaskState(state, 0, 15))
    assert end.exit() == code and state in end.reason()
    # a task that wrote its result is judged by it, whatever Slurm says
    assert slurm.TaskEnd(task, None, {"exit": 1, "lanes": []}, slurm.TaskState(state)).exit() == Exit.MISMATCH


def test_a_refused_submission_cancels_what_it_submitted_and_leaves_no_round(lane_repo, tmp_path, capsys):
    calls: list[list[str]] = []

    def runner(argv):
        calls.append(list(argv))
        if argv[0] == "sbatch" and any(a.startswith("--dependency") for a in argv):
            return subprocess.CompletedProcess(argv, 1, "", "sbatch: error: Invalid account\n")
        if argv[0] == "sbatch":
            return subprocess.CompletedProcess(argv, 0, f"{100 + len(calls)}\n", "")
        return subprocess.CompletedProcess(argv, 0, "", "")

    (tmp_path / "p.json").write_text(json.dumps(cli_json(lane_repo, "sweep", "--plan", "--json", capsys=capsys)))
    plan = Plan.load(tmp_path / "p.json", Tracking.load(lane_repo.root))
    rdir = slurm.new_round_dir(tmp_path / "s")
    with pytest.raises(slurm.SlurmError, match="Invalid account"):
        slurm.submit(plan, [t.index for t in plan.tasks], rdir, slurm.Slurm(runner), slurm.Options(),
                     ["harness"], [], ["harness", "sweep", "--slurm-gather", str(rdir)])
    assert calls[-1][0] == "scancel" and calls[-1][1:] == ["101"]
    assert slurm.rounds(tmp_path / "s") == []  # no round.json: never resumed as if submitted


def cli_json(lane_repo, *argv: str, capsys) -> dict:
    capsys.readouterr()
    assert cli(*argv, *lane_repo.args()) == Exit.OK
    return json.loads(capsys.readouterr().out)


# ------------------------------------------------------------------------------------ a real Slurm

@pytest.fixture(scope="session")
def slurm_conf() -> str:
    """A running single-node Slurm (started with .ci/slurm-up.sh when none answers); its SLURM_CONF."""
    required = os.environ.get("PATCHLANE_REQUIRE_SLURM") == "1"

    def unavailable(why: str):
        if required:
            pytest.fail(f"Slurm is required here (PATCHLANE_REQUIRE_SLURM=1) but {why}")
        pytest.skip(f"no Slurm: {why}")

    if os.geteuid() != 0 and not os.environ.get("SLURM_CONF"):
        unavailable("starting one needs root (.ci/slurm-up.sh)")
    proc = subprocess.run(["bash", str(REPO / ".ci" / "slurm-up.sh")], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        unavailable(f".ci/slurm-up.sh exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout.strip().splitlines()[-1]


# A torch that sees the GPUs CUDA_VISIBLE_DEVICES names (Slurm sets it from the GRES it allocates) and launches
# ranks as torch.distributed.run does: enough for _lane.stamp and for a lane of two ranks.
FAKE_TORCH = {
    "torch/__init__.py": textwrap.dedent('''\
        import os
        __version__ = "0.0-fake"
        class version:
            cuda = "0.0-fake"
        def _ids():
            return [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
        class _Props:
            name, major, minor, total_memory = "FakeGPU", 9, 0, 80 * 2**30
        class cuda:
            is_available = staticmethod(lambda: bool(_ids()))
            device_count = staticmethod(lambda: len(_ids()))
            get_device_name = staticmethod(lambda i=0: "FakeGPU")
            set_device = staticmethod(lambda i: None)
            current_device = staticmethod(lambda: 0)
            get_device_properties = staticmethod(lambda i: _Props())
            driver_version = staticmethod(lambda: "0.0-fake")
    '''),
    "torch/distributed/__init__.py": "",
    "torch/distributed/run.py": textwrap.dedent('''\
        import os, subprocess, sys
        args = sys.argv[1:]
        n = 1
        while args and args[0].startswith("--"):
            flag = args.pop(0)
            if flag.startswith("--nproc_per_node=") or flag.startswith("--nproc-per-node="):
                n = int(flag.split("=", 1)[1])
        procs = [subprocess.Popen([sys.executable, *args], env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r),
                                  "WORLD_SIZE": str(n)}) for r in range(n)]
        sys.exit(max(p.wait() for p in procs))
    '''),
}

GPU_REPRO = '''
import os
import _lane
_lane.stamp("fakepkg", "fakepkg.core")
if os.environ.get("RANK", "0") == "0":
    _lane.figure("visible", os.environ.get("CUDA_VISIBLE_DEVICES"))
    _lane.verdict("BUG_REPRODUCED")
'''

TP2 = textwrap.dedent('''
    [[packs.02.lanes]]
    name = "tp2"
    base = "1.0"
    patched = false
    expect = "BUG_REPRODUCED"
    nproc = 2
''')

SLOW_REPRO = '''
import os, pathlib, time
import _lane
_lane.stamp("fakepkg", "fakepkg.core")
marker = pathlib.Path(os.environ["SLOW_MARKER"])
if not marker.exists():  # the first run waits to be cancelled; a resubmitted one finishes at once
    marker.touch()
    time.sleep(300)
_lane.verdict("BUG_REPRODUCED")
'''


def _wait_running(job: str, marker: Path, timeout: float = 180.0) -> None:
    """Until Slurm runs ``job`` and its reproducer has reached its wait (``marker`` written)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = slurm.Slurm().states([job.split("_")[0]]).get(job)
        if st is not None and st.state == "RUNNING" and marker.exists():
            return
        time.sleep(0.5)
    raise AssertionError(f"Slurm task {job}'s reproducer did not start within {timeout} s")


@pytest.mark.slurm
def test_a_sweep_through_a_real_slurm_runs_cancels_resubmits_and_imports(slurm_conf, lane_repo, tmp_path,
                                                                        monkeypatch, capsys):
    monkeypatch.setenv("SLURM_CONF", slurm_conf)
    monkeypatch.setenv(slurm_poll_env(), "1")
    site = tmp_path / "fake-torch"
    for name, text in FAKE_TORCH.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(REPO)]))
    monkeypatch.setenv("SLOW_MARKER", str(tmp_path / "slow-ran-once"))
    _add_pack(lane_repo, "02", GPU_REPRO, requires="cuda", lanes=TP2)
    _add_pack(lane_repo, "03", SLOW_REPRO)
    sdir = tmp_path / "slurm-sweep"

    sub = cli_json(lane_repo, "sweep", "--slurm", "--slurm-dir", str(sdir), "--json", capsys=capsys)
    arrays = {a["gpus"]: a for a in sub["arrays"]}
    assert sorted(arrays) == [0, 1, 2] and sub["gather"]  # one array per GPU count, then the gather job
    plan = json.loads((sdir / "round-1" / "plan.json").read_text())
    index = {(t["pack"], t["lanes"][0]): t["index"] for t in plan["tasks"]}
    assert arrays[2]["tasks"] == [index["02", "tp2"]] and arrays[1]["tasks"] == [index["02", "a"]]
    assert sorted(arrays[0]["tasks"]) == sorted([index["01", "bug"], index["03", "a"]])

    slow = f"{arrays[0]['job']}_{index['03', 'a']}"
    _wait_running(slow, tmp_path / "slow-ran-once")
    subprocess.run(["scancel", slow], check=True)  # one task cancelled as a person would

    capsys.readouterr()
    code = cli("sweep", "--slurm-watch", "--slurm-dir", str(sdir), "--json", *lane_repo.args())
    summary = json.loads(capsys.readouterr().out)
    by = {(o["pack"], o["lane"]): o for o in summary["lanes"]}
    assert by["01", "bug"]["verdict"] == by["01", "fix"]["verdict"] == "pass"
    assert by["02", "a"]["verdict"] == by["02", "tp2"]["verdict"] == "pass"
    assert by["03", "a"]["exit_name"] == "TERMINATED" and "CANCELLED" in by["03", "a"]["reason"]
    assert code == Exit.TERMINATED == summary["exit"]  # the worst lane's code, as a local sweep
    seen = {r.lane: r.figures[0].value.split(",") for r in find(lane_repo.root, "fake", "02")}
    assert len(seen["tp2"]) == 2 and len(seen["a"]) == 1  # the GRES gave each task the GPUs it asked for
    assert {r.lane for r in find(lane_repo.root, "fake", "01")} == {"bug", "fix"}  # imported by the gather job
    assert cli("receipts", "verify", *lane_repo.args()) == Exit.OK

    # run it again: only the cancelled task is submitted; the rest have current receipts
    capsys.readouterr()
    code = cli("sweep", "--slurm", "--watch", "--slurm-dir", str(sdir), "--json", *lane_repo.args())
    again = json.loads(capsys.readouterr().out)
    round2 = json.loads((sdir / "round-2" / "round.json").read_text())
    plan2 = json.loads((sdir / "round-2" / "plan.json").read_text())
    submitted = [t for a in round2["arrays"] for t in a["tasks"]]
    assert [plan2["tasks"][i]["pack"] for i in submitted] == ["03"]
    assert code == Exit.OK and {(o["pack"], o["verdict"]) for o in again["lanes"]} == {
        ("01", "current"), ("02", "current"), ("03", "pass")}, again
    assert cli("receipts", "verify", *lane_repo.args()) == Exit.OK


def slurm_poll_env() -> str:
    from harness.commands._sweep_slurm import POLL_ENV

    return POLL_ENV


def test_the_slurm_script_is_shell_that_bash_accepts(tmp_path):
    text = slurm.task_script(tmp_path / "round 1", ["/usr/bin/python3", "-m", "harness"], ["--root", "/r o"])
    path = tmp_path / "task.sh"
    path.write_text(text)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    assert text.startswith("#!/bin/bash") and "'/r o'" in text and shutil.which("bash")


def test_the_gather_summary_reads_each_lane_from_the_receipt_it_brought_back(tmp_path):
    """A task's result said pass while it brought back no receipt of that pack's lane, or a receipt whose verdict
    is a mismatch: the summary said pass (issue 55 item 5). It now goes by the receipt, keyed by pack and lane."""
    from types import SimpleNamespace as NS

    from harness.commands._sweep_slurm import _as_its_receipt_says
    from harness.lane.receipts import Verdict

    end = NS(task=NS(pack="01", index=3, target="fake"))
    rnd = NS(receipts_dir=lambda i: tmp_path / f"task-{i}")
    ctx = NS(root=tmp_path)
    said = {"pack": "01", "lane": "fix", "verdict": "pass", "exit": 0, "exit_name": "OK", "receipt": None}
    missing = _as_its_receipt_says(ctx, rnd, end, "fix", said, None)
    assert missing["verdict"] == "error" and missing["exit"] == Exit.TAMPERED
    assert "no receipt of pack 01 lane fix" in missing["reason"]
    mismatch = _as_its_receipt_says(ctx, rnd, end, "fix", said, NS(verdict=Verdict.MISMATCH, reason="printed X"))
    assert mismatch["verdict"] == "mismatch" and mismatch["exit"] == Exit.MISMATCH
    agrees = _as_its_receipt_says(ctx, rnd, end, "fix", said, NS(verdict=Verdict.PASS, reason="ok"))
    assert agrees["verdict"] == "pass" and agrees["exit"] == 0
    skipped = _as_its_receipt_says(ctx, rnd, end, "fix", dict(said, verdict="skipped", exit=3), None)
    assert skipped["verdict"] == "skipped"
