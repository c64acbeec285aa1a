"""Llama family (Llama-2, Llama-3.x): rotate_half RoPE, GQA, llama3 frequency scaling."""

from interp.models.adapters.base import Adapter


class LlamaAdapter(Adapter):
    model_types = ("llama",)
    family = "llama"
