"""Faults the harness must survive with a documented exit code and nothing half-written (issue 15)."""

from __future__ import annotations

from conftest import cli

from harness.errors import Exit


def test_a_bug_in_the_harness_is_exit_internal_with_the_traceback_kept(lane_repo, monkeypatch, capsys):
    from harness.commands import list as list_cmd

    def broken(args):
        return {}["no such key"]  # a real KeyError raised inside a command

    monkeypatch.setenv("PATCHLANE_HOME", str(lane_repo.cache))
    monkeypatch.setattr(list_cmd, "main", broken)
    assert cli("list", *lane_repo.args()) == Exit.INTERNAL == 70
    err = capsys.readouterr().err
    assert err.startswith("harness: internal error: KeyError") and str(lane_repo.cache / "last-error.log") in err
    assert "Traceback" in (lane_repo.cache / "last-error.log").read_text()
