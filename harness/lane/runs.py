"""Running a reproducer once and reading what it said.

The reproducer's stdout and stderr go, interleaved, to one log file and to the
console. Its protocol lines (see ``repros/_lane.py``) are parsed from the log:
``HOST_STAMP``, ``FIGURE``, ``SKIPPED`` and the sentinels. A reproducer that
exits non-zero, never stamps the host, or is killed at its time limit is a
crash or a timeout -- never a pass.
"""

from __future__ import annotations

import collections
import json
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from harness.base import fingerprint, guard, ui
from harness.errors import Exit, WriteError


class Verdict(StrEnum):
    """What a lane's run came to (``Outcome.verdict``); a receipt records the value (``receipts.Verdict``)."""

    PASS = "pass"
    MISMATCH = "mismatch"
    SKIPPED = "skipped"  # never in a receipt: a skipped lane writes none
    CRASH = "crash"
    TIMEOUT = "timeout"


VERDICT_EXIT = {
    Verdict.PASS: Exit.OK,
    Verdict.MISMATCH: Exit.MISMATCH,
    Verdict.SKIPPED: Exit.SKIPPED,
    Verdict.CRASH: Exit.CRASH,
    Verdict.TIMEOUT: Exit.TIMEOUT,
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
    skipped: str | None = None  # the reason of the first SKIPPED line
    skips: int = 0  # how many SKIPPED lines (one per rank on a multi-process lane)
    stamp_problem: str | None = None  # the first HOST_STAMP line that is not a non-empty JSON object
    omitted_bytes: int = 0  # output left out of the log by its size cap (``LOG_CAP``)

    def verdict(self, expected: str) -> tuple[Verdict, str]:
        """(verdict, reason) for a lane that expects ``expected``.

        A lane is skipped only when the reproducer said SKIPPED, printed no sentinel, and exited with
        0 or the skip code (a multi-process launcher may exit otherwise when every rank skipped): a
        SKIPPED line next to a verdict, or before a crash, never hides either.
        """
        seen = [name for name, _ in self.sentinels]
        if self.timed_out:
            return Verdict.TIMEOUT, "killed at the time limit"
        if self.stamp_problem is not None:
            return Verdict.CRASH, self.stamp_problem
        if self.skips and seen:
            return Verdict.CRASH, f"printed {', '.join(seen)} and SKIPPED ({self.skipped}): contradictory output"
        if self.skips and (self.exit_code in (0, SKIP_EXIT)
                           or (len(self.stamps) > 1 and self.skips >= len(self.stamps))):
            return Verdict.SKIPPED, self.skipped or "no reason given"
        if self.exit_code != 0:
            return Verdict.CRASH, f"exit code {self.exit_code}" \
                + (f" after printing {', '.join(seen)}" if seen else "") \
                + (f" after SKIPPED ({self.skipped})" if self.skips else "")
        if self.stamp is None:
            return Verdict.CRASH, "no HOST_STAMP line before the verdict"
        if not seen:
            return Verdict.CRASH, f"exited without printing a verdict; expected {expected}"
        if set(seen) == {expected}:
            return Verdict.PASS, f"printed {expected} as expected"
        return Verdict.MISMATCH, f"printed {', '.join(seen)}; expected {expected}"


SKIP_EXIT = 3  # what repros/_lane.py's skip() exits with

# NVLink multicast can take a shared host's GPUs out of service: multi-GPU lanes always run with it off.
MULTI_GPU_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def rendezvous_env(env: dict[str, str], nproc: int) -> dict[str, str]:
    """``MASTER_PORT`` for a one-process lane: a port free on this host now, unless the caller set one.

    Upstream test utilities start ``torch.distributed`` on a fixed default port when ``MASTER_PORT`` is unset
    (Megatron-LM's ``Utils.initialize_distributed``: 29500). Two such lanes at once on one host (a sweep)
    then fail with EADDRINUSE, a failure of the host that reads as one of the change. ``torch.distributed.run
    --standalone`` picks its own port for ``nproc`` > 1 lanes, so those are left alone.
    """
    if nproc > 1 or env.get("MASTER_PORT"):
        return {}
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return {"MASTER_PORT": str(port)}


RANK_LINES = Path(__file__).with_name("rank_lines.py")  # each rank's output, a whole line per write


def launch_command(python: str, nproc: int, script: Path, args: list[str], lock: Path | None = None) -> list[str]:
    """One process, or ``nproc`` ranks under torch.distributed.run on this host, each under ``rank_lines.py``:
    the ranks share the lane's pipe, and ``lock`` (a file in the lane's scratch directory) keeps each line whole."""
    if nproc == 1:
        return [python, str(script), *args]
    if lock is None:
        raise ValueError("a multi-rank launch needs a lock file for its ranks' output")
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(RANK_LINES),
            str(lock), str(script), *args]


CUDA_PROBE = ("import torch,json;n=torch.cuda.device_count() if torch.cuda.is_available() else 0;"
              "print(json.dumps([n, ', '.join(torch.cuda.get_device_name(i) for i in range(n))"
              " or 'no CUDA device visible to torch']))")


def cuda_devices(python: str, memo_dir: Path | None = None) -> tuple[int, str]:
    """How many CUDA devices ``python``'s torch sees, and what they are.

    Asking costs an import of torch and a CUDA initialisation (seconds). With ``memo_dir`` a
    definite answer is remembered under a key of what it depends on (``harness/base/fingerprint.py``):
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
        if isinstance(remembered, list) and len(remembered) == 2:  # not asked now: say where the answer is from
            ui.note_once(f"CUDA devices: {remembered[1]} (not probed now; remembered in {memo.directory}, shared by "
                         "every clone on this host; PATCHLANE_RECHECK=1 asks torch again)")
            return int(remembered[0]), str(remembered[1])
    try:
        proc = guard.run([python, "-c", CUDA_PROBE], timeout=120, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 0, f"cannot probe CUDA with {python}: {exc}"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return 0, f"torch not importable by {python}: {last}"
    n, desc = json.loads(proc.stdout.strip().splitlines()[-1])
    answer = (int(n), f"this host has {n}: {desc}" if n else desc)
    # "none" where the kernel shows GPUs may be a passing failure of CUDA: ask again next time
    if memo is not None and key is not None and (answer[0] > 0 or not driver["gpus"]):
        memo.put(key, list(answer), python=python)
    return answer


NCCL_PROBE = "import torch;print('.'.join(map(str, torch.cuda.nccl.version())))"


def nccl_version(python: str, env: dict[str, str]) -> str | None:
    """The NCCL version ``python``'s torch carries (what a multi-rank cuda lane's collectives run on), or
    None where it has none or cannot say: the receipt then omits it, and the lane itself is unaffected."""
    try:
        proc = guard.run([python, "-c", NCCL_PROBE], env=env, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = proc.stdout.strip().splitlines()
    return lines[-1] if proc.returncode == 0 and lines else None


LOG_CAP = 64 << 20  # bytes of a reproducer's output its log keeps: the first half and the last half


class _CappedLog:
    """Writes the first ``cap // 2`` bytes to ``fh`` as they come and keeps the last ``cap - cap // 2`` in memory;
    ``close`` writes a line saying how much was left out between the two, then the tail (from a line start)."""

    def __init__(self, fh, cap: int, path: Path):
        self.fh, self.head_size, self.tail_max, self.path = fh, cap // 2, cap - cap // 2, path
        self.head_left = self.head_size
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_len = 0
        self.omitted = 0

    def write(self, chunk: bytes) -> None:
        if self.head_left > 0:
            part = chunk[:self.head_left]
            self._put(part)
            self.head_left -= len(part)
            chunk = chunk[len(part):]
        if not chunk:
            return
        self.tail.append(chunk)
        self.tail_len += len(chunk)
        while self.tail_len - len(self.tail[0]) >= self.tail_max:  # whole chunks first, then the first one's start
            self.omitted += len(self.tail[0])
            self.tail_len -= len(self.tail.popleft())

    def close(self) -> None:
        tail = b"".join(self.tail)
        if len(tail) > self.tail_max:
            self.omitted += len(tail) - self.tail_max
            tail = tail[len(tail) - self.tail_max:]
        if self.omitted:
            cut = tail.find(b"\n") + 1  # the tail starts at a line: a protocol line is whole or absent
            self.omitted += cut
            tail = tail[cut:]
            self._put(f"\n[harness: {self.omitted} bytes of output left out here; the log keeps the first "
                      f"{self.head_size - self.head_left} and the last {len(tail)} bytes]\n".encode())
        self._put(tail)

    def _put(self, data: bytes) -> None:
        try:
            view = memoryview(data)
            while view:  # a raw file may take part of a write (a disk filling up): the rest, or the error
                view = view[self.fh.write(view):]
        except OSError as exc:  # a full or read-only temporary directory: the run stops, the lane is not judged
            raise WriteError.of(exc, "the reproducer's log", self.path,
                                hint="free space in the temporary directory (or point TMPDIR elsewhere) and run "
                                     "again") from None


FOLD_TRACES = "fold-traces"  # run(echo=...): echo, with stack traces kept to their head (TraceFolder)


class TraceFolder:
    """The console echo of a reproducer, with each stack trace kept to its first lines and its last one.

    A lane that reproduces a bug often prints the bug's trace (a Python traceback, a C++ ``frame #N`` list of 60
    lines) before its verdict; the log keeps every line, the console says how many it left out and where they
    are. A trace starts at ``Traceback (most recent call last):`` or ``Exception raised from``; it goes on while
    lines are indented, blank, ``frame #..`` or another trace header, and ends at the first other line (the
    exception's message), which is shown.

    pytest's own failure report (an upstream-test lane) is folded whole: its ``= FAILURES =`` and ``= ERRORS =``
    sections, up to the next ``=`` banner (the short test summary, which is shown), become one line saying how
    many lines the log holds. A lane that expects failing tests, or sees tests fail on a missing dataset, no
    longer floods the screen; ``harness run -v`` shows every line."""

    KEEP = 3  # lines shown from the head of a trace
    BANNER = re.compile(rb"^=+ .* =+\r?$")  # pytest's section banners
    REPORTS = re.compile(rb"^=+ (FAILURES|ERRORS) =+\r?$")
    STARTS = ("Traceback (most recent call last):", "Exception raised from ")
    INSIDE = ("frame #", "During handling of the above exception", "The above exception was the direct cause")

    def __init__(self, write):
        self._write = write
        self._partial = b""
        self._block: list[bytes] | None = None
        self._report: list[bytes] | None = None  # inside pytest's FAILURES / ERRORS section

    def feed(self, chunk: bytes) -> None:
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        for line in lines:
            self._line(line + b"\n")

    def close(self) -> None:
        if self._partial:
            self._line(self._partial)
            self._partial = b""
        self._end_block()
        self._end_report()

    NESTED = "Traceback (most recent call last):"  # TVM/TileLang: "tvm.error.InternalError: Traceback (most ..."

    def _line(self, line: bytes) -> None:
        bare = line.rstrip(b"\n")
        if self._report is not None:
            if not self.BANNER.match(bare) or self.REPORTS.match(bare):
                self._report.append(line)
                return
            self._end_report()
        elif self.REPORTS.match(bare):
            self._end_block()
            self._report = [line]
            return
        text = line.decode("utf-8", errors="replace")
        if self._block is None:
            if text.startswith(self.STARTS) or self.NESTED in text:
                self._block = [line]
            else:
                self._write(line)
            return
        # a TileLang (TVM) error repeats its C++ trace after the Python one, behind the exception's name: one trace
        if text[:1] in (" ", "\t") or not text.strip() or text.startswith(self.STARTS + self.INSIDE) \
                or self.NESTED in text:
            self._block.append(line)
            return
        self._end_block()
        self._write(line)

    def _end_report(self) -> None:
        report, self._report = self._report, None
        if report is not None:
            self._write(report[0])
            self._write(f"  ... {len(report) - 1} line(s) of pytest's failure report: in the lane's log (receipt)\n"
                        .encode())

    def _end_block(self) -> None:
        block, self._block = self._block, None
        if block is None:
            return
        if len(block) <= 2 * self.KEEP:
            for line in block:
                self._write(line)
            return
        for line in block[:self.KEEP]:
            self._write(line)
        self._write(f"  ... {len(block) - self.KEEP} more line(s) of this trace: in the lane's log (receipt)\n"
                    .encode())


def run(cmd: list[str], env: dict[str, str], log_path: Path, timeout: float, sentinels: set[str],
        echo: bool | str = True, cap: int | None = None) -> Outcome:
    """Run ``cmd`` (under ``harness.base.guard``), teeing its combined output into ``log_path``.

    Its whole process group is killed at ``timeout``, on any exception (Ctrl-C, SIGTERM), and by
    the guard itself if the harness dies.

    ``sentinels`` is the vocabulary of verdict lines to look for in the log. The log keeps at most ``cap``
    bytes (default ``LOG_CAP``) of the output, its beginning and its end, with a line that says how much was
    left out between them (``Outcome.omitted_bytes``); the console (``echo``) sees everything, but for stack
    traces and pytest's failure reports with ``echo=FOLD_TRACES`` (``TraceFolder``: every lane, unless -v).
    """
    start = time.monotonic()
    timed_out = False

    def console(data: bytes) -> None:
        sys.stderr.buffer.write(data)
        sys.stderr.flush()

    folder = TraceFolder(console) if echo == FOLD_TRACES else None
    show = folder.feed if folder is not None else console
    # unbuffered: a write that fails (a full disk) leaves nothing pending, so closing the file cannot raise a bare
    # OSError over the WriteError that _CappedLog raised (exit 74 naming the log, not an internal error)
    with open(log_path, "wb", buffering=0) as fh:
        log = _CappedLog(fh, LOG_CAP if cap is None else cap, log_path)
        proc = guard.popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out = proc.stdout
        assert out is not None  # stdout=PIPE
        deadline = start + timeout
        try:
            os.set_blocking(out.fileno(), False)
            while True:
                chunk = out.read(65536)
                if chunk:
                    log.write(chunk)
                    if echo:
                        show(chunk)
                elif proc.poll() is not None:
                    rest = out.read()
                    if rest:
                        log.write(rest)
                        if echo:
                            show(rest)
                    if echo and folder is not None:
                        folder.close()
                    break
                else:
                    time.sleep(0.05)
                if time.monotonic() > deadline:
                    timed_out = True
                    guard.kill_group(proc)
                    break
            log.close()
        except BaseException:
            guard.kill_group(proc)
            raise
        finally:
            out.close()
    code = proc.wait()
    guard.release(proc)
    outcome = Outcome(exit_code=None if timed_out else code, duration_s=round(time.monotonic() - start, 3),
                      timed_out=timed_out, omitted_bytes=log.omitted)
    parse_log(log_path.read_text(encoding="utf-8", errors="replace"), outcome, sentinels)
    return outcome


def parse_log(text: str, outcome: Outcome, sentinels: set[str]) -> None:
    """Read the protocol lines. The host stamp is the first valid ``HOST_STAMP`` printed before any
    sentinel; a stamp that is empty or not a JSON object, anywhere, is recorded as a problem."""
    for no, line in protocol_lines(text, sentinels):
        tag, _, rest = line.partition(" ")
        if tag == "HOST_STAMP":
            stamp = _stamp(rest)
            if stamp is None:
                if outcome.stamp_problem is None:
                    outcome.stamp_problem = (f"log line {no}: HOST_STAMP is not a non-empty JSON object "
                                             f"({rest.strip()[:60]!r})")
                continue
            outcome.stamps.append(stamp)
            if outcome.stamp is None and not outcome.sentinels:
                outcome.stamp = stamp
        elif tag == "FIGURE" and outcome.stamp is not None:
            outcome.figures.append(_json(rest))
        elif tag == "SKIPPED" and _protocol_payload(rest):
            outcome.skips += 1
            if outcome.skipped is None:
                outcome.skipped = str(_json(rest).get("reason", rest))
        elif tag in sentinels:
            outcome.sentinels.append((tag, _json(rest)))


def protocol_lines(text: str, sentinels: set[str]):
    """(line number, line) of the log, with protocol lines that concurrent ranks glued together split apart.

    Ranks of one lane share the output pipe, and with ``PYTHONUNBUFFERED`` a ``print`` writes its text and its
    newline in two writes: another rank's whole line can land between them, giving ``TAG {...}TAG {...}``
    on one line. A protocol tag right after a JSON object's closing brace starts a line of its own."""
    tags = "|".join(re.escape(t) for t in sorted({"HOST_STAMP", "FIGURE", "SKIPPED", *sentinels}))
    glued = re.compile(rf"(?<=\}})(?=(?:{tags}) )")
    # lines as the reproducer wrote them: ends at "\n" only (str.splitlines also breaks at U+2028, form feeds,
    # vertical tabs ..., so a sentinel after one of those inside a printed value passed for a line of its own)
    for no, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        for part in glued.split(line):
            yield no, part


def _protocol_payload(text: str) -> bool:
    """A protocol line's payload: nothing, or a JSON object (the kit's ``SKIPPED {"reason": ...}``). Other text
    after the tag is some tool's own output that happens to start with the word, e.g. pytest's short summary
    ``SKIPPED [10] tests/x.py:61: needs 4 ranks`` in an upstream suite's log."""
    if not text.strip():
        return True
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False


def _stamp(text: str) -> dict | None:
    """A HOST_STAMP payload: a JSON object with at least one key, else None."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) and value else None


def _json(text: str) -> dict:
    try:
        value = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return {"text": text}
    return value if isinstance(value, dict) else {"value": value}
