"""Faults injected for real, round 4 (issue 36): a symlink leaving the tree, control characters in an
identity, a regen SIGKILLed between its renames, a bundle under another Python, tracking.toml that lies,
a GitHub server that trickles or answers the wrong JSON type, a disk that fills up."""

from __future__ import annotations

import pytest
from conftest import cli
from test_export_policy import TESTER, _export, filed, person  # noqa: F401 (fixtures)

from harness.errors import Exit

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
