"""Qwen3-MoE: Qwen3's attention (per-head q/k RMSNorm before RoPE, no biases, head_dim apart from hidden_size /
heads) with a mixture-of-experts MLP in every `decoder_sparse_step`-th layer outside `mlp_only_layers`.

What `mlp_out` means there: the sparse block's output, i.e. for each token the sum over its top-k experts
(`num_experts_per_tok` of `num_experts`, chosen by a softmax router, weights renormalised to sum to 1 when
`norm_topk_prob`) of router weight x expert output; Qwen3-MoE has no shared expert, so that sum is the whole
MLP contribution to the residual stream, and the residual stays resid_mid + mlp_out. Layers in `mlp_only_layers`
have a dense MLP and their mlp_out is its output. Routing is per token, so a token's mlp_out does not depend on
the other rows of a batch. Single experts and the router's logits are not sites.
"""

from interp.models.adapters.qwen3 import Qwen3Adapter

MOE_KEYS = frozenset({"num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                      "decoder_sparse_step", "mlp_only_layers", "norm_topk_prob", "router_aux_loss_coef",
                      "output_router_logits"})


class Qwen3MoeAdapter(Qwen3Adapter):
    model_types = ("qwen3_moe",)
    family = "qwen3_moe"
    config_keys = Qwen3Adapter.config_keys | MOE_KEYS

    @classmethod
    def tiny_config(cls, gqa=False):
        """4 experts, top 2, weights renormalised (as in the released models); layer 1 dense (mlp_only_layers), so
        both kinds of MLP are exercised."""
        import transformers as tf

        return tf.Qwen3MoeConfig(**cls.tiny_common(gqa), head_dim=16, num_experts=4, num_experts_per_tok=2,
                                 moe_intermediate_size=32, decoder_sparse_step=1, mlp_only_layers=[1], norm_topk_prob=True,
                                 rope_parameters={"rope_type": "default", "rope_theta": 1e6})
