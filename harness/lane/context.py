"""What the library's workflows share: the repository, the cache, and the options of one invocation.

``Context`` is the repository side (root, tracking.toml, the store, the manifests it reads);
``Options`` is a frozen record of how this invocation runs (interpreter, where artefacts and git
bases come from, an offline bundle, where receipts go). A command builds both once and hands them
down; no workflow changes them. Workflows (lanes, edit, rebase, absorbed, bundle) import this
module and never one another for it.

``Offline`` is what a lane asks of an offline bundle; ``unpacked.OpenBundle`` is the one implementation. The
lane states what it needs here, so this module names nothing above it (the bundle is made from lanes).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from harness.base.store import Store
from harness.lane import builds, series
from harness.lane.tracking import Tracking
from harness.upstream import pins


class Offline(Protocol):
    """An unpacked offline bundle whose files matched its index: every build a lane takes comes from it."""

    path: Path  # the bundle directory (its host builds' environments sit beside it)

    def build_for(self, key: str, manifest: pins.Manifest, store: Store, label: str, python: str | None = None
                  ) -> builds.Build: ...

    def kernel_cache_seed(self, key: str) -> Path | None: ...

    def tests_tree_for(self, key: str, store: Store, label: str) -> Path: ...


@dataclass(frozen=True)
class StackSeries:
    """A stack's combined series (``harness stack check``): a patched lane of one of ``packs`` on ``base`` of
    ``target`` applies all of ``patches`` instead of its own pack's series."""

    target: str
    base: str
    packs: tuple[str, ...]
    patches: tuple[series.Patch, ...]


@dataclass(frozen=True)
class Options:
    python: str = sys.executable
    artifacts: tuple[Path, ...] = ()  # directories searched for pinned artefacts before downloading
    git_mirrors: tuple[Path, ...] = ()  # directories of bare mirrors (owner+name.git) tried before the repo URL
    bundle: Offline | None = None  # every build comes from this offline bundle
    receipts_dir: Path | None = None  # default: <root>/receipts
    echo: bool = True  # echo the reproducer's output
    stack: StackSeries | None = None  # patched lanes of these packs run on the whole stack


@dataclass(frozen=True)
class Context:
    root: Path
    tracking: Tracking
    store: Store
    options: Options = field(default_factory=Options)

    def manifest(self, target: str) -> pins.Manifest:
        return pins.load_manifest(self.root, target)

    def sources(self) -> pins.Sources:
        """Where this invocation may fetch bases from."""
        return pins.Sources(artifacts=self.options.artifacts, git_mirrors=self.options.git_mirrors)

    def materialize(self, manifest: pins.Manifest, base_name: str | None) -> pins.Checkout:
        return pins.materialize(manifest, base_name, self.store, self.sources())

    # read-only shorthands for the options most code needs
    @property
    def python(self) -> str:
        return self.options.python

    @property
    def bundle(self) -> Offline | None:
        return self.options.bundle

    @property
    def receipts_dir(self) -> Path | None:
        return self.options.receipts_dir

    @property
    def echo(self) -> bool:
        return self.options.echo
