"""Fused linear cross entropy: warn and fall back on GPUs without a kernel: a self-contained reproducer.

Needs megatron-core (the package under test) importable, torch, a CUDA GPU. Nothing else: every
helper it uses is copied in below.

Run it once per build, from one directory:

  1. NVIDIA/Megatron-LM dev at d48bd6be0a unchanged (CPU is enough):
       python repro_flce_unfused_fallback.py --unpatched --device cpu
  2. NVIDIA/Megatron-LM dev at d48bd6be0a with this PR (CPU is enough):
       python repro_flce_unfused_fallback.py --patched --device cpu
  3. NVIDIA/Megatron-LM dev at d48bd6be0a with this PR (CPU is enough):
       python -m torch.distributed.run --standalone --nproc_per_node=2 repro_flce_unfused_fallback.py --patched --device cpu
  4. NVIDIA/Megatron-LM dev at d48bd6be0a with this PR (CUDA GPU):
       python -m torch.distributed.run --standalone --nproc_per_node=2 repro_flce_unfused_fallback.py --patched --device cuda
  5. NVIDIA/Megatron-LM dev at d48bd6be0a unchanged (CUDA GPU):
       python repro_flce_unfused_fallback.py --unpatched --device cuda
  6. NVIDIA/Megatron-LM dev at d48bd6be0a with this PR (CUDA GPU):
       python repro_flce_unfused_fallback.py --patched --device cuda
  7. NVIDIA/Megatron-LM dev at d48bd6be0a with this PR (CUDA GPU):
       python repro_flce_unfused_fallback.py --patched --device cuda --stage memory

Each run prints one JSON line per measurement and ends with a line naming what it observed.

Method notes:

This change: megatron-core (dev branch) fused linear cross entropy on a GPU without a native kernel.

Question asked on every job: what does the REAL ``linear_cross_entropy`` of
``megatron.core.fusions.fused_linear_cross_entropy`` (and ``LinearCrossEntropyModule``, the
output layer that calls it) do on a GPU whose compute capability has no kernel entry? At dev
d48bd6b its dispatcher (``Platform``) knows compute capability 10 only and raises
``ValueError("Unsupported architecture: <major>")`` for anything else; the patch warns once
and computes the loss through the unfused vocab-parallel path (materialized logits + megatron's
``vocab_parallel_cross_entropy``).

Stage ``numerics`` (default):

* unpatched build (``REPRO_PATCHED=0``): the first call raises ``ValueError`` naming the architecture ->
  bug-reproduced; a result instead -> bug-absent; any other exception crashes the job.
* patched build (``REPRO_PATCHED=1``): the dispatcher still raising ``ValueError`` -> fix-failed;
  otherwise exactly one RuntimeWarning over the whole run, naming the compute capability
  and the device and saying that the fallback materializes the logits; then, in float32 and
  bfloat16, for reductions mean / sum / none (none: weighted by a random upstream gradient),
  with ~20 % ``ignore_index`` tokens and targets at the vocab partition edges, through
  (a) ``linear_cross_entropy`` without a TP group, (b) with megatron's TP group, (c) the same
  with ``sequence_parallel=True`` where the world size allows it on this device and (d)
  ``LinearCrossEntropyModule.forward(output_cross_entropy_loss=True)``: the loss and both
  gradients (hidden states and this rank's weight shard) are compared with
  ``F.cross_entropy`` on float64 logits materialized from the full weight. The control is the
  plain path in the job's dtype (``hidden @ weight.T`` then ``F.cross_entropy``): each tensor
  may sit at most ``K_NOISE * max(plain_err, eps(dtype))`` from float64 (relative Frobenius;
  ``numerics_kit``).
  Exact checks: float32 loss of shape () / (tokens,), 0 loss and all-zero hidden-gradient rows
  for ignored tokens, gradient dtypes equal to the input dtypes, identical loss and hidden
  gradient on every TP rank. -> fix-validated / fix-failed.

Devices (``--device``):

* ``cuda``: the real GPU. The jobs run on H100/H200 (compute capability 9.0); a GPU of
  compute capability 10 has a native kernel, so the job skips (exit 3).
* ``cpu``: no GPU, so the dispatcher's capability queries are SIMULATED: while the platform is
  created, ``torch.cuda.is_available / current_device / get_device_capability /
  get_device_name`` report a compute capability 9.0 device (``--simulate-cc``); every tensor
  stays on the CPU. This exercises the real dispatcher's decision and the real fallback
  numerics; it is not hardware evidence (the cuda jobs are). Patched CPU jobs also check
  that on 8.0 and 12.1 the dispatcher no longer raises, warns once, and the mean loss matches
  a float64 reference. Under torchrun (WORLD_SIZE = TP > 1, gloo) the
  sequence-parallel case is left out: megatron's sequence-parallel all-gather allocates on
  ``torch.cuda.current_device()``.

Stage ``memory`` (cuda, patched): peak allocated memory above the inputs during one
forward+backward of ``linear_cross_entropy`` at tokens=8192, hidden=2048, vocab=65536 bf16,
against the bf16 logits ([tokens, vocab], 1 GiB). A fused kernel keeps its working set far
below the logits; the fallback materializes them (and a float32 softmax), so on a GPU without
a kernel the truthful outcome is memory-save-missing (working set > 1/4 of the logits);
memory-save-verified would mean the working set stayed under that.

    python repro_flce_unfused_fallback.py --device cpu --patched
    torchrun --standalone --nproc_per_node=2 repro_flce_unfused_fallback.py --device cpu
"""

from __future__ import annotations

# Command-line flags: --patched / --unpatched (which build this process holds), --run-dir DIR (the
# directory the runs of one comparison share; default ./repro-run), --baseline-site DIR (a directory
# holding the unchanged release, for the runs that compare against it in one process).
import os as _os
import sys as _sys

_FLAG_ENV = {"--run-dir": "REPRO_RUN_DIR", "--baseline-site": "REPRO_BASELINE_SITE"}


def _take_flags(argv):
    rest, args = [], iter(argv)
    for arg in args:
        flag, eq, value = arg.partition("=")
        if flag in _FLAG_ENV:
            _os.environ[_FLAG_ENV[flag]] = value if eq else next(args, "")
        elif arg in ("--patched", "--unpatched"):
            _os.environ["REPRO_PATCHED"] = "1" if arg == "--patched" else "0"
        else:
            rest.append(arg)
    return rest


_sys.argv[1:] = _take_flags(_sys.argv[1:])
_os.environ.setdefault("REPRO_RUN_DIR", "./repro-run")


import contextlib
import os
import socket
import sys
import warnings


# ---- from kit.py (verbatim) ----
import argparse
import json
import platform
from importlib import metadata


OUTCOMES = {
    "bug-reproduced": "the bug shows on this build",
    "bug-absent": "the bug does not show on this build (regression coverage)",
    "fix-validated": "the patched build behaves correctly",
    "fix-failed": "the patched build still misbehaves",
    "memory-save-verified": "the patched build saves the claimed memory",
    "memory-save-missing": "the claimed memory saving is not there",
    "equivalence-verified": "patched and baseline results are identical",
    "equivalence-broken": "patched and baseline results differ",
    "regression-guard-passed": "an upstream fix still holds",
    "regression-guard-failed": "an upstream fix regressed",
    "contract-held": "a boundary contract holds",
    "contract-broken": "a boundary contract is violated",
    "contract-violation-detected": "a deliberately wrong job was caught, and identified, by the contract check",
    "contract-violation-missed": "a deliberately wrong job passed the contract check (the check is blind)",
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
    """Print the HOST_INFO line. Call it before anything else prints."""
    facts = {
        "host_python": platform.python_version(),
        "platform": platform.platform(),
        "change": os.environ.get("REPRO_PACK"),
        "job": os.environ.get("REPRO_LANE"),
        "target": os.environ.get("REPRO_TARGET"),
        "base": os.environ.get("REPRO_BASE"),
        "base_commit": os.environ.get("REPRO_BASE_COMMIT"),
        "patched": os.environ.get("REPRO_PATCHED"),
        "build_key": os.environ.get("REPRO_BUILD_KEY"),
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
    _emit("HOST_INFO", facts)
    return facts


def figure(name: str, value, unit: str | None = None, **context) -> None:
    """Report one measured number; it lands in the result's ``figures``."""
    _emit("FIGURE", {"name": name, "value": value, "unit": unit, **context})


def verdict(outcome: str, **details) -> None:
    """Report the job's observation. Call it once, last."""
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}; known: {sorted(OUTCOMES)}")
    _emit(outcome, details)


def skip(reason: str) -> None:
    """Say the reproducer cannot run on this host and exit with the skip code."""
    _emit("SKIPPED", {"reason": reason})
    sys.exit(3)


def job() -> str:
    """The job name the runner is running (``REPRO_LANE``), or 'manual'."""
    return os.environ.get("REPRO_LANE", "manual")


def patched() -> bool:
    """Whether this process holds the patched build: ``REPRO_PATCHED`` is "1" or "0".

    The runner always sets it; a manual run sets it, or passes ``--patched``/``--unpatched``
    through ``start``. Anything else stops the run: guessing the build from a job name is how
    a baseline gets reported as a fix."""
    value = os.environ.get("REPRO_PATCHED")
    if value not in ("0", "1"):
        raise SystemExit(f"REPRO_PATCHED is {value!r}: set it to 1 (patched build) or 0 (unpatched), "
                         "or pass --patched / --unpatched")
    return value == "1"


def parser(doc: str | None) -> argparse.ArgumentParser:
    """The argument parser every reproducer starts from: ``--job`` and ``--patched``/``--unpatched``."""
    p = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
    p.add_argument("--job", help="job label for the stamp and details; overrides REPRO_LANE")
    build = p.add_mutually_exclusive_group()
    build.add_argument("--patched", dest="patched_build", action="store_const", const="1",
                       help="this process holds the patched build (overrides REPRO_PATCHED)")
    build.add_argument("--unpatched", dest="patched_build", action="store_const", const="0",
                       help="this process holds the unpatched build (overrides REPRO_PATCHED)")
    return p


def start(args: argparse.Namespace, distribution: str, module: str) -> dict:
    """Apply ``--job``/``--patched`` to the environment, then print the stamp (the first line)."""
    if getattr(args, "job", None):
        os.environ["REPRO_LANE"] = args.job
    if getattr(args, "patched_build", None) is not None:
        os.environ["REPRO_PATCHED"] = args.patched_build
    return stamp(distribution, module)


def require_cuda(reason: str):
    """torch, when a CUDA device is there; otherwise ``skip(reason)``."""
    import torch

    if not torch.cuda.is_available():
        skip(reason)
    return torch


# ---- from numerics_kit.py (verbatim) ----
K_NOISE = 4.0  # a result may sit this many times above its control's error


def rel_fro(a, ref) -> float:
    """Relative Frobenius error ||a - ref|| / ||ref||, in float64 (a zero reference divides by 1e-300)."""
    a, ref = a.double(), ref.double()
    return ((a - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def tolerance(control: float, floor: float, k: float = K_NOISE) -> float:
    """The most a result may be off: ``k`` times the control's error, at least ``floor``."""
    if control != control or control < 0:  # NaN or negative: the control itself is broken
        raise ValueError(f"control error {control!r} is not a non-negative number")
    return max(k * control, floor)


# ---- the reproducer ----

MODULE = "megatron.core.fusions.fused_linear_cross_entropy"
IGNORE = -100
IGNORE_FRACTION = 0.2
SEED = 10
SHAPES = {"cpu": (64, 2, 64, 1000), "cuda": (256, 2, 512, 16384)}  # seqlen, batch, hidden, vocab
MEMORY_SHAPE = (4096, 2, 2048, 65536)
MEMORY_FRACTION = 0.25  # a working set above this share of the bf16 logits is "materialized"
EXTRA_SIMULATED = ((8, 0), (12, 1))  # further architectures without a kernel (cpu jobs)


def parse_args():
    p = parser(__doc__)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda",
                   help="cuda: the real GPU; cpu: CPU tensors, dispatcher capability simulated")
    p.add_argument("--stage", choices=("numerics", "memory"), default="numerics")
    p.add_argument("--simulate-cc", default="9.0", help="device cpu: the compute capability the dispatcher sees")
    return p.parse_args()


def init_process_group(torch, dist, device: str) -> tuple[int, int]:
    """torchrun's group when launched by it, else a world of one; megatron's TP group spans the world."""
    from megatron.core import parallel_state

    if "WORLD_SIZE" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    else:
        dist.init_process_group("gloo")
    world = dist.get_world_size()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=world)
    return dist.get_rank(), world


@contextlib.contextmanager
def simulated_gpu(torch, cc: tuple[int, int], active: bool):
    """Make torch.cuda report one GPU of compute capability ``cc`` (only what the dispatcher asks)."""
    if not active:
        yield
        return
    names = ("is_available", "current_device", "get_device_capability", "get_device_name")
    saved = {n: getattr(torch.cuda, n) for n in names}
    torch.cuda.is_available = lambda: True
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda device=None: cc
    torch.cuda.get_device_name = lambda device=None: f"simulated sm_{cc[0]}{cc[1]} (CPU host)"
    # A CPU-only torch has no NVTX, whose ranges the fused path opens: make them no-ops there, as they are on
    # a CUDA build of torch without a GPU.
    nvtx = torch.cuda.nvtx
    no_nvtx = not hasattr(torch._C, "_nvtx")
    saved_nvtx = {n: getattr(nvtx, n) for n in ("range_push", "range_pop")}
    if no_nvtx:
        nvtx.range_push = lambda msg: 0
        nvtx.range_pop = lambda: 0
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.cuda, n, f)
        for n, f in saved_nvtx.items():
            setattr(nvtx, n, f)


def reset_platform(mod) -> None:
    """Forget the dispatcher's singleton so the next call decides again."""
    mod.Platform._instance = None
    mod._get_platform.cache_clear()


def dispatch(torch, mod, cc: tuple[int, int], simulated: bool) -> str | None:
    """Let the real dispatcher decide for compute capability ``cc``: None when it returned a platform (it has a
    kernel or falls back), else the message of the ValueError it raised (what the unpatched build does)."""
    with simulated_gpu(torch, cc, simulated):
        try:
            mod._get_platform()
        except ValueError as exc:
            return str(exc)
    return None


def fallback_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught
            if issubclass(w.category, Warning) and "linear cross entropy" in str(w.message).lower()]


def check_warning(messages: list[str], cc: tuple[int, int], device_name: str, failures: list[str], where: str):
    figure("fallback_warnings", len(messages), None, where=where, messages=messages)
    if len(messages) != 1:
        failures.append(f"{where}: {len(messages)} fallback warnings, expected exactly 1")
    for msg in messages[:1]:
        low = msg.lower()
        for what, ok in (("the compute capability", f"{cc[0]}.{cc[1]}" in msg),
                         ("the device name", device_name in msg),
                         ("that it falls back", "falling back" in low or "falls back" in low),
                         ("that the fallback materializes the logits", "materializ" in low and "logits" in low)):
            if not ok:
                failures.append(f"{where}: the warning does not state {what}: {msg!r}")


def problem(torch, s, b, h, v, tp):
    """Same seed on every rank: hidden [s, b, h], full weight [v, h], labels [s, b] with ignored tokens and edges."""
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(s, b, h, generator=g)
    w = torch.randn(v, h, generator=g) * (4.0 / h**0.5)
    t = torch.randint(0, v, (s, b), generator=g)
    flat = t.view(-1)
    n = flat.numel()
    flat[torch.randperm(n, generator=g)[:round(IGNORE_FRACTION * n)]] = IGNORE
    part = v // tp
    edges = [e for r in range(tp) for e in (r * part, (r + 1) * part - 1)]
    kept = (flat != IGNORE).nonzero().squeeze(1)
    flat[kept[torch.randperm(kept.numel(), generator=g)[:len(edges)]]] = torch.tensor(edges)
    upstream = torch.randn(n, generator=g)  # weights of the per-token losses for reduction "none"
    return x, w, t, upstream


def objective(loss, reduction, upstream):
    return (loss.float() * upstream).sum() if reduction == "none" else loss


def reference(torch, F, x, w, t, reduction, upstream, dtype, device):
    """Plain path: materialized logits in ``dtype`` and F.cross_entropy (float64: the reference)."""
    xx = x.to(device=device, dtype=dtype).detach().clone().requires_grad_(True)
    ww = w.to(device=device, dtype=dtype).detach().clone().requires_grad_(True)
    logits = xx.reshape(-1, xx.shape[-1]) @ ww.t()
    loss = F.cross_entropy(logits, t.reshape(-1).to(device), ignore_index=IGNORE, reduction=reduction)
    objective(loss, reduction, upstream.to(device)).backward()
    return {"loss": loss.detach(), "grad_hidden": xx.grad, "grad_weight": ww.grad}


def under_test(torch, mod, path, x, w, t, reduction, upstream, dtype, device, rank, tp):
    """One call of the real megatron function (or module) on this rank's shard (no TP group: the full weight)."""
    s, b, h = x.shape
    v = w.shape[0]
    if path == "no_tp_group":
        rank, tp = 0, 1
    part, shard = v // tp, s // tp
    sp = path == "tp_group_sp"
    xin = (x[rank * shard:(rank + 1) * shard] if sp else x).to(device=device, dtype=dtype)
    xin = xin.detach().clone().requires_grad_(True)
    w_shard = w[rank * part:(rank + 1) * part].to(device=device, dtype=dtype)
    labels = t.to(device)
    from megatron.core import parallel_state

    group = parallel_state.get_tensor_model_parallel_group()
    if path == "module":
        from megatron.core.model_parallel_config import ModelParallelConfig
        from megatron.core.transformer.linear_cross_entropy import LinearCrossEntropyModule

        cfg = ModelParallelConfig(tensor_model_parallel_size=tp, params_dtype=dtype,
                                  use_cpu_initialization=device == "cpu", perform_initialization=False,
                                  cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="linear")
        layer = LinearCrossEntropyModule(h, v, config=cfg, init_method=torch.nn.init.zeros_, bias=False,
                                         gather_output=False, tp_group=group)
        if device == "cuda":
            layer = layer.cuda()
        with torch.no_grad():
            layer.weight.copy_(w_shard)
        # the module takes labels [b, s] and returns the per-token loss [b, s] for reduction "none"
        loss = layer(xin, output_cross_entropy_loss=True, labels=labels.t(), reduction=reduction)
        if reduction == "none":
            loss = loss.t().reshape(-1)
        weight = layer.weight
    else:
        weight = w_shard.detach().clone().requires_grad_(True)
        loss = mod.linear_cross_entropy(xin, weight, labels, tp_group=None if path == "no_tp_group" else group,
                                        reduction=reduction, ignore_index=IGNORE, sequence_parallel=sp)
    objective(loss, reduction, upstream.to(device)).backward()
    return {"loss": loss.detach(), "grad_hidden": xin.grad, "grad_weight": weight.grad,
            "hidden_dtype": xin.dtype, "weight_dtype": weight.dtype, "sp": sp, "shard": shard, "part": part}


def compare(torch, F, dist, mod, path, dtype, reduction, x, w, t, upstream, device, rank, tp):
    """Findings of this rank for one case; loss and hidden grad also checked equal across ranks."""
    name = str(dtype).replace("torch.", "")
    case = f"{name}/{reduction}/{path}"
    got = under_test(torch, mod, path, x, w, t, reduction, upstream, dtype, device, rank, tp)
    ref = reference(torch, F, x, w, t, reduction, upstream, torch.float64, device)
    plain = reference(torch, F, x, w, t, reduction, upstream, dtype, device)
    rows = slice(rank * got["shard"], (rank + 1) * got["shard"]) if got["sp"] else slice(None)
    cols = slice(rank * got["part"], (rank + 1) * got["part"]) if path != "no_tp_group" else slice(None)
    h = x.shape[-1]
    pairs = {
        "loss": (got["loss"], plain["loss"], ref["loss"]),
        "grad_hidden": (got["grad_hidden"].reshape(-1, h), plain["grad_hidden"][rows].reshape(-1, h),
                        ref["grad_hidden"][rows].reshape(-1, h)),
        "grad_weight": (got["grad_weight"], plain["grad_weight"][cols], ref["grad_weight"][cols]),
    }
    failures = []
    eps = torch.finfo(dtype).eps
    for tensor, (value, plain_value, ref_value) in pairs.items():
        if value is None or value.shape != ref_value.shape:
            failures.append(f"{case}: {tensor} is {None if value is None else tuple(value.shape)}, "
                            f"expected {tuple(ref_value.shape)}")
            continue
        noise = rel_fro(plain_value, ref_value)
        err = rel_fro(value, ref_value)
        tol = tolerance(noise, K_NOISE * eps)  # K_NOISE * max(noise, eps)
        finite = bool(torch.isfinite(value.float()).all())
        figure("rel_err_vs_float64", err, None, case=case, tensor=tensor, rank=rank, world_size=tp,
               plain_rel_err=noise, tolerance=tol, ok=finite and err <= tol)
        if not finite or err > tol:
            failures.append(f"{case}: {tensor} rel err {err:.3g} > {tol:.3g} (plain {noise:.3g})"
                            if finite else f"{case}: {tensor} not finite")
    # exact parts of the contract
    loss = got["loss"]
    want_shape = (t.numel(),) if reduction == "none" else ()
    if loss.dtype != torch.float32 or tuple(loss.shape) != want_shape:
        failures.append(f"{case}: loss {loss.dtype} {tuple(loss.shape)}, expected float32 {want_shape}")
    ignored = (t.reshape(-1) == IGNORE).to(loss.device)
    if reduction == "none" and loss.shape == ignored.shape and bool((loss[ignored] != 0).any()):
        failures.append(f"{case}: non-zero loss on ignore_index tokens")
    gh = got["grad_hidden"]
    ignored_rows = ignored.reshape(t.shape)[rows].reshape(-1)
    if gh is not None and bool((gh.reshape(-1, h)[ignored_rows] != 0).any()):
        failures.append(f"{case}: non-zero hidden gradient rows for ignore_index tokens")
    if gh is not None and gh.dtype != got["hidden_dtype"]:
        failures.append(f"{case}: hidden grad {gh.dtype}, hidden {got['hidden_dtype']}")
    if got["grad_weight"] is not None and got["grad_weight"].dtype != got["weight_dtype"]:
        failures.append(f"{case}: weight grad {got['grad_weight'].dtype}, weight {got['weight_dtype']}")
    if tp > 1:  # every rank must hold the same loss, and the same hidden grad unless sequence parallel
        same = [loss.double().reshape(-1)] + ([] if got["sp"] else [gh.double().reshape(-1)])
        for i, tensor in enumerate(same):
            parts = [torch.empty_like(tensor) for _ in range(tp)]
            dist.all_gather(parts, tensor.contiguous())
            if not all(torch.equal(p, parts[0]) for p in parts):
                failures.append(f"{case}: {('loss', 'grad_hidden')[i]} differs between TP ranks")
    return failures


def stage_numerics(args, device: str, simulate: tuple[int, int] | None) -> int:
    import importlib

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    mod = importlib.import_module(MODULE)
    rank, tp = init_process_group(torch, dist, device)
    is_patched = patched()
    if device == "cuda":
        cc = torch.cuda.get_device_capability()
        name = torch.cuda.get_device_name()
        if cc[0] == 10:
            skip(f"compute capability {cc[0]}.{cc[1]} has a native kernel; the question needs a GPU without one")
    else:
        cc, name = simulate, f"simulated sm_{simulate[0]}{simulate[1]} (CPU host)"
    if rank == 0:
        figure("dispatch", None, None, device=device, compute_capability=f"{cc[0]}.{cc[1]}", device_name=name,
               simulated=simulate is not None, world_size=tp, patched=is_patched)
    s, b, h, v = SHAPES[device]
    x, w, t, upstream = problem(torch, s, b, h, v, tp)

    if not is_patched:
        error = None
        with simulated_gpu(torch, cc, simulate is not None):
            try:
                xin = x.to(device).requires_grad_(True)
                mod.linear_cross_entropy(xin, w[: v // tp].to(device), t.to(device), tp_group=None,
                                         reduction="mean", ignore_index=IGNORE)
            except ValueError as exc:
                error = str(exc)
        dist.destroy_process_group()
        if rank == 0:
            details = {"job": job(), "compute_capability": f"{cc[0]}.{cc[1]}", "simulated": simulate is not None,
                       "error": error}
            if simulate is not None:
                details["note"] = ("capability queries simulated on a CPU host: the dispatcher's decision, not "
                                   "hardware evidence")
            if error is not None and "unsupported architecture" in error.lower():
                verdict("bug-reproduced", observed=f"linear_cross_entropy raised ValueError: {error}", **details)
            else:
                verdict("bug-absent", observed="linear_cross_entropy returned a loss", **details)
        return 0

    failures: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        raised = dispatch(torch, mod, cc, simulate is not None)  # decides (and warns) on the real or simulated GPU
        figure("dispatcher_raised", raised is not None, None, rank=rank, error=raised)
        if raised is not None:  # the build in hand still raises: nothing falls back, so nothing to compare
            dist.destroy_process_group()
            if rank == 0:
                verdict("fix-failed", job=job(), observed=f"the dispatcher raised ValueError: {raised}",
                        compute_capability=f"{cc[0]}.{cc[1]}", simulated=simulate is not None,
                        failures=[f"dispatcher raised ValueError: {raised}"], n_failures=1)
            return 0
        paths = ["no_tp_group", "tp_group", "module"]
        if tp == 1 or device == "cuda":
            paths.insert(2, "tp_group_sp")
        cases = 0
        for dtype in (torch.float32, torch.bfloat16):
            for reduction in ("mean", "sum", "none"):
                for path in paths:
                    failures += compare(torch, F, dist, mod, path, dtype, reduction, x, w, t, upstream, device,
                                        rank, tp)
                    cases += 1
        check_warning(fallback_warnings(caught), cc, name, failures, "whole run")
    if simulate is not None and rank == 0:  # other architectures without a kernel take the same path
        for other in EXTRA_SIMULATED:
            reset_platform(mod)
            where = f"simulated {other[0]}.{other[1]}"
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                raised = dispatch(torch, mod, other, True)
                if raised is None:
                    dispatch(torch, mod, other, True)  # decided once per process: a second call warns no more
            if raised is not None:
                failures.append(f"{where}: the dispatcher raised ValueError: {raised}")
                continue
            check_warning(fallback_warnings(caught), other, f"simulated sm_{other[0]}{other[1]}", failures, where)
            with simulated_gpu(torch, other, True):  # the loss itself, through whatever the dispatcher chose
                loss = mod.linear_cross_entropy(x.clone().requires_grad_(True), w, t, tp_group=None,
                                                reduction="mean", ignore_index=IGNORE)
            want = F.cross_entropy(x.reshape(-1, h).double() @ w.double().t(), t.reshape(-1), ignore_index=IGNORE)
            plain = F.cross_entropy(x.reshape(-1, h) @ w.t(), t.reshape(-1), ignore_index=IGNORE)
            err, noise = rel_fro(loss.detach().double(), want), rel_fro(plain.double(), want)
            tol = tolerance(noise, K_NOISE * torch.finfo(torch.float32).eps)
            figure("fallback_loss_rel_err", err, None, where=where, plain_rel_err=noise, tolerance=tol)
            if not err <= tol:
                failures.append(f"{where}: mean loss {float(loss):.6g}, float64 reference {float(want):.6g}")
    gathered = [None] * tp
    dist.all_gather_object(gathered, failures)
    dist.destroy_process_group()
    if rank == 0:
        every = [f for rank_failures in gathered for f in rank_failures]
        shape = dict(zip("sbhv", SHAPES[device], strict=True))
        ignored = int((t == IGNORE).sum())
        verdict("fix-failed" if every else "fix-validated", job=job(), cases=cases, world_size=tp, shape=shape,
                ignored_tokens=ignored, tokens=t.numel(), k_noise=K_NOISE, simulated=simulate is not None,
                failures=every[:30], n_failures=len(every))
    return 0


def stage_memory(args) -> int:
    import importlib

    import torch.distributed as dist

    torch = require_cuda("the memory stage measures GPU memory")
    mod = importlib.import_module(MODULE)
    rank, tp = init_process_group(torch, dist, "cuda")
    cc = torch.cuda.get_device_capability()
    s, b, h, v = MEMORY_SHAPE
    dtype = torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(SEED)
    x = torch.randn(s, b, h, generator=g, device="cuda").to(dtype).requires_grad_(True)
    w = (torch.randn(v, h, generator=g, device="cuda") * (4.0 / h**0.5)).to(dtype).requires_grad_(True)
    t = torch.randint(0, v, (s, b), generator=g, device="cuda")
    from megatron.core import parallel_state

    group = parallel_state.get_tensor_model_parallel_group()
    logits_bytes = s * b * v * torch.finfo(dtype).bits // 8

    def working_set(fn) -> int:
        x.grad = w.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn().backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        working_set(lambda: mod.linear_cross_entropy(x, w, t, tp_group=group, reduction="mean"))  # warm-up
        fused = working_set(lambda: mod.linear_cross_entropy(x, w, t, tp_group=group, reduction="mean"))
    plain = working_set(lambda: torch.nn.functional.cross_entropy(
        (x.reshape(-1, h) @ w.t()).float(), t.reshape(-1), reduction="mean"))
    messages = fallback_warnings(caught)
    figure("memory_shape", None, None, seqlen=s, batch=b, hidden=h, vocab=v, dtype="bfloat16",
           compute_capability=f"{cc[0]}.{cc[1]}", device_name=torch.cuda.get_device_name())
    figure("logits_bytes_bf16", logits_bytes, "bytes")
    figure("working_set_linear_cross_entropy", fused, "bytes", ratio_to_logits=fused / logits_bytes,
           fallback_warning=messages[:1])
    figure("working_set_plain_materialized", plain, "bytes", ratio_to_logits=plain / logits_bytes)
    dist.destroy_process_group()
    details = {"job": job(), "working_set_bytes": fused, "logits_bytes": logits_bytes,
               "ratio": round(fused / logits_bytes, 3), "threshold": MEMORY_FRACTION,
               "fallback_warning_seen": bool(messages), "compute_capability": f"{cc[0]}.{cc[1]}"}
    if fused <= MEMORY_FRACTION * logits_bytes:
        verdict("memory-save-verified", **details)
    else:
        verdict("memory-save-missing", observed="the working set holds the materialized logits"
                + (" (the unfused fallback warned)" if messages else ""), **details)
    return 0


def main() -> int:
    args = parse_args()
    start(args, "megatron-core", MODULE)
    if args.stage == "memory":
        return stage_memory(args)
    if args.device == "cuda":
        require_cuda("no CUDA device; the cpu jobs simulate the dispatcher's capability query")
        return stage_numerics(args, "cuda", None)
    major, minor = (int(p) for p in args.simulate_cc.split("."))
    return stage_numerics(args, "cpu", (major, minor))


if __name__ == "__main__":
    sys.exit(main())
