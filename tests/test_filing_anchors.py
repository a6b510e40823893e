"""Issue 44: a body's "Where" list anchored in the patched tree's syntax, its links checked against the filing
base, and the body check failing on planted defects (a typed figure, a wrong thread, a wrong anchor, a ticked box
nothing backs, a paragraph a PR shares with the issue it links)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest
from conftest import REPO

from harness.base.store import Store  # noqa: F401  (the render reads the store through the environment)
from harness.filing import body as filing_body
from harness.filing import check as body_check
from harness.filing.parts import hunk_locations, syntax_locations
from harness.lane.tracking import Tracking

MIRRORS = os.environ.get("PATCHLANE_GIT_MIRRORS") or str(REPO.parent / "shared" / "mirrors")
MEGATRON = Path(MIRRORS.split(os.pathsep)[0]) / "NVIDIA+Megatron-LM.git"
MAIN = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"  # megatron-lm's filing base "main" (upstream/megatron-lm.toml)
OPS = "megatron/core/transformer/experimental_attention_variant/ops/"
TESTS = "tests/unit_tests/transformer/experimental_attention_variant/test_dsa_tilelang_kernels.py"
needs_mirror = pytest.mark.skipif(not MEGATRON.is_dir(), reason=f"no Megatron-LM mirror at {MEGATRON}")


def _at_main(paths: list[str]) -> dict[str, str]:
    return {p: subprocess.run(["git", "--git-dir", str(MEGATRON), "show", f"{MAIN}:{p}"], capture_output=True,
                              text=True, check=True).stdout for p in paths}


# ------------------------------------------------------------------------------------------- anchors from syntax

BASE = """\
import os


def first(x):
    return x


def second(x):
    y = x + 1
    return y


class Box:
    def put(self, v):
        self.v = v
"""

# git names `first` in the second hunk's header (the def before the hunk), and the last hunk appends to the end
PATCH = """\
diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -9,2 +9,3 @@ def first(x):
     y = x + 1
+    y = y * 2
     return y
@@ -14,2 +15,6 @@ class Box:
     def put(self, v):
         self.v = v
+
+    def take(self):
+        return self.v
+    def clear(self):
+        self.v = None
@@ -15,0 +21,4 @@ class Box:
+
+
+def third():
+    return 3
"""


def test_each_changed_line_is_anchored_to_the_symbol_that_holds_it_in_the_patched_tree(tmp_path):
    path = tmp_path / "0001.patch"
    path.write_text(PATCH)
    before = [(loc.line, loc.context) for loc in hunk_locations(path)]
    assert before[0] == (10, "first")  # the hunk header: the function before the hunk
    after = [(loc.line, loc.context) for loc in syntax_locations([], [path], {"pkg/mod.py": BASE})]
    # a new method belongs to its class; new top-level code follows the last def the change leaves alone
    assert after == [(10, "second"), (15, "Box"), (15, "after Box")]
    assert all(line <= len(BASE.splitlines()) for line, _ in after)  # the end-of-file addition links the last line


def test_a_link_past_the_end_of_its_file_and_a_wrong_anchor_are_findings(tmp_path):
    path = tmp_path / "0001.patch"
    path.write_text(PATCH)
    from harness.filing.parts import where_list
    from harness.upstream import pins

    manifest = pins.load_manifest(REPO, "megatron-lm")
    base = manifest.bases["main"]
    files = {"pkg/mod.py": BASE}
    where = where_list(manifest, base, syntax_locations([], [path], files), files)
    rendered = filing_body.Rendered(pack=None, title="", body=where, script=None, inline=False,  # type: ignore[arg-type]
                                    problems=[], findings=[], receipts=[], filing_base="main", where=where,
                                    base_files=files, base_commit=base.commit)
    assert body_check._where(rendered, where) == []
    planted = where.replace("in `second`", "in `first`").replace("#L15)", "#L16)", 1)
    found = body_check._where(rendered, planted)
    texts = [f.text for f in found]
    assert any("names `first`; the patched tree has it in `second`" in t for t in texts), texts
    assert any("has 15 lines" in t and "line 16" in t for t in texts), texts


@needs_mirror
def test_02s_four_wrong_anchors_name_the_function_the_line_is_in():
    """The hunk headers of 02's series named the function before four of its lines, and put one past the end of
    the test file; the patched tree's syntax names each line's own."""
    series = sorted((REPO / "patches" / "megatron-lm" / "02" / "main").glob("*.patch"))
    paths = [OPS + "sparse_mla.py", OPS + "tilelang_dsa.py", OPS + "tilelang_sparse_mla_bwd.py",
             OPS + "tilelang_sparse_mla_fwd.py", TESTS]
    files = _at_main(paths)
    before = {(loc.path, loc.line): loc.context for p in series for loc in hunk_locations(p)}
    after = {(loc.path, loc.line): loc.context for loc in syntax_locations([], series, files)}
    bwd, lines = OPS + "tilelang_sparse_mla_bwd.py", len(files[TESTS].splitlines())
    assert before[(bwd, 422)] == "sparse_mla_delta" and after[(bwd, 422)] == "sparse_mla_bwd"
    assert before[(TESTS, 971)] == "test_fused_qk_topk_lighting_sanitizes_mocked_tilelang_indices"
    assert after[(TESTS, 971)] == "test_fused_sparse_mla_absorbed_batches_mocked_tilelang_outputs"
    assert before[(TESTS, 1001)] == "test_fused_sparse_mla_absorbed_batches_mocked_tilelang_outputs"
    assert after[(TESTS, 1001)] == "test_fused_sparse_mla_absorbed_pads_small_head_count_without_gradient_leak"
    assert before[(TESTS, lines + 3)] == "test_fused_sparse_mla_absorbed_accepts_thd_sentinels"  # past the end
    assert after[(TESTS, lines)] == "after test_fused_sparse_mla_absorbed_accepts_thd_sentinels"
    assert max(line for path, line in after if path == TESTS) <= lines
    sparse = {ctx for (path, _), ctx in after.items() if path == OPS + "sparse_mla.py"}
    assert sparse == {"SparseMLA.forward", "SparseMLA.backward"}  # was "SparseMLA" for both


# ----------------------------------------------------------------------------------------- planted defects, by rule

@pytest.fixture(scope="module")
def rendered_02(tmp_path_factory):
    """Pack 02's PR and the feature request it links, rendered from this repository's receipts."""
    if not MEGATRON.is_dir():
        pytest.skip(f"no Megatron-LM mirror at {MEGATRON}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATCHLANE_HOME", str(tmp_path_factory.mktemp("cache")))
        mp.setenv("PATCHLANE_GIT_MIRRORS", MIRRORS)
        tracking = Tracking.load(REPO)
        yield tracking, filing_body.render(REPO, tracking, tracking.packs["02"])


def _rules(rendered) -> set[str]:
    return {f.rule for f in body_check.own_findings(rendered)}


def _new(before, after) -> list:
    seen = {(f.rule, f.text) for f in body_check.own_findings(before)}
    return [f for f in body_check.own_findings(after) if (f.rule, f.text) not in seen]


@needs_mirror
def test_02_as_rendered_passes_the_new_rules(rendered_02):
    _, rendered = rendered_02
    assert not _rules(rendered) & {"anchor", "typed figure", "thread", "checkbox", "repeated"}


@needs_mirror
def test_a_figure_typed_into_a_show_is_a_finding(rendered_02, tmp_path, monkeypatch):
    tracking, _ = rendered_02
    monkeypatch.setenv("PATCHLANE_HOME", str(tmp_path))
    monkeypatch.setenv("PATCHLANE_GIT_MIRRORS", MIRRORS)
    pack = tracking.packs["02"]
    rows = list(pack.evidence)
    i = next(i for i, r in enumerate(rows) if "{tol}" in r.show)
    rows[i] = dataclasses.replace(rows[i], show="{value} (tolerance 0.05)")  # 0.05: no receipt holds it
    planted = filing_body.render(REPO, tracking, dataclasses.replace(pack, evidence=tuple(rows)))
    found = [f for f in body_check.own_findings(planted) if f.rule == "typed figure"]
    assert len(found) == 1 and f"evidence row {i + 1}" in found[0].text and "'0.05'" in found[0].text


@needs_mirror
def test_a_thread_of_another_pack_is_a_finding(rendered_02):
    _, rendered = rendered_02
    # #3345 is recorded, but for the fallback pack, not for this one
    body = rendered.body.replace("### The change\n", "### The change\n\nThis builds on NVIDIA/Megatron-LM#3345.\n", 1)
    found = _new(rendered, dataclasses.replace(rendered, body=body))
    assert [(f.rule, f.text) for f in found] == [
        ("thread", "nvidia/megatron-lm#3345 is not a thread of this change (it is recorded for another one)")]


@needs_mirror
def test_an_anchor_naming_the_wrong_function_is_a_finding(rendered_02):
    _, rendered = rendered_02
    title, issue = rendered.companion
    planted = issue.replace("in `sparse_mla_bwd`", "in `sparse_mla_delta`")
    assert planted != issue
    found = _new(rendered, dataclasses.replace(rendered, companion=(title, planted)))
    assert [(f.rule, f.where) for f in found] == [("anchor", "linked issue")]
    assert "names `sparse_mla_delta`; the patched tree has it in `sparse_mla_bwd`" in found[0].text


@needs_mirror
def test_a_ticked_box_nothing_backs_is_a_finding(rendered_02):
    _, rendered = rendered_02
    assert "adds_tests" in rendered.backed  # 02's upstream test passed with the change: the box may be ticked
    unbacked = dataclasses.replace(rendered, backed=rendered.backed - {"adds_tests"})
    found = _new(rendered, unbacked)
    assert [f.rule for f in found] == ["checkbox"] and "unit tests" in found[0].text
    body = rendered.body.replace("- [ ] I have added relevant functional tests", "- [x] I have added relevant "
                                 "functional tests")
    found = _new(rendered, dataclasses.replace(rendered, body=body))
    assert [f.rule for f in found] == ["checkbox"] and "functional tests" in found[0].text


@needs_mirror
def test_a_paragraph_in_both_the_pr_and_its_issue_is_a_finding(rendered_02):
    _, rendered = rendered_02
    issue = rendered.companion[1]
    problem = next(b for b in body_check.blocks(issue) if b.kind == "prose" and len(b.lines[0].split()) > 20)
    body = rendered.body.replace("### The change\n", "### The change\n\n" + "\n".join(problem.lines) + "\n", 1)
    found = _new(rendered, dataclasses.replace(rendered, body=body))
    assert found and {f.rule for f in found} == {"repeated"}
    assert body_check.shared(issue, rendered.body) == []  # as rendered, each says its own part


# ------------------------------------------------------------------------------------ a benchmark file as evidence

def test_04s_register_rows_are_read_from_the_sweep_file_and_a_stale_file_is_refused(tmp_path):
    """The #904 line's figures: read from tools/kernel_registers.py's file at the filing base, never typed; a file
    of another series is a problem, not a row."""
    import json
    import shutil

    from harness.filing.evidence import bench_figures
    from harness.upstream import pins

    tracking = Tracking.load(REPO)
    pack = tracking.packs["04"]
    manifest = pins.load_manifest(REPO, "mamba")
    rows = [r for r in pack.evidence if r.bench]
    assert [dict(r.where)["arch"] for r in rows] == ["sm_90", "sm_100"]
    figures, _, problem = bench_figures(REPO, manifest, pack, "main", rows[0])
    assert problem is None
    by_arch = {f["arch"]: f for f in figures}
    assert by_arch["sm_90"]["value"] == by_arch["sm_90"]["configs"] == 27  # the same before and after, every one
    assert by_arch["sm_100"]["trap_only"] == 18
    root = tmp_path / "repo"
    shutil.copytree(REPO / "patches" / "mamba" / "04", root / "patches" / "mamba" / "04")
    stale = json.loads((REPO / rows[0].bench).read_text())
    stale["series_sha256"] = "0" * 64
    (root / rows[0].bench).parent.mkdir(parents=True)
    (root / rows[0].bench).write_text(json.dumps(stale))
    figures, _, problem = bench_figures(root, manifest, pack, "main", rows[0])
    assert figures == [] and "measured another series than today's for main" in (problem or "")
