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
