"""Faults injected for real, round 4 (issue 36): a symlink leaving the tree, control characters in an
identity, a regen SIGKILLed between its renames, a bundle under another Python, tracking.toml that lies,
a GitHub server that trickles or answers the wrong JSON type, a disk that fills up."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import test_export_policy as _policy
from conftest import CORE_BUGGY, REPO, cli, git
from test_export_policy import TESTER, _export

from harness.base import clock
from harness.errors import BuildError, Exit

filed, person = _policy.filed, _policy.person  # the export tests' fixtures: an upstream with a [policy], a HOME

# --------------------------------------------------------------------------- control characters in an identity


@pytest.mark.parametrize("who", ["Evil Name\nSigned-off-by: Mallory <m@example.org>", "Evil\rName <e@example.org>",
                                 "Evil\tName <e@example.org>", "Evil\x00Name <e@example.org>",
                                 "Evil\x1bName <e@example.org>", "Evil\x7fName <e@example.org>",
                                 "Evil Name <e@example.org>\n"])
def test_a_control_character_in_the_identity_option_is_refused_in_one_line(filed, tmp_path, capsys, who):
    out = tmp_path / "filed"
    assert _export(filed, out, "--identity", who) == Exit.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--identity: the identity" in err[0] and "control character" in err[0], err
    assert not out.exists()


@pytest.mark.parametrize("key, value", [
    ("name", r"Evil Name\nSigned-off-by: Mallory <m@example.org>"),
    ("name", r"Evil\tName"),
    ("email", r"e@example.org\nSigned-off-by: Mallory <m@example.org>"),
])
def test_a_control_character_in_the_git_config_identity_is_refused_in_one_line(filed, person, tmp_path, capsys,
                                                                                key, value):
    user = {"name": "Gita Config", "email": "gita@example.invalid", key: value}
    (person / ".gitconfig").write_text(f'[user]\n\tname = "{user["name"]}"\n\temail = "{user["email"]}"\n')
    out = tmp_path / "filed"
    assert _export(filed, out) == Exit.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"git config user.name/user.email: the {key}" in err[0], err
    assert "control character" in err[0] and not out.exists()


def test_a_carriage_return_in_the_git_config_is_refused_too(filed, person, tmp_path, capsys):
    (person / ".gitconfig").write_bytes(b'[user]\n\tname = "Evil\rName"\n\temail = e@example.org\n')
    out = tmp_path / "filed"
    assert _export(filed, out) == Exit.USAGE
    assert "holds a control character" in capsys.readouterr().err and not out.exists()  # read back as CR or LF


def test_a_plain_identity_still_signs_off_once(filed, tmp_path):
    out = tmp_path / "filed"
    assert _export(filed, out, "--identity", TESTER) == Exit.OK
    [patch] = out.glob("*.patch")
    assert patch.read_text().count("Signed-off-by:") == 1


# --------------------------------------------------------------------------- a symbolic link leaving the tree

TOKEN = "host-secret-7f3a9c-not-for-builds"


@pytest.fixture
def host_file(tmp_path):
    """A directory of the host (outside every tree) holding a token file a build must never read."""
    d = tmp_path / "host"
    d.mkdir()
    (d / "token.txt").write_text(TOKEN + "\n")
    (d / "__init__.py").write_text(f"TOKEN = {TOKEN!r}\n")
    return d


def _link_patch(workdir, links: dict[str, str]) -> str:
    """A format-patch adding ``links`` (path -> target) as symbolic links next to fakepkg's core."""
    repo = workdir / "linksrc"
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "src" / "fakepkg").mkdir(parents=True)
    (repo / "src" / "fakepkg" / "core.py").write_text(CORE_BUGGY)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    for path, target in links.items():
        os.symlink(target, repo / path)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "core: add a link\n\nUpstream-Status: Pending\nPack: 01\n")
    return git(repo, "format-patch", "-1", "--stdout", "--zero-commit", "--no-signature")


def _token_nowhere(*dirs) -> None:
    for d in dirs:
        if not d.exists():
            continue
        for f in d.rglob("*"):
            if f.is_file() and not f.is_symlink():
                assert TOKEN.encode() not in f.read_bytes(), f


@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_a_patch_making_a_link_out_of_the_tree_is_refused_and_ships_nothing(lane_repo, host_file, tmp_path, capsys,
                                                                            how):
    # relative: climbs above the top (any depth of checkout reaches / first), then down to the host directory
    target = str(host_file) if how == "absolute" else "../" * 40 + str(host_file).lstrip("/")
    patch = lane_repo.write_patch(_link_patch(tmp_path, {"src/fakepkg/hostdir": target}))
    assert cli("check", *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert f"{patch}:" in err and "src/fakepkg/hostdir a symbolic link" in err and "outside the tree" in err
    assert cli("run", "01", *lane_repo.args()) == Exit.USAGE
    out = tmp_path / "bundle.tar.xz"
    assert cli("bundle", "01", "-o", str(out), *lane_repo.args()) == Exit.USAGE
    assert not out.exists()
    _token_nowhere(lane_repo.cache)


def test_a_link_that_leaves_through_another_link_is_refused_once_applied(lane_repo, host_file, tmp_path, capsys):
    # lexically inside (src/fakepkg/../up/../..), but src/up -> .. makes it climb above the tree
    patch = _link_patch(tmp_path, {"src/up": "..", "src/fakepkg/hostdir": "../up/../.."})
    lane_repo.write_patch(patch)
    assert cli("check", *lane_repo.args()) == Exit.OK  # the header alone cannot tell
    capsys.readouterr()
    assert cli("check", "--apply", *lane_repo.args()) == Exit.APPLY
    assert "src/fakepkg/hostdir is a symbolic link to '../up/../..', outside the tree" in capsys.readouterr().err
    assert cli("run", "01", *lane_repo.args()) == Exit.APPLY
    out = tmp_path / "bundle.tar.xz"
    assert cli("bundle", "01", "-o", str(out), *lane_repo.args()) == Exit.APPLY
    assert not out.exists()
    _token_nowhere(lane_repo.cache)


def test_the_overlay_copy_never_follows_a_link_out_of_the_tree(lane_repo, host_file, tmp_path):
    from harness.base.store import Store
    from harness.lane import builds
    from harness.upstream import pins

    tree = tmp_path / "tree"
    (tree / "src" / "fakepkg").mkdir(parents=True)
    (tree / "src" / "fakepkg" / "__init__.py").write_text("")
    os.symlink(host_file, tree / "src" / "fakepkg" / "hostdir")
    git(tree, "init", "-q")
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "a base whose tree links out")
    manifest = pins.load_manifest(lane_repo.root, "fake")
    store = Store(tmp_path / "cache2")
    with pytest.raises(BuildError, match=r"src/fakepkg/hostdir is a symbolic link to .*outside the tree") as info:
        builds.build(tree, "k" * 64, manifest, store, "fake base")
    assert info.value.exit_code == Exit.BUILD
    _token_nowhere(tmp_path / "cache2")
    assert not [p for p in (tmp_path / "cache2").rglob("*") if p.name == "token.txt"]


# --------------------------------------------------------------------------- tracking.toml that lies


def _github_target(lane_repo) -> None:
    path = lane_repo.root / "upstream" / "fake.toml"
    path.write_text(path.read_text().replace('repo = "https://example.invalid/fake"',
                                             'repo = "https://github.com/Fake-Org/fakepkg"'))


def _thread(url: str, state: str = "open", role: str = "context") -> str:
    return f'\n[[packs.01.threads]]\nurl = "{url}"\nrole = "{role}"\nstate = "{state}"\n'


def _decision(ref: str, date: str) -> str:
    return (f'\n[[packs.01.related]]\nref = "{ref}"\nrelation = "independent"\nreason = "another file"\n'
            f'date = {date}\n')


def _refused(lane_repo, capsys) -> str:
    """Every command that loads tracking.toml refuses it (check and list shown): the one line it prints."""
    assert cli("check", *lane_repo.args()) == Exit.USAGE
    assert cli("list", *lane_repo.args()) == Exit.USAGE
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("harness: error:")]
    assert len(err) == 2 and err[0] == err[1], err
    return err[0]


def _line_of(lane_repo, text: str, nth: int = 0) -> int:
    lines = (lane_repo.root / "tracking.toml").read_text().splitlines()
    return [no for no, ln in enumerate(lines, 1) if text in ln][nth]


def test_a_decision_dated_after_today_is_refused(lane_repo, capsys):
    import datetime

    later = (clock.today() + datetime.timedelta(days=2)).isoformat()
    lane_repo.write_tracking(extra=_decision("fake-org/fakepkg#7", later))
    err = _refused(lane_repo, capsys)
    line = _line_of(lane_repo, 'ref = "fake-org/fakepkg#7"')
    assert f"tracking.toml:{line} [packs.01] related[0] (fake-org/fakepkg#7): key 'date' is {later}, after today" in err
    lane_repo.write_tracking(extra=_decision("fake-org/fakepkg#7", clock.today().isoformat()))
    assert cli("check", *lane_repo.args()) == Exit.OK


@pytest.mark.parametrize("at", ['"e9594ce"', '"E9594CE1C732D97440F0332FDC43170A2294DBFA"', "7"])
def test_a_decision_compared_at_anything_but_a_full_sha_is_refused(lane_repo, capsys, at):
    """The commit a candidate was compared with (#54) is a full sha: a short one names nothing for certain."""
    today = clock.today().isoformat()
    lane_repo.write_tracking(extra=_decision("fake-org/fakepkg#7", today) + f"at = {at}\n")
    assert "key 'at' is" in _refused(lane_repo, capsys)
    lane_repo.write_tracking(extra=_decision("fake-org/fakepkg#7", today) + f'at = "{"e9594ce1" * 5}"\n')
    assert cli("check", *lane_repo.args()) == Exit.OK


def test_a_decision_dated_2099_is_refused(lane_repo, capsys):
    lane_repo.write_tracking(extra=_decision("fake-org/fakepkg#7", "2099-01-01"))
    assert "key 'date' is 2099-01-01, after today" in _refused(lane_repo, capsys)


def test_one_candidate_decided_twice_in_another_case_is_refused(lane_repo, capsys):
    lane_repo.write_tracking(extra=_decision("NVIDIA/Megatron-LM#123", "2026-01-02")
                             + _decision("nvidia/megatron-lm#123", "2026-01-03"))
    err = _refused(lane_repo, capsys)
    line = _line_of(lane_repo, 'ref = "nvidia/megatron-lm#123"')
    assert f"tracking.toml:{line} [packs.01] related[1]: nvidia/megatron-lm#123 is decided twice" in err


@pytest.mark.parametrize("first, second, how", [
    (_thread("https://github.com/NVIDIA/Megatron-LM/pull/123"), _thread("https://github.com/nvidia/megatron-lm/pull/123"),
     "listed twice"),
    (_thread("https://github.com/fake-org/fakepkg/pull/5", "open"),
     _thread("https://github.com/fake-org/fakepkg/issues/5", "merged"),
     "listed with contradictory states ('open' there, 'merged' here)"),
])
def test_one_thread_listed_twice_is_refused(lane_repo, capsys, first, second, how):
    lane_repo.write_tracking(extra=first + second)
    err = _refused(lane_repo, capsys)
    url = second.split('url = "')[1].split('"')[0]
    assert f"tracking.toml:{_line_of(lane_repo, url)} [packs.01] threads[1]: {url} is threads[0]" in err
    assert how in err


def test_a_filing_target_in_another_repository_is_refused(lane_repo, capsys):
    _github_target(lane_repo)
    lane_repo.write_tracking(extra=_thread("https://github.com/other-org/fakepkg/pull/9", role="filing target"))
    err = _refused(lane_repo, capsys)
    line = _line_of(lane_repo, "other-org/fakepkg/pull/9")
    assert f"tracking.toml:{line} [packs.01] threads[0]: the filing target " \
           "https://github.com/other-org/fakepkg/pull/9 is not in the pack's target repository " \
           "(https://github.com/Fake-Org/fakepkg, fake.toml)" in err
    lane_repo.write_tracking(extra=_thread("https://github.com/fake-org/FAKEPKG/pull/9", role="filing target"))
    assert cli("check", *lane_repo.args()) == Exit.OK  # the same repository, in GitHub's own case-blindness


@pytest.mark.parametrize(("url", "said"), [
    ("https://github.com:443/fake-org/fakepkg/pull/9", "with a port (github.com:443)"),
    ("https://github.com./fake-org/fakepkg/pull/9", "with a trailing dot (github.com.)"),
    ("https://someone@github.com/fake-org/fakepkg/pull/9", "with user info"),
])
def test_a_thread_url_spelling_github_another_way_is_refused(lane_repo, capsys, url, said):
    """#55: a port or a trailing dot made one thread two entries, past the duplicate and filing-target checks."""
    lane_repo.write_tracking(extra=_thread(url))
    err = _refused(lane_repo, capsys)
    assert f"tracking.toml:{_line_of(lane_repo, url)} [packs.01] threads[0]: {url} names GitHub's host {said}" in err


def test_the_committed_tracking_toml_still_loads():
    from harness.lane.tracking import Tracking

    assert len(Tracking.load(Path(__file__).resolve().parent.parent).packs) >= 17


# --------------------------------------------------------------------------- a GitHub server that misbehaves


class _Server:
    """A one-route HTTP server on 127.0.0.1: ``answer(handler)`` writes the whole response itself."""

    def __init__(self, answer):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                try:
                    answer(self)
                except OSError:  # the client gave up and closed: stop
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False  # a trickling handler ends by itself, later
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve():
    made = []

    def start(answer):
        made.append(_Server(answer))
        return made[-1].url

    yield start
    for s in made:
        s.close()


def _json_answer(body: bytes):
    def answer(h):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
    return answer


def _trickle(h, gap: float = 2.0, most: int = 30) -> None:
    """One byte every ``gap`` seconds, ``most`` bytes at most (then it stops by itself)."""
    import time

    h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    h.wfile.flush()
    for _ in range(most):
        h.wfile.write(b" ")
        h.wfile.flush()
        time.sleep(gap)


def _trickle_headers(h) -> None:
    import time

    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 30:  # never reaches the end of the headers
        h.wfile.write(bytes([byte]))
        h.wfile.flush()
        time.sleep(0.5 if byte != ord("a") else 2.0)


def _related(lane_repo, url: str, *extra: str) -> int:
    return cli("related", "01", "--api-url", url, *extra, *lane_repo.args())


@pytest.mark.parametrize("answer", [_trickle, _trickle_headers], ids=["body", "headers"])
def test_a_server_that_trickles_hits_the_whole_request_timeout(lane_repo, serve, capsys, answer):
    import time

    url = serve(answer)
    began = time.monotonic()
    assert _related(lane_repo, url, "--timeout", "3") == Exit.UPSTREAM
    took = time.monotonic() - began
    assert took < 10, took  # the per-read limit alone never fires: one byte every 2 s runs for minutes
    err = capsys.readouterr().err
    assert "no whole answer within --timeout 3 s" in err and "Traceback" not in err


@pytest.mark.parametrize("body, said", [(b"[]", "JSON list, not the object"), (b"null", "JSON null, not the object"),
                                        (b'"a string"', "JSON str, not the object"), (b"{", "is not JSON")])
def test_json_of_the_wrong_type_is_a_clean_artefact_error(lane_repo, serve, capsys, body, said):
    url = serve(_json_answer(body))
    assert _related(lane_repo, url) == Exit.PIN
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{url}/rate_limit: answer is" in err[0] and said in err[0], err


def test_a_wrong_type_deeper_down_is_refused_too(monkeypatch):
    from harness.upstream import github

    client = github.GitHub("http://127.0.0.1:9")

    class Resp:
        status_code, headers = 200, {}

        def __init__(self, body):
            self.body = body

        def iter_content(self, n):
            yield self.body

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    monkeypatch.setattr(client._session, "get", lambda url, **kw: Resp(b"{}"))
    with pytest.raises(github.BadAnswer, match="JSON dict, not the array"):
        client.get("/repos/o/r/issues/1/comments?per_page=100")
    monkeypatch.setattr(client._session, "get", lambda url, **kw: Resp(b"[]"))
    assert client.get("/repos/o/r/commits?path=x") == []


def test_a_body_past_the_cap_is_refused_without_reading_it_all(lane_repo, serve, capsys, monkeypatch):
    from harness.upstream import github

    monkeypatch.setattr(github, "MAX_BODY", 1 << 20)
    sent = []

    def huge(h):  # no Content-Length: only reading tells the size
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.end_headers()
        h.wfile.write(b'{"x": "')
        for _ in range(64):  # 64 MiB if read whole
            h.wfile.write(b"a" * (1 << 20))
            sent.append(1)

    url = serve(huge)
    assert _related(lane_repo, url) == Exit.PIN
    err = capsys.readouterr().err
    assert "answer longer than the 1048576 bytes an answer may have" in err and "Traceback" not in err
    assert len(sent) < 64  # the client stopped reading and closed

    announced = serve(lambda h: (h.send_response(200), h.send_header("Content-Length", str(50 << 20)),
                                 h.end_headers()))
    assert _related(lane_repo, announced) == Exit.PIN
    assert "answer of 52428800 bytes, more than the 1048576" in capsys.readouterr().err


def test_related_never_answers_from_the_record_when_github_times_out(lane_repo, serve, capsys, monkeypatch):
    monkeypatch.delenv("PATCHLANE_GITHUB_RECORDED", raising=False)
    (lane_repo.root / "upstream" / "github" / "search" / "issues").mkdir(parents=True)
    url = serve(_trickle)
    assert _related(lane_repo, url, "--timeout", "2", "--json") == Exit.UPSTREAM
    out = capsys.readouterr()
    assert out.out == ""  # no answer at all, rather than test data passed off as GitHub's
    assert "not answering from the recorded answers in" in out.err and "--offline" in out.err


# --------------------------------------------------------------------------- a bundle under another Python

PYENV = Path("/root/.pyenv/versions")


def _interpreter(minor: int) -> Path | None:
    found = sorted(PYENV.glob(f"3.{minor}.*/bin/python3.{minor}")) if PYENV.is_dir() else []
    return found[-1] if found else None


def _fake_bundle(tmp_path, python: str, wheel: str, kind: str = "overlay") -> Path:
    """A bundle for ``python`` holding one harness wheel named ``wheel`` (a real, empty wheel) and a build."""
    import hashlib
    import io
    import json
    import tarfile
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("tinydep/__init__.py", "")
        zf.writestr("tinydep-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinydep\nVersion: 1.0\n")
        zf.writestr("tinydep-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr("tinydep-1.0.dist-info/RECORD", "")
    files = {f"wheels/{wheel}": buf.getvalue(), "builds/site.tar": b"x" * 512}
    index = {"python": python, "packs": ["01"], "harness_wheels": [f"wheels/{wheel}"],
             "wheels": [{"file": f"wheels/{wheel}", "sha256": hashlib.sha256(files[f"wheels/{wheel}"]).hexdigest()}],
             "builds": {"k": {"kind": kind, "lanes": ["fix"], "file": "builds/site.tar",
                              "sha256": hashlib.sha256(files["builds/site.tar"]).hexdigest()}}}
    files["bundle.json"] = json.dumps(index).encode()
    out = tmp_path / f"bundle-{python}-{kind}.tar.xz"
    with tarfile.open(out, "w:xz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(f"patchlane-bundle/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return out


def _boot(python, archive, tmp_path, *args: str):
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XDG_CACHE_HOME")}
    env["PATCHLANE_HOME"] = str(tmp_path / "home")
    return subprocess.run([str(python), "-m", "harness.bootstrap", str(archive), "--", *args], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=300)


@pytest.mark.parametrize("minor", [11, 13])
def test_a_bundle_for_3_12_under_another_python_is_exit_pin_naming_both(tmp_path, minor):
    python = _interpreter(minor)
    if python is None:
        pytest.skip(f"no Python 3.{minor} under {PYENV} to bootstrap with")
    archive = _fake_bundle(tmp_path, "3.12", "charset_normalizer-3.4.0-cp312-cp312-manylinux_2_17_x86_64.whl")
    proc = _boot(python, archive, tmp_path, "list")
    assert proc.returncode == Exit.PIN, proc.stderr
    err = proc.stderr.strip().splitlines()
    assert err[-1].startswith("harness.bootstrap: error: the bundle was made for Python 3.12, but this is "
                              f"Python 3.{minor}"), err
    assert "charset_normalizer-3.4.0-cp312" in err[-1] and "Traceback" not in proc.stderr
    assert "not a supported wheel" not in proc.stderr and not list((tmp_path / "home").rglob("site-*"))


def test_a_wheel_build_ties_the_bundle_to_its_python_too(tmp_path):
    from harness import bootstrap

    index = {"python": "3.12", "wheels": [], "builds": {"k": {"kind": "wheel", "file": "builds/liger.whl"}}}
    assert "made for Python 3.12, but this is Python 3.13" in bootstrap.python_mismatch(index, (3, 13))
    assert bootstrap.python_mismatch(index, (3, 12)) is None
    index["builds"]["k"]["kind"] = "overlay"  # an overlay and pure wheels run on any Python
    index["wheels"] = [{"file": "wheels/rich-13.9.4-py3-none-any.whl"}, {"file": "wheels/x-1-cp38-abi3-any.whl"}]
    assert bootstrap.python_mismatch(index, (3, 11)) is None
    index["wheels"].append({"file": "wheels/y-1-cp312-cp312-linux_x86_64.whl"})
    assert "y-1-cp312-cp312-linux_x86_64.whl cannot run here" in bootstrap.python_mismatch(index, (3, 11))


def test_the_bundles_own_python_gets_past_the_check(tmp_path):
    python = _interpreter(12)
    if python is None:
        pytest.skip(f"no Python 3.12 under {PYENV}")
    archive = _fake_bundle(tmp_path, "3.12", "tinydep-1.0-cp312-cp312-manylinux_2_17_x86_64.whl")
    proc = _boot(python, archive, tmp_path, "--version")
    assert "made for Python" not in proc.stderr
    assert "installing 1 wheel(s) offline" in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- regen SIGKILLed between its renames

# The child dies by a real SIGKILL at the second rename of the swap (the new series into place), after the first
# (the old series to its backup) went through: the state the issue found.
_KILLED_BETWEEN_RENAMES = (
    "import os, signal, sys\n"
    "real = os.replace\n"
    "def replace(src, dst, **kw):\n"
    "    if os.path.basename(str(src)).startswith('.regen-'):\n"
    "        os.kill(os.getpid(), signal.SIGKILL)\n"
    "    return real(src, dst, **kw)\n"
    "os.replace = replace\n"
    "from harness.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n")


def _killed_between_renames(lane_repo, tmp_path, capsys):
    import subprocess
    import sys

    from test_reliability_faults import _amended_checkout

    edit = _amended_checkout(lane_repo, tmp_path, capsys)
    proc = subprocess.run([sys.executable, "-c", _KILLED_BETWEEN_RENAMES, "regen", "01", "--dir", str(edit),
                           *lane_repo.args()], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    patches = lane_repo.root / "patches" / "fake"
    left = sorted(p.name for p in patches.iterdir())
    assert "01" not in left and [n for n in left if n.startswith(".01.bak-")], left  # the series is gone
    assert [n for n in left if n.startswith(".regen-01-")], left  # and the new one is stranded in scratch
    capsys.readouterr()
    return edit, patches


def test_check_fails_on_a_pack_whose_series_a_killed_regen_left_as_a_backup(lane_repo, tmp_path, capsys):
    _, patches = _killed_between_renames(lane_repo, tmp_path, capsys)
    [backup] = patches.glob(".01.bak-*")
    assert cli("check", *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert f"{patches / '01'}: missing; a regen killed while it swapped the series left the previous one in " \
           f"{backup}" in err and "harness regen 01" in err
    assert cli("run", "01", *lane_repo.args()) == Exit.USAGE  # never run as a pack with no patches


def test_a_killed_regen_of_a_pack_with_its_own_file_is_never_read_as_no_lanes(lane_repo, tmp_path, capsys):
    """#55: with pack.toml beside the series, a regen killed between its renames took the pack's lanes with the
    series: run said "no lanes" and receipts sync wrote that into tracking.toml."""
    assert cli("migrate", *lane_repo.args()) == Exit.OK
    edit, patches = _killed_between_renames(lane_repo, tmp_path, capsys)
    [backup] = patches.glob(".01.bak-*")
    assert (backup / "pack.toml").is_file()
    tracking = (lane_repo.root / "tracking.toml").read_text()
    for argv in (("run", "01"), ("receipts", "sync"), ("status", "01")):
        assert cli(*argv, *lane_repo.args()) == Exit.USAGE, argv
        err = " ".join(capsys.readouterr().err.split())
        assert f"patches/fake/01: missing; a regen killed while it swapped the series left the previous one, " \
               f"pack.toml included, in {backup.name}" in err and "harness regen 01" in err
    assert (lane_repo.root / "tracking.toml").read_text() == tracking
    assert cli("regen", "01", "--dir", str(edit), *lane_repo.args()) == Exit.OK, capsys.readouterr().err
    assert "put back" in capsys.readouterr().err
    assert cli("check", *lane_repo.args()) == Exit.OK
    assert (patches / "01" / "pack.toml").is_file()


def test_the_next_regen_puts_the_series_back_sweeps_its_scratch_and_finishes(lane_repo, tmp_path, capsys):
    from test_reliability_faults import _settled

    edit, patches = _killed_between_renames(lane_repo, tmp_path, capsys)
    assert cli("regen", "01", "--dir", str(edit), *lane_repo.args()) == Exit.OK, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "put back" in err and "was killed between its two renames" in err
    assert "removed" in err and ".regen-01-" in err
    _settled(lane_repo, edit, capsys)  # the edit is in the series; no backup, no scratch; regen and edit agree
    assert cli("check", *lane_repo.args()) == Exit.OK


def test_check_fails_on_a_patched_pack_with_no_series_at_all(lane_repo, capsys):
    shutil.rmtree(lane_repo.root / "patches" / "fake" / "01")
    assert cli("check", *lane_repo.args()) == Exit.USAGE
    assert "pack 01: lane(s) fix run the patched build, but" in capsys.readouterr().err


def test_a_live_regens_scratch_is_never_swept(lane_repo, tmp_path):
    from harness.lane import series_write

    parent = lane_repo.root / "patches" / "fake"
    mine = parent / f".regen-01-{os.getpid()}-abc"
    dead = parent / ".regen-01-999999999-abc"
    old = parent / ".regen-01-xyz"  # named before pids were
    for d in (mine, dead, old):
        d.mkdir()
    assert series_write.sweep_regen_scratch(parent, "01") == [dead, old]
    assert mine.is_dir()


# --------------------------------------------------------------------------- a disk that fills up


@pytest.fixture
def small_fs(tmp_path):
    """Mount a small tmpfs at a directory (``mount(dir, size)``), unmounted at the end; skips where mounting is
    not permitted (not root, or no CAP_SYS_ADMIN in this container)."""
    import subprocess

    mounted = []

    def mount(directory, size: str = "1m"):
        directory.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here to fill up ({done.stderr.strip() or done.returncode})")
        mounted.append(directory)
        return directory

    yield mount
    for d in reversed(mounted):
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def _fill(directory, leave: int = 0) -> None:
    """Fill the filesystem of ``directory`` until ``leave`` bytes are free (rounded to its blocks)."""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    with open(directory / ".filler", "wb") as fh:
        fh.write(b"\0" * max(free - leave, 0))
    if leave == 0:  # what block rounding left
        try:
            with open(directory / ".filler2", "wb") as fh:
                while True:
                    fh.write(b"\0" * 512)
                    fh.flush()
        except OSError:
            pass


def _used(directory) -> int:
    st = os.statvfs(directory)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def _clean(directory) -> list[str]:
    """What is in ``directory`` besides the fillers: scratch, partial or half-made entries would show here."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if not p.name.startswith(".filler"))


def test_a_full_disk_copying_the_sdist_into_the_cache_is_exit_io(lane_repo, small_fs, tmp_path, capsys):
    downloads = small_fs(lane_repo.cache / "downloads")
    _fill(downloads)
    assert cli("prepare", "01", "--artifacts", str(lane_repo.sdist.parent), *lane_repo.args()) == Exit.IO
    err = capsys.readouterr().err
    assert "cannot write" in err and "No space left on device" in err and "Traceback" not in err
    assert not [p for p in _clean(downloads) if p.endswith((".partial", ".tar.gz"))]


def test_a_full_disk_unpacking_the_sdist_is_exit_io(lane_repo, small_fs, capsys):
    bases = small_fs(lane_repo.cache / "bases")
    _fill(bases)
    assert cli("prepare", "01", *lane_repo.args()) == Exit.IO
    err = capsys.readouterr().err
    assert "No space left on device" in err and "nothing was kept" in err and "Traceback" not in err
    assert not [p for p in _clean(bases) if ".tmp-" in p or "1.0-" in p]  # no scratch, no half-made base


def test_a_full_disk_in_the_clone_to_build_from_is_exit_io(lane_repo, small_fs, capsys):
    assert cli("prepare", "01", "--lane", "bug", *lane_repo.args()) == Exit.OK  # the base, on a roomy disk
    builds = small_fs(lane_repo.cache / "builds.full")
    os.rename(lane_repo.cache / "builds", lane_repo.cache / "builds.old")
    os.symlink(builds, lane_repo.cache / "builds")  # the builds area now lives on the small filesystem
    _fill(builds)
    capsys.readouterr()
    assert cli("prepare", "01", *lane_repo.args()) == Exit.IO
    err = capsys.readouterr().err
    assert "the copy of" in err and "to build from" in err and "No space left on device" in err
    assert not [p for p in _clean(builds) if not p.startswith(".lock")]  # nothing half-made


def test_a_full_disk_in_the_overlay_copy_is_exit_io_with_nothing_kept(lane_repo, small_fs, tmp_path):
    from harness.base.store import Store
    from harness.errors import WriteError
    from harness.lane import builds
    from harness.upstream import git, pins

    tree = tmp_path / "tree"
    (tree / "src" / "fakepkg").mkdir(parents=True)
    (tree / "src" / "fakepkg" / "__init__.py").write_text("")
    (tree / "src" / "fakepkg" / "blob.bin").write_bytes(os.urandom(384 * 1024))  # incompressible
    git_ = __import__("conftest").git
    git_(tree, "init", "-q")
    git_(tree, "add", "-A")
    git_(tree, "commit", "-q", "-m", "a package bigger than the space left for its copy")
    store = Store(tmp_path / "cache")
    area = small_fs(store.root / "builds", "4m")
    probe = area / "probe"
    before = _used(area)
    git.clone(tree, probe, branch="build")  # what the clone to build from takes on this filesystem
    clone = _used(area) - before
    shutil.rmtree(probe)
    _fill(area, leave=clone + 96 * 1024)  # room for the clone, not for the package's copy
    manifest = pins.load_manifest(lane_repo.root, "fake")
    with pytest.raises(WriteError, match=r"cannot write build fake base into .*: No space left on device; "
                                         "nothing was written") as info:
        builds.build(tree, "k" * 64, manifest, store, "fake base")
    assert info.value.exit_code == Exit.IO
    assert _clean(area) == []  # no scratch entry, no half-copied site


def test_a_full_disk_saving_tracking_toml_is_exit_io_and_keeps_the_file(lane_repo, small_fs, tmp_path):
    from harness.errors import WriteError
    from harness.lane.tracking import Tracking

    root = small_fs(tmp_path / "small-root", "1m")
    shutil.copytree(lane_repo.root, root, dirs_exist_ok=True)
    before = (root / "tracking.toml").read_bytes()
    t = Tracking.load(root)
    t.record_verdicts({"01": "2 lane(s): 2 pass"})
    _fill(root)
    with pytest.raises(WriteError, match="cannot write tracking.toml: .*No space left on device") as info:
        t.save()
    assert info.value.exit_code == Exit.IO
    assert (root / "tracking.toml").read_bytes() == before
    assert not [p for p in _clean(root) if p.startswith(".tracking-")]


# --------------------------------------------------------------------------- smaller ones


CFGERR = (  # pylint's line for a plugin it cannot load: it names the file, at a line the series never touches
    "import sys\n"
    "for path in sys.argv[1:]:\n"
    "    print(f\"{path}:1:0: E0013: Plugin 'nope' is impossible to load, is it installed ? \"\n"
    "          \"('No module named nope') (bad-plugin-value)\")\n"
    "sys.exit(2)\n")


def _fakecfg_wheel(dest) -> None:
    import base64
    import hashlib
    import zipfile

    files = {"fakecfg/__init__.py": "", "fakecfg/__main__.py": CFGERR,
             "fakecfg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: fakecfg\nVersion: 1.0\n",
             "fakecfg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                                            "Tag: py3-none-any\n"}
    record = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(t.encode())}" for n, t in files.items()] + ["fakecfg-1.0.dist-info/RECORD,,"]
    with zipfile.ZipFile(dest / "fakecfg-1.0-py3-none-any.whl", "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr("fakecfg-1.0.dist-info/RECORD", "\n".join(record) + "\n")


def test_a_linter_failing_on_its_own_configuration_is_a_failure_not_zero_findings(filed, tmp_path, capsys):
    from test_export_policy import _check, _policy, _set_policy

    _fakecfg_wheel(filed.wheels)
    _set_policy(filed, _policy(checks=_check("pylint", "fakecfg", "lint").replace("fakelint==1.0", "fakecfg==1.0")))
    out = tmp_path / "filed"
    assert _export(filed, out, "--identity", TESTER, "--report-only") == Exit.LINT
    err = capsys.readouterr().err
    assert "pylint (fakecfg==1.0) failed on its own configuration (exit 2)" in err and "E0013" in err
    assert not out.exists()


# A build backend's child that leaves the process group (setsid) and loses its parent (a double fork): only the
# guard, which adopts orphans, still knows it.
_SETSID_SPAWN = (
    "import os, subprocess, sys, time\n"
    "pidfile = sys.argv[1]\n"
    "code = ('import os, sys, time\\n'\n"
    "        'if os.fork(): os._exit(0)\\n'  # the middle process exits: the grandchild is an orphan\n"
    "        'os.setsid()\\n'\n"
    "        'open(sys.argv[1] + \".tmp\", \"w\").write(str(os.getpid()))\\n'\n"
    "        'os.rename(sys.argv[1] + \".tmp\", sys.argv[1])\\n'\n"
    "        'time.sleep(120)\\n')\n"
    "subprocess.Popen([sys.executable, '-c', code, pidfile]).wait()\n"
    "time.sleep(120)\n")


def _escaped_pid(pidfile, within: float = 20.0) -> int:
    import time

    end = time.monotonic() + within
    while not pidfile.exists():
        assert time.monotonic() < end, "the setsid child never started"
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    assert os.getsid(pid) == pid  # it left the guard's session and group
    return pid


def _gone(pid: int, within: float = 10.0) -> bool:
    import time

    from conftest import alive

    end = time.monotonic() + within
    while alive(pid):
        if time.monotonic() > end:
            os.kill(pid, 9)  # do not leak it past the test
            return False
        time.sleep(0.05)
    return True


def test_a_setsid_child_dies_with_the_guarded_command_at_its_time_limit(tmp_path):
    import subprocess
    import sys

    from harness.base import guard

    pidfile = tmp_path / "escaped.pid"
    with pytest.raises(subprocess.TimeoutExpired):
        guard.run([sys.executable, "-c", _SETSID_SPAWN, str(pidfile)], timeout=3)  # what SIGTERM's cleanup runs too
    assert _gone(_escaped_pid(pidfile, within=1))


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_setsid_child_dies_when_the_harness_is_terminated_or_killed(tmp_path, sig):
    import signal
    import subprocess
    import sys

    pidfile = tmp_path / "escaped.pid"
    # SIGTERM: the harness's own handler turns it into an exception and kill_group runs; SIGKILL: no code of
    # the harness runs, the guard's lifeline closes and the guard kills what it started
    harness = ("import sys\nfrom harness.base import guard\nfrom harness.commands import error_handler\n"
               "with error_handler.handled():\n"
               f"    guard.run([sys.executable, '-c', {_SETSID_SPAWN!r}, {str(pidfile)!r}])\n")
    proc = subprocess.Popen([sys.executable, "-c", harness], cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        pid = _escaped_pid(pidfile)
    finally:
        proc.send_signal(getattr(signal, sig))
        code = proc.wait(timeout=30)
    assert code == (Exit.TERMINATED if sig == "SIGTERM" else -9), proc.stderr.read()
    assert _gone(pid)


def test_a_sigkilled_sweeps_scratch_is_swept_by_the_next_not_a_live_ones(tmp_path, monkeypatch):
    import subprocess
    import sys

    from harness.host import sweep

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"{sweep.SCRATCH_PREFIX}{int(dead.stdout)}-abc"
    live = tmp_path / f"{sweep.SCRATCH_PREFIX}{os.getppid()}-def"  # a process that exists
    for d in (stale, live):
        (d / "lane").mkdir(parents=True)
    from harness.lane.lanes import sweep_stale_temp

    assert sweep_stale_temp(tmp_path, (sweep.SCRATCH_PREFIX,)) == [stale]
    assert live.is_dir() and not stale.exists()


def test_the_next_sweep_removes_what_a_sigkilled_sweep_left(lane_repo, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), FAKE_MODE="hang")
    proc = subprocess.Popen([sys.executable, "-m", "harness", "sweep", *lane_repo.args()], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp.glob(f"patchlane-sweep-{proc.pid}-*")) or not list(tmp.glob("patchlane-log-*")):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    [left] = tmp.glob(f"patchlane-sweep-{proc.pid}-*")  # what a sweep killed outright leaves
    env.pop("FAKE_MODE")
    again = subprocess.run([sys.executable, "-m", "harness", "sweep", *lane_repo.args()], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == Exit.OK, again.stderr
    assert f"removed {left}, left by a sweep that was killed" in again.stderr
    assert not left.exists()
