"""docs/packs/ is generated: each page's readiness is what 'harness status' computes (one function writes both),
and --check fails when a page disagrees with status or a note states readiness in prose."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
from conftest import REPO, cli

from harness.commands import status as status_cmd


@pytest.fixture
def pages(lane_repo, monkeypatch, capsys):
    """tools/pack_pages.py pointed at the fake repository, with 'status --json' computed there for real."""
    spec = importlib.util.spec_from_file_location("pack_pages_under_test", REPO / "tools" / "pack_pages.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    root = lane_repo.root
    monkeypatch.setattr(mod, "ROOT", root)
    monkeypatch.setattr(mod, "OUT", root / "docs" / "packs")
    monkeypatch.setattr(mod, "NOTES", root / "docs" / "packs" / "notes")
    (root / "docs" / "packs" / "notes").mkdir(parents=True)

    def command(*args, ok=(0, 1)):
        if "status" in args:
            before = capsys.readouterr()  # what main() printed so far goes back where it was
            assert cli("status", "--json", "--no-apply", *lane_repo.args()) in ok
            out = capsys.readouterr().out
            sys.stdout.write(before.out)
            sys.stderr.write(before.err)
            return out
        if "perf" in args:
            return "| pack | claim | value | measured on | host | receipt |\n| --- | --- | --- | --- | --- | --- |\n"
        return "(head evidence)\n"

    monkeypatch.setattr(mod, "command", command)
    monkeypatch.setattr("sys.argv", ["pack_pages.py"])
    return mod


def _story_verdict(lane_repo, capsys) -> list[str]:
    capsys.readouterr()
    cli("status", "01", "--no-apply", *lane_repo.args())
    out = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(out) if "ready to file against" in line.lower())
    # the verdict ends where what would make the pack ready begins (status only: a page names no run to make)
    end = next((i for i, line in enumerate(out) if line.strip() == "what would make it ready:"), len(out))
    return [line.strip() for line in out[start:end]]


def test_a_page_says_what_status_says_and_check_fails_once_status_changes(pages, lane_repo, capsys, monkeypatch):
    assert pages.main() == 0
    page = (lane_repo.root / "docs" / "packs" / "01.md").read_text()
    section = page[page.index("## Readiness"):page.index("## Lanes")]
    # the page's verdict lines are the very lines 'status 01' prints (status.verdict_lines writes both)
    assert [line.strip() for line in section.splitlines()[3:-2]] == _story_verdict(lane_repo, capsys)
    assert "not ready to file against 1.0" in section  # no receipt yet
    assert "not ready" in (lane_repo.root / "docs" / "packs" / "README.md").read_text()
    monkeypatch.setattr("sys.argv", ["pack_pages.py", "--check"])
    assert pages.main() == 0
    # a lane runs: status changes, the page written before no longer agrees, and --check says so
    assert cli("run", "01", "--quiet", *lane_repo.args()) == 0
    capsys.readouterr()
    assert pages.main() == 1
    assert "stale: docs/packs/01.md" in capsys.readouterr().out


def test_check_refuses_a_note_that_states_readiness(pages, lane_repo, capsys, monkeypatch):
    """The stale 'ready to file: 04, 07 and 16' sentence lived in a note, which --check copied as it was."""
    note = lane_repo.root / "docs" / "packs" / "notes" / "decisions.md"
    note.write_text("<!-- packs: 01 -->\n### Decisions\n\n`harness status` says 01 is ready to file.\n")
    assert pages.main() == 1
    err = capsys.readouterr().err
    assert "docs/packs/notes/decisions.md:4:" in err and "a note states readiness" in err
    note.write_text("<!-- packs: 01 -->\n### Decisions\n\nFiled against 1.0, already decided.\n")
    assert pages.main() == 0


def test_verdict_lines_are_status_own():
    assert status_cmd.verdict_lines("main", []) == ["READY to file against main"]
    assert status_cmd.verdict_lines("dev", [("lane", "lane x: no receipt")], indent="  ") == [
        "  not ready to file against dev (1 reason(s)):", "    [lane] lane x: no receipt"]
    assert json.dumps(status_cmd.verdict_lines("main", []))  # plain strings, what the page writes
