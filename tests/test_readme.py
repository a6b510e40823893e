"""The README's main example validates something on a host without a GPU, and says what a GPU adds."""

from __future__ import annotations

import re

from conftest import REPO

from harness.lane.sessions import pack_sessions
from harness.lane.tracking import Tracking


def _example() -> str:
    text = (REPO / "README.md").read_text()
    setup = text[text.index("## Set up and run"):text.index("## Main commands")]
    [session] = re.findall(r"^    nox -s (\w+_pack\d+)", setup, re.M)
    return session


def test_the_readme_example_runs_a_bug_and_a_fix_lane_on_the_cpu():
    session = _example()
    spec = next(s for s in pack_sessions(REPO) if s.name == session)
    pack = Tracking.load(REPO).pack(spec.pack)
    cpu = [lane for lane in pack.lanes if pack.lane_requires(lane) == "cpu"]
    gpu = [lane for lane in pack.lanes if pack.lane_requires(lane) != "cpu"]
    # something is validated here: the bug reproduced on the pin and the fix on the patched build, on one base
    pairs = {(lane.base, lane.patched, lane.expect) for lane in cpu}
    assert any((b, False, "BUG_REPRODUCED") in pairs and (b, True, "FIX_VALIDATED") in pairs for b, _, _ in pairs)
    # and the README says what a GPU adds: lanes skipped here
    text = (REPO / "README.md").read_text()
    assert gpu and "skipped (exit 3)" in text
    # the CPU pair it names for an exit-0 run exists and runs on the CPU
    named = re.findall(r"--lane ([\w.-]+)", text[text.index("## Set up and run"):text.index("## Main commands")])
    assert named and set(named) <= {lane.name for lane in cpu}


def test_the_readme_example_is_a_live_pack():
    """A retired or absorbed pack will never be filed: the first pack a newcomer runs is one we still mean to file."""
    from harness.filing.readiness import FILED_KINDS, NOT_FILED

    session = _example()
    spec = next(s for s in pack_sessions(REPO) if s.name == session)
    pack = Tracking.load(REPO).pack(spec.pack)
    assert pack.state not in NOT_FILED and pack.kind in FILED_KINDS, (pack.id, pack.state, pack.kind)


def test_the_readme_discards_a_run_as_the_run_says():
    """The discard the README gives is the one 'run' prints (harness/commands/run.py: changes_line)."""
    text = (REPO / "README.md").read_text()
    assert "`git checkout -- tracking.toml && git clean -fdq -- receipts/`" in text
    source = (REPO / "harness" / "commands" / "run.py").read_text()
    assert '"git checkout -- tracking.toml"' in source and 'f"git clean -fdq -- {pack_dir}/"' in source


def test_the_readme_names_every_session_but_the_per_pack_and_per_target_ones():
    """Round 4, item 13: the README's list of sessions left out tests_slurm, refresh and attached_scripts."""
    import ast

    tree = ast.parse((REPO / "noxfile.py").read_text())
    sessions = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                and any("session" in ast.unparse(d) for d in f.decorator_list)}
    readme = (REPO / "README.md").read_text()
    assert sessions and {"tests", "lint"} <= sessions
    assert [s for s in sorted(sessions) if f"`{s}`" not in readme] == []
    assert "`stack_<target>`" in readme and "`<target>_pack<NN>`" in readme
