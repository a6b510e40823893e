from __future__ import annotations

import pytest
from conftest import CORE_BUGGY, CORE_FIXED, cli, make_patch

from harness.base.store import Store
from harness.errors import ConfigError, Exit, SeriesError
from harness.lane import series
from harness.upstream import git, pins


def _checkout(lane_repo):
    return pins.materialize(pins.load_manifest(lane_repo.root, "fake"), None, Store(lane_repo.cache))


def test_patch_headers_are_parsed(lane_repo):
    [patch] = series.load_series(lane_repo.root, "fake", "01")
    assert patch.upstream_status == "Submitted" and patch.status_detail == "https://example.invalid/pr/1"
    assert patch.subject == "core: use each element's own weight"
    assert patch.files == ("src/fakepkg/core.py",)
    assert patch.hunks[0].index == 1 and patch.hunks[0].path == "src/fakepkg/core.py"


def test_series_applies_as_commits_and_is_cached(lane_repo):
    checkout = _checkout(lane_repo)
    patches = series.load_series(lane_repo.root, "fake", "01")
    tree = series.apply(checkout, patches, Store(lane_repo.cache))
    assert "zip(xs, w)" in (tree.path / "src" / "fakepkg" / "core.py").read_text()
    repo = git.repo(tree.path)
    assert repo.commit("HEAD").summary == "core: use each element's own weight"
    assert git.is_clean(repo)
    again = series.apply(checkout, patches, Store(lane_repo.cache))
    assert again.path == tree.path


def test_key_changes_with_patch_content(lane_repo, tmp_path):
    checkout = _checkout(lane_repo)
    one = series.load_series(lane_repo.root, "fake", "01")
    k1 = series.series_key("fake", checkout.base.artifact.sha256, one)
    lane_repo.write_patch(make_patch(tmp_path, CORE_BUGGY, CORE_FIXED.replace("weight", "own weight")))
    two = series.load_series(lane_repo.root, "fake", "01")
    assert series.series_key("fake", checkout.base.artifact.sha256, two) != k1
    assert series.series_key("fake", checkout.base.artifact.sha256, []) != k1


def test_conflict_names_pack_file_path_and_hunk_and_leaves_nothing(lane_repo, tmp_path, capsys):
    other_base = CORE_BUGGY.replace("def total(xs):\n    return sum(xs)", "def total(xs):\n    return 0")
    second = make_patch(tmp_path, other_base, other_base.replace("return 0", "return -1"),
                        subject="core: total returns -1")
    lane_repo.write_patch(second, name="0002-total.patch")
    checkout = _checkout(lane_repo)
    patches = series.load_series(lane_repo.root, "fake", "01")
    with pytest.raises(SeriesError) as exc:
        series.apply(checkout, patches, Store(lane_repo.cache))
    msg = str(exc.value)
    assert "pack 01" in msg and "0002-total.patch" in msg and "src/fakepkg/core.py" in msg and "hunk #1" in msg
    trees = lane_repo.cache / "trees" / "fake"
    assert not trees.exists() or not any(trees.iterdir())
    assert cli("apply", "01", *lane_repo.args()) == Exit.APPLY
    assert "Traceback" not in capsys.readouterr().err


def test_patch_on_missing_file_is_explained(lane_repo, tmp_path):
    lane_repo.write_patch(make_patch(tmp_path, "a\n", "b\n", path="src/fakepkg/nope.py"), name="0002-nope.patch")
    with pytest.raises(SeriesError, match="src/fakepkg/nope.py"):
        series.apply(_checkout(lane_repo), series.load_series(lane_repo.root, "fake", "01"), Store(lane_repo.cache))


@pytest.mark.parametrize(
    ("status", "message"),
    [("Maybe", "bad Upstream-Status 'Maybe'"), ("Submitted", "Submitted needs a")],
)
def test_bad_upstream_status_is_rejected_with_file_and_line(lane_repo, tmp_path, status, message):
    path = lane_repo.write_patch(make_patch(tmp_path, CORE_BUGGY, CORE_FIXED, status=status))
    with pytest.raises(ConfigError, match=message) as exc:
        series.load_series(lane_repo.root, "fake", "01")
    assert f"{path}:" in str(exc.value)


def test_missing_upstream_status_is_rejected(lane_repo):
    d = lane_repo.root / "patches" / "fake" / "01"
    p = next(d.iterdir())
    p.write_text("\n".join(ln for ln in p.read_text().splitlines() if not ln.startswith("Upstream-Status")) + "\n")
    with pytest.raises(ConfigError, match="no 'Upstream-Status:' line"):
        series.load_series(lane_repo.root, "fake", "01")


def test_patch_file_name_must_be_numbered(lane_repo):
    (lane_repo.root / "patches" / "fake" / "01" / "fix.diff").write_text("x")
    with pytest.raises(ConfigError, match="NNNN-slug.patch"):
        series.load_series(lane_repo.root, "fake", "01")


def test_folded_subject_is_unfolded(lane_repo, tmp_path):
    long = "core: use each element's own weight instead of the first one, everywhere scale is called"
    lane_repo.write_patch(make_patch(tmp_path, CORE_BUGGY, CORE_FIXED, subject=long))
    text = next((lane_repo.root / "patches" / "fake" / "01").iterdir()).read_text()
    assert "\n " in text.split("\n\n", 1)[0]  # git folded the Subject header
    [patch] = series.load_series(lane_repo.root, "fake", "01")
    assert patch.subject == long


def test_a_non_ascii_subject_is_decoded_from_its_mail_header(lane_repo, tmp_path):
    """git format-patch MIME-encodes a non-ASCII subject (=?UTF-8?q?...?=); the series reads it as written."""
    from conftest import CORE_BUGGY, CORE_FIXED, make_patch

    text = make_patch(tmp_path, CORE_BUGGY, CORE_FIXED, subject="core: use each element’s own weight (ß)")
    assert "=?UTF-8?" in text  # what git wrote
    path = lane_repo.write_patch(text)
    [patch] = series.load_series(lane_repo.root, "fake", "01")
    assert patch.path == path and patch.subject == "core: use each element’s own weight (ß)"


def test_check_counts_the_ported_series_and_says_what_it_counts(lane_repo, capsys):
    """'check' said 12 patches where the repository holds 19 files: it counted only the packs' own series."""
    import shutil

    from conftest import cli

    from harness.errors import Exit

    top = lane_repo.root / "patches" / "fake" / "01"
    (top / "main").mkdir()
    for patch in top.glob("*.patch"):
        shutil.copy(patch, top / "main" / patch.name)
    capsys.readouterr()
    assert cli("check", *lane_repo.args()) == Exit.OK
    out = " ".join(capsys.readouterr().out.split())
    assert ("patch files: 2 with valid Upstream-Status (1 in the packs' own series, 1 in series ported to main)"
            in out), out


@pytest.mark.parametrize("where, text, said", [
    ("message", "core: fix\u2028Signed-off-by: Someone Else <x@example.com>", "a line break other than newline"),
    ("message", "core: use \u202eeach element's own\u202c weight", "a bidi control"),
    ("added", "return [x * wi for x, wi in zip(xs, w)]  # \u2067ok\u2069", "a bidi control"),
])
def test_a_patch_with_characters_other_tools_read_otherwise_is_refused(lane_repo, tmp_path, where, text, said):
    """A Signed-off-by after a U+2028 is a trailer to some readers; bidi controls make code read otherwise than it
    runs. Every loader refuses such a patch, naming the file and the physical line (issue 55 item 9)."""
    if where == "message":
        patch = make_patch(tmp_path, CORE_BUGGY, CORE_FIXED, subject=text)
    else:
        patch = make_patch(tmp_path, CORE_BUGGY, CORE_FIXED.replace("return [x * wi for x, wi in zip(xs, w)]", text))
    path = lane_repo.write_patch(patch)
    with pytest.raises(ConfigError) as err:
        series.parse_patch("01", path)
    kind = "the commit message's subject" if where == "message" else "an added line"
    assert "0001-use-own-weight.patch" in str(err.value) and f"{kind} holds {said}" in str(err.value)


def test_a_non_ascii_subject_is_read_decoded(lane_repo, tmp_path):
    """format-patch writes a non-ASCII subject as RFC 2047 words; the PR title is the decoded text."""
    from harness.filing.parts import patch_message

    path = lane_repo.write_patch(make_patch(tmp_path, CORE_BUGGY, CORE_FIXED, subject="core: weights × inputs"))
    assert "=?" in path.read_text()  # as git writes it
    assert series.parse_patch("01", path).subject == "core: weights × inputs"
    assert patch_message(path).subject == "core: weights × inputs"
