"""Exit codes and the exception families the CLI turns into one clean line.

One convention for the whole tool (``harness`` and the nox sessions); ``MEANINGS``
below is the table ``harness --help`` and docs/exit-codes.md print. When several lanes end
differently the most severe code wins (``SEVERITY``). DRIFT comes only from
``harness absorbed`` and TAMPERED only from ``harness receipts``, ``harness cache`` and ``harness suite compare``
(a receipt its verdict reads fails verification); neither is mixed with lane codes.
NO_LANES comes only from a pack that declares no lane at all.
"""

from __future__ import annotations

import enum
import errno
import os


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
    NO_LANES = 13
    INTERNAL = 70
    IO = 74
    INTERRUPT = 130
    TERMINATED = 143


MEANINGS: dict[Exit, str] = {
    Exit.OK: "every lane that ran printed its expected sentinel",
    Exit.MISMATCH: "a lane ran to completion but printed another sentinel",
    Exit.USAGE: "bad input: arguments, tracking.toml, a manifest, a patch header",
    Exit.SKIPPED: "a lane needs hardware this host lacks; nothing was validated",
    Exit.PIN: "a pinned artefact or bundle cannot be fetched or fails its sha256 (or a GitHub answer its shape)",
    Exit.APPLY: "a patch of the series does not apply",
    Exit.BUILD: "building, installing or import-checking a build failed",
    Exit.CRASH: "a reproducer died: non-zero exit, no verdict, or no host stamp",
    Exit.TIMEOUT: "a reproducer ran past its time limit and was killed",
    Exit.UPSTREAM: "the GitHub API is unreachable, rate-limited or refused the token; nothing written",
    Exit.LINT: "a filing body or its reproducer failed the lint (private path, host, address, token, our jargon), "
               "or an export failed the upstream's own formatters and linters",
    Exit.DRIFT: "'harness absorbed' found a local change no pack tracks",
    Exit.TAMPERED: "a receipt fails verification: a file edited, missing or not covered by its digests (also a "
                   "kernel-cache entry not as sealed: 'harness cache verify|import')",
    Exit.NO_LANES: "the pack declares no lanes: nothing was validated",
    Exit.IO: "a file the harness must write cannot be written (read-only, full, no permission); nothing half-written",
    Exit.INTERNAL: "internal error (a bug in the harness; traceback in <cache>/last-error.log)",
    Exit.INTERRUPT: "stopped by Ctrl-C",
    Exit.TERMINATED: "stopped by SIGTERM or SIGHUP (CI cancellation); children killed, scratch removed",
}

# Least to most severe.
SEVERITY = [Exit.OK, Exit.SKIPPED, Exit.NO_LANES, Exit.MISMATCH, Exit.TIMEOUT, Exit.CRASH, Exit.BUILD, Exit.APPLY,
            Exit.LINT, Exit.UPSTREAM, Exit.PIN, Exit.DRIFT, Exit.TAMPERED, Exit.USAGE, Exit.IO, Exit.INTERNAL,
            Exit.TERMINATED,
            Exit.INTERRUPT]


def worst(codes) -> Exit:
    """The most severe of several exit codes (``OK`` for none)."""
    return max((Exit(c) for c in codes), key=SEVERITY.index, default=Exit.OK)


def table() -> str:
    """The exit codes as plain text lines, most common first (for ``--help``)."""
    return "\n".join(f"  {int(code):>3}  {code.name:<9}  {MEANINGS[code]}" for code in Exit)


def severity_order() -> str:
    return " > ".join(code.name for code in reversed(SEVERITY) if code not in (Exit.INTERRUPT, Exit.TERMINATED))


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


class GpuBusyError(HarnessError):
    """An upstream-test lane waited past its time limit for a GPU another upstream-test run holds."""

    exit_code = Exit.TIMEOUT


class ReceiptError(HarnessError):
    """A receipt fails verification (a file edited, missing, or not covered by its digests)."""

    exit_code = Exit.TAMPERED



class WriteError(HarnessError):
    """A file or directory the harness must write cannot be written (read-only, full, no permission).

    Names the path; whatever the write was part of is left as it was before (no half-written receipt).
    """

    exit_code = Exit.IO

    @classmethod
    def of(cls, exc: OSError, what: str, where: object, *, hint: str | None = None) -> WriteError:
        """``what`` failed at the path written (``exc.filename2`` of a copy or rename, whose ``filename`` is the
        source it read; else ``exc.filename``, else ``where``) with the OS's reason."""
        path = next((p for p in (exc.filename2, exc.filename) if p is not None), where)
        return cls(f"cannot write {what}: {path}: {exc.strerror or exc}; nothing was written", hint=hint)


# What a full disk, a quota or a read-only mount makes a write fail with (never a reading side's failure).
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})
_WRITE_REASONS = tuple(os.strerror(e) for e in sorted(_WRITE_ERRNOS))


def cannot_write(exc: BaseException | str) -> bool:
    """Whether ``exc`` (an OSError, ``shutil.Error``'s list of them, or a child's stderr) says a write failed for
    want of space or a writable filesystem: the cases that are exit IO wherever they happen."""
    if isinstance(exc, OSError) and exc.errno in _WRITE_ERRNOS:
        return True
    return any(reason in str(exc) for reason in _WRITE_REASONS)


def write_reason(text: str) -> str:
    """The OS's reason a write failed, as ``cannot_write`` found it in ``text``."""
    return next((reason for reason in _WRITE_REASONS if reason in text), "cannot write")


class GitError(HarnessError):
    """A git command the harness ran failed: names the command, where it ran, its exit status and stderr.

    Exit INTERNAL: the harness only runs git commands it expects to succeed, so a failure that no
    caller turned into a more precise error is reported like any other unexpected one (the
    handler keeps a traceback).
    """

    exit_code = Exit.INTERNAL

    def __init__(self, argv, cwd, status: int | None, stderr: str, *, message: str | None = None,
                 hint: str | None = None):
        self.argv = tuple(str(a) for a in argv)
        self.cwd = cwd
        self.status = status  # None: git did not run (not found, no such directory, timed out)
        self.stderr = stderr
        if message is None:
            lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
            how = f"exit {status}" if status is not None else "did not run"
            message = f"{self.command} in {cwd} failed ({how}): {lines[-1] if lines else 'no message'}"
        super().__init__(message, hint=hint)

    @property
    def command(self) -> str:
        return " ".join(("git", *self.argv))


class GitNotFound(GitError):
    """No ``git`` executable on PATH (only commands that work on git trees need one)."""

    exit_code = Exit.USAGE

    def __init__(self, argv, cwd):
        super().__init__(argv, cwd, None, "git not found on PATH",
                         message=f"git not found on PATH (needed to run '{' '.join(('git', *argv))}')",
                         hint="install git; runs from an offline bundle need none")


class CheckError(HarnessError):
    """An upstream's own formatter or linter found something in an export, or could not run; one line per finding."""

    exit_code = Exit.LINT


class IdentityError(HarnessError):
    """No usable identity to file as (none set, a placeholder, an address that is not one)."""

    exit_code = Exit.USAGE
