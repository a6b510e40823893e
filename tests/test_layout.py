"""Where a pack's keys live (issue 47): tracking.toml says where it stands, patches/<target>/<NN>/pack.toml what it
declares; ``harness migrate`` moves an older tracking.toml's declarations out without changing what loads."""

from __future__ import annotations

import json
import re
import tomllib

import pytest
from conftest import REPO, cli

from harness.errors import ConfigError, Exit
from harness.lane.tracking import Tracking, layout

PACK_FILE = ("patches", "fake", "01", "pack.toml")


def _list(repo, capsys) -> dict:
    capsys.readouterr()
    assert cli("list", "--json", *repo.args()) == Exit.OK
    return json.loads(capsys.readouterr().out)


def test_migrate_moves_the_declarations_and_the_packs_read_the_same(lane_repo, capsys):
    before = _list(lane_repo, capsys)
    capsys.readouterr()
    assert cli("migrate", "--json", *lane_repo.args()) == Exit.OK
    moved = json.loads(capsys.readouterr().out)["moved"]
    assert moved == [{"pack": "01", "file": "patches/fake/01/pack.toml",
                      "keys": ["files", "requires", "base", "reproducer", "evidence", "lanes"], "removed": []}]
    tracking = tomllib.loads((lane_repo.root / "tracking.toml").read_text())
    declared = tomllib.loads(lane_repo.root.joinpath(*PACK_FILE).read_text())
    assert set(tracking["packs"]["01"]) <= layout.STANDING_KEYS
    assert [lane["name"] for lane in declared["lanes"]] == ["bug", "fix"] and declared["schema"] == 1
    assert "# tracking for tests: comments must survive" in (lane_repo.root / "tracking.toml").read_text()
    assert _list(lane_repo, capsys) == before
    # the series beside the file still loads as the series (pack.toml is no patch), and nothing is left to move
    assert cli("check", *lane_repo.args()) == Exit.OK
    assert "single-file form" not in capsys.readouterr().err
    assert cli("migrate", *lane_repo.args()) == Exit.OK
    assert "nothing to move" in capsys.readouterr().err


def test_the_single_file_form_still_loads_and_check_says_how_to_move_it(lane_repo, capsys):
    assert cli("check", *lane_repo.args()) == Exit.OK
    err = capsys.readouterr().err
    assert "[packs.01] holds what the pack declares" in err and "harness migrate" in err


def test_a_key_in_both_files_is_refused_naming_both(lane_repo, capsys):
    assert cli("migrate", *lane_repo.args()) == Exit.OK
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text().replace('state = "ready"', 'state = "ready"\nrequires = "cpu"'))
    with pytest.raises(ConfigError, match=r"\[packs\.01\]: key 'requires' is what the pack declares, and "
                                          r"patches/fake/01/pack\.toml holds"):
        Tracking.load(lane_repo.root)


def test_a_standing_key_in_the_pack_file_is_refused(lane_repo):
    assert cli("migrate", *lane_repo.args()) == Exit.OK
    path = lane_repo.root.joinpath(*PACK_FILE)
    path.write_text('state = "filed"\n' + path.read_text())
    with pytest.raises(ConfigError, match=r"patches/fake/01/pack\.toml: key 'state' says where pack 01 stands; "
                                          r"it belongs in tracking\.toml"):
        Tracking.load(lane_repo.root)


def test_an_unknown_key_in_the_pack_file_is_named_by_check(lane_repo, capsys):
    assert cli("migrate", *lane_repo.args()) == Exit.OK
    path = lane_repo.root.joinpath(*PACK_FILE)
    path.write_text(path.read_text().replace("[[lanes]]\n", "[[lanes]]\nexpectt = 1\n", 1))
    capsys.readouterr()
    assert cli("check", *lane_repo.args()) == Exit.USAGE
    assert "patches/fake/01/pack.toml lanes[0]: unknown key 'expectt'" in capsys.readouterr().err


@pytest.mark.parametrize("verb", [("status", "01"), ("run", "01", "--lane", "fix"), ("list",)])
def test_a_misspelt_key_in_the_pack_file_stops_every_command_naming_file_line_and_key(lane_repo, capsys, verb):
    """A newcomer's round 4, item 5: 'requries' was ignored by status, run and nox; the lane fell back to cuda."""
    assert cli("migrate", *lane_repo.args()) == Exit.OK
    path = lane_repo.root.joinpath(*PACK_FILE)
    text = path.read_text()
    path.write_text(text.replace("[[lanes]]\n", '[[lanes]]\nrequries = "cpu"\n', 1))
    line = path.read_text().splitlines().index('requries = "cpu"') + 1
    capsys.readouterr()
    assert cli(*verb, *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert "patches/fake/01/pack.toml lanes[0]: unknown key 'requries'" in err
    assert f"line {line}; did you mean 'requires'?" in err
    assert not (lane_repo.root / "receipts").exists()  # nothing ran


def test_a_migrate_that_cannot_write_a_pack_file_leaves_every_file_as_it_was(lane_repo, capsys):
    """Pack 02 declares a lane too; its directory's place is taken by a file, so its pack.toml cannot be made
    after pack 01's was: 01's new file goes again and tracking.toml keeps its bytes."""
    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text() + '\n[packs.02]\ntitle = "t"\ntarget = "fake"\nkind = "issue"\n'
                    'state = "planned"\nreproducer = "repros/fake/pack01.py"\n')
    (lane_repo.root / "patches" / "fake" / "02").write_text("not a directory")
    before = path.read_bytes()
    assert cli("migrate", *lane_repo.args()) == Exit.IO
    assert "every file is as it was" in capsys.readouterr().err
    assert path.read_bytes() == before
    assert not lane_repo.root.joinpath(*PACK_FILE).exists()


def test_the_repository_keeps_every_declaration_beside_its_series():
    tracking = Tracking.load(REPO)
    with (REPO / "tracking.toml").open("rb") as fh:
        doc = tomllib.load(fh)
    assert layout.inline_declarations(doc) == {}
    for pid, pack in tracking.packs.items():
        if pack.lanes:
            assert layout.pack_file(REPO, pack.target, pid).is_file(), pid


def _git(root, *args: str) -> str:
    import subprocess

    done = subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
                          capture_output=True, text=True)
    return done.stdout + done.stderr


def test_a_merge_that_conflicts_in_the_generated_verdicts_is_resolved_by_sync(lane_repo, capsys):
    """Two branches each run one lane: both write the pack's [verdicts] line, and git stops on it. 'receipts sync'
    writes the table again from the merged receipts/; what people wrote is left as it was."""
    root = lane_repo.root
    assert cli("migrate", *lane_repo.args()) == Exit.OK
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "base")
    people = (root / "tracking.toml").read_text()
    _git(root, "checkout", "-qb", "other")
    assert cli("run", "01", "--lane", "fix", "--quiet", *lane_repo.args()) == Exit.OK
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "fix lane")
    _git(root, "checkout", "-q", "main")
    assert cli("run", "01", "--lane", "bug", "--quiet", *lane_repo.args()) == Exit.OK
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "bug lane")
    assert "CONFLICT (content): Merge conflict in tracking.toml" in _git(root, "merge", "other")
    assert "<<<<<<<" in (root / "tracking.toml").read_text()
    with pytest.raises(ConfigError, match="not valid TOML"):
        Tracking.load(root)
    capsys.readouterr()
    assert cli("receipts", "sync", *lane_repo.args()) == Exit.OK
    text = (root / "tracking.toml").read_text()
    assert "<<<<<<<" not in text and text.startswith(people.rstrip("\n"))
    assert Tracking.load(root).verdicts()["01"].startswith("2 lane(s): 2 pass; latest run ")
    assert cli("receipts", "verify", *lane_repo.args()) == Exit.OK


def test_sync_leaves_a_conflict_among_what_people_wrote_to_them(lane_repo, capsys):
    path = lane_repo.root / "tracking.toml"
    text = path.read_text().replace('state = "ready"', '<<<<<<< ours\nstate = "ready"\n=======\nstate = "held"\n'
                                                       '>>>>>>> theirs')
    path.write_text(text)
    assert cli("receipts", "sync", *lane_repo.args()) == Exit.USAGE
    assert "a merge conflict outside the generated [verdicts] table" in capsys.readouterr().err
    assert path.read_text() == text


def test_a_note_that_underlines_with_equals_signs_does_not_block_sync(lane_repo, capsys):
    """#55: a multi-line note holding a line of seven '=' read as a merge conflict, and sync refused to run."""
    path = lane_repo.root / "tracking.toml"
    text = path.read_text().replace('state = "ready"', 'state = "ready"\nnote = """Findings\n=======\n'
                                                       '<<<<<<< quoted from a thread\nnone"""', 1)
    path.write_text(text)
    assert cli("receipts", "sync", *lane_repo.args()) == Exit.OK
    assert path.read_text().startswith(text.rstrip("\n").split("\n[verdicts]")[0][:200])
    assert 'note = """Findings\n=======\n' in path.read_text()


def test_new_writes_the_standing_entry_and_the_pack_file_beside_the_series(lane_repo):
    assert cli("new", "24", "--target", "fake", "--title", "a new pack", "--requires", "cpu",
               *lane_repo.args()) == Exit.OK
    tracking = tomllib.loads((lane_repo.root / "tracking.toml").read_text())
    assert set(tracking["packs"]["24"]) == {"title", "target", "kind", "state", "depends_on"}
    declared = tomllib.loads((lane_repo.root / "patches" / "fake" / "24" / "pack.toml").read_text())
    assert [lane["name"] for lane in declared["lanes"]] == ["bug-1.0", "fix-1.0"]
    assert declared["reproducer"].startswith("repros/fake/pack24_") and declared["requires"] == "cpu"
    assert [lane.name for lane in Tracking.load(lane_repo.root).pack("24").lanes] == ["bug-1.0", "fix-1.0"]


@pytest.mark.parametrize("where", ["outside", "dangling"])
def test_a_pack_file_that_is_a_link_is_refused_naming_it(lane_repo, tmp_path, capsys, where):
    """A pack.toml linking out of the repository was read as the pack's declarations; a dangling one was taken
    for no file at all (issue 55 item 7)."""
    assert cli("migrate", *lane_repo.args()) == Exit.OK
    path = lane_repo.root.joinpath(*PACK_FILE)
    elsewhere = tmp_path / "elsewhere.toml"
    if where == "outside":
        elsewhere.write_text(path.read_text())
    path.unlink()
    path.symlink_to(elsewhere)
    capsys.readouterr()
    assert cli("check", *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert f"patches/fake/01/pack.toml: a symbolic link (to {elsewhere})" in err


def test_a_recorded_template_directory_that_is_a_link_is_refused(tmp_path):
    """templates/upstream/<target> linked elsewhere put another tree's template into a body (issue 55 item 7)."""
    from types import SimpleNamespace

    from harness.filing import pr_template

    other = tmp_path / "other"
    other.mkdir()
    (other / "SOURCE.toml").write_text('commit = "abc"\n')
    (tmp_path / "repo" / "upstream").mkdir(parents=True)
    (tmp_path / "repo" / "templates" / "upstream").mkdir(parents=True)
    (tmp_path / "repo" / "templates" / "upstream" / "fake").symlink_to(other)
    manifest = SimpleNamespace(path=tmp_path / "repo" / "upstream" / "fake.toml", target="fake")
    with pytest.raises(ConfigError, match="templates/upstream/fake: a symbolic link"):
        pr_template.recorded_dir(manifest)


def test_a_committed_pack_file_deleted_from_the_checkout_fails_check(lane_repo, capsys):
    """#55: a deleted pack.toml passed check; the pack then declared nothing and its nox session had no lanes."""
    from conftest import git

    assert cli("migrate", *lane_repo.args()) == Exit.OK
    git(lane_repo.root, "init", "-q")
    git(lane_repo.root, "add", "-A")
    git(lane_repo.root, "commit", "-q", "-m", "checkout")
    assert cli("check", *lane_repo.args()) == Exit.OK
    lane_repo.root.joinpath(*PACK_FILE).unlink()
    capsys.readouterr()
    assert cli("check", *lane_repo.args()) == Exit.USAGE
    err = " ".join(capsys.readouterr().err.split())
    assert "pack 01: patches/fake/01/pack.toml is committed but missing here" in err
    assert "git checkout -- patches/fake/01/pack.toml" in err


def test_a_pack_file_over_the_size_bound_is_refused_before_it_is_parsed(lane_repo, capsys):
    """#55: a 100 MB pack.toml took 212 s and 762 MB to load before anything was said."""
    import time

    from harness.base.regular import MAX_TOML_BYTES
    from harness.lane.sessions import pack_sessions

    assert cli("migrate", *lane_repo.args()) == Exit.OK
    path = lane_repo.root.joinpath(*PACK_FILE)
    with path.open("a") as fh:  # valid TOML all the way: only its size is wrong
        line = "# " + "x" * 1000 + "\n"
        for _ in range(MAX_TOML_BYTES // len(line) + 2):
            fh.write(line)
    capsys.readouterr()
    started = time.monotonic()
    assert cli("check", *lane_repo.args()) == Exit.USAGE
    assert time.monotonic() - started < 30
    err = " ".join(capsys.readouterr().err.split())
    assert f"patches/fake/01/pack.toml: {path.stat().st_size} bytes, more than the {MAX_TOML_BYTES}" in err
    [session] = pack_sessions(lane_repo.root)  # the noxfile's reader: that pack's session fails, in one line
    assert session.error and "more than the" in session.error


@pytest.mark.parametrize(("edit", "key"), [
    (lambda t: t.replace('expect = "FIX_VALIDATED"', 'expect = "FIX_VALIDATE"', 1), 'expect = "FIX_VALIDATE"'),
    (lambda t: t.replace('reproducer = "', 'reproducer = 7\n# was: "', 1), "reproducer = 7"),
    (lambda t: t + '\n[[evidence]]\nlane = "fix"\nfigure = "max_err"\nlabel = "x"\nshow = "{value}"\n'
                   'pick = "median"\n', 'pick = "median"'),
], ids=["lane-key", "top-level-key", "second-evidence-row"])
def test_an_error_in_a_pack_file_names_the_line_of_its_key(lane_repo, capsys, edit, key):
    """#55: errors in pack.toml named the table and the key, never the line."""
    assert cli("migrate", *lane_repo.args()) == Exit.OK
    path = lane_repo.root.joinpath(*PACK_FILE)
    path.write_text(edit(path.read_text()))
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if text.startswith(key))
    capsys.readouterr()
    assert cli("check", *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err.replace(str(lane_repo.root) + "/", "")
    assert re.search(rf"patches/fake/01/pack\.toml:{line}[ :]", err), err
