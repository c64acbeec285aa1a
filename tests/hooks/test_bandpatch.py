"""MeanPairs (content or length of rotary pairs set to their means, RoPE phase kept) and pair_means against an
independent reference: the plain HF model with apply_rotary_pos_emb wrapped so that one layer's pre-RoPE q/k pairs
are averaged by hand (calibration) or replaced before the model's own rotation (the patch), on tiny models of every
RoPE family (MHA and GQA, partial rotary, Gemma-3's per-layer theta), left-padded batches and cached decoding."""

import pytest
import torch

from interp.errors import InvalidInputError
from interp.hooks.bandpatch import MeanPairs, pair_means
from interp.hooks.interventions import ZeroRopeDims

from tests.helpers import DECODERS, ids, left_padded, pair, rope_hooked_logits

ROPE = [(f, g) for f, g in DECODERS if f != "gpt2"]
ROPE_IDS = [f"{f}-{'gqa' if g else 'mha'}" for f, g in ROPE]
LAYER = 1
PAIRS = (0, 2, 3)


def _half(model):
    return model.spec.rope_of(LAYER).rotary_dims // 2


def _dims(model, pairs):
    h = _half(model)
    return list(pairs), [p + h for p in pairs]  # HF's rotate_half layout: pair j = dims (j, j + rotary/2)


def _texts():
    return [ids(batch=1, seq=n, seed=10 + n)[0].tolist() for n in (12, 7, 9)]


def _reference_means(plain, model):
    """Mean pre-RoPE pair vector and mean post-RoPE pair length of layer LAYER's q and k heads, by hand."""
    a, b = _dims(model, range(_half(model)))
    acc = {}

    def grab(orig, q, k, cos, sin, *ar, **kw):
        qe, ke = orig(q, k, cos, sin, *ar, **kw)
        for side, pre, post in (("q", q, qe), ("k", k, ke)):
            vec = torch.stack([pre[..., a], pre[..., b]], -1).double()  # [1, h, s, pairs, 2]
            length = torch.sqrt(post[..., a].double() ** 2 + post[..., b].double() ** 2)
            v, n, tot = acc.get(side, (0, 0, 0))
            acc[side] = (v + vec.sum(dim=(0, 2)), n + length.sum(dim=(0, 2)), tot + pre.shape[2])
        return qe, ke

    for t in _texts():
        x = torch.tensor([t])
        rope_hooked_logits(plain, x, torch.ones_like(x), LAYER, grab)
    return {side: (v / tot, n / tot) for side, (v, n, tot) in acc.items()}


def _reference(plain, model, x, mask, q_heads, kv_heads, mode, side, pairs, ref_means):
    a, b = _dims(model, pairs)

    def swap(orig, q, k, cos, sin, *ar, **kw):
        if mode == "content":
            q, k = q.clone(), k.clone()
            for s_, t, hs in (("q", q, q_heads), ("k", k, kv_heads)):
                if side in (s_, "both"):
                    vec = ref_means[s_][0][hs][:, list(pairs)].to(t.dtype)  # [nh, np, 2]
                    for i, h in enumerate(hs):
                        t[:, h, :, a] = vec[i, :, 0]
                        t[:, h, :, b] = vec[i, :, 1]
            return orig(q, k, cos, sin, *ar, **kw)
        qe, ke = orig(q, k, cos, sin, *ar, **kw)
        qe, ke = qe.clone(), ke.clone()
        for s_, t, hs in (("q", qe, q_heads), ("k", ke, kv_heads)):
            if side in (s_, "both"):
                target = ref_means[s_][1][hs][:, list(pairs)]  # [nh, np]
                xa, xb = t[:, hs][..., a].double(), t[:, hs][..., b].double()
                length = torch.sqrt(xa ** 2 + xb ** 2)
                f = torch.where(length > 0, target[None, :, None, :] / length, 0.0)  # no angle: stays 0
                sub = t[:, hs]
                sub[..., a], sub[..., b] = (xa * f).to(t.dtype), (xb * f).to(t.dtype)
                t[:, hs] = sub
        return qe, ke

    return rope_hooked_logits(plain, x, mask, LAYER, swap)


def _run(model, x, mask, *ivs):
    with model.intervene(*ivs):
        return model.forward(x, attention_mask=mask)


def _close(a, b, mask, tol=1e-4):
    err = (a - b)[mask.bool()].abs().max()
    assert err < tol, err
    return err


@pytest.mark.parametrize("family,gqa", ROPE, ids=ROPE_IDS)
def test_pair_means_equal_hand_averages(family, gqa):
    plain, model = pair(family, gqa)
    means = pair_means(model, _texts(), batch_size=2)  # left padding inside a batch: padded tokens must not count
    ref = _reference_means(plain, model)
    assert means.n_tokens == sum(len(t) for t in _texts())
    for side in ("q", "k"):
        assert (getattr(means, f"{side}_vec")[LAYER].double() - ref[side][0]).abs().max() < 1e-4, side
        assert (getattr(means, f"{side}_len")[LAYER].double() - ref[side][1]).abs().max() < 1e-4, side


@pytest.mark.parametrize("family,gqa", ROPE, ids=ROPE_IDS)
def test_content_and_magnitude_equal_the_reference(family, gqa):
    plain, model = pair(family, gqa)
    _, x, mask = left_padded()
    means = pair_means(model, _texts())
    ref_means = _reference_means(plain, model)
    g = model.spec.group_size
    q_heads, kv_heads = list(range(g)), [0]  # one whole KV group: the reference may move its shared key head
    heads = [(LAYER, h) for h in q_heads]
    clean = _run(model, x, mask)
    for mode in ("content", "magnitude"):
        for side in ("q", "k", "both"):
            got = _run(model, x, mask, MeanPairs(heads, PAIRS, means, mode=mode, side=side))
            ref = _reference(plain, model, x, mask, q_heads, kv_heads, mode, side, PAIRS, ref_means)
            err = _close(got, ref, mask)
            assert (got - clean)[mask.bool()].abs().max() > max(1e-5, 20 * err), (mode, side)  # it does something


def test_cached_decoding_rows_and_other_heads():
    """A cached decode step equals the full forward; rows= patches only those rows; heads outside the list and
    pairs outside the band are untouched (their q/k equal the clean run's)."""
    _, model = pair("llama", True)
    means = pair_means(model, _texts())
    x = ids(batch=2, seq=10)
    mask = torch.ones_like(x)
    heads = [(LAYER, 0), (2, 3)]
    for mode in ("content", "magnitude"):
        iv = dict(heads=heads, pairs=PAIRS, means=means, mode=mode, side="both")
        full = _run(model, x, mask, MeanPairs(**iv))
        clean = _run(model, x, mask)
        only1 = _run(model, x, mask, MeanPairs(**iv, rows=[1]))
        assert torch.equal(only1[0], clean[0]) and (only1[1] - full[1]).abs().max() < 1e-5
        with torch.no_grad(), model.intervene(MeanPairs(**iv)):
            out = model.hf(input_ids=x[:, :-1], attention_mask=mask[:, :-1], use_cache=True)
            step = model.forward_cached(x[:, -1:], mask, out.past_key_values)
        assert (step[:, -1] - full[:, -1]).abs().max() < 1e-4


def test_content_keeps_position_zeroing_does_not():
    """With every pair's content set to its mean the head still sees positions (logits differ from zeroing
    those pairs), and content mode with a mean of zero is exactly zeroing."""
    _, model = pair("llama", False)
    means = pair_means(model, _texts())
    x = ids(batch=1, seq=12)
    mask = torch.ones_like(x)
    heads = [(LAYER, 0)]
    dims = sorted(d for p in PAIRS for d in model.spec.rope_of(LAYER).pair_dims(p))
    zero = _run(model, x, mask, ZeroRopeDims(heads, dims, side="q"))
    content = _run(model, x, mask, MeanPairs(heads, PAIRS, means, mode="content", side="q"))
    assert (zero - content).abs().max() > 1e-4
    means.q_vec[LAYER] = torch.zeros_like(means.q_vec[LAYER])
    as_zero = _run(model, x, mask, MeanPairs(heads, PAIRS, means, mode="content", side="q"))
    assert (as_zero - zero).abs().max() < 1e-5


def test_refusals():
    _, gpt2 = pair("gpt2", False)
    with pytest.raises(InvalidInputError, match="no rotary"):
        pair_means(gpt2, _texts())
    _, model = pair("llama", True)
    means = pair_means(model, _texts())
    for kw in ({"mode": "phase"}, {"side": "v"}):
        with pytest.raises(InvalidInputError):
            MeanPairs([(0, 0)], [0], means, **kw)
    with pytest.raises(InvalidInputError, match="outside"):
        with model.intervene(MeanPairs([(0, 0)], [99], means)):
            pass
