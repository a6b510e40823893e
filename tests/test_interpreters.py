from __future__ import annotations

from pathlib import Path

from harness.base.interpreters import find_interpreter


def _fake_python(path: Path, prints: str, code: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {prints}\nexit {code}\n")
    path.chmod(0o755)
    return path


def test_find_interpreter_skips_a_broken_shim_for_a_pyenv_install(tmp_path, monkeypatch):
    _fake_python(tmp_path / "shims" / "python3.97", "", code=127)  # pyenv's shim, version not selected
    real = _fake_python(tmp_path / "pyenv" / "versions" / "3.97.2" / "bin" / "python3.97", "3.97")
    monkeypatch.setenv("PATH", str(tmp_path / "shims"))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    assert find_interpreter("3.97") == str(real)


def test_find_interpreter_rejects_a_wrong_version_and_reports_none(tmp_path, monkeypatch):
    _fake_python(tmp_path / "bin" / "python3.97", "3.11")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "no-pyenv"))
    assert find_interpreter("3.97") is None
