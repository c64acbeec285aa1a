"""Qwen3 (dense): Qwen2's layout without q/k/v biases, plus an RMSNorm on each head's query and key (over
head_dim) before RoPE, and head_dim set apart from hidden_size / heads (128 in every released size).

The attention interface receives the post-norm, post-RoPE q/k, so every q/k intervention and attention row
acts on what the model attends with. Optional sliding-window layers (use_sliding_window, max_window_layers)
arrive as config.layer_types.
"""

from interp.models.adapters.base import Adapter


class Qwen3Adapter(Adapter):
    model_types = ("qwen3",)
    family = "qwen3"
    config_keys = frozenset({"use_sliding_window", "max_window_layers"})  # they only set layer_types

    def qk_norm(self):
        return True

    @classmethod
    def tiny_config(cls, gqa=False):
        import transformers as tf

        return tf.Qwen3Config(**cls.tiny_common(gqa), head_dim=16,
                              rope_parameters={"rope_type": "default", "rope_theta": 1e6})
