"""Receipts: the record of one reproducer run, kept beside its full log.

``receipts/<target>/<pack>/<UTC time>-<lane>/`` holds ``receipt.json``,
``output.log``, ``output.log.sha256`` and ``SHA256SUMS`` (both in
``sha256sum`` format, so ``sha256sum -c`` checks them): ``SHA256SUMS`` covers
every other file of the directory, receipt.json included. A receipt is
written into a scratch directory and renamed into place, so a receipt
directory is never half-written. Receipts are committed exactly as the
harness wrote them.

``check_dir`` verifies one directory as a whole: every file listed in
``SHA256SUMS`` matches, no file is unlisted, the log matches the hash in
receipt.json and in ``output.log.sha256``, and what receipt.json says the
reproducer printed (sentinels, their details, host stamp, figures, verdict) is
what its log says. ``latest_per_lane`` is the one rule of a lane's latest
receipt. Receipts written before ``SHA256SUMS`` existed are *legacy*: they are
checked by everything but the manifest, and reported as log-only.

The package, one module per concept (imports go down this list):

* ``records``: the parts of a receipt and the closed schema they are read with;
* ``model``: ``Receipt`` itself, and ``load`` / ``dump``, its one reader and writer of text;
* ``writer``: a receipt directory, made in a scratch directory and renamed into place;
* ``verifier``: ``check_dir``, a receipt directory checked as a whole;
* ``withdrawn``: ``receipts/withdrawn.toml``, receipts taken out of evidence (never edited) and why;
* ``index``: finding receipts (every run directory, the latest per lane) and tracking.toml's entry for one.

The names below are the package's public surface; callers use ``receipts.load(...)`` and so on.

May import: ``harness.errors``, ``harness.base``, ``harness.lane.runs``.
"""

from __future__ import annotations

from harness.lane.receipts import withdrawn
from harness.lane.receipts.index import (
    dated_in_future,
    display_path,
    find,
    future_dated,
    host_description,
    host_label,
    latest,
    latest_by_lane,
    latest_per_lane,
    log_text,
    receipts_root,
    run_dirs,
    suite_logs,
    verdict_line,
)
from harness.lane.receipts.model import Receipt, Verdict, dump, load
from harness.lane.receipts.records import (
    LOG,
    MANIFEST,
    RECEIPT,
    SCHEMA,
    BaseRecord,
    BuildRecord,
    Figure,
    HarnessRecord,
    Host,
    KernelCacheRecord,
    LogRecord,
    PatchRecord,
    ReproducerRecord,
    Sentinel,
    stamp_time,
    utc_now,
)
from harness.lane.receipts.verifier import Check, check_dir, verify
from harness.lane.receipts.writer import helper_digests, write, write_manifest

__all__ = [
    "BaseRecord", "BuildRecord", "Check", "Figure", "HarnessRecord", "Host", "KernelCacheRecord", "LOG",
    "LogRecord", "MANIFEST", "PatchRecord", "RECEIPT", "Receipt", "ReproducerRecord", "SCHEMA", "Sentinel",
    "Verdict", "check_dir", "dated_in_future", "display_path", "dump", "find", "future_dated", "helper_digests",
    "host_description", "host_label", "latest", "latest_by_lane", "latest_per_lane", "load", "log_text",
    "receipts_root", "run_dirs", "stamp_time", "suite_logs", "utc_now", "verdict_line", "verify", "withdrawn",
    "write", "write_manifest"
]
