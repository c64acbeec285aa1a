"""interp.logit_lens and interp.direct_logit_attribution against hand computations with plain transformers
(hidden states, forward pre-hooks on the output projections and the final norm, the weights themselves), on tiny
random models: RMSNorm (Llama), LayerNorm with biases (GPT-2), and the parts adding up to the model's own logit
difference on every decoder architecture."""

from __future__ import annotations

import pytest
import torch

import interp
from interp.errors import InvalidInputError
from interp.models.tiny import tiny_random_hf

from tests.helpers import DECODERS, DECODER_IDS


def _ids(b=3, s=9, seed=1):
    return torch.randint(3, 90, (b, s), generator=torch.Generator().manual_seed(seed))


def _hand_run(hf, ids, o_projs, final_norm):
    """Plain HF forward recording each output projection's input and the final norm's input (pre-hooks)."""
    z, x = {}, {}
    hooks = [m.register_forward_pre_hook(lambda mod, a, l=l: z.__setitem__(l, a[0].detach().clone()))
             for l, m in enumerate(o_projs)]
    hooks.append(final_norm.register_forward_pre_hook(lambda mod, a: x.__setitem__("x", a[0].detach().clone())))
    try:
        with torch.no_grad():
            out = hf(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    return out, z, x["x"]


def test_logit_lens_is_the_final_norm_and_head_on_each_layers_residual_stream():
    hf = tiny_random_hf("llama", True, seed=0)
    model = interp.Model(tiny_random_hf("llama", True, seed=0))
    ids = _ids()
    res = interp.logit_lens(model, ids, positions=(-1, 2), targets=[5, 6, 7], top_k=3)
    out, _, _ = _hand_run(hf, ids, [l.self_attn.o_proj for l in hf.model.layers], hf.model.norm)
    L = hf.config.num_hidden_layers
    assert res.layers == ["embed"] + [f"L{l}" for l in range(L)] and res.positions == [-1, 2]
    for li in range(L):  # hidden_states[i]: the residual stream entering block i (the last one is normed by HF)
        want = hf.lm_head(hf.model.norm(out.hidden_states[li]))[:, [-1, 2]].float()
        torch.testing.assert_close(res.logits[:, li], want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(res.logits[:, L], out.logits[:, [-1, 2]].float(), atol=1e-5, rtol=1e-5)
    lp = torch.log_softmax(res.logits, -1)
    torch.testing.assert_close(res.target_logprob, torch.stack([lp[i, :, :, t] for i, t in enumerate([5, 6, 7])]))
    assert torch.equal(res.top_tokens, lp.topk(3, -1).indices)
    final = lp[:, L:]
    kl = (final.exp() * (final - lp)).sum(-1)
    torch.testing.assert_close(res.kl_to_final, kl.clamp(min=0), atol=1e-5, rtol=1e-4)
    assert float(res.kl_to_final[:, L].abs().max()) < 1e-6  # the last layer is the model's own distribution
    df = res.to_frame()
    assert len(df) == 3 * (L + 1) * 2 and {"kl_to_final", "target_prob", "top_token"} <= set(df.columns)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_direct_logit_attribution_of_each_head_by_hand(family):
    hf = tiny_random_hf(family, False, seed=0)
    model = interp.Model(tiny_random_hf(family, False, seed=0))
    ids = _ids()
    answer, wrong = [5, 9, 11], 7
    res = interp.direct_logit_attribution(model, ids, answer=answer, wrong=wrong)
    cfg = hf.config
    H = cfg.num_attention_heads if family == "llama" else cfg.n_head
    d = cfg.hidden_size if family == "llama" else cfg.n_embd
    hd = d // H
    if family == "llama":
        layers, norm, o_projs = hf.model.layers, hf.model.norm, [l.self_attn.o_proj for l in hf.model.layers]
        w_o = [p.weight for p in o_projs]  # [d, H*hd]: y = W z
    else:
        layers, norm, o_projs = hf.transformer.h, hf.transformer.ln_f, [l.attn.c_proj for l in hf.transformer.h]
        w_o = [p.weight.t() for p in o_projs]  # Conv1D keeps [in, out]
    out, z, x = _hand_run(hf, ids, o_projs, norm)
    x = x[:, -1].double()
    if family == "llama":  # RMSNorm: x / sqrt(mean(x^2) + eps) * g
        s = (x.pow(2).mean(-1) + norm.variance_epsilon).sqrt()

        def lin(v):
            return v * norm.weight.double()
        const_norm = torch.zeros(d, dtype=torch.float64)
    else:  # LayerNorm: (x - mean) / sqrt(var + eps) * g + b
        s = (x.var(-1, unbiased=False) + norm.eps).sqrt()

        def lin(v):
            return (v - v.mean(-1, keepdim=True)) * norm.weight.double()
        const_norm = norm.bias.double()
    W = hf.lm_head.weight.double()
    direction = W[answer] - W[[wrong] * 3]  # [b, d]
    for l in range(len(layers)):
        zl = z[l][:, -1].double()  # [b, H * hd]
        for h in range(H):
            c = zl[:, h * hd:(h + 1) * hd] @ w_o[l].double()[:, h * hd:(h + 1) * hd].t()  # [b, d]: W_O^h z_h
            want = (lin(c) * direction).sum(-1) / s
            torch.testing.assert_close(torch.as_tensor(res.heads[:, l, h]), want, atol=2e-5, rtol=1e-4)
    # the parts add up to the model's own logit difference
    lg = out.logits[:, -1].double()
    model_ld = lg[torch.arange(3), answer] - lg[:, wrong]
    torch.testing.assert_close(torch.as_tensor(res.logit_diff), model_ld, atol=1e-5, rtol=1e-5)
    assert res.check < 1e-4
    torch.testing.assert_close(torch.as_tensor(res.constant), (direction * const_norm).sum(-1), atol=1e-6, rtol=1e-6)
    df = res.to_frame()
    assert df[df.part == "model logit difference"].value.item() == pytest.approx(float(model_ld.mean()), abs=1e-5)


@pytest.mark.parametrize("family,gqa", DECODERS, ids=DECODER_IDS)
def test_the_parts_add_up_to_the_logit_difference_on_every_decoder(family, gqa):
    model = interp.Model(tiny_random_hf(family, gqa, seed=0))
    ids = _ids(b=2, s=8)
    lens = interp.logit_lens(model, ids)
    torch.testing.assert_close(lens.logits[:, -1, 0], model.forward(ids).float()[:, -1], atol=1e-5, rtol=1e-5)
    if family == "gemma2":  # a tanh softcap on the logits: no sum of parts
        with pytest.raises(InvalidInputError, match="softcaps its final logits"):
            interp.direct_logit_attribution(model, ids, answer=5, wrong=7)
        return
    for wrong in (7, None):
        res = interp.direct_logit_attribution(model, ids, answer=5, wrong=wrong)
        assert res.check < 1e-4, (family, wrong, res.total, res.logit_diff)
        # each layer's heads and attention bias add up to what its attention sublayer wrote
        assert abs(res.heads.sum(-1) + res.attn_bias - res.attn).max() < 1e-4


def test_bad_inputs_are_refused():
    model = interp.load_model("tiny-llama")
    with pytest.raises(InvalidInputError, match="give one token"):
        interp.direct_logit_attribution(model, "The cat sat on the", answer=" hippopotamus monster")
    with pytest.raises(InvalidInputError, match="outside the"):
        interp.logit_lens(model, torch.tensor([[5, 6, 7]]), positions=(5,))
    with pytest.raises(InvalidInputError, match="2 target tokens for 1 prompts"):
        interp.logit_lens(model, torch.tensor([[5, 6, 7]]), targets=[1, 2])
    r = interp.logit_lens(model, "The cat sat on the", targets=" cat")
    assert r.token_strings is not None and len(r.token_strings[0]) == model.spec.n_layers + 1
