"""Faults the harness must survive with a documented exit code and nothing half-written (issue 15)."""

from __future__ import annotations

import os
import signal

import pytest
from conftest import alive, cli

from harness.errors import Exit
from harness.lane.receipts import Verdict


def test_a_bug_in_the_harness_is_exit_internal_with_the_traceback_kept(lane_repo, monkeypatch, capsys):
    from harness.commands import list as list_cmd

    def broken(args):
        return {}["no such key"]  # a real KeyError raised inside a command

    monkeypatch.setenv("PATCHLANE_HOME", str(lane_repo.cache))
    monkeypatch.setattr(list_cmd, "main", broken)
    assert cli("list", *lane_repo.args()) == Exit.INTERNAL == 70
    err = capsys.readouterr().err
    assert err.startswith("harness: internal error: KeyError") and str(lane_repo.cache / "last-error.log") in err
    assert "Traceback" in (lane_repo.cache / "last-error.log").read_text()


# --------------------------------------------------------------------------- builds never touch a base (#2)

# An in-tree PEP 517 backend that stages sources the way setuptools' build_py does: into build/lib/ of the
# directory it runs in, copying a file only when the staged copy is missing or older, and packs whatever
# build/lib/ then holds. It also writes an egg-info SOURCES.txt into the tree, as setuptools does.
BACKEND = '''\
import base64, hashlib, os, shutil, zipfile

NAME, VERSION = "fakepkg", "1.0"


def _stage():
    for dirpath, _, files in os.walk(os.path.join("src", NAME)):
        for f in files:
            src = os.path.join(dirpath, f)
            dst = os.path.join("build", "lib", os.path.relpath(src, "src"))
            if not os.path.exists(dst) or os.path.getmtime(dst) < os.path.getmtime(src):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copyfile(src, dst)
    os.makedirs(NAME + ".egg-info", exist_ok=True)
    with open(os.path.join(NAME + ".egg-info", "SOURCES.txt"), "w") as fh:
        fh.write("src/fakepkg/core.py\\n")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _stage()
    info = f"{NAME}-{VERSION}.dist-info"
    files = {}
    for dirpath, _, names in os.walk(os.path.join("build", "lib")):
        for f in names:
            path = os.path.join(dirpath, f)
            with open(path, "rb") as fh:
                files[os.path.relpath(path, os.path.join("build", "lib"))] = fh.read()
    files[info + "/METADATA"] = f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {VERSION}\\n".encode()
    files[info + "/WHEEL"] = b"Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    record = "".join(
        f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\\n"
        for n, d in files.items()) + info + "/RECORD,,\\n"
    files[info + "/RECORD"] = record.encode()
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        for n, d in sorted(files.items()):
            zf.writestr(n, d)
    return name
'''


def _backend_sdist(path, hang: bool = False) -> None:
    """An sdist of fakepkg 1.0 built by BACKEND; with ``hang`` its build spawns a worker and never ends."""
    import io
    import tarfile

    from conftest import CORE_BUGGY

    top = "fakepkg-1.0"
    backend = BACKEND
    if hang:
        backend = BACKEND.replace("    _stage()\n", "    _stage()\n    _hang()\n") + "\n\ndef _hang():\n" + \
            "".join(f"    {line}\n" for line in SPAWNER.strip().splitlines())
    files = {
        f"{top}/pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["_build"]\n'
                                 '[project]\nname = "fakepkg"\nversion = "1.0"\n',
        f"{top}/PKG-INFO": "Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.0\n",
        f"{top}/_build/backend.py": backend,
        f"{top}/src/fakepkg/__init__.py": '__version__ = "1.0"\n',
        f"{top}/src/fakepkg/core.py": CORE_BUGGY,
    }
    with tarfile.open(path, "w:gz") as tf:
        for name, text in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tf.addfile(info, io.BytesIO(text.encode()))


def _wheel_repo(lane_repo):
    _backend_sdist(lane_repo.sdist)
    lane_repo.write_manifest(build="wheel")
    from harness.base.store import Store
    from harness.upstream import pins

    return pins.materialize(pins.load_manifest(lane_repo.root, "fake"), None, Store(lane_repo.cache))


def _untouched(checkout) -> list[str]:
    """Everything in a base checkout that is not its pristine commit (changed, untracked or ignored files)."""
    from conftest import git

    return git(checkout.path, "status", "--porcelain", "--ignored", "--untracked-files=all").splitlines()


def test_a_wheel_build_leaves_the_base_checkout_pristine(lane_repo, capsys):
    checkout = _wheel_repo(lane_repo)
    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK, capsys.readouterr()
    assert _untouched(checkout) == []
    trees = list((lane_repo.cache / "trees" / "fake").iterdir())
    assert len(trees) == 1 and _untouched(type(checkout)(checkout.target, checkout.base, trees[0], "")) == []


def test_leftovers_in_a_base_never_reach_a_wheel(lane_repo, capsys):
    import os
    import zipfile

    checkout = _wheel_repo(lane_repo)
    # an earlier build, killed while writing, left a truncated staged copy in the base (newer than the source)
    stale = checkout.path / "build" / "lib" / "fakepkg" / "core.py"
    stale.parent.mkdir(parents=True)
    stale.write_text((checkout.path / "src" / "fakepkg" / "core.py").read_text()[:40])
    os.utime(stale, (2_000_000_000, 2_000_000_000))
    assert cli("run", "01", "--lane", "bug", "--quiet", *lane_repo.args()) == Exit.OK, capsys.readouterr()
    [entry] = [e for e in (lane_repo.cache / "builds").iterdir() if not e.name.startswith(".")]
    [wheel] = entry.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("fakepkg/core.py") == (checkout.path / "src" / "fakepkg" / "core.py").read_bytes()
    # nothing but the build, its record, its seal (and what matched it) and the remembered import checks
    kept = ("site", "build.json", wheel.name, "import-checks", ".sealed-sha256.json", ".sealed-seen.json")
    assert not [p for p in entry.iterdir() if p.name not in kept]


def test_a_build_entry_removed_as_it_lands_is_a_build_error_not_a_missing_build(lane_repo, monkeypatch):
    import contextlib
    import shutil

    from harness.base.store import Store
    from harness.errors import BuildError
    from harness.lane import builds
    from harness.upstream import pins

    store = Store(lane_repo.cache)
    real_new_entry = store.new_entry

    @contextlib.contextmanager
    def removed_once_renamed(final):
        with real_new_entry(final) as tmp:
            yield tmp
        shutil.rmtree(final)  # another process (a cache cleaner) takes the entry right after it is renamed in

    monkeypatch.setattr(store, "new_entry", removed_once_renamed)
    manifest = pins.load_manifest(lane_repo.root, "fake")
    with pytest.raises(BuildError, match="vanished as it was made"):
        builds._create("k" * 64, manifest, store, lambda tmp, info: None, "building", "fake 1.0")


# --------------------------------------------------------------------------- concurrent updates of tracking.toml (#3)

REPO_ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def _harness(*args: str, env: dict | None = None, **kw):
    """``python -m harness ...`` as a separate process (this worktree's harness)."""
    import os
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=REPO_ROOT,
                            env=dict(os.environ, **(env or {})), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def test_two_concurrent_runs_of_one_pack_both_land_in_tracking(lane_repo, tmp_path):
    from harness.lane.tracking import Tracking

    # Each reproducer waits until the other one is running too, so both harness processes have read
    # tracking.toml before either writes its result: the interleaving that used to lose one of them.
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    repro.write_text("import os, pathlib, time\n"
                     f"b = pathlib.Path({str(barrier)!r})\n"
                     "(b / os.environ['HARNESS_LANE']).touch()\n"
                     "deadline = time.time() + 60\n"
                     "while len(list(b.iterdir())) < 2 and time.time() < deadline:\n"
                     "    time.sleep(0.05)\n" + repro.read_text())
    # the fix lane is made to mismatch: one lane passes, the other does not, and both must be recorded
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('expect = "FIX_VALIDATED"', 'expect = "FIX_FAILED"'))
    assert cli("prepare", "01", *lane_repo.args()) == Exit.OK  # builds first: the race is about tracking
    procs = [_harness("run", "01", "--lane", lane, "--quiet", *lane_repo.args()) for lane in ("bug", "fix")]
    codes = [p.wait(timeout=120) for p in procs]
    assert codes == [Exit.OK, Exit.MISMATCH], [p.stderr.read() for p in procs]
    # the later save made the pack's line from both runs' receipts, under the lock
    assert Tracking.load(lane_repo.root).verdicts()["01"].startswith("2 lane(s): 1 pass, 1 mismatch (fix); ")
    assert "# a pull request" in path.read_text()


def test_a_save_keeps_an_edit_made_to_the_file_after_it_was_loaded(lane_repo):
    from harness.lane.tracking import Tracking

    path = lane_repo.root / "tracking.toml"
    t = Tracking.load(lane_repo.root)
    path.write_text(path.read_text().replace('state = "ready"', 'state = "held"  # held by hand meanwhile'))
    t.record_verdicts({"01": "2 lane(s): 2 pass"})
    t.save()
    text = path.read_text()
    assert 'state = "held"  # held by hand meanwhile' in text
    assert Tracking.load(lane_repo.root).verdicts() == {"01": "2 lane(s): 2 pass"}


# --------------------------------------------------------------------------- what a reproducer says (#4, #5)

STAMP = '_lane.stamp("fakepkg", "fakepkg.core")\n'


def _misbehave(lane_repo, body: str) -> None:
    (lane_repo.root / "repros" / "fake" / "pack01.py").write_text("import sys, _lane\n" + body)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (STAMP + '_lane.verdict("BUG_ABSENT")\n_lane.skip("changed its mind")\n',
         "printed BUG_ABSENT and SKIPPED (changed its mind): contradictory output"),
        (STAMP + '_lane.verdict("BUG_REPRODUCED")\nprint("SKIPPED {}")\n', "printed BUG_REPRODUCED and SKIPPED"),
        (STAMP + 'print("SKIPPED {\\"reason\\": \\"no gpu\\"}", flush=True)\nraise RuntimeError("then it crashed")\n',
         "exit code 1 after SKIPPED (no gpu)"),
    ],
    ids=["verdict-then-skip", "verdict-then-skip-line-exit-0", "skip-then-crash"],
)
def test_a_skipped_line_never_hides_a_verdict_or_a_crash(lane_repo, body, reason):
    from harness.lane.receipts import find

    _misbehave(lane_repo, body)
    assert cli("run", "01", "--lane", "bug", "--quiet", *lane_repo.args()) == Exit.CRASH
    [rec] = find(lane_repo.root, "fake", "01")  # the evidence is kept
    assert rec.verdict == Verdict.CRASH and reason in rec.reason
    assert "SKIPPED" in (rec.dir / "output.log").read_text()


def test_a_real_skip_is_still_a_skip(lane_repo):
    from harness.lane.receipts import find

    _misbehave(lane_repo, STAMP + '_lane.skip("needs a GPU")\n')
    assert cli("run", "01", "--lane", "bug", "--quiet", *lane_repo.args()) == Exit.SKIPPED
    assert find(lane_repo.root, "fake", "01") == []


@pytest.mark.parametrize(
    ("stamp", "reason"),
    [
        ('print("HOST_STAMP", flush=True)\n', "HOST_STAMP is not a non-empty JSON object"),
        ('print("HOST_STAMP gpu=H100 driver=580", flush=True)\n', "HOST_STAMP is not a non-empty JSON object"),
        ('print("HOST_STAMP {}", flush=True)\n', "HOST_STAMP is not a non-empty JSON object"),
        ('print("HOST_STAMP [1, 2]", flush=True)\n', "HOST_STAMP is not a non-empty JSON object"),
        ("", "no HOST_STAMP line before the verdict"),  # stamped only after the verdict (below)
    ],
    ids=["empty", "not-json", "empty-object", "not-an-object", "after-the-verdict"],
)
def test_a_bad_or_late_host_stamp_is_a_crash(lane_repo, stamp, reason):
    from harness.lane.receipts import find

    late = "" if stamp else STAMP
    _misbehave(lane_repo, stamp + '_lane.verdict("BUG_REPRODUCED")\n' + late)
    assert cli("run", "01", "--lane", "bug", "--quiet", *lane_repo.args()) == Exit.CRASH
    [rec] = find(lane_repo.root, "fake", "01")
    assert rec.verdict == Verdict.CRASH and reason in rec.reason
    assert rec.host is None


# --------------------------------------------------------------------------- nothing outlives the harness (#6)

# A process that writes its pid, starts a grandchild that writes its own, and then waits forever: stands in
# for a reproducer (or a build backend) with worker processes.
SPAWNER = '''
import os, pathlib, subprocess, sys, time
pids = pathlib.Path(os.environ["FAKE_PIDS"])
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
(pids / f"{os.getpid()}.{child.pid}").touch()
time.sleep(600)
'''


def _wait_for_pids(pids_dir, proc) -> list[int]:
    import time

    deadline = time.time() + 120
    while time.time() < deadline and not list(pids_dir.iterdir()):
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.1)
    [name] = [p.name for p in pids_dir.iterdir()]
    return [int(x) for x in name.split(".")]


def _all_gone(pids: list[int], within: float = 10.0) -> bool:
    import time

    deadline = time.time() + within
    while time.time() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def spawning(lane_repo, tmp_path):
    """The lane's reproducer spawns a grandchild and hangs; returns (pids dir, private TMPDIR)."""
    pids, tmp = tmp_path / "pids", tmp_path / "tmpdir"
    pids.mkdir()
    tmp.mkdir()
    (lane_repo.root / "repros" / "fake" / "pack01.py").write_text("import _lane\n" + STAMP + SPAWNER)
    yield pids, tmp
    for name in [p.name for p in pids.iterdir()]:  # never leave a process behind, even when the test fails
        for pid in name.split("."):
            if alive(int(pid)):
                os.kill(int(pid), signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_kills_the_reproducer_and_its_children_and_leaks_nothing(lane_repo, spawning, sig):
    from harness.lane.receipts import find

    pids_dir, tmp = spawning
    proc = _harness("run", "01", "--lane", "bug", "--quiet", *lane_repo.args(),
                    env={"FAKE_PIDS": str(pids_dir), "TMPDIR": str(tmp)})
    pids = _wait_for_pids(pids_dir, proc)
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == Exit.TERMINATED
    assert "harness: terminated" in proc.stderr.read()
    assert _all_gone(pids), [p for p in pids if alive(p)]
    assert list(tmp.iterdir()) == []  # neither the temporary log nor the run directory
    assert find(lane_repo.root, "fake", "01") == []


def test_sigkill_of_the_harness_still_takes_the_reproducer_down(lane_repo, spawning):
    pids_dir, tmp = spawning
    proc = _harness("run", "01", "--lane", "bug", "--quiet", *lane_repo.args(),
                    env={"FAKE_PIDS": str(pids_dir), "TMPDIR": str(tmp)})
    pids = _wait_for_pids(pids_dir, proc)
    proc.kill()
    proc.wait(timeout=30)
    assert _all_gone(pids), [p for p in pids if alive(p)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_harness_takes_pip_and_the_build_backend_down(lane_repo, tmp_path, sig):
    pids_dir, tmp = tmp_path / "pids", tmp_path / "tmpdir"
    pids_dir.mkdir()
    tmp.mkdir()
    _backend_sdist(lane_repo.sdist, hang=True)
    lane_repo.write_manifest(build="wheel")
    proc = _harness("prepare", "01", "--lane", "bug", *lane_repo.args(),
                    env={"FAKE_PIDS": str(pids_dir), "TMPDIR": str(tmp)})
    try:
        pids = _wait_for_pids(pids_dir, proc)
        proc.send_signal(sig)
        code = proc.wait(timeout=30)
        assert code == (Exit.TERMINATED if sig == signal.SIGTERM else -signal.SIGKILL)
        assert _all_gone(pids), [p for p in pids if alive(p)]
    finally:
        for pid in [int(x) for p in pids_dir.iterdir() for x in p.name.split(".")]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    builds = lane_repo.cache / "builds"
    assert not builds.exists() or all(e.name.startswith(".tmp-") for e in builds.iterdir())
    assert list(tmp.iterdir()) == []  # pip's own temporary files were inside the build's scratch entry


# --------------------------------------------------------------------------- temporary files (#14)

def test_a_run_leaves_nothing_in_the_temporary_directory(lane_repo, tmp_path, monkeypatch):
    import tempfile

    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.delenv("HARNESS_RUN_DIR", raising=False)
    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK
    lane_repo.write_tracking(timeout=2)
    monkeypatch.setenv("FAKE_MODE", "hang")
    assert cli("run", "01", "--lane", "bug", "--quiet", *lane_repo.args()) == Exit.TIMEOUT
    assert list(tmp.iterdir()) == []


def test_a_run_directory_given_by_the_caller_is_kept(lane_repo, tmp_path, monkeypatch):
    given = tmp_path / "shared-run"
    monkeypatch.setenv("HARNESS_RUN_DIR", str(given))
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    repro.write_text(repro.read_text() + "import pathlib; (pathlib.Path(os.environ['HARNESS_RUN_DIR']) / "
                     "os.environ['HARNESS_LANE']).write_text('saved')\n")
    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK
    assert sorted(p.name for p in given.iterdir()) == ["bug", "fix"]


# --------------------------------------------------------------------------- file modes (#13)

@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.parametrize("mode", [0o644, 0o664])
def test_saving_tracking_toml_keeps_its_mode(lane_repo, umask_022, mode):
    from harness.lane.tracking import Tracking

    path = lane_repo.root / "tracking.toml"
    path.chmod(mode)
    t = Tracking.load(lane_repo.root)
    t.record_verdicts({"01": "2 lane(s): 2 pass"})
    t.save()
    assert path.stat().st_mode & 0o777 == mode


def test_receipts_and_cache_entries_get_the_modes_a_checkout_expects(lane_repo, umask_022, tmp_path):
    from harness.lane.receipts import find

    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK
    for rec in find(lane_repo.root, "fake", "01"):
        assert rec.dir.stat().st_mode & 0o777 == 0o755
        assert {p.name: p.stat().st_mode & 0o777 for p in rec.dir.iterdir()} == dict.fromkeys(
            ["SHA256SUMS", "output.log", "output.log.sha256", "receipt.json"], 0o644)
    entries = [e for area in ("bases/fake", "trees/fake", "builds") for e in (lane_repo.cache / area).iterdir()]
    assert len(entries) == 4 and {e.stat().st_mode & 0o777 for e in entries} == {0o755}
    # and a receipt brought back from another host is imported with the same modes
    out = tmp_path / "remote"
    assert cli("run", "01", "--lane", "bug", "--quiet", "--no-tracking", "--receipts-dir", str(out),
               *lane_repo.args()) == Exit.OK
    [d] = (out / "fake" / "01").iterdir()
    d.chmod(0o700)
    archive = tmp_path / "r.tar"
    import tarfile

    with tarfile.open(archive, "w") as tf:
        tf.add(d, arcname=f"fake/01/{d.name}")
    assert cli("receipts", "import", str(archive), *lane_repo.args()) == Exit.OK
    assert (lane_repo.root / "receipts" / "fake" / "01" / d.name).stat().st_mode & 0o777 == 0o755


# --------------------------------------------------------------------------- credentials (#15)

# Upstream code that reports which credential variables it can see, from wherever it runs.
SNOOP = ('import os as _os\n'
         'with open(_os.environ["FAKE_ENV_OUT"], "a") as _fh:\n'
         '    _fh.write("{where}: " + ",".join(sorted(k for k in _os.environ if k.endswith("TOKEN"))) + "\\n")\n')


def test_no_credential_reaches_a_build_backend_an_import_check_or_a_reproducer(lane_repo, tmp_path, monkeypatch):
    import io
    import tarfile

    seen = tmp_path / "seen.txt"
    monkeypatch.setenv("FAKE_ENV_OUT", str(seen))
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_" + "S" * 36)
    monkeypatch.setenv("GH_TOKEN", "gho_" + "S" * 36)
    monkeypatch.setenv("ACTIONS_RUNTIME_TOKEN", "x")
    monkeypatch.setenv("HARMLESS_TOKEN", "kept")  # not a credential of ours: proves the snoop sees variables
    _backend_sdist(lane_repo.sdist)
    with tarfile.open(lane_repo.sdist) as src:  # the backend and the package itself snoop too
        members = [(m, src.extractfile(m).read()) for m in src.getmembers()]
    with tarfile.open(lane_repo.sdist, "w:gz") as tf:
        for m, data in members:
            if m.name.endswith("_build/backend.py"):
                snoop = "".join(f"    {line}\n" for line in SNOOP.format(where="backend").splitlines())
                data = data.replace(b"    _stage()\n", snoop.encode() + b"    _stage()\n")
            if m.name.endswith("fakepkg/__init__.py"):
                data = SNOOP.format(where="import").encode() + data
            m.size = len(data)
            tf.addfile(m, io.BytesIO(data))
    lane_repo.write_manifest(build="wheel")
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    repro.write_text(SNOOP.format(where="reproducer") + repro.read_text())
    assert cli("run", "01", "--lane", "bug", "--quiet", *lane_repo.args()) == Exit.OK
    lines = seen.read_text().splitlines()
    assert {line.split(":")[0] for line in lines} == {"backend", "import", "reproducer"}
    assert set(lines) == {f"{where}: HARMLESS_TOKEN" for where in ("backend", "import", "reproducer")}


@pytest.mark.parametrize("url", ["http://example.invalid", "http://192.0.2.1:8080/api", "ftp://example.invalid"])
def test_a_token_is_never_sent_over_plain_http(lane_repo, monkeypatch, capsys, url):
    lane_repo.write_tracking('[[packs.01.threads]]\nurl = "https://github.com/acme/fake/pull/11"\n')
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_" + "H" * 36)
    code = cli("status", "--refresh", "--api-url", url, "--timeout", "2", *lane_repo.args())
    assert code == Exit.USAGE  # refused before any request: offline would be UPSTREAM (9)
    err = capsys.readouterr().err
    assert f"refusing to send GITHUB_TOKEN/GH_TOKEN to {url}: not https" in err and "ghp_" not in err
    monkeypatch.delenv("GITHUB_TOKEN")
    monkeypatch.delenv("GH_TOKEN", raising=False)
    if url == "http://example.invalid":  # without a token the same URL is simply tried (and is offline)
        assert cli("status", "--refresh", "--api-url", url, "--timeout", "2", *lane_repo.args()) == Exit.UPSTREAM


def test_a_tools_own_skipped_summary_is_not_a_protocol_line(lane_repo):
    """pytest's short test summary (``-rs``) starts lines with ``SKIPPED [N] file:line: reason``; an upstream
    suite's log holds such lines beside the runner's sentinel. They are not the kit's ``SKIPPED {json}``."""
    from harness.lane.receipts import find

    _misbehave(lane_repo, STAMP + 'print("SKIPPED [10] tests/t.py:61: needs 4 ranks", flush=True)\n'
                                  '_lane.verdict("BUG_REPRODUCED")\n')
    assert cli("run", "01", "--lane", "bug", "--quiet", *lane_repo.args()) == Exit.OK
    [rec] = find(lane_repo.root, "fake", "01")
    assert rec.verdict == Verdict.PASS and "SKIPPED [10]" in (rec.dir / "output.log").read_text()


def test_protocol_lines_glued_by_two_ranks_are_read_apart():
    """Two ranks on one pipe: a print's text and its newline are two writes, so another rank's line can land
    between them. Both stamps and the verdict are still read."""
    from harness.lane import runs

    one = '{"rank": 0, "world_size": 2}'
    two = '{"rank": 1, "world_size": 2}'
    outcome = runs.Outcome(exit_code=0, duration_s=0.1, timed_out=False)
    runs.parse_log(f"HOST_STAMP {one}HOST_STAMP {two}\n\nBUG_REPRODUCED {{}}\n", outcome, {"BUG_REPRODUCED"})
    assert outcome.stamp_problem is None and [s["rank"] for s in outcome.stamps] == [0, 1]
    assert outcome.sentinels == [("BUG_REPRODUCED", {})]


@pytest.mark.parametrize("brk", ["\u2028", "\u2029", "\x0c", "\x0b", "\x85", "\x1e", "\r"])
def test_a_sentinel_after_a_unicode_line_break_inside_a_line_is_not_a_line(brk):
    """#55: str.splitlines breaks at U+2028 and its kin, so a value printed with one inside passed a sentinel."""
    from harness.lane import runs

    outcome = runs.Outcome(exit_code=0, duration_s=0.1, timed_out=False)
    text = f'HOST_STAMP {{"rank": 0}}\nprinted value{brk}FIX_VALIDATED {{}}\nCONTRACT_HELD {{}}\r\n'
    runs.parse_log(text, outcome, {"FIX_VALIDATED", "CONTRACT_HELD"})
    assert outcome.sentinels == [("CONTRACT_HELD", {})]  # a "\r\n" line end is still a line end
