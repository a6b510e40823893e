"""Float16Module casts a parameter to bf16 that its module needs in fp32.

mark_keep_in_fp32 tags a tensor; a module that re-creates the parameter (as init and reset
routines do) loses the tag, and a module cannot name the parameters it keeps in fp32. Exits 1
while the parameter comes out bf16.
"""
import sys

import torch
from megatron.core.transformer.module import Float16Module, mark_keep_in_fp32
from megatron.core.transformer.transformer_config import TransformerConfig


class Mixer(torch.nn.Module):
    keep_in_fp32_params = ("dt_bias",)  # names the parameters this module needs in fp32

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)
        self.dt_bias = mark_keep_in_fp32(torch.nn.Parameter(torch.zeros(32)))
        self.reset_parameters()

    def reset_parameters(self):
        self.dt_bias = torch.nn.Parameter(torch.rand(32))  # a new tensor: the tag is gone


config = TransformerConfig(num_layers=1, hidden_size=32, num_attention_heads=1, bf16=True)
wrapped = Float16Module(config, Mixer().to("cuda" if torch.cuda.is_available() else "cpu"))
got = wrapped.module.dt_bias.dtype
print(f"expected: dt_bias stays torch.float32 (proj becomes {wrapped.module.proj.weight.dtype})")
print(f"got: dt_bias is {got}")
sys.exit(0 if got == torch.float32 else 1)
