"""Interventions checked against independent hand computations on tiny random models."""

import pytest
import torch

import interp
from interp import AblateHeads, Capture, Patch, Site, ZeroRopeDims
from interp.errors import InterventionError, InvalidInputError

from tests.helpers import DECODER_IDS, DECODERS, ids, left_padded, pair

# families whose attention output is added to the residual stream without a post-norm
LINEAR_RESID = ["llama", "qwen2", "mistral", "gpt2", "gpt_neox"]


def _o_proj_inputs(model, x, *ivs, mask=None):
    """Capture the o_proj input (per-head z, flattened) of every layer with a plain forward pre-hook."""
    got = {}
    handles = [model.adapter.o_proj(l).register_forward_pre_hook(
        lambda m, a, l=l: got.__setitem__(l, a[0].detach().clone())) for l in range(model.spec.n_layers)]
    try:
        with model.intervene(*ivs):
            logits = model.forward(x, attention_mask=mask)
    finally:
        for h in handles:
            h.remove()
    return logits, got


@pytest.mark.parametrize("family,gqa", DECODERS, ids=DECODER_IDS)
def test_zero_ablation_touches_exactly_one_head_slice(family, gqa):
    _, model = pair(family, gqa)
    x = ids()
    layer, head = 1, 2
    d = model.spec.head_dim
    _, clean = _o_proj_inputs(model, x)
    _, abl = _o_proj_inputs(model, x, AblateHeads([(layer, head)], mode="zero"))
    sl = slice(head * d, (head + 1) * d)
    assert abl[layer][..., sl].abs().max() == 0
    assert clean[layer][..., sl].abs().max() > 0
    others = torch.ones(clean[layer].shape[-1], dtype=torch.bool)
    others[sl] = False
    assert torch.equal(abl[layer][..., others], clean[layer][..., others])
    # upstream layers untouched; downstream layers do change (the ablation propagates)
    assert torch.equal(abl[0], clean[0])
    assert not torch.equal(abl[2], clean[2])


# the pre-MLP norm of the last block, for the hand computation (tests may know module names)
PRE_MLP_NORM = {"llama": "post_attention_layernorm", "qwen2": "post_attention_layernorm",
                "mistral": "post_attention_layernorm", "gpt2": "ln_2", "gpt_neox": None}


@pytest.mark.parametrize("family", LINEAR_RESID)
def test_last_layer_ablation_matches_hand_computation(family):
    """Ablating head h of the last layer removes exactly W_O[:, h] z_h from the attention output;
    recomputing the block's MLP and the unembedding by hand from there gives the ablated logits."""
    _, model = pair(family, family in ("llama", "qwen2", "mistral"))
    a, spec = model.adapter, model.spec
    L, h, d = spec.n_layers - 1, 1, spec.head_dim
    x = ids()
    cap = Capture([Site(L, "resid_pre"), Site(L, "attn_out"), Site(L, "head_out")])
    with model.intervene(cap):
        clean = model.forward(x)
    z = cap[Site(L, "head_out")][:, :, h]  # [b, s, d]
    w_o = a.o_weight(L)[:, h * d:(h + 1) * d]  # [d_model, d]
    attn = cap[Site(L, "attn_out")] - z @ w_o.T
    block = a.layers()[L]
    resid_pre = cap[Site(L, "resid_pre")]
    with torch.no_grad():
        if PRE_MLP_NORM[family] is None:  # GPT-NeoX parallel residual: the MLP reads resid_pre
            mlp = a.mlp(L)(block.post_attention_layernorm(resid_pre))
        else:
            mid = resid_pre + attn
            mlp = a.mlp(L)(getattr(block, PRE_MLP_NORM[family])(mid))
        hand = a.unembed()(a.final_norm()(resid_pre + attn + mlp))
    cap2 = Capture([Site(L, "attn_out")])
    with model.intervene(AblateHeads([(L, h)]), cap2):
        ablated = model.forward(x)
    assert (ablated - clean).abs().max() > 1e-3
    assert (cap2[Site(L, "attn_out")] - attn).abs().max().item() <= 1e-5
    assert (ablated - hand).abs().max().item() <= 1e-5


@pytest.mark.parametrize("family,gqa", [("llama", True), ("gpt2", False), ("gemma2", True)])
def test_uniform_mode_outputs_mean_of_visible_values(family, gqa):
    _, model = pair(family, gqa)
    spec = model.spec
    layer, head = 1, 3
    _, xp, mask = left_padded()
    cap = Capture([Site(layer, "v"), Site(layer, "head_out")])
    with model.intervene(AblateHeads([(layer, head)], mode="uniform"), cap):
        model.forward(xp, attention_mask=mask)
    v = cap[Site(layer, "v")][:, :, spec.kv_head_of(head)]  # [b, s, d]
    out = cap[Site(layer, "head_out")][:, :, head]
    for b in range(xp.shape[0]):
        start = int((mask[b] == 0).sum())
        for t in range(start, xp.shape[1]):
            lo = start
            if layer in spec.sliding_layers:
                lo = max(start, t - spec.sliding_window + 1)
            want = v[b, lo:t + 1].mean(0)
            assert torch.allclose(out[b, t], want, atol=1e-5)


def test_mean_mode_sets_reference_mean():
    _, model = pair("qwen2", True)
    means = interp.head_output_means(model, ids(4, 12, seed=7))
    assert means.shape == (3, 4, 16)
    cap = Capture([Site(2, "head_out")])
    with model.intervene(AblateHeads([(2, 0)], mode="mean", means=means), cap):
        model.forward(ids())
    out = cap[Site(2, "head_out")]
    assert torch.allclose(out[:, :, 0], means[2, 0].expand_as(out[:, :, 0]))
    with pytest.raises(InterventionError, match="reference means"):
        with model.intervene(AblateHeads([(2, 0)], mode="mean")):
            pass


def test_zero_rope_dims_matches_reference_attention():
    """Rows under ZeroRopeDims(side=q) equal a hand-written softmax of (q with dims zeroed) . k."""
    _, model = pair("llama", True)
    spec = model.spec
    layer, head, dims = 1, 2, [5, 6, 7, 13, 14, 15]
    x = ids(1, 12)
    cap = Capture([Site(layer, "q"), Site(layer, "k")])
    with model.intervene(cap):
        model.forward(x)
    q = cap[Site(layer, "q")][0, :, head].clone()  # [s, d]
    k = cap[Site(layer, "k")][0, :, spec.kv_head_of(head)]
    q[:, dims] = 0
    scores = (q @ k.T) * spec.head_dim ** -0.5
    scores = scores.masked_fill(torch.triu(torch.ones(12, 12, dtype=torch.bool), 1), float("-inf"))
    want = torch.softmax(scores, -1)
    rec = interp.AttentionRows(list(range(12)), layers=[layer])
    with model.intervene(ZeroRopeDims([(layer, head)], dims, side="q"), rec):
        model.forward(x)
    got = rec.result()[0, 0]
    assert torch.allclose(got[head], want, atol=1e-5)
    # other heads, including the GQA sibling sharing the key head, are unchanged (query side)
    clean = interp.attention_rows(model, x, list(range(12)), layers=[layer])[0, 0]
    sibling = head + 1 if spec.kv_head_of(head + 1) == spec.kv_head_of(head) else head - 1
    assert torch.equal(got[sibling], clean[sibling])
    assert not torch.allclose(got[head], clean[head])


def test_zero_rope_dims_key_side_hits_group_and_warns():
    _, model = pair("llama", True)
    x = ids(1, 12)
    clean = interp.attention_rows(model, x, [11], layers=[1])[0, 0]
    rec = interp.AttentionRows([11], layers=[1])
    with pytest.warns(UserWarning, match="GQA"):
        with model.intervene(ZeroRopeDims([(1, 2)], [0, 8], side="k"), rec):
            model.forward(x)
    got = rec.result()[0, 0]
    assert not torch.allclose(got[2], clean[2]) and not torch.allclose(got[3], clean[3])  # kv head 1 = q 2, 3
    assert torch.equal(got[0], clean[0])


def test_zero_rope_dims_refuses_bad_input():
    _, gpt2 = pair("gpt2", False)
    with pytest.raises(InvalidInputError, match="no rotary"):
        with gpt2.intervene(ZeroRopeDims([(0, 0)], [0])):
            pass
    _, neox = pair("gpt_neox", False)  # partial rotary: 8 of 16 dims rotate
    with pytest.raises(InvalidInputError, match="outside the rotary dims"):
        with neox.intervene(ZeroRopeDims([(0, 0)], [8])):
            pass


def test_rows_subset_only_changes_those_rows():
    _, model = pair("qwen2", True)
    x = ids(3, 12)
    clean = model.forward(x)
    with model.intervene(AblateHeads([(0, 0), (1, 1), (2, 3)], rows=[1])):
        got = model.forward(x)
        chunked = model.forward(x, batch_size=2)  # global row ids survive chunking
    assert torch.equal(got[0], clean[0]) and torch.equal(got[2], clean[2])
    assert (got[1] - clean[1]).abs().max() > 1e-4
    assert torch.allclose(chunked, got, atol=1e-6)


@pytest.mark.parametrize("family,gqa", DECODERS, ids=DECODER_IDS)
def test_exception_inside_intervene_restores_model(family, gqa):
    _, model = pair(family, gqa)
    x = ids()
    before = model.forward(x)
    cap = Capture([Site(0, "resid_pre"), Site(1, "mlp_out") if family != "bert" else Site(1, "resid_post")])
    with pytest.raises(RuntimeError, match="boom"):
        with model.intervene(AblateHeads([(0, 1)]), cap, Patch({"L1.resid_pre": lambda t: t * 0})):
            model.forward(x)
            raise RuntimeError("boom")
    assert model._state.active == []
    assert all(not _own_hooks(l) and not l._forward_pre_hooks for l in model.hf.modules())
    assert torch.equal(model.forward(x), before)


def test_capture_matches_hidden_states_and_patch_restores():
    plain, model = pair("gpt2", False)
    x = ids()
    sites = [Site(l, "resid_pre") for l in range(3)] + [Site(2, "resid_post")]
    cap = Capture(sites)
    with model.intervene(cap):
        clean = model.forward(x)
    with torch.no_grad():
        hs = plain(input_ids=x, output_hidden_states=True).hidden_states
    for l in range(3):
        assert torch.allclose(cap[Site(l, "resid_pre")], hs[l], atol=1e-6)
    # corrupt the input, then patch the clean residual back in at layer 1: logits return to clean
    corrupt = x.clone()
    corrupt[:, 3] = (corrupt[:, 3] + 1) % 96
    with model.intervene(Patch({Site(1, "resid_pre"): cap[Site(1, "resid_pre")]})):
        restored = model.forward(corrupt)
    assert (model.forward(corrupt) - clean).abs().max() > 1e-3
    assert torch.allclose(restored, clean, atol=1e-5)


def test_patch_head_out_at_positions():
    _, model = pair("llama", False)
    x = ids(2, 12)
    cap = Capture(["L1.head_out"])
    with model.intervene(cap):
        model.forward(x)
    src = cap["L1.head_out.H2"]  # [b, s, d]
    other = ids(2, 12, seed=5)
    cap2 = Capture(["L1.head_out"])
    with model.intervene(Patch({"L1.head_out.H2": src[:, [4, 5]]}, positions=[4, 5]), cap2):
        model.forward(other)
    got = cap2["L1.head_out"]
    assert torch.equal(got[:, [4, 5], 2], src[:, [4, 5]])
    assert not torch.equal(got[:, 6, 2], src[:, 6])


def test_bad_heads_and_sites_raise_clear_errors():
    _, model = pair("llama", True)
    with pytest.raises(InvalidInputError, match="outside the model"):
        with model.intervene(AblateHeads([(7, 0)])):
            pass
    with pytest.raises(InvalidInputError, match="L<layer>H<head>"):
        AblateHeads("L1X2")
    with pytest.raises(InvalidInputError, match="valid modes"):
        AblateHeads([(0, 0)], mode="shuffle")
    with pytest.raises(InvalidInputError, match="valid kinds"):
        Site(0, "residual")
    with pytest.raises(InvalidInputError, match="outside the sequence"):
        interp.attention_rows(model, ids(1, 5), [9])


@pytest.mark.parametrize("family,gqa,path", [("llama", True, "self_attn.o_proj"), ("gpt2", False, "attn.c_proj")])
def test_head_write_norms_match_o_proj_inputs(family, gqa, path):
    """Per-head residual write norms equal a recomputation from the plain model's output-projection
    inputs (forward pre-hooks) and weights, over real tokens only."""
    from interp.hooks.capture import head_write_norms

    plain, model = pair(family, gqa)
    _, x, mask = left_padded()
    spec = model.spec
    got = head_write_norms(model, x, mask, layers_per_pass=2)
    inputs = {}
    hooks = [mod.register_forward_pre_hook(lambda m, a, n=name: inputs.__setitem__(n, a[0].detach()))
             for name, mod in plain.named_modules() if name.endswith(path)]
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        plain(input_ids=x, attention_mask=mask, position_ids=pos)
    for h in hooks:
        h.remove()
    names = sorted(inputs, key=lambda n: int(n.split(".")[-3]))
    assert len(names) == spec.n_layers
    real = mask.bool()
    for l, name in enumerate(names):
        mod = plain.get_submodule(name)
        w = (mod.weight if family != "gpt2" else mod.weight.t()).detach()  # [d_model, H * hd]
        z = inputs[name].view(*x.shape, spec.n_heads, spec.head_dim)
        for h in range(spec.n_heads):
            write = z[:, :, h] @ w[:, h * spec.head_dim:(h + 1) * spec.head_dim].t()
            want = write.norm(dim=-1)[real].mean()
            assert abs(float(got[l, h]) - float(want)) <= 1e-4 * float(want) + 1e-6, (l, h)
    assert got.min() > 0


def _own_hooks(module) -> list:
    """A module's forward hooks (the float32 unembedding of a low-precision model's head is its forward, no hook)."""
    return list(module._forward_hooks.values())
