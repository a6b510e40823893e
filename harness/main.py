"""Command line: parse arguments and dispatch to ``harness.commands.<verb>``; nothing else."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from harness import __version__, errors
from harness.base import clock, settings, ui
from harness.commands import _args
from harness.commands.error_handler import handled

DESCRIPTION = """\
Stage upstream patches for ML-kernel libraries: pinned upstream bases, ordered
patch series, paired reproducer runs (baseline vs patched) and their receipts.
Results go to stdout, progress and messages to stderr.
"""

# Every environment variable the harness itself reads (reproducers get HARNESS_* from it).
ENVIRONMENT = (
    ("PATCHLANE_HOME", "cache for artefacts, bases, builds, apply checks (default: $XDG_CACHE_HOME/patchlane "
                       "or ~/.cache/patchlane)"),
    ("XDG_CACHE_HOME", "see PATCHLANE_HOME"),
    ("PATCHLANE_REPO_COMMIT", "the repository commit receipts name when the copy has no .git (a GPU host)"),
    ("PATCHLANE_HOST_BUILD_TIMEOUT", "seconds a host build may take in the bootstrap, instead of the manifest's "
                                     "timeout (docs/gpu-hosts.md)"),
    ("PATCHLANE_GIT_MIRRORS", "directories (':'-separated) of bare mirrors <owner>+<name>.git that git bases are "
                              "fetched from before GitHub (also --git-mirrors); unset: ../shared/mirrors beside "
                              "the checkout when it exists, as in nox; set empty: none"),
    ("PATCHLANE_RECHECK", "1: ignore every remembered import check and CUDA device count"),
    ("PATCHLANE_GPU_LOCK_DIR", "where upstream-test lanes keep their one-process-per-GPU locks (default: the temp "
                               "directory; host-wide, so every store on the host shares them)"),
    ("PATCHLANE_SUITE_RERUN", "1: suite lanes forget their per-case progress and decide every case again"),
    ("PATCHLANE_CLOCK_SHIFT", "move the date the harness reads and records (+365d, -2h, +90m, +30s), not time "
                              "itself: durations and timeouts are unchanged (CI runs the tests a year ahead)"),
    ("PATCHLANE_PYPI_URL", "PyPI JSON API root for 'rebase --to-version' (default https://pypi.org/pypi)"),
    ("GITHUB_TOKEN, GH_TOKEN", "token for 'status --refresh', 'related', 'threads refresh' (sent only in the "
                               "request header)"),
    ("GITHUB_USER", "the filer's GitHub login for 'threads refresh' (default: the token's own)"),
    ("PATCHLANE_GITHUB_RECORDED", "recorded GitHub answers for 'related', readiness and 'threads refresh --offline' "
                                  "(default: upstream/github)"),
    ("PATCHLANE_PYCACHE", "where the Python processes the harness starts keep compiled modules (default: "
                          "<cache>/pycache, never beside a source, even under PYTHONDONTWRITEBYTECODE); 'off': "
                          "Python's own; an inherited PYTHONPYCACHEPREFIX is kept"),
    ("PATCHLANE_KERNEL_CACHE", "where lanes keep kernel-compile caches per key (default: <cache>/kernel-cache); "
                               "'off': an empty throwaway one per lane (docs/kernel-cache.md)"),
    ("CUDA_HOME, CUDA_PATH", "where the nvcc named in a lane's kernel-cache key is looked for (else PATH)"),
    ("HARNESS_RUN_DIR", "scratch directory shared by the lanes of one run (default: a new temporary one)"),
    ("CUDA_VISIBLE_DEVICES", "the GPUs 'sweep' may use (else every GPU the driver shows); it sets each child's own"),
    ("PATCHLANE_SLURM_POLL_S", "seconds between 'sweep --slurm --watch' looks at the jobs (default 10)"),
    ("PATCHLANE_REQUIRE_SLURM", "1: the Slurm tests fail, rather than skip, where no Slurm can be started (CI)"),
    ("SLURM_CONF", "Slurm's configuration, for the sbatch/scontrol/scancel that 'sweep --slurm' runs"),
    ("PATH, HOME", "passed on to the attached scripts 'body --scripts' runs alone (nothing else of the caller's)"),
    ("PYTHONPATH", "kept after a lane's own build directories"),
    ("LD_LIBRARY_PATH", "part of the key remembered import checks are kept under"),
    ("CI", "when set, no spinners or bars: plain progress lines"),
    ("NO_COLOR, COLUMNS", "honoured by the console (no colours; output width)"),
    ("PYENV_ROOT", "where to look for interpreters a manifest's 'python' asks for"),
)

EPILOG = ("exit codes (several lanes: the most severe wins, " + errors.severity_order() + "):\n"
          + errors.table() + "\n\nenvironment:\n"
          + "\n".join(f"  {name:<22} {what}" for name, what in ENVIRONMENT))


COMMANDS = ["run", "sweep", "prepare", "materialize", "apply", "check", "list", "bundle", "receipts", "order", "waves",
            "status", "body", "edit", "regen", "rebase", "absorbed", "export", "provenance", "perf", "related",
            "threads", "new", "cache", "suite", "refresh", "bisect", "migrate", "plan", "stack"]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The CLI parser; with ``only`` (a command name), just that command's subparser.

    Each command module imports what it needs (rich tables, requests ...); parsing
    ``harness run 09`` need not import all sixteen of them, which costs a few tenths of a second.
    """
    parser = argparse.ArgumentParser(prog="harness", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    _args.add_verbosity(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in [only] if only in COMMANDS else COMMANDS:
        importlib.import_module(f"harness.commands.{name}").register(sub)
    helps = {action.dest: action.help for action in sub._choices_actions}  # argparse keeps each verb's help here
    for name, p in sub.choices.items():
        p.epilog = p.epilog or "exit codes and environment: harness --help"
        verb_help = helps.get(name)
        if not p.description and verb_help:  # `harness list --help` said nothing of what list does
            p.description = verb_help[0].upper() + verb_help[1:] + "."
    return parser


def unknown_command(words: list[str]) -> str | None:
    """For a mistyped command, the line that says so and names the closest ones; None when it is known."""
    import difflib

    word = next((w for w in words if not w.startswith("-")), None)
    if word is None or word in COMMANDS:
        return None
    close = difflib.get_close_matches(word, COMMANDS, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"harness: unknown command {word!r}{hint} (every command: harness --help)"


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if (problem := unknown_command(words)) is not None:
        ui.err.print(problem, markup=False, highlight=False)
        return int(errors.Exit.USAGE)
    # the command is the first word when no top-level option precedes it (only --help/--version exist)
    parser = build_parser(words[0] if words else None)
    args = parser.parse_args(argv)
    ui.set_verbosity(getattr(args, "verbose", 0) - getattr(args, "quiet", 0))
    if argv is None:  # the program itself, not a caller in this process: its children get the bytecode cache
        settings.export_bytecode_cache(getattr(args, "cache", None) or settings.cache_home(),
                                       settings.checkout_root(getattr(args, "root", None)))
    try:
        with handled(getattr(args, "cache", None)):
            clock.shift()  # a $PATCHLANE_CLOCK_SHIFT it cannot read stops every command at once, in one line
            module = importlib.import_module(f"harness.commands.{args.command}")
            code = int(module.main(args))
    except SystemExit as exc:
        _result_file(args, int(exc.code or 0))
        raise
    finally:
        ui.set_verbosity(0)
    _result_file(args, code)
    return code


def _result_file(args, code: int) -> None:
    """Callers that cannot see the exit code (nox) read it from ``--result-file``."""
    path = getattr(args, "result_file", None)
    if path is not None and not path.exists():
        path.write_text(json.dumps({"exit": code, "lanes": []}))
