"""Faults injected for real, round 5 (issue 45, items 9-20, 22, 23): an export that would delete a directory
it never wrote, a new pack outside the repository, a link chain in a bundle, a hostile or truncated bundle at
the bootstrap, an identity that other tools split into two lines, paths that are not regular files, a full
disk, a read-only checkout, a lost suite selection, concurrent selection writers, a killed suite lane's
scratch, a large comparison as JSON, one pull request written two ways, absurd pack ids."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import io
import json
import os
import shlex
import shutil
import signal
import socket as socketlib
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest
import test_export_policy as _policy
from conftest import REPO, cli
from test_export_policy import TESTER, _export
from test_reliability_round4 import _github_target, _refused, _thread
from test_suite import SUITE, suite_repo  # noqa: F401  (the fixture: a fake upstream with a tests/ tree)
from test_upstream_tests import upstream_repo  # noqa: F401

from harness.base import tarsafe
from harness.errors import Exit
from harness.host.unpacked import unpack
from harness.lane import lanes, suite, suite_check

TOKEN_TEXT = "host-secret-0c1d-not-for-the-tool\n"
filed, person = _policy.filed, _policy.person  # the export tests' fixtures: an upstream with a [policy], a HOME

# --------------------------------------------------------------------------- 9. export -o replaces only its own


def test_export_refuses_to_replace_a_directory_it_did_not_write(filed, tmp_path, capsys):
    mine = tmp_path / "important"
    mine.mkdir()
    (mine / "notes.txt").write_text("years of work\n")
    assert _export(filed, mine, "--identity", TESTER) == Exit.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("harness: error: -o ") and str(mine) in err[0], err
    assert (mine / "notes.txt").read_text() == "years of work\n" and sorted(p.name for p in mine.iterdir()) == [
        "notes.txt"]


def test_export_refuses_to_replace_a_file(filed, tmp_path, capsys):
    mine = tmp_path / "important"
    mine.write_text("keep me\n")
    assert _export(filed, mine, "--identity", TESTER) == Exit.USAGE
    assert str(mine) in capsys.readouterr().err and mine.read_text() == "keep me\n"


def test_export_refuses_the_series_directory_itself(filed, capsys):
    patches = filed.root / "patches" / "fake" / "01"
    before = sorted(p.name for p in patches.iterdir())
    assert before and _export(filed, patches, "--identity", TESTER) == Exit.USAGE
    assert sorted(p.name for p in patches.iterdir()) == before


def test_export_replaces_what_an_earlier_export_wrote_and_an_empty_directory(filed, tmp_path):
    out = tmp_path / "filed"
    out.mkdir()
    assert _export(filed, out, "--identity", TESTER) == Exit.OK
    first = sorted(p.name for p in out.glob("*.patch"))
    (out / "0009-stale.patch").write_text("stale\n")  # a file an earlier export could have left
    assert _export(filed, out, "--identity", TESTER) == Exit.OK
    assert sorted(p.name for p in out.glob("*.patch")) == first


# --------------------------------------------------------------------------- 13. an identity other tools split


@pytest.mark.parametrize("char", ["\x85", "\u2028", "\u2029", "\u202e", "\u2066", "\u200f", "\x9b", "\ufeff"])
def test_an_identity_with_a_unicode_line_separator_or_bidi_control_is_refused(filed, tmp_path, capsys, char):
    out = tmp_path / "filed"
    who = f"Evil Name{char}Signed-off-by: Mallory <m@example.org> <e@example.org>"
    assert _export(filed, out, "--identity", who) == Exit.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert "--identity: the identity" in err[0] and ascii(char) in err[0], err
    assert not out.exists()


def test_a_unicode_line_separator_in_the_git_config_name_is_refused(filed, person, tmp_path, capsys):
    (person / ".gitconfig").write_text('[user]\n\tname = "Evil\u2028Signed-off-by: M <m@example.org>"\n'
                                       '\temail = e@example.org\n', encoding="utf-8")
    out = tmp_path / "filed"
    assert _export(filed, out) == Exit.USAGE
    assert "git config user.name/user.email: the name" in capsys.readouterr().err and not out.exists()


def test_a_name_with_plain_accents_and_scripts_still_exports(filed, tmp_path):
    out = tmp_path / "filed"
    assert _export(filed, out, "--identity", "Zoë Ångström-Łukasz 山田 <z@example.invalid>") == Exit.OK
    [patch] = out.glob("*.patch")
    assert patch.read_text(encoding="utf-8").count("Signed-off-by:") == 1


# --------------------------------------------------------------------------- 10. a new pack outside the repository


def _outside_manifest(lane_repo, name: str) -> Path:
    """A manifest for target ``name`` beside the repository, reachable as ``../../<name>`` from upstream/."""
    text = (lane_repo.root / "upstream" / "fake.toml").read_text()
    outside = lane_repo.root.parent / f"{name}.toml"
    outside.write_text(text.replace('target = "fake"', f'target = "../../{name}"'))
    return outside


def test_new_refuses_a_target_that_climbs_out_of_the_repository(lane_repo, capsys):
    _outside_manifest(lane_repo, "x")
    tracking = (lane_repo.root / "tracking.toml").read_text()
    assert cli("new", "24", "--target", "../../x", "--requires", "cpu", *lane_repo.args()) == Exit.USAGE
    assert "../../x" in capsys.readouterr().err
    assert not (lane_repo.root.parent / "x").exists()  # patches/../../x/24 and repros/../../x/pack24_*.py
    assert (lane_repo.root / "tracking.toml").read_text() == tracking


def test_check_refuses_a_tracking_target_that_climbs_out_of_the_repository(lane_repo, capsys):
    _outside_manifest(lane_repo, "x")
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('target = "fake"', 'target = "../../x"', 1))
    assert cli("check", *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert "tracking.toml" in err and "../../x" in err


@pytest.mark.parametrize("title", ['ends with """; import os; os.system("true")  #', 'a \\ backslash """ and "quote"',
                                   "a '''  triple single"])
def test_a_title_cannot_break_out_of_the_reproducers_docstring(lane_repo, title):
    assert cli("new", "24", "--target", "fake", "--title", title, "--requires", "cpu", *lane_repo.args()) == Exit.OK
    [repro] = (lane_repo.root / "repros" / "fake").glob("pack24_*.py")
    tree = ast.parse(repro.read_text())
    assert title in ast.get_docstring(tree)  # the whole title is the docstring's, nothing became code
    assert [type(n).__name__ for n in tree.body[:1]] == ["Expr"]


# --------------------------------------------------------------------------- 23. absurd pack ids


@pytest.mark.parametrize("pid", ["9" * 5000, "pack1" + "0" * 4400, "1" * 300, "٠٩"])
@pytest.mark.parametrize("verb", [("status",), ("run",), ("body",)])
def test_an_absurd_pack_id_is_bad_input_not_an_internal_error(lane_repo, capsys, pid, verb):
    assert cli(*verb, pid, *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[0].startswith("harness: error:") and len(err[0]) < 400, err


@pytest.mark.parametrize("pid", ["9" * 5000, "1" * 300, "100"])
def test_new_with_an_absurd_pack_id_is_bad_input(lane_repo, capsys, pid):
    assert cli("new", pid, "--target", "fake", *lane_repo.args()) == Exit.USAGE
    assert not list((lane_repo.root / "repros" / "fake").glob("pack[0-9][0-9][0-9]*"))


# --------------------------------------------------------------------------- 11. a link chain inside a tar


def _chain_tar(path: Path, top: str = "") -> Path:
    """A tar whose links each stay inside when extracted, but together leave: ``a/y -> w/../..`` is checked while
    ``a/w`` does not exist yet (so it reads as ``a/..``), then ``a/w -> .`` makes ``a/y`` climb two levels."""
    with tarfile.open(path, "w") as tf:
        for name, kind, link in ((f"{top}a", tarfile.DIRTYPE, ""), (f"{top}a/y", tarfile.SYMTYPE, "w/../.."),
                                 (f"{top}a/w", tarfile.SYMTYPE, ".")):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            info.mode = 0o755
            tf.addfile(info)
    return path


@pytest.mark.parametrize("filters", [True, False], ids=["with-filter", "without-filter"])
def test_a_link_chain_that_leaves_the_tree_is_refused_after_extraction(tmp_path, monkeypatch, filters):
    if filters and not tarsafe.has_filter():
        pytest.skip("this Python's tarfile has no extraction filters")
    monkeypatch.setattr(tarsafe, "has_filter", lambda: filters)
    dest = tmp_path / "dest"
    dest.mkdir()
    with tarfile.open(_chain_tar(tmp_path / "chain.tar")) as tf, pytest.raises(tarsafe.UnsafeMember, match="a/y"):
        tarsafe.extractall(tf, dest)
    assert tarsafe.links_leaving(dest) == []  # nothing that points out is left behind


# --------------------------------------------------------------------------- 12. a hostile or truncated bundle


@pytest.fixture
def bundled(lane_repo, tmp_path):
    from test_runtime import _wheel
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "tinydep", "1.0")
    out = tmp_path / "dist" / "bundle-01.tar.xz"
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), *lane_repo.args()) == Exit.OK
    return out


def _bootstrap(archive: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PATCHLANE_HOME", "XDG_CACHE_HOME")}
    return subprocess.run([sys.executable, "-m", "harness.bootstrap", str(archive), "--", *args],
                          capture_output=True, text=True, env=env | {"PATCHLANE_HOME": str(home)}, cwd=REPO)


def _rewrite(src: Path, dst: Path, change=None, extra=()) -> Path:
    """``src`` (a bundle) written again as ``dst``: each member's bytes through ``change(name, data)``, plus
    ``extra`` members (TarInfo, bytes-or-None)."""
    with tarfile.open(src) as tin, tarfile.open(dst, "w:xz") as tout:
        for m in tin.getmembers():
            data = tin.extractfile(m).read() if m.isfile() else None
            if data is not None and change:
                data = change(m.name, data)
                m.size = len(data)
            tout.addfile(m, io.BytesIO(data) if data is not None else None)
        for info, data in extra:
            tout.addfile(info, io.BytesIO(data) if data is not None else None)
    return dst


def _link(name: str, target: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info, None


def _nothing_half_unpacked(home: Path) -> None:
    left = [p for p in (home / "bundles").rglob("*")] if (home / "bundles").exists() else []
    assert left == [], left


def _one_clean_line(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == Exit.PIN, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("harness.bootstrap: error:")]
    assert len(errors) == 1 and all(w in errors[0] for w in words), proc.stderr


def test_a_truncated_bundle_is_exit_pin_in_one_line_and_leaves_nothing(bundled, tmp_path):
    cut = tmp_path / "cut.tar.xz"
    cut.write_bytes(bundled.read_bytes()[: bundled.stat().st_size * 2 // 3])
    proc = _bootstrap(cut, tmp_path / "home", "list")
    _one_clean_line(proc, str(cut))
    _nothing_half_unpacked(tmp_path / "home")


@pytest.mark.parametrize("extra", [
    [_link("patchlane-bundle/a", "w/../.."), _link("patchlane-bundle/w", ".")],  # a chain: a -> ./.. at the end
    [_link("patchlane-bundle/../../escape", "x")],  # a name that climbs past the prefix check
    [_link("patchlane-bundle/abs", "/etc")],
], ids=["link-chain", "climbing-name", "absolute-link"])
def test_a_hostile_bundle_is_exit_pin_in_one_line_and_leaves_nothing(bundled, tmp_path, extra):
    hostile = _rewrite(bundled, tmp_path / "hostile.tar.xz", extra=extra)
    proc = _bootstrap(hostile, tmp_path / "home", "list")
    _one_clean_line(proc, str(hostile))
    _nothing_half_unpacked(tmp_path / "home")
    assert not (tmp_path / "escape").exists()


def test_a_bundle_without_its_index_is_exit_pin_in_one_line(bundled, tmp_path):
    def drop_index(name, data):
        return b"{not json" if name.endswith("/bundle.json") else data
    broken = _rewrite(bundled, tmp_path / "broken.tar.xz", change=drop_index)
    proc = _bootstrap(broken, tmp_path / "home", "list")
    _one_clean_line(proc, "bundle.json")
    _nothing_half_unpacked(tmp_path / "home")


def test_a_hostile_site_tar_inside_a_bundle_is_exit_pin(lane_repo, bundled, tmp_path, capsys):
    """The bundle's digests all match (made by whoever made the bundle); the overlay's site.tar holds a chain."""
    index_name = "patchlane-bundle/bundle.json"
    with tarfile.open(bundled) as tf:
        index = json.loads(tf.extractfile(index_name).read())
    entry = next(e for e in index["builds"].values() if e["file"].endswith(".tar"))
    site = _chain_tar(tmp_path / "site.tar")
    data = site.read_bytes()
    entry["sha256"], entry["size"] = hashlib.sha256(data).hexdigest(), len(data)

    def swap(name, blob):
        if name == f"patchlane-bundle/{entry['file']}":
            return data
        return json.dumps(index).encode() if name == index_name else blob
    hostile = _rewrite(bundled, tmp_path / "hostile.tar.xz", change=swap)
    bundle_dir = unpack(hostile, tmp_path / "unpacked")
    fresh = ("--root", str(lane_repo.root), "--cache", str(tmp_path / "gpu-host-cache"))  # nothing built there
    assert cli("prepare", "01", "--bundle-dir", str(bundle_dir), *fresh) == Exit.PIN
    err = capsys.readouterr().err
    assert "site.tar" in err or entry["file"] in err, err
    assert "a/y" in err and "Traceback" not in err


# --------------------------------------------------------------------------- 22. one pull request written two ways


@pytest.mark.parametrize("second", [
    "https://www.github.com/fake-org/fakepkg/pull/5",
    "https://github.com/fake-org/fakepkg/pull/05",
    "https://WWW.GitHub.com/Fake-Org/FakePkg/issues/0005/",
    "http://github.com/fake-org/fakepkg/pull/5/files",
])
def test_one_pull_request_written_two_ways_with_two_states_is_refused(lane_repo, capsys, second):
    lane_repo.write_tracking(extra=_thread("https://github.com/fake-org/fakepkg/pull/5", "open")
                             + _thread(second, "merged"))
    err = _refused(lane_repo, capsys)
    assert f"[packs.01] threads[1]: {second} is threads[0]" in err
    assert "contradictory states ('open' there, 'merged' here)" in err


def test_a_filing_target_written_with_www_is_in_the_packs_repository(lane_repo):
    _github_target(lane_repo)
    lane_repo.write_tracking(extra=_thread("https://www.github.com/Fake-Org/fakepkg/pull/09", role="filing target"))
    assert cli("check", *lane_repo.args()) == Exit.OK


# --------------------------------------------------------------------------- 17. a lost suite selection


def test_a_deleted_selection_can_be_recorded_again_with_the_command_the_refusal_names(suite_repo, capsys):  # noqa: F811
    args = suite_repo.args()
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    suite_repo.write_tracking(SUITE)
    path = suite_repo.root / "suites" / "01" / "1.0.toml"
    recorded = path.read_text()
    path.unlink()
    capsys.readouterr()
    assert cli("check", *args) == Exit.USAGE
    err = capsys.readouterr().err
    assert "no recorded selection" in err and "harness suite select 01 --base 1.0" in err
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK  # the way out it names
    assert path.read_text() == recorded
    assert cli("check", *args) == Exit.OK


def test_select_check_without_a_selection_still_says_there_is_none(suite_repo, capsys):  # noqa: F811
    args = suite_repo.args()
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    suite_repo.write_tracking(SUITE)
    (suite_repo.root / "suites" / "01" / "1.0.toml").unlink()
    capsys.readouterr()
    assert cli("suite", "select", "01", "--base", "1.0", "--check", *args) == Exit.USAGE
    assert "no recorded selection" in capsys.readouterr().err


# --------------------------------------------------------------------------- 18. concurrent selection writers

# One writer of suites/01/1.0.toml, run as its own process: it deletes the file, then records it with the CLI, a
# few times over; each rename into place is slowed down (a busy disk), so the writers' scratch files overlap.
WRITER = '''
import os, sys, time
from pathlib import Path
root, cache, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
real_replace = os.replace
def slow_replace(src, dst, *a, **k):
    if "suites" in str(dst):
        time.sleep(0.3)
    return real_replace(src, dst, *a, **k)
os.replace = slow_replace
from harness.main import main
codes = []
for _ in range(rounds):
    Path(root, "suites", "01", "1.0.toml").unlink(missing_ok=True)
    try:
        codes.append(main(["suite", "select", "01", "--base", "1.0", "--root", root, "--cache", cache]))
    except SystemExit as exc:
        codes.append(int(exc.code or 0))
print("CODES", *codes, file=sys.stderr)
'''


def test_concurrent_writers_of_one_selection_all_succeed_and_leave_it_whole(suite_repo, tmp_path):  # noqa: F811
    args = suite_repo.args()
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK  # the materialized base, cached
    path = suite_repo.root / "suites" / "01" / "1.0.toml"
    recorded = path.read_text()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(suite_repo.root), str(suite_repo.cache), "3"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
             for _ in range(4)]
    results = [p.communicate(timeout=300) for p in procs]
    codes = [next((ln.split()[1:] for ln in err.splitlines() if ln.startswith("CODES")), None) for _, err in results]
    tails = [err[-600:] for _, err in results]
    assert all(c == ["0", "0", "0"] for c in codes), list(zip(codes, tails, strict=True))
    assert path.read_text() == recorded
    assert sorted(p.name for p in path.parent.iterdir()) == ["1.0.toml"]  # no scratch left


# --------------------------------------------------------------------------- 20. a large comparison as JSON


def test_compare_json_on_100000_cases_is_written_straight_and_fast(suite_repo, monkeypatch, capsys):  # noqa: F811
    args = suite_repo.args()
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    suite_repo.write_tracking(SUITE)
    n = 100_000
    base = {f"tests/test_big.py::test_case[{i}]": "passed" for i in range(n)}
    patched = dict(base) | {"tests/test_big.py::test_case[7]": "failed"}
    merged = suite.Merged(base, patched, n, ())
    comparison = suite.compare(base, patched, {}, claims_fix=False)
    big = suite_check.SuiteResult("01", "1.0", merged, comparison, ())
    monkeypatch.setattr(suite_check, "suite_verdict", lambda ctx, pack, base, *rest, **kw: big)
    capsys.readouterr()
    start = time.monotonic()
    assert cli("suite", "compare", "01", "--base", "1.0", "--json", *args) == Exit.MISMATCH
    took = time.monotonic() - start
    out = json.loads(capsys.readouterr().out)
    assert len(out["cases"]) == n and out["ok"] is False and out["collected"] == n
    assert took < 30, f"{took:.1f} s to print {n} cases"  # through rich: 57 s on an idle machine, 436 s here


# --------------------------------------------------------------------------- 19. a killed suite lane's scratch

KILL_TEST = """
import os, signal

def test_killed():
    os.kill(os.getppid(), signal.SIGKILL)  # the runner that started pytest dies outright (the OOM killer, say)
"""


def test_a_killed_upstream_test_runner_leaves_no_scratch(upstream_repo, tmp_path, monkeypatch):  # noqa: F811
    from test_upstream_tests import UPSTREAM_TESTS, _lane
    upstream_repo.sdist.unlink()
    upstream_repo.sdist = _sdist_with(upstream_repo.sdist.parent, {**UPSTREAM_TESTS, "tests/test_killed.py": KILL_TEST})
    upstream_repo.write_manifest()
    upstream_repo.write_tracking(_lane("tests-bug", False, ["tests/test_killed.py::test_killed"]))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    assert cli("run", "01", "--lane", "tests-bug", "--quiet", *upstream_repo.args()) == Exit.CRASH
    assert [p.name for p in tmp.iterdir()] == []  # no upstream-suite-* (nor anything else) left behind


def _sdist_with(dest: Path, files: dict[str, str]) -> Path:
    from conftest import fake_tree
    texts = {f"fakepkg-1.0/{n}": t for n, t in {**fake_tree(), **files}.items()}
    texts["fakepkg-1.0/PKG-INFO"] = "Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.0\n"
    path = dest / "fakepkg-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, text in sorted(texts.items()):
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tf.addfile(info, io.BytesIO(text.encode()))
    return path


def test_the_scratch_of_a_killed_harness_lane_is_swept_and_a_live_ones_kept(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tmp / f"patchlane-tmp-{gone.pid}-suite-1.0-base-x1"
    live = tmp / f"patchlane-tmp-{os.getpid()}-suite-1.0-base-x2"
    for d in (dead, live):
        (d / "upstream-suite-abc").mkdir(parents=True)
    assert lanes.sweep_stale_temp(tmp) == [dead]
    assert live.is_dir() and not dead.exists()


# --------------------------------------------------------------------------- 16. a read-only checkout


def _read_only(root: Path, *harness_args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``harness ARGS`` with ``root`` bind-mounted read-only (a user and mount namespace: real EROFS)."""
    probe = subprocess.run(["unshare", "-rm", "mount", "--bind", str(root), str(root)], capture_output=True) \
        if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        pytest.skip("needs unshare -rm (user and mount namespaces) for a read-only bind mount")
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir(exist_ok=True)
    harness = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "harness", *harness_args])
    script = f"mount --bind {root} {root} && mount -o remount,bind,ro {root} && exec {harness}"
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, TMPDIR=str(tmpdir)), timeout=300)


def _io_line(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == Exit.IO, (proc.returncode, proc.stderr)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("harness: error:")]
    assert len(errors) == 1 and "internal error" not in errors[0], proc.stderr
    assert all(w in errors[0] for w in words), errors[0]
    return errors[0]


def test_a_read_only_checkout_with_receipts_elsewhere_is_exit_io_naming_tracking(lane_repo, tmp_path):
    assert cli("prepare", "01", "--lane", "bug", *lane_repo.args()) == Exit.OK
    elsewhere = tmp_path / "gpu-receipts"
    before = (lane_repo.root / "tracking.toml").read_text()
    proc = _read_only(lane_repo.root, "run", "01", "--lane", "bug", "--quiet", "--receipts-dir", str(elsewhere),
                      *lane_repo.args(), tmp_path=tmp_path)
    _io_line(proc, "tracking.toml", "Read-only file system")
    assert "--no-tracking" in proc.stderr  # the way to run there without recording
    assert list(elsewhere.rglob("receipt.json"))  # the receipt itself was written where it was asked
    assert (lane_repo.root / "tracking.toml").read_text() == before


def test_new_in_a_read_only_checkout_is_exit_io_naming_the_path(lane_repo, tmp_path):
    proc = _read_only(lane_repo.root, "new", "25", "--target", "fake", *lane_repo.args(), tmp_path=tmp_path)
    _io_line(proc, str(lane_repo.root), "Read-only file system")
    assert not list((lane_repo.root / "repros" / "fake").glob("pack25_*"))


# --------------------------------------------------------------------------- 15. a full receipts directory


def test_a_full_receipts_directory_is_named_not_the_log_it_was_copying(lane_repo, tmp_path):
    """A real full disk: a 64 KiB tmpfs mounted on receipts/ in a user and mount namespace; the lane's log is 1 MB."""
    receipts = lane_repo.root / "receipts"
    receipts.mkdir()
    probe = subprocess.run(["unshare", "-rm", "mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(receipts)],
                           capture_output=True) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        pytest.skip("needs unshare -rm (user and mount namespaces) to mount a small tmpfs")
    assert cli("prepare", "01", "--lane", "bug", *lane_repo.args()) == Exit.OK
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    repro.write_text(repro.read_text().replace('mode = os.environ.get("FAKE_MODE", "")',
                                               'mode = os.environ.get("FAKE_MODE", "")\nprint("x" * 1_000_000)'))
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    harness = " ".join([sys.executable, "-m", "harness", "run", "01", "--lane", "bug", "--quiet", *lane_repo.args()])
    script = f"mount -t tmpfs -o size=64k tmpfs {receipts} && exec {harness}"
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, TMPDIR=str(tmpdir)), timeout=300)
    line = _io_line(proc, "No space left on device")
    assert str(receipts) in line and str(tmpdir) not in line, line  # the target named, not the source


# --------------------------------------------------------------------------- 14. paths that are not regular files

KINDS = ["fifo", "socket", "char-device", "symlink", "directory"]


def _make(path: Path, kind: str, outside: Path) -> None:
    """Put a ``kind`` at ``path`` (what a directory can hold besides a regular file)."""
    if path.exists() or path.is_symlink():
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socketlib.socket(socketlib.AF_UNIX)
        try:
            sock.bind(str(path))  # a path too long for AF_UNIX is skipped by the caller's chdir below
        finally:
            sock.close()
    elif kind == "char-device":
        try:
            os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
        except PermissionError:
            pytest.skip("making a device node needs CAP_MKNOD")
    elif kind == "symlink":
        path.symlink_to(outside)
    else:
        path.mkdir()


@contextlib.contextmanager
def _no_hang(seconds: int = 60):
    """A read that blocks (a FIFO with no writer) fails the test instead of hanging it."""
    def hung(signum, frame):
        raise AssertionError(f"blocked for {seconds} s: a FIFO was opened for reading")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", ["series patch", "manifest", "reproducer"])
def test_check_refuses_a_path_it_reads_that_is_not_a_regular_file(lane_repo, tmp_path, capsys, monkeypatch,
                                                                   where, kind):
    outside = tmp_path / "outside.txt"
    outside.write_text(TOKEN_TEXT)
    if where == "series patch":
        path = lane_repo.root / "patches" / "fake" / "01" / "0002-more.patch"
    elif where == "manifest":
        path = lane_repo.root / "upstream" / "fake.toml"
        outside.write_text(path.read_text())  # a whole manifest, only elsewhere
    else:
        path = lane_repo.root / "repros" / "fake" / "pack01.py"
    monkeypatch.chdir(path.parent)  # a socket's path must be short: bind it relative to here
    _make(Path(path.name), kind, outside)
    with _no_hang():
        code = cli("check", *lane_repo.args())
    err = capsys.readouterr().err
    assert code == Exit.USAGE, err
    words = {"fifo": "a FIFO", "socket": "a socket", "char-device": "a character device",
             "symlink": "a symbolic link", "directory": "a directory"}[kind]
    assert path.name in err and (words in err or (kind == "directory" and "named like a patch" in err)), err
    assert TOKEN_TEXT not in err


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_a_suite_selection_that_is_not_a_regular_file_is_refused(suite_repo, tmp_path, capsys, monkeypatch,  # noqa: F811
                                                                  kind):
    args = suite_repo.args()
    assert cli("suite", "select", "01", "--base", "1.0", *args) == Exit.OK
    suite_repo.write_tracking(SUITE)
    path = suite_repo.root / "suites" / "01" / "1.0.toml"
    outside = tmp_path / "elsewhere.toml"
    outside.write_text(path.read_text())  # the same selection, only outside the checkout
    monkeypatch.chdir(path.parent)
    _make(Path(path.name), kind, outside)
    capsys.readouterr()
    with _no_hang():
        assert cli("check", *args) == Exit.USAGE
    words = {"fifo": "a FIFO", "symlink": "a symbolic link", "directory": "a directory"}[kind]
    assert words in capsys.readouterr().err
