from __future__ import annotations

import pytest
from conftest import cli

from harness.errors import ConfigError, Exit
from harness.lane.tracking import Tracking, normalize_id

PACK_02 = '''
[packs.02]
title = "second"
target = "fake"
kind = "issue"
state = "planned"
depends_on = ["01"]
'''


def _load(lane_repo):
    return Tracking.load(lane_repo.root)


def test_loads_packs_lanes_and_closure(lane_repo):
    lane_repo.write_tracking(PACK_02)
    t = _load(lane_repo)
    assert [p.id for p in t.closure("2")] == ["01", "02"]
    assert [lane.name for lane in t.pack("01").lanes] == ["bug", "fix"]
    assert t.pack("fake_pack01").id == "01"


@pytest.mark.parametrize(
    ("extra", "replace", "message"),
    [
        (PACK_02.replace('["01"]', '["07"]'), None, r"\[packs.02\]: depends_on names unknown pack '07'"),
        (PACK_02, ('depends_on = []', 'depends_on = ["02"]'), r"dependency cycle 01 -> 02 -> 01"),
        ("", ('state = "ready"', 'state = "maybe"'), r"\[packs.01\]: key 'state' is 'maybe'"),
        ("", ('kind = "pr"', 'kind = "pull"'), r"\[packs.01\]: key 'kind' is 'pull'"),
        ("", ('target = "fake"', 'target = "nope"'), r"\[packs.01\]: key 'target': no manifest for target 'nope'"),
        ("", ('expect = "BUG_REPRODUCED"', 'expect = "BUG_SEEN"'), r"lanes\[0\] \(bug\): key 'expect' is 'BUG_SEEN'"),
        ("", ('base = "1.0"\npatched = false', 'base = "0.9"\npatched = false'), r"key 'base' is '0.9'"),
        ("", ('reproducer = "repros/fake/pack01.py"', 'reproducer = "repros/x.py"'), r"repros/x.py does not exist"),
        ("", ('title = "scale uses w[0] for every element"\n', ''), r"\[packs.01\]: missing key 'title'"),
    ],
)
def test_validation_errors_name_pack_and_key(lane_repo, extra, replace, message):
    lane_repo.write_tracking(extra)
    path = lane_repo.root / "tracking.toml"
    if replace:
        path.write_text(path.read_text().replace(*replace, 1))
    with pytest.raises(ConfigError, match=message):
        _load(lane_repo)


def test_invalid_toml_names_the_line(lane_repo, capsys):
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text() + "\n[packs.01\n")
    assert cli("list", *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert "tracking.toml:" in err and "not valid TOML" in err and "Traceback" not in err


def test_record_verdicts_round_trips_comments_and_order(lane_repo):
    t = _load(lane_repo)
    before = (lane_repo.root / "tracking.toml").read_text()
    t.record_verdicts({"01": "2 lane(s): 2 pass"})
    t.save()
    after = (lane_repo.root / "tracking.toml").read_text()
    assert after.startswith(before.rstrip("\n"))  # nothing people wrote moved or vanished
    assert "# a pull request" in after and "# tracking for tests" in after
    assert "do not edit, do not merge by hand" in after[len(before):]  # the generated table says so, last
    t2 = _load(lane_repo)
    assert t2.verdicts() == {"01": "2 lane(s): 2 pass"}
    t2.record_verdicts({"01": "2 lane(s): 1 pass, 1 mismatch (fix)"})
    t2.save()
    assert _load(lane_repo).verdicts() == {"01": "2 lane(s): 1 pass, 1 mismatch (fix)"}


def test_normalize_id():
    assert normalize_id("9") == normalize_id("pack09") == normalize_id("liger_pack09") == "09"


@pytest.mark.parametrize("kind", ["bug-report", "regression-guard"])
def test_unpatched_kinds_refuse_patched_lanes(lane_repo, kind):
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('kind = "pr"', f'kind = "{kind}"', 1))
    with pytest.raises(ConfigError, match=rf"\[packs.01\]: lane 'fix' has patched = true, but a {kind} pack"):
        _load(lane_repo)


def test_fix_sentinel_needs_a_patched_lane(lane_repo):
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('patched = true', 'patched = false', 1))
    with pytest.raises(ConfigError, match=r"lane 'fix' expects FIX_VALIDATED on an unpatched build"):
        _load(lane_repo)


def test_bug_report_with_only_unpatched_lanes_runs(lane_repo):
    """A bug report has no series: its baseline lane runs and records a verdict, nothing claims a fix."""
    path = lane_repo.root / "tracking.toml"
    text = path.read_text().replace('kind = "pr"', 'kind = "bug-report"', 1)
    text = text.replace('[[packs.01.evidence]]\nlane = "fix"', '[[packs.01.evidence]]\nlane = "bug"')
    path.write_text(text[: text.index('[[packs.01.lanes]]\nname = "fix"')])
    for patch in (lane_repo.root / "patches").rglob("*.patch"):
        patch.unlink()
    pack = _load(lane_repo).pack("01")
    assert [(lane.name, lane.patched) for lane in pack.lanes] == [("bug", False)]
    assert cli("run", "01", *lane_repo.args()) == Exit.OK
    assert _load(lane_repo).verdicts()["01"].startswith("1 lane(s): 1 pass; latest run ")


def test_a_held_pack_carries_its_reason(lane_repo):
    lane_repo.write_tracking(PACK_02.replace('state = "planned"', 'state = "held"\nheld = "no reproducer yet"'))
    t = _load(lane_repo)
    assert t.pack("02").state_reason == "no reproducer yet"
    assert t.pack("01").state_reason is None


@pytest.mark.parametrize(
    ("corrupt", "at", "message"),
    [
        # a key given twice inside one pack: tomlkit alone reports no line, the strict parser does
        (lambda t: t.replace('state = "ready"\n', 'state = "ready"\nstate = "held"\n', 1), 'state = "held"',
         "not valid TOML"),
        # a table declared twice: the line named is the second declaration's
        (lambda t: t.replace("[[packs.01.lanes]]", '[packs.01]\ntitle = "again"\n[[packs.01.lanes]]', 1),
         '[packs.01]\ntitle = "again"', "not valid TOML"),
        # a Latin-1 byte in a comment (an editor that saved in the wrong encoding)
        (lambda t: t.replace("# a pull request", "# a pull r\udce9quest", 1), "# a pull r", "not UTF-8 (byte 0xe9"),
    ],
    ids=["duplicate-key", "duplicate-table", "non-utf8"],
)
def test_any_invalid_tracking_toml_is_bad_input_naming_file_and_line(lane_repo, capsys, corrupt, at, message):
    from harness.errors import Exit

    path = lane_repo.root / "tracking.toml"
    text = corrupt(path.read_text())
    assert text.count(at) == 1
    line = text[: text.index(at)].count("\n") + 1  # the line of the fault, wherever the fixture puts it
    assert line > 1
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    assert cli("list", *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert f"tracking.toml:{line}: {message}" in err, err
    assert "internal error" not in err and len(err.strip().splitlines()) == 1


def test_unreadable_tracking_toml_is_bad_input(lane_repo, capsys):
    """A read that fails with an OS error (EIO here: /proc/self/mem at offset 0) is bad input, not a crash."""
    import os

    from harness.errors import Exit

    path = lane_repo.root / "tracking.toml"
    path.unlink()
    os.symlink("/proc/self/mem", path)
    assert cli("list", *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert "tracking.toml: cannot read: Input/output error" in err and "internal error" not in err


def test_an_unknown_key_is_refused_naming_file_pack_key_and_the_nearest(lane_repo, capsys):
    text = (lane_repo.root / "tracking.toml").read_text()
    text = text.replace('depends_on = []', 'depends_on = []\ndepends-on = ["02"]', 1)
    text = text.replace('expect = "BUG_REPRODUCED"', 'expect = "BUG_REPRODUCED"\nexpects = "typo"', 1)
    (lane_repo.root / "tracking.toml").write_text(text)
    with pytest.raises(ConfigError) as exc:  # the typo is never read as the key it resembles, nor skipped
        Tracking.load(lane_repo.root)
    said = str(exc.value)
    assert "[packs.01]: unknown key 'depends-on'" in said and "did you mean 'depends_on'?" in said
    assert "(and 1 more: harness check lists them)" in said
    capsys.readouterr()
    assert cli("check", *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert "[packs.01] lanes[0]: unknown key 'expects'" in err and "did you mean 'expect'?" in err


def test_check_and_every_other_command_fail_on_an_unknown_key(lane_repo, capsys):
    assert cli("check", *lane_repo.args()) == Exit.OK
    path = lane_repo.root / "tracking.toml"
    typo = 'expect = "BUG_REPRODUCED"\nrequries = "cuda"'
    path.write_text(path.read_text().replace('expect = "BUG_REPRODUCED"', typo, 1))
    capsys.readouterr()
    assert cli("list", *lane_repo.args()) == Exit.USAGE  # refused: a lane falling back to cuda would skip
    assert "lanes[0]: unknown key 'requries'" in capsys.readouterr().err
    assert cli("check", *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert "1 unknown key(s)" in err and "lanes[0]: unknown key 'requries'" in err
    # a manifest key too
    path.write_text(path.read_text().replace('\nrequries = "cuda"', ""))
    manifest = lane_repo.root / "upstream" / "fake.toml"
    manifest.write_text(manifest.read_text().replace('build = "overlay"', 'build = "overlay"\nbuidl = "wheel"'))
    assert cli("check", *lane_repo.args()) == Exit.USAGE
    assert "fake.toml: unknown key 'buidl'" in capsys.readouterr().err


def test_a_schema_this_harness_does_not_read_is_bad_input(lane_repo, capsys):
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace("schema = 1", "schema = 2"))
    assert cli("list", *lane_repo.args()) == Exit.USAGE
    assert "key 'schema' is 2; this harness reads schema 1" in capsys.readouterr().err


def test_the_real_tracking_toml_has_no_unknown_key():
    from conftest import REPO

    from harness.base.tomlutil import load_document
    from harness.lane.tracking import unknown_keys

    path = REPO / "tracking.toml"
    assert unknown_keys(path, load_document(path)) == []
