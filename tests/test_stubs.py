"""Overlay stubs ([stubs] in a manifest): a stand-in that imports, fails loudly on use, and yields to a real module."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile

import pytest
from conftest import cli

from harness.base.store import Store
from harness.errors import ConfigError, Exit
from harness.host.bundle import store_uncompressed
from harness.lane import builds
from harness.lane.stubs import write
from harness.upstream import pins


def _py(code: str, *paths) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": ":".join(str(p) for p in paths), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True)


def test_stub_imports_and_raises_importerror_with_the_reason_on_use(tmp_path):
    write(tmp_path, {"ext_cuda": "compiled extension, not built", "hub": "optional", "hub.sub": "optional"}, "fake")
    proc = _py("""
        import ext_cuda, hub.sub
        from hub.sub import Mixin
        class Base:
            pass
        class Model(Base, Mixin):   # subclassing a placeholder works (Mamba2 does): the package imports
            pass
        assert not hasattr(ext_cuda, "__wrapped__")
        try:
            ext_cuda.fwd(1, 2)
        except ImportError as exc:
            print(type(exc).__name__, exc)
        """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "StubbedModuleError ext_cuda.fwd is unavailable" in proc.stdout
    assert "compiled extension, not built" in proc.stdout


def test_a_real_module_elsewhere_on_the_path_wins_over_the_stub(tmp_path):
    site, real = tmp_path / "site", tmp_path / "real"
    write(site, {"hub": "optional"}, "fake")
    (real / "hub").mkdir(parents=True)
    (real / "hub" / "__init__.py").write_text("VALUE = 42\n")
    proc = _py("import hub; print(hub.VALUE, hub.__file__)", site, real)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "42" and str(real) in proc.stdout


def test_stubs_in_the_manifest_reach_the_build_key_describe_and_the_import_check(lane_repo, capsys):
    manifest = lane_repo.root / "upstream" / "fake.toml"
    key_before = builds.build_key("t", pins.load_manifest(lane_repo.root, "fake"))
    manifest.write_text(manifest.read_text().replace(
        'default_base = "1.0"\n', 'default_base = "1.0"\n\n[stubs]\nfake_ext = "compiled, not built"\n'))
    loaded = pins.load_manifest(lane_repo.root, "fake")
    assert loaded.stubs == {"fake_ext": "compiled, not built"}
    assert builds.build_key("t", loaded) != key_before
    assert cli("prepare", "01", *lane_repo.args()) == Exit.OK, capsys.readouterr()
    [entry] = [p for p in (lane_repo.cache / "builds").iterdir()
               if json.loads((p / "build.json").read_text()).get("stubs")][:1]
    build = builds.lookup(Store(lane_repo.cache), json.loads((entry / "build.json").read_text())["key"])
    assert build.describe()["stubbed_modules"] == ["fake_ext"]
    assert (build.site / "fake_ext" / "__init__.py").is_file()
    found = builds.import_check(build, ["fakepkg"], sys.executable, "fake")
    assert found["stub:fake_ext"] == "not imported"


@pytest.mark.parametrize(("table", "message"), [
    ('[stubs]\nx = ""\n', "needs a reason"),
    ('[stubs]\n"not a name" = "why"\n', "not a module name"),
])
def test_bad_stub_tables_are_config_errors(lane_repo, table, message):
    manifest = lane_repo.root / "upstream" / "fake.toml"
    manifest.write_text(manifest.read_text().replace('default_base = "1.0"\n', f'default_base = "1.0"\n\n{table}'))
    with pytest.raises(ConfigError, match=message):
        pins.load_manifest(lane_repo.root, "fake")


def test_stubs_only_for_overlay_builds(lane_repo):
    lane_repo.write_manifest(build="wheel")
    manifest = lane_repo.root / "upstream" / "fake.toml"
    text = manifest.read_text().replace('default_base = "1.0"\n', 'default_base = "1.0"\n\n[stubs]\nx = "y"\n')
    manifest.write_text(text)
    with pytest.raises(ConfigError, match="only applies"):
        pins.load_manifest(lane_repo.root, "fake")


def test_bundle_stores_wheels_uncompressed_with_the_same_members(tmp_path):
    src = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(src, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("pkg/__init__.py", "x = 1\n" * 100)
        zf.writestr("pkg-1.0.dist-info/RECORD", "")
    out = store_uncompressed(src, tmp_path / "stored.whl")
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(out) as b:
        assert [i.filename for i in a.infolist()] == [i.filename for i in b.infolist()]
        assert all(i.compress_type == zipfile.ZIP_STORED for i in b.infolist())
        assert all(a.read(n) == b.read(n) for n in a.namelist())


def test_a_wheel_build_key_depends_on_the_building_interpreter(lane_repo):
    """A compiled wheel is tagged for the Python that built it: a key without it would hand a cp311
    build to a 3.12 host (seen with megatron-core's helpers_cpp)."""
    lane_repo.write_manifest(build="wheel")
    manifest = pins.load_manifest(lane_repo.root, "fake")
    assert builds.build_key("t", manifest, "3.11") != builds.build_key("t", manifest, "3.12")
    lane_repo.write_manifest(build="overlay")
    overlay = pins.load_manifest(lane_repo.root, "fake")
    assert builds.build_key("t", overlay, "3.11") == builds.build_key("t", overlay, "3.12")
