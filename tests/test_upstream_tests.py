"""Upstream-test lanes: the fake upstream's own tests/ tree, run by the kit's runner against the lane's build."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest
from conftest import REPO, cli, fake_tree

from harness.errors import ConfigError, Exit, GpuBusyError
from harness.lane import upstream_tests
from harness.lane.receipts import Sentinel, Verdict, find, verify
from harness.upstream import pins

UPSTREAM_TESTS = {
    "tests/__init__.py": "",
    "tests/test_core.py": textwrap.dedent('''\
        import pytest

        from fakepkg.core import scale, total


        def test_total():
            assert total([1, 2]) == 3


        def test_scale_uses_each_weight():
            assert scale([1.0, 2.0], [1.0, 0.0]) == [1.0, 0.0]


        @pytest.mark.skip(reason="not on this host")
        def test_skipped():
            pass


        class TestScale:
            @pytest.mark.parametrize("n", [1, 2])
            def test_ones(self, n):
                assert scale([1.0] * n, [1.0] * n) == [1.0] * n
    '''),
    "tests/test_broken.py": "import fakepkg.no_such_module\n\n\ndef test_never():\n    pass\n",
}
OK, BAD, SKIP = "tests/test_core.py::test_total", "tests/test_core.py::test_scale_uses_each_weight", \
    "tests/test_core.py::test_skipped"


def _sdist(dest: Path) -> Path:
    files = {f"fakepkg-1.0/{n}": t for n, t in {**fake_tree(), **UPSTREAM_TESTS}.items()}
    files["fakepkg-1.0/PKG-INFO"] = "Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.0\n"
    path = dest / "fakepkg-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, text in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tf.addfile(info, io.BytesIO(text.encode()))
    return path


def _lane(name: str, patched: bool, ids: list[str], expect_failed: list[str] = (), requires: str = "cpu") -> str:
    return textwrap.dedent(f'''
        [[packs.01.lanes]]
        name = "{name}"
        base = "1.0"
        patched = {str(patched).lower()}
        requires = "{requires}"
        upstream_tests = {json.dumps(ids)}
        expect_failed = {json.dumps(list(expect_failed))}
        timeout = 120
    ''')


@pytest.fixture
def upstream_repo(lane_repo, tmp_path, monkeypatch):
    """The lane repo whose fake upstream carries a tests/ tree; pytest comes from the harness's own Python."""
    lane_repo.sdist.unlink()
    lane_repo.sdist = _sdist(lane_repo.sdist.parent)
    lane_repo.write_manifest()
    shutil.copy(REPO / "repros" / "upstream_tests.py", lane_repo.root / "repros" / "upstream_tests.py")
    monkeypatch.setattr(upstream_tests, "PYTEST_REQUIRES", ())
    monkeypatch.setenv(upstream_tests.LOCK_DIR_ENV, str(tmp_path / "locks"))
    return lane_repo


def _run(repo, *lanes: str) -> int:
    return cli("run", "01", "--quiet", *repo.args(), *[a for lane in lanes for a in ("--lane", lane)])


def _details(rec) -> dict:
    return rec.sentinel_details[rec.sentinels[-1].value]


def test_expected_failure_unpatched_and_pass_patched_are_recorded_per_id(upstream_repo):
    upstream_repo.write_tracking(_lane("tests-bug", False, [OK, BAD], [BAD]) + _lane("tests-fix", True, [OK, BAD]))
    assert _run(upstream_repo, "tests-bug", "tests-fix") == Exit.OK
    recs = {r.lane: r for r in find(upstream_repo.root, "fake", "01")}
    bug, fix = recs["tests-bug"], recs["tests-fix"]
    for rec in (bug, fix):
        assert verify(rec) is None and rec.verdict == Verdict.PASS
        assert rec.reproducer.path == upstream_tests.RUNNER
        assert list(rec.reproducer.args[rec.reproducer.args.index("--") + 1:]) == [OK, BAD]  # the choice, exactly
        assert _details(rec)["selected"] == [OK, BAD]
    assert bug.sentinels == (Sentinel.UPSTREAM_TESTS_FAILED_AS_EXPECTED,)
    assert _details(bug)["outcomes"] == {OK: "passed", BAD: "failed"}
    assert "1 failed, 1 passed" in _details(bug)["summary"]
    assert fix.sentinels == (Sentinel.UPSTREAM_TESTS_PASSED,)
    assert _details(fix)["outcomes"] == {OK: "passed", BAD: "passed"}
    assert [(f.to_dict()["id"], f.to_dict()["value"]) for f in fix.figures] == [(OK, "passed"), (BAD, "passed")]
    # both lanes ran the tests of the series-applied tree: one exported test tree
    assert len(list((upstream_repo.cache / "upstream-tests").iterdir())) == 1


def test_an_expected_failure_that_passes_is_a_mismatch(upstream_repo):
    upstream_repo.write_tracking(_lane("tests-fix", True, [OK, BAD], [BAD]))
    assert _run(upstream_repo, "tests-fix") == Exit.MISMATCH
    [rec] = find(upstream_repo.root, "fake", "01")
    assert rec.sentinels == (Sentinel.UPSTREAM_TESTS_UNEXPECTED,)
    assert _details(rec)["reasons"] == [f"{BAD}: passed, expected failed"]


@pytest.mark.parametrize(("node", "outcome"), [
    (SKIP, "skipped"),  # a skip is never a pass
    ("tests/test_core.py::test_no_such_test", "not run"),  # an unknown id
    ("tests/test_broken.py::test_never", "not run"),  # a collection error
])
def test_skips_unknown_ids_and_collection_errors_are_never_a_pass(upstream_repo, node, outcome):
    upstream_repo.write_tracking(_lane("tests-fix", True, [OK, node]))
    assert _run(upstream_repo, "tests-fix") == Exit.MISMATCH
    [rec] = find(upstream_repo.root, "fake", "01")
    assert rec.sentinels == (Sentinel.UPSTREAM_TESTS_UNEXPECTED,)
    assert _details(rec)["outcomes"][node] == outcome


def test_a_class_and_its_parametrisations_map_back_to_the_selected_id(upstream_repo):
    node = "tests/test_core.py::TestScale::test_ones"
    upstream_repo.write_tracking(_lane("tests-fix", True, [node]))
    assert _run(upstream_repo, "tests-fix") == Exit.OK
    [rec] = find(upstream_repo.root, "fake", "01")
    assert _details(rec)["cases"] == {f"{node}[1]": "passed", f"{node}[2]": "passed"}


def test_a_cuda_lane_on_a_cpu_host_is_skipped(upstream_repo, monkeypatch):
    from harness.lane import runs

    upstream_repo.write_tracking(_lane("tests-fix", True, [OK], requires="cuda"))
    monkeypatch.setattr(runs, "cuda_devices", lambda python, memo_dir=None: (0, "no CUDA device visible to torch"))
    assert _run(upstream_repo, "tests-fix") == Exit.SKIPPED
    assert find(upstream_repo.root, "fake", "01") == []


@pytest.mark.parametrize(("extra", "message"), [
    ('expect_failed = ["tests/test_core.py::test_other"]', "not one of 'upstream_tests'"),
    ('expect = "BUG_REPRODUCED"', "expects UPSTREAM_TESTS_PASSED"),
    ('args = ["--x"]', "does not apply to an upstream-test lane"),
])
def test_lane_keys_are_checked(upstream_repo, extra, message, capsys):
    lane = _lane("tests-fix", True, [OK])
    if extra.startswith("expect_failed"):
        lane = lane.replace("expect_failed = []\n", "")
    upstream_repo.write_tracking(lane.replace("timeout = 120", f"timeout = 120\n{extra}"))
    assert _run(upstream_repo, "tests-fix") == Exit.USAGE
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("node", ["/abs/test_x.py", "../tests/test_x.py", "-k", "tests/test_x.py::"])
def test_ids_outside_the_tree_are_refused(node):
    with pytest.raises(ConfigError):
        upstream_tests.check_ids((node,), "lane x")


def test_visible_gpus_follow_cuda_visible_devices(tmp_path):
    assert upstream_tests.visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ["2", "3"]
    assert upstream_tests.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    gpus = tmp_path / "driver" / "nvidia" / "gpus"
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (gpus / bus).mkdir(parents=True)
    assert upstream_tests.visible_gpus({}, proc_root=tmp_path / "no-proc") == ["0"]
    assert upstream_tests.visible_gpus({}, proc_root=tmp_path) == ["0", "1"]


HOLDER = textwrap.dedent('''\
    import sys, time
    from pathlib import Path
    from harness.lane import upstream_tests
    from harness.upstream import pins
    with upstream_tests.gpu_lock(["0"], 30, "holder", Path(sys.argv[1])):
        print(f"acquired {time.time()}", flush=True)
        time.sleep(float(sys.argv[2]))
        print(f"released {time.time()}", flush=True)
''')


def test_the_gpu_lock_serialises_two_runs_on_one_gpu(tmp_path):
    """A second upstream-test run on a GPU waits until the first lets go; on another GPU it does not."""
    locks = tmp_path / "locks"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(locks), "1.5"], stdout=subprocess.PIPE, text=True,
                              cwd=REPO)
    first = holder.stdout.readline().split()
    assert first[0] == "acquired"
    with upstream_tests.gpu_lock(["1"], 5, "other gpu", locks) as waited:
        assert waited < 1.0
    with pytest.raises(GpuBusyError, match="GPU 0 stayed busy"):
        with upstream_tests.gpu_lock(["1", "0"], 0.2, "impatient", locks):
            pass
    with upstream_tests.gpu_lock(["0"], 30, "second", locks) as waited:
        got = time.time()
    released = float(holder.stdout.readline().split()[1])
    holder.wait(timeout=30)
    assert got >= released and waited > 0.5


def test_a_bundle_carries_the_test_tree_to_a_host_without_the_upstream(upstream_repo, tmp_path):
    upstream_repo.write_tracking(_lane("tests-bug", False, [OK, BAD], [BAD]))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    out = tmp_path / "dist" / "bundle-01.tar.xz"
    assert cli("bundle", "01", "-o", str(out), "--wheels", str(wheels), *upstream_repo.args()) == Exit.OK
    with tarfile.open(out) as tf:
        index = json.load(tf.extractfile("patchlane-bundle/bundle.json"))
    [entry] = index["tests_trees"].values()
    assert entry["lanes"] == ["01/tests-bug"] and len(entry["sha256"]) == 64
    from harness.host.unpacked import unpack

    bundle_dir = unpack(out, tmp_path / "unpacked")
    upstream_repo.sdist.unlink()  # no artefact: the tests can only come from the bundle
    device = tmp_path / "device-cache"
    assert cli("run", "01", "--quiet", "--lane", "tests-bug", "--bundle-dir", str(bundle_dir),
               "--root", str(upstream_repo.root), "--cache", str(device)) == Exit.OK
    [rec] = find(upstream_repo.root, "fake", "01")
    assert rec.build.source == "bundle" and _details(rec)["outcomes"] == {OK: "passed", BAD: "failed"}
    assert not (device / "bases").exists()


def test_a_changed_series_makes_the_unpatched_lane_stale_too(upstream_repo, tmp_path):
    """The unpatched lane runs the series' tests: a new series (tests included) outdates its receipt."""
    from conftest import CORE_BUGGY, CORE_FIXED, make_patch

    from harness.filing import readiness
    from harness.lane.tracking import Tracking

    upstream_repo.write_tracking(_lane("tests-bug", False, [OK, BAD], [BAD]))
    assert _run(upstream_repo, "tests-bug") == Exit.OK

    def problem():
        tracking = Tracking.load(upstream_repo.root)
        pack = tracking.pack("01")
        [rec] = find(upstream_repo.root, "fake", "01")
        patches = readiness.series_at(upstream_repo.root, tracking, pack, "1.0")
        return readiness.lane_problem(upstream_repo.root, pack, pack.lane("tests-bug"), rec,
                                      pins.load_manifest(upstream_repo.root, "fake").base("1.0"), patches)

    assert problem() is None
    upstream_repo.write_patch(make_patch(tmp_path, CORE_BUGGY, CORE_FIXED.replace("weight", "own weight")))
    assert "upstream tests of another series" in str(problem())


def test_a_cuda_upstream_lane_runs_under_the_lock_of_every_visible_gpu(upstream_repo, monkeypatch):
    """The lane holds the locks for the whole runner process; a cpu lane takes none."""
    from contextlib import contextmanager

    from harness.lane import runs

    held = []

    @contextmanager
    def recording_lock(gpus, timeout_s, label, directory=None):
        held.append(list(gpus))
        yield 0.0

    monkeypatch.setattr(upstream_tests, "gpu_lock", recording_lock)
    monkeypatch.setattr(runs, "cuda_devices", lambda python, memo_dir=None: (2, "this host has 2: fake"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    upstream_repo.write_tracking(_lane("tests-gpu", True, [OK], requires="cuda") + _lane("tests-cpu", True, [OK]))
    _run(upstream_repo, "tests-gpu", "tests-cpu")  # no CUDA here: the runner skips or dies; the lock came first
    assert held == [["3", "5"], []]


def test_an_upstream_whose_addopts_stop_at_the_first_failure_still_runs_every_case(upstream_repo, monkeypatch):
    """Megatron-LM dev's pyproject.toml holds addopts = "-x": the lane must not stop at the base's first failure
    and report every later id as not run."""
    later = "tests/test_core.py::TestScale::test_ones"  # after the failing test in the file
    tree = fake_tree()
    tree["pyproject.toml"] += '[tool.pytest.ini_options]\naddopts = "-x"\n'
    monkeypatch.setattr(sys.modules[__name__], "fake_tree", lambda: tree)
    upstream_repo.sdist.unlink()
    upstream_repo.sdist = _sdist(upstream_repo.sdist.parent)
    upstream_repo.write_manifest()
    upstream_repo.write_tracking(_lane("tests-bug", False, [BAD, later], [BAD]))
    assert _run(upstream_repo, "tests-bug") == Exit.OK
    [rec] = find(upstream_repo.root, "fake", "01")
    assert _details(rec)["outcomes"] == {BAD: "failed", later: "passed"}
    assert rec.sentinels == (Sentinel.UPSTREAM_TESTS_FAILED_AS_EXPECTED,)
