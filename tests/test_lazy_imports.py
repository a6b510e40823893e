"""Commands that never talk to GitHub do not import ``requests``; none imports GitPython (``git``).

Each command runs in a fresh interpreter (an in-process run would see whatever earlier tests
imported), and that interpreter reports which of the watched modules it loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO

from harness.errors import Exit

WATCHED = ("requests", "urllib3", "git")
_PROBE = f"""
import json, sys
WATCHED = {WATCHED!r}
from harness.main import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as f:
    json.dump({{"code": code or 0, "loaded": sorted(m for m in WATCHED if m in sys.modules)}}, f)
"""


def _loaded(tmp_path, *args: str) -> tuple[int, list[str]]:
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(report), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert report.is_file(), proc.stderr
    data = json.loads(report.read_text())
    return data["code"], data["loaded"]


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["list", "--help"], ["run", "--help"]])
def test_parsing_and_help_import_neither(tmp_path, args):
    code, loaded = _loaded(tmp_path, *args)
    assert code == 0 and loaded == []


def test_list_and_run_import_neither(lane_repo, tmp_path):
    code, loaded = _loaded(tmp_path, "list", *lane_repo.args())
    assert code == Exit.OK and loaded == []
    code, loaded = _loaded(tmp_path, "run", "01", "--quiet", *lane_repo.args())
    assert code == Exit.OK and loaded == []


def test_the_probe_sees_requests_where_github_is_talked_to(tmp_path):
    """The check can fail: a command path that builds the GitHub client does load ``requests``."""
    code = ("import sys\nfrom harness.upstream.github import GitHub\nGitHub('http://127.0.0.1:9')\n"
            "print('requests' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "True", proc.stderr
