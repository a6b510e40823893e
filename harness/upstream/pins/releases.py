"""A release not in the manifest yet: its base read from the registry, and written into the manifest."""

from __future__ import annotations

import dataclasses
import os
import re
import urllib.error
import urllib.parse
import urllib.request

from harness.errors import ConfigError, PinError
from harness.upstream.pins.downloads import PYPI_URL, _read_json
from harness.upstream.pins.load import load_manifest
from harness.upstream.pins.model import Artifact, Base, Manifest


def pypi_base(manifest: Manifest, version: str) -> Base:
    """The base for release ``version`` from the PyPI JSON API, same artefact kind as the default base."""
    index = os.environ.get("PATCHLANE_PYPI_URL", PYPI_URL).rstrip("/")
    url = f"{index}/{manifest.distribution}/{version}/json"
    try:
        files = _read_json(url)["urls"]
    except PinError:
        # Some mirrors serve only the project document; its "releases" table has the same file entries.
        project = f"{index}/{manifest.distribution}/json"
        try:
            releases = _read_json(project)["releases"]
        except PinError:
            raise PinError(f"cannot read {url} nor {project}") from None
        if version not in releases:
            raise PinError(f"{project}: {manifest.distribution} has no release {version}") from None
        files, url = releases[version], project
    pinned = manifest.base(None) if manifest.base(None).artifact else next(
        (b for b in manifest.bases.values() if b.artifact is not None), None)
    if pinned is None:
        raise ConfigError(f"{manifest.path}: no release base to take the artefact kind from")
    ref = pinned.release
    want = "sdist" if ref.kind == "sdist" else "bdist_wheel"
    files = [u for u in files if u.get("packagetype") == want]
    if ref.kind == "wheel":  # same interpreter/ABI/platform tags as the current pin
        tags = ref.filename.rsplit("-", 3)[1:]
        files = [u for u in files if u["filename"].rsplit("-", 3)[1:] == tags]
    if not files:
        raise PinError(f"{url}: release {version} has no {want} like {ref.filename}")
    f = files[0]
    sha = f.get("digests", {}).get("sha256", "")
    if not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise PinError(f"{url}: {f['filename']} has no sha256 digest")
    file_url = urllib.parse.urljoin(url, f["url"])  # mirrors may answer with URLs relative to the document
    art = Artifact(ref.kind, f["filename"], file_url, sha, f.get("size"))
    return Base(name=version, version=version, commit="", role="candidate pin (from the PyPI JSON API)",
                artifact=art, commit_note="not looked up: added by harness rebase --to-version")


def with_base(manifest: Manifest, base: Base) -> Manifest:
    return dataclasses.replace(manifest, bases={**manifest.bases, base.name: base})


def manifest_snippet(base: Base) -> str:
    a = base.release
    size = f"\nsize = {a.size}" if a.size is not None else ""
    return (f'[bases."{base.name}"]\nversion = "{base.version}"\ncommit = ""\n'
            f'commit_note = "not looked up: added by harness rebase --to-version"\ncommit_source = "none"\n'
            f'role = "{base.role}"\nruntime_requires = []\n\n'
            f'[bases."{base.name}".artifact]\nkind = "{a.kind}"\nfilename = "{a.filename}"\nurl = "{a.url}"\n'
            f'sha256 = "{a.sha256}"   # PyPI JSON digest; the download matched it{size}\n')


def write_manifest(manifest: Manifest, base: Base) -> None:
    """Append the base's tables to the manifest; the file is left as it was if the result does not load."""
    old = manifest.path.read_text(encoding="utf-8")
    manifest.path.write_text(old.rstrip("\n") + "\n\n" + manifest_snippet(base), encoding="utf-8")
    try:
        load_manifest(manifest.path.parent.parent, manifest.target)
    except ConfigError:
        manifest.path.write_text(old, encoding="utf-8")
        raise
