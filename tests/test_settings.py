"""One configuration for nox and the CLI (harness/base/settings.py): mirrors, cache, Python per target; errors that
name the fix when the harness's own interpreter cannot import a lane's build; ``--python`` resolved once."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from conftest import CORE_BUGGY, REPO, cli, make_sdist

from harness.base import settings
from harness.commands import _context
from harness.errors import Exit


def _clone_beside_shared(tmp_path: Path, lane_repo) -> tuple[Path, Path]:
    """``<tmp>/clone`` (a copy of the fake repository) with ``<tmp>/shared/mirrors`` beside it."""
    import shutil

    clone = tmp_path / "host" / "clone"
    shutil.copytree(lane_repo.root, clone)
    mirrors = tmp_path / "host" / "shared" / "mirrors"
    mirrors.mkdir(parents=True)
    return clone, mirrors


def test_mirrors_beside_the_clone_else_the_variable_else_none(lane_repo, tmp_path, monkeypatch):
    clone, mirrors = _clone_beside_shared(tmp_path, lane_repo)
    assert settings.git_mirrors(clone) == (mirrors,)
    assert "beside the checkout" in settings.mirrors_origin(clone)
    other = tmp_path / "elsewhere"
    monkeypatch.setenv(settings.MIRRORS_ENV, f"{other}{os.pathsep}{mirrors}")
    assert settings.git_mirrors(clone) == (other, mirrors)  # the variable, when set, is the choice
    monkeypatch.setenv(settings.MIRRORS_ENV, "")
    assert settings.git_mirrors(clone) == ()  # set empty: none (GitHub)
    monkeypatch.delenv(settings.MIRRORS_ENV)
    assert settings.git_mirrors(lane_repo.root) == ()  # no shared/ beside it: GitHub


def test_the_cli_and_the_noxfile_find_the_same_mirrors(lane_repo, tmp_path, monkeypatch):
    """Without the variable, the CLI finds the mirrors beside the clone and exports them as the noxfile does, so
    every reader (bases, the filing template, child processes) sees the same directories."""
    from harness.upstream import pins

    clone, mirrors = _clone_beside_shared(tmp_path, lane_repo)
    args = argparse.Namespace(root=clone, cache=lane_repo.cache, git_mirrors=None, artifacts=None)
    assert _context.sources(args).git_mirrors == (mirrors,)
    _context.context(args)
    assert os.environ[settings.MIRRORS_ENV] == str(mirrors) and pins.mirrors_from_env() == (mirrors,)
    # a choice already made is kept
    monkeypatch.setenv(settings.MIRRORS_ENV, "")
    _context.context(args)
    assert os.environ[settings.MIRRORS_ENV] == "" and pins.mirrors_from_env() == ()
    noxfile = (REPO / "noxfile.py").read_text()
    assert "settings.export_mirrors(ROOT)" in noxfile


def test_python_per_target_and_its_lane_environment():
    assert settings.target_python(REPO, "megatron-lm") == "3.12"
    assert settings.lane_env_dir(REPO, "megatron-lm") == REPO / ".nox" / "lane-megatron-lm-py3.12"
    here = "{}.{}".format(*sys.version_info[:2])
    assert settings.lane_env_dir(REPO, "no-such-target") == REPO / ".nox" / f"lane-no-such-target-py{here}"


def test_a_relative_python_is_resolved_once_against_the_working_directory(tmp_path, monkeypatch):
    env = tmp_path / ".nox" / "lane-fake-py3" / "bin"
    env.mkdir(parents=True)
    (env / "python").symlink_to(sys.executable)
    monkeypatch.chdir(tmp_path)
    got = _context.options(argparse.Namespace(python=".nox/lane-fake-py3/bin/python"))
    assert got.python == str(env / "python") and os.path.isabs(got.python)
    monkeypatch.chdir(REPO)  # elsewhere the same relative path names nothing: bad input, with the directory
    assert cli("run", "01", "--python", ".nox/lane-fake-py3/bin/python", "--root", str(tmp_path)) == Exit.USAGE


def test_an_import_check_failing_for_a_missing_module_names_the_lane_environment(lane_repo, capsys):
    """The README's 'pip install -e .' gives an interpreter without the lanes' dependencies (torch): say so."""
    lane_repo.sdist = make_sdist(lane_repo.sdist.parent, core=CORE_BUGGY + "\nimport notinstalled_dep  # noqa\n")
    lane_repo.write_manifest()
    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.BUILD
    err = capsys.readouterr().err
    assert "No module named 'notinstalled_dep'" in err
    hint = next(line for line in err.splitlines() if line.startswith("harness: hint:"))
    assert "nox -s fake_pack01" in hint and "--python .nox/lane-fake-py" in hint
