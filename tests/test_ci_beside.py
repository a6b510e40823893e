""".ci/beside.sh: CI steps that run beside the others (issue 49). A chain that fails beside fails the run, with its
log; a run that stops early takes the chain down with every process it started; each chain gets a store apart."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PRELUDE = f"""set -euo pipefail
step() {{ local name=$1; shift; echo "ci: step $name" >&2; "$@"; echo "ci: step $name: done" >&2; }}
. {ROOT / '.ci' / 'beside.sh'}
"""


def _ci(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    script = tmp_path / "run"
    script.write_text(PRELUDE + body)
    return subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60)


def test_a_chain_beside_passes_and_its_log_is_printed_whole_with_its_own_store(tmp_path):
    proc = _ci(tmp_path, """
chain() { step inner bash -c 'echo "store $PATCHLANE_HOME"'; }
beside side chain
step main true
joined side
echo "ci: all steps passed"
""")
    assert proc.returncode == 0, proc.stderr
    assert f"store {tmp_path}/.ci-cache-side" in proc.stdout + proc.stderr
    err = proc.stderr
    assert err.index("ci: step main: done") < err.index("ci: ---- .ci-logs/side.log") < err.index("ci: step inner")
    assert "ci: all steps passed" in proc.stdout


def test_a_chain_that_fails_beside_fails_the_run_with_its_exit_code(tmp_path):
    proc = _ci(tmp_path, """
chain() { step inner bash -c 'echo broken >&2; exit 5'; step never true; }
beside side chain
step main true
joined side
echo "ci: all steps passed"
""")
    assert proc.returncode == 5
    assert "broken" in proc.stderr and "ci: side failed (exit 5)" in proc.stderr
    assert "ci: step never" not in proc.stderr and "all steps passed" not in proc.stdout


def test_a_run_that_stops_early_takes_the_chain_and_its_children_down(tmp_path):
    marker = tmp_path / "late"
    proc = _ci(tmp_path, f"""
chain() {{ step inner bash -c 'echo $$ > {tmp_path}/child.pid; sleep 20; touch {marker}'; }}
beside side chain
while [ ! -s {tmp_path}/child.pid ]; do sleep 0.1; done
step main false
joined side
""")
    assert proc.returncode == 1
    pid = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the chain's child {pid} outlived the run")
    assert not marker.exists()


def _gone(pid: int, within: float = 15) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_a_chain_past_its_bound_is_stopped_and_fails_the_run_with_its_log(tmp_path):
    proc = _ci(tmp_path, f"""
BESIDE_LIMIT=2
chain() {{ step inner bash -c 'echo "started"; echo $$ > {tmp_path}/child.pid; sleep 50'; }}
beside side chain
step main true
joined side
echo "ci: all steps passed"
""")
    assert proc.returncode != 0 and "all steps passed" not in proc.stdout
    assert "ci: side stopped: ran past its bound of 2 s" in proc.stderr
    assert "ci: ---- .ci-logs/side.log" in proc.stderr and "started" in proc.stderr
    assert _gone(int((tmp_path / "child.pid").read_text()))


def test_a_chain_that_exits_0_having_run_no_step_fails(tmp_path):
    proc = _ci(tmp_path, """
chain() { true; }
beside side chain
step main true
joined side
echo "ci: all steps passed"
""")
    assert proc.returncode == 1 and "all steps passed" not in proc.stdout
    assert "ci: side exited 0 but finished no step: it ran nothing" in proc.stderr


def _started(tmp_path: Path, body: str) -> tuple[subprocess.Popen, int]:
    script = tmp_path / "run"
    script.write_text(PRELUDE + body)
    proc = subprocess.Popen(["bash", str(script)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 20
    while not (tmp_path / "child.pid").is_file() or not (tmp_path / "child.pid").read_text().strip():
        assert time.monotonic() < deadline, "the chain never started"
        time.sleep(0.1)
    return proc, int((tmp_path / "child.pid").read_text())


CHAIN_AND_WAIT = """
chain() {{ step inner bash -c 'echo "chain output"; echo $$ > {tmp}/child.pid; sleep 60'; }}
beside side chain
step main sleep 60
joined side
"""


def test_a_run_terminated_stops_the_chain_and_prints_its_log(tmp_path):
    import signal

    proc, child = _started(tmp_path, CHAIN_AND_WAIT.format(tmp=tmp_path))
    os.killpg(proc.pid, signal.SIGTERM)  # a CI cancellation: the run's process group (its chains have their own)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143
    assert "stopped: the run ended before it joined" in err and "chain output" in err
    assert _gone(child)


def test_a_run_killed_outright_is_noticed_by_the_chain_which_stops(tmp_path):
    import signal

    proc, child = _started(tmp_path, CHAIN_AND_WAIT.format(tmp=tmp_path))
    os.killpg(proc.pid, signal.SIGKILL)  # no trap runs: the chain's watcher must see the run gone
    proc.communicate(timeout=30)
    assert _gone(child), "the chain outlived a run killed with SIGKILL"
