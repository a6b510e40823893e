"""harness rebase: per-patch classification on another base; --refresh; --to-version via a fake PyPI."""

from __future__ import annotations

import hashlib
import json

import pytest
from conftest import CORE_BUGGY, CORE_FIXED, cli, fake_tree, make_sdist

from harness.errors import Exit
from harness.upstream import pins

VARIANTS = {
    "clean": CORE_BUGGY + "\n\ndef mean(xs):\n    return sum(xs) / len(xs)\n",
    "offset": CORE_BUGGY.replace('"""Scaling helpers."""\n', '"""Scaling helpers."""\n\nA = 1\nB = 2\nC = 3\n'),
    "fuzz": CORE_BUGGY.replace("def total(xs):", "def total_of(xs):"),
    "conflict": CORE_BUGGY.replace("[x * w[0] for x in xs]", "[float(x) * w[0] for x in xs]"),
    "contained": CORE_FIXED,
}


def _series(lane_repo):
    d = lane_repo.root / "patches" / "fake" / "01"
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


@pytest.mark.parametrize("kind", list(VARIANTS))
def test_each_patch_is_classified_and_patches_stay_put(lane_repo, capsys, kind):
    lane_repo.add_base("1.1", VARIANTS[kind])
    before = _series(lane_repo)
    code = cli("rebase", "fake", "--to", "1.1", *lane_repo.args())
    out = capsys.readouterr().out
    assert code == (5 if kind == "conflict" else 0)
    row = next(line for line in out.splitlines() if "0001-use-own-weight" in line)
    assert kind in row
    if kind == "offset":
        assert "(offset +4)" in out and "hunk #1" in out
    if kind == "conflict":
        assert "src/fakepkg/core.py" in out and "#1" in out
    assert _series(lane_repo) == before


def test_refresh_rewrites_an_offset_pack_only_when_asked(lane_repo, capsys):
    lane_repo.add_base("1.1", VARIANTS["offset"])
    before = _series(lane_repo)
    assert cli("rebase", "fake", "--to", "1.1", "--refresh", *lane_repo.args()) == Exit.OK
    after = _series(lane_repo)
    assert list(after) == list(before) and after != before
    assert b"@@ -7,7 +7,7 @@" in after["0001-use-own-weight.patch"]
    assert b"Upstream-Status: Submitted" in after["0001-use-own-weight.patch"]
    capsys.readouterr()
    assert cli("rebase", "fake", "--to", "1.1", *lane_repo.args()) == Exit.OK
    row = next(line for line in capsys.readouterr().out.splitlines() if "0001-use-own-weight" in line)
    assert "clean" in row


def _renamed_base(lane_repo, version: str) -> None:
    """Base ``version``: fakepkg with core.py moved to scaling.py and a function added at its end (so its blob is not
    the one the patch names): no plain or -C1 apply finds the file."""
    import io
    import tarfile

    top = f"fakepkg-{version}"
    files = {f"{top}/{name.replace('core.py', 'scaling.py')}": text
             for name, text in fake_tree(version, VARIANTS["clean"]).items()}
    files[f"{top}/PKG-INFO"] = f"Metadata-Version: 2.1\nName: fakepkg\nVersion: {version}\n"
    path = lane_repo.sdist.parent / f"fakepkg-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, text in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tf.addfile(info, io.BytesIO(text.encode()))
    lane_repo.extra_bases[version] = path
    lane_repo.write_manifest()


def test_a_patch_only_a_3way_merge_applies_is_said_and_refreshed_to_apply_plainly(lane_repo, capsys):
    """core.py renamed upstream: plain git am and -C1 find no file; git am -3, with the blobs of the series' own base
    (1.0, materialized and lent to the scratch clone: a base unpacked from a release has only its own), follows
    the rename. rebase says 3-way; --refresh rewrites the patch onto scaling.py, which then applies plainly."""
    _renamed_base(lane_repo, "1.1")
    before = _series(lane_repo)
    assert cli("rebase", "fake", "--to", "1.1", "--json", *lane_repo.args()) == Exit.OK
    [row] = [r for r in json.loads(capsys.readouterr().out)["packs"][0]["patches"]]
    assert row["status"] == "3-way" and "git am -3 merges it cleanly" in row["detail"]
    assert "src/fakepkg/core.py: file is not in the base" in row["detail"]
    assert _series(lane_repo) == before
    assert cli("rebase", "fake", "--to", "1.1", "--refresh", *lane_repo.args()) == Exit.OK
    after = _series(lane_repo)["0001-use-own-weight.patch"]
    assert b"+++ b/src/fakepkg/scaling.py" in after and b"Upstream-Status: Submitted" in after
    capsys.readouterr()
    assert cli("rebase", "fake", "--to", "1.1", "--json", *lane_repo.args()) == Exit.OK
    [row] = json.loads(capsys.readouterr().out)["packs"][0]["patches"]
    assert row["status"] == "clean"


def test_a_3way_merge_without_the_blobs_of_the_series_base_is_a_conflict(lane_repo, capsys, monkeypatch):
    """The series' own base cannot be materialized: nothing is lent, git am -3 cannot build its ancestor, and the
    patch is a conflict naming the file, as before."""
    from harness.watch import rebase

    _renamed_base(lane_repo, "1.1")
    monkeypatch.setattr(rebase.Blobs, "paths", lambda self: [])
    assert cli("rebase", "fake", "--to", "1.1", "--json", *lane_repo.args()) == Exit.APPLY
    [row] = json.loads(capsys.readouterr().out)["packs"][0]["patches"]
    assert row["status"] == "conflict" and "src/fakepkg/core.py: file is not in the base" in row["detail"]


def test_unknown_base_points_at_to_version(lane_repo, capsys):
    assert cli("rebase", "fake", "--to", "9.9", *lane_repo.args()) == Exit.USAGE
    assert "--to-version 9.9" in capsys.readouterr().err


def _fake_pypi(tmp_path, monkeypatch, sdist, sha=None):
    index = tmp_path / "pypi"
    d = index / "fakepkg" / "1.2"
    d.mkdir(parents=True)
    (d / "json").write_text(json.dumps({"urls": [
        {"packagetype": "bdist_wheel", "filename": "fakepkg-1.2-py3-none-any.whl", "url": "file:///nope",
         "digests": {"sha256": "0" * 64}},
        {"packagetype": "sdist", "filename": sdist.name, "url": sdist.as_uri(), "size": sdist.stat().st_size,
         "digests": {"sha256": sha or hashlib.sha256(sdist.read_bytes()).hexdigest()}},
    ]}))
    monkeypatch.setenv("PATCHLANE_PYPI_URL", index.as_uri())


def test_to_version_fetches_verifies_and_prints_the_manifest_entry(lane_repo, tmp_path, monkeypatch, capsys):
    (tmp_path / "pypi-files").mkdir()
    sdist = make_sdist(tmp_path / "pypi-files", "1.2", CORE_FIXED)
    _fake_pypi(tmp_path, monkeypatch, sdist)
    manifest = (lane_repo.root / "upstream" / "fake.toml").read_text()
    assert cli("rebase", "fake", "--to-version", "1.2", *lane_repo.args()) == Exit.OK
    captured = capsys.readouterr()
    out = captured.out
    assert "contained" in out and '[bases."1.2".artifact]' in out and "--write-manifest" in captured.err
    assert (lane_repo.root / "upstream" / "fake.toml").read_text() == manifest
    assert cli("rebase", "fake", "--to-version", "1.2", "--write-manifest", *lane_repo.args()) == Exit.OK
    m = pins.load_manifest(lane_repo.root, "fake")
    assert m.bases["1.2"].artifact.filename == sdist.name
    assert (lane_repo.root / "upstream" / "fake.toml").read_text().startswith(manifest)


def test_to_version_with_a_wrong_digest_is_a_pin_error(lane_repo, tmp_path, monkeypatch, capsys):
    (tmp_path / "pypi-files").mkdir()
    sdist = make_sdist(tmp_path / "pypi-files", "1.2", CORE_FIXED)
    _fake_pypi(tmp_path, monkeypatch, sdist, sha="1" * 64)
    assert cli("rebase", "fake", "--to-version", "1.2", *lane_repo.args()) == Exit.PIN
    assert "sha256 mismatch" in capsys.readouterr().err


def test_to_version_falls_back_to_the_project_document_with_relative_urls(lane_repo, tmp_path, monkeypatch, capsys):
    index = tmp_path / "pypi"
    (index / "files").mkdir(parents=True)
    sdist = make_sdist(index / "files", "1.2", CORE_FIXED)
    (index / "fakepkg").mkdir()
    (index / "fakepkg" / "json").write_text(json.dumps({"releases": {"1.2": [
        {"packagetype": "sdist", "filename": sdist.name, "url": f"../files/{sdist.name}",
         "digests": {"sha256": hashlib.sha256(sdist.read_bytes()).hexdigest()}}]}}))
    monkeypatch.setenv("PATCHLANE_PYPI_URL", index.as_uri())
    assert cli("rebase", "fake", "--to-version", "1.2", *lane_repo.args()) == Exit.OK
    out = capsys.readouterr().out
    assert "contained" in out and f'url = "{sdist.as_uri()}"' in out
    assert cli("rebase", "fake", "--to-version", "7.7", *lane_repo.args()) == Exit.PIN
    assert "has no release 7.7" in capsys.readouterr().err
