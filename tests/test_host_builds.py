"""Host builds: a package compiled on the GPU host from a pinned sdist by the bootstrap, before the run.

The sdist is a fake: a tiny project with an in-tree PEP 517 backend (no setuptools needed) that records what the
build saw (MAX_JOBS, CPLUS_INCLUDE_PATH, the manifest's env, whether its build requirement imports) in the wheel
it writes, or fails, or hangs with a child process, as the test's environment asks. The bootstrap runs with a
throwaway virtual environment standing in for the host's interpreter; the build lands in the private environment
beside the unpacked bundle, never in that interpreter's site-packages nor the test interpreter's.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import REPO, cli
from test_runtime import _wheel

from harness.bootstrap import expected_files
from harness.errors import BuildError, ConfigError, Exit
from harness.lane import host_builds, lanes
from harness.upstream.pins import load_manifest

BACKEND = '''
import json, os, subprocess, sys, time, zipfile

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    import buildhelper  # a build requirement: the bootstrap puts it on the build's path
    mode = os.environ.get("FAKEEXT_MODE", "")
    if mode == "fail":
        print("csrc/extensions.h:10:10: fatal error: nccl.h: No such file or directory", flush=True)
        raise SystemExit(1)
    if mode == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        with open(os.environ["FAKEEXT_PIDS"], "w") as fh:
            fh.write(f"{os.getpid()} {child.pid}")
        time.sleep(3600)
    seen = {k: os.environ.get(k) for k in ("MAX_JOBS", "CPLUS_INCLUDE_PATH", "FAKEEXT_FLAG")}
    seen["path0"] = os.environ["PATH"].split(os.pathsep)[0]
    seen["buildhelper"] = buildhelper.VERSION
    name = "fakeext-1.0-py3-none-any.whl"
    info = "fakeext-1.0.dist-info"
    files = {"fakeext/__init__.py": "", "fakeext/built.json": json.dumps(seen),
             f"{info}/METADATA": "Metadata-Version: 2.1\\nName: fakeext\\nVersion: 1.0\\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
    files[f"{info}/RECORD"] = "".join(f"{f},,\\n" for f in files) + f"{info}/RECORD,,\\n"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        for arc, text in files.items():
            zf.writestr(arc, text)
    return name
'''


def fake_sdist(dest: Path, requires: tuple[str, ...] = ()) -> Path:
    files = {"pyproject.toml": f'[build-system]\nrequires = {json.dumps(list(requires))}\n'
                               'build-backend = "fakebackend"\nbackend-path = ["."]\n',
             "fakebackend.py": BACKEND,
             "PKG-INFO": "Metadata-Version: 2.1\nName: fakeext\nVersion: 1.0\n"}
    path = dest / "fakeext-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"fakeext-1.0/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


HOST_TOML = '''
[[bases."1.0".host_builds]]
provides = "fakeext==1.0"
filename = "{filename}"
url = "{url}"
sha256 = "{sha}"
build_requires = ["buildhelper==1.0"]
install_with = ["tinydep==1.0"]
env = {{ FAKEEXT_FLAG = "from-manifest" }}
include_dirs = ["nvidia/nccl/include", "nvidia/absent/include"]
timeout = {timeout}
'''


def add_host_build(lane_repo, sdist: Path, timeout: int = 300, extra: str = "") -> None:
    path = lane_repo.root / "upstream" / "fake.toml"
    pin = 'role = "current pin"\n'
    text = path.read_text().replace(pin, pin + 'runtime_requires = ["tinydep==1.0"]\n')
    text += HOST_TOML.format(filename=sdist.name, url=sdist.as_uri(), timeout=timeout,
                             sha=hashlib.sha256(sdist.read_bytes()).hexdigest()) + extra
    path.write_text(text)


@pytest.fixture
def made(lane_repo, tmp_path):
    """(lane_repo, a function making the bundle with the host build at a timeout, its sdist)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "tinydep", "1.0")
    _wheel(wheels, "buildhelper", "1.0")
    sdist = fake_sdist(tmp_path)

    def make(timeout: int = 300) -> tuple[Path, dict]:
        lane_repo.write_manifest()
        add_host_build(lane_repo, sdist, timeout)
        out = tmp_path / "dist" / f"bundle-{timeout}.tar.xz"
        assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), *lane_repo.args()) == Exit.OK
        with tarfile.open(out) as tf:
            index = json.load(tf.extractfile("patchlane-bundle/bundle.json"))
        return out, index

    return lane_repo, make, sdist


@pytest.fixture
def venv(tmp_path) -> tuple[Path, Path]:
    return make_venv(tmp_path / "venv")


def make_venv(where: Path) -> tuple[Path, Path]:
    """(python, site-packages) of a fresh virtual environment that sees this interpreter's packages (pip, the
    harness's dependencies) through a .pth file, so what the bootstrap installs lands in its own site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (site / "nvidia" / "nccl" / "include").mkdir(parents=True)
    return python, site


def _bootstrap(python: Path, archive: Path, *args: str, home: Path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "MAX_JOBS", "CPLUS_INCLUDE_PATH")}
    return subprocess.run([str(python), "-m", "harness.bootstrap", str(archive), *args], capture_output=True,
                          text=True, env=base | {"PATCHLANE_HOME": str(home)} | env, cwd=REPO, timeout=600)


def test_the_bundle_carries_the_sdist_and_its_build_requirements(made):
    _, make, sdist = made
    _, index = make()
    [entry] = index["host_builds"]
    assert entry["file"] == f"host-builds/{sdist.name}"
    assert entry["sha256"] == hashlib.sha256(sdist.read_bytes()).hexdigest()
    assert (entry["build_requires"], entry["install_with"]) == (["buildhelper==1.0"], ["tinydep==1.0"])
    assert entry["env"] == {"FAKEEXT_FLAG": "from-manifest"} and entry["timeout"] == 300
    assert expected_files(index)[entry["file"]] == entry["sha256"]  # checked on unpack like every member
    assert "wheels/buildhelper-1.0-py3-none-any.whl" in {w["file"] for w in index["wheels"]}


def _imports(python: Path, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, cwd="/")


def _private_env(home: Path) -> tuple[Path, Path]:
    """(python, site-packages) of the private environment the bootstrap made under ``home``."""
    [env] = (home / "bundles").glob(f"*/{host_builds.ENV_PREFIX}{sys.version_info[0]}.{sys.version_info[1]}")
    return host_builds.env_python(env), host_builds.env_site(env)


def test_the_bootstrap_builds_and_installs_it_once_before_the_run(made, venv, tmp_path):
    lane_repo, make, _ = made
    archive, _ = make()
    python, site = venv
    (site / "hosttorch.py").write_text("VERSION = 'host'\n")  # what the host's interpreter has (its torch)
    before = sorted(p.name for p in site.iterdir())
    home = tmp_path / "home"
    run = ("prepare", "01", "--root", str(lane_repo.root))
    first = _bootstrap(python, archive, "--", *run, home=home)
    assert first.returncode == Exit.OK, first.stderr
    assert "host build fakeext: built fakeext-1.0-py3-none-any.whl" in first.stderr
    env_python, env_site = _private_env(home)
    seen = json.loads((env_site / "fakeext" / "built.json").read_text())
    assert seen["MAX_JOBS"] == str(len(os.sched_getaffinity(0)))
    assert seen["CPLUS_INCLUDE_PATH"] == str(site / "nvidia" / "nccl" / "include")  # the absent one left out
    assert seen["FAKEEXT_FLAG"] == "from-manifest" and seen["buildhelper"] == "1.0"
    assert seen["path0"].endswith(os.path.join("host-build-fakeext", "tools", "bin"))
    assert (env_site / "tinydep" / "__init__.py").is_file()  # install_with: beside it in the private site
    assert not (env_site / "buildhelper").exists()  # a build requirement is not installed
    # the interpreter's site-packages holds nothing new: a lane run with it (any other base's) sees no host build
    assert sorted(p.name for p in site.iterdir()) == before
    alone = _imports(python, "import fakeext")
    assert alone.returncode != 0 and "No module named 'fakeext'" in alone.stderr
    # the private interpreter sees the host build first, in the purelib TransformerEngine searches, and then
    # everything the host's interpreter sees
    probe = _imports(env_python, "import fakeext, tinydep, hosttorch, sysconfig, json; print(json.dumps("
                                 "[fakeext.__file__, hosttorch.VERSION, sysconfig.get_paths()['purelib']]))")
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == [str(env_site / "fakeext" / "__init__.py"), "host", str(env_site)]
    # the lane itself runs with the private interpreter and imports the host build
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    repro.write_text("import importlib.util, json, os, sys\n"
                     "json.dump([sys.executable, importlib.util.find_spec('fakeext') is not None],"
                     " open(os.environ['PROBE'], 'w'))\n" + repro.read_text())
    lane = _bootstrap(python, archive, "--", "run", "01", "--lane", "bug", "--root", str(lane_repo.root), home=home,
                      PROBE=str(tmp_path / "probe.json"))
    assert lane.returncode == Exit.OK, lane.stderr
    assert json.loads((tmp_path / "probe.json").read_text()) == [str(env_python), True]
    again = _bootstrap(python, archive, "--", *run, home=home, FAKEEXT_MODE="fail")
    assert again.returncode == Exit.OK, again.stderr  # installed at the pinned version: not built again
    assert f"fakeext 1.0 already installed in {env_site}" in again.stderr
    # another host of the same image: the wheel built here, carried there, is installed instead of a build
    [kept] = (home / "bundles").glob("*/host-wheels/fakeext-1.0-py3-none-any.whl")
    other_python, other_site = make_venv(tmp_path / "other-venv")
    other_before = sorted(p.name for p in other_site.iterdir())
    other = _bootstrap(other_python, archive, "--host-wheels", str(kept.parent), "--", *run, home=tmp_path / "home2",
                       FAKEEXT_MODE="fail")
    assert other.returncode == Exit.OK, other.stderr
    assert f"installed {kept} " in other.stderr and "built earlier, not built here" in other.stderr
    _, other_env_site = _private_env(tmp_path / "home2")
    assert json.loads((other_env_site / "fakeext" / "built.json").read_text()) == seen
    assert (other_env_site / "tinydep" / "__init__.py").is_file()
    assert sorted(p.name for p in other_site.iterdir()) == other_before


def test_only_lanes_of_a_base_with_host_builds_run_with_the_private_interpreter(lane_repo, tmp_path):
    """The lane's interpreter: the context's for a base without host builds or a run without a bundle; for a base
    with them, the bootstrap's private environment, and a clear error where the bootstrap made none."""
    sdist = fake_sdist(tmp_path)
    lane_repo.add_base("2.0", "")
    add_host_build(lane_repo, sdist)
    manifest = load_manifest(lane_repo.root, "fake")
    hosted, plain = manifest.base("1.0"), manifest.base("2.0")
    assert hosted.host_builds and not plain.host_builds
    unpacked = tmp_path / "bundles" / "abc"
    ctx = SimpleNamespace(python=sys.executable, bundle=SimpleNamespace(path=unpacked / "patchlane-bundle"))
    assert lanes.lane_python(ctx, [plain]) == sys.executable
    assert lanes.lane_python(SimpleNamespace(python=sys.executable, bundle=None), [hosted]) == sys.executable
    with pytest.raises(BuildError, match=r"needs the host build\(s\) fakeext==1.0, but .*host-env-.* holds none"):
        lanes.lane_python(ctx, [plain, hosted])  # an extra build's base counts as the lane's own
    env = host_builds.env_dir(unpacked, f"{sys.version_info[0]}.{sys.version_info[1]}")
    host_builds.make_env(env)
    assert lanes.lane_python(ctx, [plain, hosted]) == str(host_builds.env_python(env))
    assert lanes.lane_python(ctx, [plain]) == sys.executable
    # made by another interpreter of that version (whose torch the build was compiled against): refused
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(sys.executable)
    other = SimpleNamespace(python=str(tmp_path / "bin" / "python"), bundle=ctx.bundle)
    with pytest.raises(BuildError, match=f"were built for {sys.executable}, not {other.python}"):
        lanes.lane_python(other, [hosted])


def test_a_failed_build_is_exit_build_with_its_log_and_installs_nothing(made, venv, tmp_path):
    _, make, _ = made
    archive, _ = make()
    python, site = venv
    proc = _bootstrap(python, archive, "--", "--version", home=tmp_path / "home", FAKEEXT_MODE="fail")
    assert proc.returncode == Exit.BUILD
    assert "host build fakeext: the build failed" in proc.stderr
    assert "fatal error: nccl.h: No such file or directory" in proc.stderr  # the log's tail, quoted
    [log] = (tmp_path / "home" / "bundles").glob("*/host-build-fakeext.log")
    assert "nccl.h" in log.read_text()
    assert not (site / "fakeext").exists() and not (site / "tinydep").exists()
    assert "installing" not in proc.stderr  # the harness did not start: not even its site was installed


def test_a_build_requirement_the_interpreter_lacks_is_one_line_before_any_build(made, venv, tmp_path):
    """A torch extension built without isolation on a host whose python has no torch: pip's traceback came back.
    Now the bootstrap names the missing requirement in one line and builds nothing."""
    lane_repo, make, sdist = made
    fake_sdist(sdist.parent, requires=("buildhelper", "nosuch-torch-for-test>=2.1"))  # buildhelper: carried
    archive, _ = make()
    python, site = venv
    proc = _bootstrap(python, archive, "--", "--version", home=tmp_path / "home")
    assert proc.returncode == Exit.BUILD, proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if "error:" in x]
    assert line.endswith(f"host build fakeext: fakeext-1.0.tar.gz builds against this interpreter's "
                         f"nosuch-torch-for-test>=2.1, and {python} has no nosuch-torch-for-test; nothing was built")
    assert "Traceback" not in proc.stderr and "hint: run the bootstrap with the interpreter" in proc.stderr
    assert not list((tmp_path / "home" / "bundles").glob("*/host-build-fakeext.log"))  # no build was started
    assert not (site / "fakeext").exists()


def test_a_build_past_its_timeout_is_killed_with_its_children(made, venv, tmp_path):
    _, make, _ = made
    archive, _ = make(timeout=3)
    python, site = venv
    pids = tmp_path / "pids"
    proc = _bootstrap(python, archive, "--", "--version", home=tmp_path / "home", FAKEEXT_MODE="hang",
                      FAKEEXT_PIDS=str(pids))
    assert proc.returncode == Exit.BUILD, proc.stderr
    assert "host build fakeext: not done after 3 s, killed" in proc.stderr
    for pid in map(int, pids.read_text().split()):  # the backend and the child it started: both gone
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    assert not (site / "fakeext").exists()
    # a manifest's longer timeout, shortened for one call by the environment
    archive, _ = make(timeout=300)
    proc = _bootstrap(python, archive, "--", "--version", home=tmp_path / "home", FAKEEXT_MODE="hang",
                      FAKEEXT_PIDS=str(pids), PATCHLANE_HOST_BUILD_TIMEOUT="2")
    assert proc.returncode == Exit.BUILD, proc.stderr
    assert "host build fakeext: not done after 2 s, killed" in proc.stderr
    assert not (site / "fakeext").exists()


def test_manifest_host_builds_are_typed_and_closed(lane_repo, tmp_path, capsys):
    sdist = fake_sdist(tmp_path)
    add_host_build(lane_repo, sdist, extra="")
    [host] = load_manifest(lane_repo.root, "fake").base("1.0").host_builds
    assert (host.name, host.timeout, dict(host.env)) == ("fakeext", 300, {"FAKEEXT_FLAG": "from-manifest"})
    path = lane_repo.root / "upstream" / "fake.toml"
    good = path.read_text()
    for old, new, message in [
        ('install_with = ["tinydep==1.0"]', 'install_with = ["other==2.0"]',
         "must be one of the base's runtime_requires"),
        ('provides = "fakeext==1.0"', 'provides = "fakeext>=1.0"', "must be an exact pin"),
        ('runtime_requires = ["tinydep==1.0"]', 'runtime_requires = ["tinydep==1.0", "fakeext==1.0"]',
         "is also in runtime_requires"),
        ('"nvidia/nccl/include"', '"/usr/include"', "relative to site-packages"),
        ("timeout = 300", "timeout = 0", "timeout must be at least 1"),
        (f'filename = "{sdist.name}"', 'filename = "fakeext-1.0-py3-none-any.whl"', "plain sdist file name"),
    ]:
        path.write_text(good.replace(old, new))
        with pytest.raises(ConfigError, match=message):
            load_manifest(lane_repo.root, "fake")
    path.write_text(good.replace("timeout = 300", 'timeout = 300\ncolour = "blue"'))
    load_manifest(lane_repo.root, "fake")
    assert "host_builds] #1: unknown key 'colour'" in capsys.readouterr().err


def test_the_transformer_engine_manifest_builds_its_torch_extension_on_the_host():
    base = load_manifest(REPO, "transformer-engine").base("2.20.2")
    [host] = base.host_builds
    assert host.provides == "transformer-engine-torch==2.20.2" and host.artifact.kind == "sdist"
    assert host.install_with == ("transformer-engine-cu13==2.20.2",)  # the joined core wheel goes beside it
    assert [p.provides for p in base.payloads] == list(host.install_with)
    assert "ninja" in {r.split("==")[0] for r in host.build_requires}  # else torch compiles one file at a time


def test_include_dirs_are_looked_for_in_every_site_packages_directory(tmp_path):
    """pip's installs and a distribution's own packages may sit in two site-packages: nccl.h in one, cudnn.h in the
    other. Each include directory comes from the first that holds it; one that none holds is left out."""
    first, second = tmp_path / "purelib", tmp_path / "dist-packages"
    (first / "nvidia" / "nccl" / "include").mkdir(parents=True)
    (second / "nvidia" / "nccl" / "include").mkdir(parents=True)
    (second / "nvidia" / "cudnn" / "include").mkdir(parents=True)
    wanted = ["nvidia/nccl/include", "nvidia/cudnn/include", "nvidia/absent/include"]
    assert host_builds.include_path(wanted, [first, second]) == [str(first / "nvidia" / "nccl" / "include"),
                                                                 str(second / "nvidia" / "cudnn" / "include")]
    assert host_builds.site_dirs(first)[0] == first


def test_a_lane_carries_the_host_builds_and_payload_pins_of_its_extra_builds(lane_repo, tmp_path):
    """A suite lane of one target that takes another base as a with_build (Megatron's suites take TE): the bundle
    carries the host builds of that base too, not only of the lane's own."""
    from conftest import CORE_BUGGY

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "tinydep", "1.0")
    _wheel(wheels, "buildhelper", "1.0")
    sdist = fake_sdist(tmp_path)
    lane_repo.add_base("2.0", CORE_BUGGY)
    path = lane_repo.root / "upstream" / "fake.toml"
    text = path.read_text().replace('[bases."2.0"]\n', '[bases."2.0"]\nruntime_requires = ["tinydep==1.0"]\n')
    path.write_text(text + HOST_TOML.replace('bases."1.0"', 'bases."2.0"').format(
        filename=sdist.name, url=sdist.as_uri(), timeout=300, sha=hashlib.sha256(sdist.read_bytes()).hexdigest()))
    lane_repo.write_tracking('[[packs.01.lanes]]\nname = "with-ext"\nbase = "1.0"\npatched = false\n'
                             'expect = "BUG_REPRODUCED"\nwith_builds = ["fake@2.0"]\n')
    out = tmp_path / "dist" / "bundle.tar.xz"
    assert cli("bundle", "01", "--lane", "with-ext", "-o", str(out), "--wheels", str(wheels),
               *lane_repo.args()) == Exit.OK
    with tarfile.open(out) as tf:
        index = json.load(tf.extractfile("patchlane-bundle/bundle.json"))
    assert [h["file"] for h in index["host_builds"]] == [f"host-builds/{sdist.name}"]
    assert "wheels/buildhelper-1.0-py3-none-any.whl" in {w["file"] for w in index["wheels"]}
