"""OLMo-2: RMSNorm over the full q and k projections (QK-norm) before RoPE.

The attention interface receives post-norm, post-RoPE q/k, so every q/k intervention acts after
the norm, as it must. Each sublayer's output is normed before the residual add
(post_attention_layernorm, post_feedforward_layernorm): attn_out / mlp_out are those norms' outputs.
"""

from interp.models.adapters.base import Adapter


class Olmo2Adapter(Adapter):
    model_types = ("olmo2",)
    family = "olmo2"
    attn_out_norm_attr = "post_attention_layernorm"
    mlp_out_norm_attr = "post_feedforward_layernorm"

    @classmethod
    def tiny_config(cls, gqa=False):
        import transformers as tf

        return tf.Olmo2Config(**cls.tiny_common(gqa))

    def qk_norm(self):
        return True
