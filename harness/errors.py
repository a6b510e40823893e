"""Exit codes and the exception families the CLI turns into one clean line.

One convention for the whole tool (``harness`` and the nox sessions):

====  ==========  ==============================================================
code  name        meaning
====  ==========  ==============================================================
0     OK          every lane that ran printed its expected sentinel
1     MISMATCH    a lane ran to completion but printed another sentinel
2     USAGE       bad input: arguments, tracking.toml, a manifest, a patch header
3     SKIPPED     a lane needs hardware this host lacks; nothing was validated
4     PIN         a pinned artefact cannot be fetched or fails its sha256
5     APPLY       a patch of the series does not apply
6     BUILD       building, installing or import-checking a build failed
7     CRASH       a reproducer died: non-zero exit, no verdict, or no host stamp
8     TIMEOUT     a reproducer ran past its time limit and was killed
9     UPSTREAM    the GitHub API is unreachable, rate-limited or refused the token; nothing written
10    LINT        a filing body failed its lint (private host, path, address or token)
11    DRIFT       ``harness absorbed`` found a local change no pack tracks
12    TAMPERED    a receipt fails verification: a file edited, missing or not covered by its digests
70    INTERNAL    a bug in the harness (traceback in <cache>/last-error.log)
130   INTERRUPT   stopped by Ctrl-C
143   TERMINATED  stopped by SIGTERM or SIGHUP (CI cancellation); children killed, scratch removed
====  ==========  ==============================================================

When several lanes end differently the most severe code wins, in the order
USAGE > PIN > UPSTREAM > LINT > APPLY > BUILD > CRASH > TIMEOUT > MISMATCH > SKIPPED > OK.
DRIFT comes only from ``harness absorbed`` and TAMPERED only from ``harness receipts``;
neither is mixed with lane codes.
"""

from __future__ import annotations

import enum


class Exit(enum.IntEnum):
    OK = 0
    MISMATCH = 1
    USAGE = 2
    SKIPPED = 3
    PIN = 4
    APPLY = 5
    BUILD = 6
    CRASH = 7
    TIMEOUT = 8
    UPSTREAM = 9
    LINT = 10
    DRIFT = 11
    TAMPERED = 12
    INTERNAL = 70
    INTERRUPT = 130
    TERMINATED = 143


_SEVERITY = [Exit.OK, Exit.SKIPPED, Exit.MISMATCH, Exit.TIMEOUT, Exit.CRASH,
             Exit.BUILD, Exit.APPLY, Exit.LINT, Exit.UPSTREAM, Exit.PIN, Exit.DRIFT, Exit.TAMPERED, Exit.USAGE,
             Exit.INTERNAL, Exit.TERMINATED, Exit.INTERRUPT]


def worst(codes) -> Exit:
    """The most severe of several exit codes (``OK`` for none)."""
    return max((Exit(c) for c in codes), key=_SEVERITY.index, default=Exit.OK)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived. Raised from the signal handler, so every cleanup that runs on
    Ctrl-C (killing the reproducer's process group, removing scratch entries) runs for it too."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum


class HarnessError(Exception):
    """Base of every failure the CLI reports as one line and an exit code."""

    exit_code: Exit = Exit.USAGE

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class UsageError(HarnessError):
    """Bad command-line input (unknown pack, lane or option)."""

    exit_code = Exit.USAGE


class ConfigError(HarnessError):
    """tracking.toml, a manifest or a patch header is invalid; names file and key."""

    exit_code = Exit.USAGE


class PinError(HarnessError):
    """A pinned artefact cannot be fetched, fails its sha256, or cannot be unpacked."""

    exit_code = Exit.PIN


class SeriesError(HarnessError):
    """A patch does not apply; names pack, patch file, path and hunk."""

    exit_code = Exit.APPLY


class BuildError(HarnessError):
    """Building, installing or import-checking a build failed."""

    exit_code = Exit.BUILD


class BundleError(HarnessError):
    """An offline bundle is missing, damaged, or lacks a build the run needs."""

    exit_code = Exit.PIN


class UpstreamError(HarnessError):
    """The GitHub API cannot be reached, is rate-limited, or refused the token."""

    exit_code = Exit.UPSTREAM


class LintError(HarnessError):
    """A filing body failed its lint; the message holds one line per finding."""

    exit_code = Exit.LINT


class EditError(HarnessError):
    """An edit checkout is missing, dirty, or its commits cannot be turned back into the pack's series."""

    exit_code = Exit.USAGE


class DriftError(HarnessError):
    """A local change under patches/ (or overlays/) that no pack in tracking.toml accounts for."""

    exit_code = Exit.DRIFT


class ReceiptError(HarnessError):
    """A receipt fails verification (a file edited, missing, or not covered by its digests)."""

    exit_code = Exit.TAMPERED
