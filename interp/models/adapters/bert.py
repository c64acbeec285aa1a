"""BERT encoders (e.g. all-MiniLM-L6-v2), for probes: bidirectional, learned absolute positions.

BERT is post-LN: the attention and MLP sublayer outputs are folded into a LayerNorm with the
residual, so `attn_out`/`mlp_out` sites are not defined; use resid_pre/resid_post/head_out.
"""

from interp.errors import UnsupportedModelError
from interp.models.adapters.base import Adapter


class BertAdapter(Adapter):
    model_types = ("bert",)
    family = "bert"
    causal = False
    positional = "learned"
    body_paths = ("bert.encoder", "encoder")
    layers_attr = "layer"
    attn_attr = "attention.self"
    o_proj_attr = "dense"  # unused: the output projection lives in attention.output
    v_proj_attr = "value"
    rotary_attr = None
    unembed_attr = "cls"
    config_keys = frozenset({"type_vocab_size", "position_embedding_type", "is_decoder"})
    tiny_gqa = False

    @classmethod
    def tiny_config(cls, gqa=False):
        import transformers as tf

        return tf.BertConfig(vocab_size=cls.tiny_common(gqa)["vocab_size"], hidden_size=64, intermediate_size=128,
                             num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=256)

    @classmethod
    def check_config(cls, config):
        super().check_config(config)
        pet = getattr(config, "position_embedding_type", "absolute")
        if pet not in (None, "absolute"):
            raise UnsupportedModelError(f"bert: position_embedding_type={pet!r} is not supported; only 'absolute'")
        if getattr(config, "is_decoder", False):
            raise UnsupportedModelError("bert: is_decoder=True is not supported; load the encoder")

    def o_proj(self, layer):
        return self.layers()[layer].attention.output.dense

    def attn_out_module(self, layer):
        raise UnsupportedModelError("bert is post-LN: attn_out is not a residual-stream contribution; use resid_post")

    def mlp_out_module(self, layer):
        raise UnsupportedModelError("bert is post-LN: mlp_out is not a residual-stream contribution; use resid_post")

    def embed(self):
        root = getattr(self.hf, "bert", self.hf)
        return root.embeddings.word_embeddings

    def final_norm(self):
        return None

    def sliding(self):
        return None, ()
