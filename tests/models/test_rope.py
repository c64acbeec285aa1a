"""RoPE dimension resolution pinned against hand computations, and a planted frequency-band head."""

import math

import pytest
import torch
import transformers as tf

import interp
from interp.errors import InvalidInputError
from interp.models.rope import resolve_dims
from interp.models.spec import RopeSpec

from tests.helpers import pair


def _spec(inv_freq, rotary_dims, head_dim, layout="rotate_half"):
    return RopeSpec(theta=1e4, rotary_dims=rotary_dims, head_dim=head_dim, layout=layout, inv_freq=tuple(inv_freq))


def test_rotate_half_lowest_and_highest():
    r = _spec([1e4 ** (-2 * j / 16) for j in range(8)], 16, 16)
    low = resolve_dims(r, "lowest", 4)  # 4 dims = pairs 7 and 6
    assert low.pairs == (7, 6) and low.dims == (6, 7, 14, 15)
    high = resolve_dims(r, "highest", 2, unit="pairs")
    assert high.pairs == (1, 0) and high.dims == (0, 1, 8, 9)
    assert low.freqs == pytest.approx([1e4 ** (-14 / 16), 1e4 ** (-12 / 16)])


def test_interleaved_layout():
    r = _spec([1e4 ** (-2 * j / 8) for j in range(4)], 8, 8, layout="interleaved")
    assert resolve_dims(r, "lowest", 4).dims == (4, 5, 6, 7)  # pairs 3 and 2 -> (6,7), (4,5)
    assert resolve_dims(r, [0], 0).dims == (0, 1)


def test_partial_rotary_from_model():
    _, m = pair("gpt_neox", False)  # 8 rotary dims of 16
    d = resolve_dims(m.spec.rope, "lowest", 2)
    assert d.pairs == (3,) and d.dims == (3, 7)  # rotate_half within the rotary 8: pair j = (j, j + 4)
    with pytest.raises(InvalidInputError, match="only 4 rotary pairs"):
        resolve_dims(m.spec.rope, "lowest", 10)


def test_llama3_scaled_band_uses_scaled_frequencies():
    _, m = pair("llama", True)  # llama3 scaling, factor 8
    d = resolve_dims(m.spec.rope, "lowest", 2)
    assert d.pairs == (7,)
    assert d.freqs[0] == pytest.approx(500000.0 ** (-14 / 16) / 8, rel=1e-5)  # divided by the factor, by hand


def _yarn_by_hand(theta, dim, factor, orig, beta_fast=32.0, beta_slow=1.0):
    """YaRN (Peng et al. 2023) frequency blend, written from the paper's formulas."""
    def corr(n_rot):
        return dim * math.log(orig / (n_rot * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(corr(beta_fast)), 0)
    high = min(math.ceil(corr(beta_slow)), dim - 1)
    out = []
    for j in range(dim // 2):
        extra = theta ** (-2 * j / dim)
        inter = extra / factor
        ramp = min(max((j - low) / max(high - low, 1e-3), 0.0), 1.0)
        w_extra = 1.0 - ramp
        out.append(inter * (1 - w_extra) + extra * w_extra)
    return out


def test_yarn_scaled_frequencies_by_hand():
    cfg = tf.Qwen2Config(vocab_size=96, hidden_size=128, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                         rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                                          "original_max_position_embeddings": 1024})
    m = interp.Model(tf.AutoModelForCausalLM.from_config(cfg))
    r = m.spec.rope
    assert r.scaling == "yarn"
    want = _yarn_by_hand(1e4, 64, 4.0, 1024)
    assert r.inv_freq == pytest.approx(want, rel=1e-5)
    d = resolve_dims(r, "lowest", 8)
    assert d.pairs == (31, 30, 29, 28) and d.freqs == pytest.approx([want[j] for j in (31, 30, 29, 28)], rel=1e-5)


def test_random_band_is_seeded_and_bad_counts_refused():
    r = _spec([1e4 ** (-2 * j / 16) for j in range(8)], 16, 16)
    a, b = resolve_dims(r, "random", 6, seed=3), resolve_dims(r, "random", 6, seed=3)
    assert a == b and len(a.pairs) == 3
    with pytest.raises(InvalidInputError, match="even number"):
        resolve_dims(r, "lowest", 3)
    with pytest.raises(InvalidInputError, match="valid: lowest"):
        resolve_dims(r, "middle", 2)


def test_random_band_outside_excluded_pairs():
    r = _spec([1e4 ** (-2 * j / 16) for j in range(8)], 16, 16)
    low = resolve_dims(r, "lowest", 8)  # pairs 7..4
    for seed in range(20):
        assert not set(resolve_dims(r, "random", 8, seed=seed, exclude=low.pairs).pairs) & set(low.pairs)
    assert resolve_dims(r, "random", 6, seed=3, exclude=()) == resolve_dims(r, "random", 6, seed=3)  # seeds kept
    with pytest.raises(InvalidInputError, match="only 3 of 8 pairs remain"):
        resolve_dims(r, "random", 8, exclude=(0, 1, 2, 3, 4))


def test_rope_zero_random_dims_keep_out_of_the_band_or_say_they_do_not():
    """A random-dims control drawn over the target band zeroes part of the target: drawn outside it by default,
    and where the band leaves too few pairs outside (or with random_dims="any") the overlap is written down."""
    from interp.analyses.rope_zero import RopeZeroConfig, _random_dims
    from interp.sites import HeadId

    r = _spec([1e4 ** (-2 * j / 16) for j in range(8)], 16, 16)
    cfg = RopeZeroConfig(heads=(HeadId(0, 0),), random_draws=3)
    band = resolve_dims(r, "lowest", 8)  # 4 of the 8 pairs: exactly one set of 4 lies outside
    draws, where, note = _random_dims(r, cfg, 8, band)
    assert where == "outside the target band" and [d.pairs for d in draws] == [(3, 2, 1, 0)]
    assert note == "only 1 distinct random-dim set(s) of 4 pairs lie outside the target band (3 asked)"
    band = resolve_dims(r, "lowest", 12)  # 6 pairs: 2 outside, fewer than 6: from every pair, and said so
    draws, where, note = _random_dims(r, cfg, 12, band)
    assert where.startswith("every pair (only 2 of 8 pairs lie outside the 6-pair band)") and len(draws) == 3
    shared = [len(set(d.pairs) & set(band.pairs)) for d in draws]  # 6 of 8 pairs: at least 4 in the band
    assert min(shared) >= 4 and f"share {', '.join(map(str, shared))} of their 6 pairs with the target band" in note
    any_ = RopeZeroConfig(heads=(HeadId(0, 0),), random_draws=3, random_dims="any")
    draws, where, note = _random_dims(r, any_, 4, resolve_dims(r, "lowest", 4))
    shared = [len(set(d.pairs) & {7, 6}) for d in draws]
    assert where == "every pair, the target band included"
    assert (note is None) == (not any(shared))
    assert note is None or note.startswith("random dims from every pair, the target band included: the draws share")
    with pytest.raises(InvalidInputError, match="random dims from"):
        RopeZeroConfig(heads=(HeadId(0, 0),), random_dims="inside")


def _planted_model():
    """Tiny Llama whose layer-0 head 0 matches token content using ONLY its 4 lowest-frequency pairs."""
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6}, tie_word_embeddings=False)
    hf = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    m = interp.Model(hf)
    low = resolve_dims(m.spec.rope, "lowest", 8)  # pairs 7..4 -> dims 4..7, 12..15
    attn = hf.model.layers[0].self_attn
    with torch.no_grad():
        hf.model.layers[0].input_layernorm.weight.fill_(1.0)
        proj = torch.randn(8, 64) / 8 ** 0.5  # token embedding -> 8 content dims
        for w in (attn.q_proj.weight, attn.k_proj.weight):
            w.zero_()
            w[list(low.dims)] = proj * 6.0  # head 0 = rows 0..15; only the low-frequency dims are used
    return m, low


def _dup_mass(model, ids, extra=()):
    """Attention mass of head 0 from the last token onto copies of its own token (itself included)."""
    rec = interp.AttentionRows([-1], layers=[0])
    with model.intervene(*extra, rec):
        model.forward(ids)
    row = rec.result()[0, 0, 0, 0]
    same = ids[0] == ids[0, -1]
    return float(row[same].sum())


def test_zeroing_the_planted_pairs_removes_content_matching():
    m, low = _planted_model()
    g = torch.Generator().manual_seed(1)
    ids = torch.randperm(60, generator=g)[:40] + 3
    ids = torch.cat([ids, ids[5:6]])[None]  # the last token occurred once before, at position 5
    base = _dup_mass(m, ids)
    assert base > 0.9  # the head attends to its token's two occurrences
    zero_low = _dup_mass(m, ids, (interp.ZeroRopeDims([(0, 0)], low.dims),))
    assert zero_low < 0.1  # uniform over 41 keys: 2/41
    high = resolve_dims(m.spec.rope, "highest", 8)
    assert _dup_mass(m, ids, (interp.ZeroRopeDims([(0, 0)], high.dims),)) == pytest.approx(base, abs=1e-6)
    other_head = _dup_mass(m, ids, (interp.ZeroRopeDims([(0, 1)], low.dims),))
    assert other_head == pytest.approx(base, abs=1e-6)  # head-specific


def test_cli_refuses_rope_analyses_without_rope(capsys, tmp_path):
    from interp.cli import main

    for cmd in (["rope-zero"], ["rope-profile"]):
        with pytest.raises(SystemExit) as e:
            main(cmd + ["--model", "tiny-random-gpt2", "--out", str(tmp_path / "o")])
        assert e.value.code == 2
        assert "no rotary position embedding" in " ".join(capsys.readouterr().err.split())


def test_gemma3_heads_by_theta_and_one_pair_order():
    """Gemma-3's layer types rotate at 1e4 (sliding) and 1e6 (full): each head is named with its own theta, and
    a band names the same pairs on both (frequencies sorted the same way); a spec whose layer types order their
    pairs differently is refused rather than zeroing different dims per layer."""
    import dataclasses

    from interp.errors import UnsupportedModelError
    from interp.models.rope import heads_by_theta, one_pair_order
    from interp.sites import as_heads

    _, m = pair("gemma3", True)
    s = m.spec
    assert heads_by_theta(s, as_heads("L0H1,L1H0,L2H3")) == {1e4: ["L0H1", "L2H3"], 1e6: ["L1H0"]}
    rope = one_pair_order(s)
    low = resolve_dims(rope, "lowest", 4)
    full = s.layer_ropes["full_attention"]
    assert low.pairs == (7, 6) and resolve_dims(full, "lowest", 4).pairs == low.pairs
    assert full.inv_freq[7] == pytest.approx(1e6 ** (-14 / 16)) and rope.inv_freq[7] == pytest.approx(1e4 ** (-14 / 16))
    flipped = dataclasses.replace(full, inv_freq=tuple(reversed(full.inv_freq)))
    bad = dataclasses.replace(s, layer_ropes={**s.layer_ropes, "full_attention": flipped})
    with pytest.raises(UnsupportedModelError, match="order their rotary pairs"):
        one_pair_order(bad)
