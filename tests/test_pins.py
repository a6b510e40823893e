from __future__ import annotations

import hashlib

import pytest
from conftest import cli

from harness import git, pins
from harness.errors import ConfigError, PinError
from harness.store import Store


def test_materialize_makes_a_pristine_git_checkout_and_reuses_it(lane_repo, monkeypatch):
    manifest = pins.load_manifest(lane_repo.root, "fake")
    store = Store(lane_repo.cache)
    first = pins.materialize(manifest, None, store)
    assert (first.path / "src" / "fakepkg" / "core.py").is_file()
    repo = git.repo(first.path)
    assert repo.tags[0].name == "pristine" and git.is_clean(repo)
    assert "sha256" in repo.head.commit.message

    def boom(*a, **k):
        raise AssertionError("a second materialize must not extract again")

    monkeypatch.setattr(pins, "_extract", boom)
    again = pins.materialize(manifest, "1.0", store)
    assert again.path == first.path and again.commit == first.commit


def test_tampered_archive_is_a_hard_error_and_nothing_is_extracted(lane_repo, capsys):
    data = bytearray(lane_repo.sdist.read_bytes())
    data[-10] ^= 0xFF
    lane_repo.sdist.write_bytes(bytes(data))
    manifest = pins.load_manifest(lane_repo.root, "fake")
    with pytest.raises(PinError, match="sha256 mismatch for fakepkg-1.0.tar.gz"):
        pins.materialize(manifest, None, Store(lane_repo.cache))
    bases = lane_repo.cache / "bases"
    assert not bases.exists() or not any(bases.rglob("core.py"))
    assert not list((lane_repo.cache / "downloads").rglob("*.tar.gz*"))
    assert cli("materialize", "fake", *lane_repo.args()) == 4
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("harness:")]
    assert len(errors) == 1 and errors[0].startswith("harness: error: sha256 mismatch") and "Traceback" not in err


def test_artifact_search_dir_is_used_before_the_url(lane_repo, tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / lane_repo.sdist.name).write_bytes(lane_repo.sdist.read_bytes())
    lane_repo.sdist.unlink()  # the URL now points nowhere
    manifest = pins.load_manifest(lane_repo.root, "fake")
    checkout = pins.materialize(manifest, None, Store(lane_repo.cache), [mirror])
    assert (checkout.path / "pyproject.toml").is_file()


def test_unreachable_url_names_the_url(lane_repo):
    lane_repo.sdist.unlink()
    with pytest.raises(PinError, match="cannot download file://"):
        pins.materialize(pins.load_manifest(lane_repo.root, "fake"), None, Store(lane_repo.cache))


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('build = "overlay"', 'build = "docker"', "key 'build' is 'docker'"),
        ('default_base = "1.0"', 'default_base = "9.9"', "default_base '9.9' is not one of the"),
        ('commit = "' + "a" * 40 + '"', 'commit = "abc"', "commit must be a full 40-hex sha"),
        ('kind = "sdist"', 'kind = "egg"', "key 'kind' is 'egg'"),
    ],
)
def test_bad_manifest_names_file_and_key(lane_repo, old, new, message):
    path = lane_repo.root / "upstream" / "fake.toml"
    path.write_text(path.read_text().replace(old, new))
    with pytest.raises(ConfigError, match=message) as exc:
        pins.load_manifest(lane_repo.root, "fake")
    assert "fake.toml" in str(exc.value)


def test_bad_sha_is_rejected(lane_repo):
    lane_repo.write_manifest(sha="xyz")
    with pytest.raises(ConfigError, match="sha256 must be 64 hex digits"):
        pins.load_manifest(lane_repo.root, "fake")


def test_unknown_base_lists_the_known_ones(lane_repo):
    manifest = pins.load_manifest(lane_repo.root, "fake")
    with pytest.raises(ConfigError, match=r"has no base '2.0' \(bases: 1.0\)"):
        manifest.base("2.0")


def test_unsafe_sdist_member_is_refused(lane_repo, tmp_path):
    import io
    import tarfile

    evil = tmp_path / "evil" / lane_repo.sdist.name
    evil.parent.mkdir()
    with tarfile.open(evil, "w:gz") as tf:
        for name in ("fakepkg-1.0/ok.txt", "fakepkg-1.0/../../escape.txt"):
            info = tarfile.TarInfo(name)
            info.size = 2
            tf.addfile(info, io.BytesIO(b"hi"))
    lane_repo.sdist.write_bytes(evil.read_bytes())
    lane_repo.write_manifest(sha=hashlib.sha256(evil.read_bytes()).hexdigest())
    with pytest.raises(PinError, match="unsafe member path"):
        pins.materialize(pins.load_manifest(lane_repo.root, "fake"), None, Store(lane_repo.cache))
    assert not (tmp_path / "escape.txt").exists()
