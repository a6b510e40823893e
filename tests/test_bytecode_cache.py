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
    domain = settings.trust_domain(None)
    assert settings.bytecode_env(tmp_path, {"PYTHONDONTWRITEBYTECODE": "1"}) == {
        "PYTHONPYCACHEPREFIX": str(tmp_path / "pycache" / domain), "PYTHONDONTWRITEBYTECODE": ""}
    assert settings.bytecode_env(tmp_path, {settings.PYCACHE_ENV: str(tmp_path / "elsewhere")})[
        "PYTHONPYCACHEPREFIX"] == str(tmp_path / "elsewhere" / domain)
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


def _clone(tmp_path: Path, name: str, value: str) -> Path:
    """A checkout (tracking.toml + upstream/) whose repros/modx.py says ``value``."""
    root = tmp_path / name
    (root / "upstream").mkdir(parents=True)
    (root / "repros").mkdir()
    (root / "tracking.toml").write_text("schema = 1\n")
    (root / "repros" / "modx.py").write_text(f"VALUE = {value!r}\n")
    return root


def _child_sees(root: Path, cache: Path) -> str:
    """What a child of a harness started in ``root`` imports as repros/modx.VALUE."""
    parent = textwrap.dedent("""
        import subprocess, sys
        from pathlib import Path
        from harness.base import settings
        settings.export_bytecode_cache(Path(sys.argv[1]), Path(sys.argv[2]))
        print(subprocess.run([sys.executable, "-c", "import modx; print(modx.VALUE)"], check=True,
                             capture_output=True, text=True).stdout.strip())
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(root / "repros")]))
    for name in ("PYTHONPYCACHEPREFIX", settings.PYCACHE_ENV, "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-c", parent, str(cache), str(root)], env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_one_clone_cannot_plant_bytecode_another_clone_runs(tmp_path):
    """Round 6, item 4: a .pyc planted in the shared cache replaced a module for every clone."""
    import py_compile

    cache = tmp_path / "cache"
    a, b = _clone(tmp_path, "a", "a's"), _clone(tmp_path, "b", "b's")
    assert _child_sees(a, cache) == "a's"
    # clone a writes a pyc for b's module path, with b's source's timestamp and size: the planting of the report
    source = b / "repros" / "modx.py"
    evil = tmp_path / "evil.py"
    evil.write_text("VALUE = 'planted'\n"[: len(source.read_text())].ljust(len(source.read_text()) - 1) + "\n")
    os.utime(evil, (source.stat().st_atime, source.stat().st_mtime))
    a_prefix = Path(settings.bytecode_env(cache, {}, root=a)["PYTHONPYCACHEPREFIX"])
    planted = a_prefix / str(source.resolve().parent).lstrip(os.sep) / "__pycache__" / \
        f"modx.{sys.implementation.cache_tag}.pyc"
    planted.parent.mkdir(parents=True, exist_ok=True)
    py_compile.compile(str(evil), cfile=str(planted), dfile=str(source),
                       invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    assert _child_sees(b, cache) == "b's"  # b's domain never reads a's
    assert settings.trust_domain(a) != settings.trust_domain(b)


def test_an_edit_in_the_same_second_with_the_same_size_runs_the_new_code(tmp_path):
    """Round 6, item 4: a timestamp pyc cannot tell such an edit; the checkout's repros/ are hash-checked."""
    cache = tmp_path / "cache"
    root = _clone(tmp_path, "c", "one")
    source = root / "repros" / "modx.py"
    assert _child_sees(root, cache) == "one"
    stat = source.stat()
    source.write_text("VALUE = 'two'\n")  # the same size
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the same time
    assert source.stat().st_size == stat.st_size
    assert _child_sees(root, cache) == "two"
