"""HybridModel ignores cross_entropy_fusion_impl="linear" (GPTModel builds a LinearCrossEntropyModule
and takes the loss from it; HybridModel keeps a ColumnParallelLinear). Exits 1 while a forward with
labels fails."""
import os
import sys

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_submodules
from megatron.core.models.hybrid.hybrid_block import HybridStack, HybridStackSubmodules
from megatron.core.models.hybrid.hybrid_model import HybridModel
from megatron.core.ssm.mlp_layer import MLPLayer
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_layer import TransformerLayerSubmodules

os.environ.setdefault("MASTER_ADDR", "localhost")
os.environ.setdefault("MASTER_PORT", "29511")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
parallel_state.initialize_model_parallel()
model_parallel_cuda_manual_seed(0)
local = get_gpt_layer_local_submodules()
mlp = ModuleSpec(module=MLPLayer, submodules=TransformerLayerSubmodules(
    pre_mlp_layernorm=local.pre_mlp_layernorm, mlp=local.mlp, mlp_bda=local.mlp_bda))
stack = ModuleSpec(module=HybridStack, params={"post_layer_norm": False},
                   submodules=HybridStackSubmodules(mlp_layer=mlp))
config = TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=4,
                           cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="linear")
model = HybridModel(config=config, hybrid_stack_spec=stack, vocab_size=256, max_sequence_length=16,
                    hybrid_layer_pattern="-").cuda()
ids = torch.randint(0, 256, (2, 16), device="cuda")
print("expected: a per-token loss of shape (2, 16) from the output layer's fused linear cross entropy")
try:
    loss = model(ids, torch.arange(16, device="cuda").expand(2, 16), None, labels=ids)
except Exception as exc:  # the failure is what this script reports
    print(f"got: {type(exc).__name__}: {exc} (output layer: {type(model.output_layer).__name__})")
    sys.exit(1)
print(f"got: a loss of shape {tuple(loss.shape)} (output layer: {type(model.output_layer).__name__})")
