"""HybridModel ignores the fused linear-CE output path (and its loss breaks with the option on): a self-contained reproducer.

Needs megatron-core (the package under test) importable, torch, a CUDA GPU, mamba-ssm 2.3.2.post1
(with tilelang==0.1.8, apache-tvm-ffi==0.1.9, z3-solver==4.15.4.0, einops==0.8.2, psutil==7.2.2,
tqdm==4.67.3, cloudpickle==3.1.2, packaging==26.0). Nothing else: every helper it uses is copied in
below.

Run it once per build, from one directory:

  1. NVIDIA/Megatron-LM dev at d48bd6be0a unchanged (CPU is enough):
       python repro_hybrid_linear_ce_output_layer.py --unpatched --device cpu
  2. NVIDIA/Megatron-LM dev at d48bd6be0a with the change and, under it, the pull request "Fused linear cross entropy: warn and fall back on GPUs without a kernel" (CPU is enough):
       python repro_hybrid_linear_ce_output_layer.py --patched --device cpu
  3. NVIDIA/Megatron-LM dev at d48bd6be0a unchanged (CUDA GPU):
       python repro_hybrid_linear_ce_output_layer.py --unpatched --device cuda --pattern 'M*-'
  4. NVIDIA/Megatron-LM dev at d48bd6be0a with the change and, under it, the pull request "Fused linear cross entropy: warn and fall back on GPUs without a kernel" (CUDA GPU):
       python repro_hybrid_linear_ce_output_layer.py --patched --device cuda --pattern 'M*-'

Each run prints one JSON line per measurement and ends with a line naming what it observed.

Method notes:

This change: megatron-core (dev branch) HybridModel and the fused linear cross-entropy output layer.

Question asked on every job: with ``cross_entropy_loss_fusion=True`` and
``cross_entropy_fusion_impl="linear"``, does the REAL ``HybridModel``
(``megatron.core.models.hybrid.hybrid_model``; ``MambaModel`` is a wrapper of it) build its output
layer as ``LinearCrossEntropyModule`` and take its loss from it, as ``GPTModel`` does -- and is
that loss (and every gradient) the one the plain path (option off) gives?

The model is a tiny HybridModel built from megatron's own local (non-Transformer-Engine)
modules: ``--pattern`` picks the layer types (``M`` Mamba: ``MambaLayer`` + ``MambaMixer`` with
ColumnParallelLinear/RowParallelLinear projections, mamba_ssm's Triton SSD kernels, the
non-fused ``use_mamba_mem_eff_path=False`` path: the fused one needs causal_conv1d's CUDA extension; ``*``
attention: ``TransformerLayer`` with local ``SelfAttention``/``DotProductAttention``; ``-`` MLP:
``MLPLayer`` with the local MLP). Megatron's local attention and Mamba need CUDA, so the CPU jobs
use ``--`` (two MLP layers) and the CUDA jobs ``M*-``. No position embedding, no final norm
(the norm is Transformer Engine's), TP = 1 (megatron's groups over a world of one). In bfloat16 the
model is wrapped in megatron's ``Float16Module``, as megatron's training sets up every bf16 model
(``get_model``): the local LayerNorm (``WrappedTorchNorm``, a ``torch.nn.LayerNorm`` built without a
dtype) keeps float32 weights until that wrapper casts the module, and on CUDA a float32-weight
LayerNorm rejects the bf16 hidden states a Mamba layer hands it, with the option on or off. Both
models of a comparison are built and wrapped the same way.

* unpatched build (``REPRO_PATCHED=0``): the output layer is not a ``LinearCrossEntropyModule`` -> bug-reproduced
  (FIGURE ``forward_with_labels`` records what a forward with labels then does: at dev d48bd6b
  ``compute_language_model_loss`` has no branch for the "linear" implementation and raises
  UnboundLocalError); a LinearCrossEntropyModule -> bug-absent.
* patched build (``REPRO_PATCHED=1``; an earlier change series applied first): the output layer is a
  ``LinearCrossEntropyModule``; one forward with labels calls megatron's
  ``linear_cross_entropy`` exactly once and never ``compute_language_model_loss``; the same
  model with the option off (same weights) gives the plain path. With Megatron's loss
  (per-token loss x loss mask, summed, / number of unmasked tokens; 20 % of the labels are
  ignore_index and masked), the masked per-token loss, the loss and the gradient of every
  parameter must match the plain path's in float32 and bfloat16. Tolerance from a control: the
  plain path's own error at the output boundary against float64 (the hidden states entering the
  output layer and its weight, cross entropy recomputed in float64): loss within
  ``K_NOISE * max(err_loss, eps)``, output weight grad within ``K_NOISE * max(err_dW, eps)``,
  every other gradient within ``K_NOISE * max(err_dhidden, eps)`` (their error enters through
  the hidden-state gradient). -> fix-validated / fix-failed.

On a GPU without a fused kernel (H100/H200: compute capability 9.0) the patched
``linear_cross_entropy`` takes an earlier change unfused fallback. On the CPU jobs its dispatcher is
made to see a compute capability 9.0 device while the platform is created (capability queries
simulated, tensors on the CPU), so the same path runs.

    python repro_hybrid_linear_ce_output_layer.py --device cpu --pattern=-- --patched
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
import traceback
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

IGNORE = -100
IGNORE_FRACTION = 0.2
SEED = 11
SHAPES = {"cpu": dict(seqlen=32, batch=2, hidden=64, heads=4, vocab=512),
          "cuda": dict(seqlen=128, batch=2, hidden=256, heads=4, vocab=2048)}


def parse_args():
    p = parser(__doc__)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--pattern", default=None,
                   help="hybrid layer pattern (M Mamba, * attention, - MLP); default: -- on cpu, M*- on cuda")
    return p.parse_args()


def init_single_process(torch, dist, device: str) -> None:
    from megatron.core import parallel_state

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device == "cuda":
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    else:
        dist.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)


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
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.cuda, n, f)


def hybrid_spec(pattern: str):
    """A HybridStack spec of megatron's local modules for the layer types in ``pattern``."""
    from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_submodules
    from megatron.core.models.hybrid.hybrid_block import HybridStack, HybridStackSubmodules
    from megatron.core.ssm.mlp_layer import MLPLayer
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_layer import TransformerLayer, TransformerLayerSubmodules

    local = get_gpt_layer_local_submodules()
    layers = {}
    if "*" in pattern:
        layers["attention_layer"] = ModuleSpec(module=TransformerLayer, submodules=TransformerLayerSubmodules(
            input_layernorm=local.input_layernorm, self_attention=local.self_attention,
            self_attn_bda=local.self_attn_bda))
    if "-" in pattern:
        layers["mlp_layer"] = ModuleSpec(module=MLPLayer, submodules=TransformerLayerSubmodules(
            pre_mlp_layernorm=local.pre_mlp_layernorm, mlp=local.mlp, mlp_bda=local.mlp_bda))
    if "M" in pattern:
        from megatron.core.ssm.mamba_layer import MambaLayer, MambaLayerSubmodules
        from megatron.core.ssm.mamba_mixer import MambaMixer, MambaMixerSubmodules

        layers["mamba_layer"] = ModuleSpec(module=MambaLayer, submodules=MambaLayerSubmodules(
            norm=local.input_layernorm,
            mixer=ModuleSpec(module=MambaMixer, submodules=MambaMixerSubmodules(
                in_proj=ColumnParallelLinear, out_proj=RowParallelLinear)),
            mamba_bda=get_bias_dropout_add))
    return ModuleSpec(module=HybridStack, params={"post_layer_norm": False},
                      submodules=HybridStackSubmodules(**layers))


def build_model(torch, pattern: str, dtype, fused: bool, device: str, shape: dict):
    from megatron.core.models.hybrid.hybrid_model import HybridModel
    from megatron.core.transformer import TransformerConfig

    cfg = TransformerConfig(
        num_layers=len(pattern), hidden_size=shape["hidden"], num_attention_heads=shape["heads"],
        hidden_dropout=0.0, attention_dropout=0.0, params_dtype=dtype, bf16=dtype == torch.bfloat16,
        use_cpu_initialization=device == "cpu", cross_entropy_loss_fusion=fused,
        cross_entropy_fusion_impl="linear", mamba_num_groups=1, use_mamba_mem_eff_path=False)
    torch.manual_seed(SEED)
    if device == "cuda":
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

        model_parallel_cuda_manual_seed(SEED)
    model = HybridModel(config=cfg, hybrid_stack_spec=hybrid_spec(pattern), vocab_size=shape["vocab"],
                        max_sequence_length=shape["seqlen"], hybrid_layer_pattern=pattern,
                        position_embedding_type="none").to(device)
    if cfg.bf16:  # megatron's own bf16 setup: cast the module, bf16 inputs in, fp32 outputs out
        from megatron.core.transformer.module import Float16Module

        model = Float16Module(cfg, model)
    return model


def core(model):
    """The HybridModel itself (inside megatron's Float16Module when there is one)."""
    from megatron.core.transformer.module import Float16Module

    return model.module if isinstance(model, Float16Module) else model


def batch(torch, shape: dict, device: str):
    g = torch.Generator().manual_seed(SEED + 1)
    b, s, v = shape["batch"], shape["seqlen"], shape["vocab"]
    ids = torch.randint(0, v, (b, s), generator=g)
    labels = torch.randint(0, v, (b, s), generator=g)
    flat = labels.view(-1)
    flat[torch.randperm(flat.numel(), generator=g)[:round(IGNORE_FRACTION * flat.numel())]] = IGNORE
    pos = torch.arange(s).unsqueeze(0).expand(b, s).contiguous()
    return ids.to(device), pos.to(device), labels.to(device)


def short(exc: BaseException) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    text = f"{type(exc).__name__}: {exc} (at {os.path.basename(frame.filename)}:{frame.lineno} in {frame.name})"
    return text if len(text) <= 600 else text[:600] + " ..."


def run_loss(torch, model, ids, pos, labels, capture: dict | None = None):
    """Megatron's loss over one batch; returns (per-token loss x mask, loss, {param: grad})."""
    model.zero_grad(set_to_none=True)
    handle = None
    if capture is not None:  # the hidden states entering the output layer, and their gradient
        def pre_hook(_module, args, kwargs):
            hidden = args[0] if args else kwargs["input_"]
            capture["hidden"] = hidden.detach().clone()
            hidden.register_hook(lambda grad: capture.__setitem__("grad_hidden", grad.detach().clone()))
        handle = core(model).output_layer.register_forward_pre_hook(pre_hook, with_kwargs=True)
    try:
        per_token = model(ids, pos, None, labels=labels)
    finally:
        if handle is not None:
            handle.remove()
    mask = (labels != IGNORE).float()
    masked = per_token.float() * mask
    loss = masked.sum() / mask.sum()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in core(model).named_parameters() if p.grad is not None}
    return masked.detach(), loss.detach(), grads


def boundary_reference(torch, F, capture: dict, weight, labels):
    """The output boundary in float64: the loss and the gradients of hidden states and output weight."""
    hidden = capture["hidden"].double().requires_grad_(True)  # [s, b, h]
    w = weight.detach().double().requires_grad_(True)
    logits = hidden @ w.t()  # [s, b, V]
    target = labels.t()  # [s, b]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=IGNORE,
                         reduction="sum")
    loss = ce / (target != IGNORE).sum()
    loss.backward()
    return loss.detach(), hidden.grad, w.grad


def check_dtype(torch, F, mod_lce, pattern, dtype, device, shape, failures):
    name = str(dtype).replace("torch.", "")
    ids, pos, labels = batch(torch, shape, device)
    fused = build_model(torch, pattern, dtype, True, device, shape)
    plain = build_model(torch, pattern, dtype, False, device, shape)
    missing = core(plain).load_state_dict(core(fused).state_dict(), strict=True)
    param_dtypes = sorted({str(p.dtype).replace("torch.", "") for p in fused.parameters()})
    figure("models", None, None, dtype=name, pattern=pattern, wrapper=type(fused).__name__,
           fused_output_layer=type(core(fused).output_layer).__name__,
           plain_output_layer=type(core(plain).output_layer).__name__,
           n_params=sum(p.numel() for p in fused.parameters()), param_dtypes=param_dtypes,
           state_dict_load=str(missing))
    if not isinstance(core(fused).output_layer, mod_lce.LinearCrossEntropyModule):
        failures.append(f"{name}: output layer is {type(core(fused).output_layer).__name__}")

    # which loss path the option-on model takes
    calls = {"linear_cross_entropy": 0, "compute_language_model_loss": 0}
    original = mod_lce.linear_cross_entropy

    def counting(*args, **kwargs):
        calls["linear_cross_entropy"] += 1
        return original(*args, **kwargs)

    plain_loss_fn = core(fused).compute_language_model_loss

    def counting_plain(*args, **kwargs):
        calls["compute_language_model_loss"] += 1
        return plain_loss_fn(*args, **kwargs)

    mod_lce.linear_cross_entropy = counting
    core(fused).compute_language_model_loss = counting_plain
    try:
        got_masked, got_loss, got_grads = run_loss(torch, fused, ids, pos, labels)
    except Exception as exc:  # a loss path that cannot run is a failed fix, with the reason on record
        failures.append(f"{name}: option on, forward/backward with labels raised {short(exc)}")
        return
    finally:
        mod_lce.linear_cross_entropy = original
        del core(fused).compute_language_model_loss
    figure("loss_path_calls", calls, None, dtype=name)
    if calls != {"linear_cross_entropy": 1, "compute_language_model_loss": 0}:
        failures.append(f"{name}: option on, loss path calls {calls}")

    capture: dict = {}
    ref_masked, ref_loss, ref_grads = run_loss(torch, plain, ids, pos, labels, capture)
    b_loss, b_dhidden, b_dweight = boundary_reference(torch, F, capture, core(plain).output_layer.weight, labels)
    eps = torch.finfo(dtype).eps
    control = {"loss": rel_fro(ref_loss, b_loss), "grad_hidden": rel_fro(capture["grad_hidden"], b_dhidden),
               "grad_output_weight": rel_fro(ref_grads["output_layer.weight"], b_dweight)}
    figure("control_plain_vs_float64_at_output_boundary", control, None, dtype=name)
    tol = {k: tolerance(v, K_NOISE * eps) for k, v in control.items()}  # K_NOISE * max(v, eps)

    def judge(what, got, ref, limit):
        if got is None or ref is None or got.shape != ref.shape:
            failures.append(f"{name}: {what} missing or of another shape")
            return None
        err = rel_fro(got, ref)
        finite = bool(torch.isfinite(got.float()).all())
        if not finite or err > limit:
            failures.append(f"{name}: {what} rel diff {err:.3g} > {limit:.3g}" if finite else
                            f"{name}: {what} not finite")
        return err

    worst = {"loss": judge("loss", got_loss, ref_loss, tol["loss"]),
             "masked_per_token_loss": judge("masked per-token loss", got_masked, ref_masked, tol["loss"])}
    if set(got_grads) != set(ref_grads):
        failures.append(f"{name}: parameters with grads differ: {sorted(set(got_grads) ^ set(ref_grads))}")
    for pname, ref_grad in ref_grads.items():
        t = tol["grad_output_weight"] if pname == "output_layer.weight" else tol["grad_hidden"]
        worst[pname] = judge(f"grad {pname}", got_grads.get(pname), ref_grad, t)
    figure("fused_vs_plain_rel_diff", worst, None, dtype=name, tolerance=tol, k_noise=K_NOISE)


def main() -> int:
    args = parse_args()
    start(args, "megatron-core", "megatron.core.models.hybrid.hybrid_model")
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    if args.device == "cuda":
        require_cuda("no CUDA device; the cpu jobs run an MLP-only hybrid model")
    pattern = args.pattern or ("--" if args.device == "cpu" else "M*-")
    if args.device == "cpu" and set(pattern) - {"-"}:
        raise SystemExit(f"pattern {pattern!r}: megatron's local attention and Mamba layers need CUDA")
    shape = SHAPES[args.device]
    is_patched = patched()
    init_single_process(torch, dist, args.device)
    from megatron.core.fusions import fused_linear_cross_entropy as mod_flce
    from megatron.core.transformer import linear_cross_entropy as mod_lce

    figure("model", None, None, pattern=pattern, device=args.device, **shape,
           layers={"M": "MambaLayer+MambaMixer (local projections)", "*": "TransformerLayer local attention",
                   "-": "MLPLayer local MLP"})

    if not is_patched:
        model = build_model(torch, pattern, torch.float32, True, args.device, shape)
        layer = type(core(model).output_layer)
        ids, pos, labels = batch(torch, shape, args.device)
        try:
            out = model(ids, pos, None, labels=labels)
            consequence = f"returned {tuple(out.shape)}"
        except Exception as exc:  # what the option does to this model; the verdict rests on the layer type
            consequence = f"raised {short(exc)}"
        figure("forward_with_labels", consequence, None, option="cross_entropy_fusion_impl=linear")
        dist.destroy_process_group()
        details = {"job": job(), "pattern": pattern, "output_layer": f"{layer.__module__}.{layer.__qualname__}",
                   "forward_with_labels": consequence}
        if issubclass(layer, mod_lce.LinearCrossEntropyModule):
            verdict("bug-absent", observed="the output layer is a LinearCrossEntropyModule", **details)
        else:
            verdict("bug-reproduced", observed=f"with the linear fusion on, the output layer is {layer.__name__}",
                    **details)
        return 0

    failures: list[str] = []
    simulate = args.device == "cpu"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with simulated_gpu(torch, (9, 0), simulate):
            try:
                platform = mod_flce._get_platform()
            except ValueError as exc:  # this change alone: the dispatcher has no entry for this GPU and no fallback
                dist.destroy_process_group()
                skip(f"the fused linear cross entropy dispatcher has no entry for this GPU ({exc}): this build needs "
                     "the unfused fallback (Megatron-LM PR 'Fused linear cross entropy: warn and fall back on GPUs "
                     "without a kernel') applied under this change")
        figure("flce_platform", None, None, has_native_kernel=getattr(platform, "has_native_kernel", None),
               simulated_capability="9.0" if simulate else None,
               compute_capability=None if simulate else ".".join(map(str, torch.cuda.get_device_capability())))
        for dtype in (torch.float32, torch.bfloat16):
            check_dtype(torch, F, mod_lce, pattern, dtype, args.device, shape, failures)
    notes = [str(w.message) for w in caught if "linear cross entropy" in str(w.message).lower()]
    figure("flce_warnings", len(notes), None, messages=notes[:2])
    dist.destroy_process_group()
    verdict("fix-failed" if failures else "fix-validated", job=job(), pattern=pattern, simulated_capability=simulate,
            k_noise=K_NOISE, failures=failures[:30], n_failures=len(failures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
