"""Make transformers' float64 runs float64 throughout.

transformers computes RMSNorm and the eager-attention softmax in float32 even when the model is
float64 (and RoPE cos/sin: see tiny_models.fp64_rotary), which puts ~1e-7 relative float32
rounding into a "float64" reference.  These patches only change what happens for float64 inputs;
float32 runs keep transformers' own code.
"""
import importlib

import torch
from torch import nn

_PATCHED = False


def patch():
    global _PATCHED
    if _PATCHED:
        return
    for arch, norm in (("llama", "LlamaRMSNorm"), ("qwen2", "Qwen2RMSNorm"), ("qwen3", "Qwen3RMSNorm")):
        mod = importlib.import_module(f"transformers.models.{arch}.modeling_{arch}")
        cls = getattr(mod, norm)
        orig_norm = cls.forward

        def norm_forward(self, hidden_states, _orig=orig_norm):
            if hidden_states.dtype != torch.float64:
                return _orig(self, hidden_states)
            var = hidden_states.pow(2).mean(-1, keepdim=True)
            return self.weight * (hidden_states * torch.rsqrt(var + self.variance_epsilon))

        cls.forward = norm_forward
        orig_eager = mod.eager_attention_forward

        def eager(module, query, key, value, attention_mask, scaling, dropout=0.0, _orig=orig_eager, _mod=mod,
                  **kwargs):
            if query.dtype != torch.float64:
                return _orig(module, query, key, value, attention_mask, scaling, dropout, **kwargs)
            k = _mod.repeat_kv(key, module.num_key_value_groups)
            v = _mod.repeat_kv(value, module.num_key_value_groups)
            w = torch.matmul(query, k.transpose(2, 3)) * scaling
            if attention_mask is not None:
                w = w + attention_mask
            w = nn.functional.softmax(w, dim=-1, dtype=torch.float64)
            return torch.matmul(w, v).transpose(1, 2).contiguous(), w

        mod.eager_attention_forward = eager
    _PATCHED = True
