"""What the harness's bytecode cache saves a child Python that imports a large library (harness/base/settings.py).

    python bench/bytecode_cache.py --python .nox/lane-megatron-lm-py3.12/bin/python \\
        --path ~/.cache/patchlane/builds/<key>/site --module megatron.core.transformer.module \\
        -o bench/results/<date>-cpu-2core-bytecode-cache

Measured in one run, on one host, each way ``--rounds`` times in turn (medians compared):

* ``no cache``: what a child got before, where ``PYTHONDONTWRITEBYTECODE`` is set and pip installed with
  ``--no-compile``: ``PYTHONPYCACHEPREFIX`` at an empty directory that is never written, so every module
  (the library's and its dependencies') is compiled from source on every import;
* ``first``: the harness's cache, empty (each round a new one): compiled once and written;
* ``warm``: the harness's cache after ``first`` (what every later child of the run gets);
* ``new build``: a warm cache for the dependencies, the module tree itself copied to a new directory (a build
  the run has not imported yet: only its own modules are compiled).

Wall time of the whole child (``python -c "import MODULE"``); nothing runs on a GPU. Writes OUT.json and OUT.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _child(python: str, module: str, path: Path, prefix: Path, write: bool) -> float:
    env = dict(os.environ, PYTHONPATH=str(path), PYTHONPYCACHEPREFIX=str(prefix),
               PYTHONDONTWRITEBYTECODE="" if write else "1", CUDA_VISIBLE_DEVICES="")
    started = time.perf_counter()
    proc = subprocess.run([python, "-W", "ignore", "-c", f"import {module}"], env=env, capture_output=True,
                          text=True, cwd=tempfile.gettempdir())
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"bytecode_cache: import {module} failed (exit {proc.returncode}): "
                         f"{proc.stderr.strip()[-400:]}")
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True, help="the interpreter of the lane environment")
    ap.add_argument("--path", type=Path, required=True, help="the directory holding the module (a build's site)")
    ap.add_argument("--module", required=True, help="what a lane imports, e.g. megatron.core.transformer.module")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--host", default=None, help="the machine, in words (default: cores and platform)")
    ap.add_argument("-o", "--out", type=Path, required=True, help="OUT: writes OUT.json and OUT.txt")
    args = ap.parse_args(argv)
    if any(args.path.rglob("__pycache__")):
        raise SystemExit(f"bytecode_cache: {args.path} holds __pycache__ directories: the 'no cache' row would read "
                         "them; give a tree without (a build made with pip --no-compile)")
    times: dict[str, list[float]] = {"no cache": [], "first": [], "warm": [], "new build": []}
    with tempfile.TemporaryDirectory(prefix="bytecode-bench-") as tmp:
        scratch = Path(tmp)
        for r in range(args.rounds):
            print(f"round {r + 1} of {args.rounds}", file=sys.stderr, flush=True)
            times["no cache"].append(_child(args.python, args.module, args.path, scratch / "never", write=False))
            prefix = scratch / f"cache-{r}"
            times["first"].append(_child(args.python, args.module, args.path, prefix, write=True))
            times["warm"].append(_child(args.python, args.module, args.path, prefix, write=True))
            copy = scratch / f"site-{r}"
            shutil.copytree(args.path, copy)
            times["new build"].append(_child(args.python, args.module, copy, prefix, write=True))
            shutil.rmtree(copy)
    medians = {k: round(statistics.median(v), 2) for k, v in times.items()}
    base = medians["no cache"]
    record = {"schema": 1, "what": "import of a library by a child Python, wall time (s), medians",
              "host": args.host or f"{os.cpu_count()}-core {platform.machine()}, {platform.platform()}",
              "python": args.python, "module": args.module, "rounds": args.rounds,
              "seconds": {k: [round(x, 2) for x in v] for k, v in times.items()}, "median_s": medians,
              "ratio_to_no_cache": {k: round(v / base, 2) for k, v in medians.items()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    rows = [f"# {record['what']} -- {record['host']}", f"# {args.python} -c 'import {args.module}', "
            f"{args.rounds} rounds", "", "way\tmedian_s\tratio_to_no_cache"]
    rows += [f"{k}\t{medians[k]}\t{record['ratio_to_no_cache'][k]}" for k in times]
    args.out.with_suffix(".txt").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
