from __future__ import annotations

import json

import pytest
from conftest import cli

from harness.errors import Exit
from harness.lane import receipts
from harness.lane.receipts import Sentinel, Verdict, find, verify
from harness.lane.tracking import Tracking


def _run(lane_repo, *extra, quiet=True):
    return cli("run", "01", *(["--quiet"] if quiet else []), *lane_repo.args(), *extra)


def test_paired_run_writes_receipts_and_updates_tracking(lane_repo, capsys):
    before = (lane_repo.root / "tracking.toml").read_text()
    code = _run(lane_repo)
    assert code == 0, capsys.readouterr()
    recs = find(lane_repo.root, "fake", "01")
    assert sorted(r.lane for r in recs) == ["bug", "fix"]
    for rec in recs:
        assert verify(rec) is None
        assert rec.verdict == Verdict.PASS and rec.exit_code == 0
        assert rec.host.facts["target_version"] is None  # an overlay build has no dist-info to read a version from
        assert rec.host.facts["target_module_file"].startswith(str(lane_repo.cache))  # the build, not elsewhere
        assert rec.base.sha256 and rec.reproducer.sha256
        assert (rec.dir / "output.log.sha256").read_text().split()[0] == rec.log.sha256
        assert (rec.dir / "output.log").read_text().startswith("HOST_STAMP ")
    fix = next(r for r in recs if r.lane == "fix")
    assert fix.patches[0].upstream_status == "Submitted"
    assert [f.to_dict() for f in fix.figures] == [{"name": "max_err", "value": 0.0, "unit": None}]
    bug = next(r for r in recs if r.lane == "bug")
    assert bug.sentinels == (Sentinel.BUG_REPRODUCED,) and bug.patches == ()
    # the run writes its receipts and regenerates the pack's [verdicts] line, and nothing else of tracking.toml
    text = (lane_repo.root / "tracking.toml").read_text()
    assert Tracking.load(lane_repo.root).verdicts()["01"].startswith("2 lane(s): 2 pass; latest run ")
    people = text[:text.index("\n# Generated from receipts/")]
    assert people.rstrip("\n") == before.rstrip("\n") and "# a pull request" in people


def test_second_run_rebuilds_nothing(lane_repo, capsys):
    assert _run(lane_repo) == Exit.OK
    builds = sorted(p.name for p in (lane_repo.cache / "builds").iterdir())
    capsys.readouterr()
    assert _run(lane_repo, quiet=False) == Exit.OK
    assert sorted(p.name for p in (lane_repo.cache / "builds").iterdir()) == builds
    assert "cached" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("mode", "code", "verdict"),
    [("crash", 7, Verdict.CRASH), ("silent", 7, Verdict.CRASH), ("hang", 8, Verdict.TIMEOUT)],
)
def test_crash_and_hang_are_never_a_pass(lane_repo, monkeypatch, mode, code, verdict):
    lane_repo.write_tracking(timeout=3)
    monkeypatch.setenv("FAKE_MODE", mode)
    assert _run(lane_repo, "--lane", "bug") == code
    [rec] = find(lane_repo.root, "fake", "01")
    assert rec.verdict == verdict


def test_wrong_sentinel_is_a_mismatch(lane_repo):
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('expect = "BUG_REPRODUCED"', 'expect = "BUG_ABSENT"'))
    assert _run(lane_repo, "--lane", "bug") == Exit.MISMATCH
    [rec] = find(lane_repo.root, "fake", "01")
    assert rec.verdict == Verdict.MISMATCH and "expected BUG_ABSENT" in rec.reason


def test_gpu_lane_without_gpu_is_skipped_after_build_and_import_check(lane_repo, monkeypatch, capsys):
    lane_repo.write_tracking(requires="cuda")
    from harness.lane import runs

    monkeypatch.setattr(runs, "cuda_devices", lambda python, memo_dir=None: (0, "no CUDA device visible to torch"))
    assert _run(lane_repo, quiet=False) == Exit.SKIPPED
    out = capsys.readouterr()
    assert "import check ok" in out.err
    assert "skipped" in out.out and "no receipt yet" in out.err and "nothing was validated" in out.err
    assert find(lane_repo.root, "fake", "01") == []


def test_unknown_pack_and_lane_are_one_line_usage_errors(lane_repo, capsys):
    assert cli("run", "42", *lane_repo.args()) == Exit.USAGE
    assert capsys.readouterr().err.strip().startswith("harness: error: no pack '42'")
    assert _run(lane_repo, "--lane", "nope") == Exit.USAGE
    assert "no lane 'nope' (lanes: bug, fix)" in capsys.readouterr().err


def test_receipt_tampering_is_detected(lane_repo, capsys):
    assert _run(lane_repo, "--lane", "bug") == Exit.OK
    [rec] = find(lane_repo.root, "fake", "01")
    (rec.dir / "output.log").write_text("edited\n")
    assert cli("receipts", "verify", *lane_repo.args()) == Exit.TAMPERED
    assert "differs from the receipt" in capsys.readouterr().out
    json.loads((rec.dir / "receipt.json").read_text())


def test_lane_requires_overrides_the_pack(lane_repo, monkeypatch, capsys):
    """A cuda pack may carry a cpu lane: that lane runs, the other is skipped, the worst code wins (3)."""
    lane_repo.write_tracking(requires="cuda")
    path = lane_repo.root / "tracking.toml"
    text = path.read_text()
    i = text.index('name = "bug"')
    path.write_text(text[:i] + 'requires = "cpu"\n' + text[i:])
    from harness.lane import runs

    monkeypatch.setattr(runs, "cuda_devices", lambda python, memo_dir=None: (0, "no CUDA device visible to torch"))
    assert _run(lane_repo) == Exit.SKIPPED
    [rec] = find(lane_repo.root, "fake", "01")
    assert rec.lane == "bug" and rec.verdict == Verdict.PASS


def test_a_skip_says_how_to_run_on_a_gpu_host_and_what_changed_here(lane_repo, monkeypatch, capsys):
    lane_repo.write_tracking(requires="cuda")
    path = lane_repo.root / "tracking.toml"
    text = path.read_text()
    i = text.index('name = "bug"')
    path.write_text(text[:i] + 'requires = "cpu"\n' + text[i:])
    from harness.lane import runs

    monkeypatch.setattr(runs, "cuda_devices", lambda python, memo_dir=None: (0, "no CUDA device visible to torch"))
    capsys.readouterr()
    assert cli("run", "01", *lane_repo.args()) == Exit.SKIPPED
    err = " ".join(capsys.readouterr().err.split())  # unwrapped
    assert "harness bundle 01 -o dist/bundle-01.tar.xz" in err
    assert "python3 -m harness.bootstrap dist/bundle-01.tar.xz -- run 01 --lane fix " in err
    assert "the 1 lane(s) that ran here wrote receipts under receipts/; tracking.toml was updated" in err
    # nothing recorded here: no such line
    assert cli("run", "01", "--lane", "fix", "--no-tracking", *lane_repo.args()) == Exit.SKIPPED
    err = " ".join(capsys.readouterr().err.split())
    assert "harness bundle 01" in err and "wrote receipts" not in err
    # nothing skipped: no hint
    lane_repo.write_tracking(requires="cpu")
    assert cli("run", "01", *lane_repo.args()) == Exit.OK
    assert "harness bundle" not in capsys.readouterr().err


def test_bad_lane_requires_and_baseline_on_unpatched_lane_are_config_errors(lane_repo, capsys):
    path = lane_repo.root / "tracking.toml"
    good = path.read_text()
    i = good.index('name = "bug"')
    path.write_text(good[:i] + 'requires = "tpu"\n' + good[i:])
    assert _run(lane_repo) == Exit.USAGE
    assert "key 'requires' is 'tpu'" in capsys.readouterr().err
    path.write_text(good[:i] + "with_baseline = true\n" + good[i:])
    assert _run(lane_repo) == Exit.USAGE
    assert "key 'with_baseline' needs a patched lane" in capsys.readouterr().err


def test_with_baseline_lane_gets_the_unpatched_build(lane_repo):
    path = lane_repo.root / "tracking.toml"
    text = path.read_text()
    i = text.index('name = "fix"')
    path.write_text(text[:i] + "with_baseline = true\n" + text[i:])
    assert _run(lane_repo, "--lane", "fix") == Exit.OK
    [rec] = find(lane_repo.root, "fake", "01")
    assert rec.baseline_build.key != rec.build.key
    from harness.lane.tracking import Tracking

    assert Tracking.load(lane_repo.root).pack("01").lane("fix").with_baseline


def test_interrupted_build_leaves_no_entry_that_looks_complete(lane_repo, monkeypatch):
    from harness.lane import builds

    real = builds._overlay

    def interrupted(tree, manifest, site, label):
        real(tree, manifest, site, label)  # half the work is on disk ...
        raise KeyboardInterrupt  # ... when the user hits Ctrl-C

    monkeypatch.setattr(builds, "_overlay", interrupted)
    assert _run(lane_repo, "--lane", "bug") == Exit.INTERRUPT
    entries = list((lane_repo.cache / "builds").iterdir())
    assert all(e.name.startswith(".tmp-") for e in entries) or not entries
    monkeypatch.setattr(builds, "_overlay", real)
    assert _run(lane_repo, "--lane", "bug") == Exit.OK
    assert [e for e in (lane_repo.cache / "builds").iterdir() if not e.name.startswith(".tmp-")]
    assert not [e for e in (lane_repo.cache / "builds").iterdir() if e.name.startswith(".tmp-")]


def test_multi_process_lane_records_every_rank(lane_repo, monkeypatch):
    """nproc > 1: the launcher starts one process per rank; every rank's stamp lands in the receipt."""
    from harness.lane import runs

    lane_repo.write_tracking()
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('expect = "BUG_REPRODUCED"', 'expect = "BUG_REPRODUCED"\nnproc = 2', 1))
    seen_env = {}

    def fake_launch(python, nproc, script, args, lock=None):
        # stands in for torch.distributed.run: two ranks, rank 0 prints the verdict
        ranks = " & ".join(f"WORLD_SIZE={nproc} RANK={r} LOCAL_RANK={r} FAKE_MODE={'silent' if r else ''} "
                           f"{python} {script}" for r in range(nproc))
        return ["sh", "-c", f"{ranks}; wait"]

    real_run = runs.run

    def spy_run(cmd, env, log_path, timeout, sentinels, echo=True):
        seen_env.update(env)
        return real_run(cmd, env, log_path, timeout, sentinels, echo)

    monkeypatch.setattr(runs, "launch_command", fake_launch)
    monkeypatch.setattr(runs, "run", spy_run)
    monkeypatch.delenv("FAKE_MODE", raising=False)
    assert _run(lane_repo, "--lane", "bug") == Exit.OK
    [rec] = find(lane_repo.root, "fake", "01")
    assert rec.world_size == 2
    assert sorted(s.facts["rank"] for s in rec.ranks) == [0, 1]
    assert seen_env["NCCL_NVLS_ENABLE"] == "0" and seen_env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"


def test_ranks_run_through_the_real_launch_command_with_whole_lines(lane_repo, monkeypatch, tmp_path):
    """The harness's own launch command (no stand-in for it): a torch.distributed.run of a fake torch starts the
    ranks it is given; each runs under rank_lines.py, and every line of the log is one the ranks printed whole."""
    from harness.lane import runs

    lane_repo.write_tracking()
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('expect = "BUG_REPRODUCED"', 'expect = "BUG_REPRODUCED"\nnproc = 2', 1))
    _fake_torch(tmp_path / "site", "(2, 27, 7)")
    (tmp_path / "site" / "torch" / "distributed").mkdir()
    (tmp_path / "site" / "torch" / "distributed" / "__init__.py").write_text("")
    (tmp_path / "site" / "torch" / "distributed" / "run.py").write_text(
        "import os, subprocess, sys\n"
        "argv = sys.argv[1:]\n"
        f"open({str(tmp_path / 'argv.txt')!r}, 'w').write(' '.join(argv))\n"
        "n = int(next(a.split('=')[1] for a in argv if a.startswith('--nproc_per_node=')))\n"
        "cmd = [a for a in argv if not a.startswith('--')]\n"
        "ranks = [subprocess.Popen([sys.executable, *cmd], env={**os.environ, 'WORLD_SIZE': str(n), 'RANK': str(r),\n"
        "         'LOCAL_RANK': str(r), 'FAKE_MODE': 'silent' if r else ''}) for r in range(n)]\n"
        "sys.exit(max(p.wait() for p in ranks))\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.delenv("FAKE_MODE", raising=False)
    assert _run(lane_repo, "--lane", "bug") == Exit.OK
    [rec] = find(lane_repo.root, "fake", "01")
    assert verify(rec) is None and sorted(s.facts["rank"] for s in rec.ranks) == [0, 1]
    assert str(runs.RANK_LINES) in (tmp_path / "argv.txt").read_text().split()
    log = (rec.dir / "output.log").read_text().splitlines()
    assert sum(line.startswith("HOST_STAMP ") for line in log) == 2
    assert all(line.count("HOST_STAMP") <= 1 and line.count("FIGURE") <= 1 for line in log)


def test_lane_needing_more_gpus_than_the_host_has_is_skipped(lane_repo, monkeypatch):
    from harness.lane import runs

    lane_repo.write_tracking(requires="cuda")
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('patched = true', 'patched = true\nnproc = 4'))
    monkeypatch.setattr(runs, "cuda_devices", lambda python, memo_dir=None: (1, "this host has 1: NVIDIA H100"))
    monkeypatch.setenv("FAKE_MODE", "")
    assert _run(lane_repo) == Exit.SKIPPED  # the 1-GPU lane passes, the 4-GPU lane is skipped: SKIPPED wins over OK
    [rec] = find(lane_repo.root, "fake", "01")
    assert rec.lane == "bug"


def test_with_builds_puts_another_target_on_the_path(lane_repo, tmp_path):

    from conftest import make_sdist

    other = tmp_path / "other"
    other.mkdir()
    sdist = make_sdist(other, version="2.0")

    _helper_manifest(lane_repo, sdist, "fakepkg")
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('patched = false', 'patched = false\nwith_builds = ["helper@2.0"]', 1))
    assert _run(lane_repo, "--lane", "bug") == Exit.OK
    [rec] = find(lane_repo.root, "fake", "01")
    assert len(rec.extra_builds) == 1 and rec.extra_builds[0].kind == "overlay"
    path.write_text(path.read_text().replace("helper@2.0", "helper@9.9"))
    assert _run(lane_repo, "--lane", "bug") == Exit.USAGE


def test_with_builds_brings_the_extra_bases_runtime(lane_repo, tmp_path, monkeypatch):
    # megatron-core + mamba-ssm (pack 16's mamba3 stage): mamba's tilelang/z3 runtime must be on the lane's
    # PYTHONPATH and LD_LIBRARY_PATH, and the extra build's import check must see it, though the lane's own
    # base lists no runtime_requires.
    import io
    import tarfile
    import zipfile

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    info = "tinydep-1.0.dist-info"
    files = {"tinydep/__init__.py": "VERSION = '1.0'\n", "tinydep/lib/libtiny.so": "",
             f"{info}/METADATA": "Metadata-Version: 2.1\nName: tinydep\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(wheels / "tinydep-1.0-py3-none-any.whl", "w") as zf:
        for arc, text in files.items():
            zf.writestr(arc, text)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))

    sdist = tmp_path / "helperpkg-2.0.tar.gz"
    members = {"helperpkg-2.0/PKG-INFO": "Metadata-Version: 2.1\nName: helperpkg\nVersion: 2.0\n",
               "helperpkg-2.0/pyproject.toml": '[project]\nname = "helperpkg"\nversion = "2.0"\n',
               "helperpkg-2.0/src/helperpkg/__init__.py": "import tinydep  # the base's runtime_requires\n"}
    with tarfile.open(sdist, "w:gz") as tf:
        for name, text in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(text.encode())
            tf.addfile(ti, io.BytesIO(text.encode()))
    _helper_manifest(lane_repo, sdist, "helperpkg", runtime_requires=["tinydep==1.0"])
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('patched = false', 'patched = false\nwith_builds = ["helper@2.0"]', 1))
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    repro.write_text("import os, helperpkg, tinydep\nassert any(p.endswith('tinydep/lib') for p in "
                     "os.environ['LD_LIBRARY_PATH'].split(os.pathsep))\n" + repro.read_text())
    assert _run(lane_repo, "--lane", "bug") == Exit.OK
    [rec] = find(lane_repo.root, "fake", "01")
    assert rec.runtime_requires == ("tinydep==1.0",)
    assert rec.imported["helperpkg"].startswith(str(lane_repo.cache))


def _helper_manifest(lane_repo, sdist, package: str, runtime_requires=()) -> None:
    """upstream/helper.toml: a second target whose one base (2.0) is ``sdist``, for ``with_builds`` lanes."""
    import hashlib
    import json
    import textwrap

    (lane_repo.root / "upstream" / "helper.toml").write_text(textwrap.dedent(f'''\
        target = "helper"
        repo = "https://example.invalid/helper"
        distribution = "{package}"
        import_names = ["{package}"]
        build = "overlay"
        default_base = "2.0"
        [bases."2.0"]
        version = "2.0"
        commit = ""
        runtime_requires = {json.dumps(list(runtime_requires))}
        [bases."2.0".artifact]
        kind = "sdist"
        filename = "{sdist.name}"
        url = "{sdist.as_uri()}"
        sha256 = "{hashlib.sha256(sdist.read_bytes()).hexdigest()}"
    '''))


@pytest.mark.parametrize("python", ["/nonexistent/python3", "python9.99-not-here"])
def test_a_python_that_does_not_exist_is_bad_input_naming_it(lane_repo, capsys, python):
    assert _run(lane_repo, "--python", python) == Exit.USAGE
    err = capsys.readouterr().err
    assert f"--python {python}: no such executable file" in err and "internal error" not in err
    assert find(lane_repo.root, "fake", "01") == []


def test_a_warm_run_says_each_shared_fact_once(lane_repo, capsys):
    """Lanes sharing a base (or a build) repeat the same notes; each is printed once per command."""
    assert cli("run", "01", *lane_repo.args()) == Exit.OK
    capsys.readouterr()
    assert cli("run", "01", *lane_repo.args()) == Exit.OK
    err = capsys.readouterr().err
    assert err.count("base fake 1.0: ") == 1, err
    assert cli("run", "01", *lane_repo.args()) == Exit.OK  # the next command says it again
    assert capsys.readouterr().err.count("base fake 1.0: ") == 1


def test_a_pack_file_outside_the_package_is_not_import_checked(lane_repo, capsys):
    """A pack that files an upstream test (``tests/test_core.py``) lists it among its files; the test is in the
    source tree, not in the build, so the import check must leave it out instead of failing the lane."""
    text = (lane_repo.root / "tracking.toml").read_text()
    (lane_repo.root / "tracking.toml").write_text(text.replace(
        'files = ["src/fakepkg/core.py"]', 'files = ["src/fakepkg/core.py", "tests/test_core.py", "setup.py"]'))
    code = _run(lane_repo)
    assert code == Exit.OK, capsys.readouterr()
    fix = next(r for r in find(lane_repo.root, "fake", "01") if r.lane == "fix")
    assert fix.verdict == Verdict.PASS


def _fake_torch(root, nccl: str) -> None:
    """A stand-in torch: no CUDA for the reproducer's stamp, an NCCL version for the harness's probe."""
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text(
        "__version__ = '0.0+fake'\n"
        "class version:\n    cuda = None\n"
        "class _Nccl:\n"
        f"    version = staticmethod(lambda: {nccl})\n"
        "class cuda:\n    is_available = staticmethod(lambda: False)\n    nccl = _Nccl\n")


@pytest.mark.parametrize("nccl,recorded", [("(2, 27, 7)", "2.27.7"), ("1 / 0", None)])
def test_multi_rank_cuda_lane_records_its_gpus_and_nccl(lane_repo, monkeypatch, tmp_path, nccl, recorded):
    """A cuda lane over several ranks says which GPUs it was given and which NCCL its torch carries; a torch
    that cannot say (the probe raises) leaves the key out and the lane runs all the same."""
    from harness.lane import runs

    lane_repo.write_tracking(requires="cuda")
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('expect = "BUG_REPRODUCED"', 'expect = "BUG_REPRODUCED"\nnproc = 2', 1))
    _fake_torch(tmp_path / "site", nccl)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setattr(runs, "cuda_devices", lambda python, memo_dir=None: (2, "this host has 2: NVIDIA H200"))
    monkeypatch.setattr(runs, "launch_command", lambda python, nproc, script, args, lock=None: ["sh", "-c", " & ".join(
        f"WORLD_SIZE={nproc} RANK={r} LOCAL_RANK={r} FAKE_MODE={'silent' if r else ''} {python} {script}"
        for r in range(nproc)) + "; wait"])
    monkeypatch.delenv("FAKE_MODE", raising=False)
    assert _run(lane_repo, "--lane", "bug") == Exit.OK
    [rec] = find(lane_repo.root, "fake", "01")
    assert verify(rec) is None
    assert (rec.world_size, rec.visible_devices, rec.nccl) == (2, "3,5", recorded)
    saved = json.loads((rec.dir / "receipt.json").read_text())
    assert ("nccl" in saved) == (recorded is not None)


def test_the_discard_a_run_prints_restores_the_committed_receipts(lane_repo, capsys):
    """`git checkout` alone left the new (untracked) receipt directories, and status kept reading them: the command
    the run prints restores the checkout, and status then reports the committed receipts again."""
    import re
    import subprocess

    from conftest import git

    root = lane_repo.root
    assert _run(lane_repo, "--lane", "bug") == Exit.OK
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "committed receipts")
    [committed] = find(root, "fake", "01")
    capsys.readouterr()
    assert _run(lane_repo, "--lane", "bug", quiet=False) == Exit.OK
    err = " ".join(capsys.readouterr().err.split())
    keep = re.search(r"Keep: (git add .*?); discard: (git .*?)(?: exit|$)", err)
    assert keep, err
    assert keep.group(1) == "git add receipts/fake/01 tracking.toml && git commit"
    assert len(find(root, "fake", "01")) == 2 and git(root, "status", "--porcelain")
    subprocess.run(keep.group(2), shell=True, cwd=root, check=True)
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
    assert cli("status", "01", "--json", "--no-apply", *lane_repo.args()) in (Exit.OK, Exit.PIN)
    [lane] = [ln for ln in json.loads(capsys.readouterr().out)["packs"][0]["lanes"] if ln["name"] == "bug"]
    assert lane["receipt"]["path"] == str(committed.dir.relative_to(root))


def test_lanes_that_share_a_build_say_what_was_applied_once(lane_repo, capsys):
    """mamba_pack07 printed the same "applied 4 patch(es)" line 31 times, once per lane sharing the build."""
    import textwrap

    lane_repo.write_tracking(extra=textwrap.dedent('''
        [[packs.01.lanes]]
        name = "fix-again"
        base = "1.0"
        patched = true
        expect = "FIX_VALIDATED"
    '''))
    capsys.readouterr()
    assert _run(lane_repo, quiet=False) == Exit.OK
    err = capsys.readouterr().err
    assert err.count("applied 1 patch(es) on fake 1.0: 01/0001-use-own-weight.patch") == 1, err


def test_a_host_without_a_gpu_has_one_name(lane_repo, capsys):
    """status said 'cpu' and tracking.toml (and the pack pages) the platform string for the same host."""
    import platform

    assert _run(lane_repo, "--lane", "bug") == Exit.OK
    [bug] = receipts.run_dirs(lane_repo.root)
    host = receipts.host_description(receipts.load(bug / receipts.RECEIPT))  # as perf and the bodies name it
    entry = {"host": host}
    assert entry["host"].startswith("cpu (") and platform.system() in entry["host"]
    capsys.readouterr()
    cli("status", "01", "--json", "--no-apply", *lane_repo.args())
    [lane] = [ln for ln in json.loads(capsys.readouterr().out)["packs"][0]["lanes"] if ln["name"] == "bug"]
    assert lane["receipt"]["host"] == "cpu" and entry["host"].split()[0] == "cpu"


def test_skip_current_answers_a_lane_from_its_current_receipt_and_runs_it_again_once_stale(lane_repo, capsys):
    """CI's pack sessions: a lane whose receipt passed for today's pin, series, reproducer and helpers is not run
    again (its build is still made and import-checked); a changed reproducer makes it run."""
    assert _run(lane_repo) == Exit.OK
    before = sorted(d.name for d in receipts.run_dirs(lane_repo.root))
    capsys.readouterr()
    assert cli("run", "01", "--skip-current", "--json", *lane_repo.args()) == Exit.OK
    out = json.loads(capsys.readouterr().out)
    assert [(ln["lane"], ln["verdict"]) for ln in out["lanes"]] == [("bug", "pass"), ("fix", "pass")]
    assert all(ln["reason"].startswith("current: receipts/fake/01/") for ln in out["lanes"])
    assert sorted(d.name for d in receipts.run_dirs(lane_repo.root)) == before  # nothing ran, nothing written
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    repro.write_text(repro.read_text() + "\n# changed\n")
    assert cli("run", "01", "--skip-current", "--json", *lane_repo.args()) == Exit.OK
    out = json.loads(capsys.readouterr().out)
    assert not any(ln["reason"].startswith("current:") for ln in out["lanes"])
    assert len(receipts.run_dirs(lane_repo.root)) == len(before) + 2


def test_skip_current_never_answers_a_lane_from_a_receipt_of_another_kind_of_host(lane_repo, capsys, monkeypatch):
    """A lane whose reproducer decides for itself that it needs a GPU is declared cpu; on a CPU host it skips. CI
    must not report it passed from a GPU host's receipt: only a receipt made on a host of this one's kind counts.
    Here the receipts were made without a GPU and the host now reports one, so both lanes run again."""
    from harness.lane import runs

    assert _run(lane_repo) == Exit.OK
    monkeypatch.setattr(runs, "cuda_devices", lambda python, memo=None: (1, "1 CUDA device (test)"))
    capsys.readouterr()
    assert cli("run", "01", "--skip-current", "--json", *lane_repo.args()) == Exit.OK
    out = json.loads(capsys.readouterr().out)
    assert not any(ln["reason"].startswith("current:") for ln in out["lanes"])
