"""Running a reproducer once and reading what it said.

The reproducer's stdout and stderr go, interleaved, to one log file and to the
console. Its protocol lines (see ``repros/_lane.py``) are parsed from the log:
``HOST_STAMP``, ``FIGURE``, ``SKIPPED`` and the sentinels. A reproducer that
exits non-zero, never stamps the host, or is killed at its time limit is a
crash or a timeout -- never a pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import fingerprint
from harness.errors import Exit

VERDICT_EXIT = {
    "pass": Exit.OK,
    "mismatch": Exit.MISMATCH,
    "skipped": Exit.SKIPPED,
    "crash": Exit.CRASH,
    "timeout": Exit.TIMEOUT,
}


@dataclass
class Outcome:
    exit_code: int | None
    duration_s: float
    timed_out: bool
    stamp: dict | None = None
    stamps: list[dict] = field(default_factory=list)  # one per rank on multi-process lanes
    sentinels: list[tuple[str, dict]] = field(default_factory=list)
    figures: list[dict] = field(default_factory=list)
    skipped: str | None = None

    def verdict(self, expected: str) -> tuple[str, str]:
        """(verdict, reason) for a lane that expects ``expected``."""
        seen = [name for name, _ in self.sentinels]
        if self.timed_out:
            return "timeout", "killed at the time limit"
        if self.skipped is not None:
            return "skipped", self.skipped
        if self.exit_code != 0:
            return "crash", f"exit code {self.exit_code}" + (f" after printing {', '.join(seen)}" if seen else "")
        if self.stamp is None:
            return "crash", "no HOST_STAMP line before the verdict"
        if not seen:
            return "crash", f"exited without printing a verdict; expected {expected}"
        if set(seen) == {expected}:
            return "pass", f"printed {expected} as expected"
        return "mismatch", f"printed {', '.join(seen)}; expected {expected}"


# NVLink multicast can take a shared host's GPUs out of service: multi-GPU lanes always run with it off.
MULTI_GPU_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def launch_command(python: str, nproc: int, script: Path, args: list[str]) -> list[str]:
    """One process, or ``nproc`` ranks under torch.distributed.run on this host."""
    if nproc == 1:
        return [python, str(script), *args]
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(script), *args]


CUDA_PROBE = ("import torch,json;n=torch.cuda.device_count() if torch.cuda.is_available() else 0;"
              "print(json.dumps([n, ', '.join(torch.cuda.get_device_name(i) for i in range(n))"
              " or 'no CUDA device visible to torch']))")


def cuda_devices(python: str, memo_dir: Path | None = None) -> tuple[int, str]:
    """How many CUDA devices ``python``'s torch sees, and what they are.

    Asking costs an import of torch and a CUDA initialisation (seconds). With ``memo_dir`` a
    definite answer is remembered under a key of what it depends on (``harness/fingerprint.py``):
    this module's and fingerprint's source, the interpreter and everything on its ``sys.path``,
    the environment (``CUDA_VISIBLE_DEVICES`` included), and the NVIDIA driver as the kernel
    shows it (boot id, driver version, GPUs, MIG capabilities, device nodes). A probe that
    failed is never remembered, nor "no device" on a host whose kernel shows NVIDIA GPUs (a
    CUDA initialisation can fail once). Reproducers check CUDA themselves and print
    ``SKIPPED`` without it, so even a wrong answer cannot pass a lane.
    """
    memo = key = cwd = None
    driver = fingerprint.gpu_driver()
    if memo_dir is not None:
        # an empty working directory: the caller's ('' on sys.path for -c) would be part of the key
        cwd = Path(memo_dir) / "cwd"
        cwd.mkdir(parents=True, exist_ok=True)
        try:
            key = fingerprint.digest("cuda-devices 1", fingerprint.source(sys.modules[__name__], fingerprint),
                                     CUDA_PROBE, python, fingerprint.interpreter(python, cwd=cwd),
                                     fingerprint.environment(), driver)
        except fingerprint.ProbeError as exc:
            return 0, f"cannot probe CUDA with {python}: {exc}"
        memo = fingerprint.Memo(memo_dir)
        remembered = memo.get(key)
        if isinstance(remembered, list) and len(remembered) == 2:
            return int(remembered[0]), str(remembered[1])
    try:
        proc = subprocess.run([python, "-c", CUDA_PROBE], cwd=cwd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 0, f"cannot probe CUDA with {python}: {exc}"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return 0, f"torch not importable by {python}: {last}"
    n, desc = json.loads(proc.stdout.strip().splitlines()[-1])
    answer = (int(n), f"this host has {n}: {desc}" if n else desc)
    # "none" where the kernel shows GPUs may be a passing failure of CUDA: ask again next time
    if memo is not None and (answer[0] > 0 or not driver["gpus"]):
        memo.put(key, list(answer), python=python)
    return answer


def run(cmd: list[str], env: dict[str, str], log_path: Path, timeout: float, sentinels: set[str],
        echo: bool = True) -> Outcome:
    """Run ``cmd``, teeing its combined output into ``log_path``; kill its process group at ``timeout``.

    ``sentinels`` is the vocabulary of verdict lines to look for in the log.
    """
    start = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = start + timeout
        try:
            os.set_blocking(proc.stdout.fileno(), False)
            while True:
                chunk = proc.stdout.read(65536)
                if chunk:
                    log.write(chunk)
                    log.flush()
                    if echo:
                        sys.stderr.buffer.write(chunk)
                        sys.stderr.flush()
                elif proc.poll() is not None:
                    rest = proc.stdout.read()
                    if rest:
                        log.write(rest)
                        if echo:
                            sys.stderr.buffer.write(rest)
                    break
                else:
                    time.sleep(0.05)
                if time.monotonic() > deadline:
                    timed_out = True
                    _kill(proc)
                    break
        except BaseException:
            _kill(proc)
            raise
        finally:
            proc.stdout.close()
    code = proc.wait()
    outcome = Outcome(exit_code=None if timed_out else code, duration_s=round(time.monotonic() - start, 3),
                      timed_out=timed_out)
    parse_log(log_path.read_text(encoding="utf-8", errors="replace"), outcome, sentinels)
    return outcome


def parse_log(text: str, outcome: Outcome, sentinels: set[str]) -> None:
    for line in text.splitlines():
        tag, _, rest = line.partition(" ")
        if tag == "HOST_STAMP":
            outcome.stamps.append(_json(rest))
            if outcome.stamp is None:
                outcome.stamp = outcome.stamps[0]
        elif tag == "FIGURE" and outcome.stamp is not None:
            outcome.figures.append(_json(rest))
        elif tag == "SKIPPED":
            outcome.skipped = _json(rest).get("reason", rest)
        elif tag in sentinels:
            outcome.sentinels.append((tag, _json(rest)))


def _json(text: str) -> dict:
    try:
        value = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return {"text": text}
    return value if isinstance(value, dict) else {"value": value}


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
