"""Qwen2 / Qwen2.5: rotate_half RoPE (theta 1e6), GQA, q/k/v biases, optional sliding window layers."""

from interp.models.adapters.base import Adapter


class Qwen2Adapter(Adapter):
    model_types = ("qwen2",)
    family = "qwen2"
