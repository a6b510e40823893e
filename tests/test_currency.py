"""A receipt is current until what ran changes: the files its processes imported, the lane's whole declaration,
and the receipt itself as a whole (issue 59 item 2; issue 55 items 1-3)."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import REPRO, cli, copy_lane_repo, isolated_env, make_lane_repo

from harness.base.hashing import sha256_file
from harness.base.store import Store
from harness.errors import Exit
from harness.filing import readiness
from harness.lane import receipts
from harness.lane.context import Context
from harness.lane.tracking import Tracking

KIT = "repros/fake/_kit.py"  # a helper the reproducer imports
UNUSED = "repros/fake/_unused.py"  # one it could import (a _*.py beside it) but never does


@pytest.fixture(scope="session")
def ran(tmp_path_factory):
    """Pack 01 run once, its reproducer importing ``_kit`` (and not ``_unused``): a template to copy."""
    with isolated_env():
        repo = make_lane_repo(tmp_path_factory.mktemp("currency"))
        # a module whose __file__ is a bare name (torch does this for torch._ops): no file of ours, never recorded
        (repo.root / KIT).write_text("import sys, types\nm = types.ModuleType('fake_ops')\nm.__file__ = '_ops.py'\n"
                                     "sys.modules['fake_ops'] = m\nOFFSET = 0.0\n")
        (repo.root / "_ops.py").write_text("# a file at the repository's top, named like that module\n")
        (repo.root / UNUSED).write_text("NOTHING = 1\n")
        (repo.root / "repros/fake/pack01.py").write_text(
            REPRO.replace("import _lane\n", "import _lane\nimport _kit\n"))
        assert cli("run", "01", "--quiet", *repo.args()) == Exit.OK
    return repo


@pytest.fixture
def repo(ran, tmp_path):
    return copy_lane_repo(ran, tmp_path)


def _problems(repo) -> dict[str, str | None]:
    ctx = Context(root=repo.root, tracking=Tracking.load(repo.root), store=Store(repo.cache))
    state = readiness.readiness(ctx, ctx.tracking.packs["01"], allow_download=False)
    return {e.lane.name: (None if e.problem is None else f"{e.problem.code}: {e.problem}") for e in state.lanes}


def test_a_receipt_records_what_its_run_imported_and_the_lane_as_declared(repo):
    rec = receipts.latest_by_lane(repo.root, "fake", "01")["fix"]
    assert set(rec.reproducer.loaded) == {"repros/_lane.py", KIT, "repros/fake/pack01.py"}
    assert UNUSED not in rec.reproducer.loaded
    assert rec.declaration["expect"] == "FIX_VALIDATED" and rec.declaration["patched"] is True
    assert rec.declaration["build"]["kind"] == "overlay"
    assert _problems(repo) == {"bug": None, "fix": None}


def test_a_helper_the_run_never_imported_changes_and_the_lanes_stay_current(repo):
    (repo.root / UNUSED).write_text("NOTHING = 2\n")
    (repo.root / "repros" / "fake" / "_new.py").write_text("ADDED = True\n")
    assert _problems(repo) == {"bug": None, "fix": None}


def test_a_helper_the_run_imported_changes_and_the_lanes_go_stale(repo):
    (repo.root / KIT).write_text((repo.root / KIT).read_text().replace("OFFSET = 0.0", "OFFSET = 1.0"))
    found = _problems(repo)
    assert found["bug"].startswith("loaded: ") and KIT in found["bug"] and found["fix"].startswith("loaded: ")


def test_without_a_record_of_what_it_imported_every_helper_counts_and_status_says_so(repo):
    for d in receipts.run_dirs(repo.root):
        data = json.loads((d / "receipt.json").read_text())
        del data["reproducer"]["loaded"]
        (d / "receipt.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        (d / "SHA256SUMS").unlink()
        receipts.write_manifest(d)
    assert _problems(repo) == {"bug": None, "fix": None}
    (repo.root / UNUSED).write_text("NOTHING = 3\n")
    found = _problems(repo)
    assert found["fix"].startswith("helpers: ") and "no record of what it imported" in found["fix"]


@pytest.mark.parametrize("edit, word", [
    (('expect = "BUG_REPRODUCED"', 'expect = "BUG_ABSENT"'), "expected BUG_REPRODUCED"),
    (('name = "bug"\nbase = "1.0"\npatched = false\n', 'name = "bug"\nbase = "1.0"\npatched = false\n'
                                                        'args = ["--size", "3"]\n'), "args"),
    (('name = "bug"\nbase = "1.0"\npatched = false\n', 'name = "bug"\nbase = "1.0"\npatched = false\n'
                                                        'nproc = 2\n'), "nproc"),
])
def test_a_changed_expect_args_or_declaration_stales_the_lane(repo, edit, word):
    path = repo.root / "tracking.toml"
    text = path.read_text()
    assert edit[0] in text
    path.write_text(text.replace(edit[0], edit[1], 1))
    found = _problems(repo)
    assert found["bug"] is not None and found["bug"].startswith("declaration: ") and word in found["bug"]
    assert found["fix"] is None


def test_a_changed_build_kind_stales_every_lane(repo):
    repo.write_manifest(build="wheel")
    found = _problems(repo)
    assert all(v is not None and "build changed since" in v for v in found.values()), found


def test_status_never_claims_a_sentinel_the_lane_did_not_print(repo, capsys):
    """The lane now expects BUG_ABSENT; its receipt printed BUG_REPRODUCED: no "saw BUG_ABSENT" anywhere."""
    path = repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('expect = "BUG_REPRODUCED"', 'expect = "BUG_ABSENT"', 1))
    capsys.readouterr()
    cli("status", "01", "--json", *repo.args())
    out = capsys.readouterr().out
    assert "saw BUG_ABSENT" not in out and "expected BUG_REPRODUCED; the lane now expects BUG_ABSENT" in out


def test_a_receipt_whose_log_contradicts_its_json_never_counts(repo):
    """Its JSON says pass; its log says FIX_FAILED (both re-sealed, so only the log comparison can tell)."""
    rec = receipts.latest_by_lane(repo.root, "fake", "01")["fix"]
    log = rec.dir / "output.log"
    log.write_text(log.read_text().replace("FIX_VALIDATED", "FIX_FAILED"))
    data = json.loads((rec.dir / "receipt.json").read_text())
    data["log"]["sha256"] = sha256_file(log)
    (rec.dir / "receipt.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    (rec.dir / "output.log.sha256").write_text(f"{sha256_file(log)}  output.log\n")
    (rec.dir / "SHA256SUMS").unlink()
    receipts.write_manifest(rec.dir)
    found = _problems(repo)
    assert found["fix"].startswith("unverified: ") and 'receipt "FIX_VALIDATED", log "FIX_FAILED"' in found["fix"]
    assert cli("run", "01", "--skip-current", "--quiet", *repo.args()) == Exit.OK
    assert receipts.latest_by_lane(repo.root, "fake", "01")["fix"].dir != rec.dir  # ran again, not answered


def test_a_receipt_counts_only_in_its_own_packs_directory(repo, capsys):
    """Pack 01's receipt copied under pack 02 (or under another lane's name) counts for neither, and verify
    names it."""
    rec = receipts.latest_by_lane(repo.root, "fake", "01")["fix"]
    stray = repo.root / "receipts" / "fake" / "02" / rec.dir.name
    shutil.copytree(rec.dir, stray)
    renamed = rec.dir.parent / rec.dir.name.replace("-fix", "-bug.7")
    shutil.copytree(rec.dir, renamed)
    found = receipts.find(repo.root, "fake")
    assert stray not in {r.dir for r in found} and renamed not in {r.dir for r in found}
    assert receipts.find(repo.root, "fake", "02") == []
    capsys.readouterr()
    assert cli("receipts", "verify", *repo.args()) == Exit.TAMPERED
    err = capsys.readouterr()
    said = err.out + err.err
    assert "receipts/fake/02/" in said and "says pack 01" in said and "says lane fix" in said


def test_installed_files_of_an_environment_inside_the_checkout_do_not_stale_a_receipt(tmp_path):
    """A run whose interpreter lived in the checkout's .nox/ recorded its site-packages as repository files; a fresh
    clone has none, so every such receipt read as stale there (CI's pack pages disagreed with status here)."""
    from harness.lane import loaded

    (tmp_path / "repros").mkdir()
    (tmp_path / "repros" / "kit.py").write_text("X = 1\n")
    recorded = {"repros/kit.py": loaded.sha256_file(tmp_path / "repros" / "kit.py"),
                ".nox/lane-x-py3.12/lib/python3.12/site-packages/charset_normalizer/__init__.py": "0" * 64,
                "vendor/site-packages/thing.py": "1" * 64}
    assert loaded.changed(recorded, tmp_path) == []
    (tmp_path / "repros" / "kit.py").write_text("X = 2\n")
    assert loaded.changed(recorded, tmp_path) == ["repros/kit.py"]
    assert not loaded.ours(".nox/a.py") and not loaded.ours("x/__pycache__/y.pyc") and loaded.ours("repros/kit.py")
