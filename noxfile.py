"""nox sessions: ``tests``, ``lint``, ``typecheck``, and one ``<target>_pack<NN>`` per pack in tracking.toml.

A pack session runs ``harness run <pack>`` in its target's lane environment: one
virtualenv per target (``.nox/lane-<target>-py<X.Y>``), shared by all of that
target's pack sessions, holding the harness and requirements/lane-<target>.txt.
Sharing matters: the megatron lane needs a CUDA build of torch (about 5 GB), and
five megatron packs each installing their own copy once filled a CI disk.
The interpreter is the manifest's ``python`` (``python3.12`` on PATH, or pyenv's) or
nox's own. A session's exit code is the harness's (see ``harness --help``):
0 all lanes as expected, 3 a GPU lane was skipped on this host, others failures.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from harness.errors import Exit  # noqa: E402  (stdlib-only module)
from harness.interpreters import find_interpreter  # noqa: E402  (stdlib-only module)
from harness.sessions import pack_sessions  # noqa: E402  (stdlib-only module)

nox.options.reuse_venv = "yes"
nox.options.sessions = ["lint", "typecheck", "tests"]


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


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy over the harness, with its dependencies installed so their own type hints are checked against."""
    session.install("-e", ".[lint]")  # mypy (and ruff) at the versions pinned in pyproject.toml
    session.run("mypy", "harness", "--ignore-missing-imports")


def _lane_env(session: nox.Session, spec) -> Path:
    """Create (once) and update the target's shared virtualenv; return its directory."""
    python = find_interpreter(spec.python) if spec.python else sys.executable
    if python is None:
        session.error(f"{spec.name} needs python{spec.python} (upstream/{spec.target}.toml sets "
                      f"python = \"{spec.python}\"): none on PATH runs, nor under pyenv's versions/")
    version = spec.python or "{}.{}".format(*sys.version_info[:2])
    envdir = session.cache_dir.parent / spec.lane_env(version)
    if not (envdir / "bin" / "python").exists():
        session.log(f"creating the {spec.target} lane environment {envdir} (shared by its pack sessions)")
        session.run(python, "-m", "venv", str(envdir), external=True)
    pip = (str(envdir / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--quiet")
    session.run_install(*pip, "-e", ".", external=True)
    if spec.requirements:
        session.run_install(*pip, "-r", spec.requirements, external=True)
    return envdir


def _pack_session(spec):
    def run_pack(session: nox.Session) -> None:
        envdir = _lane_env(session, spec)
        env = {"VIRTUAL_ENV": str(envdir), "PATH": os.pathsep.join([str(envdir / "bin"), os.environ["PATH"]])}
        with tempfile.TemporaryDirectory() as tmp:
            result = Path(tmp) / "result.json"
            session.run(str(envdir / "bin" / "harness"), "run", spec.pack, "--result-file", str(result),
                        *session.posargs, env=env, external=True, success_codes=[int(c) for c in Exit])
            code = Exit(json.loads(result.read_text())["exit"]) if result.exists() else Exit.USAGE
        if code != Exit.OK:
            session.warn(f"{spec.name}: harness exit {int(code)} ({code.name})")
            raise SystemExit(int(code))  # keep the harness's exit code; nox would fold SKIPPED into 0

    run_pack.__doc__ = spec.description
    # venv_backend="none": the session's environment is the target's shared one (_lane_env), not its own.
    return nox.session(name=spec.name, venv_backend="none", default=False)(run_pack)


for _spec in pack_sessions(ROOT):
    globals()[_spec.name] = _pack_session(_spec)
