"""GPT-2: fused Conv1D c_attn, learned absolute positions, no RoPE, MHA only."""

import torch

from interp.errors import UnsupportedModelError
from interp.models.adapters.base import Adapter


class GPT2Adapter(Adapter):
    model_types = ("gpt2",)
    family = "gpt2"
    positional = "learned"
    body_paths = ("transformer", "")
    layers_attr = "h"
    attn_attr = "attn"
    o_proj_attr = "c_proj"
    embed_attr = "wte"
    final_norm_attr = "ln_f"
    rotary_attr = None
    config_keys = frozenset({"n_embd", "n_head", "n_inner", "n_layer", "n_positions", "n_ctx", "activation_function",
                             "layer_norm_epsilon", "summary_type", "summary_use_proj", "summary_activation",
                             "summary_proj_to_labels", "summary_first_dropout", "reorder_and_upcast_attn",
                             "add_cross_attention"})  # the last two: refused below with their own reasons
    tiny_gqa = False

    @classmethod
    def tiny_config(cls, gqa=False):
        import transformers as tf

        return tf.GPT2Config(vocab_size=cls.tiny_common(gqa)["vocab_size"], n_embd=64, n_layer=3, n_head=4, n_positions=256)

    @classmethod
    def check_config(cls, config):
        super().check_config(config)
        if getattr(config, "reorder_and_upcast_attn", False):
            raise UnsupportedModelError(
                "gpt2: reorder_and_upcast_attn=True bypasses transformers' attention interface; "
                "load with config override reorder_and_upcast_attn=False"
            )
        if getattr(config, "add_cross_attention", False):
            raise UnsupportedModelError("gpt2: add_cross_attention=True (encoder-decoder GPT-2) is not supported")

    def n_heads(self):
        return int(self.config.n_head)

    def n_kv_heads(self):
        return self.n_heads()

    def head_dim(self):
        return int(self.config.n_embd // self.config.n_head)

    def sliding(self):
        return None, ()

    def max_positions(self):
        return int(self.config.n_positions)

    def o_weight(self, layer: int) -> torch.Tensor:
        # Conv1D stores [in, out]; return nn.Linear's [out, in]
        return self.o_proj(layer).weight.t()

    def v_weight(self, layer: int) -> torch.Tensor:
        # fused Conv1D c_attn [d_model, 3 * d_model] = [q | k | v] along the output axis
        d = int(self.config.n_embd)
        return self.attention(layer).c_attn.weight[:, 2 * d:].t()

    def v_bias(self, layer: int) -> torch.Tensor | None:
        d = int(self.config.n_embd)
        return self.attention(layer).c_attn.bias[2 * d:]
