"""Tiny random-weight configs of every supported architecture (MHA and GQA variants).

Used by the parity tests and the `tiny-random-<family>` aliases: the code paths of a 7B
checkpoint, at a size that runs in milliseconds. Weights are random (seeded), so they say nothing
about any mechanism. Each config lives with its adapter (`Adapter.tiny_config`); this module lists them.
"""

from __future__ import annotations

from interp.errors import InvalidInputError
from interp.models.adapters import tiny_families
from interp.models.adapters.base import VOCAB

_FAMILIES = tiny_families()
TINY_FAMILIES = tuple(_FAMILIES)
GQA_FAMILIES = tuple(f for f, a in _FAMILIES.items() if a.tiny_gqa)


def tiny_config(family: str, gqa: bool = False):
    if family not in _FAMILIES:
        raise InvalidInputError(f"no tiny config for {family!r}; families: {', '.join(TINY_FAMILIES)}")
    return _FAMILIES[family].tiny_config(gqa)


def tiny_random_hf(family: str, gqa: bool = False, seed: int = 0, attn_implementation: str | None = None):
    """A seeded random-weight HF model of `family` (float32, eval mode)."""
    import torch
    import transformers as tf

    config = tiny_config(family, gqa)
    cls = _FAMILIES[family]
    impl = attn_implementation or cls.default_attn_implementation_for(config)
    torch.manual_seed(seed)
    auto = tf.AutoModelForCausalLM if cls.causal else tf.AutoModel
    hf = auto.from_config(config, attn_implementation=impl, dtype=torch.float32)
    return hf.eval()


__all__ = ["VOCAB", "TINY_FAMILIES", "GQA_FAMILIES", "tiny_config", "tiny_random_hf"]
