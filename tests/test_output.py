"""What a run prints for people: a passing bug lane's stack trace stays in its log, not on the console."""

from __future__ import annotations

from conftest import cli

from harness.errors import Exit
from harness.lane import receipts
from harness.lane.runs import TraceFolder

TRACE = '''\
import os
if os.environ.get("HARNESS_PATCHED") != "1":
    print("Exception raised from scale at core.cpp:12 (most recent call first):")
    for i in range(60):
        print(f"frame #{i}: 0x{i:012x} in fakepkg::scale_kernel_{i}()")
    print("RuntimeError: wrong weight")
'''


def test_a_passing_bug_lane_keeps_its_60_line_trace_in_the_log(lane_repo, capsys):
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    text = repro.read_text()
    repro.write_text(text.replace("import _lane\n", "import _lane\n" + TRACE, 1))
    assert cli("run", "01", *lane_repo.args()) == Exit.OK
    err = capsys.readouterr().err
    assert "frame #1:" in err and "frame #2:" not in err and "frame #59" not in err
    assert "... 58 more line(s) of this trace: in the lane's log" in err
    assert "RuntimeError: wrong weight" in err  # the message that ends the trace is shown
    bug = next(r for r in receipts.find(lane_repo.root, "fake", "01") if r.lane == "bug")
    log = (bug.dir / "output.log").read_text()
    assert all(f"frame #{i}:" in log for i in range(60))


def test_the_folder_leaves_short_traces_and_other_lines_alone():
    shown: list[bytes] = []
    folder = TraceFolder(shown.append)
    text = b"before\nTraceback (most recent call last):\n  File \"x.py\", line 1\nValueError: x\nafter"
    folder.feed(text)
    folder.close()
    assert b"".join(shown) == text


def _folded(lines: list[str]) -> str:
    """What the console shows of ``lines`` (each ended by a newline) through a TraceFolder."""
    shown: list[bytes] = []
    folder = TraceFolder(shown.append)
    folder.feed(("\n".join(lines) + "\n").encode())
    folder.close()
    return b"".join(shown).decode()


def test_a_tilelang_trace_with_its_nested_cxx_trace_is_folded_as_one():
    """TVM repeats the C++ trace behind the exception's name ("tvm.error.InternalError: Traceback ..."): that
    second trace was echoed whole, and a passing bug lane looked like a crash."""
    text = _folded(["Traceback (most recent call last):", '  File "probe.py", line 9, in <module>',
                    "    tilelang.lower(prim)", '  File "tilelang/engine/lower.py", line 3, in lower',
                    "tvm.error.InternalError: Traceback (most recent call last):",
                    *(f"  {i}: tvm::tl::LowerBulkCopy::Lower{i}()" for i in range(12, 0, -1)),
                    "  File \"src/transform/lower_bulk_copy.cc\", line 88",
                    "InternalError: Check failed: (shared_layout->InputDim() == 2) is false", "BUG_REPRODUCED"])
    assert "tvm::tl::" not in text and "more line(s) of this trace" in text
    assert text.endswith("InternalError: Check failed: (shared_layout->InputDim() == 2) is false\nBUG_REPRODUCED\n")


def test_pytests_failure_report_is_one_line_on_the_console_and_whole_in_the_log():
    """Round 4, item 9: a passing upstream-test lane that expects failures printed every failure's report."""
    report = [f"E       OSError: cannot download dataset {i}" for i in range(25)]
    text = _folded(["tests/test_a.py FFF.                                          [100%]",
                    "=================================== FAILURES ===================================",
                    "_________________________________ test_one _________________________________", *report,
                    "=================================== ERRORS ===================================",
                    "E   fixture 'x' not found",
                    "=========================== short test summary info ============================",
                    "FAILED tests/test_a.py::test_one - OSError", "TESTS_FAILED_AS_EXPECTED"])
    assert "cannot download" not in text and "fixture 'x'" not in text
    assert "... 28 line(s) of pytest's failure report: in the lane's log" in text
    assert text.endswith("short test summary info ============================\n"
                         "FAILED tests/test_a.py::test_one - OSError\nTESTS_FAILED_AS_EXPECTED\n")


def test_a_report_cut_off_by_the_end_of_the_output_is_still_said():
    shown: list[bytes] = []
    folder = TraceFolder(shown.append)
    folder.feed(b"== FAILURES ==\nE  boom\nE  boom again")
    folder.close()
    assert b"".join(shown) == b"== FAILURES ==\n  ... 2 line(s) of pytest's failure report: in the lane's log " \
                              b"(receipt)\n"


def test_every_lane_folds_traces_on_the_console_and_v_shows_them(lane_repo, capsys):
    repro = lane_repo.root / "repros" / "fake" / "pack01.py"
    repro.write_text(repro.read_text().replace("import _lane\n", "import _lane\n" + TRACE.replace(
        'if os.environ.get("HARNESS_PATCHED") != "1":', "if True:"), 1))
    assert cli("run", "01", "--lane", "fix", *lane_repo.args()) == Exit.OK  # a fix lane: folded too
    assert "frame #2:" not in capsys.readouterr().err
    assert cli("run", "01", "--lane", "fix", "-v", *lane_repo.args()) == Exit.OK
    assert "frame #59:" in capsys.readouterr().err
