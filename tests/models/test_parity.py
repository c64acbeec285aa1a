"""Parity with plain transformers for every adapter (MHA and GQA), float32.

- logits with the interceptor installed and no intervention == plain HF (<= 1e-5)
- attention_rows == eager attention weights at those positions, with left padding, during
  cached decoding, and on Gemma-2 sliding-window layers (<= 1e-5)
- batched (left-padded, mixed lengths) == one-by-one
"""

import pytest
import torch

import interp
from interp.models.model import Model

from tests.helpers import DECODER_IDS, DECODERS, VARIANT_IDS, VARIANTS, eager, hf_out, ids, left_padded, logits_of, pair

TOL = 1e-5


@pytest.mark.parametrize("family,gqa", VARIANTS, ids=VARIANT_IDS)
def test_logits_equal_plain_hf(family, gqa):
    plain, model = pair(family, gqa)
    x = ids()
    ref = logits_of(hf_out(plain, x))
    got = model.forward(x)
    assert got.shape == ref.shape
    assert (got - ref).abs().max().item() <= TOL
    # and with left padding
    _, xp, mask = left_padded()
    ref = logits_of(hf_out(plain, xp, mask))
    got = model.forward(xp, attention_mask=mask)
    real = mask.bool()
    assert (got[real] - ref[real]).abs().max().item() <= TOL


@pytest.mark.parametrize("family,gqa", VARIANTS, ids=VARIANT_IDS)
def test_attention_rows_equal_eager_weights(family, gqa):
    _, model = pair(family, gqa)
    ref_model = eager(family, gqa)
    _, xp, mask = left_padded()
    positions = [0, 5, 9, 11]
    ref = hf_out(ref_model, xp, mask, output_attentions=True).attentions  # per layer [b, h, q, k]
    rows = interp.attention_rows(model, xp, positions, attention_mask=mask)
    assert rows.shape == (3, model.spec.n_layers, model.spec.n_heads, len(positions), 12)
    for layer, att in enumerate(ref):
        want = att[:, :, positions, :]
        got = rows[:, layer]
        real_q = mask.bool()[:, positions]  # padding queries are not compared (undefined)
        diff = (got - want).abs().amax(dim=(1, 3))[real_q]
        assert diff.max().item() <= TOL, f"layer {layer}"
    # rows are distributions over visible keys
    sums = rows.sum(-1).permute(0, 3, 1, 2)[mask.bool()[:, positions]]
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5)


@pytest.mark.parametrize("family,gqa", VARIANTS, ids=VARIANT_IDS)
def test_attention_rows_without_padding(family, gqa):
    """No padding: sdpa may skip the mask; rows must still be causal for decoders only."""
    _, model = pair(family, gqa)
    x = ids(2, 12)
    ref = hf_out(eager(family, gqa), x, output_attentions=True).attentions
    rows = interp.attention_rows(model, x, list(range(12)))
    for layer, att in enumerate(ref):
        assert (rows[:, layer] - att).abs().max().item() <= TOL, f"layer {layer}"
    assert (rows[:, 0, :, 0, 1:].abs().max() > 0) == (family == "bert")  # query 0 sees later keys only in BERT


@pytest.mark.parametrize("family,gqa", DECODERS, ids=DECODER_IDS)
def test_attention_rows_during_cached_decoding(family, gqa):
    """Rows recorded at every decode step equal eager weights of the full sequence at that position."""
    _, model = pair(family, gqa)
    ref_model = eager(family, gqa)
    _, xp, mask = left_padded()
    rec = interp.AttentionRows([-1])
    with model.intervene(rec):
        new = model.greedy_decode(xp, max_new_tokens=4, attention_mask=mask)
    steps = rec.steps
    assert len(steps) == 4  # prefill + 3 decode steps (the 4th token needs no forward)
    full = torch.cat([xp, new], dim=1)
    full_mask = torch.cat([mask, torch.ones_like(new)], dim=1)
    ref = hf_out(ref_model, full, full_mask, output_attentions=True).attentions
    # greedy tokens equal an uncached greedy loop on the plain model
    for step, r in enumerate(steps):
        qpos = xp.shape[1] - 1 + step
        klen = qpos + 1
        assert r.shape[-1] == klen
        for layer, att in enumerate(ref):
            want = att[:, :, qpos, :klen]
            assert (r[:, layer, :, 0, :] - want).abs().max().item() <= TOL, f"step {step} layer {layer}"


@pytest.mark.parametrize("family,gqa", DECODERS, ids=DECODER_IDS)
def test_greedy_decode_matches_uncached_argmax(family, gqa):
    plain, model = pair(family, gqa)
    _, xp, mask = left_padded()
    new = model.greedy_decode(xp, max_new_tokens=3, attention_mask=mask)
    cur, cur_mask = xp, mask
    for step in range(3):
        nxt = logits_of(hf_out(plain, cur, cur_mask))[:, -1].argmax(-1)
        assert torch.equal(nxt, new[:, step])
        cur = torch.cat([cur, nxt[:, None]], 1)
        cur_mask = torch.cat([cur_mask, torch.ones_like(nxt[:, None])], 1)


@pytest.mark.parametrize("family,gqa", VARIANTS, ids=VARIANT_IDS)
def test_batched_equals_one_by_one(family, gqa):
    _, model = pair(family, gqa)
    seqs, xp, mask = left_padded()
    batched = model.forward(xp, attention_mask=mask)
    chunked = model.forward(xp, attention_mask=mask, batch_size=2)
    assert (batched - chunked).abs().max().item() <= TOL
    for i, s in enumerate(seqs):
        single = model.forward(s[None])[0]
        got = batched[i, xp.shape[1] - len(s):]
        assert (got - single).abs().max().item() <= 1e-4, f"row {i}"


def test_gemma2_sliding_layers_are_exercised():
    """The tiny Gemma-2 has window 6 on layers 0 and 2; the 12-token rows must show it."""
    _, model = pair("gemma2", True)
    assert model.spec.sliding_layers == (0, 2) and model.spec.sliding_window == 6
    rows = interp.attention_rows(model, ids(1, 12), [11])
    assert rows[0, 0, :, 0, :6].abs().max() == 0  # keys 0..5 are outside the window of query 11
    assert rows[0, 1, :, 0, :6].abs().max() > 0  # the global layer sees them


def test_install_is_reversible():
    plain, model = pair("llama", True)
    assert model.hf.config._attn_implementation.startswith("interp|")
    model.detach()
    assert model.hf.config._attn_implementation == plain.config._attn_implementation
    x = ids()
    assert torch.equal(logits_of(hf_out(plain, x)), logits_of(hf_out(model.hf, x)))


def test_model_wraps_bare_model():
    m = Model(eager("llama", False))
    assert m.hf.config._attn_implementation == "interp|eager"
    assert m.forward(ids()).shape == (2, 12, 96)


@pytest.mark.parametrize("family,gqa", [v for v in DECODERS if v[0] != "gpt2"] + [("gpt2", False)],
                         ids=[i for v, i in zip(DECODERS, DECODER_IDS) if v[0] != "gpt2"] + ["gpt2-mha"])
def test_sublayer_outputs_are_the_residual_contributions(family, gqa):
    """resid_post == resid_pre + attn_out + mlp_out on every decoder: attn_out / mlp_out are what each sublayer
    adds to the residual stream, after the norm on its output where the architecture has one (Gemma-2/3, OLMo-2),
    not the attention / MLP module's raw output."""
    _, model = pair(family, gqa)
    x = ids()
    sites = [f"L1.{k}" for k in ("resid_pre", "attn_out", "mlp_out", "resid_post")]
    cap = interp.Capture(sites)
    with model.intervene(cap):
        model.forward(x)
    pre, attn, mlp, post = (cap[s] for s in sites)
    assert (pre + attn + mlp - post).abs().max().item() <= 1e-5 * max(1.0, post.abs().max().item())
    assert attn.abs().max().item() > 1e-3 and mlp.abs().max().item() > 1e-3  # both sublayers contribute
