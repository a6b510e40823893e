"""The pinned upstreams: what a target is, where its bases come from, and how we talk to its hosting.

Owns the manifests of ``upstream/`` and their materialization into pristine trees (``pins``), the one place
git runs (``git``), the GitHub REST client (``github``), and the upstream's own formatters and linters that an
exported series must pass (``linters``).

May import: ``harness.errors`` and ``harness.base``. Nothing here knows a pack: packs live in ``harness.lane``.
"""
