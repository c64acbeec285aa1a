"""Tiny random-weight configs of every supported architecture (MHA and GQA variants).

Used by the parity tests and the `tiny-random-<family>` aliases: the code paths of a 7B
checkpoint, at a size that runs in milliseconds. Weights are random (seeded), so they say nothing
about any mechanism.
"""

from __future__ import annotations

from interp.errors import InvalidInputError

VOCAB = 96


def tiny_config(family: str, gqa: bool = False):
    import transformers as tf

    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2 if gqa else 4, max_position_embeddings=256,
                  tie_word_embeddings=False)
    if family == "llama":
        return tf.LlamaConfig(**common, rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                         "original_max_position_embeddings": 64})
    if family == "qwen2":
        return tf.Qwen2Config(**common, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    if family == "mistral":
        return tf.MistralConfig(**common, sliding_window=8)
    if family == "gemma2":
        return tf.Gemma2Config(**common, head_dim=16, query_pre_attn_scalar=24, attn_logit_softcapping=5.0,
                               final_logit_softcapping=30.0, sliding_window=6,
                               layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    if family == "gemma3":  # the 270M's layout: sliding layers at theta 1e4, a global layer at 1e6; GQA = MQA
        return tf.Gemma3TextConfig(**{**common, "num_key_value_heads": 1 if gqa else 4}, head_dim=16,
                                   query_pre_attn_scalar=16, sliding_window=6,
                                   layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                                    "full_attention": {"rope_type": "default", "rope_theta": 1e6}})
    if family == "olmo2":
        return tf.Olmo2Config(**common)
    if family == "gpt_neox":
        c = {k: v for k, v in common.items() if k not in ("num_key_value_heads",)}
        return tf.GPTNeoXConfig(**c, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                      "partial_rotary_factor": 0.5})
    if family == "gpt2":
        return tf.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=3, n_head=4, n_positions=256)
    if family == "bert":
        return tf.BertConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                             num_attention_heads=4, max_position_embeddings=256)
    raise InvalidInputError(f"no tiny config for {family!r}; families: {', '.join(TINY_FAMILIES)}")


TINY_FAMILIES = ("llama", "qwen2", "mistral", "gemma2", "gemma3", "olmo2", "gpt2", "gpt_neox", "bert")
GQA_FAMILIES = ("llama", "qwen2", "mistral", "gemma2", "gemma3", "olmo2")


def tiny_random_hf(family: str, gqa: bool = False, seed: int = 0, attn_implementation: str | None = None):
    """A seeded random-weight HF model of `family` (float32, eval mode)."""
    import torch
    import transformers as tf

    from interp.models.adapters import adapter_class

    config = tiny_config(family, gqa)
    impl = attn_implementation or adapter_class(config.model_type).default_attn_implementation_for(config)
    torch.manual_seed(seed)
    auto = tf.AutoModel if family == "bert" else tf.AutoModelForCausalLM
    hf = auto.from_config(config, attn_implementation=impl, dtype=torch.float32)
    return hf.eval()
