"""Issue 44: the scripts a body attaches run alone (``filing.scripts``), and the amalgamator inlines a helper a
function imports when it is called (04's reproducer crashed with ModuleNotFoundError: _lane in a plain clone)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from harness.filing import reproducer, scripts, standalone

SCRIPT = '''\
"""Demo: a self-contained reproducer.

Run it once per build, from one directory:

  1. acme/fake main unchanged (CPU is enough):
       python repro_demo.py --unpatched
  2. acme/fake main with this PR (CPU is enough):
       python repro_demo.py --patched
  3. acme/fake main with this PR (CUDA GPU):
       python repro_demo.py --patched --device cuda
"""
import argparse
import sys


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--patched", action="store_true")
    p.add_argument("--unpatched", action="store_true")
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    import fakepkg
    print("observed", fakepkg.VALUE)
    if args.device == "cuda":
        sys.exit(3)
    sys.exit(0 if fakepkg.VALUE in (1, 2) else 1)


main()
'''


def _trees(tmp_path: Path, patched_value: int = 2) -> tuple[Path, Path]:
    plain, patched = tmp_path / "plain", tmp_path / "patched"
    for tree, value in ((plain, 1), (patched, patched_value)):
        (tree / "fakepkg").mkdir(parents=True)
        (tree / "fakepkg" / "__init__.py").write_text(f"VALUE = {value}\n")
    return plain, patched


def test_a_script_that_stands_alone_passes_and_runs_only_its_cpu_steps(tmp_path):
    plain, patched = _trees(tmp_path)
    script = tmp_path / "repro_demo.py"
    script.write_text(SCRIPT)
    out = scripts.run_script(script, sys.executable, plain, patched, [])
    assert out.findings == []
    assert [what for what, _ in out.ran] == ["--help", "step 1", "step 2"]  # step 3 needs a GPU


def test_a_cpu_step_that_fails_on_the_patched_tree_is_a_finding(tmp_path):
    plain, patched = _trees(tmp_path, patched_value=7)
    script = tmp_path / "repro_demo.py"
    script.write_text(SCRIPT)
    out = scripts.run_script(script, sys.executable, plain, patched, [])
    assert len(out.findings) == 1 and out.findings[0].startswith("step 2 (repro_demo.py --patched) exited 1")


def test_a_nested_import_of_a_helper_and_the_project_s_words_fail(tmp_path):
    """04's crash: a function importing a helper of ours when called; and our vocabulary in the text."""
    plain, patched = _trees(tmp_path)
    script = tmp_path / "repro_demo.py"
    script.write_text(SCRIPT.replace("    import fakepkg\n", "    import fakepkg\n    from _lane import figure\n")
                      .replace('print("observed"', 'print("BUG_REPRODUCED"'))
    out = scripts.run_script(script, sys.executable, plain, patched, [])
    assert any("imports _lane, which a plain environment does not have" in f for f in out.findings), out.findings
    assert any("'_lane' is this project's word" in f for f in out.findings), out.findings
    assert any("'BUG_REPRODUCED' is this project's word" in f for f in out.findings), out.findings
    assert any(f.startswith("step 1 (repro_demo.py --unpatched) exited 1") for f in out.findings), out.findings


def test_the_harness_is_not_importable_from_an_attached_script(tmp_path):
    plain, patched = _trees(tmp_path)
    script = tmp_path / "repro_demo.py"
    script.write_text(SCRIPT.replace("import argparse\n", "import argparse\ntry:\n    import harness\nexcept "
                                     "ImportError:\n    harness = None\nassert harness is None\n"))
    out = scripts.run_script(script, sys.executable, plain, patched, [])
    assert [f for f in out.findings if "exited" in f] == []  # the guarded import failed, as in a plain clone


def test_a_helper_imported_inside_a_function_is_inlined(tmp_path):
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    (helpers / "_lane.py").write_text("def figure(name, value):\n    print('FIGURE', name, value)\n")
    (helpers / "_timing.py").write_text(textwrap.dedent('''\
        def report(name, t):
            """One figure for a timing."""
            from _lane import figure

            figure(name, t)
        '''))
    main = tmp_path / "repro.py"
    main.write_text('"""Doc."""\nfrom _timing import report\n\n\ndef run():\n    from _lane import figure\n'
                    '    figure("direct", 1)\n    report("timed", 2)\n\n\nrun()\n')
    text = standalone.amalgamate(main, [helpers], "New doc")
    assert "from _lane import" not in text
    plain = reproducer.public_dialect(text, "04", "repro.py")
    path = tmp_path / "alone" / "repro.py"
    path.parent.mkdir()
    path.write_text(plain)
    proc = subprocess.run([sys.executable, "-I", str(path)], capture_output=True, text=True, cwd=path.parent)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["FIGURE direct 1", "FIGURE timed 2"]
