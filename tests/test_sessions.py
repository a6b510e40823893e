from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.lane.sessions import pack_sessions

ROOT = Path(__file__).resolve().parent.parent


def test_one_session_per_pack_in_the_fixture(lane_repo):
    [spec] = pack_sessions(lane_repo.root)
    assert spec.name == "fake_pack01" and spec.pack == "01"
    assert "scale uses w[0]" in spec.description


def test_manifest_can_name_the_session_prefix(lane_repo):
    path = lane_repo.root / "upstream" / "fake.toml"
    path.write_text('session_prefix = "fk"\n' + path.read_text())
    assert pack_sessions(lane_repo.root)[0].name == "fk_pack01"


def test_manifest_can_name_the_session_python(lane_repo):
    assert pack_sessions(lane_repo.root)[0].python is None
    path = lane_repo.root / "upstream" / "fake.toml"
    path.write_text('python = "3.12"\n' + path.read_text())
    assert pack_sessions(lane_repo.root)[0].python == "3.12"


def test_nox_lists_every_pack_of_the_real_tracking_file():
    proc = subprocess.run([sys.executable, "-m", "nox", "-l", "-f", str(ROOT / "noxfile.py")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    listed = proc.stdout
    for spec in pack_sessions(ROOT):
        assert spec.name in listed
    assert "tests" in listed and "lint" in listed and "typecheck" in listed
    assert "liger_pack09" in listed


def test_sessions_of_one_target_share_one_lane_environment():
    specs = [s for s in pack_sessions(ROOT) if s.target == "megatron-lm"]
    assert len(specs) > 1
    assert {s.lane_env("3.12") for s in specs} == {"lane-megatron-lm-py3.12"}



def test_a_long_install_beats_with_the_environment_size_terminal_or_not(tmp_path):
    """The megatron lane environment's pip install printed nothing for three minutes off a terminal."""
    import time

    from harness.lane.sessions import heartbeat

    env = tmp_path / "lane-x"
    env.mkdir()
    lines: list[str] = []
    with heartbeat("installing torch into lane-x", grows=env, every=0.05, write=lines.append):
        (env / "blob").write_bytes(b"\0" * (3 * 2**20))
        time.sleep(0.3)
    assert len(lines) >= 3 and all("still installing torch into lane-x" in line for line in lines[:-1])
    assert "3 MiB in lane-x" in lines[-2]
    assert lines[-1].startswith("  installing torch into lane-x: done in ")
    noxfile = (ROOT / "noxfile.py").read_text()
    body = noxfile[noxfile.index("def _lane_env"):noxfile.index("def _selected")]
    assert '"--quiet"' not in body and body.count("with heartbeat(") == 2


def test_the_serial_run_collects_only_the_files_of_the_serial_tests():
    """Collecting all of tests/ again for two 1-second tests took two minutes on a loaded host."""
    from conftest import SERIAL

    noxfile = (ROOT / "noxfile.py").read_text()
    for name in ("def tests(", "def tests_slow("):
        body = noxfile[noxfile.index(name):noxfile.index("@nox.session", noxfile.index(name))]
        assert '"no:xdist"' in body and "*_serial_files()" in body and '"-v"' in body
    assert SERIAL and all((ROOT / nodeid.split("::")[0]).is_file() for nodeid in SERIAL)


def test_nox_l_shows_each_session_in_one_whole_sentence():
    """'nox -l' prints a docstring's first line: it was cut mid-sentence for four sessions."""
    import ast

    tree = ast.parse((ROOT / "noxfile.py").read_text())
    sessions = [f for f in tree.body if isinstance(f, ast.FunctionDef)
                and any("session" in ast.unparse(d) for d in f.decorator_list)]
    assert len(sessions) >= 9
    for f in sessions:
        first = (ast.get_docstring(f) or "").splitlines()[0]
        assert first.endswith("."), (f.name, first)
        assert first.count("(") == first.count(")") and first.count("``") % 2 == 0, (f.name, first)
