"""GPT-NeoX / Pythia: partial rotary (rotary_pct of each head, rotate_half within it), MHA."""

from .base import Adapter


class GPTNeoXAdapter(Adapter):
    model_types = ("gpt_neox",)
    family = "gpt_neox"
    body_paths = ("gpt_neox", "")
    attn_attr = "attention"
    o_proj_attr = "dense"
    embed_attr = "embed_in"
    final_norm_attr = "final_layer_norm"

    def sliding(self):
        return None, ()
