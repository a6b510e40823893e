from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness.base.store import Store
from harness.errors import BuildError, ConfigError
from harness.lane import runtime


def _wheel(dest: Path, name: str, version: str) -> Path:
    """A minimal pure wheel, written by hand so the test needs neither network nor a build backend."""
    path = dest / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for arc, text in files.items():
            zf.writestr(arc, text)
    return path


def _ensure(base: str, reqs: tuple[str, ...], store: Store, wheels: Path) -> Path | None:
    """The runtime site of a base named ``base`` that lists ``reqs``, installed offline from ``wheels``."""
    return runtime.ensure_requirements(reqs, f"base {base}", store, sys.executable, wheels)


def test_each_base_gets_its_own_runtime_offline(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "tinydep", "1.0")
    _wheel(wheels, "tinydep", "2.0")
    store = Store(tmp_path / "cache")
    old = _ensure("old", ("tinydep==1.0",), store, wheels)
    new = _ensure("new", ("tinydep==2.0",), store, wheels)
    assert old != new
    for site, version in ((old, "1.0"), (new, "2.0")):
        out = subprocess.run([sys.executable, "-c", "import tinydep; print(tinydep.VERSION)"],
                             env={"PYTHONPATH": str(site)}, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == version
    assert _ensure("again", ("tinydep==1.0",), store, wheels) == old  # cached
    assert _ensure("none", (), store, wheels) is None


def test_missing_runtime_wheel_is_a_build_error(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with pytest.raises(BuildError, match=r"base old: cannot install runtime_requires \(tinydep==3.0\)"):
        _ensure("old", ("tinydep==3.0",), Store(tmp_path / "cache"), wheels)
    assert not list((tmp_path / "cache" / "runtime").iterdir())  # nothing half-made is left


def test_runtime_shared_libraries_go_on_ld_library_path(tmp_path):
    # tilelang's libtvm.so finds libz3.so through $ORIGIN/../../z3/lib, which a runtime site beside the
    # build cannot satisfy; the lane must name the site's library directories itself.
    site = tmp_path / "site"
    (site / "z3" / "lib").mkdir(parents=True)
    (site / "z3" / "lib" / "libz3.so").write_bytes(b"")
    (site / "tqdm" / "lib").mkdir(parents=True)          # a lib/ without shared libraries is not named
    (site / "tqdm" / "lib" / "x.py").write_text("")
    assert runtime.library_dirs(site) == [str(site / "z3" / "lib")]
    env = runtime.with_library_path({"LD_LIBRARY_PATH": "/opt/a"}, site)
    assert env["LD_LIBRARY_PATH"].split(":") == [str(site / "z3" / "lib"), "/opt/a"]
    assert runtime.with_library_path({"X": "1"}, None) == {"X": "1"}


def test_combine_merges_bases_and_rejects_conflicting_pins():
    # a lane with with_builds needs its own base's runtime and the extra build's base's in one site
    merged = runtime.combine([("megatron-lm 0.19.2", ()), ("mamba 2.3.2.post1", ("tilelang==0.1.8", "einops==0.8.2")),
                              ("other 1.0", ("Einops==0.8.2", "tqdm==4.67.3"))])
    assert merged == ("tilelang==0.1.8", "einops==0.8.2", "tqdm==4.67.3")
    with pytest.raises(ConfigError, match=r"mamba 2.3.2.post1 pins 'apache-tvm-ffi==0.1.9', tilelang 0.1.15 pins "
                                          r"'apache_tvm_ffi==0.1.12'"):
        runtime.combine([("mamba 2.3.2.post1", ("apache-tvm-ffi==0.1.9",)),
                         ("tilelang 0.1.15", ("apache_tvm_ffi==0.1.12",))])


def test_requirements_are_parsed_as_pep_508_not_by_pattern():
    from harness.errors import ConfigError
    from harness.lane import runtime

    # one pin however it is spelled: name normalization and specifier spacing
    assert runtime.combine([("a", ("Apache_TVM.ffi == 0.1.9",)), ("b", ("apache-tvm-ffi==0.1.9",))]) == \
        ("Apache_TVM.ffi == 0.1.9",)
    # a different version of one distribution conflicts; a malformed requirement is named
    with pytest.raises(ConfigError, match="conflict"):
        runtime.combine([("a", ("einops==0.8.2",)), ("b", ("einops==0.8.1",))])
    with pytest.raises(ConfigError, match="not a valid requirement"):
        runtime.combine([("a", ("einops=0.8.2",))])
