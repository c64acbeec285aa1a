"""ModelSpec / RopeSpec read from the models, checked against values computed by hand."""

import math

import pytest
import transformers as tf

import interp
from interp.models.adapters import adapter_class
from interp.errors import UnsupportedModelError

from tests.helpers import VARIANT_IDS, VARIANTS, pair


@pytest.mark.parametrize("family,gqa", VARIANTS, ids=VARIANT_IDS)
def test_geometry(family, gqa):
    _, m = pair(family, gqa)
    s = m.spec
    assert (s.n_layers, s.n_heads, s.d_model) == (3, 4, 64)
    mqa = gqa and family == "gemma3"  # the gemma3 variant shares one key/value head, as Gemma-3-270M does
    assert s.n_kv_heads == (1 if mqa else 2 if gqa else 4)
    assert [s.kv_head_of(h) for h in range(4)] == ([0, 0, 0, 0] if mqa else [0, 0, 1, 1] if gqa else [0, 1, 2, 3])
    # q projection width = n_heads * head_dim (checked on the real module, not the config)
    q_width = {"gpt2": 64, "bert": 64}.get(family)
    attn = m.adapter.attention(0)
    if q_width is None:
        proj = getattr(attn, "q_proj", None) or getattr(attn, "query_key_value", None)
        q_width = proj.weight.shape[0] // (3 if family == "gpt_neox" else 1)
    assert q_width == s.n_heads * s.head_dim
    assert s.positional == ("learned" if family in ("gpt2", "bert") else "rope")
    assert (s.rope is None) == (family in ("gpt2", "bert"))


def test_default_rope_frequencies_by_hand():
    _, m = pair("qwen2", True)  # theta 1e6, head_dim 16
    want = [1e6 ** (-2 * j / 16) for j in range(8)]
    assert m.spec.rope.inv_freq == pytest.approx(want, rel=1e-6)
    assert m.spec.rope.layout == "rotate_half"
    assert m.spec.rope.pair_dims(3) == (3, 11)


def test_gemma3_frequencies_per_layer_type_by_hand():
    """Gemma-3: sliding layers rotate at theta 1e4, full-attention layers at 1e6 (the tiny config's layout
    sliding, full, sliding); each layer's heads get their own type's frequencies."""
    _, m = pair("gemma3", True)  # head_dim 16
    s = m.spec
    assert s.layer_types == ("sliding_attention", "full_attention", "sliding_attention")
    assert (s.sliding_window, s.sliding_layers) == (6, (0, 2))
    for layer, theta in ((0, 1e4), (1, 1e6), (2, 1e4)):
        assert s.theta_of(layer) == theta
        assert s.rope_of(layer).inv_freq == pytest.approx([theta ** (-2 * j / 16) for j in range(8)], rel=1e-6)
    assert s.rope == s.rope_of(0) and s.qk_norm
    _, llama = pair("llama", True)
    assert llama.spec.layer_ropes == {} and llama.spec.rope_of(2) is llama.spec.rope


def test_llama3_scaled_frequencies_by_hand():
    _, m = pair("llama", True)  # theta 5e5, factor 8, low 1, high 4, original context 64
    theta, d, factor, low, high, old = 500000.0, 16, 8.0, 1.0, 4.0, 64
    want = []
    for j in range(d // 2):
        f = theta ** (-2 * j / d)
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            want.append(f)
        elif wavelen > old / low:
            want.append(f / factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            want.append((1 - smooth) * f / factor + smooth * f)
    got = m.spec.rope.inv_freq
    assert got == pytest.approx(want, rel=1e-5)
    assert m.spec.rope.scaling == "llama3"
    unscaled = [theta ** (-2 * j / d) for j in range(d // 2)]
    assert got[-1] == pytest.approx(unscaled[-1] / factor, rel=1e-5)  # lowest frequency divided by 8
    assert got[0] == pytest.approx(unscaled[0], rel=1e-6)  # highest frequency kept


def test_partial_rotary_neox_by_hand():
    _, m = pair("gpt_neox", False)  # partial_rotary_factor 0.5 of head_dim 16
    r = m.spec.rope
    assert (r.rotary_dims, r.head_dim, r.n_pairs) == (8, 16, 4)
    assert r.inv_freq == pytest.approx([1e4 ** (-2 * j / 8) for j in range(4)], rel=1e-6)
    assert r.pair_dims(0) == (0, 4)


def test_linear_scaling_by_hand():
    cfg = tf.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0})
    m = interp.Model(tf.AutoModelForCausalLM.from_config(cfg))
    assert m.spec.rope.inv_freq == pytest.approx([1e4 ** (-2 * j / 16) / 4 for j in range(8)], rel=1e-6)


def test_gemma2_and_olmo2_specifics():
    _, g = pair("gemma2", True)
    assert g.spec.attn_logit_softcap == 5.0
    assert g.adapter.attention(0).scaling == pytest.approx(24 ** -0.5)  # query_pre_attn_scalar
    assert g.hf.config._attn_implementation == "interp|eager"  # sdpa cannot softcap
    _, o = pair("olmo2", True)
    assert o.spec.qk_norm


def test_unsupported_architecture_and_variants_raise():
    with pytest.raises(UnsupportedModelError, match="model_type='opt'.*supported: bert"):
        adapter_class("opt")
    cfg = tf.LlamaConfig()
    cfg.rope_parameters = {"rope_type": "sinusoidal-2d", "rope_theta": 1e4}
    with pytest.raises(UnsupportedModelError, match="rope_type='sinusoidal-2d'"):
        adapter_class("llama").check_config(cfg)
    with pytest.raises(UnsupportedModelError, match="reorder_and_upcast_attn"):
        adapter_class("gpt2").check_config(tf.GPT2Config(reorder_and_upcast_attn=True))
    g3 = adapter_class("gemma3_text")
    with pytest.raises(UnsupportedModelError, match="layer_types \\['chunked_attention'\\]"):
        g3.check_config(tf.Gemma3TextConfig(num_hidden_layers=2, layer_types=["chunked_attention", "full_attention"]))
    with pytest.raises(UnsupportedModelError, match="use_bidirectional_attention"):
        g3.check_config(tf.Gemma3TextConfig(use_bidirectional_attention=True))
    bad_rope = tf.Gemma3TextConfig(num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"])
    bad_rope.rope_parameters = {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                "full_attention": {"rope_type": "sinusoidal-2d", "rope_theta": 1e6}}
    with pytest.raises(UnsupportedModelError, match="rope_parameters\\['full_attention'\\].rope_type='sinusoidal-2d'"):
        g3.check_config(bad_rope)
    g3.check_config(tf.Gemma3TextConfig())  # the released layout is accepted


def test_import_has_no_side_effects():
    import subprocess
    import sys

    code = "import sys, interp; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
