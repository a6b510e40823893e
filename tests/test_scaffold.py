"""``harness new``: a pack's tracking entry, series directory and reproducer, all or nothing."""

from __future__ import annotations

import json
import shutil

from conftest import REPO, cli

from harness.errors import Exit
from harness.lane.receipts import find
from harness.lane.tracking import Tracking


def test_new_scaffolds_a_pack_that_loads_checks_and_runs_its_reproducer(lane_repo, capsys):
    before = (lane_repo.root / "tracking.toml").read_text()
    code = cli("new", "24", "--target", "fake", "--title", "scale drops the last weight", "--requires", "cpu",
               *lane_repo.args())
    assert code == Exit.OK, capsys.readouterr().err
    out = capsys.readouterr()
    repro = lane_repo.root / out.out.strip()
    assert repro == lane_repo.root / "repros" / "fake" / "pack24_scale_drops_the_last_weight.py"
    assert "next (docs/adding-a-pack.md): write check()" in out.err
    # round 4, item 4: the declarations live in the pack's file, and the messages say so
    assert "evidence labels in patches/fake/24/pack.toml" in out.err and "labels in tracking.toml" not in out.err
    assert "its lanes (" in out.err and "patches/fake/24/pack.toml" in out.err
    pack = Tracking.load(lane_repo.root).pack("24")
    assert (pack.title, pack.target, pack.kind, pack.state, pack.base) == (
        "scale drops the last weight", "fake", "pr", "planned", "1.0")
    assert [(ln.name, ln.patched, ln.expect) for ln in pack.lanes] == [
        ("bug-1.0", False, "BUG_REPRODUCED"), ("fix-1.0", True, "FIX_VALIDATED")]
    assert (lane_repo.root / "patches" / "fake" / "24").is_dir()
    text = (lane_repo.root / "tracking.toml").read_text()
    assert text.startswith(before.rstrip("\n"))  # appended: the comments and packs before it untouched
    assert cli("check", *lane_repo.args()) == Exit.OK
    # the reproducer is the kit's: it prints the host stamp, then stops until its check is written
    capsys.readouterr()
    assert cli("run", "24", "--lane", "bug-1.0", "--no-tracking", *lane_repo.args()) == Exit.CRASH
    [rec] = find(lane_repo.root, "fake", "24")
    log = (rec.dir / "output.log").read_text()
    assert log.lstrip().startswith("HOST_STAMP") and "NotImplementedError: pack 24: write the check" in log
    assert json.loads((rec.dir / "receipt.json").read_text())["verdict"] == "crash"


def test_new_changes_nothing_when_it_cannot_finish(lane_repo, capsys, monkeypatch):
    before = (lane_repo.root / "tracking.toml").read_text()
    assert cli("new", "01", "--target", "fake", *lane_repo.args()) == Exit.USAGE  # taken
    assert "pack 01 is already in tracking.toml" in capsys.readouterr().err
    assert cli("new", "25", "--target", "nope", *lane_repo.args()) == Exit.USAGE
    assert cli("new", "25", "--target", "fake", "--base", "9.9", *lane_repo.args()) == Exit.USAGE
    assert "has no base '9.9'" in capsys.readouterr().err
    # the save fails after the reproducer and the series directory were written: both are removed again
    def full_disk(self):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Tracking, "save", full_disk)
    assert cli("new", "25", "--target", "fake", *lane_repo.args()) == Exit.INTERNAL
    assert (lane_repo.root / "tracking.toml").read_text() == before
    assert not (lane_repo.root / "patches" / "fake" / "25").exists()
    assert not list((lane_repo.root / "repros" / "fake").glob("pack25_*"))


FAKE_CHECK = '''def check() -> bool:
    """True when the bug shows in the build this process imports: scale() uses w[0] for every element."""
    from fakepkg.core import scale

    got = scale([1.0, 2.0, 3.0], [1.0, 0.0, 2.0])
    figure("example", max(abs(a - b) for a, b in zip(got, [1.0, 0.0, 6.0], strict=True)))
    return got != [1.0, 0.0, 6.0]
'''


def test_a_scaffolded_pack_goes_to_ready_on_cpu_once_its_check_and_series_are_written(lane_repo, tmp_path, capsys):
    """The worked example of docs/contributing.md ("Adding a pack"), on the fake upstream: lanes on the base and on
    the filing base, evidence rows, a reproducer whose check is written, a series; run; ready."""
    from conftest import CORE_BUGGY, CORE_FIXED, make_patch

    from harness.base.store import Store
    from harness.filing import readiness
    from harness.lane.lanes import Context

    lane_repo.add_base("2.0", CORE_BUGGY)  # upstream main, say: the filing base, another base than the pin
    manifest = lane_repo.root / "upstream" / "fake.toml"
    manifest.write_text(manifest.read_text().replace('default_base = "1.0"\n', 'default_base = "1.0"\n'
                                                                                'filing_base = "2.0"\n'))
    shutil.copytree(REPO / "templates", lane_repo.root / "templates", dirs_exist_ok=True)
    manifest.write_text(manifest.read_text().replace("https://example.invalid/fake", "https://github.com/acme/fake"))
    assert cli("new", "24", "--target", "fake", "--title", "scale uses the first weight for every element",
               "--requires", "cpu", *lane_repo.args()) == Exit.OK
    repro = lane_repo.root / capsys.readouterr().out.strip()
    pack = Tracking.load(lane_repo.root).pack("24")
    assert [(ln.name, ln.base, ln.patched) for ln in pack.lanes] == [
        ("bug-1.0", "1.0", False), ("fix-1.0", "1.0", True), ("bug-2.0", "2.0", False), ("fix-2.0", "2.0", True)]
    assert [(row.lane, row.figure) for row in pack.evidence] == [("bug-2.0", "example"), ("fix-2.0", "example")]
    # not ready as scaffolded: its check is not written, it has no series and no receipts
    ctx = Context(lane_repo.root, Tracking.load(lane_repo.root), Store(lane_repo.cache))
    assert not readiness.readiness(ctx, ctx.tracking.pack("24")).ready
    # the author's part: the check, what the patch touches, the evidence labels, the series
    text = repro.read_text()
    repro.write_text(text[:text.index("def check()")] + FAKE_CHECK + text[text.index("\n\nif __name__"):])
    repro.write_text(repro.read_text().replace('    figure("example", 0.0)  # each measured number, before the '
                                               'verdict; it lands in the receipt\n', ""))
    track = lane_repo.root / "tracking.toml"
    track.write_text(track.read_text().replace('files = []', 'files = ["src/fakepkg/core.py"]', 1)
                     .replace("the example figure of check(): TODO say what it measures",
                              "largest error of scale([1, 2, 3], [1, 0, 2])")
                     .replace('show = "TODO {value}"', 'show = "largest error {value}"')
                     .replace('summary = "TODO: what breaks, for whom, and why"',
                              'summary = "scale() multiplies every element by the first weight"'))
    lane_repo.write_patch(make_patch(tmp_path, CORE_BUGGY, CORE_FIXED), pack="24")
    assert cli("run", "24", "--quiet", *lane_repo.args()) == Exit.OK
    capsys.readouterr()
    assert cli("status", "24", "--json", *lane_repo.args()) == Exit.OK
    [state] = json.loads(capsys.readouterr().out)["packs"]
    assert state["ready"], state["reasons"]


def test_new_writes_the_generated_pack_pages_and_says_so_when_it_cannot(lane_repo, capsys):
    """docs/packs/ is generated and checked in CI: 'new' runs the checkout's tools/pack_pages.py."""
    tools = lane_repo.root / "tools"
    tools.mkdir()
    (tools / "pack_pages.py").write_text("import pathlib, sys\n"
                                         "pathlib.Path('docs/packs').mkdir(parents=True, exist_ok=True)\n"
                                         "pathlib.Path('docs/packs/written').write_text(' '.join(sys.argv[1:]))\n")
    assert cli("new", "24", "--target", "fake", *lane_repo.args()) == Exit.OK
    assert (lane_repo.root / "docs" / "packs" / "written").read_text() == ""  # run without --check: it writes
    (tools / "pack_pages.py").write_text("import sys\nsys.exit('cannot read the receipts')\n")
    assert cli("new", "25", "--target", "fake", *lane_repo.args()) == Exit.OK  # the pack is made all the same
    err = capsys.readouterr().err
    assert "tools/pack_pages.py failed" in err and "cannot read the receipts" in err


def test_new_without_requires_scaffolds_cpu_lanes_where_the_target_runs_on_a_cpu_host(lane_repo, capsys):
    """'harness new 24 --target mamba' as the README gives it wrote requires = "cuda": every lane skipped on a CPU
    host and the pack could never become ready there."""
    from harness.lane.tracking import Tracking as T

    assert T.load(lane_repo.root).pack("01").requires == "cpu"  # the fake target runs on a CPU host
    assert cli("new", "24", "--target", "fake", *lane_repo.args()) == Exit.OK
    err = " ".join(capsys.readouterr().err.split())
    assert "its lanes require cpu (pack 01's lane bug runs fake on a CPU host; --requires chooses)" in err
    assert T.load(lane_repo.root).pack("24").requires == "cpu"
    # a target none of whose lanes runs on a CPU host: cuda, and said why
    lane_repo.write_tracking(requires="cuda")
    assert cli("new", "25", "--target", "fake", *lane_repo.args()) == Exit.OK
    assert "its lanes require cuda (no lane of fake runs on a CPU host yet" in " ".join(capsys.readouterr().err.split())
    assert T.load(lane_repo.root).pack("25").requires == "cuda"


def test_new_help_describes_the_lanes_it_writes(capsys):
    cli("new", "--help")
    text = " ".join(capsys.readouterr().out.split())
    assert "on the base and again on the target's filing base" in text and "4 lanes for a PR" in text


def test_a_new_pack_lands_above_the_generated_verdicts_and_their_note(lane_repo, capsys):
    """Round 4, item 4: [packs.24] was written between the "do not edit" note and [verdicts]."""
    import tomllib

    from harness.lane.tracking.model import VERDICTS_NOTE_LINES

    assert cli("run", "01", "--lane", "bug", "--quiet", *lane_repo.args()) == Exit.OK  # writes [verdicts]
    before = tomllib.loads((lane_repo.root / "tracking.toml").read_text())
    assert cli("new", "24", "--target", "fake", *lane_repo.args()) == Exit.OK
    text = (lane_repo.root / "tracking.toml").read_text()
    note = "\n".join(VERDICTS_NOTE_LINES)
    assert text.index("[packs.24]") < text.index(note) < text.index("[verdicts]")
    assert text[:text.index("[verdicts]")].rstrip("\n").endswith(note)
    after = tomllib.loads(text)
    assert after["verdicts"] == before["verdicts"] and set(after["packs"]) == {"01", "24"}
