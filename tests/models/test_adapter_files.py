"""An architecture is one file: every module of interp/models/adapters registers its adapter and carries its tiny
config; unknown config options are refused by an allow-list; Qwen3-MoE's mlp_out is the routed experts' weighted
sum (checked against the router and expert weights by hand)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
import transformers as tf

import interp
from interp.errors import UnsupportedModelError
from interp.models.adapters import ADAPTERS, adapter_class, supported_model_types
from interp.models.tiny import GQA_FAMILIES, TINY_FAMILIES, tiny_random_hf
from tests.helpers import ids

ADAPTER_DIR = Path(interp.__file__).parent / "models" / "adapters"


def _classes_defined(path: Path) -> list[str]:
    return [n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)]


def test_every_adapter_file_registers_one_adapter_with_a_tiny_config():
    files = sorted(p for p in ADAPTER_DIR.glob("*.py") if p.stem not in ("__init__", "base", "registry"))
    assert {p.stem for p in files} >= {"qwen3", "qwen3_moe", "llama", "gemma3"}
    by_module = {a.__module__.rsplit(".", 1)[1]: a for a in ADAPTERS}
    for p in files:
        assert len(_classes_defined(p)) == 1, f"{p.name} should define one adapter class"
        assert p.stem in by_module, f"{p.name}'s adapter did not register"
        a = by_module[p.stem]
        for t in a.model_types:
            assert adapter_class(t) is a
        assert a.family in TINY_FAMILIES, f"{p.name} has no tiny config"
        cfg = a.tiny_config(a.tiny_gqa)
        assert adapter_class(cfg.model_type) is a
        a.check_config(cfg)  # an adapter accepts its own tiny config
    assert {"qwen3", "qwen3_moe"} <= set(supported_model_types())
    assert {"qwen3", "qwen3_moe"} <= set(GQA_FAMILIES)


def test_options_off_the_allow_list_are_refused_by_name():
    with pytest.raises(UnsupportedModelError, match="pretraining_tp=2"):
        adapter_class("llama").check_config(tf.LlamaConfig(pretraining_tp=2))
    cfg = tf.Qwen2Config(num_hidden_layers=2)
    cfg.some_new_feature = True  # a key transformers' Qwen2Config does not have
    with pytest.raises(UnsupportedModelError, match="some_new_feature=True.*config_keys"):
        adapter_class("qwen2").check_config(cfg)
    with pytest.raises(UnsupportedModelError, match="scale_attn_weights=False"):
        adapter_class("gpt2").check_config(tf.GPT2Config(scale_attn_weights=False))
    with pytest.raises(UnsupportedModelError, match="layer_types \\['chunked_attention'\\]"):
        adapter_class("qwen3").check_config(tf.Qwen3Config(num_hidden_layers=2,
                                                            layer_types=["chunked_attention", "full_attention"]))
    # allowed: geometry, ids, dropouts, the family's own keys at any value
    adapter_class("llama").check_config(tf.LlamaConfig(hidden_size=128, attention_dropout=0.1, bos_token_id=7))
    adapter_class("qwen3_moe").check_config(tf.Qwen3MoeConfig(num_experts=8, num_experts_per_tok=3,
                                                              mlp_only_layers=[0], norm_topk_prob=False))
    sliding = tf.Qwen3Config(num_hidden_layers=4, use_sliding_window=True, max_window_layers=2, sliding_window=16)
    adapter_class("qwen3").check_config(sliding)
    assert list(sliding.layer_types) == ["full_attention"] * 2 + ["sliding_attention"] * 2


@torch.no_grad()
def test_qwen3_moe_mlp_out_is_the_routed_experts_weighted_sum():
    model = interp.Model(tiny_random_hf("qwen3_moe", gqa=True))
    layer = model.adapter.layers()[2]
    assert type(layer.mlp).__name__ == "Qwen3MoeSparseMoeBlock"
    assert type(model.adapter.layers()[1].mlp).__name__ == "Qwen3MoeMLP"  # mlp_only_layers=[1]: dense
    x = ids()
    sites = ["L2.resid_pre", "L2.attn_out", "L2.mlp_out", "L2.resid_post"]
    cap = interp.Capture(sites)
    with model.intervene(cap):
        model.forward(x)
    pre, attn, mlp, post = (cap[s] for s in sites)
    assert (pre + attn + mlp - post).abs().max().item() <= 1e-5 * max(1.0, post.abs().max().item())
    # by hand: the MLP's input is the post-attention RMSNorm of resid_mid; router softmax, top 2 of 4 renormalised
    cfg = model.hf.config
    h = layer.post_attention_layernorm(pre + attn).reshape(-1, cfg.hidden_size)
    probs = torch.softmax(h @ layer.mlp.gate.weight.T, dim=-1)
    top_w, top_i = probs.topk(cfg.num_experts_per_tok, dim=-1)
    assert cfg.norm_topk_prob
    top_w = top_w / top_w.sum(-1, keepdim=True)
    ex = layer.mlp.experts
    want = torch.zeros_like(h)
    for t in range(h.shape[0]):
        for w, e in zip(top_w[t], top_i[t]):
            gate, up = (ex.gate_up_proj[e] @ h[t]).chunk(2)
            want[t] += w * (ex.down_proj[e] @ (torch.nn.functional.silu(gate) * up))
    got = mlp.reshape(-1, cfg.hidden_size)
    assert (got - want).abs().max().item() <= 1e-5 * max(1.0, want.abs().max().item())
    assert len(set(top_i.flatten().tolist())) > 1  # the router does route to different experts
