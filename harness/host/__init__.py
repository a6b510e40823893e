"""The GPU host: carrying lanes to a machine without network, and running many of them there at once.

Owns the offline bundle (``bundle``: made here from lanes; ``unpacked``: opened on the host; ``index``: its
``bundle.json``; ``wheels``: the pinned wheels it carries), payloads too large for one carry (``payloads``),
CUDA device code pruned to one architecture (``fatbin``), and the sweep (``sweep_plan``, ``sweep_schedule``,
``sweep_estimate``, ``sweep``: plan, place, estimate and run many lanes on one host).
``harness/bootstrap.py``, the host's front door, sits above this package.

May import: ``harness.errors``, ``harness.base``, ``harness.upstream``, ``harness.lane``, ``harness.watch``,
``harness.filing`` (the sweep skips lanes readiness calls current). ``index``, ``payloads`` and ``fatbin`` are
standard library only, and importing this package imports nothing: the bootstrap uses them before any
dependency is installed.
"""
