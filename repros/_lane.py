"""The reproducer side of the harness contract.

Every reproducer imports this module (the harness puts ``repros/`` on
``PYTHONPATH``) and speaks to the harness through stdout lines only:

* ``HOST_STAMP {json}`` -- must be the first line (``stamp()``): GPU, driver,
  CUDA, torch/triton versions, the target package's version and where it was
  imported from, and the pin the harness says it installed.
* ``FIGURE {json}`` -- a measured number for the receipt (``figure()``).
* ``<SENTINEL> {json}`` -- the verdict (``verdict()``), one of ``SENTINELS``.
* ``SKIPPED {json}`` -- the reproducer cannot run here (``skip()``), e.g. no GPU.

The harness, not the reproducer, decides whether a sentinel is the expected
one for the lane; a reproducer only reports what it observed.

The start every reproducer shares: ``parser(__doc__)`` gives an argument parser
with ``--lane`` and ``--patched``/``--unpatched``; ``start(args, distribution,
module)`` applies those overrides to the environment and prints the stamp.
Which build a process holds is ``patched()``, read from ``HARNESS_PATCHED``
(the harness sets it from the lane's series), never guessed from a lane name:
lane names are free labels. ``observed(bad, **details)`` turns "the bug shows"
into the sentinel that fits the build (BUG_* on the unpatched build, FIX_* on
the patched one).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from importlib import metadata

# Each positive sentinel is paired with the one a reproducer prints when the
# claim does not hold, so a lane can never be "passed" by silence.
SENTINELS = {
    "BUG_REPRODUCED": "the bug shows on this build",
    "BUG_ABSENT": "the bug does not show on this build (regression coverage)",
    "FIX_VALIDATED": "the patched build behaves correctly",
    "FIX_FAILED": "the patched build still misbehaves",
    "MEMORY_SAVE_VERIFIED": "the patched build saves the claimed memory",
    "MEMORY_SAVE_MISSING": "the claimed memory saving is not there",
    "EQUIVALENCE_VERIFIED": "patched and baseline results are identical",
    "EQUIVALENCE_BROKEN": "patched and baseline results differ",
    "REGRESSION_GUARD_PASSED": "an upstream fix still holds",
    "REGRESSION_GUARD_FAILED": "an upstream fix regressed",
    "CONTRACT_HELD": "a boundary contract holds",
    "CONTRACT_BROKEN": "a boundary contract is violated",
    "CONTRACT_VIOLATION_DETECTED": "a deliberately wrong lane was caught, and identified, by the contract check",
    "CONTRACT_VIOLATION_MISSED": "a deliberately wrong lane passed the contract check (the check is blind)",
}


def _emit(tag: str, payload: dict) -> None:
    print(f"{tag} {json.dumps(payload, sort_keys=True, default=str)}", flush=True)


def _cuda_facts() -> dict:
    facts: dict = {}
    try:
        import torch
    except ImportError:
        return {"torch": None}
    facts["torch"] = torch.__version__
    facts["torch_cuda"] = torch.version.cuda
    facts["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        if "LOCAL_RANK" in os.environ:
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        idx = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        facts["gpu"] = props.name
        facts["compute_capability"] = f"{props.major}.{props.minor}"
        facts["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        facts["gpu_count"] = torch.cuda.device_count()
        try:
            drv = torch.cuda.driver_version() if hasattr(torch.cuda, "driver_version") else None
        except Exception:  # pragma: no cover - depends on the driver
            drv = None
        facts["driver"] = drv or _nvidia_smi_driver()
    try:
        import triton

        facts["triton"] = triton.__version__
    except ImportError:
        facts["triton"] = None
    return facts


def _nvidia_smi_driver() -> str | None:
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.strip()
        return out.splitlines()[0] if out else None
    except Exception:
        return None


def stamp(distribution: str, module: str) -> dict:
    """Print the HOST_STAMP line. Call it before anything else prints."""
    facts = {
        "host_python": platform.python_version(),
        "platform": platform.platform(),
        "pack": os.environ.get("HARNESS_PACK"),
        "lane": os.environ.get("HARNESS_LANE"),
        "target": os.environ.get("HARNESS_TARGET"),
        "base": os.environ.get("HARNESS_BASE"),
        "base_commit": os.environ.get("HARNESS_BASE_COMMIT"),
        "patched": os.environ.get("HARNESS_PATCHED"),
        "build_key": os.environ.get("HARNESS_BUILD_KEY"),
    }
    if "WORLD_SIZE" in os.environ:  # one stamp per rank under torch.distributed.run
        facts["rank"] = int(os.environ.get("RANK", "0"))
        facts["local_rank"] = int(os.environ.get("LOCAL_RANK", "0"))
        facts["world_size"] = int(os.environ["WORLD_SIZE"])
    try:
        facts["target_version"] = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        facts["target_version"] = None
    facts.update(_cuda_facts())
    mod = __import__(module, fromlist=["_"])
    facts["target_module_file"] = getattr(mod, "__file__", None)
    _emit("HOST_STAMP", facts)
    return facts


def figure(name: str, value, unit: str | None = None, **context) -> None:
    """Report one measured number; it lands in the receipt's ``figures``."""
    _emit("FIGURE", {"name": name, "value": value, "unit": unit, **context})


def verdict(sentinel: str, **details) -> None:
    """Report the lane's observation. Call it once, last."""
    if sentinel not in SENTINELS:
        raise ValueError(f"unknown sentinel {sentinel!r}; known: {sorted(SENTINELS)}")
    _emit(sentinel, details)


def skip(reason: str) -> None:
    """Say the reproducer cannot run on this host and exit with the skip code."""
    _emit("SKIPPED", {"reason": reason})
    sys.exit(3)


def lane() -> str:
    """The lane name the harness is running (``HARNESS_LANE``), or 'manual'."""
    return os.environ.get("HARNESS_LANE", "manual")


def patched() -> bool:
    """Whether this process holds the patched build: ``HARNESS_PATCHED`` is "1" or "0".

    The harness always sets it; a manual run sets it, or passes ``--patched``/``--unpatched``
    through ``start``. Anything else stops the run: guessing the build from a lane name is how
    a baseline gets reported as a fix."""
    value = os.environ.get("HARNESS_PATCHED")
    if value not in ("0", "1"):
        raise SystemExit(f"HARNESS_PATCHED is {value!r}: set it to 1 (patched build) or 0 (unpatched), "
                         "or pass --patched / --unpatched")
    return value == "1"


def parser(doc: str | None) -> argparse.ArgumentParser:
    """The argument parser every reproducer starts from: ``--lane`` and ``--patched``/``--unpatched``."""
    p = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
    p.add_argument("--lane", help="lane label for the stamp and details; overrides HARNESS_LANE")
    build = p.add_mutually_exclusive_group()
    build.add_argument("--patched", dest="patched_build", action="store_const", const="1",
                       help="this process holds the patched build (overrides HARNESS_PATCHED)")
    build.add_argument("--unpatched", dest="patched_build", action="store_const", const="0",
                       help="this process holds the unpatched build (overrides HARNESS_PATCHED)")
    return p


def start(args: argparse.Namespace, distribution: str, module: str) -> dict:
    """Apply ``--lane``/``--patched`` to the environment, then print the stamp (the first line)."""
    if getattr(args, "lane", None):
        os.environ["HARNESS_LANE"] = args.lane
    if getattr(args, "patched_build", None) is not None:
        os.environ["HARNESS_PATCHED"] = args.patched_build
    return stamp(distribution, module)


def require_cuda(reason: str):
    """torch, when a CUDA device is there; otherwise ``skip(reason)``."""
    import torch

    if not torch.cuda.is_available():
        skip(reason)
    return torch


def observed(bad: bool, **details) -> str:
    """Report whether the bug showed, as the sentinel that fits this build; returns the sentinel."""
    if patched():
        sentinel = "FIX_FAILED" if bad else "FIX_VALIDATED"
    else:
        sentinel = "BUG_REPRODUCED" if bad else "BUG_ABSENT"
    verdict(sentinel, **details)
    return sentinel
