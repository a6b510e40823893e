"""Each rank's output a whole line per write (harness/lane/rank_lines.py), with real processes on one pipe."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from harness.lane import runs

# Rank "a" writes the first half of its line and waits; rank "b" writes a whole line meanwhile; then "a" ends its line.
# Printed straight into one pipe, b's line lands inside a's (what broke receipts/megatron-lm/10/...-fix-dev-tp2).
RANK = textwrap.dedent('''\
    import os, sys, time
    who, flags = sys.argv[1], sys.argv[2]
    def wait(name):
        for _ in range(1000):
            if os.path.exists(os.path.join(flags, name)):
                return
            time.sleep(0.01)
        raise SystemExit("no " + name)
    if who == "a":
        sys.stdout.write("FIGURE alpha first half"); sys.stdout.flush()
        open(os.path.join(flags, "a-started"), "w").close()
        wait("b-done")
        sys.stdout.write(" second half\\n"); sys.stdout.flush()
    else:
        wait("a-started")
        sys.stdout.write("FIGURE bravo whole\\n"); sys.stdout.flush()
        open(os.path.join(flags, "b-done"), "w").close()
''')


def _two_ranks(tmp_path, wrapped: bool) -> list[str]:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    flags = tmp_path / ("flags-wrapped" if wrapped else "flags-plain")
    flags.mkdir()
    read, write = os.pipe()
    lead = [sys.executable, str(runs.RANK_LINES), str(tmp_path / "lines.lock")] if wrapped else [sys.executable]
    procs = [subprocess.Popen([*lead, str(script), who, str(flags)], stdout=write) for who in ("a", "b")]
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        out = fh.read().decode()
    assert [p.wait(timeout=30) for p in procs] == [0, 0]
    return out.splitlines()


def test_a_line_written_in_two_parts_stays_whole_beside_another_rank(tmp_path):
    # the fault is real: without the wrapper, b's line lands inside a's
    assert _two_ranks(tmp_path, wrapped=False) == ["FIGURE alpha first halfFIGURE bravo whole", " second half"]
    # with it, each line arrives whole, in the order the lines were completed
    assert _two_ranks(tmp_path, wrapped=True) == ["FIGURE bravo whole", "FIGURE alpha first half second half"]


def _wrapped(tmp_path, code: str, **kwargs) -> subprocess.CompletedProcess:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(runs.RANK_LINES), str(tmp_path / "l.lock"), str(script)],
                          capture_output=True, timeout=60, **kwargs)


def test_exit_code_stderr_and_an_unended_last_line_come_through(tmp_path):
    proc = _wrapped(tmp_path, '''\
        import sys
        sys.stderr.write("to stderr\\n"); sys.stderr.flush()
        sys.stdout.write("no newline at the end"); sys.stdout.flush()
        sys.exit(7)
    ''')
    assert proc.returncode == 7
    assert proc.stdout.decode().splitlines() == ["to stderr", "no newline at the end"]


def test_a_rank_killed_by_a_signal_ends_its_wrapper_the_same_way(tmp_path):
    proc = _wrapped(tmp_path, '''\
        import os, signal
        print("before", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    ''')
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout.decode() == "before\n"


def test_sigterm_reaches_the_rank(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent('''\
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *_: (print("rank got SIGTERM", flush=True), sys.exit(5)))
        print("ready", flush=True)
        time.sleep(30)
    '''))
    proc = subprocess.Popen([sys.executable, str(runs.RANK_LINES), str(tmp_path / "l.lock"), str(script)],
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.stdout.read() == b"rank got SIGTERM\n"
    assert proc.wait(timeout=30) == 5


def test_multi_rank_launch_runs_each_rank_under_the_wrapper(tmp_path):
    cmd = runs.launch_command("py", 2, tmp_path / "r.py", ["--x"], tmp_path / "lock")
    assert cmd == ["py", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(runs.RANK_LINES),
                   str(tmp_path / "lock"), str(tmp_path / "r.py"), "--x"]
    assert runs.launch_command("py", 1, tmp_path / "r.py", []) == ["py", str(tmp_path / "r.py")]
