"""An unpacked offline bundle on the GPU host: opened once its files match ``bundle.json``, then the source of every
build, kernel-cache seed and upstream test tree a lane takes (``lane.context.Offline``)."""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass
from pathlib import Path

from harness.base import tarsafe
from harness.base.hashing import verify_files
from harness.base.store import Store
from harness.errors import BundleError
from harness.host.index import FORMAT, TOP, VERIFIED, expected_files
from harness.lane import builds, upstream_tests
from harness.upstream.pins import Manifest


@dataclass
class OpenBundle:
    """An unpacked bundle directory whose files all matched ``bundle.json``."""

    path: Path
    index: dict

    @classmethod
    def open(cls, path: Path) -> OpenBundle:
        meta = path / "bundle.json"
        if not meta.is_file():
            raise BundleError(f"{path}: not an unpacked bundle (no bundle.json)")
        index = json.loads(meta.read_text())
        if index.get("format") != FORMAT:
            raise BundleError(f"{meta}: bundle format {index.get('format')!r}, this harness reads {FORMAT}")
        # files that matched before and have not been touched since (same size, mtime, ctime, inode)
        # are not read again: a warm run from a 60 MB bundle would otherwise hash it all every time
        joined = {e["file"]: e["sha256"] for e in index.get("payloads", [])}
        bad = verify_files(path, expected_files(index) | joined, path / VERIFIED)
        for name in bad:
            if not (path / name).is_file() and name in joined:
                raise BundleError(f"{path}: payload {name} is not joined yet",
                                  hint="start the run with python3 -m harness.bootstrap BUNDLE --parts DIR -- ...; "
                                       "it joins the payloads from their parts")
            if not (path / name).is_file():
                raise BundleError(f"{path}: {name} is missing")
        if bad:
            raise BundleError(f"{path}: {bad[0]} does not match its sha256 in bundle.json")
        return cls(path, index)

    def build_for(self, key: str, manifest: Manifest, store: Store, label: str, python: str | None = None
                  ) -> builds.Build:
        entry = self.index["builds"].get(key)
        if entry is None:
            made_for = str(self.index.get("python") or "?")
            running = builds.interpreter_version(python) if python else None
            if manifest.build == "wheel" and running and running != made_for:
                raise BundleError(f"the bundle has no build for {label} (key {key[:12]}): it was made for Python "
                                  f"{made_for}, and this run's interpreter {python} is Python {running} (a wheel "
                                  "build's key includes the interpreter)",
                                  hint=f"run with --python pointing at a python{made_for}, or make the bundle "
                                       f"with 'harness bundle ... --python-version {running}'")
            raise BundleError(f"the bundle has no build for {label} (key {key[:12]}; interpreter {python or '?'}, "
                              f"bundle made for Python {made_for}); the series or pins changed since it was made: "
                              "make it again with 'harness bundle'")
        src = self.path / entry["file"]
        if src.suffix == ".whl" and manifest.build == "overlay":  # an unpatched overlay carried as its wheel
            return builds.adopt_overlay_wheel(src, key, manifest, store, label)
        if src.suffix == ".whl":
            return builds.adopt_wheel(src, key, manifest, store, label)
        return builds.adopt_site_tar(src, key, manifest, store, label)


    def kernel_cache_seed(self, key: str) -> Path | None:
        """The bundle's kernel-cache entry of ``key`` (a tar, checked against bundle.json), or None."""
        entry = self.index.get("kernel_caches", {}).get(key)
        return None if entry is None else self.path / entry["file"]

    def tests_tree_for(self, key: str, store: Store, label: str) -> Path:
        entry = self.index.get("tests_trees", {}).get(key)
        if entry is None:
            raise BundleError(f"the bundle has no upstream test tree for {label} (key {key[:12]}); the series or "
                              "the lane's ids changed since it was made: make it again with 'harness bundle'")
        return upstream_tests.adopt_tree(self.path / entry["file"], key, store, label)


def unpack(archive: Path, dest: Path) -> Path:
    """Extract ``archive`` under ``dest``; return the bundle directory."""
    try:
        with tarfile.open(archive) as tf:
            for m in tf.getmembers():
                if not m.name.startswith(TOP + "/") and m.name != TOP:
                    raise BundleError(f"{archive}: unexpected member {m.name!r}; not a patch-lane bundle")
            tarsafe.extractall(tf, dest)
    except (tarfile.TarError, OSError) as exc:
        raise BundleError(f"cannot read bundle {archive}: {exc}") from None
    return dest / TOP
