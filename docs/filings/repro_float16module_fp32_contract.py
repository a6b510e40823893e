"""Float16Module casts Mamba-3 fp32-contract parameters: a self-contained reproducer.

Needs megatron-core (the package under test) importable, torch, a CUDA GPU, mamba-ssm main@e9594ce.
Nothing else: every helper it uses is copied in below.

Run it once per build, from one directory:

  1. NVIDIA/Megatron-LM main@d98e8a6 at d98e8a64dd unchanged (CPU is enough):
       python repro_float16module_fp32_contract.py --unpatched
  2. NVIDIA/Megatron-LM main@d98e8a6 at d98e8a64dd with the change (CPU is enough):
       python repro_float16module_fp32_contract.py --patched
  3. NVIDIA/Megatron-LM main@d98e8a6 at d98e8a64dd unchanged (CUDA GPU):
       python repro_float16module_fp32_contract.py --unpatched --stage mamba3
  4. NVIDIA/Megatron-LM main@d98e8a6 at d98e8a64dd with the change (CUDA GPU):
       python repro_float16module_fp32_contract.py --patched --stage mamba3

Each run prints one JSON line per measurement and ends with a line naming what it observed.

Method notes:

This change: megatron-core Float16Module and parameters that must stay fp32.

Question asked on every job: when a module declares that some of its parameters keep
fp32 (Mamba-3's dt_bias, D, B_bias, C_bias and MIMO biases are the real case), does the
REAL ``megatron.core.transformer.module.Float16Module`` of the installed build leave them
in fp32 -- after wrapping, and after training steps -- without re-casting them each step?

The wrapped module is a small stand-in with Mamba-3's parameter names: it declares
``keep_fp32_params = ("dt_bias", "D", "B_bias", "C_bias")`` (the class attribute the patch
adds) and, where the build offers it, marks a MIMO-style bias with ``keep_fp32(param)``.
On the baseline both declarations have no effect, which is the bug.

Upstream main (after 0.19.x) has its own per-tensor marker, ``mark_keep_in_fp32`` (attribute
``keep_in_fp32``), honoured by Float16Module, but no declaration by name; this change main series
adds that as ``keep_in_fp32_params``. On a build with ``mark_keep_in_fp32`` the reproducer uses
that marker and that attribute name (see ``declaration_api``), so on main's baseline the marked
bias stays fp32 and only the by-name declaration is ignored.

Checks (patched build, ``REPRO_PATCHED=1``):

* after the wrap: every declared parameter is fp32, the same Parameter object as before,
  on the same storage (data_ptr) and bitwise equal to its pre-wrap value; every other
  floating parameter is bf16 (the wrapper still does its job);
* over several forward/backward/SGD steps through the wrapper: declared parameters stay
  fp32, keep their object and data_ptr (nothing re-cast per step), get fp32 grads and do
  move; the bf16 parameters keep their data_ptr too;
* a ``keep_fp32_params`` entry that names no parameter is rejected.

Unpatched build: bug-reproduced when a declared parameter is cast to bf16, else bug-absent.

Runs on CPU: torch.distributed gloo with world size 1 and megatron's own
``parallel_state.initialize_model_parallel()`` (Float16Module.forward asks it for the
pipeline group).

``--stage mamba3`` (jobs mamba3-stage-bug / mamba3-stage-fix, CUDA, mamba-ssm 2.3.2.post1
beside megatron-core through ``with_builds``): the same question about the REAL author
``mamba_ssm.modules.mamba3.Mamba3`` (MIMO, TileLang kernels; bf16 weights, the module's own
fp32 parameters dt_bias, D, B_bias, C_bias, mimo_x/z/o). Our host code declares them the way
a user of the patched Megatron would, without touching mamba-ssm:
``mixer.keep_fp32_params = (...)`` on the instance (inert on the baseline build). First an
unwrapped copy runs forward+backward twice (the reference and its run-to-run control; if the
kernels cannot run at all, the job crashes instead of blaming the cast), then the
Float16Module-wrapped module:

* baseline: the declared parameters come out bf16 (FIGURE dtypes_after_wrap) and the wrapped
  forward/backward raises in the kernel (it takes DT, the biases and D as float32) or gives
  non-finite / off-reference results -> bug-reproduced; cast but no consequence -> bug-absent;
* patched: the declared parameters stay fp32 (same objects, storage, values), output and
  gradients are finite and equal the unwrapped module's (bf16 input, no autocast) within
  max(K_NOISE x run-to-run control, bf16 unit roundoff), and over two SGD steps no parameter is
  re-cast (dtype, object and data_ptr stable) -> fix-validated, else fix-failed.

    python repro_float16module_fp32_contract.py --unpatched [--job NAME]
    python repro_float16module_fp32_contract.py --stage mamba3 --unpatched  # mamba_ssm on the path
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


import copy
import os
import socket
import sys


# ---- from _lane.py (verbatim) ----
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


def observed(bad: bool, **details) -> str:
    """Report whether the bug showed, as the outcome that fits this build; returns the outcome."""
    if patched():
        outcome = "fix-failed" if bad else "fix-validated"
    else:
        outcome = "bug-reproduced" if bad else "bug-absent"
    verdict(outcome, **details)
    return outcome


# ---- from _numerics.py (verbatim) ----
K_NOISE = 4.0  # a result may sit this many times above its control's error


BF16_FLOOR = 2.0**-8  # bf16 unit roundoff: the smallest bf16 tolerance ever used


def rel_fro(a, ref) -> float:
    """Relative Frobenius error ||a - ref|| / ||ref||, in float64 (a zero reference divides by 1e-300)."""
    a, ref = a.double(), ref.double()
    return ((a - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def max_abs(a, ref) -> float:
    """Largest absolute elementwise difference, in float64."""
    return (a.double() - ref.double()).abs().max().item()


def tolerance(control: float, floor: float, k: float = K_NOISE) -> float:
    """The most a result may be off: ``k`` times the control's error, at least ``floor``."""
    if control != control or control < 0:  # NaN or negative: the control itself is broken
        raise ValueError(f"control error {control!r} is not a non-negative number")
    return max(k * control, floor)


# ---- the reproducer ----

CONTRACT = ("dt_bias", "D", "B_bias", "C_bias")  # declared through keep_fp32_params
MARKED = "mimo_x_bias"  # declared through keep_fp32(param) where the build has it
HIDDEN, NHEADS, HEADDIM, DSTATE, RANK = 64, 4, 16, 8, 2
STEPS = 3
# The author Mamba3's parameters that it creates in fp32 even with dtype=bf16 (modules/mamba3.py), all
# consumed as float32 by the MIMO TileLang kernels (T.float32 in mamba3_mimo_fwd.py) or, for dt_bias,
# through DT = softplus(dd_dt + dt_bias).
MAMBA3_CONTRACT = ("dt_bias", "D", "B_bias", "C_bias", "mimo_x", "mimo_z", "mimo_o")


def parse_args():
    p = parser(__doc__)
    p.add_argument("--stage", choices=("standin", "mamba3"), default="standin",
                   help="standin: CPU toy with Mamba-3's parameter names; mamba3: the real Mamba3 MIMO (CUDA)")
    p.add_argument("--d-model", type=int, default=256, help="stage mamba3")
    p.add_argument("--d-state", type=int, default=128, help="stage mamba3 (Mamba3 default)")
    p.add_argument("--headdim", type=int, default=64, help="stage mamba3 (Mamba3 default)")
    p.add_argument("--mimo-rank", type=int, default=4, help="stage mamba3 (Mamba3 default)")
    p.add_argument("--chunk", type=int, default=16, help="stage mamba3: 64 / mimo_rank, as upstream recommends")
    p.add_argument("--batch", type=int, default=2, help="stage mamba3")
    p.add_argument("--seqlen", type=int, default=128, help="stage mamba3")
    p.add_argument("--seed", type=int, default=16)
    return p.parse_args()


def init_single_process(parallel_state, dist) -> None:
    """A real (gloo, world size 1) process group and megatron's model-parallel groups over it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)


def declaration_api(mcore_module):
    """(per-parameter marker or None, name of the by-name declaration attribute) of this build.

    0.19.2 + this change: keep_fp32 / keep_fp32_params. Upstream main: mark_keep_in_fp32 (its own)
    / keep_in_fp32_params (this change main series). Unpatched 0.19.2: no marker; the attribute is inert.
    """
    if hasattr(mcore_module, "mark_keep_in_fp32"):
        return mcore_module.mark_keep_in_fp32, "keep_in_fp32_params"
    return getattr(mcore_module, "keep_fp32", None), "keep_fp32_params"


def standin_class(torch, keep_fp32, declare_attr="keep_fp32_params"):
    """A Mamba-3-shaped toy: bf16-friendly projections around fp32-contract SSM parameters."""
    nn = torch.nn

    class Mamba3Standin(nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(16)
            self.in_proj = nn.Linear(HIDDEN, NHEADS * (1 + 2 * DSTATE + HEADDIM), bias=False)
            # dt in [1e-3, 1e-1], stored as softplus^-1(dt): values bf16 cannot hold exactly
            dt = torch.exp(torch.rand(NHEADS, generator=g) * (torch.log(torch.tensor(0.1)) - torch.log(
                torch.tensor(1e-3))) + torch.log(torch.tensor(1e-3)))
            self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
            self.D = nn.Parameter(1.0 + 1e-3 * torch.randn(NHEADS, generator=g))
            self.B_bias = nn.Parameter(1e-3 * torch.randn(NHEADS, DSTATE, generator=g))
            self.C_bias = nn.Parameter(1e-3 * torch.randn(NHEADS, DSTATE, generator=g))
            mimo = nn.Parameter(1.0 + 1e-3 * torch.randn(NHEADS, RANK, HEADDIM, generator=g))
            self.mimo_x_bias = keep_fp32(mimo) if keep_fp32 is not None else mimo
            self.out_proj = nn.Linear(NHEADS * HEADDIM, HIDDEN, bias=False)

        def forward(self, x):  # x: [b, s, HIDDEN] in the model dtype
            b, s, _ = x.shape
            z = self.in_proj(x).view(b, s, NHEADS, 1 + 2 * DSTATE + HEADDIM)
            dt_raw, B, C, xh = torch.split(z, [1, DSTATE, DSTATE, HEADDIM], dim=-1)
            # the "kernel": fp32 SSM arithmetic, the way Mamba-3's kernels consume these
            dt = torch.nn.functional.softplus(dt_raw.squeeze(-1).float() + self.dt_bias.float())
            B = B.float() + self.B_bias.float()
            C = C.float() + self.C_bias.float()
            xh = xh.float() * self.mimo_x_bias.float().mean(1)
            gate = (B * C).sum(-1) * dt  # [b, s, h]
            y = gate.unsqueeze(-1) * xh + self.D.float()[:, None] * xh
            return self.out_proj(y.to(x.dtype).reshape(b, s, NHEADS * HEADDIM))

    setattr(Mamba3Standin, declare_attr, CONTRACT)
    return Mamba3Standin


# --------------------------------------------------------------------------- stage mamba3 (CUDA)


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 800 else text[:800] + " ..."


def _fwd_bwd(torch, model, x, dout):
    """One forward+backward; returns (output as fp32, {param name in the mixer: grad clone})."""
    for p in model.parameters():
        p.grad = None
    out = model(x)
    (out.float() * dout).sum().backward()
    torch.cuda.synchronize()
    return out.detach().float(), {n.removeprefix("module."): (p.grad.detach().clone() if p.grad is not None else None)
                                  for n, p in model.named_parameters()}  # Float16Module names them module.<name>


def _compare(torch, got_out, got, ref_out, ref, ref2_out, ref2, failures, case):
    """Output and every grad against the unwrapped reference; tolerance from the reference's run-to-run control."""
    pairs = [("output", got_out, ref_out, ref2_out)] + [(n, got[n], ref[n], ref2[n]) for n in ref]
    worst = {}
    for name, g, r, r2 in pairs:
        if r is None:
            continue
        if g is None:
            failures.append(f"{case}: {name} has no grad")
            continue
        finite = bool(torch.isfinite(g.float()).all())
        control = rel_fro(r2, r)
        tol = tolerance(control, BF16_FLOOR)
        err = rel_fro(g, r) if g.shape == r.shape else float("inf")
        ok = finite and err <= tol
        worst[name] = err
        figure("vs_unwrapped_rel_fro", err, None, case=case, tensor=name, tolerance=tol, control=control,
               max_abs=max_abs(g, r) if g.shape == r.shape else None, finite=finite,
               dtype=str(g.dtype).replace("torch.", ""), ok=ok)
        if not ok:
            failures.append(f"{case}: {name} " + (f"rel_fro {err:.3g} > {tol:.3g}" if finite else "not finite"))
    return worst


def stage_mamba3(args) -> int:
    start(args, "megatron-core", "megatron.core.transformer.module")
    torch = require_cuda("needs a CUDA GPU: the real Mamba3 MIMO runs TileLang kernels; the CPU jobs use the stand-in")
    import mamba_ssm
    import torch.distributed as dist
    from mamba_ssm.modules.mamba3 import Mamba3
    from megatron.core import parallel_state
    from megatron.core.transformer import module as mcore_module
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    is_patched = patched()
    figure("mamba_ssm", getattr(mamba_ssm, "__version__", None), None, file=mamba_ssm.__file__)
    figure("keep_fp32_marker_api", hasattr(mcore_module, "keep_fp32"), None)
    marker, declare_attr = declaration_api(mcore_module)
    figure("declaration_api", declare_attr, None, marker=getattr(marker, "__name__", None))
    init_single_process(parallel_state, dist)
    device = "cuda"
    torch.manual_seed(args.seed)
    mixer = Mamba3(d_model=args.d_model, d_state=args.d_state, headdim=args.headdim, is_mimo=True,
                   mimo_rank=args.mimo_rank, chunk_size=args.chunk, layer_idx=0, device=device, dtype=torch.bfloat16)
    built = {n: str(p.dtype).replace("torch.", "") for n, p in mixer.named_parameters()}
    fp32_built = sorted(n for n, d in built.items() if d == "float32")
    figure("block", {"class": f"{type(mixer).__module__}.{type(mixer).__qualname__}", "is_mimo": mixer.is_mimo,
                     "d_model": args.d_model, "d_state": args.d_state, "headdim": args.headdim,
                     "nheads": mixer.nheads, "mimo_rank": mixer.mimo_rank, "chunk_size": args.chunk,
                     "batch": args.batch, "seqlen": args.seqlen, "param_dtypes": built}, None, job=job())
    failures: list[str] = []
    if sorted(MAMBA3_CONTRACT) != fp32_built:
        failures.append(f"the author module's fp32 parameters are {fp32_built}, not {sorted(MAMBA3_CONTRACT)}")
    # The host's declaration, as a user of the patched Megatron writes it; no mamba-ssm change. Inert on baseline.
    setattr(mixer, declare_attr, MAMBA3_CONTRACT)

    g = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    x32 = torch.randn(args.batch, args.seqlen, args.d_model, generator=g).to(torch.bfloat16).float().to(device)
    dout = torch.randn(args.batch, args.seqlen, args.d_model, generator=g).to(device)

    # Reference: an unwrapped copy (fp32 contract intact) fed the same bf16 input, no autocast; twice for a control.
    reference = copy.deepcopy(mixer)
    ref_out, ref = _fwd_bwd(torch, reference, x32.to(torch.bfloat16), dout)
    ref2_out, ref2 = _fwd_bwd(torch, reference, x32.to(torch.bfloat16), dout)
    figure("reference_fwd_bwd", "ok", None, finite=bool(torch.isfinite(ref_out).all()))

    before = dict(mixer.named_parameters())
    snap = {n: (p.data_ptr(), p.detach().clone()) for n, p in before.items()}
    config = TransformerConfig(num_layers=1, hidden_size=args.d_model, num_attention_heads=mixer.nheads, bf16=True,
                               params_dtype=torch.float32)
    wrapped = Float16Module(config, mixer)
    after = dict(wrapped.module.named_parameters())
    dtypes = {n: str(p.dtype).replace("torch.", "") for n, p in after.items()}
    figure("dtypes_after_wrap", {n: dtypes[n] for n in MAMBA3_CONTRACT}, None, all_params=dtypes)
    cast_declared = [n for n in MAMBA3_CONTRACT if after[n].dtype != torch.float32]
    for n in MAMBA3_CONTRACT:
        p = after[n]
        if p.dtype == torch.float32:
            if p is not before[n]:
                failures.append(f"{n}: Parameter object replaced by the wrap")
            if p.data_ptr() != snap[n][0]:
                failures.append(f"{n}: storage moved by the wrap")
            if not torch.equal(p.detach(), snap[n][1]):
                failures.append(f"{n}: value changed by the wrap")
        else:
            err = (p.detach().double() - snap[n][1].double()).abs().max().item()
            figure("cast_rounding_max_abs", err, None, param=n, dtype=dtypes[n])
    if cast_declared:
        failures.append(f"cast to 16 bits by Float16Module: {', '.join(cast_declared)}")
    not_bf16 = [n for n, p in after.items() if n not in MAMBA3_CONTRACT and p.dtype != torch.bfloat16]
    if not_bf16:
        failures.append(f"undeclared parameters not bf16 after the wrap: {', '.join(not_bf16)}")

    # Step 1 through the real wrapper: fp32 input -> bf16 on the first stage, output back to fp32.
    consequence, error = None, None
    try:
        out, grads = _fwd_bwd(torch, wrapped, x32, dout)
    except Exception as exc:  # the kernel's dtype check (or whatever the bf16 parameters break)
        consequence, error = "raised", _short(exc)
        out = grads = None
    figure("wrapped_fwd_bwd", consequence or "ok", None, error=error)
    if out is not None:
        worst = _compare(torch, out, grads, ref_out, ref, ref2_out, ref2, failures, "step1")
        finite = bool(torch.isfinite(out).all()) and all(
            bool(torch.isfinite(v.float()).all()) for v in grads.values() if v is not None)
        if not finite:
            consequence = "non_finite"
        elif any(f.startswith("step1:") for f in failures):
            consequence = "differs_from_unwrapped"
        figure("wrapped_worst_rel_fro", max(worst.values()) if worst else None, None, finite=finite)
        for n in MAMBA3_CONTRACT:
            gr = grads.get(n)
            if gr is None or gr.dtype != torch.float32:
                failures.append(f"step1: {n}.grad is {None if gr is None else gr.dtype}")
    else:
        failures.append(f"step1: wrapped forward/backward raised {error}")

    if not is_patched:
        dist.destroy_process_group()
        details = {"job": job(), "declared": list(MAMBA3_CONTRACT), "cast_declared": cast_declared,
                   "consequence": consequence, "error": error}
        if cast_declared and consequence:
            verdict("bug-reproduced", observed="Float16Module cast the fp32-contract parameters to bf16; the "
                                               f"wrapped Mamba3 MIMO then {consequence}", **details)
        else:
            verdict("bug-absent", observed=("parameters cast but the kernels accepted them and matched the "
                                            "unwrapped module" if cast_declared else "no parameter cast"), **details)
        return 0

    # Step 2 after an SGD step: nothing re-cast, nothing moved, still finite (patched jobs).
    if out is not None:
        params = dict(wrapped.module.named_parameters())
        ptrs = {n: p.data_ptr() for n, p in params.items()}
        opt = torch.optim.SGD(wrapped.parameters(), lr=1e-3)
        opt.step()  # step 1's update
        try:
            out2, grads2 = _fwd_bwd(torch, wrapped, x32, dout)
            opt.step()  # step 2's update
            finite2 = bool(torch.isfinite(out2).all()) and all(
                bool(torch.isfinite(v.float()).all()) for v in grads2.values() if v is not None)
            figure("step2_finite", finite2, None)
            if not finite2:
                failures.append("step2: output or grads not finite")
        except Exception as exc:
            failures.append(f"step2: wrapped forward/backward raised {_short(exc)}")
        now = dict(wrapped.module.named_parameters())
        stable = {n: (now[n] is params[n] and now[n].data_ptr() == ptrs[n]) for n in params}
        figure("params_stable_over_two_steps", all(stable.values()), None,
               unstable=[n for n, ok in stable.items() if not ok],
               dtypes={n: str(now[n].dtype).replace("torch.", "") for n in MAMBA3_CONTRACT})
        for n in MAMBA3_CONTRACT:
            if now[n].dtype != torch.float32:
                failures.append(f"after two steps: {n} is {now[n].dtype}")
        failures += [f"after two steps: {n} re-allocated or replaced (re-cast?)" for n, ok in stable.items() if not ok]
    dist.destroy_process_group()
    verdict("fix-failed" if failures else "fix-validated", job=job(), declared=list(MAMBA3_CONTRACT),
            cast_declared=cast_declared, failures=failures[:20], n_failures=len(failures))
    return 0


def main() -> int:
    args = parse_args()
    if args.stage == "mamba3":
        return stage_mamba3(args)
    start(args, "megatron-core", "megatron.core.transformer.module")

    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.transformer import module as mcore_module
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    torch.manual_seed(0)
    init_single_process(parallel_state, dist)
    config = TransformerConfig(num_layers=1, hidden_size=HIDDEN, num_attention_heads=NHEADS, bf16=True,
                               params_dtype=torch.float32)
    figure("keep_fp32_marker_api", hasattr(mcore_module, "keep_fp32"), None)
    keep_fp32, declare_attr = declaration_api(mcore_module)
    figure("declaration_api", declare_attr, None, marker=getattr(keep_fp32, "__name__", None))
    declared = CONTRACT + (MARKED,)
    is_patched = patched()

    inner = standin_class(torch, keep_fp32, declare_attr)()
    before = {n: p for n, p in inner.named_parameters()}
    snap = {n: (p.data_ptr(), p.detach().clone()) for n, p in before.items()}

    wrapped = Float16Module(config, inner)
    after = dict(wrapped.module.named_parameters())
    failures: list[str] = []
    dtypes = {n: str(p.dtype).replace("torch.", "") for n, p in after.items()}
    figure("dtypes_after_wrap", dtypes, None)
    cast_declared = [n for n in declared if after[n].dtype != torch.float32]
    for n in declared:
        p = after[n]
        if p.dtype == torch.float32:
            if p is not before[n]:
                failures.append(f"{n}: Parameter object replaced by the wrap")
            if p.data_ptr() != snap[n][0]:
                failures.append(f"{n}: storage moved by the wrap")
            if not torch.equal(p.detach(), snap[n][1]):
                failures.append(f"{n}: value changed by the wrap")
        else:
            err = (p.detach().double() - snap[n][1].double()).abs().max().item()
            figure("cast_rounding_max_abs", err, None, param=n, dtype=dtypes[n])
    if cast_declared:
        failures.append(f"cast to 16 bits by Float16Module: {', '.join(cast_declared)}")
    not_cast = [n for n, p in after.items() if n not in declared and p.dtype != torch.bfloat16]
    if not_cast:
        failures.append(f"undeclared parameters not cast to bf16: {', '.join(not_cast)}")

    # training steps through the real wrapper (fp32 input -> bf16 on the first stage)
    opt = torch.optim.SGD(wrapped.parameters(), lr=1e-2)
    ptrs = {n: p.data_ptr() for n, p in after.items()}
    objs = dict(after)
    x = torch.randn(2, 8, HIDDEN)
    out_dtype = None
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        out = wrapped(x)
        out_dtype = str(out.dtype).replace("torch.", "")
        out.float().pow(2).mean().backward()
        opt.step()
        now = dict(wrapped.module.named_parameters())
        for n in declared:
            p = now[n]
            if p.dtype != torch.float32:
                failures.append(f"step {step}: {n} is {p.dtype}")
            if p.grad is None or p.grad.dtype != torch.float32:
                failures.append(f"step {step}: {n}.grad is {None if p.grad is None else p.grad.dtype}")
        for n, p in now.items():
            if p is not objs[n]:
                failures.append(f"step {step}: {n} Parameter object replaced")
            if p.data_ptr() != ptrs[n]:
                failures.append(f"step {step}: {n} storage moved (re-cast?)")
    moved = {n: not torch.equal(after[n].detach().float(), snap[n][1].float()) for n in declared}
    figure("declared_params_updated", moved, None, steps=STEPS)
    figure("output_dtype", out_dtype, None, fp32_output=True)
    if not all(moved.values()):
        failures.append(f"declared parameters not updated by {STEPS} SGD steps: "
                        + ", ".join(n for n, m in moved.items() if not m))

    # a declaration that names no parameter must not pass silently (patched API only)
    if is_patched:
        class Typo(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.dt_bias = torch.nn.Parameter(torch.zeros(2))

        setattr(Typo, declare_attr, ("dt_bais",))
        try:
            Float16Module(config, Typo())
            failures.append(f"{declare_attr} naming no parameter was accepted")
            figure("typo_rejected", False, None)
        except ValueError as exc:
            figure("typo_rejected", True, None, error=str(exc))

    dist.destroy_process_group()
    details = {
        "job": job(),
        "question": "does Float16Module keep declared fp32-contract parameters in fp32, without re-casting?",
        "declared": list(declared),
        "cast_declared": cast_declared,
        "failures": failures,
    }
    # the patched build is judged on every check, the unpatched one on the cast the bug is about
    observed(bool(failures) if is_patched else bool(cast_declared), **details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
