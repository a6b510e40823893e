"""The Python processes the harness starts keep their bytecode in the harness's cache (harness/base/settings.py).

Where PYTHONDONTWRITEBYTECODE was set (as on the CI image) and pip installed with --no-compile, every import check,
reproducer and suite run compiled torch and megatron-core from source again; a .pyc written beside a source made a
base checkout differ from its pinned commit instead."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from harness.base import settings
from harness.filing import scripts

ROOT = Path(__file__).resolve().parents[1]


def test_the_default_is_the_cache_s_pycache_and_off_or_an_inherited_prefix_leave_python_alone(tmp_path):
    assert settings.bytecode_env(tmp_path, {"PYTHONDONTWRITEBYTECODE": "1"}) == {
        "PYTHONPYCACHEPREFIX": str(tmp_path / "pycache"), "PYTHONDONTWRITEBYTECODE": ""}
    assert settings.bytecode_env(tmp_path, {settings.PYCACHE_ENV: str(tmp_path / "elsewhere")})[
        "PYTHONPYCACHEPREFIX"] == str(tmp_path / "elsewhere")
    assert settings.bytecode_env(tmp_path, {settings.PYCACHE_ENV: "off"}) == {}
    assert settings.bytecode_env(tmp_path, {"PYTHONPYCACHEPREFIX": "/theirs"}) == {}


def test_a_child_of_the_harness_writes_its_bytecode_to_the_cache_even_under_dontwritebytecode(tmp_path):
    tree, cache = tmp_path / "tree", tmp_path / "cache"
    tree.mkdir()
    (tree / "modx.py").write_text("VALUE = 1\n")
    parent = textwrap.dedent("""
        import subprocess, sys
        from pathlib import Path
        from harness.base import settings
        settings.export_bytecode_cache(Path(sys.argv[1]))
        subprocess.run([sys.executable, "-c", "import modx"], check=True)
    """)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=os.pathsep.join([str(ROOT), str(tree)]))
    env.pop("PYTHONPYCACHEPREFIX", None)
    env.pop(settings.PYCACHE_ENV, None)
    subprocess.run([sys.executable, "-c", parent, str(cache)], env=env, check=True)
    assert not (tree / "__pycache__").exists()
    assert list((cache / "pycache").rglob("modx.*.pyc")), "the child compiled modx but kept nothing"


def test_the_harness_called_in_process_leaves_this_process_s_environment_alone(tmp_path, monkeypatch, capsys):
    from harness.main import main

    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    monkeypatch.setenv("PATCHLANE_HOME", str(tmp_path))
    monkeypatch.chdir(ROOT)
    names = ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")
    before, prefix = [os.environ.get(n) for n in names], sys.pycache_prefix
    assert main(["list", "--json"]) == 0
    assert [os.environ.get(n) for n in names] == before and sys.pycache_prefix == prefix


def _trees(tmp_path: Path) -> tuple[Path, Path]:
    plain, patched = tmp_path / "plain", tmp_path / "patched"
    for tree in (plain, patched):
        (tree / "fakepkg").mkdir(parents=True)
        (tree / "fakepkg" / "__init__.py").write_text("VALUE = 1\n")
    return plain, patched


SCRIPT = '''\
"""Demo.

  1. acme/fake main unchanged (CPU is enough):
       python repro_demo.py
  2. acme/fake main with this PR (CPU is enough):
       python repro_demo.py
"""
import fakepkg

print(fakepkg.VALUE)
'''


def test_an_attached_script_leaves_no_bytecode_in_the_trees_it_imports_from(tmp_path, monkeypatch):
    for prefix in (None, str(tmp_path / "pycache")):
        plain, patched = _trees(tmp_path / ("cached" if prefix else "plain-python"))
        script = plain.parent / "repro_demo.py"
        script.write_text(SCRIPT)
        monkeypatch.setattr(sys, "pycache_prefix", prefix)
        out = scripts.run_script(script, sys.executable, plain, patched, [])
        assert out.findings == [] and [w for w, _ in out.ran] == ["--help", "step 1", "step 2"]
        assert not list(plain.parent.rglob("__pycache__")), "python -I wrote .pyc files beside the trees' sources"
        if prefix:
            assert list(Path(prefix).rglob("__init__.*.pyc"))
