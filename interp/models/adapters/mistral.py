"""Mistral: Llama geometry with GQA and an optional sliding window on every layer."""

from interp.models.adapters.base import Adapter


class MistralAdapter(Adapter):
    model_types = ("mistral",)
    family = "mistral"

    @classmethod
    def tiny_config(cls, gqa=False):
        import transformers as tf

        return tf.MistralConfig(**cls.tiny_common(gqa), sliding_window=8)

    def sliding(self):
        window = getattr(self.config, "sliding_window", None)
        if window is None:
            return None, ()
        return int(window), tuple(range(self.config.num_hidden_layers))
