from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from conftest import cli

from harness.base.store import Store
from harness.errors import ConfigError, Exit, PinError
from harness.upstream import git, pins
from harness.upstream.pins import checkout as pins_checkout


def test_materialize_makes_a_pristine_git_checkout_and_reuses_it(lane_repo, monkeypatch):
    manifest = pins.load_manifest(lane_repo.root, "fake")
    store = Store(lane_repo.cache)
    first = pins.materialize(manifest, None, store)
    assert (first.path / "src" / "fakepkg" / "core.py").is_file()
    repo = git.repo(first.path)
    assert repo.tags() == ["pristine"] and git.is_clean(repo)
    assert "sha256" in repo.commit("HEAD").message

    def boom(*a, **k):
        raise AssertionError("a second materialize must not extract again")

    monkeypatch.setattr(pins_checkout, "_extract", boom)
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
    assert cli("materialize", "fake", *lane_repo.args()) == Exit.PIN
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


def _links_sdist(lane_repo, tmp_path, links: list[tuple[str, str, bytes]]) -> None:
    """Re-pin the fake base to its own sdist plus ``links`` (name, target, SYMTYPE or LNKTYPE)."""
    import io
    import tarfile

    built = tmp_path / "links" / lane_repo.sdist.name
    built.parent.mkdir()
    with tarfile.open(lane_repo.sdist) as src, tarfile.open(built, "w:gz") as tf:
        for m in src.getmembers():
            tf.addfile(m, src.extractfile(m) if m.isfile() else None)
        for name, target, kind in links:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            tf.addfile(info, io.BytesIO(b""))
    lane_repo.sdist.write_bytes(built.read_bytes())
    lane_repo.write_manifest()


def test_links_that_stay_inside_the_sdist_tree_are_kept(lane_repo, tmp_path):
    import os
    import tarfile

    _links_sdist(lane_repo, tmp_path, [
        ("fakepkg-1.0/src/fakepkg/core_alias.py", "fakepkg-1.0/src/fakepkg/core.py", tarfile.LNKTYPE),  # hard link
        ("fakepkg-1.0/docs/alias", "../src", tarfile.SYMTYPE),  # spelled with '..', but inside the tree
    ])
    checkout = pins.materialize(pins.load_manifest(lane_repo.root, "fake"), None, Store(lane_repo.cache))
    alias, core = checkout.path / "src" / "fakepkg" / "core_alias.py", checkout.path / "src" / "fakepkg" / "core.py"
    assert alias.read_bytes() == core.read_bytes() and os.path.samefile(alias, core)
    assert os.readlink(checkout.path / "docs" / "alias") == "../src"
    assert (checkout.path / "docs" / "alias" / "fakepkg" / "core.py").is_file()
    assert git.is_clean(git.repo(checkout.path))


@pytest.mark.parametrize(
    ("link", "message"),
    [
        (("fakepkg-1.0/escape", "../outside", "sym"), "refusing symlink 'escape' -> '../outside'"),
        (("fakepkg-1.0/docs/deep", "../../x", "sym"), "refusing symlink 'docs/deep' -> '../../x'"),
        (("fakepkg-1.0/abs", "/etc/passwd", "sym"), "refusing symlink 'abs' -> '/etc/passwd'"),
        (("fakepkg-1.0/hard", "other-1.0/x", "lnk"), "refusing hard link 'fakepkg-1.0/hard' -> 'other-1.0/x'"),
    ],
    ids=["symlink-up-one", "symlink-up-two", "symlink-absolute", "hardlink-other-tree"],
)
def test_links_leaving_the_sdist_tree_are_refused(lane_repo, tmp_path, capsys, link, message):
    import tarfile

    name, target, kind = link
    _links_sdist(lane_repo, tmp_path, [(name, target, tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE)])
    assert cli("materialize", "fake", *lane_repo.args()) == Exit.PIN
    assert message in capsys.readouterr().err
    assert not (lane_repo.cache / "bases" / "fake").exists() or not list((lane_repo.cache / "bases" / "fake").iterdir())


def _full_disk_at(lane_repo) -> Path:
    """Make the cache's partial download of the fake base land on /dev/full: every write fails with ENOSPC."""
    manifest = pins.load_manifest(lane_repo.root, "fake")
    art = manifest.base(None).artifact
    partial = lane_repo.cache / "downloads" / art.sha256[:16] / f"{art.filename}.partial"
    partial.parent.mkdir(parents=True)
    partial.symlink_to("/dev/full")
    return partial


def test_disk_full_while_copying_from_artifacts_is_exit_io_and_keeps_nothing(lane_repo, tmp_path, capsys):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / lane_repo.sdist.name).write_bytes(lane_repo.sdist.read_bytes())
    partial = _full_disk_at(lane_repo)
    assert cli("materialize", "fake", "--artifacts", str(mirror), *lane_repo.args()) == Exit.IO
    err = capsys.readouterr().err
    assert "cannot write" in err and "No space left on device" in err and "internal error" not in err
    assert not partial.exists() and not partial.is_symlink()
    assert cli("materialize", "fake", "--artifacts", str(mirror), *lane_repo.args()) == Exit.OK  # space is back


def test_disk_full_while_downloading_is_not_called_offline(lane_repo, capsys):
    partial = _full_disk_at(lane_repo)
    assert cli("materialize", "fake", *lane_repo.args()) == Exit.IO
    err = capsys.readouterr().err
    assert "cannot write" in err and "No space left on device" in err and "offline?" not in err
    assert not partial.exists() and not partial.is_symlink()


def test_an_unknown_manifest_key_is_warned_about_and_a_bad_python_is_refused(lane_repo, capsys):
    from conftest import cli

    from harness.errors import Exit

    path = lane_repo.root / "upstream" / "fake.toml"
    text = path.read_text()
    path.write_text(text.replace('default_base = "1.0"', 'default_base = "1.0"\ndefault-base = "1.1"')
                    .replace('role = "current pin"', 'role = "current pin"\nsha265 = "typo"'))
    assert cli("list", *lane_repo.args()) == Exit.OK
    err = capsys.readouterr().err
    assert "fake.toml: unknown key 'default-base'" in err and "[bases.\"1.0\"]: unknown key 'sha265'" in err
    path.write_text(text.replace('default_base = "1.0"', 'default_base = "1.0"\npython = "twelve"'))
    assert cli("list", *lane_repo.args()) == Exit.USAGE
    assert "key 'python' must read like" in capsys.readouterr().err


def test_the_real_manifests_have_no_unknown_key():
    from conftest import REPO

    from harness.base.tomlutil import load_document
    from harness.upstream import pins

    for target in pins.list_targets(REPO):
        path = pins.manifest_path(REPO, target)
        assert pins.manifest_unknown_keys(path, load_document(path)) == []
