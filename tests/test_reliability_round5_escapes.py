"""Faults injected for real, round 5 (issue 45, items 9-20, 22, 23): an export that would delete a directory
it never wrote, a new pack outside the repository, a link chain in a bundle, a hostile or truncated bundle at
the bootstrap, an identity that other tools split into two lines, paths that are not regular files, a full
disk, a read-only checkout, a lost suite selection, concurrent selection writers, a killed suite lane's
scratch, a large comparison as JSON, one pull request written two ways, absurd pack ids."""

from __future__ import annotations

import pytest
import test_export_policy as _policy
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
