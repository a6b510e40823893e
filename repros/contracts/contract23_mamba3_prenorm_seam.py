"""Contract 23: the pre-projection RMSNorm seam of the real author Mamba-3 block.

Seam. In Megatron's hybrid (Mamba) stack a layer is ``norm slot -> mixer -> residual add``, and the
norm slot can be an ``IdentityOp`` (Megatron's own Mamba mixer fuses the norm into its in_proj). The
author ``Mamba3`` (mamba_ssm/modules/mamba3.py) has a plain ``nn.Linear`` in_proj and no input norm
(it normalizes only B and C after the projection), so dropped into such a slot it sees the raw,
unconstrained residual stream. The contract: the host puts an explicit RMSNorm in front of in_proj.

The host below is ours, a few lines: ``MixerHost(norm, mixer)`` returns ``mixer(norm(hidden))`` (the
branch the layer adds to the residual; the add itself only puts the raw input back and is outside
the seam). ``norm`` is ``nn.Identity`` (uses_identity_norm) or ``torch.nn.RMSNorm`` computed in fp32
(explicit_pre_norm). The mixer is the real ``Mamba3`` of the installed build, SISO by default (its
own default; Triton forward kernels), bf16 weights with the fp32 parameters the author keeps fp32
(dt_bias, B/C biases, D). Forward only. No stand-in mixer: without a CUDA GPU the lane prints
SKIPPED -- nothing about the real block can be shown on a CPU host.

* ``--check drift`` (lane identity-drift): the same input at scales s in {0.1, 1, 10, 100}, through
  the identity host and the RMSNorm host (same mixer). Identity host: the output statistics must move
  with s by more than ``max(--drift-floor, DRIFT_MARGIN x what the RMSNorm host shows)``. RMSNorm host:
  every output must equal the s = 1 output within ``tol`` and its RMS likewise. tol comes from a
  control, not a guess: ``max(K_NOISE x control, bf16 unit roundoff)``, control = the larger of the
  host's run-to-run distance and its output change when the input is re-rounded by one bf16 unit
  (what scaling by a non-power-of-two s does to a bf16 tensor). Drift seen and invariance held ->
  BUG_REPRODUCED; no drift -> BUG_ABSENT; invariance broken -> CONTRACT_BROKEN.
* ``--check parity`` (lane prenorm-parity): a residual stream with per-token scales 10^U(-1, 2) and
  an RMSNorm weight 1 + 0.1 N(0, 1). The RMSNorm host's output must equal the author block fed
  RMSNorm(x) computed independently (float64, by hand, rounded once to bf16) within tol, control =
  the larger of the reference's run-to-run distance and the distance to the same reference computed
  in float32 (another legitimate rounding of the normalized input). Two negative controls must FAIL
  that tolerance, or the check proves nothing: the identity host, and an RMSNorm host without its
  weight. -> CONTRACT_HELD, else CONTRACT_BROKEN.

Autotuning is bounded: the forward kernels' autotuners (mamba3_siso_fwd_kernel, angle_dt_fwd_kernel)
get the configs of ``--configs`` (default two), so the first call compiles two variants, not 27 + 9.

    python contract23_mamba3_prenorm_seam.py --check drift     # with mamba_ssm on the path
"""

from __future__ import annotations

import argparse
import math

from _lane import figure, lane, parser, require_cuda, start, verdict
from _numerics import BF16_FLOOR, K_NOISE, max_abs, rel_fro

SCALES = (0.1, 1.0, 10.0, 100.0)
DRIFT_MARGIN = 10.0  # identity drift must exceed the RMSNorm host's own spread by this factor
DRIFT_FLOOR = 0.10  # ... and be at least a 10 % change of the output RMS
FORWARD_KERNELS = (("mamba_ssm.ops.triton.mamba3.mamba3_siso_fwd", "mamba3_siso_fwd_kernel"),
                   ("mamba_ssm.ops.triton.mamba3.angle_dt", "angle_dt_fwd_kernel"))


def parse_args(argv=None) -> argparse.Namespace:
    p = parser(__doc__)
    p.add_argument("--check", choices=("drift", "parity"), required=True)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--d-state", type=int, default=128, help="Mamba3 default")
    p.add_argument("--headdim", type=int, default=64, help="Mamba3 default")
    p.add_argument("--chunk", type=int, default=None, help="default: 64 (SISO), 16 (MIMO)")
    p.add_argument("--mimo", action="store_true", help="is_mimo=True, rank 4 (TileLang; ~3 min first compile)")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seqlen", type=int, default=128)
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--scales", type=float, nargs="+", default=list(SCALES))
    p.add_argument("--drift-floor", type=float, default=DRIFT_FLOOR)
    p.add_argument("--configs", nargs="+", default=["1,4", "2,4"],
                   help="num_stages,num_warps configs given to the SISO forward autotuners")
    p.add_argument("--autotune", action="store_true", help="leave the upstream autotune lists alone")
    p.add_argument("--seed", type=int, default=23)
    return p.parse_args(argv)


# --------------------------------------------------------------------------- decisions (pure, tested on CPU)


def tolerance(control: float) -> float:
    return max(K_NOISE * control, BF16_FLOOR)


def drift_decision(rms_id: dict, rms_pn: dict, dist_pn: dict, tol: float, finite_id: dict,
                   drift_floor: float = DRIFT_FLOOR) -> tuple[str, dict]:
    """Verdict of the drift lane from per-scale numbers (scale -> value; 1.0 must be present).

    rms_id / rms_pn: output RMS of the identity / RMSNorm host; dist_pn: rel. Frobenius distance of the
    RMSNorm host's output at s to its output at s = 1; finite_id: whether the identity output was finite.
    """
    ref_id, ref_pn = rms_id[1.0], rms_pn[1.0]
    spread_pn = max(abs(rms_pn[s] / ref_pn - 1.0) for s in rms_pn)
    failures = []
    for s in rms_pn:
        if not math.isfinite(rms_pn[s]) or dist_pn[s] > tol or abs(rms_pn[s] / ref_pn - 1.0) > tol:
            failures.append(f"s={s:g}: rms ratio {rms_pn[s] / ref_pn:.6g}, output distance {dist_pn[s]:.3g} "
                            f"(tol {tol:.3g})")
    threshold = max(drift_floor, DRIFT_MARGIN * max(spread_pn, tol))
    drift = {s: (abs(rms_id[s] / ref_id - 1.0) if finite_id[s] and math.isfinite(rms_id[s]) else math.inf)
             for s in rms_id}
    drifted = sorted(s for s, d in drift.items() if d > threshold)
    details = {"threshold": threshold, "tolerance": tol, "prenorm_rms_spread": spread_pn,
               "identity_rms_change": {f"{s:g}": drift[s] for s in sorted(drift)},
               "drifted_scales": drifted, "uses_identity_norm": True, "explicit_pre_norm": True}
    if failures:
        return "CONTRACT_BROKEN", details | {"broken": "explicit RMSNorm host is not scale-invariant",
                                             "failures": failures}
    if drifted:
        return "BUG_REPRODUCED", details | {"observed": "identity norm slot: output statistics drift with input "
                                                        "scale; explicit RMSNorm: invariant within tolerance"}
    return "BUG_ABSENT", details | {"observed": "identity host output did not drift beyond the threshold"}


def parity_decision(err: float, finite: bool, tol: float, negatives: dict) -> tuple[str, dict]:
    """Verdict of the parity lane. negatives: name -> distance that must exceed tol (else the check is blind)."""
    details = {"rel_fro": err, "tolerance": tol, "negative_controls": negatives,
               "uses_identity_norm": False, "explicit_pre_norm": True}
    failures = []
    if not finite:
        failures.append("host output not finite")
    elif err > tol:
        failures.append(f"host output differs from the author block fed RMSNorm(x): rel_fro {err:.3g} > {tol:.3g}")
    blind = sorted(n for n, d in negatives.items() if not d > tol)
    if blind:
        failures.append(f"negative control(s) {', '.join(blind)} within tolerance: the check cannot discriminate")
    if failures:
        return "CONTRACT_BROKEN", details | {"failures": failures}
    return "CONTRACT_HELD", details


# --------------------------------------------------------------------------- host (ours) and the real block


def host_classes(torch):
    nn = torch.nn

    class Fp32RMSNorm(nn.RMSNorm):
        """torch.nn.RMSNorm with fp32 weight, computed in fp32, cast back (how Megatron's norms compute)."""

        def forward(self, hidden):
            return super().forward(hidden.float()).to(hidden.dtype)

    class MixerHost(nn.Module):
        """A hybrid-stack layer's mixer path: norm slot -> mixer. The residual add is the caller's."""

        def __init__(self, norm, mixer):
            super().__init__()
            self.norm = norm
            self.mixer = mixer

        @property
        def uses_identity_norm(self) -> bool:
            return isinstance(self.norm, nn.Identity)

        @property
        def explicit_pre_norm(self) -> bool:
            return isinstance(self.norm, nn.RMSNorm)

        def forward(self, hidden):
            return self.mixer(self.norm(hidden))

    return Fp32RMSNorm, MixerHost


def pin_forward_configs(triton, specs: list[str]) -> dict:
    import importlib

    configs = []
    for spec in specs:
        stages, warps = (int(x) for x in spec.split(","))
        configs.append((stages, warps))
    pinned = {}
    for modname, kname in FORWARD_KERNELS:
        kernel = getattr(importlib.import_module(modname), kname)
        if not hasattr(kernel, "configs"):
            raise SystemExit(f"{modname}.{kname} is not an autotuned kernel in this build")
        kernel.configs = [triton.Config({}, num_stages=s, num_warps=w) for s, w in configs]
        pinned[kname] = [{"num_stages": s, "num_warps": w} for s, w in configs]
    return pinned


def reference_rmsnorm(torch, x, weight, eps, dtype):
    """RMSNorm by hand in ``dtype`` (float64 for the reference), rounded once to x's dtype."""
    xd = x.to(dtype)
    w = weight.to(dtype) if weight is not None else 1.0
    return (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w).to(x.dtype)


def out_stats(torch, out) -> dict:
    o = out.float()
    finite = torch.isfinite(o)
    of = o[finite]
    return {"rms": of.pow(2).mean().sqrt().item() if of.numel() else math.nan,
            "absmax": of.abs().max().item() if of.numel() else math.nan,
            "mean": of.mean().item() if of.numel() else math.nan,
            "finite": bool(finite.all()), "finite_fraction": finite.float().mean().item()}


def build_block(torch, a, device):
    from mamba_ssm.modules.mamba3 import Mamba3

    torch.manual_seed(a.seed)
    chunk = a.chunk or (16 if a.mimo else 64)
    mixer = Mamba3(d_model=a.d_model, d_state=a.d_state, headdim=a.headdim, is_mimo=a.mimo, chunk_size=chunk,
                   layer_idx=0, device=device, dtype=torch.bfloat16)
    mixer.requires_grad_(False)  # forward only: the kernels then skip the backward bookkeeping
    mixer.eval()
    dtypes = {n: str(p.dtype).replace("torch.", "") for n, p in mixer.named_parameters()}
    figure("block", {"class": f"{type(mixer).__module__}.{type(mixer).__qualname__}", "is_mimo": mixer.is_mimo,
                     "d_model": a.d_model, "d_state": a.d_state, "headdim": a.headdim, "nheads": mixer.nheads,
                     "chunk_size": chunk, "in_proj": type(mixer.in_proj).__name__,
                     "param_dtypes": dtypes}, lane=lane())
    return mixer


def make_hosts(torch, a, mixer, device, weight=None):
    Fp32RMSNorm, MixerHost = host_classes(torch)
    norm = Fp32RMSNorm(a.d_model, eps=a.eps, device=device, dtype=torch.float32)
    if weight is not None:
        with torch.no_grad():
            norm.weight.copy_(weight)
    hosts = {"identity": MixerHost(torch.nn.Identity(), mixer), "rmsnorm": MixerHost(norm, mixer)}
    for name, h in hosts.items():
        figure("host", name, uses_identity_norm=h.uses_identity_norm, explicit_pre_norm=h.explicit_pre_norm,
               norm=type(h.norm).__name__, eps=a.eps if h.explicit_pre_norm else None)
    return hosts


def base_input(torch, a, device, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(a.batch, a.seqlen, a.d_model, generator=g).to(torch.bfloat16).to(device)


def rerounded(torch, x, seed):
    """x with every element moved by up to one bf16 unit roundoff and rounded again."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    delta = (torch.rand(x.shape, generator=g) * 2 - 1).mul_(BF16_FLOOR).to(x.device)
    return (x.float() * (1 + delta)).to(x.dtype)


# --------------------------------------------------------------------------- lanes


def check_drift(torch, a, mixer, device) -> None:
    hosts = make_hosts(torch, a, mixer, device)
    x0 = base_input(torch, a, device, a.seed)
    scales = sorted(set(a.scales) | {1.0})
    outs = {name: {} for name in hosts}
    stats = {name: {} for name in hosts}
    for s in scales:
        xs = (x0.float() * s).to(torch.bfloat16)
        for name, host in hosts.items():
            out = host(xs)
            outs[name][s] = out
            stats[name][s] = out_stats(torch, out)
            figure("output_stats", stats[name][s], host=name, scale=s, input_rms=xs.float().pow(2).mean().sqrt().item())
    pn = hosts["rmsnorm"]
    again = pn(x0)
    control_run = rel_fro(again, outs["rmsnorm"][1.0])
    control_round = rel_fro(pn(rerounded(torch, x0, a.seed + 1)), outs["rmsnorm"][1.0])
    tol = tolerance(max(control_run, control_round))
    figure("control", max(control_run, control_round), run_to_run=control_run, reround_one_bf16_unit=control_round,
           tolerance=tol, k_noise=K_NOISE)
    dist_pn = {}
    for s in scales:
        dist_pn[s] = rel_fro(outs["rmsnorm"][s], outs["rmsnorm"][1.0])
        figure("prenorm_distance_to_s1", dist_pn[s], scale=s, max_abs=max_abs(outs["rmsnorm"][s], outs["rmsnorm"][1.0]),
               tolerance=tol, ok=dist_pn[s] <= tol)
    rms_id = {s: stats["identity"][s]["rms"] for s in scales}
    if all(math.isfinite(rms_id[s]) and rms_id[s] > 0 for s in (min(scales), max(scales))):
        figure("identity_rms_exponent", math.log(rms_id[max(scales)] / rms_id[min(scales)])
               / math.log(max(scales) / min(scales)), note="d log(output rms) / d log(s) between the extreme scales")
    sentinel, details = drift_decision(rms_id, {s: stats["rmsnorm"][s]["rms"] for s in scales}, dist_pn, tol,
                                       {s: stats["identity"][s]["finite"] for s in scales}, a.drift_floor)
    figure("drift_threshold", details["threshold"], prenorm_rms_spread=details["prenorm_rms_spread"])
    verdict(sentinel, **details)


def check_parity(torch, a, mixer, device) -> None:
    g = torch.Generator(device="cpu").manual_seed(a.seed + 7)
    weight = (1 + 0.1 * torch.randn(a.d_model, generator=g)).to(device)
    hosts = make_hosts(torch, a, mixer, device, weight=weight)
    token_scale = 10 ** (torch.rand(a.batch, a.seqlen, 1, generator=g) * 3 - 1)  # 0.1 .. 100 per token
    x = (base_input(torch, a, device, a.seed).float() * token_scale.to(device)).to(torch.bfloat16)
    figure("input", {"token_rms_min": x.float().pow(2).mean(-1).sqrt().min().item(),
                     "token_rms_max": x.float().pow(2).mean(-1).sqrt().max().item(), "shape": list(x.shape)})

    xn_ref = reference_rmsnorm(torch, x, weight, a.eps, torch.float64)
    xn_f32 = reference_rmsnorm(torch, x, weight, a.eps, torch.float32)
    xn_host = hosts["rmsnorm"].norm(x)
    figure("normalized_input_vs_reference", rel_fro(xn_host, xn_ref), max_abs=max_abs(xn_host, xn_ref),
           mismatched_elements=int((xn_host != xn_ref).sum()), elements=xn_ref.numel())

    out_ref = mixer(xn_ref)
    out_ref2 = mixer(xn_ref)
    out_f32 = mixer(xn_f32)
    control_run, control_f32 = rel_fro(out_ref2, out_ref), rel_fro(out_f32, out_ref)
    tol = tolerance(max(control_run, control_f32))
    figure("control", max(control_run, control_f32), run_to_run=control_run, float32_reference=control_f32,
           tolerance=tol, k_noise=K_NOISE)

    out_host = hosts["rmsnorm"](x)
    finite = bool(torch.isfinite(out_host).all())
    err = rel_fro(out_host, out_ref)
    figure("prenorm_host_vs_author_block_on_rmsnorm_x", err, max_abs=max_abs(out_host, out_ref), tolerance=tol,
           finite=finite, bitwise_equal=bool(torch.equal(out_host, out_ref)), ok=finite and err <= tol)

    negatives = {"identity_host": rel_fro(hosts["identity"](x), out_ref),
                 "rmsnorm_without_weight": rel_fro(mixer(reference_rmsnorm(torch, x, None, a.eps, torch.float64)),
                                                   out_ref)}
    for name, d in negatives.items():
        figure("negative_control", d, case=name, tolerance=tol, must_exceed_tolerance=True, ok=d > tol)
    sentinel, details = parity_decision(err, finite, tol, negatives)
    verdict(sentinel, **details)


def main(argv=None) -> None:
    a = parse_args(argv)
    start(a, "mamba-ssm", "mamba_ssm")
    torch = require_cuda("needs a CUDA GPU: the real Mamba3 forward runs Triton (SISO) / TileLang (MIMO) kernels; "
             "a stand-in mixer would not be evidence about the author block")
    device = "cuda"
    if not a.mimo and not a.autotune:
        import triton

        figure("pinned_autotune_configs", pin_forward_configs(triton, a.configs))
    mixer = build_block(torch, a, device)
    figure("problem", {"batch": a.batch, "seqlen": a.seqlen, "eps": a.eps, "scales": a.scales, "check": a.check},
           lane=lane())
    with torch.no_grad():
        if a.check == "drift":
            check_drift(torch, a, mixer, device)
        else:
            check_parity(torch, a, mixer, device)


if __name__ == "__main__":
    main()
