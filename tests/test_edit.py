"""harness edit / regen: series as commits, deterministic regeneration, never losing work."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import CORE_BUGGY, CORE_FIXED, cli, git, make_patch

from harness.errors import Exit
from harness.filing.edit import EditState

CORE = "src/fakepkg/core.py"


def _series(lane_repo, pack="01"):
    d = lane_repo.root / "patches" / "fake" / pack
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def _edit(lane_repo, tmp_path, pack="01"):
    d = tmp_path / f"edit-{pack}"
    assert cli("edit", pack, "--dir", str(d), *lane_repo.args()) == Exit.OK
    return d


def test_regen_of_an_unchanged_series_is_byte_identical(lane_repo, tmp_path, capsys):
    before = _series(lane_repo)
    d = _edit(lane_repo, tmp_path)
    assert git(d, "log", "--format=%s", "pristine..HEAD").split("\n")[0] == "core: use each element's own weight"
    assert cli("regen", "01", "--dir", str(d), *lane_repo.args()) == Exit.OK
    assert "unchanged" in capsys.readouterr().out
    assert _series(lane_repo) == before


def test_regen_after_an_edit_prints_the_interdiff_and_replaces_the_file(lane_repo, tmp_path, capsys):
    d = _edit(lane_repo, tmp_path)
    core = d / CORE
    core.write_text(core.read_text().replace("zip(xs, w)", "zip(xs, w, strict=True)"))
    git(d, "commit", "-q", "-a", "--amend", "--no-edit")
    capsys.readouterr()
    assert cli("regen", "01", "--dir", str(d), *lane_repo.args()) == Exit.OK
    out = capsys.readouterr().out
    assert "+++ b/0001-use-own-weight.patch" in out and "modified: 0001-use-own-weight.patch" in out
    assert "-+    return [x * wi for x, wi in zip(xs, w)]" in out
    assert "++    return [x * wi for x, wi in zip(xs, w, strict=True)]" in out
    [(name, text)] = _series(lane_repo).items()
    assert b"strict=True" in text and b"Upstream-Status: Submitted" in text and b"Pack: 01" in text
    assert b"Date: Thu, 1 Jan 2026 00:00:00 +0000" in text and text.startswith(b"From " + b"0" * 40)
    assert not [p for p in (lane_repo.root / "patches" / "fake").iterdir() if p.name.startswith(".")]  # no backup left
    assert cli("regen", "01", "--dir", str(d), *lane_repo.args()) == Exit.OK  # and now it is stable again
    assert "unchanged" in capsys.readouterr().out


def test_dirty_checkout_is_refused_and_names_the_files(lane_repo, tmp_path, capsys):
    before = _series(lane_repo)
    d = _edit(lane_repo, tmp_path)
    (d / CORE).write_text("oops\n")
    (d / "new.txt").write_text("x\n")
    capsys.readouterr()
    assert cli("regen", "01", "--dir", str(d), *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert "uncommitted changes" in err and CORE in err and "new.txt" in err
    assert _series(lane_repo) == before


def test_a_new_commit_adds_a_patch_and_dropping_it_removes_it(lane_repo, tmp_path, capsys):
    d = _edit(lane_repo, tmp_path)
    core = d / CORE
    core.write_text(core.read_text().replace("return sum(xs)", "return float(sum(xs))"))
    git(d, "commit", "-q", "-am", "core: total is a float\n\nUpstream-Status: Pending\nPack: 01\n")
    assert cli("regen", "01", "--dir", str(d), *lane_repo.args()) == Exit.OK
    assert "added: 0002-core-total-is-a-float.patch" in capsys.readouterr().out
    names = list(_series(lane_repo))
    assert names == ["0001-use-own-weight.patch", "0002-core-total-is-a-float.patch"]
    git(d, "reset", "-q", "--hard", "HEAD~1")
    assert cli("regen", "01", "--dir", str(d), *lane_repo.args()) == Exit.OK
    assert "removed: 0002-core-total-is-a-float.patch" in capsys.readouterr().out
    assert len(_series(lane_repo)) == 1


def test_a_commit_without_upstream_status_is_refused(lane_repo, tmp_path, capsys):
    before = _series(lane_repo)
    d = _edit(lane_repo, tmp_path)
    (d / CORE).write_text((d / CORE).read_text() + "\n# note\n")
    git(d, "commit", "-q", "-am", "core: a note")
    capsys.readouterr()
    assert cli("regen", "01", "--dir", str(d), *lane_repo.args()) == Exit.USAGE
    err = capsys.readouterr().err
    assert "has no 'Upstream-Status:' line" in err and "core: a note" in err
    assert _series(lane_repo) == before


def test_series_changed_behind_the_checkout_is_not_overwritten(lane_repo, tmp_path, capsys):
    d = _edit(lane_repo, tmp_path)
    lane_repo.write_patch(make_patch(tmp_path, CORE_BUGGY, CORE_FIXED.replace("weight", "own weight")))
    capsys.readouterr()
    assert cli("regen", "01", "--dir", str(d), *lane_repo.args()) == Exit.USAGE
    assert "changed since 'harness edit'" in capsys.readouterr().err


def test_dependencies_come_first_and_stay_out_of_the_pack(lane_repo, tmp_path):
    lane_repo.write_tracking('\n[packs.02]\ntitle = "t"\ntarget = "fake"\nkind = "pr"\nstate = "planned"\n'
                             'depends_on = ["01"]\n')
    second = make_patch(tmp_path, CORE_FIXED, CORE_FIXED.replace("return sum(xs)", "return sum(xs) + 0"),
                        status="Pending", subject="core: total plus zero").replace("Pack: 01", "Pack: 02")
    lane_repo.write_patch(second, pack="02", name="0001-core-total-plus-zero.patch")
    before = _series(lane_repo, "02")
    d = _edit(lane_repo, tmp_path, "02")
    subjects = git(d, "log", "--reverse", "--format=%s", "pristine..HEAD").splitlines()
    assert subjects == ["core: use each element's own weight", "core: total plus zero"]
    state = EditState.read(d)
    assert [r.pack for r in state.ranges] == ["01", "02"] and state.own().start == state.ranges[0].end
    assert cli("regen", "02", "--dir", str(d), *lane_repo.args()) == Exit.OK
    assert _series(lane_repo, "02") == before


def test_force_never_replaces_unregenerated_commits(lane_repo, tmp_path, capsys):
    d = _edit(lane_repo, tmp_path)
    assert cli("edit", "01", "--dir", str(d), *lane_repo.args()) == Exit.USAGE
    assert "already exists" in capsys.readouterr().err
    (d / CORE).write_text((d / CORE).read_text() + "\n# more\n")
    git(d, "commit", "-q", "-am", "core: more\n\nUpstream-Status: Pending\n")
    assert cli("edit", "01", "--dir", str(d), "--force", *lane_repo.args()) == Exit.USAGE
    assert "not regenerated" in capsys.readouterr().err
    assert "core: more" in git(d, "log", "-1", "--format=%s")
    assert cli("regen", "01", "--dir", str(d), *lane_repo.args()) == Exit.OK
    assert cli("edit", "01", "--dir", str(d), "--force", *lane_repo.args()) == Exit.OK
    assert len(git(d, "log", "--format=%s", "pristine..HEAD").splitlines()) == 2


def test_a_series_that_does_not_apply_leaves_no_checkout(lane_repo, tmp_path, capsys):
    lane_repo.write_patch(make_patch(tmp_path, "a\n", "b\n", path="src/fakepkg/nope.py", status="Pending"),
                          name="0002-nope.patch")
    d = tmp_path / "edit"
    assert cli("edit", "01", "--dir", str(d), *lane_repo.args()) == Exit.APPLY
    assert not d.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".edit-")]


def test_an_empty_commit_is_refused_not_silently_dropped(lane_repo, tmp_path, capsys):
    d = _edit(lane_repo, tmp_path)
    git(d, "commit", "-q", "--allow-empty", "-m", "nothing\n\nUpstream-Status: Pending\n")
    capsys.readouterr()
    assert cli("regen", "01", "--dir", str(d), *lane_repo.args()) == Exit.USAGE
    assert "('nothing') is empty" in capsys.readouterr().err


def test_a_commit_claiming_another_pack_is_refused(lane_repo, tmp_path, capsys):
    d = _edit(lane_repo, tmp_path)
    (d / CORE).write_text((d / CORE).read_text() + "\n# other\n")
    git(d, "commit", "-q", "-am", "core: other\n\nUpstream-Status: Pending\nPack: 02\n")
    capsys.readouterr()
    assert cli("regen", "01", "--dir", str(d), *lane_repo.args()) == Exit.USAGE
    assert "says 'Pack: 02'" in capsys.readouterr().err


def test_a_plain_format_patch_file_regenerates_to_a_zero_diff(lane_repo, tmp_path, capsys):
    # A series written by plain `git format-patch` (real commit id, time of day, long blob ids,
    # a `-- <git version>` signature) must not show as modified when its content did not change.
    d = lane_repo.root / "patches" / "fake" / "01"
    [patch] = sorted(d.glob("*.patch"))
    text = patch.read_text()
    lines = text.split("\n")
    lines[0] = lines[0].replace("0" * 40, "97c627b4d64c53c1d64560f9449eb7c57992c3f4")
    lines = [ln.replace("00:00:00 +0000", "09:35:43 +0000") if ln.startswith("Date: ") else ln for ln in lines]
    patch.write_text("\n".join(lines).rstrip("\n") + "\n-- \n2.39.5\n\n")
    before = _series(lane_repo)
    e = _edit(lane_repo, tmp_path)
    capsys.readouterr()
    assert cli("regen", "01", "--dir", str(e), *lane_repo.args()) == Exit.OK
    assert "unchanged" in capsys.readouterr().out
    assert _series(lane_repo) == before


def test_regen_on_a_detached_head_at_pristine_is_refused_and_keeps_the_series(lane_repo, tmp_path, capsys):
    before = _series(lane_repo)
    d = _edit(lane_repo, tmp_path)
    git(d, "checkout", "-q", "--detach", "pristine")  # a clean tree, just not the pack's branch
    capsys.readouterr()
    assert cli("regen", "01", "--dir", str(d), *lane_repo.args()) == Exit.USAGE
    assert "HEAD is detached" in capsys.readouterr().err
    assert _series(lane_repo) == before
    assert not [p for p in (lane_repo.root / "patches" / "fake").iterdir() if p.name.startswith(".")]


def test_regen_on_another_branch_is_refused(lane_repo, tmp_path, capsys):
    before = _series(lane_repo)
    d = _edit(lane_repo, tmp_path)
    git(d, "checkout", "-q", "-b", "experiment")
    capsys.readouterr()
    assert cli("regen", "01", "--dir", str(d), *lane_repo.args()) == Exit.USAGE
    assert "not on the pack's branch pack-01" in capsys.readouterr().err
    assert _series(lane_repo) == before


def test_regen_never_empties_a_series(lane_repo, tmp_path, capsys):
    before = _series(lane_repo)
    d = _edit(lane_repo, tmp_path)
    git(d, "reset", "-q", "--hard", "pristine")  # the pack's branch, with every commit of the pack dropped
    capsys.readouterr()
    assert cli("regen", "01", "--dir", str(d), *lane_repo.args()) == Exit.USAGE
    assert "regenerating would empty" in capsys.readouterr().err
    assert _series(lane_repo) == before


def test_the_backup_is_kept_until_the_new_series_is_verified(lane_repo, tmp_path, monkeypatch, capsys):
    from harness.lane import series_write

    d = _edit(lane_repo, tmp_path)
    core = d / CORE
    core.write_text(core.read_text().replace("return sum(xs)", "return float(sum(xs))"))
    git(d, "commit", "-q", "-am", "core: total is a float\n\nUpstream-Status: Pending\nPack: 01\n")
    before = _series(lane_repo)
    real = series_write.replace_series

    def lossy(dest, new):  # the swap "succeeds" but a file of the new series did not survive it
        backup = real(dest, new)
        sorted(dest.glob("*.patch"))[-1].unlink()
        return backup

    monkeypatch.setattr(series_write, "replace_series", lossy)
    capsys.readouterr()
    assert cli("regen", "01", "--dir", str(d), *lane_repo.args()) == Exit.USAGE
    assert "the previous series was put back" in capsys.readouterr().err
    assert _series(lane_repo) == before
    assert not [p for p in (lane_repo.root / "patches" / "fake").iterdir() if p.name.startswith(".")]
    monkeypatch.setattr(series_write, "replace_series", real)
    assert cli("regen", "01", "--dir", str(d), *lane_repo.args()) == Exit.OK  # the checkout still regenerates
    assert len(_series(lane_repo)) == 2



def test_two_clones_sharing_a_cache_keep_their_own_edit_checkouts(lane_repo, tmp_path, capsys):
    """Edit state is keyed by the checkout: a second clone's edit and regen never see the first one's work."""
    other = tmp_path / "clone2"
    shutil.copytree(lane_repo.root, other)
    cache = ["--cache", str(lane_repo.cache)]
    assert cli("edit", "01", "--root", str(lane_repo.root), *cache) == Exit.OK
    first = Path(capsys.readouterr().out.strip())
    (first / CORE).write_text(CORE_FIXED + "# the first clone's edit\n")
    git(first, "commit", "-q", "-a", "--amend", "--no-edit")
    assert cli("edit", "01", "--root", str(other), *cache) == Exit.OK
    second = Path(capsys.readouterr().out.strip())
    assert second != first and (first / CORE).read_text().endswith("# the first clone's edit\n")
    patch = "patches/fake/01/0001-use-own-weight.patch"
    assert cli("regen", "01", "--root", str(other), *cache) == Exit.OK  # its own checkout: unchanged
    assert "first clone" not in (other / patch).read_text()
    assert cli("regen", "01", "--root", str(lane_repo.root), *cache) == Exit.OK
    assert "the first clone's edit" in (lane_repo.root / patch).read_text()


def test_regen_refuses_a_fifo_in_the_series_instead_of_hanging(lane_repo, tmp_path, capsys):
    """A FIFO named like a patch blocked regen's read of the series it replaces forever (every other verb refused
    it). The read runs in a thread here so that a hang fails the test instead of the suite."""
    import os
    import threading

    d = _edit(lane_repo, tmp_path)
    fifo = lane_repo.root / "patches" / "fake" / "01" / "0002-stray.patch"
    os.mkfifo(fifo)
    got: list[int] = []
    worker = threading.Thread(target=lambda: got.append(cli("regen", "01", "--dir", str(d), *lane_repo.args())),
                              daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive():  # unblock the reader so the thread can end, then fail
        with open(fifo, "wb"):
            pass
        raise AssertionError("regen blocked on the FIFO")
    assert got == [Exit.USAGE]
    assert "0002-stray.patch: a FIFO, not a patch file" in capsys.readouterr().err
    assert fifo.exists() and (lane_repo.root / "patches" / "fake" / "01" / "0001-use-own-weight.patch").is_file()
