"""The one interception point for attention.

`install(hf, adapter)` registers, for the model's own attention implementation BASE (sdpa, eager,
flash_attention_2, flex_attention, ...), a wrapper named ``interp|BASE`` in transformers'
`AttentionInterface` (and BASE's mask builder under the same name in `AttentionMaskInterface`),
then switches the model to it. With no intervention active the wrapper calls BASE unchanged,
so sdpa/flash stay in use and logits are bit-identical to plain transformers.

When interventions are active, the wrapper hands them, per layer and per call:
  q [batch, n_heads, q_len, head_dim]   (post-RoPE, post-QK-norm)
  k, v [batch, n_kv_heads, k_len, head_dim]  (after the KV-cache update: every cached key)
  out [batch, q_len, n_heads, head_dim]  (per-head output, i.e. the o_proj input)
Edits are out of place, so cached keys/values are never modified.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

PREFIX = "interp|"


@dataclass
class AttnCall:
    """What an intervention sees of one attention call."""

    layer: int
    module: Any
    mask: torch.Tensor | None
    scaling: float
    softcap: float | None
    sliding_window: int | None
    batch_start: int  # index of this call's first row in the full batch (chunked forwards)
    q_len: int
    k_len: int

    def local_rows(self, rows: tuple[int, ...] | None, batch_size: int) -> torch.Tensor | None:
        """Map global batch rows to indices in this call's batch; None means every row."""
        if rows is None:
            return None
        local = [r - self.batch_start for r in rows if 0 <= r - self.batch_start < batch_size]
        return torch.tensor(local, dtype=torch.long)


@dataclass
class InterceptState:
    """Per-model state read by the wrapper. `active` is the ordered list of live interventions."""

    spec: Any
    active: list = field(default_factory=list)
    batch_start: int = 0


def _base_function(module: Any, base: str) -> Callable:
    """The function BASE names; for eager, the model file's own eager_attention_forward."""
    if base == "eager":
        return sys.modules[type(module).__module__].eager_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS[base]


def _make_wrapper(base: str) -> Callable:
    def interp_attention(module, query, key, value, attention_mask, **kwargs):
        fn = _base_function(module, base)
        state: InterceptState | None = getattr(module, "_interp_state", None)
        if state is None or not state.active:
            return fn(module, query, key, value, attention_mask, **kwargs)
        call = AttnCall(
            layer=module._interp_layer,
            module=module,
            mask=attention_mask,
            scaling=kwargs.get("scaling") if kwargs.get("scaling") is not None else query.shape[-1] ** -0.5,
            softcap=kwargs.get("softcap"),
            sliding_window=kwargs.get("sliding_window"),
            batch_start=state.batch_start,
            q_len=query.shape[2],
            k_len=key.shape[2],
        )
        for iv in state.active:
            if iv.edits_qkv:
                query, key, value = iv.edit_qkv(call, query, key, value)
        for iv in state.active:
            if iv.observes_qk:
                iv.observe_qk(call, query, key, value)
        out, weights = fn(module, query, key, value, attention_mask, **kwargs)
        for iv in state.active:
            if iv.edits_out:
                out = iv.edit_out(call, out)
        return out, weights

    interp_attention.__name__ = f"interp_attention_{base}"
    return interp_attention


def register(base: str) -> str:
    """Register the wrapper for BASE (idempotent) and return its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    name = PREFIX + base
    if name not in AttentionInterface._global_mapping:
        AttentionInterface.register(name, _make_wrapper(base))
    mask_fn = ALL_MASK_ATTENTION_FUNCTIONS._global_mapping.get(base)
    if mask_fn is None and base == "eager":
        mask_fn = ALL_MASK_ATTENTION_FUNCTIONS._global_mapping["eager"]
    if mask_fn is not None and name not in AttentionMaskInterface._global_mapping:
        AttentionMaskInterface.register(name, mask_fn)
    return name


def current_base(hf) -> str:
    impl = hf.config._attn_implementation or "eager"
    return impl[len(PREFIX):] if impl.startswith(PREFIX) else impl


def install(hf, adapter, spec) -> InterceptState:
    """Route `hf`'s attention through the wrapper; tag each attention module with its layer."""
    state = InterceptState(spec=spec)
    name = register(current_base(hf))
    _set_impl(hf, name)
    for i in range(spec.n_layers):
        mod = adapter.attention(i)
        mod._interp_layer = i
        mod._interp_state = state
    return state


def uninstall(hf, adapter, spec) -> None:
    base = current_base(hf)
    _set_impl(hf, base)
    for i in range(spec.n_layers):
        mod = adapter.attention(i)
        for attr in ("_interp_layer", "_interp_state"):
            if hasattr(mod, attr):
                delattr(mod, attr)


def _set_impl(hf, name: str) -> None:
    # set_attn_implementation validates names against its own list in some versions; setting the
    # config field is what every attention module reads at call time.
    for module in hf.modules():
        cfg = getattr(module, "config", None)
        if cfg is not None and hasattr(cfg, "_attn_implementation"):
            cfg._attn_implementation = name
    # a few models cache the name at init
    for module in hf.modules():
        if hasattr(module, "_attn_implementation") and not hasattr(module, "_interp_skip"):
            try:
                module._attn_implementation = name
            except (AttributeError, TypeError):
                pass
