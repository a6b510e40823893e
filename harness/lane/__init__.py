"""The lane: a pack's series on a base, built, run by its reproducer, and recorded as a receipt.

In the order a lane runs: ``tracking`` (tracking.toml, the packs and their lanes; a package), ``suite`` and
``upstream_tests`` (which upstream tests a lane runs), ``series`` (the patch files and the git operations on
them) and ``series_write`` (writing them back), ``builds``, ``host_builds`` and ``stubs`` (a tree built into
something importable), ``runtime`` (each base's exact runtime wheels), ``kernel_key`` and ``kernel_cache``
(compiled kernels kept per key), ``runs`` (one reproducer run and what it printed), ``receipts`` (the record
of a run; a package), ``context`` (repository + frozen options), ``lanes`` (all of it end to end) and
``suite_check`` (the upstream suite's verdict from its lanes, and its commit-by-commit check), with
``suite_reasons`` (why a case failed, read from the lanes' pytest logs). ``sessions``
turns packs into nox sessions, ``scaffold`` starts a new pack.

May import: ``harness.errors``, ``harness.base``, ``harness.upstream``. Importing this package imports nothing
(the bootstrap takes ``host_builds`` from here with the standard library only).
"""
