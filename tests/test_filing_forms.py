"""The upstream's forms as data (`filing.forms`), the check's claim rules (threads, performance words, circular
reproducers, template sections, committed bodies) and the plain dialect of attached scripts. Each failure mode is
injected into a body or a script built here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.filing import check, forms, names
from harness.filing.body import Rendered
from harness.filing.lint import lint
from harness.filing.reproducer import public_dialect
from harness.lane.tracking import Pack

BUG_MD = """---
name: Bug report
about: Create a report
labels: bug
---

**Describe the bug**

Say what breaks.

**Steps/Code to reproduce bug**

Minimal code.

**Expected behavior**

What you expected.

**Additional context**

Anything else.
"""

FEATURE_YML = """name: Feature Request
description: Suggest an idea.
labels: [enhancement]
body:
  - type: markdown
    attributes:
      value: Thanks!
  - type: checkboxes
    id: steps
    attributes:
      label: Required prerequisites
      options:
        - label: I have searched the tracker.
          required: true
  - type: textarea
    id: motivation
    attributes:
      label: Motivation
    validations:
      required: true
  - type: textarea
    id: solution
    attributes:
      label: >-
        Solution
"""


def test_markdown_and_yaml_forms_parse_to_sections_with_purpose_and_required_flags():
    f = forms.parse_forms("c" * 40, {"bug_report.md": BUG_MD, "feature.yml": FEATURE_YML,
                                     "config.yml": "blank_issues_enabled: false\n"})
    assert not f.blank_issues
    bug, feature = f.issue_forms
    assert bug.purpose == "bug" and bug.markdown
    assert [s.label for s in bug.sections] == ["Describe the bug", "Steps/Code to reproduce bug", "Expected behavior",
                                               "Additional context"]
    assert feature.purpose == "feature" and not feature.markdown
    assert [(s.label, s.required, s.id) for s in feature.sections] == [
        ("Required prerequisites", False, "steps"), ("Motivation", True, "motivation"), ("Solution", False, "solution")]


def test_a_kind_the_upstream_does_not_take_is_refused():
    only_bug = forms.parse_forms("c" * 40, {"bug_report.md": BUG_MD, "config.yml": "blank_issues_enabled: false\n"})
    with pytest.raises(ConfigError, match="takes no blank issues.*has no feature form"):
        forms.choose(only_bug, "feature", "acme/fake")
    blank_ok = forms.parse_forms("c" * 40, {"bug_report.md": BUG_MD})
    assert forms.choose(blank_ok, "feature", "acme/fake") is None  # a blank issue is taken there
    assert forms.choose(only_bug, "bug", "acme/fake").path.endswith("bug_report.md")


def test_fill_puts_each_part_under_its_section_and_names_a_required_one_left_empty():
    f = forms.parse_forms("c" * 40, {"bug_report.md": BUG_MD, "feature.yml": FEATURE_YML})
    body, problems = forms.fill(f.issue_forms[0], {"problem": "It breaks.", "reproducer": "```python\nx\n```",
                                                   "expected": "It works.", "context": "Measurements."})
    assert problems == []
    assert body.index("**Describe the bug**\n\nIt breaks.") < body.index("**Steps/Code to reproduce bug**\n\n```")
    assert "**Expected behavior**\n\nIt works." in body
    body, problems = forms.fill(f.issue_forms[1], {"change": "Do this."})
    assert "### Solution\n\nDo this." in body
    assert problems == [".github/ISSUE_TEMPLATE/feature.yml: required section 'Motivation' has nothing to fill it"]


def _rendered(body: str, **kw) -> Rendered:
    pack = Pack(id="01", title="t", target="fake", kind="issue", state="planned", files=(), depends_on=(),
                summary="", requires="cpu", base=None, reproducer=None, lanes=(), threads=(), absorbed=None,
                mitigation=None, blocked=None)
    r = Rendered(pack, "t", body, None, False, [], [], [], "main", home="acme/fake",
                 known_threads=frozenset({"acme/fake#12"}))
    return dataclasses.replace(r, **kw)


def _rules(found) -> list[str]:
    return [f.rule for f in found]


def test_a_thread_number_recorded_nowhere_and_an_unbacked_fixes_fail():
    ok = _rendered("It breaks, see #12 and acme/fake#12.\n")
    assert check.own_findings(ok) == []
    bad = check.own_findings(_rendered("It is 2x faster, fixes #904.\n"))
    assert sorted(_rules(bad)) == ["claim", "claim", "claim", "thread"]  # 2x, faster, fixes #904
    assert any("acme/fake#904 is recorded nowhere" in f.text for f in bad)
    assert any("'2x' with no measured figure" in f.text for f in bad)


def test_a_performance_word_passes_only_with_a_measured_figure_in_the_table():
    table = "| what | build | result |\n| --- | --- | --- |\n| kernel time | main | 1.20 ms |\n"
    assert check.own_findings(_rendered("The kernel is faster.\n\n" + table)) == []
    no_figure = "| what | build | result |\n| --- | --- | --- |\n| gradients equal | main | yes |\n"
    assert _rules(check.own_findings(_rendered("The kernel uses fewer registers.\n\n" + no_figure))) == ["claim"]


def test_a_stripped_template_section_or_box_fails():
    sections = ("# What does this PR do?", "Linked issue:", "- [ ] I have added relevant unit tests")
    full = "# What does this PR do?\n\nIt fixes.\n\nLinked issue: none\n\n- [x] I have added relevant unit tests\n"
    # the box is ticked where a record backs it (the series adds tests): only the stripped sections are at fault
    assert check.own_findings(_rendered(full, sections=sections, backed=frozenset({"adds_tests"}))) == []
    stripped = full.replace("Linked issue: none\n\n", "").replace("- [x] I have added relevant unit tests\n", "")
    found = check.own_findings(_rendered(stripped, sections=sections, backed=frozenset({"adds_tests"})))
    assert _rules(found) == ["template", "template"]


def test_render_problems_are_findings_so_inline_reproducer_limits_fail():
    found = check.check(_rendered("Body.\n", problems=["minimal reproducer: x.py imports numpy"]))
    assert _rules(found) == ["render"]


DIFF = """diff --git a/m.py b/m.py
--- a/m.py
+++ b/m.py
@@ -1,2 +1,4 @@ class Module:
 class Module:
+    keep_in_fp32_params = ()
+    def mark(self): return self.existing
     existing = 1
"""


def test_a_reproducer_using_a_name_only_the_patch_adds_is_circular():
    script = "import torch\nfrom m import Module\nclass M(Module):\n    keep_in_fp32_params = ('w',)\n" \
             "print(Module().existing, torch.nan_to_num)\ngetattr(Module, 'mark')\n"
    assert names.added_only(DIFF, "class Module:\n    existing = 1\n") >= {"keep_in_fp32_params", "mark"}
    found = names.circular(DIFF, "class Module:\n    existing = 1\n", [("repro.py", script)], lambda n: set())
    assert [f.text for f in found] == ["repro.py uses `mark`, which only the change introduces"]
    # a class attribute assigned in a subclass is a Name, not an attribute: declared by the script itself
    script2 = script + "Module.keep_in_fp32_params\n"
    found = names.circular(DIFF, "", [("repro.py", script2)], lambda n: set())
    assert "keep_in_fp32_params" in " ".join(f.text for f in found)
    # a name the base tree has elsewhere is no new API
    assert names.circular(DIFF, "", [("repro.py", script2)], lambda n: set(n)) == []


def test_committed_bodies_must_equal_the_render(tmp_path: Path):
    r = _rendered("The body.\n")
    docs = tmp_path / "docs"
    assert check.committed(r, docs) == []  # no directory: nothing committed to hold equal
    docs.mkdir()
    assert _rules(check.committed(r, docs)) == ["committed"]  # missing
    (docs / "01-issue.md").write_text("The body.\n")
    assert check.committed(r, docs) == []
    (docs / "01-issue.md").write_text("The body. Pack 01 passed its lane.\n")  # a hand edit in our words
    assert _rules(check.committed(r, docs)) == ["committed", "internal vocabulary", "internal vocabulary"]


SCRIPT = '''"""Pack 04: equivalence check across two lanes sharing $HARNESS_RUN_DIR."""
import os
SENTINELS = {"BUG_REPRODUCED": "the bug shows", "FIX_VALIDATED": "fixed"}


def lane():
    return os.environ.get("HARNESS_LANE", "manual")


def verdict(sentinel):
    print(sentinel if sentinel in SENTINELS else "?", lane(), "pack04-baseline")


verdict("BUG_REPRODUCED")
'''


def test_an_attached_script_loses_our_dialect_and_still_runs(tmp_path: Path, capsys):
    assert {f.rule for f in lint(SCRIPT, body=False, vocabulary=True)} == {"internal vocabulary"}
    plain = public_dialect(SCRIPT, "04", "repro.py")
    assert lint(plain, body=False, vocabulary=True) == []
    assert "REPRO_RUN_DIR" in plain and '"bug-reproduced"' in plain and "def job()" in plain
    exec(compile(plain, "repro.py", "exec"), {})
    assert capsys.readouterr().out.strip() == "bug-reproduced manual repro-baseline"


def test_a_rename_that_would_merge_two_names_is_refused():
    with pytest.raises(ConfigError, match="merge the names"):
        public_dialect("lane = 1\njob = 2\nprint(lane, job)\n", "04", "repro.py")


def test_forms_are_read_from_the_filing_base_in_a_mirror(tmp_path: Path, monkeypatch):
    import subprocess
    from types import SimpleNamespace

    from harness.upstream import pins

    work = tmp_path / "work"
    (work / ".github" / "ISSUE_TEMPLATE").mkdir(parents=True)
    (work / ".github" / "ISSUE_TEMPLATE" / "bug_report.md").write_text(BUG_MD)
    (work / ".github" / "ISSUE_TEMPLATE" / "config.yml").write_text("blank_issues_enabled: false\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "PATH": "/usr/bin:/bin"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "forms"]):
        subprocess.run(["git", *cmd], cwd=work, env=env, check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, capture_output=True, text=True).stdout.strip()
    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirrors / "acme+fake.git")], check=True)
    monkeypatch.setenv(pins.MIRRORS_ENV, str(mirrors))
    base = SimpleNamespace(git=pins.GitPin("https://github.com/acme/fake", commit, "refs/heads/main", "2026-01-01"))
    manifest = SimpleNamespace(target="fake")
    found = forms.read_forms(manifest, base)
    assert found.problem is None and found.forms is not None and not found.forms.blank_issues
    assert [f.purpose for f in found.forms.issue_forms] == ["bug"]
    with pytest.raises(forms.FormError, match="takes no blank issues"):
        forms.choose(found.forms, "feature", "acme/fake")
    monkeypatch.setenv(pins.MIRRORS_ENV, str(tmp_path / "none"))
    assert "were not read: no mirror" in (forms.read_forms(manifest, base).problem or "")


def test_a_feature_pr_files_its_feature_request_first_and_links_it():
    from harness.filing.body import LINKED_ISSUE
    from harness.filing.reproducer import PLACEHOLDER
    from harness.filing.send import GhPlan

    issue = ["gh", "issue", "create", "--repo", "acme/fake", "--title", "T", "--body-file",
             "dist/filing/02-feature-request.md"]
    pr = ["gh", "pr", "create", "--repo", "acme/fake", "--title", "T", "--body-file", "-"]
    shell = GhPlan(pr, Path("dist/filing/02-pr.md"), None, issue).shell()
    assert shell.startswith("issue=$(cat dist/filing/02-feature-request.md | gh issue create --repo acme/fake")
    assert f's|{LINKED_ISSUE}|$issue|g' in shell and shell.endswith("--body-file -")
    gist = ["gh", "gist", "create", "--public", "dist/filing/repro.py"]
    shell = GhPlan(pr, Path("dist/filing/02-pr.md"), gist, issue).shell()
    # the script first: the linked issue links it too, so both texts get its URL
    assert shell.index("url=$(gh gist create") < shell.index("issue=$(sed") < shell.index("gh pr create")
    assert f's|{PLACEHOLDER}|$url|g\" dist/filing/02-feature-request.md | gh issue create' in shell


LIGER_STYLE = """name: Bug Report
description: items at column 0, no ids
body:
- type: markdown
  attributes:
    value: >
      Search first.
- type: textarea
  attributes:
    label: Describe the bug
  validations:
    required: true
- type: textarea
  attributes:
    label: Versions
  validations:
    required: false
"""


def test_yaml_items_at_column_zero_and_without_ids_are_sections():
    form = forms.parse_yaml_form(".github/ISSUE_TEMPLATE/bug_report.yaml", LIGER_STYLE)
    assert [(s.label, s.required, s.id) for s in form.sections] == [("Describe the bug", True, ""),
                                                                    ("Versions", False, "")]


def test_a_release_base_reads_the_forms_recorded_with_their_source_commit(tmp_path: Path):
    from types import SimpleNamespace

    from harness.filing import pr_template

    d = tmp_path / "templates" / "upstream" / "fake"
    (d / ".github" / "ISSUE_TEMPLATE").mkdir(parents=True)
    (d / ".github" / "ISSUE_TEMPLATE" / "bug_report.yaml").write_text(LIGER_STYLE)
    (d / ".github" / "PULL_REQUEST_TEMPLATE.md").write_text("# Description\n\nSay it.\n\n- [ ] Tests pass\n")
    (d / "SOURCE.toml").write_text('repo = "https://github.com/acme/fake"\ncommit = "' + "e" * 40 + '"\n')
    (tmp_path / "upstream").mkdir()
    manifest = SimpleNamespace(target="fake", path=tmp_path / "upstream" / "fake.toml",
                               policy=SimpleNamespace(pr_template=".github/PULL_REQUEST_TEMPLATE.md"))
    release = SimpleNamespace(git=None)
    found = forms.read_forms(manifest, release)
    assert found.forms is not None and found.forms.commit == "e" * 40 and found.forms.blank_issues
    template = pr_template.read_template(manifest, release).text
    assert template is not None
    filled = pr_template.fill(template, "The body.", pr_template.Facts())
    assert filled.startswith("# Description\n\nThe body.") and "- [ ] Tests pass" in filled
    manifest.target = "other"  # nothing recorded for it: nothing read, nothing guessed
    assert forms.read_forms(manifest, release).forms is None


def test_related_words_must_be_true():
    other = "- other/down#5 (merged pull request in another repository): touches the same code\n"
    assert _rules(check.own_findings(_rendered(other, known_threads=frozenset({"other/down#5"})))) == ["relation"]
    body = ("The wiring was lost in #12, a merge.\n\n"
            "- acme/fake#12 (merged pull request): a separate change\n")
    found = check.own_findings(_rendered(body))
    assert _rules(found) == ["relation"] and "line 1 names it" in found[0].text
    fine = ("The wiring was lost in #12, a merge.\n\n"
            "- acme/fake#12 (merged pull request): the merge that dropped the wiring\n")
    assert check.own_findings(_rendered(fine)) == []


def test_evidence_measured_with_another_series_under_the_export_is_named():
    from types import SimpleNamespace

    rec = SimpleNamespace(lane="fix-main", patched=True,
                          patches=(SimpleNamespace(file="patches/t/04/a.patch"),
                                   SimpleNamespace(file="patches/t/07/b.patch")))
    r = _rendered("Figures.\n", receipts=[rec], stacked=("04",), own_files=("patches/t/07/b.patch",),
                  stacked_subjects=("speed up the SISO kernel",))
    found = check.export_build(r, alone_applies=True)
    assert _rules(found) == ["evidence build"] and "patches/t/04/a.patch" in found[0].text
    assert check.export_build(r, alone_applies=False) == []  # the export stacks it too: the same build
    assert check.export_build(r, alone_applies=None) == []  # not checked: nothing said either way
    said = dataclasses.replace(r, body='Measured with "speed up the SISO kernel" applied underneath.\n')
    assert check.export_build(said, alone_applies=True) == []


def test_which_prs_the_template_asks_to_link_an_issue():
    from harness.filing.pr_template import asks_linked_issue

    megatron_like = ("## Issue tracking\n\n- **New features**: a linked issue is **required**. Open one first.\n"
                     "- **Small updates (bug fixes, minor improvements)**: a linked issue is **recommended**.\n\n"
                     "Linked issue: <!-- e.g. Fixes #1 -->\n")
    assert asks_linked_issue(megatron_like, feature=True) and asks_linked_issue(megatron_like, feature=False)
    plain = "# Description\n\nSay what it does.\n\n- [ ] Tests pass\n"
    assert not asks_linked_issue(plain, feature=True) and not asks_linked_issue(plain, feature=False)


def test_a_part_without_its_section_goes_under_additional_context():
    f = forms.parse_forms("c" * 40, {"feature.md": "---\nname: Feature request\n---\n\n**Describe the solution**\n\n"
                                                    "x\n\n**Additional context**\n\ny\n"})
    body, problems = forms.fill(f.issue_forms[0], {"change": "Do it.", "reproducer": "```python\nrun()\n```",
                                                   "context": "Figures."})
    assert problems == [] and "**Additional context**\n\n```python\nrun()\n```\n\nFigures." in body


@pytest.mark.parametrize("gone", ["No measurements yet.", "No reproducer yet."])
def test_a_body_without_its_evidence_or_reproducer_fails(gone):
    assert _rules(check.own_findings(_rendered(f"It breaks.\n\n{gone}\n"))) == ["incomplete"]


def test_the_attached_script_lists_only_the_runs_of_that_script(monkeypatch):
    """An upstream-test lane runs pytest, not the reproducer: its header must not tell anyone to run the script."""
    from types import SimpleNamespace

    from harness.filing import reproducer
    from harness.lane.tracking import Lane

    monkeypatch.setattr(reproducer, "base_label", lambda manifest, base: "fake main")
    monkeypatch.setattr(reproducer, "unchanged_label", lambda manifest, base: "fake main unchanged")
    lanes = (Lane(name="bug-main", base="main", patched=False, expect="BUG_REPRODUCED"),
             Lane(name="fix-main", base="main", patched=True, expect="FIX_VALIDATED", args=("--device", "cpu")),
             Lane(name="upstream-tests-fix-main", base="main", patched=True, expect="UPSTREAM_TESTS_PASSED",
                  upstream_tests=("tests/test_x.py::test_y",)))
    pack = Pack(id="01", title="t", target="fake", kind="pr", state="planned", files=(), depends_on=(),
                summary="", requires="cpu", base=None, reproducer=None, lanes=lanes, threads=(), absorbed=None,
                mitigation=None, blocked=None)
    runs = reproducer._runs(SimpleNamespace(bases={"main": None}), pack, "main", "repro.py", "this PR")
    assert runs == ["1. fake main unchanged (CPU is enough):\n       python repro.py --unpatched",
                    "2. fake main with this PR (CPU is enough):\n       python repro.py --patched --device cpu"]
