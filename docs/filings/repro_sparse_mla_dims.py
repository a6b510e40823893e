"""SparseMLA: admit MLA shapes other than DeepSeek-V3.2 (576/512): a self-contained reproducer.

Needs megatron-core (the package under test) importable, torch, a CUDA GPU, tilelang 0.1.8 (with
apache-tvm-ffi==0.1.9, z3-solver==4.15.4.0, cloudpickle==3.1.2, ml-dtypes==0.6.0, psutil==7.2.2,
tqdm==4.70.1). Nothing else: every helper it uses is copied in below.

Run it once per build, from one directory:

  1. NVIDIA/Megatron-LM main at d98e8a64dd unchanged (CPU is enough):
       python repro_sparse_mla_dims.py --unpatched --check lower
  2. NVIDIA/Megatron-LM main at d98e8a64dd with this PR (CPU is enough):
       python repro_sparse_mla_dims.py --patched --check lower
  3. NVIDIA/Megatron-LM main at d98e8a64dd unchanged (CUDA GPU):
       python repro_sparse_mla_dims.py --unpatched
  4. NVIDIA/Megatron-LM main at d98e8a64dd with this PR (CUDA GPU):
       python repro_sparse_mla_dims.py --patched --baseline-site $RELEASED_SITE

RELEASED_SITE is a directory holding NVIDIA/Megatron-LM main at d98e8a64dd unchanged, e.g. made with
'pip install --no-deps --target DIR .' in a checkout of NVIDIA/Megatron-LM main at d98e8a64dd: the
run compares the changed function with that one in one process.

Each run prints one JSON line per measurement and ends with a line naming what it observed.

Method notes:

This change: the fused TileLang SparseMLA path at a non-DeepSeek absorbed-MLA shape.

Shape under test: d_total = 128 = 64 value ("nope", D) + 64 rope tail (D_tail), v_channels = 64. Both
halves are powers of two and multiples of 16, which is what the kernels' GEMMs and tiles need (the
backward delta kernel walks D in 32-wide tiles, so D >= 32). Heads 16 (the kernels' minimum head tile,
kv_group 1), top-k 64 (the dispatcher wants a multiple of 64), bf16.

Jobs (``--check``):

* ``run`` (the default; CUDA): the real megatron dispatcher
  ``ops.tilelang_dsa.fused_sparse_mla_absorbed`` and ``SparseMLA.apply``. Baseline: the dispatcher
  returns None (the caller falls back to the unfused path) and the kernel interfaces refuse the shape
  (AssertionError) -> bug-reproduced. Patched: forward and backward run through the dispatcher and
  out, dq, dkv match a float64 gathered sparse-attention reference written here from the math
  (softmax over the valid top-k keys of q.k * scale, value = first v_channels of the gathered kv,
  rows with no valid key give 0) within a bf16-derived tolerance; and at the DeepSeek shape
  (576 = 512 + 64) the patched SparseMLA equals the baseline one (REPRO_BASELINE_SITE) ->
  fix-validated.
* ``lower`` (any host): what the kernel interfaces would build at 128/64, without a GPU. Baseline:
  the dispatcher declines and both interfaces raise -> bug-reproduced. Patched: the dispatcher hands
  v_channels to SparseMLA.apply, the interfaces derive D = 64 (not 512) from d_v / the output width,
  and the forward, delta, backward and postprocess kernels they ask for lower for sm_90 with
  tilelang.lower -> fix-validated.
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


import importlib
import os
import sys
import time
import types
from pathlib import Path


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
BF16_FLOOR = 2.0**-8  # bf16 unit roundoff: the smallest bf16 tolerance ever used


# ---- the reproducer ----

OPS = "megatron.core.transformer.experimental_attention_variant.ops"
B, S, H, TOPK = 2, 128, 16, 64
D_TOTAL, D_V = 128, 64
DS_TOTAL, DS_V, DS_S = 576, 512, 64   # DeepSeek-V3.2 absorbed MLA, small sequence
TOL = 8 * BF16_FLOOR   # max |got - ref| / max |ref|, per tensor: 8 bf16 units of the tensor's scale


def parse_args():
    p = parser(__doc__)
    p.add_argument("--check", choices=["run", "lower"], default="run")
    return p.parse_args()


def load_baseline_ops():
    """The unpatched ops package from REPRO_BASELINE_SITE, imported as ``p02_baseline_ops``."""
    site = os.environ.get("REPRO_BASELINE_SITE")
    if not site:
        return None
    path = Path(site) / OPS.replace(".", "/")
    pkg = types.ModuleType("p02_baseline_ops")
    pkg.__path__ = [str(path)]
    sys.modules["p02_baseline_ops"] = pkg
    figure("baseline_ops_dir", str(path), None)
    return importlib.import_module("p02_baseline_ops.sparse_mla")


def make_inputs(torch, s, d_total, device, seed):
    """q [B,S,H,Dt], kv [B,S,1,Dt] (bf16) and causal top-k indices [B,S,1,K] (-1 = no key)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(B, s, H, d_total, generator=g).to(torch.bfloat16)
    kv = torch.randn(B, s, 1, d_total, generator=g).to(torch.bfloat16)
    idx = torch.full((B, s, 1, TOPK), -1, dtype=torch.int32)
    for b in range(B):
        for i in range(s):
            pick = torch.randperm(i + 1, generator=g)[:TOPK]
            idx[b, i, 0, : pick.numel()] = pick.to(torch.int32)
    return q.to(device), kv.to(device), idx.to(device)


def reference(torch, q, kv, idx, d_v, scale):
    """float64 sparse attention over the gathered top-k keys (autograd gives dq, dkv)."""
    q = q.double().detach().requires_grad_(True)
    kv = kv.double().detach().requires_grad_(True)
    valid = idx[:, :, 0, :] >= 0                                   # [B,S,K]
    safe = idx[:, :, 0, :].clamp(min=0).long()
    gathered = torch.stack([kv[b, safe[b], 0, :] for b in range(kv.size(0))])   # [B,S,K,Dt]
    scores = torch.einsum("bshd,bskd->bshk", q, gathered) * scale
    scores = scores.masked_fill(~valid[:, :, None, :], float("-inf"))
    p = torch.softmax(scores, dim=-1)
    p = torch.nan_to_num(p, nan=0.0)                               # rows with no valid key -> 0
    out = torch.einsum("bshk,bskd->bshd", p, gathered[..., :d_v])
    return q, kv, out


def rel_err(torch, got, ref) -> float:
    return float((got.double() - ref.double()).abs().max() / ref.double().abs().max().clamp(min=1e-30))


def run_check(torch, ops_dsa, sparse_mla, baseline_sparse_mla):
    """CUDA jobs: the dispatcher at 128/64 and (patched) the DeepSeek shape against the baseline."""
    scale = D_TOTAL**-0.5
    q, kv, idx = make_inputs(torch, S, D_TOTAL, "cuda", seed=0)
    query = q.permute(1, 0, 2, 3).contiguous().requires_grad_(True)     # [S,B,H,Dt], dispatcher layout
    key = kv.permute(1, 0, 2, 3).contiguous().requires_grad_(True)      # [S,B,1,Dt]
    out = ops_dsa.fused_sparse_mla_absorbed(query, key, idx[:, :, 0, :].contiguous(), scale, D_V)
    figure("dispatcher_took_fused_path", out is not None, None, d_total=D_TOTAL, v_channels=D_V)
    refused = []
    try:
        sparse_mla.SparseMLA.apply(q, kv, idx, scale, D_V) if patched() else \
            sparse_mla.SparseMLA.apply(q, kv, idx, scale)
    except (AssertionError, TypeError) as exc:
        refused.append(f"SparseMLA.apply: {type(exc).__name__}: {exc}")
        print(f"SparseMLA.apply refused d_total={D_TOTAL}: {type(exc).__name__}: {exc}")
    if out is None:
        return ("bug-reproduced" if refused else "bug-absent"), {
            "failures": [] if refused else ["dispatcher declined but SparseMLA.apply accepted"],
            "dispatcher": "declined (returns None -> unfused fallback)", "refusals": refused}
    failures = list(refused)
    g = torch.Generator(device="cpu").manual_seed(1)
    dout = torch.randn(out.shape, generator=g).to(torch.bfloat16).cuda()
    out.backward(dout)
    rq, rkv, rout = reference(torch, q, kv, idx, D_V, scale)
    rout.backward(dout.permute(1, 0, 2, 3).double())
    errs = {"out": rel_err(torch, out.permute(1, 0, 2, 3), rout),
            "dq": rel_err(torch, query.grad.permute(1, 0, 2, 3), rq.grad),
            "dkv": rel_err(torch, key.grad.permute(1, 0, 2, 3), rkv.grad)}
    for name, e in errs.items():
        figure(f"rel_err_{name}_128_64", e, None, tol=TOL)
        if not e <= TOL:
            failures.append(f"{name} at {D_TOTAL}/{D_V}: rel err {e:.3g} > {TOL:.3g}")
    # DeepSeek shape: patched SparseMLA with d_v=512 vs the baseline SparseMLA (no d_v argument).
    ds = {}
    if baseline_sparse_mla is None:
        failures.append("no baseline build (REPRO_BASELINE_SITE unset): job needs with_baseline = true")
    else:
        dscale = DS_TOTAL**-0.5
        q2, kv2, idx2 = make_inputs(torch, DS_S, DS_TOTAL, "cuda", seed=2)
        dout2 = torch.randn(B, DS_S, H, DS_V, generator=g).to(torch.bfloat16).cuda()
        res = {}
        for tag, fn in (("patched", lambda a, b: sparse_mla.SparseMLA.apply(a, b, idx2, dscale, DS_V)),
                        ("baseline", lambda a, b: baseline_sparse_mla.SparseMLA.apply(a, b, idx2, dscale))):
            a, b = q2.clone().requires_grad_(True), kv2.clone().requires_grad_(True)
            o, _ = fn(a, b)
            o.backward(dout2)
            res[tag] = (o.detach(), a.grad, b.grad)
        rq2, rkv2, rout2 = reference(torch, q2, kv2, idx2, DS_V, dscale)
        rout2.backward(dout2.double())
        for i, name in enumerate(("out", "dq", "dkv")):
            diff = rel_err(torch, res["patched"][i], res["baseline"][i])
            ds[name] = {"patched_vs_baseline": diff,
                        "bitwise_equal": bool(torch.equal(res["patched"][i], res["baseline"][i])),
                        "baseline_vs_ref": rel_err(torch, res["baseline"][i], (rout2, rq2.grad, rkv2.grad)[i])}
            figure(f"deepseek_{name}_patched_vs_baseline", diff, None, **ds[name])
            if not diff <= 2 * BF16_FLOOR:
                failures.append(f"DeepSeek shape {name}: patched differs from baseline by {diff:.3g}")
    return ("fix-failed" if failures else "fix-validated"), {
        "failures": failures, "rel_err_128_64": errs, "tol": TOL, "deepseek_576_512": ds}


def lower_check(torch, ops_dsa, sparse_mla, fwd, bwd):
    """Any host: what the interfaces build at 128/64, lowered for sm_90 (no launch)."""
    import tilelang
    from tilelang import tvm

    failures, refusals, details = [], [], {}
    q, kv, idx = make_inputs(torch, S, D_TOTAL, "cpu", seed=0)
    # 1. the dispatcher, with SparseMLA.apply replaced by a recorder (CPU tensors cannot launch)
    seen = {}

    class Recorder:
        @staticmethod
        def apply(qb, kb, ib, scale, *rest):
            seen["args"] = rest
            return torch.zeros(*qb.shape[:3], rest[0] if rest else 512, dtype=qb.dtype), None

    real, ops_dsa.SparseMLA = ops_dsa.SparseMLA, Recorder
    try:
        # control: the same call at the DeepSeek shape must take the fused path on either build, so a
        # decline at 128/64 is about the shape, not about CPU tensors or the recorder
        q2, kv2, idx2 = make_inputs(torch, DS_S, DS_TOTAL, "cpu", seed=2)
        control = ops_dsa.fused_sparse_mla_absorbed(q2.permute(1, 0, 2, 3), kv2.permute(1, 0, 2, 3),
                                                    idx2[:, :, 0, :].contiguous(), DS_TOTAL**-0.5, DS_V)
        seen.clear()
        out = ops_dsa.fused_sparse_mla_absorbed(q.permute(1, 0, 2, 3), kv.permute(1, 0, 2, 3),
                                                idx[:, :, 0, :].contiguous(), D_TOTAL**-0.5, D_V)
    finally:
        ops_dsa.SparseMLA = real
    figure("control_576_512_took_fused_path", control is not None, None)
    if control is None:
        failures.append("control: the dispatcher declined the DeepSeek shape 576/512 too")
    details["dispatcher"] = "fused" if out is not None else "declined"
    details["dispatcher_apply_extra_args"] = list(seen.get("args", ()))
    figure("dispatcher_took_fused_path", out is not None, None, d_total=D_TOTAL, v_channels=D_V)
    # 2. the kernel interfaces, with the kernel getters replaced by recorders
    built = {}

    class Stop(Exception):
        pass

    def recorder(name):
        def get(*args, **kwargs):
            built[name] = (args, kwargs)
            raise Stop
        return get

    getters = ((fwd, "_get_sparse_mla_fwd_kernel"), (bwd, "_get_bwd_kernel"), (bwd, "_get_postprocess_kernel"),
               (bwd, "_get_preprocess_kernel"))
    saved = [(m, n, getattr(m, n)) for m, n in getters]
    fwd._get_sparse_mla_fwd_kernel = recorder("fwd")
    bwd._get_preprocess_kernel = recorder("preprocess")
    def passthrough(name, kernel):
        def get(*args, **kwargs):
            built[name] = (args, kwargs)
            return kernel
        return get

    bwd._get_bwd_kernel = passthrough("bwd", lambda q_, *rest: torch.zeros_like(q_))
    bwd._get_postprocess_kernel = passthrough("postprocess", lambda dkv: dkv)
    calls = {
        "fwd": lambda: fwd.sparse_mla_fwd_interface(q, kv, idx, sm_scale=None, d_v=D_V),
        "preprocess": lambda: bwd.sparse_mla_delta(torch.zeros(B, S, H, D_V, dtype=torch.bfloat16),
                                                   torch.zeros(B, S, H, D_V, dtype=torch.bfloat16)),
        "bwd": lambda: bwd.sparse_mla_bwd(q, kv, None, torch.zeros(B, S, H, D_V, dtype=torch.bfloat16), idx,
                                          torch.zeros(B, S, H), delta=torch.zeros(B, S, H)),
    }
    try:
        for name, call in calls.items():
            try:
                call()
            except Stop:
                pass
            except AssertionError as exc:
                refusals.append(f"{name} interface: AssertionError: {exc}")
                print(f"{name} interface refused d_total={D_TOTAL}, d_v={D_V}: {exc}")
    finally:
        for m, n, f in saved:
            setattr(m, n, f)
    details["kernel_args"] = {k: [list(map(str, a)), {kk: str(vv) for kk, vv in kw.items()}]
                              for k, (a, kw) in built.items()}
    details["refusals"] = refusals
    if not patched():
        bug = out is None and len(refusals) >= 2 and ops_dsa.SparseMLA is not None and not failures
        if ops_dsa.SparseMLA is None:
            failures.append("SparseMLA is None: tilelang did not import, so a decline proves nothing")
        return ("bug-reproduced" if bug else "bug-absent"), dict(details, failures=failures)
    if out is None:
        failures.append("patched dispatcher declined 128/64")
    if list(seen.get("args", ())) != [D_V]:
        failures.append(f"dispatcher passed {seen.get('args')} to SparseMLA.apply, expected d_v={D_V}")
    failures += refusals
    # 3. lower what was asked for
    builders = {"fwd": fwd.sparse_mla_fwd, "preprocess": bwd.preprocess, "bwd": bwd.bwd,
                "postprocess": bwd.postprocess}
    target = tvm.target.Target("cuda -arch=sm_90")
    for name in ("fwd", "preprocess", "bwd", "postprocess"):
        if name not in built:
            failures.append(f"{name}: the interface never asked for a kernel")
            continue
        args, kwargs = built[name]
        if name == "fwd":
            dims = (kwargs["dim"], kwargs["tail_dim"])
            kwargs = {k: v for k, v in kwargs.items()}
            args = (kwargs.pop("heads"), kwargs.pop("dim"), kwargs.pop("tail_dim"), kwargs.pop("topk"))
        elif name == "bwd":
            dims = (args[1], args[2])
            H_, D_, Dt_, topk, kv_group, sm_scale, max_block_h = args
            args, kwargs = (H_, D_, Dt_, topk, kv_group, sm_scale), {"max_block_h": max_block_h}
        elif name == "preprocess":
            dims = (args[1], None)
        else:
            dims = tuple(args[:2])
        figure(f"{name}_dims", list(dims), None)
        if dims[0] != D_V:
            failures.append(f"{name}: built with D={dims[0]}, expected {D_V}")
        impl = builders[name]
        t0 = time.perf_counter()
        try:
            func = impl.get_tir(*args, **kwargs)
            with target, tvm.transform.PassContext(opt_level=3, config=impl.pass_configs or {}):
                art = tilelang.lower(func, target=target)
            src = getattr(art, "kernel_source", None) or ""
            figure(f"{name}_lowered", True, None, seconds=round(time.perf_counter() - t0, 2),
                   source_chars=len(src))
        except Exception as exc:  # noqa: BLE001 - any lowering failure is the finding
            failures.append(f"{name}: lowering failed: {type(exc).__name__}: {str(exc)[-400:]}")
            figure(f"{name}_lowered", False, None, error=str(exc)[-400:])
    return ("fix-failed" if failures else "fix-validated"), dict(details, failures=failures)


def main() -> int:
    args = parse_args()
    start(args, "megatron-core", "megatron.core")
    import torch

    if args.check == "run":
        require_cuda("the fused SparseMLA kernels need a CUDA GPU (the 'lower' job checks them on any host)")
    ops_dsa = importlib.import_module(f"{OPS}.tilelang_dsa")
    sparse_mla = importlib.import_module(f"{OPS}.sparse_mla")
    if sparse_mla.SparseMLA is None or ops_dsa.SparseMLA is None:
        verdict("fix-failed" if patched() else "bug-absent", job=job(),
                failures=["tilelang is not importable: SparseMLA is None (job needs with_builds tilelang)"])
        return 0
    if args.check == "lower":
        fwd = importlib.import_module(f"{OPS}.tilelang_sparse_mla_fwd")
        bwd = importlib.import_module(f"{OPS}.tilelang_sparse_mla_bwd")
        outcome, details = lower_check(torch, ops_dsa, sparse_mla, fwd, bwd)
    else:
        baseline = load_baseline_ops() if patched() else None
        outcome, details = run_check(torch, ops_dsa, sparse_mla, baseline)
    verdict(outcome, job=job(), shape={"d_total": D_TOTAL, "v_channels": D_V, "B": B, "S": S, "H": H,
                                          "topk": TOPK},
            question="does the fused SparseMLA path run at d_total=128, v_channels=64?", **details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
