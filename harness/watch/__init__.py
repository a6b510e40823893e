"""Watching upstream move under our packs: threads, overlapping work, new bases, absorbed changes.

Owns the refresh of thread states (``threads``), the decisions recorded about overlapping upstream work
(``decisions``) and the search for it (``related``, ranked by a pack's ``footprint``), trying every series on
another base (``rebase``), the weekly diff of what upstream absorbed (``absorbed``), and whether a release
artefact holds its tag's git tree (``provenance``).

May import: ``harness.errors``, ``harness.base``, ``harness.upstream``, ``harness.lane``.
"""
