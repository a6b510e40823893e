"""A sweep handed to Slurm: the plan as array jobs, a gather job after them, and the state to follow them.

``harness sweep --slurm`` writes a *round* under the sweep's Slurm directory (``round-N/``): the plan
(``plan.json``, the schema ``harness sweep --plan --json`` writes), the script every array task runs
(``task.sh``: ``harness sweep --from-plan plan.json --task $SLURM_ARRAY_TASK_ID`` into a receipts directory of
the task's own, ``receipts/task-I/``, its result as JSON in ``results/task-I.json``), and ``round.json``: the
array jobs (one per GPU count, its tasks as the array's indices) and the gather job, which depends ``afterany``
on the arrays, imports every task's receipts into the checkout and writes ``summary.json``.

Slurm's word on a task is read only where the task left no result: a task cancelled, timed out or lost with its
node. Its job state then maps onto the exit codes a local lane has (``EXIT_OF_STATE``). A round run again finds
the tasks still queued or running (not submitted twice) and the tasks whose receipts are current (the plan
leaves them out): it submits only the rest.

This module knows the files and the Slurm commands (``Slurm``: ``sbatch``, ``squeue``, ``scontrol``, ``sacct``,
``scancel``, run through one function a test can replace); ``harness/commands/sweep.py`` puts them together.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.base import clock
from harness.errors import ConfigError, Exit, HarnessError
from harness.host.sweep_plan import Plan, Task

ROUND_SCHEMA = 1
ROUND_KIND = "patchlane-slurm-round"
SUMMARY_KIND = "patchlane-slurm-summary"
ROUND_FILE = "round.json"
SUMMARY_FILE = "summary.json"
PLAN_FILE = "plan.json"
SCRIPT_FILE = "task.sh"

# Slurm's job states (squeue/scontrol/sacct spell them alike), as what a local lane would have exited with.
ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED",
                    "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"})
EXIT_OF_STATE: dict[str, Exit] = {
    "COMPLETED": Exit.OK,  # read from the task's own result; a completed task without one is a crash (below)
    "FAILED": Exit.CRASH,
    "OUT_OF_MEMORY": Exit.CRASH,
    "TIMEOUT": Exit.TIMEOUT,
    "DEADLINE": Exit.TIMEOUT,
    "CANCELLED": Exit.TERMINATED,
    "PREEMPTED": Exit.TERMINATED,
    "NODE_FAIL": Exit.TERMINATED,
    "BOOT_FAIL": Exit.TERMINATED,
    "REVOKED": Exit.TERMINATED,
    "SPECIAL_EXIT": Exit.CRASH,
}


class SlurmError(HarnessError):
    """A Slurm command is missing or refused (sbatch, squeue, scontrol, scancel), or a round's files are not what
    this harness wrote: named with the command and what it said."""

    exit_code = Exit.PIN


@dataclass(frozen=True)
class Options:
    """What every ``sbatch`` of the sweep is given: the usual pass-through options."""

    partition: str | None = None
    account: str | None = None
    time: str | None = None  # Slurm's --time; default: from the tasks' time limits
    gpus_flag: str = "--gres=gpu:{n}"  # how a task asks for n GPUs (some sites want --gpus={n})
    extra: tuple[str, ...] = ()  # more sbatch arguments, as given

    def common(self) -> list[str]:
        out = []
        if self.partition:
            out.append(f"--partition={self.partition}")
        if self.account:
            out.append(f"--account={self.account}")
        return out + list(self.extra)


@dataclass(frozen=True)
class Array:
    job: str  # the array's job id
    gpus: int
    tasks: tuple[int, ...]  # the plan's task indices: the array's indices

    def as_json(self) -> dict:
        return {"job": self.job, "gpus": self.gpus, "tasks": list(self.tasks)}


@dataclass(frozen=True)
class Round:
    """One submission: where its files are, its arrays and its gather job."""

    dir: Path
    arrays: tuple[Array, ...]
    gather: str | None
    submitted: str = ""

    @property
    def plan_file(self) -> Path:
        return self.dir / PLAN_FILE

    def result_file(self, task: int) -> Path:
        return self.dir / "results" / f"task-{task}.json"

    def receipts_dir(self, task: int) -> Path:
        return self.dir / "receipts" / f"task-{task}"

    def log_file(self, array: Array, task: int) -> Path:
        return self.dir / "logs" / f"{array.job}_{task}.log"

    def jobs(self) -> list[str]:
        return [a.job for a in self.arrays] + ([self.gather] if self.gather else [])

    def as_json(self) -> dict:
        return {"schema": ROUND_SCHEMA, "kind": ROUND_KIND, "submitted": self.submitted,
                "arrays": [a.as_json() for a in self.arrays], "gather": self.gather}

    def save(self) -> None:
        _write_json(self.dir / ROUND_FILE, self.as_json())

    @classmethod
    def load(cls, directory: Path) -> Round:
        path = directory / ROUND_FILE
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SlurmError(f"{path}: cannot read the round: {exc}") from None
        if not isinstance(doc, dict) or doc.get("kind") != ROUND_KIND or doc.get("schema") != ROUND_SCHEMA:
            raise SlurmError(f"{path}: not a Slurm round this harness wrote (kind {ROUND_KIND!r}, schema "
                             f"{ROUND_SCHEMA})")
        try:
            arrays = tuple(Array(str(a["job"]), int(a["gpus"]), tuple(int(i) for i in a["tasks"]))
                           for a in doc["arrays"])
        except (KeyError, TypeError, ValueError) as exc:
            raise SlurmError(f"{path}: an array entry is malformed: {exc}") from None
        gather = doc.get("gather")
        return cls(directory, arrays, str(gather) if gather else None, str(doc.get("submitted", "")))


def rounds(slurm_dir: Path) -> list[Round]:
    """The rounds under ``slurm_dir``, oldest first (those with a ``round.json``: a round whose submission failed
    half-way left none)."""
    if not slurm_dir.is_dir():
        return []
    found = [d for d in slurm_dir.iterdir() if d.is_dir() and re.fullmatch(r"round-[0-9]+", d.name)
             and (d / ROUND_FILE).is_file()]
    return [Round.load(d) for d in sorted(found, key=lambda d: int(d.name.split("-")[1]))]


def new_round_dir(slurm_dir: Path) -> Path:
    """A fresh ``round-N`` directory (N one past the highest there, submitted or not)."""
    slurm_dir.mkdir(parents=True, exist_ok=True)
    taken = [int(d.name.split("-")[1]) for d in slurm_dir.iterdir() if re.fullmatch(r"round-[0-9]+", d.name)]
    n = max(taken, default=0) + 1
    while True:
        path = slurm_dir / f"round-{n}"
        try:
            path.mkdir()
            return path
        except FileExistsError:  # another submitter took it
            n += 1


# ---------------------------------------------------------------------------------------------- Slurm's commands

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=120)


@dataclass
class Slurm:
    """Slurm's commands, each call through ``runner`` (a test may replace it)."""

    runner: Runner = _run

    def _call(self, argv: Sequence[str], ok: Iterable[int] = (0,)) -> subprocess.CompletedProcess:
        if shutil.which(argv[0]) is None and self.runner is _run:
            raise SlurmError(f"{argv[0]} not found: Slurm's commands must be on PATH to hand a sweep to Slurm",
                             hint="run it on a cluster's login node, or start a local Slurm (.ci/slurm-up.sh)")
        try:
            proc = self.runner(argv)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmError(f"{' '.join(argv[:2])}: {exc}") from None
        if proc.returncode not in tuple(ok):
            said = (proc.stderr or proc.stdout or "").strip().splitlines()
            raise SlurmError(f"{shlex.join(argv[:1])} exited {proc.returncode}: {said[-1] if said else 'no output'}")
        return proc

    def sbatch(self, args: Sequence[str]) -> str:
        """Submit; the job id (``--parsable`` prints ``ID`` or ``ID;CLUSTER``)."""
        out = self._call(["sbatch", "--parsable", *args]).stdout.strip()
        job = out.split(";", 1)[0]
        if not job.isdigit():
            raise SlurmError(f"sbatch printed {out!r}, not a job id")
        return job

    def cancel(self, jobs: Sequence[str]) -> None:
        if jobs:
            self._call(["scancel", *jobs])

    def states(self, jobs: Sequence[str]) -> dict[str, TaskState]:
        """Every task of ``jobs`` that Slurm still knows: ``"<job>"`` for a plain job, ``"<job>_<index>"`` for an
        array task. From ``scontrol show job`` (the controller's memory); tasks it has forgotten are asked of
        ``sacct`` where accounting runs. A job neither knows is absent."""
        found: dict[str, TaskState] = {}
        for job in jobs:
            proc = self._call(["scontrol", "show", "job", "-o", job], ok=(0, 1))
            if proc.returncode == 0:
                for line in proc.stdout.splitlines():
                    found.update(parse_scontrol_line(line))
        missing = [j for j in jobs if not any(k == j or k.startswith(f"{j}_") for k in found)]
        if missing and (self.runner is not _run or shutil.which("sacct") is not None):
            proc = self._call(["sacct", "-n", "-P", "-X", "-o", "JobID,State,ExitCode", "-j", ",".join(missing)],
                              ok=(0, 1))
            if proc.returncode == 0:
                for line in proc.stdout.splitlines():
                    found.update(parse_sacct_line(line))
        return found


@dataclass(frozen=True)
class TaskState:
    state: str  # Slurm's job state, e.g. RUNNING, COMPLETED, CANCELLED (a "CANCELLED by 0" reads CANCELLED)
    exit_code: int | None = None  # the batch script's exit status, where Slurm gives one
    signal: int | None = None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


def _state_word(text: str) -> str:
    return text.split()[0].rstrip("+").upper() if text.strip() else "UNKNOWN"


def _exit_pair(text: str) -> tuple[int | None, int | None]:
    m = re.fullmatch(r"\s*(\d+):(\d+)\s*", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def _indices(spec: str) -> list[int]:
    """An ``ArrayTaskId`` as scontrol writes a pending remainder: ``3``, ``2-5``, ``1,4-6``, ``0-7%2``."""
    out: list[int] = []
    for part in spec.split("%", 1)[0].split(","):
        if "-" in part:
            lo, _, hi = part.partition("-")
            step = 1
            if ":" in hi:
                hi, _, s = hi.partition(":")
                step = int(s)
            out.extend(range(int(lo), int(hi) + 1, step))
        elif part.strip():
            out.append(int(part))
    return out


def parse_scontrol_line(line: str) -> dict[str, TaskState]:
    """One ``scontrol show job -o`` line: a job, an array task, or an array's pending remainder (many tasks)."""
    fields: dict[str, str] = {m.group(1): m.group(2) for m in re.finditer(r"(\w+)=(\S*)", line)}
    if "JobId" not in fields:
        return {}
    code, sig = _exit_pair(fields.get("ExitCode", ""))
    state = TaskState(_state_word(fields.get("JobState", "")), code, sig)
    array, index = fields.get("ArrayJobId"), fields.get("ArrayTaskId")
    if array and index:
        try:
            return {f"{array}_{i}": state for i in _indices(index)}
        except ValueError:
            return {}
    return {fields["JobId"]: state}


def parse_sacct_line(line: str) -> dict[str, TaskState]:
    """One ``sacct -n -P -X -o JobID,State,ExitCode`` line (``123_4|CANCELLED by 0|0:15``; a pending remainder is
    ``123_[5-7]``)."""
    parts = line.strip().split("|")
    if len(parts) < 3:
        return {}
    job, state = parts[0], TaskState(_state_word(parts[1]), *_exit_pair(parts[2]))
    m = re.fullmatch(r"(\d+)_\[([^\]]+)\]", job)
    if m:
        try:
            return {f"{m.group(1)}_{i}": state for i in _indices(m.group(2))}
        except ValueError:
            return {}
    return {job: state} if re.fullmatch(r"\d+(_\d+)?", job) else {}


# ---------------------------------------------------------------------------------------------- submitting

def time_limit(tasks: Sequence[Task], given: str | None) -> str:
    """Slurm's ``--time`` for an array: as given, else the longest task's lane time limits plus a quarter and ten
    minutes for its build (whole minutes)."""
    if given:
        return given
    longest = max((t.timeout_s for t in tasks), default=0)
    return str(max(1, math.ceil(longest * 1.25 / 60) + 10))


def task_script(round_dir: Path, harness: Sequence[str], options: Sequence[str]) -> str:
    """The batch script of every array task: its plan task into its own receipts directory; the sweep's JSON result
    written whole (a task killed before it ends leaves no result, and Slurm's state says why)."""
    cmd = shlex.join([*harness, "sweep", "--from-plan", str(round_dir / PLAN_FILE)])
    opts = shlex.join(list(options))
    d = shlex.quote(str(round_dir))
    return f"""#!/bin/bash
# Written by 'harness sweep --slurm': runs task $SLURM_ARRAY_TASK_ID of {PLAN_FILE} beside this script.
set -u
i=${{SLURM_ARRAY_TASK_ID:?this script runs as a Slurm array task}}
dir={d}
mkdir -p "$dir/receipts/task-$i" "$dir/results"
{cmd} --task "$i" --receipts-dir "$dir/receipts/task-$i" --no-tracking --json --quiet {opts} \\
    > "$dir/results/.task-$i.json.part"
rc=$?
mv -f "$dir/results/.task-$i.json.part" "$dir/results/task-$i.json"
exit $rc
"""


def submit(plan: Plan, indices: Sequence[int], round_dir: Path, slurm: Slurm, opts: Options,
           harness: Sequence[str], task_options: Sequence[str], gather_cmd: Sequence[str]) -> Round:
    """Write the round's plan and script, submit one array per GPU count and the gather job after them. On a
    refusal half-way, what was submitted is cancelled and the round left without ``round.json`` (not resumed)."""
    _write_json(round_dir / PLAN_FILE, plan.as_json())
    script = round_dir / SCRIPT_FILE
    script.write_text(task_script(round_dir, harness, task_options))
    script.chmod(0o755)
    (round_dir / "logs").mkdir(exist_ok=True)
    by_gpus: dict[int, list[Task]] = {}
    for i in indices:
        task = plan.task(i)
        by_gpus.setdefault(task.need.gpus, []).append(task)
    arrays: list[Array] = []
    try:
        for gpus in sorted(by_gpus):
            tasks = by_gpus[gpus]
            args = [f"--job-name=patchlane-sweep-{gpus}gpu", f"--array={','.join(str(t.index) for t in tasks)}",
                    f"--output={round_dir / 'logs' / '%A_%a.log'}",
                    f"--cpus-per-task={max(t.need.slots for t in tasks)}",
                    f"--time={time_limit(tasks, opts.time)}", *opts.common()]
            if gpus:
                args.append(opts.gpus_flag.format(n=gpus))
            arrays.append(Array(slurm.sbatch([*args, str(script)]), gpus, tuple(t.index for t in tasks)))
        gather = None
        if arrays:
            gather = slurm.sbatch(["--job-name=patchlane-sweep-gather", "--cpus-per-task=1",
                                   f"--dependency=afterany:{':'.join(a.job for a in arrays)}",
                                   f"--output={round_dir / 'logs' / 'gather-%j.log'}", *opts.common(),
                                   f"--wrap={shlex.join(gather_cmd)}"])
    except HarnessError:
        try:
            slurm.cancel([a.job for a in arrays])
        except HarnessError:
            pass
        raise
    rnd = Round(round_dir, tuple(arrays), gather, clock.iso())
    rnd.save()
    return rnd


# ---------------------------------------------------------------------------------------------- reading a round

@dataclass(frozen=True)
class TaskEnd:
    """What became of one array task: its result (the child sweep's JSON) or Slurm's state in its place."""

    task: Task
    array: Array | None
    result: dict | None
    state: TaskState | None

    @property
    def finished(self) -> bool:
        return self.result is not None or (self.state is not None and not self.state.active)

    def exit(self) -> Exit:
        """The task's exit by the rules of a local lane: its own sweep's where it wrote one, else its job state's."""
        if self.result is not None:
            try:
                return Exit(int(self.result.get("exit", int(Exit.INTERNAL))))
            except ValueError:
                return Exit.INTERNAL
        if self.state is None:
            return Exit.TERMINATED  # Slurm forgot it and it left nothing: lost with its node or its controller
        mapped = EXIT_OF_STATE.get(self.state.state, Exit.CRASH)
        return Exit.CRASH if mapped == Exit.OK else mapped  # completed yet no result: it died before writing one

    def reason(self) -> str:
        if self.result is not None:
            return ""
        if self.state is None:
            return "slurm: the task left no result and Slurm no longer knows it"
        code = f", exit {self.state.exit_code}" if self.state.exit_code else ""
        sig = f", signal {self.state.signal}" if self.state.signal else ""
        return f"slurm: {self.state.state}{code}{sig}, no result written"


def read_result(path: Path) -> dict | None:
    """A task's result document, or None when it wrote none (or only a part of one)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("lanes"), list) else None


def task_ends(rnd: Round, plan: Plan, states: dict[str, TaskState]) -> list[TaskEnd]:
    out = []
    for array in rnd.arrays:
        for i in array.tasks:
            out.append(TaskEnd(plan.task(i), array, read_result(rnd.result_file(i)), states.get(f"{array.job}_{i}")))
    return out


def active_labels(rnd: Round, plan: Plan, states: dict[str, TaskState]) -> set[tuple[str, tuple[str, ...]]]:
    """(pack, lanes) of the round's tasks still queued or running: a new round must not submit them again."""
    return {(e.task.pack, e.task.lanes) for e in task_ends(rnd, plan, states)
            if e.result is None and e.state is not None and e.state.active}


def progress_line(rnd: Round, states: dict[str, TaskState]) -> str:
    """``slurm round-3: 1-GPU array 41: 2 running, 1 pending, 3 ended; gather 44 pending``."""
    parts = []
    for a in rnd.arrays:
        counts: dict[str, int] = {}
        for i in a.tasks:
            st = states.get(f"{a.job}_{i}")
            word = ("ended" if st is None or not st.active else st.state.lower())
            counts[word] = counts.get(word, 0) + 1
        said = ", ".join(f"{n} {w}" for w, n in sorted(counts.items()))
        parts.append(f"{a.gpus}-GPU array {a.job}: {said}")
    if rnd.gather:
        g = states.get(rnd.gather)
        if g is not None and g.active:
            parts.append(f"gather {rnd.gather} {g.state.lower()}")
        else:  # it exits with the sweep's code, which Slurm calls FAILED when it is not 0
            parts.append(f"gather {rnd.gather} ended" + (f" (exit {g.exit_code})" if g and g.exit_code else ""))
    return f"slurm {rnd.dir.name}: " + "; ".join(parts)


def tar_receipts(directory: Path, dest: Path) -> bool:
    """A tar of the receipts a task wrote (``receipts import`` reads tars); False when it wrote none."""
    import tarfile

    if not any(directory.rglob("receipt.json")):
        return False
    with tarfile.open(dest, "w") as tf:
        tf.add(directory, arcname=".")
    return True


def _write_json(path: Path, doc: dict) -> None:
    """Written whole or not at all (a temporary file beside it, renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_summary(rnd: Round, doc: dict) -> Path:
    path = rnd.dir / SUMMARY_FILE
    _write_json(path, {"kind": SUMMARY_KIND, **doc})
    return path


def read_summary(rnd: Round) -> dict | None:
    try:
        doc = json.loads((rnd.dir / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("kind") == SUMMARY_KIND else None


def round_of(slurm_dir: Path, name: str | None) -> Round:
    """The round named ``name`` (``round-N``), else the newest."""
    found = rounds(slurm_dir)
    if not found:
        raise ConfigError(f"{slurm_dir}: no Slurm round was submitted here",
                          hint="submit one: harness sweep --slurm [PACK ...]")
    if name is None:
        return found[-1]
    for rnd in found:
        if rnd.dir.name == name:
            return rnd
    raise ConfigError(f"{slurm_dir}: no round {name!r} (there are: {', '.join(r.dir.name for r in found)})")

