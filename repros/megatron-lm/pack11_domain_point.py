"""Pack 11's domain, one point: which model configuration builds and uses the fused output layer.

Run by repros/kit/_domain.py (a ``domain = true`` lane) once per point of ``[packs.11.domain]``:

    python repros/megatron-lm/pack11_domain_point.py \\
        --point '{"loss_fusion": true, "fusion_impl": "linear", "dtype": "bfloat16"}'

The model is the reproducer's tiny HybridModel of megatron's local modules (pattern ``--``: two MLP layers, CPU,
TP = 1; repros/megatron-lm/pack11_hybrid_linear_ce_output_layer.py), built with ``cross_entropy_loss_fusion`` and
``cross_entropy_fusion_impl`` from the point, in float32 or bfloat16 (bf16 inside megatron's Float16Module).
Pack 10's dispatcher sees a simulated compute capability 9.0 device, so the fused loss takes 10's fallback as on
an H100. One forward with labels and a backward; the calls to ``linear_cross_entropy`` and
``compute_language_model_loss`` say which loss path ran.

* The fused path ran (``linear_cross_entropy`` once, ``compute_language_model_loss`` never): the loss, the
  masked per-token loss and every gradient are compared with the same model built with the option off (same
  weights); each may sit ``K_NOISE`` times the plain path's own error against float64 at the output boundary
  (the reproducer's control) -> **matched**, else **mismatch**.
* Any other path (logits and ``compute_language_model_loss``, or a loss that raises, as the unchanged model does
  with the linear option): **declined**; ``detail`` names the output layer's class and the path.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from _numerics import K_NOISE, rel_fro, tolerance
from pack11_hybrid_linear_ce_output_layer import (
    SEED,
    SHAPES,
    batch,
    boundary_reference,
    core,
    hybrid_spec,
    init_single_process,
    run_loss,
    short,
    simulated_gpu,
)

PATTERN = "--"


def emit(**result) -> None:
    print("DOMAIN_POINT " + json.dumps(result, sort_keys=True, default=str), flush=True)


def build(torch, dtype, fusion: bool, impl: str, shape: dict):
    from megatron.core.models.hybrid.hybrid_model import HybridModel
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.module import Float16Module

    cfg = TransformerConfig(
        num_layers=len(PATTERN), hidden_size=shape["hidden"], num_attention_heads=shape["heads"],
        hidden_dropout=0.0, attention_dropout=0.0, params_dtype=dtype, bf16=dtype == torch.bfloat16,
        use_cpu_initialization=True, cross_entropy_loss_fusion=fusion, cross_entropy_fusion_impl=impl,
        mamba_num_groups=1, use_mamba_mem_eff_path=False)
    torch.manual_seed(SEED)
    model = HybridModel(config=cfg, hybrid_stack_spec=hybrid_spec(PATTERN), vocab_size=shape["vocab"],
                        max_sequence_length=shape["seqlen"], hybrid_layer_pattern=PATTERN,
                        position_embedding_type="none")
    return Float16Module(cfg, model) if cfg.bf16 else model


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--point", required=True)
    p.add_argument("--expect", choices=["admit", "decline"])
    point = json.loads(p.parse_args().point)
    fusion, impl = bool(point["loss_fusion"]), str(point["fusion_impl"])
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    dtype = getattr(torch, point["dtype"])
    shape = SHAPES["cpu"]
    init_single_process(torch, dist, "cpu")
    from megatron.core.fusions import fused_linear_cross_entropy as mod_flce
    from megatron.core.transformer import linear_cross_entropy as mod_lce

    warnings.simplefilter("ignore")
    with simulated_gpu(torch, (9, 0), True):
        try:
            mod_flce._get_platform()
        except ValueError as exc:  # the unchanged dispatcher (without pack 10) refuses 9.0
            platform = f"raises ValueError: {exc}"
        else:
            platform = "decided"
    model = build(torch, dtype, fusion, impl, shape)
    layer = type(core(model).output_layer).__name__
    ids, pos, labels = batch(torch, shape, "cpu")
    calls = {"linear_cross_entropy": 0, "compute_language_model_loss": 0}
    original, plain_fn = mod_lce.linear_cross_entropy, core(model).compute_language_model_loss

    def counting(*args, **kwargs):
        calls["linear_cross_entropy"] += 1
        return original(*args, **kwargs)

    def counting_plain(*args, **kwargs):
        calls["compute_language_model_loss"] += 1
        return plain_fn(*args, **kwargs)

    mod_lce.linear_cross_entropy, core(model).compute_language_model_loss = counting, counting_plain
    raised = None
    try:
        got_masked, got_loss, got_grads = run_loss(torch, model, ids, pos, labels)
    except Exception as exc:  # the path this configuration takes, on record
        raised = short(exc)
    finally:
        mod_lce.linear_cross_entropy = original
        del core(model).compute_language_model_loss
    detail = {"output_layer": layer, "calls": calls, "flce_platform": platform}
    if raised is not None or calls != {"linear_cross_entropy": 1, "compute_language_model_loss": 0}:
        path = ("logits and compute_language_model_loss" if calls["compute_language_model_loss"]
                else "no loss path")
        detail["path"] = path + (f", which raised {raised}" if raised else "")
        emit(outcome="declined", detail=detail)
        return 0
    detail["path"] = "fused linear cross-entropy (LinearCrossEntropyModule)"
    plain = build(torch, dtype, False, impl, shape)
    core(plain).load_state_dict(core(model).state_dict(), strict=True)
    capture: dict = {}
    ref_masked, ref_loss, ref_grads = run_loss(torch, plain, ids, pos, labels, capture)
    b_loss, b_dhidden, b_dweight = boundary_reference(torch, F, capture, core(plain).output_layer.weight, labels)
    eps = torch.finfo(dtype).eps
    control = {"loss": rel_fro(ref_loss, b_loss), "grad_hidden": rel_fro(capture["grad_hidden"], b_dhidden),
               "grad_output_weight": rel_fro(ref_grads["output_layer.weight"], b_dweight)}
    tol = {k: tolerance(v, K_NOISE * eps) for k, v in control.items()}
    errors = {"loss": rel_fro(got_loss, ref_loss), "masked_per_token_loss": rel_fro(got_masked, ref_masked)}
    limits = {"loss": tol["loss"], "masked_per_token_loss": tol["loss"]}
    for name, ref in ref_grads.items():
        errors[name] = rel_fro(got_grads[name], ref) if name in got_grads else float("inf")
        limits[name] = tol["grad_output_weight"] if name == "output_layer.weight" else tol["grad_hidden"]
    ok = set(got_grads) == set(ref_grads) and all(errors[k] <= limits[k] for k in errors)
    detail["tolerances"] = limits
    emit(outcome="matched" if ok else "mismatch", errors=errors, tol=max(limits.values()), detail=detail)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
