"""receipt.json as typed data (issue 16, point 3): every committed receipt loads, and writes back the same bytes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import REPO, cli

from harness.errors import ConfigError, Exit
from harness.lane import receipts, upstream_tests
from harness.lane.receipts import Receipt, Sentinel, Verdict

COMMITTED = sorted((REPO / "receipts").glob("*/*/*/receipt.json"))


def test_the_repository_holds_receipts_of_both_schemas():
    schemas = {json.loads(p.read_text())["schema"] for p in COMMITTED}
    assert len(COMMITTED) >= 70 and schemas == {1, 2}


@pytest.mark.parametrize("path", COMMITTED, ids=[str(p.parent.relative_to(REPO / "receipts")) for p in COMMITTED])
def test_every_committed_receipt_loads_and_writes_back_byte_for_byte(path, capsys):
    rec = Receipt.load(path)
    assert rec.path == path and rec.dir == path.parent
    assert isinstance(rec.verdict, Verdict) and all(isinstance(s, Sentinel) for s in rec.sentinels)
    assert receipts.dump(rec) == path.read_text()  # the same JSON, the same bytes
    assert "unknown key" not in capsys.readouterr().err


def test_the_sentinel_enum_is_the_reproducers_vocabulary():
    spec = importlib.util.spec_from_file_location("_lane_vocabulary", REPO / "repros" / "_lane.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert [s.value for s in Sentinel] == list(mod.SENTINELS) + list(upstream_tests.SENTINELS)


def _sample() -> dict:
    newest = max((p for p in COMMITTED if json.loads(p.read_text())["schema"] == 2), key=lambda p: p.parent.name)
    return json.loads(newest.read_text())


def _load(tmp_path: Path, data: dict) -> Receipt:
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(data))
    return Receipt.load(path)


@pytest.mark.parametrize(("edit", "finding"), [
    (lambda d: d.pop("verdict"), "required key 'verdict' missing"),
    (lambda d: d["base"].pop("commit"), "[base]: required key 'commit' missing"),
    (lambda d: d["reproducer"].pop("sha256"), "[reproducer]: required key 'sha256' missing"),
    (lambda d: d.update(patched="yes"), "key 'patched' is str"),
    (lambda d: d.update(world_size=True), "key 'world_size' is bool"),
    (lambda d: d.update(figures={"name": "x"}), "key 'figures' is dict"),
    (lambda d: d.update(verdict="passed"), "key 'verdict' is 'passed'"),
    (lambda d: d.update(sentinels=["BUG_GONE"]), "key 'sentinels' names \"BUG_GONE\""),
    (lambda d: d.update(host=[]), "key 'host' is list"),
    (lambda d: d["log"].update(bytes="12"), "[log]: key 'bytes' is str"),
    (lambda d: d["reproducer"].update(helpers={"repros/_lane.py": 1}), "'helpers' must map"),
], ids=["no-verdict", "no-base-commit", "no-reproducer-sha", "patched-str", "world-size-bool", "figures-dict",
        "unknown-verdict", "unknown-sentinel", "host-list", "log-bytes-str", "helper-digest-int"])
def test_a_receipt_that_breaks_the_schema_is_a_config_error_naming_the_file(tmp_path, edit, finding):
    data = _sample()
    edit(data)
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, data)
    assert str(tmp_path / "receipt.json") in str(info.value) and finding in str(info.value)
    assert info.value.exit_code == Exit.USAGE


def test_unknown_keys_are_warned_about_naming_file_and_key_and_dropped(tmp_path, capsys):
    data = _sample()
    data["verdikt"] = "pass"
    data["build"]["flavour"] = "odd"
    rec = _load(tmp_path, data)
    err = capsys.readouterr().err
    path = str(tmp_path / "receipt.json")
    assert f"{path}: unknown key 'verdikt'" in err.replace("\n", "")
    assert f"{path} [build]: unknown key 'flavour'" in err.replace("\n", "")
    assert "verdikt" not in rec.to_dict() and "flavour" not in rec.to_dict()["build"]


def test_a_legacy_receipt_lacks_keys_and_means_their_defaults(tmp_path):
    data = _sample()
    for key in ("world_size", "ranks", "extra_builds", "runtime_requires", "baseline_build"):
        data.pop(key)
    rec = _load(tmp_path, data)
    assert (rec.world_size, rec.ranks, rec.extra_builds, rec.runtime_requires, rec.baseline_build) == (1, None, (), (),
                                                                                                       None)
    assert rec.to_dict() == data  # and writes back without them


def test_a_new_receipt_is_the_model_written_as_json(lane_repo):
    assert cli("run", "01", "--quiet", *lane_repo.args()) == Exit.OK
    for rec in receipts.find(lane_repo.root, "fake", "01"):
        text = rec.path.read_text()
        assert text == receipts.dump(rec) == receipts.dump(Receipt.load(rec.path))
        assert list(json.loads(text)) == sorted(json.loads(text))
        assert rec.reproducer.helpers == receipts.helper_digests(lane_repo.root, rec.reproducer.path)
        assert "repros/_lane.py" in rec.reproducer.helpers


def test_verify_reports_a_receipt_that_breaks_the_schema(lane_repo, capsys):
    assert cli("run", "01", "--quiet", "--lane", "bug", *lane_repo.args()) == Exit.OK
    [rec] = receipts.find(lane_repo.root, "fake", "01")
    data = json.loads(rec.path.read_text())
    data["timed_out"] = "no"
    rec.path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    receipts.write_manifest(rec.dir)  # digests made to match: only the schema check can catch it
    assert cli("receipts", "verify", *lane_repo.args()) == Exit.TAMPERED
    assert "does not fit the receipt schema" in capsys.readouterr().out
