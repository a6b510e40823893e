"""harness rebase: per-patch classification on another base; --refresh; --to-version via a fake PyPI."""

from __future__ import annotations

import hashlib
import json

import pytest
from conftest import CORE_BUGGY, CORE_FIXED, cli, make_sdist

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
