"""Llama family (Llama-2, Llama-3.x): rotate_half RoPE, GQA, llama3 frequency scaling."""

from interp.models.adapters.base import Adapter


class LlamaAdapter(Adapter):
    model_types = ("llama",)
    family = "llama"

    @classmethod
    def tiny_config(cls, gqa=False):
        import transformers as tf

        return tf.LlamaConfig(**cls.tiny_common(gqa), rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
