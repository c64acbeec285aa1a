"""Float32 logits from a bfloat16 / float16 model: the unembedding (the output head's matmul) recomputed in float32
from the final hidden state, so every metric read off the logits (logit difference, log-prob, loss, the greedy
token) is free of the 8-bit-mantissa rounding of the logits themselves (a logit of 20 is a multiple of 0.125 in
bfloat16). The rest of the forward pass keeps the model's dtype. The head's weight is upcast once and kept beside
the module (refreshed when the weight changes), so each call costs one float32 matmul over the positions asked for
(`logits_to_keep` / `last_only` make that the last position only)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

LOW_PRECISION = (torch.bfloat16, torch.float16)
_CACHE = "_interp_float32_weight"


def _float32_weight(module: torch.nn.Module) -> torch.Tensor:
    w = module.weight
    key = (w.data_ptr(), w._version, w.device, w.shape)
    cached = getattr(module, _CACHE, None)
    if cached is None or cached[0] != key:
        cached = (key, w.detach().float())
        object.__setattr__(module, _CACHE, cached)  # a plain attribute: not a parameter, buffer or state-dict entry
    return cached[1]


def _hook(module, args, output):
    w = getattr(module, "weight", None)
    if not isinstance(output, torch.Tensor) or w is None or w.dtype not in LOW_PRECISION or w.device.type == "meta":
        return None  # float32 already, or an offloaded head (accelerate): the model's own logits
    if not getattr(module, "_interp_float32_logits", True):
        return None
    bias = getattr(module, "bias", None)
    return F.linear(args[0].float(), _float32_weight(module), None if bias is None else bias.float())


def install_float32_logits(hf) -> torch.utils.hooks.RemovableHandle | None:
    """Make the output head of `hf` (a transformers model) return float32 logits when its weights are bfloat16 or
    float16 (a no-op for float32 models). Returns the hook's handle (None when the model has no output head)."""
    get = getattr(hf, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if not isinstance(head, torch.nn.Linear):
        return None
    return head.register_forward_hook(_hook)


def set_float32_logits(hf, enabled: bool) -> None:
    """Turn the float32 unembedding of `hf` on or off (on by default; off gives the model's own logits)."""
    get = getattr(hf, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if head is not None:
        object.__setattr__(head, "_interp_float32_logits", bool(enabled))
        if not enabled and hasattr(head, _CACHE):
            object.__delattr__(head, _CACHE)
