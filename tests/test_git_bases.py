"""Git-commit bases: materialization from mirrors, failures that leave nothing, runs, rebase/absorbed,
ported series, export for filing, and release provenance; on small upstream repositories built here."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import CORE_BUGGY, CORE_FIXED, cli, fake_tree, git, make_patch

from harness.errors import Exit
from harness.lane import series
from harness.lane.tracking import Tracking
from harness.upstream import pins

MIRROR_NAME = "example.invalid+fake.git"  # what pins.mirror_name makes of https://example.invalid/fake


def _upstream(tmp_path: Path, core: str, version: str = "1.0") -> tuple[Path, str]:
    """A bare mirror holding one commit of fakepkg (the same tree as the fake sdist, with ``core``)."""
    work = tmp_path / f"upstream-{version}-{abs(hash(core)) % 10**6}"
    for name, text in fake_tree(version, core).items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", f"fakepkg {version}")
    sha = git(work, "rev-parse", "HEAD").strip()
    mirrors = tmp_path / "mirrors"
    mirrors.mkdir(exist_ok=True)
    bare = mirrors / MIRROR_NAME
    if not bare.exists():
        git(tmp_path, "init", "-q", "--bare", str(bare))
    git(work, "push", "-q", str(bare), f"HEAD:refs/heads/b{sha[:8]}")
    return mirrors, sha


def _add_git_base(lane_repo, name: str, sha: str) -> None:
    path = lane_repo.root / "upstream" / "fake.toml"
    path.write_text(path.read_text() + textwrap.dedent(f'''
        [bases.{name}]
        version = "{name}@{sha[:7]}"
        role = "upstream {name}"

        [bases.{name}.git]
        commit = "{sha}"
        ref = "refs/heads/{name}"
        date = "2026-07-23"
    '''))


@pytest.fixture
def git_repo(lane_repo, tmp_path):
    mirrors, sha = _upstream(tmp_path, CORE_BUGGY)
    _add_git_base(lane_repo, "main", sha)
    lane_repo.mirrors, lane_repo.main_sha = mirrors, sha
    return lane_repo


def _bases(cache: Path) -> list[str]:
    d = cache / "bases" / "fake"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def test_a_git_base_describes_itself_by_its_commit_and_has_no_release_artefact(git_repo):
    manifest = pins.load_manifest(git_repo.root, "fake")
    main, release = manifest.base("main"), manifest.base("1.0")
    assert (main.kind, main.pin, main.describe()["ref"]) == ("git", git_repo.main_sha, "refs/heads/main")
    assert "artifact" not in main.describe()
    with pytest.raises(TypeError, match="'main' is a git commit, not a release"):
        main.release  # noqa: B018  (the property is what is tested)
    assert release.release is release.artifact and release.kind == release.artifact.kind


def test_materialize_fetches_exactly_the_pinned_commit_from_a_mirror(git_repo, capsys):
    args = ["materialize", "fake", "--base", "main", "--git-mirrors", str(git_repo.mirrors), *git_repo.args()]
    assert cli(*args) == Exit.OK
    [entry] = _bases(git_repo.cache)
    checkout = git_repo.cache / "bases" / "fake" / entry
    assert git(checkout, "rev-parse", "HEAD").strip() == git_repo.main_sha
    assert git(checkout, "rev-parse", "pristine^{commit}").strip() == git_repo.main_sha
    assert capsys.readouterr().out.strip() == str(checkout)  # stdout holds only the checkout
    assert cli(*args) == Exit.OK  # cached: reused, not fetched again
    assert _bases(git_repo.cache) == [entry]


def test_a_fetch_from_a_mirror_says_so_and_names_the_mirror(git_repo, capsys):
    assert cli("materialize", "fake", "--base", "main", "--git-mirrors", str(git_repo.mirrors),
               *git_repo.args()) == Exit.OK
    err = capsys.readouterr().err
    assert f"from mirror {git_repo.mirrors / MIRROR_NAME}" in err
    assert "https://example.invalid/fake" not in err


def test_the_mirror_can_come_from_the_environment(git_repo, monkeypatch):
    monkeypatch.setenv(pins.MIRRORS_ENV, str(git_repo.mirrors))
    assert cli("materialize", "fake", "--base", "main", *git_repo.args()) == Exit.OK


def test_a_wrong_commit_id_fails_with_one_line_and_leaves_nothing(git_repo, capsys):
    wrong = "b" * 40
    text = (git_repo.root / "upstream" / "fake.toml").read_text().replace(git_repo.main_sha, wrong)
    (git_repo.root / "upstream" / "fake.toml").write_text(text)
    code = cli("materialize", "fake", "--base", "main", "--git-mirrors", str(git_repo.mirrors), *git_repo.args())
    assert code == Exit.PIN
    err = capsys.readouterr().err
    assert f"cannot fetch commit {wrong}" in err and MIRROR_NAME in err
    assert [p for p in _bases(git_repo.cache) if not p.startswith(".tmp-")] == []
    assert not any((git_repo.cache / "bases" / "fake").glob(".tmp-*"))


def test_a_missing_mirror_and_an_unreachable_url_fail_clearly(git_repo, tmp_path, capsys):
    path = git_repo.root / "upstream" / "fake.toml"
    # the repository URL is a local path that does not exist: unreachable without touching the network
    path.write_text(path.read_text().replace('repo = "https://example.invalid/fake"',
                                             f'repo = "{tmp_path}/nowhere/example.invalid/fake"'))
    empty = tmp_path / "empty-mirrors"
    empty.mkdir()
    code = cli("materialize", "fake", "--base", "main", "--git-mirrors", str(empty), *git_repo.args())
    assert code == Exit.PIN
    err = capsys.readouterr().err
    assert "no mirror at" in err and str(empty) in err and "nowhere" in err
    assert [p for p in _bases(git_repo.cache) if not p.startswith(".tmp-")] == []


def test_lanes_run_on_a_git_base_and_receipts_name_the_commit(git_repo):
    extra = textwrap.dedent('''
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
    git_repo.write_tracking(extra=extra)
    code = cli("run", "01", "--lane", "bug-main", "--lane", "fix-main", "--git-mirrors", str(git_repo.mirrors),
               *git_repo.args())
    assert code == Exit.OK
    receipts = sorted((git_repo.root / "receipts" / "fake" / "01").glob("*-fix-main/receipt.json"))
    data = json.loads(receipts[-1].read_text())
    assert data["verdict"] == "pass"
    assert data["base"]["kind"] == "git" and data["base"]["commit"] == git_repo.main_sha
    assert data["base"]["pin"] == git_repo.main_sha and data["base"]["ref"] == "refs/heads/main"


def test_rebase_and_absorbed_at_a_git_base(git_repo, tmp_path, capsys):
    _, fixed = _upstream(tmp_path, CORE_FIXED, version="1.1")
    _add_git_base(git_repo, "next", fixed)
    args = ["--git-mirrors", str(git_repo.mirrors), *git_repo.args()]
    assert cli("rebase", "fake", "--to", "main", *args) == Exit.OK
    assert cli("absorbed", "fake", "--to", "next", *args) == Exit.OK
    out = capsys.readouterr().out
    assert "absorbed" in out and 'state = "absorbed"' in out  # the proposed tracking.toml change


def test_a_ported_series_is_used_on_its_base_and_an_absorbed_dependency_is_skipped(git_repo, tmp_path):
    # pack 02 depends on 01; upstream "main" absorbed 01, and 02 carries a series ported to main
    variant = CORE_BUGGY.replace("def total(xs):\n    return sum(xs)", "def total(xs):\n    return sum(xs) + 0")
    extra = textwrap.dedent('''
        [packs.02]
        title = "total adds zero"
        target = "fake"
        kind = "pr"
        state = "planned"
        files = ["src/fakepkg/core.py"]
        depends_on = ["01"]
        base = "1.0"
    ''')
    git_repo.write_tracking(extra=extra)
    fixed_total = CORE_FIXED.replace("return sum(xs)", "return sum(xs) + 0")
    git_repo.write_patch(make_patch(tmp_path, CORE_FIXED, fixed_total, subject="core: total adds zero"), pack="02")
    ported = git_repo.root / "patches" / "fake" / "02" / "main"
    ported.mkdir()
    (ported / "0001-total-adds-zero.patch").write_text(
        make_patch(tmp_path, CORE_BUGGY, variant, subject="core: total adds zero (on main)"))
    tracking = Tracking.load(git_repo.root)
    pack = tracking.pack("02")
    at_release = series.series_for(tracking, git_repo.root, pack, "1.0")
    assert [(p.pack, p.path.parent.name) for p in at_release] == [("01", "01"), ("02", "02")]
    text = (git_repo.root / "tracking.toml").read_text().replace(
        'state = "ready"', 'state = "absorbed"', 1) + '\n[packs.01.absorbed]\nversion = "main"\nbase = "main"\n'
    (git_repo.root / "tracking.toml").write_text(text)
    tracking = Tracking.load(git_repo.root)
    at_main = series.series_for(tracking, git_repo.root, tracking.pack("02"), "main")
    assert [(p.pack, p.path.parent.name) for p in at_main] == [("02", "main")]
    # `harness check --apply` applies each series on each base it declares (release and ported)
    assert cli("check", "--apply", "--git-mirrors", str(git_repo.mirrors), *git_repo.args()) == Exit.OK


def test_export_writes_a_series_that_plain_git_am_applies_without_our_trailers(git_repo, tmp_path, capsys):
    out = tmp_path / "filed"
    code = cli("export", "01", "--base", "main", "-o", str(out), "--json", "--git-mirrors", str(git_repo.mirrors),
               "--identity", "Tess Tester <tess@example.invalid>", *git_repo.args())
    assert code == Exit.OK
    result = json.loads(capsys.readouterr().out)
    assert result["commit"] == git_repo.main_sha and result["stacked_on"] == []
    [patch] = sorted(out.glob("*.patch"))
    text = patch.read_text()
    assert "Upstream-Status:" not in text and "\nPack:" not in text and "core: use each element's own weight" in text
    # an upstream maintainer's clone: plain git, no harness
    clone = tmp_path / "maintainer"
    git(tmp_path, "clone", "-q", str(git_repo.mirrors / MIRROR_NAME), str(clone))
    git(clone, "checkout", "-q", git_repo.main_sha)
    git(clone, "am", "-q", str(patch))
    assert "zip(xs, w)" in (clone / "src" / "fakepkg" / "core.py").read_text()


def test_export_of_a_series_that_does_not_apply_exits_apply(git_repo, tmp_path, capsys):
    _, other = _upstream(tmp_path, CORE_BUGGY.replace("# multiply each element by its weight", "# changed"), "2.0")
    _add_git_base(git_repo, "moved", other)
    code = cli("export", "01", "--base", "moved", "-o", str(tmp_path / "x"), "--git-mirrors", str(git_repo.mirrors),
               "--identity", "Tess Tester <tess@example.invalid>", *git_repo.args())
    assert code == Exit.APPLY
    assert "pack 01" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_provenance_lists_every_difference_between_artefact_and_tag(lane_repo, tmp_path, capsys):
    mirrors, sha = _upstream(tmp_path, CORE_BUGGY)
    path = lane_repo.root / "upstream" / "fake.toml"
    path.write_text(path.read_text().replace(f'commit = "{"a" * 40}"', f'commit = "{sha}"\ncommit_source = "tag v1.0"'))
    assert cli("provenance", "fake", "--json", "--git-mirrors", str(mirrors), *lane_repo.args()) == Exit.OK
    [result] = json.loads(capsys.readouterr().out)
    assert result["compared"] and result["package_identical"] is True and result["tag_files_unchanged"] is True
    assert {(d["path"], d["kind"]) for d in result["differences"]} == {("PKG-INFO", "only-in-artifact")}
    # a release whose tree differs inside the package is reported as such
    _, other = _upstream(tmp_path, CORE_FIXED, "1.0")
    path.write_text(path.read_text().replace(sha, other))
    assert cli("provenance", "fake", "--json", "--git-mirrors", str(mirrors), *lane_repo.args()) == Exit.OK
    [result] = json.loads(capsys.readouterr().out)
    assert result["package_identical"] is False and result["tag_files_unchanged"] is False
    assert {"path": "src/fakepkg/core.py", "kind": "differs", "in_package": True} in result["differences"]


def test_provenance_says_plainly_when_no_commit_is_recorded(lane_repo, capsys):
    path = lane_repo.root / "upstream" / "fake.toml"
    path.write_text(path.read_text().replace(f'commit = "{"a" * 40}"', 'commit = ""\ncommit_note = "tag not mirrored"'))
    assert cli("provenance", "fake", "--json", *lane_repo.args()) == Exit.OK
    [result] = json.loads(capsys.readouterr().out)
    assert result["compared"] is False and result["note"] == "tag not mirrored"


def test_a_mirror_named_twice_is_tried_once(git_repo, monkeypatch, capsys):
    wrong = "c" * 40
    path = git_repo.root / "upstream" / "fake.toml"
    path.write_text(path.read_text().replace(git_repo.main_sha, wrong))
    monkeypatch.setenv(pins.MIRRORS_ENV, str(git_repo.mirrors))  # the same directory as --git-mirrors
    code = cli("materialize", "fake", "--base", "main", "--git-mirrors", str(git_repo.mirrors), *git_repo.args())
    assert code == Exit.PIN
    [failure] = [line for line in capsys.readouterr().err.splitlines() if "cannot fetch commit" in line]
    assert failure.count(str(git_repo.mirrors / MIRROR_NAME)) == 1  # tried once (the progress line names it too)


def test_status_says_a_base_it_cannot_fetch_is_unchecked_not_a_bad_series(git_repo, tmp_path, capsys, monkeypatch):
    """No mirrors and an unreachable repository: the reason is 'base' (not 'apply'), and status exits 4."""
    monkeypatch.delenv(pins.MIRRORS_ENV, raising=False)
    path = git_repo.root / "upstream" / "fake.toml"
    nowhere = f'repo = "{tmp_path}/nowhere/example.invalid/fake"'
    path.write_text(path.read_text().replace('repo = "https://example.invalid/fake"', nowhere)
                    .replace('default_base = "1.0"', 'default_base = "1.0"\nfiling_base = "main"'))
    capsys.readouterr()
    assert cli("status", "--json", *git_repo.args()) == Exit.PIN
    out = capsys.readouterr()
    [pack] = json.loads(out.out)["packs"]
    codes = [r["code"] for r in pack["reasons"]]
    assert "base" in codes and "apply" not in codes, codes
    assert pack["apply"]["status"] == "base unavailable" and "nowhere" in pack["apply"]["detail"]
    assert "could not be checked" in out.err and "fake main" in out.err and "--git-mirrors" in out.err
    # the whole story of the pack says so in full
    assert cli("status", "01", *git_repo.args()) == Exit.PIN
    assert "[base] cannot fetch fake main" in capsys.readouterr().out
    # nothing was remembered: with the mirror, the same series is checked, and applies
    assert cli("status", "--json", "--git-mirrors", str(git_repo.mirrors), *git_repo.args()) != Exit.PIN
    [pack] = json.loads(capsys.readouterr().out)["packs"]
    assert pack["apply"]["status"] == "applies" and "base" not in [r["code"] for r in pack["reasons"]]
