"""nox sessions: ``tests``, ``lint``, and one ``<target>_pack<NN>`` per pack in tracking.toml.

A pack session installs the harness (and what the target's import check needs,
from requirements/lane-<target>.txt) into its virtualenv and runs
``harness run <pack>``. Its exit code is the harness's (see ``harness --help``):
0 all lanes as expected, 3 a GPU lane was skipped on this host, others failures.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from harness.errors import Exit  # noqa: E402  (stdlib-only module)
from harness.sessions import pack_sessions  # noqa: E402  (stdlib-only module)

nox.options.reuse_venv = "yes"
nox.options.sessions = ["lint", "tests"]


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (CI calls this): unit tests plus the real liger-kernel pin integration test."""
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the harness, tests, reproducers and this file."""
    session.install("ruff==0.17.6")
    session.run("ruff", "check", "harness", "tests", "repros", "noxfile.py")


def _pack_session(spec):
    def run_pack(session: nox.Session) -> None:
        session.install("-e", ".")
        if spec.requirements:
            session.install("-r", spec.requirements)
        with tempfile.TemporaryDirectory() as tmp:
            result = Path(tmp) / "result.json"
            session.run("harness", "run", spec.pack, "--result-file", str(result), *session.posargs,
                        success_codes=[int(c) for c in Exit])
            code = Exit(json.loads(result.read_text())["exit"]) if result.exists() else Exit.USAGE
        if code != Exit.OK:
            session.warn(f"{spec.name}: harness exit {int(code)} ({code.name})")
            raise SystemExit(int(code))  # keep the harness's exit code; nox would fold SKIPPED into 0

    run_pack.__doc__ = spec.description
    return nox.session(name=spec.name, python=spec.python, default=False)(run_pack)


for _spec in pack_sessions(ROOT):
    globals()[_spec.name] = _pack_session(_spec)
