"""The key of a lane's kernel-compile cache (``kernel_cache``): the facts its compiled kernels depend on.

The key covers everything that can make a cached kernel stale: the build keys on the lane's path
(its build, its baseline, its extra builds), its runtime requirements, the lane interpreter's Python
and the versions of the compilers it imports (torch, with the CUDA/HIP and git version its
``version.py`` names; triton; tilelang; apache-tvm-ffi; every ``nvidia-*`` and ``cuda-*``
distribution), the nvcc TileLang and torch extensions would run, the NVIDIA driver version and the
GPUs' names and compute capabilities (no GPU: the key says so), and ``VERSION``. Versions are
read from the interpreter's metadata without importing anything (one interpreter start, as cheap as
any key of it would be); the GPU facts come from ``nvidia-smi`` (else ``/proc/driver/nvidia``), asked
once per driver state (``fingerprint.gpu_driver``) and remembered in the store's memo.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.base import fingerprint, guard

VERSION = "1"  # bump when what the key covers, or the entry's layout, changes

# distributions whose version is part of the key: the compilers and what they compile against
COMPILERS = ("torch", "triton", "pytorch-triton", "pytorch-triton-rocm", "tilelang", "apache-tvm-ffi",
             "torch-c-dlpack-ext")
COMPILER_PREFIXES = ("nvidia-", "cuda-")

_PROBE = r"""
import importlib.util, json, os, platform, re, sys
from importlib import metadata
names, prefixes = (lambda a: (set(a[0]), tuple(a[1])))(json.loads(sys.argv[1]))
dists = {}
for d in metadata.distributions():  # in sys.path order: the first of a name is the one imported
    name = re.sub(r"[-_.]+", "-", (d.metadata.get("Name") or "")).lower()
    if name and (name in names or name.startswith(prefixes)):
        dists.setdefault(name, d.version)
torch = {}
try:
    spec = importlib.util.find_spec("torch")  # finds, does not import
    where = list(spec.submodule_search_locations or []) if spec else []
    if where:
        text = open(os.path.join(where[0], "version.py")).read()
        for k in ("cuda", "hip", "git_version"):
            m = re.search(r"^" + k + r"\s*(?::[^=]*)?=\s*['\"]([^'\"]*)['\"]", text, re.M)
            torch[k] = m.group(1) if m else None
except (ImportError, OSError, ValueError):
    pass
print(json.dumps({"python": sys.version.split()[0], "implementation": sys.implementation.cache_tag,
                  "machine": platform.machine(), "dists": dict(sorted(dists.items())), "torch_build": torch}))
"""


# ------------------------------------------------------------------------------------------------ the key


@dataclass(frozen=True)
class Facts:
    """What a lane's compiled kernels depend on; ``key`` is their digest."""

    builds: tuple[str, ...]  # build keys on the lane's path: its build, its baseline, its extra builds
    runtime: tuple[str, ...]  # the runtime requirements installed beside them
    interpreter: dict | None  # the lane's Python and compiler versions (None: the probe failed)
    nvcc: str | None  # ``nvcc --version``'s release line, where one is found
    gpu: dict | None  # {"driver": ..., "devices": [[name, compute capability], ...]}; None: no NVIDIA GPU

    @property
    def key(self) -> str:
        return fingerprint.digest("kernel-cache", VERSION, self.to_dict())

    def to_dict(self) -> dict:
        return {"builds": list(self.builds), "runtime": list(self.runtime), "interpreter": self.interpreter,
                "nvcc": self.nvcc, "gpu": self.gpu}

    @classmethod
    def from_dict(cls, data: dict) -> Facts:
        return cls(tuple(data["builds"]), tuple(data["runtime"]), data["interpreter"], data["nvcc"], data["gpu"])

    def summary(self) -> str:
        """``torch 2.5.1, triton 3.1.0, H100 (9.0) driver 550.54`` or ``... no GPU``."""
        dists = (self.interpreter or {}).get("dists", {})
        parts = [f"{n} {dists[n]}" for n in ("torch", "triton", "tilelang") if n in dists]
        if self.gpu is None:
            parts.append("no GPU")
        else:
            devices = ", ".join(f"{name} ({cc})" if cc else str(name) for name, cc in self.gpu.get("devices", []))
            parts.append(f"{devices or 'GPU'} driver {self.gpu.get('driver') or '?'}")
        return ", ".join(parts)


_interpreters: dict[tuple, dict | None] = {}


def interpreter(python: str, env: dict[str, str]) -> dict | None:
    """The lane interpreter's Python and compiler versions, as it imports them with ``env`` (None: no answer).

    Read from distribution metadata, importing nothing: one interpreter start, as cheap as any key of the
    answer would be, so it is remembered for this process only (per interpreter and paths).
    """
    ident = (python, json.dumps(fingerprint.file_identity(python)), env.get("PYTHONPATH"), env.get("LD_LIBRARY_PATH"))
    if ident not in _interpreters:
        try:
            proc = guard.run([python, "-c", _PROBE, json.dumps([COMPILERS, COMPILER_PREFIXES])], env=env,
                             timeout=120)
            lines = proc.stdout.strip().splitlines()
            _interpreters[ident] = json.loads(lines[-1]) if proc.returncode == 0 and lines else None
        except (OSError, ValueError, subprocess.TimeoutExpired):
            _interpreters[ident] = None
    return _interpreters[ident]


def _find_nvcc(env: dict[str, str]) -> str | None:
    """The nvcc TileLang and torch extensions would run: ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``, else PATH."""
    for home in (env.get("CUDA_HOME"), env.get("CUDA_PATH")):
        if home and os.access(Path(home) / "bin" / "nvcc", os.X_OK):
            return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc", path=env.get("PATH"))


def nvcc(env: dict[str, str], memo_dir: Path) -> str | None:
    """nvcc's ``release X.Y, VX.Y.Z`` (None: no nvcc), remembered per nvcc file."""
    found = _find_nvcc(env)
    if found is None:
        return None
    memo, key = fingerprint.Memo(memo_dir), fingerprint.digest("kernel-cache nvcc 1", fingerprint.file_identity(found))
    remembered = memo.get(key)
    if isinstance(remembered, str):
        return remembered
    try:
        proc = guard.run([found, "--version"], timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return f"{found}: did not answer"
    m = re.search(r"release [^\n]*", proc.stdout)
    answer = m.group(0).strip() if m else f"{found}: {proc.stdout.strip()[-80:]}"
    if m:
        memo.put(key, answer, nvcc=found)
    return answer


SMI_QUERY = ["--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"]


def gpu(memo_dir: Path, proc_root: Path = Path("/proc")) -> dict | None:
    """The NVIDIA driver version and the GPUs' names and compute capabilities; None on a host without one.

    Asked of ``nvidia-smi`` once per driver state (``fingerprint.gpu_driver``: boot, driver, GPUs) and
    ``nvidia-smi`` file, and remembered; without nvidia-smi, read from ``/proc/driver/nvidia`` (no compute
    capability there: the model names stand for it).
    """
    smi = shutil.which("nvidia-smi")
    driver = fingerprint.gpu_driver(proc_root)
    if smi is None and not driver["gpus"]:
        return None
    memo = fingerprint.Memo(memo_dir)
    key = fingerprint.digest("kernel-cache gpu 1", fingerprint.source(sys.modules[__name__]), driver,
                             fingerprint.file_identity(smi) if smi else None)
    remembered = memo.get(key)
    if isinstance(remembered, dict):
        return remembered
    answer = _smi(smi) if smi else None
    if answer is not None:
        memo.put(key, answer, nvidia_smi=smi)
        return answer
    if not driver["gpus"]:
        return None  # an nvidia-smi that names no GPU, and the kernel shows none
    version = re.search(r"Kernel Module\s+([0-9.]+)", driver["version"] or "")
    models = sorted({m.group(1).strip() for info in driver["gpus"].values()
                     if (m := re.search(r"^Model:\s*(.+)$", info or "", re.M))})
    return {"driver": version.group(1) if version else None, "devices": [[m, None] for m in models]}


def _smi(smi: str) -> dict | None:
    try:
        proc = guard.run([smi, *SMI_QUERY], timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    rows = [[c.strip() for c in line.split(",")] for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not rows or any(len(r) != 3 for r in rows):
        return None
    drivers = sorted({r[2] for r in rows})
    return {"driver": ",".join(drivers), "devices": sorted({(r[0], r[1]) for r in rows})}


def facts(builds: tuple[str, ...], runtime: tuple[str, ...], python: str, env: dict[str, str],
          memo_dir: Path) -> Facts:
    """The facts (and so the key) of a lane whose child runs ``python`` with ``env``."""
    found = gpu(memo_dir)
    if found is not None:
        found = {"driver": found["driver"], "devices": [list(d) for d in found["devices"]]}
    return Facts(tuple(builds), tuple(sorted(runtime)), interpreter(python, env), nvcc(env, memo_dir), found)
