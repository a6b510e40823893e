"""``bundle.json``, the index of an offline bundle: its top directory, its format and the files it lists.

Both sides of a bundle read it: ``bundle.py`` writes the index and opens an unpacked bundle for a run,
``bootstrap.py`` checks every listed file before anything is installed. Standard library only, for the
bootstrap's sake.
"""

from __future__ import annotations

FORMAT = 1  # the index format this harness writes and reads
TOP = "patchlane-bundle"  # the one top directory of a bundle archive
VERIFIED = ".verified.json"  # in the bundle directory: which files matched, and their identity then


def expected_files(index: dict) -> dict[str, str]:
    """Every file ``bundle.json`` lists, with its sha256."""
    return {e["file"]: e["sha256"]
            for e in index["wheels"] + list(index["builds"].values()) + list(index.get("tests_trees", {}).values())
            + list(index.get("kernel_caches", {}).values()) + index.get("host_builds", [])}
