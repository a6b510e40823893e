"""The body check (`harness body --check`, `filing.check`): layout, budget, anchors, vocabulary, evidence
bases, names; readiness's `body-check` reason; and docs/filings re-rendering unchanged from the receipts."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from conftest import REPO, cli, isolated_env, make_lane_repo, overwrite_with

from harness import filing
from harness.base.store import Store
from harness.errors import Exit
from harness.filing import check as body_check
from harness.filing import readiness
from harness.filing.parts import hunk_locations, split_problem
from harness.filing.readiness import ReasonCode
from harness.lane.lanes import Context
from harness.lane.tracking import Tracking

# Upstream mirrors: the docs' PR bodies read the upstream's PR template from its tree (read before the
# autouse fixture clears the variable; else ../shared/mirrors beside the clone, as .ci/run uses).
MIRRORS = os.environ.get("PATCHLANE_GIT_MIRRORS") or str(REPO.parent / "shared" / "mirrors")

# A problem statement of several paragraphs: a sentence ending in ':' with its list, a second list
# paragraph, then the change.
MESSAGE = """\
The scale helper multiplies every element by the first weight, so two cases go wrong:

- a weight vector with a zero in front scales everything to zero;
- a weight vector shorter than the input

  raises nothing and silently reuses w[0].

- the same holds for the in-place variant.

Use each element's own weight. The in-place variant follows.
"""


@pytest.fixture(scope="session")
def _ran_once(tmp_path_factory):
    """One real CPU run of the fake pack on a github.com repository with the filing templates, for every test."""
    with isolated_env():
        repo = make_lane_repo(tmp_path_factory.mktemp("body-check-ran"))
        shutil.copytree(REPO / "templates", repo.root / "templates", dirs_exist_ok=True)
        m = repo.root / "upstream" / "fake.toml"
        m.write_text(m.read_text().replace("https://example.invalid/fake", "https://github.com/acme/fake"))
        assert cli("run", "01", "--quiet", *repo.args()) == Exit.OK
    return repo


@pytest.fixture
def ran(_ran_once, lane_repo, capsys):
    capsys.readouterr()
    return overwrite_with(_ran_once, lane_repo)


def _rewrite_message(repo, message: str) -> None:
    [path] = (repo.root / "patches" / "fake" / "01").glob("*.patch")
    text = path.read_text()
    head, rest = text.split("\n\n", 1)
    path.write_text(head + "\n\n" + message + "\nUpstream-Status: Pending\nPack: 01\n" + rest[rest.index("---\n"):])


def _set_kind(repo, kind: str) -> None:
    path = repo.root / "tracking.toml"
    text = path.read_text().replace('kind = "pr"  # a pull request', f'kind = "{kind}"')
    if kind == "bug-report":  # no patch of ours: the problem is the pack's summary, the fix lane goes
        text = text.replace('title = "scale', f'summary = """{MESSAGE.split(chr(10) + chr(10) + "Use")[0]}"""\n'
                                              'title = "scale')
        second_row = text.index("[[packs.01.evidence]]", text.index("[[packs.01.evidence]]") + 1)
        lanes = text.index("[[packs.01.lanes]]")
        text = text[:second_row] + text[lanes:text.index("[[packs.01.lanes]]", lanes + 1)]
        shutil.rmtree(repo.root / "patches")
    if kind == "comment":
        text += ('\n[[packs.01.threads]]\nurl = "https://github.com/acme/fake/pull/4"\n'
                 'role = "filing target"\nstate = "open"\n')
    path.write_text(text)


def _render(repo) -> filing.Rendered:
    t = Tracking.load(repo.root)
    return filing.render(repo.root, t, t.pack("01"))


def _rules(findings) -> list[str]:
    return [f.rule for f in findings]


# ---------------------------------------------------------------------------------------------- layout

def test_split_problem_keeps_a_colon_sentence_with_its_lists():
    paras = ["Two cases go wrong:", "- a\n- b", "- c", "The fix does this."]
    assert split_problem(paras) == (["Two cases go wrong:", "- a\n- b", "- c"], ["The fix does this."])
    assert split_problem(["One paragraph.", "The change."]) == (["One paragraph."], ["The change."])
    assert split_problem(["Ends with:", "a paragraph it introduces", "rest"]) == \
        (["Ends with:", "a paragraph it introduces"], ["rest"])


@pytest.mark.parametrize("kind", ["pr", "issue", "comment", "bug-report"])
def test_every_kind_keeps_the_problem_together_before_where_and_headings(ran, kind):
    _rewrite_message(ran, MESSAGE)
    _set_kind(ran, kind)
    body = _render(ran).body
    lines = body.splitlines()
    colon = lines.index("The scale helper multiplies every element by the first weight, so two cases go wrong:")
    last_item = next(i for i, ln in enumerate(lines) if ln.startswith("- the same holds for the in-place"))
    where = next(i for i, ln in enumerate(lines) if ln.startswith(("Where, in ", "#", "What we measured")))
    assert colon < last_item < where  # every item of the problem comes before the "Where" list or a heading
    assert all(not lines[i].startswith("#") for i in range(colon, last_item))  # no heading inside it
    assert not [f for f in body_check.own_findings(_render(ran)) if f.rule == "layout"]


def test_layout_rule_names_the_heading_that_interrupts_a_colon_sentence():
    body = "Two cases go wrong:\n\nWhere, in x 1.0:\n\n- `a.py` line 3\n\n### Proposed fix\n\n- case one\n"
    found = body_check._layout(body_check.blocks(body))
    assert [(f.line, f.rule) for f in found] == [(3, "layout")]
    assert "line 1" in found[0].text
    ok = "Two cases go wrong:\n\n- one\n- two\n\n### Proposed fix\n\nDo this:\n\n```python\nx = 1\n```\n"
    assert body_check._layout(body_check.blocks(ok)) == []


# ---------------------------------------------------------------------------------------------- budget

def test_prose_words_skip_code_tables_details_links_and_checklists():
    body = ("One two three.\n\n```python\nnot counted at all\n```\n\n| a | b |\n| --- | --- |\n| c | d |\n\n"
            "<details><summary>x</summary>\n\nfolded words\n\n</details>\n\n"
            "- [`f.py` line 3](https://github.com/a/b/blob/c/f.py#L3), in `g`\n- [ ] I have added tests\n")
    assert body_check.prose_words(body) == 3 + 6


def test_a_body_over_budget_fails_with_its_count(ran):
    rendered = _render(ran)
    assert "budget" not in _rules(body_check.own_findings(rendered))
    long = dataclasses.replace(rendered, body=rendered.body + "\n" + "word " * 400 + "\n")
    [f] = [f for f in body_check.own_findings(long) if f.rule == "budget"]
    assert re.match(r"\d+ words of prose \(at most 350 ", f.text)
    middle = dataclasses.replace(rendered, body=rendered.body + "\n" + "word " * 240 + "\n")
    assert 250 < body_check.prose_words(middle.body) <= 350
    assert "budget" not in _rules(body_check.own_findings(middle))  # within a PR's 350
    comment = dataclasses.replace(middle, pack=dataclasses.replace(rendered.pack, kind="comment"))
    assert "budget" in _rules(body_check.own_findings(comment))  # over a comment's 250


# ---------------------------------------------------------------------------------------------- anchors, names

PATCH = """\
diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,3 +1,4 @@ from pkg.very.long.module.name.that.git.cuts import somethi
 import os
 from pkg.very.long.module.name.that.git.cuts import something_long
+from pkg.other import keep_in_fp32_params
 
@@ -10,3 +11,4 @@ class Thing(Base):
     def f(self):
         return 1
+    keep_in_fp32_params = ()
"""


def test_anchors_are_whole_lines_or_symbols_never_git_s_cut_header(tmp_path):
    path = tmp_path / "x.patch"
    path.write_text(PATCH)
    locs = hunk_locations(path)
    assert [loc.context for loc in locs] == [
        "after from pkg.very.long.module.name.that.git.cuts import something_long", "Thing"]


def test_a_cut_anchor_and_a_misspelt_name_are_named_by_line(ran):
    rendered = dataclasses.replace(_render(ran), diff=PATCH)
    body = rendered.body + ("\n- [`pkg/mod.py` line 2](https://x), new code after `from pkg.very.long.module.na`\n"
                            "- [`pkg/mod.py` line 12](https://x), in `Thing`\n\n"
                            "A host names them in keep_fp32_params; mark_keep_in_fp32 stays.\n")
    lines = body.splitlines()
    found = body_check.own_findings(dataclasses.replace(rendered, body=body))
    by_rule = {f.rule: f for f in found if f.rule != "anchor"}  # (the fake diff is not the pack's: see _where)
    assert set(by_rule) == {"cut anchor", "name"}
    assert lines[by_rule["cut anchor"].line - 1].endswith("`from pkg.very.long.module.na`")
    assert "`keep_fp32_params`" in by_rule["name"].text and "`keep_in_fp32_params`" in by_rule["name"].text
    assert by_rule["name"].line == len(lines)


def test_a_real_upstream_name_off_the_added_lines_is_no_misspelling(ran):
    """A near miss of an added name is flagged only when neither the diff (context and removed lines too) nor the
    touched files at the filing base hold it; a real misspelling beside them is still named."""
    rendered = dataclasses.replace(_render(ran), diff=PATCH.replace(" import os\n", "-import keep_in_fp32_paramz\n"),
                                   base_text="def keep_in_fp32_params_old():\n    pass\n")
    body = rendered.body + ("\nUpstream keeps keep_in_fp32_paramz and keep_in_fp32_params_old; "
                            "the host names keep_fp32_params.\n")
    found = [f for f in body_check.own_findings(dataclasses.replace(rendered, body=body)) if f.rule == "name"]
    assert [f.text.split("`")[1] for f in found] == ["keep_fp32_params"]
    bare = dataclasses.replace(rendered, body=body, base_text="")
    assert "keep_in_fp32_params_old" in {f.text.split("`")[1] for f in body_check.own_findings(bare)
                                         if f.rule == "name"}


@pytest.mark.parametrize("word", ["pack", "sentinel", "lane", "receipts", "harness"])
def test_our_vocabulary_in_a_body_is_a_lint_finding(word):
    assert _rules(filing.lint(f"ok\nthe {word} shows it\n")) == ["internal vocabulary"]
    assert filing.lint("packed and unpacked tensors\n") == []


def test_evidence_from_another_base_is_named_at_its_table_row(ran):
    path = ran.root / "tracking.toml"
    path.write_text(path.read_text().replace('base = "1.0"\nreproducer', 'base = "1.0"\nfiling_base = "1.1"\n'
                                                                         'reproducer'))
    ran.add_base("1.1", (ran.root / "repros" / "fake" / "pack01.py").read_text())
    rendered = _render(ran)
    found = [f for f in body_check.own_findings(rendered) if f.rule == "evidence base"]
    lines = rendered.body.splitlines()
    assert [lines[f.line - 1].split(" | ")[0] for f in found] == \
        ["| scale([1, 2, 3], [1, 0, 2]) vs the exact result", "| the same"]


# ---------------------------------------------------------------------------------------------- CLI, readiness

def test_check_cli_passes_a_clean_body_and_fails_an_injected_fault(ran, capsys):
    assert cli("body", "--check", "01", "--json", *ran.args()) == Exit.OK
    [result] = json.loads(capsys.readouterr().out)
    assert result["ok"] and result["findings"] == [] and result["budget"] == 350
    path = ran.root / "tracking.toml"
    path.write_text(path.read_text().replace('label = "the same"', 'label = "the same sentinel"'))
    assert cli("body", "--check", "01", "--json", *ran.args()) == Exit.LINT
    out = capsys.readouterr()
    [result] = json.loads(out.out)
    assert [f["rule"] for f in result["findings"]] == ["internal vocabulary"]
    assert re.search(r"pack 01 body:\d+: internal vocabulary: 'sentinel'", out.err)
    assert cli("body", "--check", *ran.args()) == Exit.USAGE  # neither PACK nor --all


def test_status_is_ready_only_when_the_body_check_passes(ran):
    ctx = Context(root=ran.root, tracking=Tracking.load(ran.root), store=Store(ran.cache))
    assert readiness.readiness(ctx, ctx.tracking.pack("01")).ready
    path = ran.root / "tracking.toml"
    path.write_text(path.read_text().replace('[[packs.01.evidence]]', 'evidence_note = "' + "word " * 400 + '"\n\n'
                             '[[packs.01.evidence]]', 1))
    ctx = Context(root=ran.root, tracking=Tracking.load(ran.root), store=Store(ran.cache))
    r = readiness.readiness(ctx, ctx.tracking.pack("01"))
    assert [x.code for x in r.reasons] == [ReasonCode.BODY_CHECK]
    assert ReasonCode.BODY_CHECK.value == "body-check" and ReasonCode.BODY_CHECK in readiness.REASON_CODES


# ---------------------------------------------------------------------------------------------- docs/filings

def test_docs_filings_re_render_unchanged_from_the_receipts(tmp_path, monkeypatch):
    """docs/filings/ is what `harness body --all-docs` writes from this repository's receipts today."""
    from harness.commands.body import render_docs

    if not all(Path(d).is_dir() for d in MIRRORS.split(os.pathsep)):
        pytest.skip(f"no upstream mirrors at {MIRRORS} (the PR template is read from them)")
    monkeypatch.setenv("PATCHLANE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATCHLANE_GIT_MIRRORS", MIRRORS)
    ctx = Context(root=REPO, tracking=Tracking.load(REPO), store=Store(tmp_path / "cache"))
    out = tmp_path / "filings"
    assert render_docs(ctx, out) == 0
    docs = REPO / "docs" / "filings"
    want = {p.name: p.read_text() for p in docs.iterdir() if p.is_file()}
    got = {p.name: p.read_text() for p in out.iterdir() if p.is_file()}
    assert sorted(got) == sorted(want), "docs/filings/ has files a render does not write, or misses some"
    drifted = [name for name in want if got[name] != want[name]]
    assert drifted == [], f"re-run `harness body --all-docs`: {', '.join(drifted)} differ from a fresh render"
    # only bodies to be filed: a held, retired, blocked, absorbed or filed pack has no body there, and the index
    # names it as left out
    for pack in ctx.tracking.packs.values():
        if pack.kind in ("pr", "issue", "comment", "bug-report") and pack.state in readiness.NOT_FILED:
            assert not [n for n in got if n.startswith(f"{pack.id}-")], pack.id
            assert f"{pack.id} ({pack.state})" in got["README.md"], pack.id


# ---------------------------------------------------------------------------------------------- upstream's PR template

TEMPLATE = """\
- [ ] I reviewed every line myself.

# What does this PR do?
<!-- one line -->

Instructions to the author that go.

## Issue tracking

Linked issue: <!-- e.g. Fixes #1 -->

### Pre-checks

- [ ] I have added relevant unit tests
- [ ] I have added relevant documentation
- [ ] I have run the [autoformatter.sh](https://example.invalid/tools/autoformat.sh) on my PR

### Process

1. a step for the author
"""


def test_the_upstream_template_is_filled_and_a_box_is_ticked_only_from_a_fact():
    from harness.filing import pr_template

    filled = pr_template.fill(TEMPLATE, "The problem.\n\n### The change\n\nIt.", pr_template.Facts())
    assert filled.splitlines()[:5] == ["- [ ] I reviewed every line myself.", "", "# What does this PR do?", "",
                                       "The problem."]
    assert "Linked issue: none" in filled and "<!--" not in filled and "Instructions" not in filled
    assert "- [ ] I have added relevant unit tests" in filled and "### Process" not in filled
    facts = pr_template.Facts(adds_tests=True, linked="Fixes acme/fake#3")
    filled = pr_template.fill(TEMPLATE, "The problem.", facts)
    assert "- [x] I have added relevant unit tests" in filled and "- [ ] I have added relevant documentation" in filled
    assert "- [ ] I reviewed every line myself." in filled and "Linked issue: Fixes acme/fake#3" in filled
    assert "- [ ] I have run the [autoformatter.sh]" in filled  # no format check among the upstream's: not ticked
    filled = pr_template.fill(TEMPLATE, "The problem.", pr_template.Facts(formatted=True))
    assert "- [x] I have run the [autoformatter.sh]" in filled and "- [ ] I have added relevant unit tests" in filled


def test_a_test_file_in_the_series_is_the_fact_behind_the_unit_test_box():
    from harness.filing.pr_template import touches_tests

    assert touches_tests("diff --git a/tests/unit_tests/x/test_y.py b/tests/unit_tests/x/test_y.py\n")
    assert touches_tests("diff --git a/pkg/test_ops.py b/pkg/test_ops.py\n")
    assert not touches_tests("diff --git a/megatron/core/latest.py b/megatron/core/latest.py\n")


# ---------------------------------------------------------------------------------------------- minimal reproducer

MINIMAL = '''\
"""scale uses the first weight for every element."""
import sys

from fakepkg.core import scale

got = scale([1.0, 2.0, 3.0], [1.0, 0.0, 2.0])
print("expected: [1.0, 0.0, 6.0]")
print(f"got: {got}")
sys.exit(0 if got == [1.0, 0.0, 6.0] else 1)
'''

MINIMAL_LANES = '''
[[packs.01.lanes]]
name = "minimal-bug"
base = "1.0"
patched = false
minimal = true
expect = "BUG_REPRODUCED"
args = ["--distribution", "fakepkg", "--module", "fakepkg.core"]

[[packs.01.lanes]]
name = "minimal-fix"
base = "1.0"
patched = true
minimal = true
expect = "FIX_VALIDATED"
args = ["--distribution", "fakepkg", "--module", "fakepkg.core"]
'''


def _with_minimal(repo, script: str = MINIMAL, kind: str = "issue") -> None:
    (repo.root / "repros" / "kit").mkdir(exist_ok=True)
    shutil.copy(REPO / "repros" / "kit" / "_minimal.py", repo.root / "repros" / "kit" / "_minimal.py")
    (repo.root / "repros" / "fake" / "minimal").mkdir(exist_ok=True)
    (repo.root / "repros" / "fake" / "minimal" / "pack01_scale.py").write_text(script)
    path = repo.root / "tracking.toml"
    text = path.read_text().replace('reproducer = "repros/fake/pack01.py"\n', 'reproducer = "repros/fake/pack01.py"\n'
                                    'minimal_repro = "repros/fake/minimal/pack01_scale.py"\n')
    path.write_text(text + MINIMAL_LANES)
    _set_kind(repo, kind)


def test_minimal_lanes_run_the_plain_script_unchanged_and_map_its_exit_status(ran, capsys):
    _with_minimal(ran)
    assert cli("run", "01", "--lane", "minimal-bug", "--lane", "minimal-fix", "--quiet", *ran.args()) == Exit.OK
    capsys.readouterr()
    from harness.lane import receipts

    latest = receipts.latest_by_lane(ran.root, "fake", "01")
    bug, fix = latest["minimal-bug"], latest["minimal-fix"]
    assert [s.value for s in bug.sentinels] == ["BUG_REPRODUCED"] and [s.value for s in fix.sentinels] == \
        ["FIX_VALIDATED"]
    assert bug.sentinel_details["BUG_REPRODUCED"]["got"] == "[1.0, 2.0, 3.0]"
    assert bug.reproducer.path == "repros/fake/minimal/pack01_scale.py"  # the receipt pins the plain script
    assert "repros/kit/_minimal.py" in bug.reproducer.helpers
    ctx = Context(root=ran.root, tracking=Tracking.load(ran.root), store=Store(ran.cache))
    assert readiness.readiness(ctx, ctx.tracking.pack("01")).ready
    (ran.root / "repros" / "fake" / "minimal" / "pack01_scale.py").write_text(MINIMAL + "# edited\n")
    ctx = Context(root=ran.root, tracking=Tracking.load(ran.root), store=Store(ran.cache))
    r = readiness.readiness(ctx, ctx.tracking.pack("01"))
    assert {e.lane.name for e in r.lanes if e.problem is not None} == {"minimal-bug", "minimal-fix"}


def test_a_crashing_minimal_script_is_a_crash_not_a_verdict(ran, capsys):
    _with_minimal(ran, MINIMAL.replace("sys.exit(0 if", "raise SystemExit(3)  # "))
    assert cli("run", "01", "--lane", "minimal-bug", "--quiet", *ran.args()) == Exit.CRASH


def test_an_issue_inlines_its_minimal_reproducer_and_the_check_holds_it_to_40_lines(ran):
    _with_minimal(ran)
    rendered = _render(ran)
    assert "```python\n" + MINIMAL.rstrip() + "\n```" in rendered.body
    assert "`python repro.py` (no GPU needed) prints what it expected" in rendered.body
    assert rendered.problems == []
    long = MINIMAL + "import numpy\n" + "x = 1\n" * 40
    (ran.root / "repros" / "fake" / "minimal" / "pack01_scale.py").write_text(long)
    problems = _render(ran).problems
    assert any("has 50 lines (at most 40)" in p for p in problems)
    assert any("imports numpy" in p for p in problems)


def test_minimal_keys_are_a_closed_schema(lane_repo):
    from harness.errors import ConfigError

    path = lane_repo.root / "tracking.toml"
    path.write_text(path.read_text() + MINIMAL_LANES)
    with pytest.raises(ConfigError, match="minimal = true but key 'minimal_repro' is missing"):
        Tracking.load(lane_repo.root)
    path.write_text(path.read_text().replace('reproducer = "repros/fake/pack01.py"\n',
                                             'reproducer = "repros/fake/pack01.py"\nminimal_repro = "nope.py"\n'))
    with pytest.raises(ConfigError, match="key 'minimal_repro': nope.py does not exist"):
        Tracking.load(lane_repo.root)


def test_check_ready_selects_packs_ready_but_for_their_body_and_fails_on_theirs(ran, capsys):
    assert cli("body", "--check", "--ready", "--json", *ran.args()) == Exit.OK
    assert [r["pack"] for r in json.loads(capsys.readouterr().out)] == ["01"]
    path = ran.root / "tracking.toml"
    path.write_text(path.read_text().replace('[[packs.01.evidence]]', 'evidence_note = "' + "word " * 400 + '"\n\n'
                                             '[[packs.01.evidence]]', 1))
    assert cli("body", "--check", "--ready", "--json", *ran.args()) == Exit.LINT
    [result] = json.loads(capsys.readouterr().out)
    assert [f["rule"] for f in result["findings"]] == ["budget"]
    (ran.root / "repros" / "fake" / "pack01.py").write_text(
        (ran.root / "repros" / "fake" / "pack01.py").read_text() + "# changed\n")  # now a lane is stale too
    assert cli("body", "--check", "--ready", "--json", *ran.args()) == Exit.OK
    assert json.loads(capsys.readouterr().out) == []  # not ready for another reason: not selected


def test_a_pr_that_files_its_linked_issue_lists_related_work_only_there(tmp_path, monkeypatch):
    """A PR filed after the issue it links (the upstream's template asks for one) names each related thread once, in
    that issue, which the PR closes: the PR body keeps the change and its evidence within its word budget."""
    from harness import filing

    if not all(Path(d).is_dir() for d in MIRRORS.split(os.pathsep)):
        pytest.skip(f"no upstream mirrors at {MIRRORS} (the PR template is read from them)")
    monkeypatch.setenv("PATCHLANE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATCHLANE_GIT_MIRRORS", MIRRORS)
    tracking = Tracking.load(REPO)
    pack = tracking.pack("10")
    rendered = filing.render(REPO, tracking, pack)
    assert rendered.companion is not None
    # a thread of the repository filed to is named as GitHub links it there: by its number alone
    lines = [ln for ln in rendered.companion[1].splitlines() if ln.startswith("- #")]
    assert {ln.split(" ", 2)[1] for ln in lines} >= {"#" + d.ref.split("#")[1] for d in pack.related
                                                     if d.ref.startswith("NVIDIA/Megatron-LM#")}
    assert not any(ln in rendered.body for ln in lines) and "Related upstream work:" not in rendered.body
    assert filing.prose_words(rendered.body) <= filing.BUDGETS["pr"]
    # without a linked issue of its own (a thread with role 'fixes' recorded), the PR body lists them itself
    path = tmp_path / "tracking.toml"
    path.write_text((REPO / "tracking.toml").read_text().replace(
        '[[packs.10.threads]]', '[[packs.10.threads]]\nurl = "https://github.com/NVIDIA/Megatron-LM/issues/1738"\n'
        'role = "fixes"\nstate = "open"\n\n[[packs.10.threads]]', 1))
    changed = Tracking.load(REPO, path)
    alone = filing.render(REPO, changed, changed.pack("10"))
    assert alone.companion is None and all(ln in alone.body for ln in lines)


def test_a_finding_about_the_whole_file_does_not_point_at_line_0():
    """'body.md:0: budget: ...' named a line that does not exist."""
    from harness.filing.lint import Finding

    assert Finding(0, "budget", "412 words").describe("02-pr.md") == "02-pr.md (the whole file): budget: '412 words'"
    assert Finding(7, "layout", "x").describe("02-pr.md") == "02-pr.md:7: layout: 'x'"


def test_evidence_from_an_older_version_of_a_patch_says_so_once():
    """A receipt that applied a patch of the same name with other content measured an older version of it: said
    so, not as "with X applied and without X" (issue 56 item 10)."""
    from pathlib import Path
    from types import SimpleNamespace as NS

    from harness.filing.body import _evidence_builds

    root = Path("/r")
    filed = [NS(path=root / "p/01/0001-a.patch", sha256="new"), NS(path=root / "p/01/0002-b.patch", sha256="b")]
    rec = NS(patched=True, lane="fix", patches=[NS(file="p/01/0001-a.patch", sha256="old"),
                                                NS(file="p/00/0001-dep.patch", sha256="d")])
    (line,) = _evidence_builds(root, [rec], filed, "01")
    assert line.startswith("evidence build: fix was measured with an older version of p/01/0001-a.patch; "
                           "p/00/0001-dep.patch applied; without p/01/0002-b.patch of the series filed for pack 01")
    assert _evidence_builds(root, [NS(patched=True, lane="fix", patches=[NS(file="p/01/0001-a.patch", sha256="new"),
                                                                         NS(file="p/01/0002-b.patch", sha256="b")])],
                            filed, "01") == []


def test_a_number_typed_into_a_show_counts_even_when_a_figure_happens_to_equal_it():
    """A newcomer's round 4, item 12: "{value} of 200" passed while a field was 200 and failed at 400."""
    from types import SimpleNamespace

    from harness.filing.evidence import typed_figures

    assert typed_figures(SimpleNamespace(show="{value} of 200")) == ["200"]
    assert typed_figures(SimpleNamespace(show="{value} of {count} (tolerance {tol:.2f})")) == []
    assert typed_figures(SimpleNamespace(show="bf16 {value}, sm_90")) == []  # digits inside words are names
