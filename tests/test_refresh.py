"""``harness refresh`` and ``harness bisect`` on synthetic upstream moves built here.

A bare mirror of the fake upstream holds the pinned commit and, on a branch each, the moves a real upstream
makes: take our patch verbatim, take it reworded (with another change in the same commit), change the context
of our hunk, fix the bug another way, touch nothing we carry. Each must get its class; bisect must find the
commit that changed the bug lane's verdict.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import CORE_BUGGY, cli, fake_tree, git

from harness.errors import Exit

MIRROR_NAME = "example.invalid+fake.git"  # what pins.mirror_name makes of https://example.invalid/fake
CORE = "src/fakepkg/core.py"

LANES = textwrap.dedent('''
    [[packs.01.lanes]]
    name = "bug-main"
    base = "main"
    patched = false
    expect = "BUG_REPRODUCED"

    [[packs.01.lanes]]
    name = "fix-main"
    base = "main"
    patched = true
    expect = "FIX_VALIDATED"
''')


class Upstream:
    """A work repository of fakepkg whose branches are pushed to a bare mirror."""

    def __init__(self, tmp_path: Path) -> None:
        self.work = tmp_path / "upstream-work"
        for name, text in fake_tree("1.0", CORE_BUGGY).items():
            (self.work / name).parent.mkdir(parents=True, exist_ok=True)
            (self.work / name).write_text(text)
        git(self.work, "init", "-q", "-b", "main")
        git(self.work, "add", "-A")
        git(self.work, "commit", "-q", "-m", "fakepkg 1.0")
        self.pin = self.head()
        self.mirrors = tmp_path / "mirrors"
        self.mirrors.mkdir()
        git(tmp_path, "init", "-q", "--bare", str(self.mirrors / MIRROR_NAME))
        self.push("main")

    def head(self) -> str:
        return git(self.work, "rev-parse", "HEAD").strip()

    def push(self, branch: str) -> None:
        git(self.work, "push", "-q", "-f", str(self.mirrors / MIRROR_NAME), f"HEAD:refs/heads/{branch}")

    def branch(self, name: str) -> None:
        git(self.work, "checkout", "-q", "-B", name, self.pin)

    def commit(self, message: str, edit) -> str:
        path = self.work / CORE
        path.write_text(edit(path.read_text()))
        git(self.work, "commit", "-q", "-am", message)
        return self.head()


@pytest.fixture
def moved(lane_repo, tmp_path):
    """The lane repository on a git base 'main' pinned at the upstream's first commit, with one branch a move."""
    up = Upstream(tmp_path)
    path = lane_repo.root / "upstream" / "fake.toml"
    path.write_text(path.read_text() + textwrap.dedent(f'''
        [bases.main]
        version = "main@{up.pin[:7]}"
        role = "upstream main"

        [bases.main.git]
        commit = "{up.pin}"
        ref = "refs/heads/main"
        date = "2026-01-01"
    '''))
    lane_repo.write_tracking(extra=LANES)
    fixed_line = "[x * wi for x, wi in zip(xs, w)]"
    # 1. our patch, verbatim (git am of the very file)
    up.branch("verbatim")
    git(up.work, "am", "-q", str(next((lane_repo.root / "patches" / "fake" / "01").glob("*.patch"))))
    up.push("verbatim")
    # 2. reworded: our change with another one in the same commit, another message
    up.branch("reworded")
    up.commit("core: weights per element, and say so", lambda t: t.replace("[x * w[0] for x in xs]", fixed_line)
              .replace('"""Scaling helpers."""', '"""Scaling helpers, one weight per element."""'))
    up.push("reworded")
    # 3. the context of our hunk changes (the comment line above the line we change)
    up.branch("context")
    up.commit("core: unrelated cleanup", lambda t: t.replace("def total(xs):\n    return sum(xs)",
                                                             "def total(xs):\n    return sum(xs, 0)"))
    context = up.commit("core: reword a comment", lambda t: t.replace("# multiply each element by its weight",
                                                                       "# each element times its weight"))
    up.push("context")
    # 4. the bug fixed another way, after two unrelated commits, with one more after it
    up.branch("another-way")
    up.commit("core: total starts from zero", lambda t: t.replace("return sum(xs)", "return sum(xs, 0)"))
    up.commit("core: a blank line", lambda t: t + "\n")
    fix = up.commit("core: scale each element by its own weight",
                    lambda t: t.replace("return [x * w[0] for x in xs]", "return [a * b for a, b in zip(xs, w)]"))
    up.commit("core: trailing newline", lambda t: t + "\n")
    up.push("another-way")
    # 5. nothing we carry
    up.branch("unrelated")
    up.commit("core: total starts from zero", lambda t: t.replace("return sum(xs)", "return sum(xs, 0)"))
    up.push("unrelated")
    git(lane_repo.root, "init", "-q")
    git(lane_repo.root, "add", "-A")
    git(lane_repo.root, "commit", "-q", "-m", "checkout")
    lane_repo.up, lane_repo.marks = up, {"context": context, "fix": fix}
    return lane_repo


def _refresh(repo, *argv: str, capsys) -> tuple[int, dict]:
    capsys.readouterr()
    code = cli("refresh", "--json", "--git-mirrors", str(repo.up.mirrors), *argv, *repo.args())
    out = capsys.readouterr()
    assert out.out, out.err
    return code, json.loads(out.out)


def _one(doc: dict) -> dict:
    [base] = doc["bases"]
    [pack] = base["packs"]
    return pack


@pytest.mark.parametrize(("branch", "klass", "code"), [
    ("verbatim", "landed", Exit.OK),
    ("reworded", "landed-modified", Exit.OK),
    ("context", "conflicts", Exit.APPLY),
    ("another-way", "superseded", Exit.OK),
    ("unrelated", "still-needed", Exit.OK),
])
def test_each_upstream_move_gets_its_class(moved, capsys, branch, klass, code):
    got, doc = _refresh(moved, "--to", branch, capsys=capsys)
    pack = _one(doc)
    assert (pack["class"], got) == (klass, code), pack
    base = doc["bases"][0]
    assert base["old"] == moved.up.pin and base["history"]["known"]
    commits = [c["subject"] for c in pack["commits"]]
    if branch == "verbatim":
        assert commits == ["core: use each element's own weight"] and "patch-id" in pack["detail"]
    elif branch == "reworded":
        assert commits == ["core: weights per element, and say so"] and "use each element" in pack["range_diff"]
    elif branch == "context":
        assert commits == ["core: reword a comment"]  # the cleanup of total() touched none of our lines
    elif branch == "another-way":
        assert pack["bug_sentinel"] == "BUG_ABSENT"
    else:
        assert pack["bug_sentinel"] == "BUG_REPRODUCED" and pack["applies"] == "unchanged"


def test_the_checkout_is_left_as_it_was_and_the_proposal_is_one_commit_that_checks(moved, capsys):
    before = git(moved.root, "status", "--porcelain")
    code, doc = _refresh(moved, "--to", "unrelated", "--propose", capsys=capsys)
    assert code == Exit.OK and git(moved.root, "status", "--porcelain") == before
    branch = doc["bases"][0]["branch"]
    assert branch.startswith("refresh/fake-main-")
    message = git(moved.root, "log", "-1", "--format=%B", branch)
    assert "pack 01: still-needed" in message and "Lanes made stale" in message
    manifest = git(moved.root, "show", f"{branch}:upstream/fake.toml")
    new = git(moved.up.work, "rev-parse", "unrelated").strip()
    assert f'commit = "{new}"' in manifest and f'main@{new[:7]}' in manifest
    assert git(moved.root, "rev-list", "--count", f"HEAD..{branch}").strip() == "1"
    work = moved.root.parent / "proposal-check"
    git(moved.root, "worktree", "add", "-q", str(work), branch)
    assert cli("check", "--apply", "--git-mirrors", str(moved.up.mirrors), "--root", str(work),
               "--cache", str(moved.cache)) == Exit.OK


@pytest.mark.parametrize(("branch", "next_packs", "removed"), [
    ("verbatim", [], ["01"]),  # upstream took the patch: the training image no longer carries it
    ("another-way", [], ["01"]),  # fixed another way: superseded, out
    ("unrelated", ["01"], []),  # still needed: the same series, on a new pin, so its lanes run again
])
def test_refresh_proposes_the_next_stack(moved, capsys, branch, next_packs, removed):
    code, doc = _refresh(moved, "--to", branch, capsys=capsys)
    found = doc["bases"][0]["stack"]
    assert [p["id"] for p in found["current"]["packs"]] == ["01"]
    assert [p["id"] for p in found["next"]["packs"]] == next_packs
    assert [r["pack"] for r in found["removed"]] == removed
    assert found["rerun"] == next_packs
    assert found["current"]["base_pin"] == moved.up.pin
    assert found["next"]["base_pin"] == git(moved.up.work, "rev-parse", branch).strip()
    assert found["current"]["version"] != found["next"]["version"]  # another pin: another stack label
    if removed:
        klass = _one(doc)["class"]
        assert found["removed"][0]["why"].startswith(f"{klass} at the head")
        assert found["next"]["left_out"][0] == found["removed"][0]


def test_the_proposal_commit_names_the_next_stack(moved, capsys):
    code, doc = _refresh(moved, "--to", "verbatim", "--propose", "--no-lanes", capsys=capsys)
    message = git(moved.root, "log", "-1", "--format=%B", doc["bases"][0]["branch"])
    stack = doc["bases"][0]["stack"]
    assert f"Stack: {stack['current']['version']} (01) -> {stack['next']['version']} (no pack)" in message
    assert "pack 01 leaves the stack: landed at the head" in " ".join(message.split())


def test_a_proposal_is_committed_as_the_person_now_with_wrapped_lines(moved, tmp_path, capsys, monkeypatch):
    """A newcomer's round 4, item 11: the proposal was committed as patch-lane, dated 2000-01-01, in long lines."""
    from harness.base import clock

    config = tmp_path / "gitconfig"
    config.write_text("[user]\n\tname = Ada Tester\n\temail = ada@example.invalid\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    code, doc = _refresh(moved, "--to", "unrelated", "--propose", "--no-lanes", capsys=capsys)
    assert code == Exit.OK
    branch = doc["bases"][0]["branch"]
    who = git(moved.root, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%ad", "--date=short", branch).strip()
    assert who == f"Ada Tester <ada@example.invalid>|Ada Tester <ada@example.invalid>|{clock.today().isoformat()}"
    message = git(moved.root, "log", "-1", "--format=%B", branch)
    assert all(len(line) <= 72 for line in message.splitlines()), message
    assert "Lanes made stale" in message


def test_a_shallow_mirror_says_the_history_is_unknown_instead_of_guessing(moved, tmp_path, capsys):
    shallow = tmp_path / "shallow-mirrors"
    shallow.mkdir()
    head = git(moved.up.work, "rev-parse", "context").strip()
    git(tmp_path, "init", "-q", "--bare", str(shallow / MIRROR_NAME))
    for sha in (moved.up.pin, head):  # the two commits, one deep each: as the shared mirrors are
        git(shallow / MIRROR_NAME, "fetch", "-q", "--depth", "1", str(moved.up.mirrors / MIRROR_NAME), sha)
    git(shallow / MIRROR_NAME, "update-ref", "refs/heads/context", head)
    capsys.readouterr()
    code = cli("refresh", "--json", "--to", "context", "--git-mirrors", str(shallow), *moved.args())
    out = capsys.readouterr()
    assert out.out, out.err
    pack = _one(json.loads(out.out))
    assert code == Exit.APPLY and pack["class"] == "conflicts" and pack["commits"] == []
    assert "unknown" in pack["detail"] and "shallow" in pack["detail"]


def test_bisect_finds_the_commit_that_changed_the_bug_lane(moved, capsys):
    capsys.readouterr()
    code = cli("bisect", "01", "--lane", "bug-main", "--bad", "another-way", "--json",
               "--git-mirrors", str(moved.up.mirrors), *moved.args())
    doc = json.loads(capsys.readouterr().out)
    assert code == Exit.OK and doc["first"]["sha"] == moved.marks["fix"], doc
    assert doc["good_sentinel"] == "BUG_REPRODUCED" and doc["first"]["sentinel"] == "BUG_ABSENT"
    assert len(doc["steps"]) <= 3  # four commits: a binary search, not a walk


def test_bisect_names_the_fix_inside_a_merged_branch_not_the_merge(moved, capsys):
    """Round 6, item 5: a binary search over date order named the merge; the search follows first parents,
    then goes down the branch the merge brought in."""
    up = moved.up
    git(up.work, "checkout", "-q", "-B", "side", up.pin)
    up.commit("core: total starts from zero", lambda t: t.replace("return sum(xs)", "return sum(xs, 0)"))
    fix = up.commit("core: scale each element by its own weight",
                    lambda t: t.replace("return [x * w[0] for x in xs]", "return [a * b for a, b in zip(xs, w)]"))
    up.commit("core: a blank line", lambda t: t + "\n")
    git(up.work, "checkout", "-q", "-B", "merged", up.pin)
    for i in range(3):  # mainline work dated after the branch's commits
        (up.work / f"notes{i}.txt").write_text(f"note {i}\n")
        git(up.work, "add", "-A")
        git(up.work, "commit", "-q", "-m", f"docs: note {i}")
    git(up.work, "merge", "-q", "--no-ff", "-m", "Merge branch 'side'", "side")
    merge = up.head()
    (up.work / "after.txt").write_text("after\n")
    git(up.work, "add", "-A")
    git(up.work, "commit", "-q", "-m", "docs: after the merge")
    up.push("merged")
    capsys.readouterr()
    code = cli("bisect", "01", "--lane", "bug-main", "--bad", "merged", "--json",
               "--git-mirrors", str(up.mirrors), *moved.args())
    doc = json.loads(capsys.readouterr().out)
    assert code == Exit.OK and doc["first"]["sha"] == fix != merge, doc
    assert doc["first"]["merge"] is False and doc["first"]["sentinel"] == "BUG_ABSENT"
    ran = [s["sha"] for s in doc["steps"]]
    assert len(ran) == len(set(ran))  # no commit run twice


def test_the_bisect_doc_names_a_lane_that_exists_and_bisect_takes_python():
    """A newcomer's round 4, item 7: the doc's example lane did not exist; the hint named a --python bisect lacked."""
    import re

    from harness.lane.tracking import Tracking
    from harness.main import build_parser

    root = Path(__file__).resolve().parent.parent
    pack, lane = re.search(r"harness bisect (\d\d) --lane (\S+)", (root / "docs" / "refresh.md").read_text()).groups()
    assert lane in [x.name for x in Tracking.load(root).pack(pack).lanes]
    args = build_parser("bisect").parse_args(["bisect", pack, "--lane", lane, "--python", sys.executable])
    assert args.python == sys.executable


def test_bisect_between_one_commit_and_itself_runs_nothing(moved, capsys):
    """A newcomer's round 4, item 7: with the pin as --bad, bisect ran the lane twice (94 s) to report nothing."""
    capsys.readouterr()
    code = cli("bisect", "01", "--lane", "bug-main", "--bad", moved.up.pin, "--json",
               "--git-mirrors", str(moved.up.mirrors), *moved.args())
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert code == Exit.OK and doc["first"] is None and doc["steps"] == [] and doc["good_sentinel"] is None
    assert "nothing to find, no lane run" in out.err


MITIGATION = textwrap.dedent('''
    [packs.01.mitigation]
    what = "a local workaround until upstream's tinydep pin reaches 1.2"
    retire_when = "fakepkg main requires tinydep >= 1.2"
    status = "active"

    [[packs.01.mitigation.retire]]
    kind = "requirement"
    target = "fake"
    base = "main"
    package = "tinydep"
    version = ">=1.2"
''')


def test_a_retirement_condition_is_data_that_refresh_evaluates_at_the_new_head(moved, capsys):
    up = moved.up
    up.branch("dep")
    pyproject = up.work / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "1.0"\n', 'version = "1.0"\n'
                                                       'dependencies = ["tinydep==1.2"]\n'))
    git(up.work, "commit", "-q", "-am", "require tinydep 1.2")
    up.push("dep")
    moved.write_tracking(extra=LANES.replace("[[packs.01.lanes]]", MITIGATION + "\n[[packs.01.lanes]]", 1))
    _, doc = _refresh(moved, "--to", "dep", "--no-lanes", capsys=capsys)
    [ret] = doc["retirements"]
    assert ret["pack"] == "01" and ret["holds"] is True
    assert "pins tinydep==1.2" in ret["conditions"][0]["why"]
    _, doc = _refresh(moved, "--to", "unrelated", "--no-lanes", capsys=capsys)
    assert doc["retirements"][0]["holds"] is None  # the head names no tinydep: cannot be told, never "true"


def test_a_retirement_condition_with_an_unknown_key_is_refused_naming_it(moved, capsys):
    moved.write_tracking(extra=LANES.replace("[[packs.01.lanes]]", MITIGATION.replace(
        'version = ">=1.2"', 'version = ">=1.2"\nminimum = "1.2"') + "\n[[packs.01.lanes]]", 1))
    capsys.readouterr()
    assert cli("check", *moved.args()) == Exit.USAGE
    assert "retire[0]: unknown key 'minimum'" in capsys.readouterr().err


def test_the_proposal_derives_the_suite_again_and_names_the_threads_whose_state_changed(moved, capsys, tmp_path,
                                                                                        monkeypatch):
    """Issue 46, item 2: the move re-selects each recorded suite at the new head (the drift shown, the file
    rewritten on the proposal's branch) and lists the threads whose state is no longer tracking.toml's."""
    up = moved.up
    # a recorded selection at main, derived at the pin: no test imports the core yet
    assert cli("suite", "select", "01", "--base", "main", "--git-mirrors", str(up.mirrors), *moved.args()) == Exit.OK
    # the pack lives on a PR that upstream merged meanwhile (recorded answer; tracking.toml says open)
    path = moved.root / "tracking.toml"
    path.write_text(path.read_text() + '\n[[packs.01.threads]]\nurl = "https://github.com/example/fake/pull/7"\n'
                    'role = "pr"\nstate = "open"\n')
    git(moved.root, "add", "-A")
    git(moved.root, "commit", "-q", "-m", "selection and thread")
    rec = tmp_path / "recorded"
    (rec / "repos" / "example" / "fake" / "pulls").mkdir(parents=True)
    (rec / "search" / "issues").mkdir(parents=True)  # what makes a directory of recorded answers one
    (rec / "repos" / "example" / "fake" / "pulls" / "7.json").write_text(json.dumps(
        {"number": 7, "state": "closed", "merged": True, "merged_at": "2026-02-01T00:00:00Z", "draft": False,
         "updated_at": "2026-02-01T00:00:00Z", "title": "core: use each element's own weight"}))
    monkeypatch.setenv("PATCHLANE_GITHUB_RECORDED", str(rec))
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("GH_TOKEN", raising=False)
    # upstream adds a test of the core module: the selection at the head gains it
    up.branch("new-test")
    (up.work / "tests").mkdir(exist_ok=True)
    (up.work / "tests" / "test_core.py").write_text("from fakepkg.core import scale\n\n\ndef test_scale():\n"
                                                    "    assert scale([1], [2]) == [2]\n")
    git(up.work, "add", "-A")
    git(up.work, "commit", "-q", "-m", "tests: cover scale")
    up.push("new-test")
    code, doc = _refresh(moved, "--to", "new-test", "--propose", "--no-lanes", capsys=capsys)
    assert code == Exit.OK
    [sel] = doc["bases"][0]["suites"]
    assert sel["pack"] == "01" and any("tests/test_core.py" in d for d in sel["drift"]), sel
    assert doc["threads"]["changes"] == [{"pack": "01", "url": "https://github.com/example/fake/pull/7",
                                          "old": "open", "new": "merged",
                                          "action": "merged upstream: run `harness absorbed fake`"}]
    branch = doc["bases"][0]["branch"]
    message = git(moved.root, "log", "-1", "--format=%B", branch)
    assert "Suites derived again at the head" in message and "tests/test_core.py" in message
    assert "Threads whose state changed:" in message and "pull/7 open -> merged" in message
    assert "tests/test_core.py" in git(moved.root, "show", f"{branch}:suites/01/main.toml")
    assert "tests/test_core.py" not in (moved.root / "suites" / "01" / "main.toml").read_text()  # checkout as it was


def test_a_misspelt_target_is_a_usage_error_naming_the_targets(lane_repo, capsys):
    """refresh --target mamab exited 0 with an empty table: a typo read as "nothing to refresh"."""
    from conftest import cli

    from harness.errors import Exit

    assert cli("refresh", "--target", "fak", *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert "--target fak: no pack has that target; did you mean fake?" in err and "(targets: fake)" in err
