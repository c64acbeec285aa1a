"""Qwen2 / Qwen2.5: rotate_half RoPE (theta 1e6), GQA, q/k/v biases, optional sliding window layers."""

from interp.models.adapters.base import Adapter


class Qwen2Adapter(Adapter):
    model_types = ("qwen2",)
    family = "qwen2"
    config_keys = frozenset({"use_sliding_window", "max_window_layers"})  # they only set layer_types

    @classmethod
    def tiny_config(cls, gqa=False):
        import transformers as tf

        return tf.Qwen2Config(**cls.tiny_common(gqa), rope_parameters={"rope_type": "default", "rope_theta": 1e6})
