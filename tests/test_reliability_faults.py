"""Faults injected for real that the harness must survive (issue 24): each test breaks something the way
an operator or a crash would, then checks the exit code, what was written and what was not."""

from __future__ import annotations

import io
import json
import os
import tarfile
import threading
import time
import zipfile

import pytest
from conftest import cli

from harness.errors import Exit
from harness.lane import receipts
from harness.lane.tracking import Tracking

# --------------------------------------------------------------------------- sealed cache entries (case 1)


def _wheel_lane_repo(lane_repo):
    from test_reliability import _backend_sdist

    _backend_sdist(lane_repo.sdist)
    lane_repo.write_manifest(build="wheel")
    return lane_repo


def _entries(lane_repo) -> dict[str, object]:
    """The build entries by what they built: ``{"patched": path, "base": path}``."""
    found = {}
    for entry in (lane_repo.cache / "builds").iterdir():
        if entry.name.startswith("."):
            continue
        core = (entry / "site" / "fakepkg" / "core.py").read_text()
        found["patched" if "zip(xs, w)" in core else "base"] = entry
    return found


def test_a_truncated_module_in_a_cached_build_is_rebuilt_not_blamed_on_the_reproducer(lane_repo, capsys):
    _wheel_lane_repo(lane_repo)
    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK, capsys.readouterr()
    victim = _entries(lane_repo)["patched"] / "site" / "fakepkg" / "core.py"
    good = victim.read_bytes()
    victim.write_bytes(good[:30])  # a disk that lost the end of the file
    capsys.readouterr()
    assert cli("run", "01", "--lane", "fix", *lane_repo.args()) == Exit.OK
    err = capsys.readouterr().err
    assert "is not as it was made (site/fakepkg/core.py: missing or not as sealed); building it again" in err
    assert victim.read_bytes() == good


def test_a_module_copied_into_the_baseline_build_never_reaches_a_verdict(lane_repo, capsys):
    _wheel_lane_repo(lane_repo)
    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK, capsys.readouterr()
    entries = _entries(lane_repo)
    fixed = entries["patched"] / "site" / "fakepkg" / "core.py"
    baseline = entries["base"] / "site" / "fakepkg" / "core.py"
    baseline.write_bytes(fixed.read_bytes())  # the baseline build now carries the fix
    (entries["base"] / "site" / "fakepkg" / "extra.py").write_text("x = 1\n")  # and a file it never had
    capsys.readouterr()
    assert cli("run", "01", "--lane", "bug", *lane_repo.args()) == Exit.OK  # still the bug: rebuilt from the base
    assert "not as it was made (site/fakepkg/core.py: missing or not as sealed and 1 more)" in capsys.readouterr().err
    assert receipts.latest(lane_repo.root, "fake", "01", "bug").verdict == "pass"
    assert "zip(xs, w)" not in baseline.read_text() and not (baseline.parent / "extra.py").exists()


def test_an_entry_without_a_seal_is_not_trusted(lane_repo, capsys):
    from harness.base.hashing import SEAL

    assert cli("prepare", "01", *lane_repo.args()) == Exit.OK, capsys.readouterr()
    for entry in _entries(lane_repo).values():
        (entry / SEAL).unlink()  # an entry made before seals, or its seal lost
    capsys.readouterr()
    assert cli("prepare", "01", *lane_repo.args()) == Exit.OK
    assert capsys.readouterr().err.count(f"{SEAL}: missing or unreadable") == 2
    assert all((entry / SEAL).is_file() for entry in _entries(lane_repo).values())


def test_a_cached_wheel_truncated_to_nothing_is_never_shipped_in_a_bundle(lane_repo, tmp_path, capsys):
    from harness.base.hashing import sha256_file

    _wheel_lane_repo(lane_repo)
    assert cli("prepare", "01", *lane_repo.args()) == Exit.OK, capsys.readouterr()
    [wheel] = _entries(lane_repo)["patched"].glob("*.whl")
    good = sha256_file(wheel)
    wheel.write_bytes(b"")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    out = tmp_path / "bundle.tar.xz"
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), *lane_repo.args()) == Exit.OK
    with tarfile.open(out) as tf:
        index = json.load(tf.extractfile("patchlane-bundle/bundle.json"))
        shipped = {e["file"]: tf.extractfile(f"patchlane-bundle/{e['file']}").read() for e in index["builds"].values()}
    empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert empty not in {e["sha256"] for e in index["builds"].values()}
    for data in shipped.values():  # each a whole wheel holding the module
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            assert b"def scale" in zf.read("fakepkg/core.py")
    assert good  # the wheel as first built; the rebuilt one is equivalent, not byte-identical (zip times)


def test_a_wheel_damaged_while_the_bundle_is_packed_is_refused(lane_repo, tmp_path, monkeypatch, capsys):
    from harness.host import bundle

    _wheel_lane_repo(lane_repo)
    real = bundle._add_build

    def damaged_first(index, members, ctx, build, lane):
        if build.wheel is not None:
            build.wheel.write_bytes(b"")  # the disk loses the wheel after the lane was prepared
        return real(index, members, ctx, build, lane)

    monkeypatch.setattr(bundle, "_add_build", damaged_first)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    out = tmp_path / "bundle.tar.xz"
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), *lane_repo.args()) == Exit.PIN
    assert "is not as it was made" in capsys.readouterr().err
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()


def test_a_damaged_runtime_site_is_installed_again(lane_repo, tmp_path, capsys):
    import sys

    from test_reliability import _backend_sdist

    from harness.base.store import Store
    from harness.lane import builds, runtime

    dist = tmp_path / "runtime-dist"
    dist.mkdir()
    _backend_sdist(dist / "fakepkg-1.0.tar.gz")
    store = Store(lane_repo.cache)
    builds._run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(dist),
                 str(dist / "fakepkg-1.0.tar.gz")], "fake", "pip wheel")
    first = runtime.ensure_requirements(("fakepkg==1.0",), "fake", store, sys.executable, wheels=dist)
    module = first / "fakepkg" / "core.py"
    good = module.read_bytes()
    module.write_bytes(b"")
    again = runtime.ensure_requirements(("fakepkg==1.0",), "fake", store, sys.executable, wheels=dist)
    assert again == first and module.read_bytes() == good
    assert "is not as it was made (site/fakepkg/core.py" in capsys.readouterr().err


# ----------------------------------------------------------------- an unwritable receipts directory (case 4)

REPO_ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def _read_only_bind_works(directory) -> bool:
    import shutil
    import subprocess

    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-rm", "mount", "--bind", str(directory), str(directory)], capture_output=True).returncode == 0


def test_a_read_only_receipts_directory_is_exit_io_naming_it_with_nothing_left(lane_repo, tmp_path):
    import subprocess
    import sys

    receipts = lane_repo.root / "receipts"
    receipts.mkdir()
    if not _read_only_bind_works(receipts):
        pytest.skip("needs unshare -rm (user and mount namespaces) for a read-only bind mount")
    assert cli("prepare", "01", *lane_repo.args()) == Exit.OK  # builds first: the fault is about the receipt
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    harness = " ".join([sys.executable, "-m", "harness", "run", "01", "--lane", "bug", "--quiet", *lane_repo.args()])
    script = f"mount --bind {receipts} {receipts} && mount -o remount,bind,ro {receipts} && exec {harness}"
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=REPO_ROOT, capture_output=True, text=True,
                          env=dict(os.environ, TMPDIR=str(tmpdir)), timeout=120)
    assert proc.returncode == Exit.IO == 74, proc.stderr
    assert f"cannot write the receipt of pack 01 lane bug: {receipts / 'fake'}: Read-only file system" in proc.stderr
    assert list(receipts.iterdir()) == [] and list(tmpdir.iterdir()) == []  # no receipt, no temporary log
    assert "validation" not in Tracking.load(lane_repo.root).doc["packs"]["01"]


def test_a_receipt_that_cannot_be_written_leaves_no_scratch_and_no_log(lane_repo, tmp_path, monkeypatch, capsys):
    import tempfile

    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    blocked = lane_repo.root / "receipts" / "fake" / "01"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("a file where the pack's receipt directory goes\n")
    assert cli("run", "01", "--lane", "bug", "--quiet", *lane_repo.args()) == Exit.IO
    assert f"cannot write the receipt of pack 01 lane bug: {blocked}" in capsys.readouterr().err
    assert list(tmp.iterdir()) == [] and sorted(p.name for p in blocked.parent.iterdir()) == ["01"]


# --------------------------------------------------------------------------- relative path options (cases 5, 6)

def test_a_relative_cache_builds_wheels(lane_repo, tmp_path, monkeypatch, capsys):
    _wheel_lane_repo(lane_repo)
    monkeypatch.chdir(tmp_path)  # pip runs in the build's tree: a relative cache path must not reach it as given
    code = cli("run", "01", "--quiet", "--root", "repo", "--cache", "cache")
    assert code == Exit.OK, capsys.readouterr().err
    assert [e for e in (tmp_path / "cache" / "builds").iterdir() if not e.name.startswith(".")]


def test_a_relative_receipts_dir_from_a_subdirectory_is_recorded_where_it_was_written(lane_repo, monkeypatch, capsys):
    sub = lane_repo.root / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    assert cli("run", "01", "--lane", "bug", "--quiet", "--receipts-dir", "rcpt", "--cache", str(lane_repo.cache)) \
        == Exit.OK, capsys.readouterr().err
    [written] = (sub / "rcpt").glob("fake/01/*/receipt.json")
    assert written.is_file() and not (lane_repo.root / "rcpt").exists()
    # the [verdicts] line counts receipts/ only: one written elsewhere counts once imported, and verify agrees
    assert "pass" not in Tracking.load(lane_repo.root).verdicts().get("01", "")
    monkeypatch.chdir(lane_repo.root)
    capsys.readouterr()
    assert cli("receipts", "verify", *lane_repo.args()) == Exit.OK, capsys.readouterr().out


def test_every_path_option_is_absolute_once_parsed(tmp_path, monkeypatch):
    from harness.main import build_parser

    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["run", "01", "--receipts-dir", "r", "--result-file", "x.json", "--cache", "c",
                                      "--root", "rt", "--artifacts", "a", "--git-mirrors", "m", "--bundle-dir", "b"])
    for name in ("receipts_dir", "result_file", "cache", "root", "bundle_dir"):
        assert getattr(args, name).is_absolute() and getattr(args, name).parent == tmp_path, name
    assert all(p.is_absolute() for p in (*args.artifacts, *args.git_mirrors))


# ------------------------------------------------------------ verify goes on past what it cannot read (case 8)

def _unprivileged(cmd: list[str]) -> list[str]:
    """``cmd`` run without the power to read a file its mode forbids (root reads any file: it runs as the
    owner of the files, uid 1000, in a user namespace of its own, with no capability over them)."""
    import shutil

    if os.geteuid() != 0:
        return cmd
    if shutil.which("unshare") is None:
        pytest.skip("running as root without unshare: a mode-000 file stays readable")
    return ["unshare", "--user", "--map-user=1000", "--map-group=1000", *cmd]


@pytest.mark.parametrize("victim", ["output.log", "SHA256SUMS", "output.log.sha256", "receipt-dir", "pack-dir"])
def test_verify_reports_an_unreadable_receipt_file_and_goes_on(lane_repo, victim, capsys):
    import subprocess
    import sys

    assert cli("run", "01", *lane_repo.args()) == Exit.OK, capsys.readouterr().err
    pack_dir = lane_repo.root / "receipts" / "fake" / "01"
    [bug] = pack_dir.glob("*-bug")
    target = {"receipt-dir": bug, "pack-dir": pack_dir}.get(victim, bug / victim)
    target.chmod(0)
    try:
        proc = subprocess.run(_unprivileged([sys.executable, "-m", "harness", "receipts", "verify",
                                             *lane_repo.args()]), cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=120)
    finally:
        target.chmod(0o755)
    assert proc.returncode == Exit.TAMPERED, proc.stderr
    out = proc.stdout
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    if victim == "pack-dir":
        assert "BAD receipts/fake/01: directory unreadable (Permission denied)" in out
        # what cannot be read counts for nothing: the pack's [verdicts] line no longer agrees with what can
        assert "[verdicts] 01: says '2 lane(s): 2 pass; " in out and "receipts/ say '2 lane(s): 2 not run" in out
    else:
        what = "directory" if victim == "receipt-dir" else f"{victim}:"
        assert f"BAD receipts/fake/01/{bug.name}: {what} unreadable (Permission denied)" in out
        assert "1 receipt(s) verified" in out  # the fix lane's receipt was still checked, and passed


# ----------------------------------------------------------- a token over plain http by URL confusion (case 9)

@pytest.fixture
def recorder():
    """An HTTP server on 127.0.0.1 that records every request it receives (line and headers) and answers 404;
    requests through it as a proxy are recorded the same way. Stopped after the test; each wait is bounded."""
    import http.server
    import threading

    seen: list[dict] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the stdlib's name)
            seen.append({"line": self.requestline, "headers": dict(self.headers)})
            self.send_response(404)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.timeout = 5
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


TOKEN = "ghp_" + "R" * 36


def _status(lane_repo, monkeypatch, url: str) -> int:
    lane_repo.write_tracking('[[packs.01.threads]]\nurl = "https://github.com/acme/fake/pull/11"\n')
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    return cli("status", "--refresh", "--api-url", url, "--timeout", "3", *lane_repo.args())


@pytest.mark.parametrize("url", [
    "http://example.invalid:80\\@127.0.0.1:{port}",  # urlsplit sees 127.0.0.1, requests connects to example.invalid
    "http://example.invalid\\@localhost:{port}",
    "http://user:secret@127.0.0.1:{port}",  # credentials in the URL
    "http://127.0.0.1:{port}@example.invalid",
])
def test_a_confusing_api_url_never_carries_the_token(lane_repo, monkeypatch, capsys, recorder, url):
    port, seen = recorder
    # the recorder is also the environment's proxy: whatever requests would send anywhere in clear lands in it
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert _status(lane_repo, monkeypatch, url.format(port=port)) == Exit.USAGE
    err = capsys.readouterr().err
    assert "refusing" in err and TOKEN not in err
    assert seen == []  # nothing reached the server, directly or as a proxy


def test_the_token_still_reaches_a_loopback_server_directly(lane_repo, monkeypatch, capsys, recorder):
    port, seen = recorder
    monkeypatch.setenv("HTTP_PROXY", "http://192.0.2.1:9")  # a proxy from the environment is not used for it
    monkeypatch.setenv("http_proxy", "http://192.0.2.1:9")
    code = _status(lane_repo, monkeypatch, f"http://127.0.0.1:{port}")
    assert code == Exit.USAGE, capsys.readouterr().err  # the recorder answers 404: no such thread
    assert [r["line"] for r in seen] == ["GET /repos/acme/fake/pulls/11 HTTP/1.1"]
    assert seen[0]["headers"]["Authorization"] == f"Bearer {TOKEN}"


# --------------------------------------------------------------------------- binary hunks in regen (case 2)

BLOB = bytes(range(256)) * 4  # not text: git writes it as a binary hunk


def _binary_patch(tmp_path) -> str:
    """A second patch of pack 01, made with ``git format-patch --binary``: it adds a binary data file."""
    import shutil

    from conftest import git

    repo = tmp_path / "binsrc"
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "src" / "fakepkg").mkdir(parents=True)
    (repo / "README").write_text("x\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    (repo / "src" / "fakepkg" / "table.bin").write_bytes(BLOB)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "core: ship the weight table\n\nUpstream-Status: Pending\nPack: 01\n")
    return git(repo, "format-patch", "-1", "--stdout", "--binary", "--zero-commit", "--no-signature")


def test_regen_of_a_binary_hunk_keeps_the_full_index_and_the_series_applies(lane_repo, tmp_path, capsys):
    from conftest import git

    lane_repo.write_patch(_binary_patch(tmp_path), name="0002-ship-the-weight-table.patch")
    edit = tmp_path / "edit"
    assert cli("edit", "01", "--dir", str(edit), *lane_repo.args()) == Exit.OK, capsys.readouterr().err
    (edit / "src" / "fakepkg" / "table.bin").write_bytes(BLOB[::-1])  # a change to the blob
    git(edit, "commit", "-q", "-a", "--amend", "--no-edit")
    assert cli("regen", "01", "--dir", str(edit), *lane_repo.args()) == Exit.OK, capsys.readouterr().err
    text = (lane_repo.root / "patches" / "fake" / "01" / "0002-ship-the-weight-table.patch").read_text()
    assert "GIT binary patch" in text
    index = [ln for ln in text.splitlines() if ln.startswith("index ")]
    assert len(index) == 1 and len(index[0].split()[1]) == 2 * 40 + 2  # full blob ids where git needs them
    core = (lane_repo.root / "patches" / "fake" / "01" / "0001-use-own-weight.patch").read_text()
    assert all(len(ln.split()[1]) == 16 for ln in core.splitlines() if ln.startswith("index "))  # text: short
    assert cli("run", "01", "--lane", "fix", "--quiet", *lane_repo.args()) == Exit.OK, capsys.readouterr().err


def test_a_regenerated_series_that_does_not_apply_is_never_kept(lane_repo, tmp_path, monkeypatch, capsys):
    import re

    from conftest import git

    from harness.lane import series_write

    lane_repo.write_patch(_binary_patch(tmp_path), name="0002-ship-the-weight-table.patch")
    before = {p.name: p.read_bytes() for p in (lane_repo.root / "patches" / "fake" / "01").iterdir()}
    edit = tmp_path / "edit"
    assert cli("edit", "01", "--dir", str(edit), *lane_repo.args()) == Exit.OK, capsys.readouterr().err
    (edit / "src" / "fakepkg" / "table.bin").write_bytes(BLOB[::-1])
    git(edit, "commit", "-q", "-a", "--amend", "--no-edit")
    real = series_write.normalize_patch

    def every_index_cut(data: bytes) -> bytes:  # what regen used to write: binary index lines cut to 7 digits
        return re.sub(rb"(?m)^index ([0-9a-f]{7})[0-9a-f]{33}\.\.([0-9a-f]{7})[0-9a-f]{33}", rb"index \1..\2",
                      real(data))

    monkeypatch.setattr(series_write, "normalize_patch", every_index_cut)
    capsys.readouterr()
    assert cli("regen", "01", "--dir", str(edit), *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert "the regenerated series does not apply, so 01's series was left as it was" in err
    assert {p.name: p.read_bytes() for p in (lane_repo.root / "patches" / "fake" / "01").iterdir()} == before
    assert not [p for p in (lane_repo.root / "patches" / "fake").iterdir() if p.name.startswith(".")]


# --------------------------------------------------------------------------- Ctrl-C in regen after the swap (case 3)

def _amended_checkout(lane_repo, tmp_path, capsys):
    from conftest import git

    edit = tmp_path / "edit"
    assert cli("edit", "01", "--dir", str(edit), *lane_repo.args()) == Exit.OK, capsys.readouterr().err
    core = edit / "src" / "fakepkg" / "core.py"
    core.write_text(core.read_text().replace("zip(xs, w)", "zip(xs, w, strict=True)"))
    git(edit, "commit", "-q", "-a", "--amend", "--no-edit")
    return edit


def _settled(lane_repo, edit, capsys) -> None:
    """The series holds the edit, no backup is left, and both regen and edit --force accept the checkout."""
    patches = lane_repo.root / "patches" / "fake"
    assert b"strict=True" in (patches / "01" / "0001-use-own-weight.patch").read_bytes()
    assert not [p.name for p in patches.iterdir() if p.name.startswith(".")]
    capsys.readouterr()
    assert cli("regen", "01", "--dir", str(edit), *lane_repo.args()) == Exit.OK, capsys.readouterr().err
    assert "unchanged" in capsys.readouterr().out
    assert cli("edit", "01", "--dir", str(edit), "--force", *lane_repo.args()) == Exit.OK, capsys.readouterr().err


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_at_the_swap_waits_until_the_series_and_the_state_agree(lane_repo, tmp_path, monkeypatch, capsys,
                                                                        sig):
    import signal

    from harness.lane import series_write

    edit = _amended_checkout(lane_repo, tmp_path, capsys)
    real = series_write.replace_series

    def signalled_at_the_swap(dest, new):
        backup = real(dest, new)
        # a real signal, delivered right after the renames, to the main thread: under pytest-xdist the worker has an
        # execnet thread that would take a process-directed signal past the main thread's mask
        signal.pthread_kill(threading.main_thread().ident, getattr(signal, sig))
        return backup

    monkeypatch.setattr(series_write, "replace_series", signalled_at_the_swap)
    # a shell without job control starts background jobs with SIGINT ignored, and Python then keeps it ignored:
    # give this process the handler an interactive run has, so the signal is the one a person sends
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = cli("regen", "01", "--dir", str(edit), *lane_repo.args())
    finally:
        signal.signal(signal.SIGINT, before)
    assert code == (Exit.INTERRUPT if sig == "SIGINT" else Exit.TERMINATED)
    monkeypatch.setattr(series_write, "replace_series", real)
    _settled(lane_repo, edit, capsys)


def test_a_regen_killed_after_the_swap_is_finished_by_the_next_regen(lane_repo, tmp_path, capsys):
    import subprocess
    import sys

    edit = _amended_checkout(lane_repo, tmp_path, capsys)
    # SIGKILL cannot be held back: the process dies between the swap and the state that records it
    killer = ("import os, signal, sys\n"
              "from harness.filing import edit\n"
              "edit.EditState.write = lambda self, checkout: os.kill(os.getpid(), signal.SIGKILL)\n"
              "from harness.main import main\n"
              "sys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.run([sys.executable, "-c", killer, "regen", "01", "--dir", str(edit), *lane_repo.args()],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    patches = lane_repo.root / "patches" / "fake"
    assert [p.name for p in patches.iterdir() if ".bak-" in p.name]  # the state the issue found
    capsys.readouterr()
    assert cli("regen", "01", "--dir", str(edit), *lane_repo.args()) == Exit.OK, capsys.readouterr().err
    assert "finished an interrupted regen of pack 01" in capsys.readouterr().err
    _settled(lane_repo, edit, capsys)


def test_a_series_changed_by_hand_after_an_interrupted_regen_names_the_backup(lane_repo, tmp_path, capsys):
    import subprocess
    import sys

    edit = _amended_checkout(lane_repo, tmp_path, capsys)
    killer = ("import os, signal, sys\n"
              "from harness.filing import edit\n"
              "edit.EditState.write = lambda self, checkout: os.kill(os.getpid(), signal.SIGKILL)\n"
              "from harness.main import main\n"
              "sys.exit(main(sys.argv[1:]))\n")
    subprocess.run([sys.executable, "-c", killer, "regen", "01", "--dir", str(edit), *lane_repo.args()],
                   cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    patch = lane_repo.root / "patches" / "fake" / "01" / "0001-use-own-weight.patch"
    patch.write_text(patch.read_text().replace("strict=True", "strict=False"))  # and then a hand edit
    [backup] = [p for p in patch.parent.parent.iterdir() if ".bak-" in p.name]
    capsys.readouterr()
    assert cli("regen", "01", "--dir", str(edit), *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert f"an interrupted regen left the previous series in {backup}" in err


# ------------------------------------------------------------------------ Python 3.11.0-3.11.3: no tar filters (case 7)

@pytest.fixture
def no_tar_filter(monkeypatch):
    """A stand-in for Python 3.11.0-3.11.3: tarfile without extraction filters, whose extract and extractall
    refuse the ``filter`` argument exactly as those versions do."""
    real_extract, real_extractall = tarfile.TarFile.extract, tarfile.TarFile.extractall

    def extract(self, member, path="", set_attrs=True, *, numeric_owner=False, **kw):
        if kw:
            raise TypeError(f"TarFile.extract() got an unexpected keyword argument '{next(iter(kw))}'")
        return real_extract(self, member, path, set_attrs, numeric_owner=numeric_owner, filter="fully_trusted")

    def extractall(self, path=".", members=None, *, numeric_owner=False, **kw):
        if kw:
            raise TypeError(f"TarFile.extractall() got an unexpected keyword argument '{next(iter(kw))}'")
        return real_extractall(self, path, members, numeric_owner=numeric_owner, filter="fully_trusted")

    monkeypatch.delattr(tarfile, "data_filter")
    monkeypatch.setattr(tarfile.TarFile, "extract", extract)
    monkeypatch.setattr(tarfile.TarFile, "extractall", extractall)


def test_the_stand_in_fails_as_python_3_11_3_does(no_tar_filter, tmp_path):
    archive = tmp_path / "a.tar"
    with tarfile.open(archive, "w") as tf:
        tf.add(__file__, arcname="x.py")
    with tarfile.open(archive) as tf, pytest.raises(TypeError, match="unexpected keyword argument 'filter'"):
        tf.extractall(tmp_path / "out", filter="data")


def test_run_bundle_and_receipts_import_work_without_tar_filters(no_tar_filter, lane_repo, tmp_path, capsys):
    from harness.host.unpacked import OpenBundle, unpack

    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK, capsys.readouterr().err  # unpacks the sdist
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    out = tmp_path / "bundle.tar.xz"
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), *lane_repo.args()) == Exit.OK
    bundle_dir = unpack(out, tmp_path / "unpacked")
    OpenBundle.open(bundle_dir)
    device = tmp_path / "device-cache"  # the overlay builds come out of the bundle's site tars
    time.sleep(1.1)  # receipts are named to the second: the device's must not share a name with the local ones
    assert cli("run", "01", "--quiet", "--bundle-dir", str(bundle_dir), "--root", str(lane_repo.root),
               "--cache", str(device), "--receipts-dir", str(tmp_path / "device-receipts")) == Exit.OK
    archive = tmp_path / "receipts.tar"
    with tarfile.open(archive, "w") as tf:
        tf.add(tmp_path / "device-receipts" / "fake", arcname="fake")
    before = len(list((lane_repo.root / "receipts" / "fake" / "01").iterdir()))
    assert cli("receipts", "import", str(archive), *lane_repo.args()) == Exit.OK, capsys.readouterr().err
    assert len(list((lane_repo.root / "receipts" / "fake" / "01").iterdir())) == before + 2


def _hostile(tmp_path, kind: str):
    import io

    archive = tmp_path / f"{kind}.tar"
    with tarfile.open(archive, "w") as tf:
        def add(name, data=b"x", **attrs):
            info = tarfile.TarInfo(name)
            for k, v in attrs.items():
                setattr(info, k, v)
            info.size = len(data) if info.type == tarfile.REGTYPE else 0
            tf.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)

        if kind == "absolute":
            add(str(tmp_path / "escaped"))
        elif kind == "dotdot":
            add("top/../../escaped")
        elif kind == "symlink-out":
            add("top/link", type=tarfile.SYMTYPE, linkname="../../")
        elif kind == "through-symlink":
            add("top/link", type=tarfile.SYMTYPE, linkname=str(tmp_path))
            add("top/link/escaped")
        elif kind == "hardlink-out":
            add("top/hard", type=tarfile.LNKTYPE, linkname="../escaped")
        elif kind == "fifo":
            add("top/pipe", type=tarfile.FIFOTYPE)
    return archive


@pytest.mark.parametrize("filters", ["real", "stand-in"])
@pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink-out", "through-symlink", "hardlink-out", "fifo"])
def test_a_hostile_member_is_refused_with_or_without_tar_filters(request, tmp_path, kind, filters):
    from harness.base import tarsafe

    if filters == "stand-in":
        request.getfixturevalue("no_tar_filter")
    assert tarsafe.has_filter() == (filters == "real")
    dest = tmp_path / "dest"
    dest.mkdir()
    with tarfile.open(_hostile(tmp_path, kind)) as tf:
        if kind == "absolute":  # the leading slash is dropped: it lands inside
            tarsafe.extractall(tf, dest)
            assert (dest / str(tmp_path / "escaped").lstrip("/")).is_file()
        else:
            with pytest.raises(tarfile.TarError):
                tarsafe.extractall(tf, dest)
    assert not (tmp_path / "escaped").exists()
    assert not [p for p in dest.rglob("*") if p.is_fifo()]


@pytest.mark.parametrize("filters", ["real", "stand-in"])
def test_modes_are_made_safe_with_or_without_tar_filters(request, tmp_path, filters):
    import io

    from harness.base import tarsafe

    if filters == "stand-in":
        request.getfixturevalue("no_tar_filter")
    archive = tmp_path / "modes.tar"
    with tarfile.open(archive, "w") as tf:
        info = tarfile.TarInfo("top/tool")
        info.mode, info.size, info.uid, info.uname = 0o4777, 1, 4242, "someone"
        tf.addfile(info, io.BytesIO(b"x"))
        inside = tarfile.TarInfo("top/alias")
        inside.type, inside.linkname = tarfile.SYMTYPE, "tool"  # a link inside the tree is kept
        tf.addfile(inside)
    with tarfile.open(archive) as tf:
        tarsafe.extractall(tf, tmp_path / "dest")
    tool = tmp_path / "dest" / "top" / "tool"
    assert tool.stat().st_mode & 0o7777 == 0o755 and tool.stat().st_uid == os.getuid()
    assert (tmp_path / "dest" / "top" / "alias").resolve() == tool.resolve()


# --------------------------------------------------------------------------- smaller ones

def test_import_check_memo_files_get_the_umask_mode(lane_repo, capsys):
    old = os.umask(0o022)
    try:
        assert cli("prepare", "01", *lane_repo.args()) == Exit.OK, capsys.readouterr().err
    finally:
        os.umask(old)
    memos = list((lane_repo.cache / "builds").glob("*/import-checks/*.json"))
    assert memos and {m.stat().st_mode & 0o777 for m in memos} == {0o644}


def test_last_error_log_goes_to_the_given_cache(lane_repo, tmp_path, monkeypatch, capsys):
    from harness.commands import list as list_cmd

    default = tmp_path / "default-home"
    monkeypatch.setenv("PATCHLANE_HOME", str(default))
    monkeypatch.setattr(list_cmd, "main", lambda args: {}["no such key"])  # a real bug inside a command
    assert cli("list", *lane_repo.args()) == Exit.INTERNAL
    assert str(lane_repo.cache / "last-error.log") in capsys.readouterr().err
    assert "KeyError" in (lane_repo.cache / "last-error.log").read_text()
    assert not (default / "last-error.log").exists()


def test_run_help_states_the_exit_codes_it_uses(capsys):
    assert cli("run", "--help") == Exit.OK
    text = " ".join(capsys.readouterr().out.split())
    assert f"validates nothing (exit {int(Exit.NO_LANES)})" in text and f"(exit {int(Exit.SKIPPED)})" in text


@pytest.mark.parametrize("fault", ["duplicate-number", "directory", "symlink"])
def test_check_refuses_a_series_it_cannot_trust(lane_repo, tmp_path, capsys, fault):
    from conftest import CORE_FIXED, make_patch

    series_dir = lane_repo.root / "patches" / "fake" / "01"
    [first] = series_dir.glob("*.patch")
    if fault == "duplicate-number":
        lane_repo.write_patch(make_patch(tmp_path, CORE_FIXED, CORE_FIXED + "# more\n"), name="0001-more.patch")
        want = f"{series_dir / '0001-use-own-weight.patch'}: number 0001 is also 0001-more.patch"
    elif fault == "directory":
        (series_dir / "0004-x.patch").mkdir()
        want = f"{series_dir / '0004-x.patch'}: a directory named like a patch file"
    else:
        elsewhere = tmp_path / "elsewhere.patch"
        elsewhere.write_bytes(first.read_bytes())
        first.unlink()
        first.symlink_to(elsewhere)
        want = f"{first}: a symbolic link (to {elsewhere})"
    assert cli("check", *lane_repo.args()) == Exit.USAGE
    assert want in capsys.readouterr().err


def test_a_pack_removed_from_tracking_mid_run_is_named(lane_repo, capsys):
    path = lane_repo.root / "tracking.toml"
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    # the reproducer itself removes the pack while the run goes on (an operator's edit at that moment)
    repro.write_text(f"import pathlib\npathlib.Path({str(path)!r}).write_text('schema = 1\\n')\n" + repro.read_text())
    assert cli("run", "01", "--lane", "bug", "--quiet", *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert f"{path}: changed while this command ran; [packs.01] was removed from it" in err
    assert "does not exist" not in err and path.read_text() == "schema = 1\n"


def test_a_later_run_sweeps_what_a_sigkilled_run_left_in_tmp(lane_repo, tmp_path, monkeypatch, capsys):
    import signal
    import subprocess
    import sys
    import tempfile
    import time

    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    started = tmp_path / "started"
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    original = repro.read_text()
    repro.write_text(f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "01", "--lane", "bug", "--quiet",
                             *lane_repo.args()], cwd=REPO_ROOT, env=dict(os.environ, TMPDIR=str(tmp)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not started.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert started.exists()
    finally:
        proc.send_signal(signal.SIGKILL)  # no cleanup can run
        proc.wait(timeout=30)
    left = sorted(p.name for p in tmp.iterdir())
    assert any(n.startswith(f"patchlane-log-{proc.pid}-") for n in left), left
    assert any(n.startswith(f"patchlane-run-{proc.pid}-") for n in left), left
    live = tmp / f"patchlane-log-{os.getpid()}-live.log"  # a run still going (this process) is left alone
    live.write_text("")
    repro.write_text(original)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.delenv("HARNESS_RUN_DIR", raising=False)
    assert cli("run", "01", "--lane", "bug", "--quiet", *lane_repo.args()) == Exit.OK, capsys.readouterr().err
    assert sorted(p.name for p in tmp.iterdir()) == [live.name]


def test_a_reproducer_that_prints_without_end_gets_a_capped_log_that_says_so(lane_repo, monkeypatch, capsys):
    from harness.lane import runs
    from harness.lane.receipts import find

    monkeypatch.setattr(runs, "LOG_CAP", 64 << 10)
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    text = repro.read_text()
    # 8 MB of output between the host stamp (at the start) and the verdict (at the end)
    repro.write_text(text.replace('mode = os.environ.get("FAKE_MODE", "")',
                                  'mode = os.environ.get("FAKE_MODE", "")\n'
                                  'for i in range(100_000):\n'
                                  '    print("noise " * 12, i)\n'))
    assert cli("run", "01", "--lane", "bug", "--quiet", *lane_repo.args()) == Exit.OK, capsys.readouterr().err
    [rec] = find(lane_repo.root, "fake", "01")
    log = (rec.dir / "output.log").read_bytes()
    assert len(log) <= (64 << 10) + 200
    assert rec.log.omitted_bytes > 7_000_000 and rec.log.bytes == len(log)
    assert f"[harness: {rec.log.omitted_bytes} bytes of output left out here".encode() in log
    assert b"HOST_STAMP" in log[:4096] and rec.verdict == "pass"
    capsys.readouterr()
    assert cli("receipts", "verify", *lane_repo.args()) == Exit.OK, capsys.readouterr().out


@pytest.mark.parametrize("area", ["bases", "trees"])
def test_a_changed_base_or_patched_tree_is_made_again(lane_repo, capsys, area):
    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK, capsys.readouterr().err
    [entry] = [e for e in (lane_repo.cache / area / "fake").iterdir() if not e.name.startswith(".")]
    core = entry / "src" / "fakepkg" / "core.py"
    good = core.read_bytes()
    core.write_bytes(good[:20])
    (entry / "stray.py").write_text("x = 1\n")
    capsys.readouterr()
    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK
    assert f"{entry} is not" in capsys.readouterr().err
    assert core.read_bytes() == good and not (entry / "stray.py").exists()


def test_an_overlay_bundle_carries_no_bytecode_written_after_the_seal(lane_repo, tmp_path, capsys):
    assert cli("prepare", "01", *lane_repo.args()) == Exit.OK, capsys.readouterr().err
    for site in (lane_repo.cache / "builds").glob("*/site"):  # bytecode as an import writes it beside a module
        cache = site / "fakepkg" / "__pycache__"
        cache.mkdir(exist_ok=True)
        (cache / "core.cpython-312.pyc").write_bytes(b"not what the module says")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    out = tmp_path / "bundle.tar.xz"
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), *lane_repo.args()) == Exit.OK
    with tarfile.open(out) as tf:
        sites = [m for m in tf.getmembers() if m.name.endswith("site.tar")]
        assert sites
        for member in sites:
            with tarfile.open(fileobj=tf.extractfile(member)) as site:
                names = site.getnames()
                assert "site/fakepkg/core.py" in names and not [n for n in names if "__pycache__" in n]


def test_a_full_temporary_directory_is_exit_io_naming_the_log(lane_repo, tmp_path):
    import subprocess
    import sys

    tmpdir = tmp_path / "small-tmp"
    tmpdir.mkdir()
    if not _read_only_bind_works(tmpdir):
        pytest.skip("needs unshare -rm (user and mount namespaces) for a small tmpfs")
    assert cli("prepare", "01", *lane_repo.args()) == Exit.OK
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    repro.write_text(repro.read_text().replace('mode = os.environ.get("FAKE_MODE", "")',
                                               'mode = os.environ.get("FAKE_MODE", "")\n'
                                               'print("x" * 1_000_000)'))
    harness = " ".join([sys.executable, "-m", "harness", "run", "01", "--lane", "bug", "--quiet", *lane_repo.args()])
    script = f"mount -t tmpfs -o size=64k tmpfs {tmpdir} && exec {harness}"  # 64 KiB of room for a 1 MB log
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=REPO_ROOT, capture_output=True, text=True,
                          env=dict(os.environ, TMPDIR=str(tmpdir)), timeout=120)
    assert proc.returncode == Exit.IO, proc.stderr
    assert f"cannot write the reproducer's log: {tmpdir}/patchlane-log-" in proc.stderr
    assert "No space left on device" in proc.stderr
    assert not (lane_repo.root / "receipts").exists()


@pytest.fixture
def git_repo(lane_repo, tmp_path):
    """A fake upstream with a git mirror and a git base ``main`` (test_git_bases' fixture)."""
    from conftest import CORE_BUGGY
    from test_git_bases import _add_git_base, _upstream

    mirrors, sha = _upstream(tmp_path, CORE_BUGGY)
    _add_git_base(lane_repo, "main", sha)
    lane_repo.mirrors, lane_repo.main_sha = mirrors, sha
    return lane_repo


@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_relative_mirror_directory_is_found_from_where_the_command_ran(git_repo, monkeypatch, how):
    from harness.upstream import pins

    monkeypatch.chdir(git_repo.mirrors.parent)
    relative = git_repo.mirrors.name
    args = ["materialize", "fake", "--base", "main", *git_repo.args()]
    if how == "option":
        args += ["--git-mirrors", relative]
    else:
        monkeypatch.setenv(pins.MIRRORS_ENV, relative)
    assert cli(*args) == Exit.OK
