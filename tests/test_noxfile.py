"""The pack sessions of noxfile.py, run by a real nox on a fixture repository.

The lane environment is made by hand (a virtualenv without pip, so any reinstall the noxfile
attempts fails loudly) with a stand-in ``harness`` that exits with the code a test chose; the
stamp is the noxfile's own (``lane_env_stamp``). Nothing here needs the network.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO

from harness.errors import Exit
from harness.lane.sessions import STAMP_FILE, lane_env_stamp, pack_sessions

FAKE_HARNESS = textwrap.dedent('''\
    import json, pathlib, sys
    args = sys.argv[1:]
    pack = args[1]
    code = int((pathlib.Path({root!r}) / "codes" / pack).read_text())
    print(f"fake harness: pack {{pack}} exits {{code}}")
    pathlib.Path(args[args.index("--result-file") + 1]).write_text(json.dumps({{"exit": code, "lanes": []}}))
    sys.exit(code)
''')


@pytest.fixture
def nox_repo(lane_repo):
    root = lane_repo.root
    lane_repo.write_tracking(extra=textwrap.dedent('''
        [packs.02]
        title = "second pack"
        target = "fake"
        kind = "pr"
        state = "ready"
        files = ["src/fakepkg/core.py"]
        depends_on = []
        requires = "cpu"
        base = "1.0"
        reproducer = "repros/fake/pack01.py"
    '''))
    (root / "noxfile.py").write_text((REPO / "noxfile.py").read_text())
    (root / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    (root / "harness").symlink_to(REPO / "harness")
    (root / "codes").mkdir()
    envdir = root / ".nox" / "lane-fake-py{}.{}".format(*sys.version_info[:2])
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(envdir)], check=True)
    harness = envdir / "bin" / "harness"
    harness.write_text(f"#!{envdir / 'bin' / 'python'}\n" + FAKE_HARNESS.format(root=str(root)))
    harness.chmod(0o755)
    write_stamp(root, envdir)
    return root, envdir


def write_stamp(root: Path, envdir: Path, python: str = sys.executable) -> None:
    """The stamp the noxfile writes after installing ``envdir`` with ``python``."""
    spec = pack_sessions(root)[0]
    stamp = lane_env_stamp(root, spec, python, envdir)
    (envdir / STAMP_FILE).write_text(json.dumps(stamp))
    (envdir / ".patchlane-interpreter.json").write_text(json.dumps(stamp["interpreter"]))


def nox(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOX")}
    return subprocess.run([sys.executable, "-m", "nox", "-f", str(root / "noxfile.py"), *args],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def codes(root: Path, **by_pack: int) -> None:
    for pack, code in by_pack.items():
        (root / "codes" / pack.removeprefix("p")).write_text(str(code))


def test_one_session_alone_exits_with_the_harness_code_and_installs_nothing(nox_repo):
    root, _ = nox_repo
    codes(root, p01=3)
    proc = nox(root, "-s", "fake_pack01")
    assert proc.returncode == 3, proc.stderr
    assert "nothing to install" in proc.stderr and "pip" not in proc.stderr
    # its time is said whatever the outcome (CI's 618 s for the mamba step could not be split by session)
    assert re.search(r"fake_pack01: harness exit 3 \(SKIPPED\) in \d+ s", proc.stderr), proc.stderr
    codes(root, p01=0)
    assert nox(root, "-s", "fake_pack01").returncode == 0


def test_several_sessions_all_run_and_nox_summarizes(nox_repo):
    root, _ = nox_repo
    codes(root, p01=6, p02=3)
    proc = nox(root, "-s", "fake_pack01", "fake_pack02")
    assert proc.returncode == 1  # nox's own: one session aborted
    assert "fake harness: pack 01 exits 6" in proc.stdout + proc.stderr
    assert "fake harness: pack 02 exits 3" in proc.stdout + proc.stderr  # the second ran after the first failed
    summary = [line for line in proc.stderr.splitlines() if line.startswith("nox > * fake_pack")]
    assert "nox > Session fake_pack01 aborted: harness exit 6 (BUILD)" in proc.stderr
    assert any(line.endswith("fake_pack01: aborted") for line in summary), summary
    assert any("fake_pack02: skipped" in line and "harness exit 3 (SKIPPED)" in line for line in summary), summary
    codes(root, p01=0)
    assert nox(root, "-s", "fake_pack01", "fake_pack02").returncode == 0  # one validated, one skipped: not a failure


def test_several_sessions_that_all_skipped_validated_nothing_and_exit_skipped(nox_repo):
    """nox folds skipped sessions into its 0; when every pack session skipped, nothing was validated: exit 3."""
    root, _ = nox_repo
    codes(root, p01=3, p02=3)
    proc = nox(root, "-s", "fake_pack01", "fake_pack02")
    assert proc.returncode == int(Exit.SKIPPED), proc.stderr
    assert "fake harness: pack 01 exits 3" in proc.stdout + proc.stderr  # both ran
    assert "none of the 2 pack sessions validated anything" in proc.stderr
    codes(root, p01=13)  # a pack without lanes validates nothing either
    assert nox(root, "-s", "fake_pack01", "fake_pack02").returncode == int(Exit.SKIPPED)


@pytest.mark.parametrize("argv", [["-s", "fake_pack99"], ["-s", "fake_pack01", "fake_pack9"], ["--session=fake_pck01"]])
def test_a_session_name_nox_does_not_have_is_bad_input_not_a_skip(nox_repo, argv):
    """nox's own code for "Sessions not found" is 3, a skip's: a typo must exit 2 (USAGE) and name what exists."""
    root, _ = nox_repo
    codes(root, p01=0, p02=0)
    proc = nox(root, *argv)
    assert proc.returncode == int(Exit.USAGE), proc.stderr
    assert "no session named" in proc.stderr and "fake_pack01 fake_pack02" in proc.stderr
    assert "fake harness" not in proc.stdout + proc.stderr  # nothing ran


def test_sessions_carry_their_target_as_a_tag(nox_repo):
    root, _ = nox_repo
    codes(root, p01=0, p02=0)
    proc = nox(root, "-t", "fake")
    assert proc.returncode == 0, proc.stderr
    assert "fake harness: pack 01" in proc.stdout + proc.stderr and "fake harness: pack 02" in proc.stdout + proc.stderr
    assert nox(root, "-t", "no-such-target").returncode != 0


@pytest.mark.parametrize("change", ["requirements", "pyproject"])
def test_changed_inputs_make_the_session_install_again(nox_repo, change):
    root, envdir = nox_repo
    codes(root, p01=0)
    if change == "requirements":
        (root / "requirements").mkdir()
        (root / "requirements" / "lane-fake.txt").write_text("tinydep==1.0\n")
    else:
        (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text() + "\n# changed\n")
    proc = nox(root, "-s", "fake_pack01")
    # the environment has no pip: the attempt to install is what fails the session
    assert proc.returncode != 0, proc.stderr
    assert any(line.startswith("nox > Command ") and "-m pip install" in line
               and line.endswith("failed with exit code 1") for line in proc.stderr.splitlines()), proc.stderr
    assert not (envdir / STAMP_FILE).exists()  # a failed install leaves no stamp
    assert (envdir / "bin" / "harness").exists()  # ... and keeps the environment (same interpreter)


def test_another_interpreter_remakes_the_environment(nox_repo, tmp_path, monkeypatch):
    root, envdir = nox_repo
    codes(root, p01=0)
    other = tmp_path / "python3.11"  # the environment was made by another interpreter than nox's
    other.write_text("#!/bin/sh\n")
    write_stamp(root, envdir, str(other))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # the new venv has pip: keep its install offline, and failing
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    proc = nox(root, "-s", "fake_pack01")
    assert "creating the fake lane environment" in proc.stderr, proc.stderr
    assert proc.returncode != 0 and not (envdir / STAMP_FILE).exists()
    assert not (envdir / "bin" / "harness").exists()  # venv --clear: nothing of the old one is left
    made_with = json.loads((envdir / ".patchlane-interpreter.json").read_text())
    assert made_with[0] == os.path.realpath(sys.executable)


def test_stamp_follows_each_of_its_inputs(lane_repo, tmp_path):
    root = lane_repo.root
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    python = tmp_path / "python3.97"
    python.write_text("#!/bin/sh\n")
    spec = pack_sessions(root)[0]
    envdir = tmp_path / "env"
    base = lane_env_stamp(root, spec, str(python), envdir)
    assert lane_env_stamp(root, spec, str(python), envdir) == base
    assert lane_env_stamp(root, spec, str(python), tmp_path / "env2") != base
    (root / "pyproject.toml").write_text("[project]\nname = 'y'\n")
    changed = lane_env_stamp(root, spec, str(python), envdir)
    assert changed != base
    python.write_text("#!/bin/sh\n# upgraded in place\n")
    assert lane_env_stamp(root, spec, str(python), envdir)["interpreter"] != changed["interpreter"]
    (root / "requirements").mkdir()
    (root / "requirements" / "lane-fake.txt").write_text("a==1\n")
    spec = pack_sessions(root)[0]
    first = lane_env_stamp(root, spec, str(python), envdir)
    (root / "requirements" / "lane-fake.txt").write_text("a==2\n")
    assert lane_env_stamp(root, spec, str(python), envdir) != first


def test_one_broken_pack_file_fails_its_own_session_in_one_line_and_no_other(nox_repo):
    """A newcomer's round 4, item 6: one bad pack.toml broke every session, `nox -l` too, with a traceback."""
    root, _ = nox_repo
    codes(root, p01=0, p02=0)
    broken = root / "patches" / "fake" / "02" / "pack.toml"
    broken.parent.mkdir(parents=True, exist_ok=True)
    broken.write_text('[[lanes]]\nname = "fix"\nbase = 1.0.0\n')  # not TOML
    listed = nox(root, "-l")
    assert listed.returncode == 0, listed.stderr
    assert "fake_pack01" in listed.stdout and "fake_pack02" in listed.stdout
    assert "cannot run: patches/fake/02/pack.toml" in listed.stdout
    ok = nox(root, "-s", "fake_pack01")
    assert ok.returncode == 0 and "fake harness: pack 01 exits 0" in ok.stdout + ok.stderr
    bad = nox(root, "-s", "fake_pack02")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "patches/fake/02/pack.toml" in bad.stderr and "line 3" in bad.stderr


def test_a_missing_interpreter_is_exit_build_not_a_verdict_mismatch(nox_repo):
    """Round 4, item 13: a pack session without its python3.12 exited 1, which reads as a verdict mismatch."""
    root, _ = nox_repo
    codes(root, p01=0, p02=0)
    manifest = root / "upstream" / "fake.toml"
    text = manifest.read_text()
    manifest.write_text(text.replace('target = "fake"\n', 'target = "fake"\npython = "3.99"\n', 1))
    alone = nox(root, "-s", "fake_pack01")
    assert alone.returncode == Exit.BUILD, alone.stderr
    assert "needs python3.99" in alone.stderr and "exit 6 (BUILD)" in alone.stderr and "Traceback" not in alone.stderr
    both = nox(root, "-s", "fake_pack01", "fake_pack02")
    assert both.returncode == 1 and both.stderr.count("needs python3.99") >= 2  # nox's summary of several
