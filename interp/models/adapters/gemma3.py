"""Gemma-3 (text): local sliding-window layers and global full-attention layers, each type with its own
RoPE frequencies (Gemma-3-270M: window 512 at theta 1e4, every 6th layer global at theta 1e6); RMSNorm
on q and k (QK-norm); query_pre_attn_scalar for the attention scale; a scaled token embedding
(sqrt(d_model), inside the embedding module); a norm on each sublayer's output before the residual add,
so attn_out / mlp_out are those norms' outputs.

The attention interface receives each layer's post-norm, post-RoPE q/k and its own `sliding_window`,
so interventions and attention rows act per layer as the model computes it.
"""

from interp.errors import UnsupportedModelError
from interp.models.spec import RopeSpec
from interp.models.adapters.base import KNOWN_ROPE_TYPES
from interp.models.adapters.gemma2 import Gemma2Adapter


class Gemma3Adapter(Gemma2Adapter):
    """Gemma-2's layout (sublayer output norms, query_pre_attn_scalar, optional softcap) plus QK-norm and a RoPE per
    layer type."""

    model_types = ("gemma3_text",)
    family = "gemma3"
    config_keys = Gemma2Adapter.config_keys | {"_sliding_window_pattern", "use_bidirectional_attention"}

    @classmethod
    def tiny_config(cls, gqa=False):  # the 270M's layout: sliding layers at theta 1e4, a global layer at 1e6; GQA = MQA
        import transformers as tf

        return tf.Gemma3TextConfig(**{**cls.tiny_common(gqa), "num_key_value_heads": 1 if gqa else 4}, head_dim=16,
                                   query_pre_attn_scalar=16, sliding_window=6,
                                   layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                                    "full_attention": {"rope_type": "default", "rope_theta": 1e6}})

    @classmethod
    def check_config(cls, config):
        super().check_config(config)  # the allow-list, layer types, query_pre_attn_scalar
        types = getattr(config, "layer_types", None) or ()
        if getattr(config, "use_bidirectional_attention", False):
            raise UnsupportedModelError("gemma3_text: use_bidirectional_attention=True (an encoder variant) is not "
                                        "supported; load the causal decoder")
        rp = getattr(config, "rope_parameters", None) or {}
        for t in set(types):
            rope_type = (rp.get(t) or {}).get("rope_type", "default")
            if rope_type not in KNOWN_ROPE_TYPES:
                raise UnsupportedModelError(f"gemma3_text: rope_parameters[{t!r}].rope_type={rope_type!r} is not "
                                            f"supported; supported: {', '.join(KNOWN_ROPE_TYPES)}")

    def qk_norm(self):
        return True

    def layer_ropes(self) -> dict[str, RopeSpec]:
        rotary = getattr(self.body(), self.rotary_attr)
        rp = self.config.rope_parameters
        return {t: self._rope_spec(getattr(rotary, f"{t}_inv_freq"), rp[t], getattr(rotary, f"{t}_attention_scaling"))
                for t in sorted(set(self.config.layer_types))}

    def rope(self):
        return self.layer_ropes()[self.config.layer_types[0]]
