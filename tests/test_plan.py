"""``harness plan`` and the end of ``status PACK``: what to run to make packs ready, fitted to a device budget."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import cli
from test_filing import _github_repo

from harness.errors import Exit

ISSUE_02 = textwrap.dedent('''
    [packs.02]
    title = "an issue that waits on 01"
    target = "fake"
    kind = "issue"
    state = "planned"
    files = ["src/fakepkg/core.py"]
    depends_on = ["01"]
    requires = "cuda"
    base = "1.0"
    reproducer = "repros/fake/pack01.py"

    [[packs.02.evidence]]
    lane = "bug"
    figure = "max_err"
    label = "scale([1, 2, 3], [1, 0, 2]) vs the exact result"
    show = "largest error {value}"

    [[packs.02.lanes]]
    name = "bug"
    base = "1.0"
    patched = false
    expect = "BUG_REPRODUCED"
    timeout = 600
''')


@pytest.fixture
def repo(lane_repo):
    """The fake pack on a github.com repository with this repository's filing templates, its lanes on a GPU."""
    _github_repo(lane_repo)
    return lane_repo


def _plan(repo, capsys, *extra: str) -> dict:
    capsys.readouterr()
    assert cli("plan", "--json", *extra, *repo.args()) == Exit.OK
    return json.loads(capsys.readouterr().out)


def test_a_pack_never_run_on_a_gpu_gets_its_lanes_planned_as_one_task_with_guessed_minutes(repo, capsys):
    repo.write_tracking(requires="cuda", timeout=120)
    data = _plan(repo, capsys)
    task = data["packs"]["01"]["tasks"]
    assert [(t["lanes"], t["requires"], t["gpus"], t["minutes"], t["guessed"]) for t in task] == [
        (["bug", "fix"], "cuda", 1, 4.0, ["bug", "fix"])]  # paired: one run, both never ran (their limits)
    assert data["ready"] == ["01"] and data["device_min"] == 5.5  # 4 min of lanes + one bundle's start-up
    (bundle,) = data["bundles"]
    assert bundle["bundle"][:3] == ["harness", "bundle", "01"] and "--lane" in bundle["bundle"]
    assert bundle["bootstrap"][4:6] == ["--", "sweep"] and "01:fix" in bundle["bootstrap"]


def test_the_budget_decides_and_what_does_not_fit_says_why(repo, capsys):
    repo.write_tracking(requires="cuda", timeout=120)
    over = _plan(repo, capsys, "--budget-min", "5")
    assert over["ready"] == [] and over["tasks"] == []
    assert over["left_out"] == [{"pack": "01", "why": "over the budget: 5.5 device minutes with the packs chosen"}]
    none = _plan(repo, capsys, "--gpus", "0")
    assert none["left_out"] == [{"pack": "01", "why": "needs more GPUs than the host has (0)"}]


def test_a_dependency_brings_its_tasks_and_the_cheapest_pack_per_minute_goes_first(repo, capsys):
    repo.write_tracking(ISSUE_02, requires="cuda", timeout=120)
    both = _plan(repo, capsys, "--budget-min", "30")
    assert both["ready"] == ["01", "02"]  # 02 alone would need 01's tasks: 01 is cheaper per pack made ready
    assert {(t["pack"], tuple(t["lanes"])) for t in both["tasks"]} == {("01", ("bug", "fix")), ("02", ("bug",))}
    assert both["packs"]["02"]["depends_on"] == ["01"]
    only = _plan(repo, capsys, "--budget-min", "8")
    assert only["ready"] == ["01"] and only["left_out"][0]["pack"] == "02"
    assert "over the budget" in only["left_out"][0]["why"]


def test_what_runs_cannot_clear_is_a_blocker_not_a_task(repo, capsys):
    repo.write_tracking(ISSUE_02.replace('state = "planned"', 'state = "held"\nheld = "waits"'),
                             requires="cuda", timeout=120)
    data = _plan(repo, capsys, "--budget-min", "30")
    assert data["ready"] == ["01"]
    assert data["packs"]["02"]["blockers"] and data["packs"]["02"]["blockers"][0].startswith("[state] state held")
    capsys.readouterr()
    assert cli("plan", "--budget-min", "30", *repo.args()) == Exit.OK
    assert "not to be filed (their state or kind), not planned: 02" in capsys.readouterr().out


def test_status_of_one_pack_ends_with_what_would_make_it_ready(repo, capsys):
    repo.write_tracking(requires="cuda", timeout=120)
    capsys.readouterr()
    assert cli("status", "01", *repo.args()) == Exit.OK
    out = capsys.readouterr().out
    assert "what would make it ready:" in out and "run bug,fix on 1.0 [GPU x1, 4.0 min; guessed: bug, fix" in out
    assert "GPU host: python3 -m harness.bootstrap dist/plan-fake-1.0.tar.xz -- sweep 01" in out
    assert "no receipt -- no receipt" not in out
    capsys.readouterr()
    assert cli("status", "01", "--json", *repo.args()) == Exit.OK
    to_ready = json.loads(capsys.readouterr().out)["packs"][0]["to_ready"]
    assert to_ready["tasks"][0]["lanes"] == ["bug", "fix"] and to_ready["ready"] is False


def test_a_bad_budget_is_a_usage_error(repo, capsys):
    assert cli("plan", "--budget-min", "0", *repo.args()) == Exit.USAGE
    assert "--budget-min 0" in capsys.readouterr().err


def test_a_two_rank_patched_lane_does_not_pull_in_a_one_process_baseline(repo, capsys):
    """Pack 10's shape: bug and fix on one GPU, fix at two ranks with the same args. On a one-GPU host the pair
    stays runnable and only the two-rank lane needs a bigger one."""
    repo.write_tracking(textwrap.dedent('''
        [[packs.01.lanes]]
        name = "fix-tp2"
        base = "1.0"
        patched = true
        expect = "FIX_VALIDATED"
        nproc = 2
        timeout = 120
    '''), requires="cuda", timeout=120)
    data = _plan(repo, capsys, "--gpus", "1")
    assert sorted((t["lanes"], t["gpus"]) for t in data["packs"]["01"]["tasks"]) == [
        (["bug", "fix"], 1), (["fix-tp2"], 2)]
    assert data["left_out"] == [{"pack": "01", "why": "needs more GPUs than the host has (1)"}]


def test_a_suite_that_reported_no_case_count_says_so_in_words(monkeypatch):
    """A newcomer's round 4, item 10: status said "suite at main: 0 of ? cases run"."""
    from types import SimpleNamespace

    from harness.filing import readiness

    result = SimpleNamespace(missing=[], collected=None, ran=0, comparison=SimpleNamespace(reasons=()))
    monkeypatch.setattr(readiness.suite_check, "suite_lanes", lambda pack, base: ["suite-main-base"])
    monkeypatch.setattr(readiness.suite_check, "suite_verdict", lambda ctx, pack, base: result)
    ctx = SimpleNamespace(root=Path("/nonexistent"))
    reasons, _ = readiness.suite_reasons(ctx, SimpleNamespace(id="01"), "main")
    assert [r.text for r in reasons] == ["suite at main: its runs reported no number of cases collected (0 ran on "
                                         "the base): run the shards again"]
    assert "?" not in reasons[0].text and "None" not in reasons[0].text
