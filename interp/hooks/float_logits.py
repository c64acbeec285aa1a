"""Float32 logits from a bfloat16 / float16 model: the unembedding (the output head's matmul) recomputed in float32
from the final hidden state, so every metric read off the logits (logit difference, log-prob, loss, the greedy
token) is free of the 8-bit-mantissa rounding of the logits themselves (a logit of 20 is a multiple of 0.125 in
bfloat16). The rest of the forward pass keeps the model's dtype. The head's weight is upcast once and kept beside
the module (refreshed when the weight changes), and the head's forward is replaced, not followed: each call costs
one float32 matmul over the positions asked for (`logits_to_keep` / `last_only` make that the last position only)
and no low-precision one beside it. Products of two bfloat16 numbers are exact in float32, so these logits are the
float32 matmul of the bf16 hidden state and the bf16 weight."""

from __future__ import annotations

from contextlib import contextmanager

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


def output_head(hf) -> torch.nn.Linear | None:
    """The output head (unembedding) of a transformers model when it is a linear layer, else None."""
    get = getattr(hf, "get_output_embeddings", None)
    head = get() if callable(get) else None
    return head if isinstance(head, torch.nn.Linear) else None


def _logit_weights(module: torch.nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The (weight, bias) the logits are computed with: float32 copies for a low-precision head with float32 logits
    on, else the head's own."""
    w, b = module.weight, module.bias
    if w.dtype in LOW_PRECISION and getattr(module, "_interp_float32_logits", True):
        return _float32_weight(module), None if b is None else b.float()
    return w, b


class Float32Head:
    """The output head's forward, replaced on the instance: a float32 matmul of the final hidden state with the
    float32 copy of a low-precision weight (the model's own low-precision head matmul is not run as well), else
    the forward it replaced (float32 weights, an offloaded head on the meta device, or float32 logits turned off).
    `remove()` puts the replaced forward back."""

    def __init__(self, module: torch.nn.Linear):
        self.module = module
        self.inner = module.forward  # bound: the class's forward, or a wrapper installed before (accelerate)
        self.wrapped = "forward" in module.__dict__

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.module.weight.device.type == "meta":  # an offloaded head (accelerate): its own forward
            return self.inner(x)
        w, bias = _logit_weights(self.module)
        if w is self.module.weight:  # a float32 head, or float32 logits turned off
            return self.inner(x)
        return F.linear(x.float(), w, bias)

    def remove(self) -> None:
        if self.module.__dict__.get("forward") is self:
            del self.module.__dict__["forward"]
            if self.wrapped:  # a wrapper that was on the instance
                self.module.__dict__["forward"] = self.inner


def install_float32_logits(hf) -> Float32Head | None:
    """Make the output head of `hf` (a transformers model) return float32 logits when its weights are bfloat16 or
    float16 (a no-op for float32 models). Returns the installed head forward (`.remove()` undoes it), None when
    the model has no output head."""
    head = output_head(hf)
    if head is None:
        return None
    if isinstance(head.__dict__.get("forward"), Float32Head):
        return head.__dict__["forward"]
    fwd = Float32Head(head)
    head.__dict__["forward"] = fwd  # nn.Module.__call__ runs self.forward: forward hooks still fire around it
    return fwd


def set_float32_logits(hf, enabled: bool) -> None:
    """Turn the float32 unembedding of `hf` on or off (on by default; off gives the model's own logits)."""
    head = output_head(hf)
    if head is not None:
        object.__setattr__(head, "_interp_float32_logits", bool(enabled))
        if not enabled and hasattr(head, _CACHE):
            object.__delattr__(head, _CACHE)


@contextmanager
def head_columns(hf, columns: torch.Tensor):
    """Within the block the output head of `hf` computes only `columns` ([batch, k] vocabulary ids, one list per
    row) of each row's logits: [batch, positions, k] instead of [batch, positions, vocab], in float32 for a
    low-precision model (as the float32 head) and in the model's dtype otherwise. transformers applies its final
    softcap after the head, so capped models stay right. For metrics that read a few logits of each row (the
    logit difference of exact patching): the head's weight is read for k rows instead of the vocabulary, which on
    a 49K-word vocabulary is most of a short pass's fixed cost. An offloaded head (meta weights) runs whole and
    its columns are gathered."""
    head = output_head(hf)
    missing = object()
    prev = head.__dict__.get("forward", missing)
    inner = head.forward

    def forward(x: torch.Tensor) -> torch.Tensor:
        idx = columns.to(x.device)
        if head.weight.device.type == "meta":
            full = inner(x)
            return full.gather(-1, idx[:, None, :].expand(-1, full.shape[1], -1))
        w, bias = _logit_weights(head)
        out = torch.einsum("bsd,bkd->bsk", x.to(w.dtype), w[idx])
        return out if bias is None else out + bias[idx][:, None, :]

    head.__dict__["forward"] = forward
    try:
        yield
    finally:
        if prev is missing:
            head.__dict__.pop("forward", None)
        else:
            head.__dict__["forward"] = prev
