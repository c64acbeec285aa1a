"""GPT-NeoX / Pythia: partial rotary (rotary_pct of each head, rotate_half within it), MHA."""

import torch

from interp.models.adapters.base import Adapter


class GPTNeoXAdapter(Adapter):
    model_types = ("gpt_neox",)
    family = "gpt_neox"
    body_paths = ("gpt_neox", "")
    attn_attr = "attention"
    o_proj_attr = "dense"
    embed_attr = "embed_in"
    final_norm_attr = "final_layer_norm"
    tiny_gqa = False

    @classmethod
    def tiny_config(cls, gqa=False):
        import transformers as tf

        c = {k: v for k, v in cls.tiny_common(gqa).items() if k != "num_key_value_heads"}
        return tf.GPTNeoXConfig(**c, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                      "partial_rotary_factor": 0.5})

    def sliding(self):
        return None, ()

    # fused query_key_value [3 * d_model, d_model], interleaved per head: [q_h | k_h | v_h] for each head h
    def _v_rows(self) -> torch.Tensor:
        hd, n = self.head_dim(), self.n_heads()
        return (torch.arange(n)[:, None] * 3 * hd + 2 * hd + torch.arange(hd)[None, :]).reshape(-1)

    def v_weight(self, layer: int) -> torch.Tensor:
        w = self.attention(layer).query_key_value.weight
        return w[self._v_rows().to(w.device)]

    def v_bias(self, layer: int) -> torch.Tensor | None:
        b = self.attention(layer).query_key_value.bias
        return None if b is None else b[self._v_rows().to(b.device)]
