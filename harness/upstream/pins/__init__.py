"""Pinned upstreams: the manifests in ``upstream/`` and their materialization.

A manifest names the upstream repository and its named bases. A base is one of two kinds:

* a **release**: a registry artefact (file name, URL, size, sha256), with the upstream commit of its
  tag where one is known. Materializing downloads (or finds) the artefact, checks its sha256 before
  anything is extracted, unpacks it and records it as the single commit of a fresh git repository;
* a **git commit** (``[bases.NAME.git]``: full commit id, the ref it was read from and that ref's
  date): materializing fetches exactly that commit, one deep, from a local mirror when one is
  configured (``--git-mirrors DIR`` / ``$PATCHLANE_GIT_MIRRORS``, holding ``owner+name.git``) and
  otherwise from the repository URL, and checks that HEAD is that id. Upstream main and dev branches
  are bases of this kind.

Either way the result is a git checkout tagged ``pristine`` in the store: the base every series
applies to. A base that cannot be had leaves nothing in the cache.

The package, one module per concept (imports go down this list):

* ``model``: a manifest as typed data (``Manifest``, ``Base``, ``Artifact``, ``GitPin``, ``Policy`` ...);
* ``load``: ``upstream/<target>.toml`` read into it, with a closed schema;
* ``downloads``: a pinned artefact found or fetched, size and sha256 checked;
* ``checkout``: a base as a pristine checkout in the store (artefact unpacked, or git commit fetched);
* ``releases``: a release not in the manifest yet, read from the registry and written in.

The names below are the package's public surface; callers use ``pins.load_manifest(...)`` and so on.

May import: ``harness.errors``, ``harness.base``, ``harness.upstream.git``.
"""

from __future__ import annotations

from harness.upstream.pins.downloads import PYPI_URL, fetch
from harness.upstream.pins.load import (
    ARTIFACT_KEYS,
    BASE_KEYS,
    CHECK_KEYS,
    GIT_KEYS,
    HOST_BUILD_KEYS,
    MANIFEST_KEYS,
    PAYLOAD_KEYS,
    POLICY_KEYS,
    list_targets,
    load_manifest,
    manifest_path,
    manifest_unknown_keys,
)
from harness.upstream.pins.checkout import (
    MIRRORS_ENV,
    Checkout,
    Sources,
    base_dir,
    extract_artifact,
    fetch_commit,
    git_sources,
    materialize,
    mirror_name,
    mirrors_from_env,
)
from harness.upstream.pins.model import (
    ARTIFACT_KINDS,
    BUILD_KINDS,
    CHECK_KINDS,
    Artifact,
    Base,
    Check,
    GitPin,
    HostBuild,
    Manifest,
    Payload,
    Policy,
)
from harness.upstream.pins.releases import manifest_snippet, pypi_base, with_base, write_manifest

__all__ = [
    "ARTIFACT_KEYS", "ARTIFACT_KINDS", "Artifact", "BASE_KEYS", "BUILD_KINDS", "Base", "CHECK_KEYS", "CHECK_KINDS",
    "Check", "Checkout", "GIT_KEYS", "GitPin", "HOST_BUILD_KEYS", "HostBuild", "MANIFEST_KEYS", "MIRRORS_ENV",
    "Manifest", "PAYLOAD_KEYS", "POLICY_KEYS", "PYPI_URL", "Payload", "Policy", "Sources", "base_dir",
    "extract_artifact", "fetch", "fetch_commit", "git_sources", "list_targets", "load_manifest", "manifest_path",
    "manifest_snippet", "manifest_unknown_keys", "materialize", "mirror_name", "mirrors_from_env", "pypi_base",
    "with_base", "write_manifest",
]
