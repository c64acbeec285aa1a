"""Gemma-2: attention-logit softcapping, alternating sliding-window layers, query_pre_attn_scalar.

sdpa cannot apply the softcap, so the default implementation is eager (CUDA users may pass
attn_implementation="flex_attention" or a flash kernel that supports softcapping). Each sublayer's
output is normed before the residual add: attn_out / mlp_out are those norms' outputs.
"""

from interp.errors import UnsupportedModelError
from interp.models.adapters.base import Adapter


class Gemma2Adapter(Adapter):
    model_types = ("gemma2",)
    family = "gemma2"
    attn_out_norm_attr = "post_attention_layernorm"
    mlp_out_norm_attr = "post_feedforward_layernorm"
    config_keys = frozenset({"query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                             "hidden_activation", "cache_implementation"})

    @classmethod
    def tiny_config(cls, gqa=False):
        import transformers as tf

        return tf.Gemma2Config(**cls.tiny_common(gqa), head_dim=16, query_pre_attn_scalar=24, attn_logit_softcapping=5.0,
                               final_logit_softcapping=30.0, sliding_window=6,
                               layer_types=["sliding_attention", "full_attention", "sliding_attention"])

    @classmethod
    def check_config(cls, config):
        super().check_config(config)
        if getattr(config, "query_pre_attn_scalar", None) is None:
            raise UnsupportedModelError(f"{config.model_type}: config.query_pre_attn_scalar is missing; cannot derive "
                                        "the attention scale")

    def softcap(self):
        cap = getattr(self.config, "attn_logit_softcapping", None)
        return float(cap) if cap is not None else None

    @classmethod
    def default_attn_implementation_for(cls, config):
        return "eager" if getattr(config, "attn_logit_softcapping", None) is not None else "sdpa"
