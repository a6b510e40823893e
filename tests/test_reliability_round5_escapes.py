"""Faults injected for real, round 5 (issue 45, items 9-20, 22, 23): an export that would delete a directory
it never wrote, a new pack outside the repository, a link chain in a bundle, a hostile or truncated bundle at
the bootstrap, an identity that other tools split into two lines, paths that are not regular files, a full
disk, a read-only checkout, a lost suite selection, concurrent selection writers, a killed suite lane's
scratch, a large comparison as JSON, one pull request written two ways, absurd pack ids."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import test_export_policy as _policy
from conftest import cli
from test_export_policy import TESTER, _export

from harness.errors import Exit

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
