"""logit_by_pair: the per-pair terms sum to the logit recomputed from captured q, k; log attention ratios equal
logit differences; zeroing one pair of the query removes exactly that pair's term."""

import pytest
import torch

from interp import AttentionRows, Capture, Site, ZeroRopeDims
from interp.analyses.rope_decompose import logit_by_pair
from interp.errors import InvalidInputError

from tests.helpers import ids, left_padded, pair

FAMILIES = [("llama", True), ("gemma2", True), ("gemma3", True), ("gpt_neox", False), ("qwen3", True)]
LAYER, HEAD, QPOS, KEYS = 1, 3, -1, (0, 4, 7, 11)


@pytest.mark.parametrize("family,gqa", FAMILIES, ids=[f for f, _ in FAMILIES])
def test_terms_sum_to_the_logit_from_captured_q_k(family, gqa):
    _, model = pair(family, gqa)
    x = ids(2, 12)
    res = logit_by_pair(model, x, LAYER, HEAD, QPOS, KEYS)
    rope = model.spec.rope_of(LAYER)
    assert res.contributions.shape == (2, len(KEYS), rope.n_pairs + 1)
    qs, ks = Site(LAYER, "q", HEAD), Site(LAYER, "k", model.spec.kv_head_of(HEAD))
    cap = Capture([qs, ks])
    with model.intervene(cap):
        model.forward(x)
    q, k = cap[qs][:, -1], cap[ks][:, list(KEYS)]  # [b, d], [b, n, d]
    scaling = res.scaling
    want = (q[:, None] * k).sum(-1) * scaling
    assert (res.contributions.sum(-1) - want).abs().max() < 1e-5
    assert (res.logit - want).abs().max() < 1e-5
    # one pair written out by hand
    a, b = rope.pair_dims(2)
    assert torch.allclose(res.contributions[..., 2], (q[:, None, a] * k[..., a] + q[:, None, b] * k[..., b]) * scaling,
                          atol=1e-6)
    unrotated = res.contributions[..., -1]
    if rope.rotary_dims < rope.head_dim:
        assert unrotated.abs().max() > 1e-4
    else:
        assert unrotated.abs().max() == 0
    assert (res.softcapped is not None) == (model.spec.attn_logit_softcap is not None)


@pytest.mark.parametrize("family,gqa", [("llama", True), ("gpt_neox", False), ("gemma2", True)])
def test_log_attention_ratios_are_logit_differences(family, gqa):
    """log a(k1) - log a(k2) from the model's attention rows = the difference of the (softcapped) logits, on a
    left-padded batch (positions index the padded input)."""
    _, model = pair(family, gqa)
    _, x, mask = left_padded()
    keys = (9, 10, 11)  # real tokens in every row
    res = logit_by_pair(model, x, LAYER, HEAD, -1, keys, attention_mask=mask)
    rec = AttentionRows([-1], layers=[LAYER])
    with model.intervene(rec):
        model.forward(x, attention_mask=mask)
    rows = rec.result()[:, 0, HEAD, 0]  # [b, k_len]
    logits = res.softcapped if res.softcapped is not None else res.contributions.sum(-1)
    for i, j in ((0, 1), (0, 2), (1, 2)):
        want = torch.log(rows[:, keys[i]]) - torch.log(rows[:, keys[j]])
        assert (logits[:, i] - logits[:, j] - want).abs().max() < 1e-4


def test_zeroing_a_pair_of_the_query_removes_its_term():
    _, model = pair("llama", True)
    x = ids(2, 12)
    base = logit_by_pair(model, x, LAYER, HEAD, QPOS, KEYS)
    rope = model.spec.rope_of(LAYER)
    j = rope.pairs_by_frequency()[0]
    with model.intervene(ZeroRopeDims([(LAYER, HEAD)], dims=rope.pair_dims(j), side="q")):
        cut = logit_by_pair(model, x, LAYER, HEAD, QPOS, KEYS)
    assert cut.contributions[..., j].abs().max() == 0
    assert (cut.logit - (base.logit - base.contributions[..., j])).abs().max() < 1e-5
    assert base.contributions[..., j].abs().max() > 1e-4


def test_refusals():
    _, gpt2 = pair("gpt2", False)
    with pytest.raises(InvalidInputError, match="rotary"):
        logit_by_pair(gpt2, ids(1, 8), 0, 0, -1, [0])
    _, model = pair("llama", True)
    with pytest.raises(InvalidInputError, match="after the query"):
        logit_by_pair(model, ids(1, 8), 0, 0, 3, [5])
    with pytest.raises(InvalidInputError, match="outside"):
        logit_by_pair(model, ids(1, 8), 0, 0, 3, [20])


@pytest.mark.parametrize("family,gqa", [("llama", True), ("gpt_neox", False)], ids=["llama", "gpt_neox"])
def test_needle_decomposition_equals_logit_by_pair(family, gqa):
    """Per head and pair: the needle keys' mean term minus the other keys' (first token left out), as
    logit_by_pair computes them; bands (quarters by frequency, + unrotated) add up to the whole gap."""
    import numpy as np

    from interp.analyses.rope_decompose import needle_decomposition
    from interp.tasks.niah import NiahSample

    _, model = pair(family, gqa)
    x = ids(2, 14, seed=4)
    samples = [NiahSample(id=f"s{i}", seed=i, context_length=14, depth=d, input_ids=x[i].tolist(),
                          needle_span=span, needle="", question="", answer="")
               for i, (d, span) in enumerate([(0.25, (3, 6)), (0.75, (8, 10))])]
    heads = [(1, 3), (2, 0)]
    res = needle_decomposition(model, samples, heads, n_boot=200)
    order = list(model.spec.rope.pairs_by_frequency())
    want = np.zeros((2, 2, model.spec.rope.n_pairs + 1))
    for i, s in enumerate(samples):
        a, b = s.needle_span
        rest = [p for p in range(1, 14) if not a <= p < b]
        for j, (layer, head) in enumerate(heads):
            t = logit_by_pair(model, torch.tensor([s.input_ids]), layer, head, -1, list(range(14))).contributions[0]
            d = (t[a:b].mean(0) - t[rest].mean(0)).double().numpy()
            want[i, j] = np.concatenate([d[order], d[-1:]])
    for j, h in enumerate(["L1H3", "L2H0"]):
        assert np.allclose(res["by_head"][h], want[:, j].mean(0), atol=1e-5)
    gap = want.sum(-1).mean(1).mean()
    assert res["gap"]["mean"] == pytest.approx(gap, abs=1e-5)
    assert sum(b["estimate"]["mean"] for b in res["bands"]) == pytest.approx(gap, abs=1e-5)
    assert [b["band"] for b in res["bands"]][-1] == ("unrotated dims" if family == "gpt_neox" else "highest quarter")
    assert [d["depth"] for d in res["by_depth"]] == [0.25, 0.75] and res["by_depth"][0]["distance"] == 13 - 3
