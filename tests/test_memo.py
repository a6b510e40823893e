"""Remembered answers (harness/base/fingerprint.py): import checks and the CUDA probe.

Every test that shows an answer being reused is paired with one that changes a single input
of its key for real (a package added to the interpreter's site, a module removed from the
build, PYTHONPATH, the GPU driver's view, ...) and shows the question asked again, or the new,
failing answer reported; never the remembered one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.base import fingerprint
from harness.errors import BuildError
from harness.lane import builds, runs


def _build(tmp_path: Path, body: str = "VALUE = 1\n", key: str = "k" * 64) -> builds.Build:
    """A build entry by hand: ``site/fakemod/__init__.py`` holding ``body``."""
    entry = tmp_path / "builds" / key[:20]
    (entry / "site" / "fakemod").mkdir(parents=True)
    (entry / "site" / "fakemod" / "__init__.py").write_text(body)
    return builds.Build(key, "overlay", entry, entry / "site", None)


@pytest.fixture
def checks(monkeypatch):
    """Record every import check that really ran (not the fingerprint probes)."""
    ran: list[list[str]] = []
    real = builds.guard.run

    def spy(cmd, *args, **kwargs):
        if len(cmd) > 2 and cmd[1] == "-c" and "importlib.import_module" in cmd[2]:
            ran.append(list(cmd[3:]))
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(builds.guard, "run", spy)
    monkeypatch.delenv(fingerprint.RECHECK_ENV, raising=False)
    return ran


@pytest.fixture
def venv_python(tmp_path) -> tuple[str, Path]:
    """A fresh virtualenv's interpreter (no pip: nothing can be installed into it by accident) and its site."""
    env = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    [site] = (env / "lib").glob("python*/site-packages")
    return str(env / "bin" / "python"), site


def test_a_passed_check_is_remembered_even_after_python_writes_pycache(tmp_path, checks, monkeypatch):
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    build = _build(tmp_path)
    first = builds.import_check(build, ["fakemod"], sys.executable, "fake")
    assert (build.site / "fakemod" / "__pycache__").is_dir()  # the check itself changed the site
    second = builds.import_check(build, ["fakemod"], sys.executable, "fake")
    assert first == second and first["fakemod"].endswith("fakemod/__init__.py")
    assert checks == [["fakemod"]]
    assert len(list((build.path / "import-checks").glob("*.json"))) == 1


def test_removing_the_module_from_the_build_is_seen(tmp_path, checks):
    build = _build(tmp_path)
    builds.import_check(build, ["fakemod"], sys.executable, "fake")
    shutil.rmtree(build.site / "fakemod")
    with pytest.raises(BuildError, match="import check of fake failed"):
        builds.import_check(build, ["fakemod"], sys.executable, "fake")
    assert len(checks) == 2


def test_a_package_added_to_the_interpreter_is_seen(tmp_path, checks, venv_python):
    python, site = venv_python
    build = _build(tmp_path)
    builds.import_check(build, ["fakemod"], python, "fake")
    builds.import_check(build, ["fakemod"], python, "fake")
    assert len(checks) == 1
    # a .pth file (what an editable install or a badly packaged wheel leaves) that breaks the import
    (site / "zz_break.pth").write_text("import sys; sys.modules['fakemod'] = None\n")
    with pytest.raises(BuildError, match="import check of fake failed"):
        builds.import_check(build, ["fakemod"], python, "fake")
    assert len(checks) == 2


def test_another_interpreter_is_asked_again(tmp_path, checks, venv_python):
    python, _ = venv_python
    build = _build(tmp_path)
    builds.import_check(build, ["fakemod"], sys.executable, "fake")
    builds.import_check(build, ["fakemod"], python, "fake")
    assert len(checks) == 2


def test_the_runtime_site_and_the_environment_are_part_of_the_key(tmp_path, checks, monkeypatch):
    build = _build(tmp_path, body="import tinydep\nVALUE = tinydep.VALUE\n")
    runtime_site = tmp_path / "runtime" / "site"
    (runtime_site / "tinydep").mkdir(parents=True)
    (runtime_site / "tinydep" / "__init__.py").write_text("VALUE = 2\n")
    builds.import_check(build, ["fakemod"], sys.executable, "fake", extra_path=[str(runtime_site)])
    builds.import_check(build, ["fakemod"], sys.executable, "fake", extra_path=[str(runtime_site)])
    assert len(checks) == 1
    monkeypatch.setenv("TILELANG_SOMETHING", "1")  # an environment variable the check cannot know about
    builds.import_check(build, ["fakemod"], sys.executable, "fake", extra_path=[str(runtime_site)])
    assert len(checks) == 2
    monkeypatch.setenv("PWD", "/elsewhere")  # terminal and login variables are not
    builds.import_check(build, ["fakemod"], sys.executable, "fake", extra_path=[str(runtime_site)])
    assert len(checks) == 2
    shutil.rmtree(runtime_site / "tinydep")  # the runtime site lost the dependency the build needs
    with pytest.raises(BuildError, match="No module named 'tinydep'"):
        builds.import_check(build, ["fakemod"], sys.executable, "fake", extra_path=[str(runtime_site)])


def test_a_new_directory_on_pythonpath_and_the_recheck_switch(tmp_path, checks, monkeypatch):
    build = _build(tmp_path)
    builds.import_check(build, ["fakemod"], sys.executable, "fake")
    extra = tmp_path / "extra"
    extra.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(extra))
    builds.import_check(build, ["fakemod"], sys.executable, "fake")
    assert len(checks) == 2
    monkeypatch.setenv(fingerprint.RECHECK_ENV, "1")
    builds.import_check(build, ["fakemod"], sys.executable, "fake")
    assert len(checks) == 3


def test_different_modules_or_build_are_different_questions(tmp_path, checks):
    build = _build(tmp_path)
    (build.site / "fakemod" / "sub.py").write_text("X = 1\n")
    builds.import_check(build, ["fakemod"], sys.executable, "fake")
    builds.import_check(build, ["fakemod", "fakemod.sub"], sys.executable, "fake")
    other = _build(tmp_path, key="j" * 64)
    builds.import_check(other, ["fakemod"], sys.executable, "fake")
    assert len(checks) == 3


def test_a_failed_check_is_never_remembered(tmp_path, checks):
    build = _build(tmp_path, body="raise ImportError('not yet')\n")
    for _ in range(2):
        with pytest.raises(BuildError, match="not yet"):
            builds.import_check(build, ["fakemod"], sys.executable, "fake")
    assert len(checks) == 2
    assert not list((build.path / "import-checks").glob("*.json"))


def test_a_damaged_memo_file_is_asked_again(tmp_path, checks):
    build = _build(tmp_path)
    builds.import_check(build, ["fakemod"], sys.executable, "fake")
    [memo] = (build.path / "import-checks").glob("*.json")
    memo.write_text("{not json")
    builds.import_check(build, ["fakemod"], sys.executable, "fake")
    assert len(checks) == 2
    record = json.loads(memo.read_text())
    record["key"] = "0" * 64  # a file whose key is not the one asked for (a prefix collision)
    memo.write_text(json.dumps(record))
    builds.import_check(build, ["fakemod"], sys.executable, "fake")
    assert len(checks) == 3


# --------------------------------------------------------------------------- the CUDA probe

@pytest.fixture
def fake_torch(tmp_path, monkeypatch):
    """A ``torch`` on PYTHONPATH whose GPUs are read from a file; every import is counted in another."""
    root = tmp_path / "faketorch"
    (root / "torch").mkdir(parents=True)
    gpus, imports = tmp_path / "gpus.json", tmp_path / "imports.log"
    gpus.write_text('["NVIDIA H100"]')
    (root / "torch" / "__init__.py").write_text(
        "import json\n"
        f"open({str(imports)!r}, 'a').write('x')\n"
        f"_gpus = json.load(open({str(gpus)!r}))\n"
        "class cuda:\n"
        "    is_available = staticmethod(lambda: bool(_gpus))\n"
        "    device_count = staticmethod(lambda: len(_gpus))\n"
        "    get_device_name = staticmethod(lambda i: _gpus[i])\n")
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.delenv(fingerprint.RECHECK_ENV, raising=False)
    driver = {"boot_id": "b1", "version": "NVRM 580", "gpus": {"0000:01:00.0": "Model: H100"},
              "capabilities": [], "nodes": ["nvidia0", "nvidiactl"]}
    monkeypatch.setattr(fingerprint, "gpu_driver", lambda: dict(driver))
    return gpus, imports, driver


def test_cuda_answer_is_remembered_until_the_driver_view_changes(tmp_path, fake_torch):
    gpus, imports, driver = fake_torch
    memo = tmp_path / "memo"
    assert runs.cuda_devices(sys.executable, memo) == (1, "this host has 1: NVIDIA H100")
    assert runs.cuda_devices(sys.executable, memo) == (1, "this host has 1: NVIDIA H100")
    assert imports.read_text() == "x"
    gpus.write_text('["NVIDIA H100", "NVIDIA H100"]')  # a second GPU appears ...
    driver["gpus"]["0000:02:00.0"] = "Model: H100"  # ... and the kernel shows it
    assert runs.cuda_devices(sys.executable, memo) == (2, "this host has 2: NVIDIA H100, NVIDIA H100")
    driver["boot_id"] = "b2"  # a reboot
    runs.cuda_devices(sys.executable, memo)
    assert imports.read_text() == "xxx"


def test_cuda_visible_devices_is_part_of_the_key(tmp_path, fake_torch, monkeypatch):
    gpus, imports, _ = fake_torch
    memo = tmp_path / "memo"
    runs.cuda_devices(sys.executable, memo)
    gpus.write_text("[]")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert runs.cuda_devices(sys.executable, memo)[0] == 0
    assert imports.read_text() == "xx"


def test_no_device_where_the_kernel_shows_gpus_is_asked_again(tmp_path, fake_torch):
    gpus, imports, driver = fake_torch
    gpus.write_text("[]")  # CUDA failed to initialise this once
    memo = tmp_path / "memo"
    assert runs.cuda_devices(sys.executable, memo)[0] == 0
    gpus.write_text('["NVIDIA H100"]')
    assert runs.cuda_devices(sys.executable, memo)[0] == 1
    assert imports.read_text() == "xx"
    driver["gpus"].clear()  # a CPU host: "none" is a definite answer there
    driver["nodes"] = []
    gpus.write_text("[]")
    runs.cuda_devices(sys.executable, memo)
    runs.cuda_devices(sys.executable, memo)
    assert imports.read_text() == "xxx"


def test_torch_not_importable_is_never_remembered(tmp_path, fake_torch, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "nothing-here"))
    memo = tmp_path / "memo"
    for _ in range(2):
        n, why = runs.cuda_devices(sys.executable, memo)
        assert n == 0 and "torch not importable" in why
    assert not list(memo.glob("*.json"))


def test_gpu_driver_view_reads_the_kernel_files(tmp_path):
    proc, dev = tmp_path / "proc", tmp_path / "dev"
    (proc / "sys" / "kernel" / "random").mkdir(parents=True)
    (proc / "sys" / "kernel" / "random" / "boot_id").write_text("b1\n")
    assert fingerprint.gpu_driver(proc, dev)["gpus"] == {}  # no NVIDIA driver, no /dev
    gpu = proc / "driver" / "nvidia" / "gpus" / "0000:01:00.0"
    gpu.mkdir(parents=True)
    (gpu / "information").write_text("Model: NVIDIA H100\n")
    (proc / "driver" / "nvidia" / "version").write_text("NVRM version: 580\n")
    (proc / "driver" / "nvidia" / "capabilities" / "gpu0" / "mig").mkdir(parents=True)
    dev.mkdir()
    (dev / "nvidia0").write_text("")
    (dev / "null").write_text("")
    view = fingerprint.gpu_driver(proc, dev)
    assert view == {"boot_id": "b1\n", "version": "NVRM version: 580\n",
                    "gpus": {"0000:01:00.0": "Model: NVIDIA H100\n"},
                    "capabilities": ["capabilities/gpu0", "capabilities/gpu0/mig"], "nodes": ["nvidia0"]}
    (proc / "driver" / "nvidia" / "capabilities" / "gpu0" / "mig" / "gi1").mkdir()  # a MIG instance appears
    assert fingerprint.gpu_driver(proc, dev) != view


def test_cuda_answer_of_another_interpreter_is_asked_again(tmp_path, fake_torch, venv_python):
    _, imports, _ = fake_torch
    python, site = venv_python
    memo = tmp_path / "memo"
    runs.cuda_devices(sys.executable, memo)
    runs.cuda_devices(python, memo)
    assert imports.read_text() == "xx"
    runs.cuda_devices(python, memo)
    assert imports.read_text() == "xx"
    (site / "newpkg-1.0.dist-info").mkdir()  # a package installed into that interpreter (torch upgraded, say)
    runs.cuda_devices(python, memo)
    assert imports.read_text() == "xxx"


def test_an_edit_of_the_checking_code_forgets_its_answers(tmp_path, checks, monkeypatch):
    build = _build(tmp_path)
    builds.import_check(build, ["fakemod"], sys.executable, "fake")
    edited = tmp_path / "builds.py"  # the harness's builds.py as a later commit might have it
    edited.write_text(Path(builds.__file__).read_text() + "\n# the acceptance rule changed\n")
    monkeypatch.setattr(builds, "__file__", str(edited))
    builds.import_check(build, ["fakemod"], sys.executable, "fake")
    assert len(checks) == 2


def test_a_remembered_check_says_it_did_not_run_and_names_the_cache(tmp_path, checks, capsys):
    """A fresh clone printed checks "remembered" from before it existed: all clones share the cache, so the line
    says the check was not run now and where its answer is kept."""
    from harness.base import ui

    build = _build(tmp_path)
    builds.import_check(build, ["fakemod"], sys.executable, "fake")
    capsys.readouterr()
    ui.set_verbosity(0)
    builds.import_check(build, ["fakemod"], sys.executable, "fake")
    err = " ".join(capsys.readouterr().err.split())
    assert checks == [["fakemod"]]
    # one line per process, whatever the number of builds (four long lines per run were noise); -v names each
    assert "are not run again (remembered in the cache every clone on this host shares" in err
    assert "import check of fake" not in err
    ui.set_verbosity(1)
    try:
        builds.import_check(build, ["fakemod"], sys.executable, "fake")
    finally:
        ui.set_verbosity(0)
    err = " ".join(capsys.readouterr().err.split())
    assert f"import check of fake: not run now; remembered in {build.path / 'import-checks'}" in err
