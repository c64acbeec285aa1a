"""Induction / previous-token detection, OV copying and the causal check, on hand-built models.

tests/planted.py sets the weights so that L0H0 is a previous-token head, L1H1 an induction head
and L2H2 a negative copy head, in a Llama (RoPE, MHA), a Qwen2 (RoPE, GQA: 2 key/value heads for
4 query heads, so L1H1 reads kv head 0 and L2H2 kv head 1) and a GPT-2 (learned positions,
Conv1D) model.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import interp
from interp.analyses.circuits import FinalNormLinear, head_inputs, head_values
from interp.analyses.induction import InductionConfig, detect_induction_heads
from interp.errors import InvalidInputError
from interp.tasks.repeated import RepeatedConfig, build_repeated, build_repeated_batches, token_pool
from interp.models.tiny import tiny_random_hf

from tests.helpers import VARIANT_IDS, VARIANTS, run_cli
from tests.planted import BOS, CONTENT, planted_model

FAMILIES = ["llama", "qwen2", "gpt2"]
LENGTH = 10


def _config(**kw):
    base = dict(repeated=RepeatedConfig(lengths=(LENGTH,), n_seqs=12, seed=3), tokens=CONTENT, bos_id=BOS,
                draws=3, n_boot=500, n_perm=500, copy_k=3)
    base.update(kw)
    return InductionConfig(**base)


@pytest.fixture(scope="module", params=FAMILIES)
def planted(request):
    model = planted_model(request.param)
    return model, detect_induction_heads(model, _config()).to_dict()


def _argmax_head(grid):
    a = np.array(grid, dtype=float)
    l, h = np.unravel_index(np.nanargmax(a), a.shape)
    return f"L{l}H{h}"


def test_each_detector_ranks_its_planted_head_first(planted):
    _, d = planted
    assert d["ranked"][0]["head"] == "L1H1"
    assert d["scores"]["induction"][1][1] > 0.95
    assert _argmax_head(d["scores"]["prev_token"]) == "L0H0"
    assert d["scores"]["prev_token"][0][0] > 0.95
    assert _argmax_head(d["scores"]["copying"]) == "L1H1"
    # every content token copies itself (the sample also holds pad, id 0, with no planted value; BOS is left out)
    assert d["scores"]["copying"][1][1] > 0.99
    assert d["scores"]["copy_top_k"][1][1] >= len(CONTENT) / (len(CONTENT) + 1) - 1e-6
    # the negative head attends like an induction head but writes the opposite: not an induction head
    assert d["scores"]["induction"][2][2] > 0.8 and d["scores"]["copying"][2][2] < -0.99
    assert d["induction_heads"] == ["L1H1"]
    assert d["prev_token_heads"] == ["L0H0"]


def test_causal_check_moves_second_copy_loss(planted):
    _, d = planted
    (loss,) = d["losses"]
    assert loss["icl_score"] < -2.0  # the model learns in context: second copy far below the first
    cz = d["causal"]
    assert cz["heads"] == ["L1H1"]
    names = [c["name"] for c in cz["conditions"]]
    assert names == ["baseline", "target", "random-1", "random-2", "random-3"]
    target = cz["conditions"][1]
    assert target["vs_baseline"]["late_loss"]["diff_lo"] > 2.0  # ablating the induction head: +2 nats or more
    assert abs(target["estimates"]["icl"]["mean"]) < 0.05  # ... and the in-context learning is gone
    rnd = cz["random_pooled"]
    assert abs(rnd["vs_baseline"]["late_loss"]["diff"]) < 0.05  # matched random heads (other layer-1 heads)
    assert cz["target_vs_random_late_loss"]["diff_lo"] > 2.0
    for c in cz["conditions"][2:]:
        assert len(c["heads"]) == 1 and c["heads"][0].startswith("L1H") and c["heads"][0] != "L1H1"


def test_tl_convention_is_the_rescaled_score(planted):
    """[BOS] R R with distinct tokens: TL divides by all 2L+1 queries, ours by the L (or 2L) that have targets."""
    _, d = planted
    n = 2 * LENGTH + 1
    for name, factor in (("induction", LENGTH / n), ("duplicate", LENGTH / n), ("prev_token", (n - 1) / n)):
        np.testing.assert_allclose(np.array(d["tl_scores"][name]), np.array(d["scores"][name]) * factor, atol=2e-6)


def test_mean_and_uniform_ablation_also_break_induction():
    model = planted_model("llama")
    for mode in ("mean", "uniform"):
        d = detect_induction_heads(model, _config(mode=mode, draws=1, heads=("L1H1",))).to_dict()
        assert d["causal"]["heads_source"] == "explicit"
        assert d["causal"]["conditions"][1]["vs_baseline"]["late_loss"]["diff"] > 1.0, mode


def test_repeated_sequences_layout_and_seeding():
    pool = list(range(5, 40))
    b = build_repeated(pool, 12, 4, seed=7, bos_id=1)
    assert b.ids.shape == (4, 25) and (b.ids[:, 0] == 1).all()
    first, second = b.copy_span(0), b.copy_span(1)
    assert torch.equal(b.ids[:, first[0]:first[1]], b.ids[:, second[0]:second[1]])
    assert all(len(set(r.tolist())) == 12 for r in b.ids[:, 1:13])  # distinct within a copy
    assert set(b.ids[:, 1:].unique().tolist()) <= set(pool)
    assert torch.equal(b.ids, build_repeated(pool, 12, 4, seed=7, bos_id=1).ids)
    assert not torch.equal(b.ids, build_repeated(pool, 12, 4, seed=8, bos_id=1).ids)
    batches = build_repeated_batches(pool, RepeatedConfig(lengths=(4, 6), n_seqs=3, bos=False), bos_id=1)
    assert [x.ids.shape for x in batches] == [(3, 8), (3, 12)] and batches[0].prefix == 0
    with pytest.raises(InvalidInputError, match="distinct"):
        build_repeated(pool, 50, 2, seed=0)
    with pytest.raises(InvalidInputError):
        RepeatedConfig(lengths=(1,))
    model = interp.Model(tiny_random_hf("llama"))
    assert token_pool(model, [5, 3, 5]) == [3, 5]
    with pytest.raises(InvalidInputError, match="outside the vocabulary"):
        token_pool(model, [10_000])
    with pytest.raises(InvalidInputError, match="unknown token source"):
        token_pool(model, "bogus")
    with pytest.raises(InvalidInputError, match="needs a tokenizer"):
        token_pool(model, "corpus")
    assert token_pool(model, "auto") == token_pool(model, "vocab") == list(range(96))  # no tokenizer


def test_corpus_token_pool_uses_the_tokenizer():
    from transformers import AutoTokenizer

    from interp.organisms.train import TOKENIZER_DIR

    hf_tok = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    model = interp.Model(tiny_random_hf("llama"), tokenizer=hf_tok)
    pool = token_pool(model, "corpus", n_docs=20)
    assert 10 < len(pool) < 96 and max(pool) < 96  # ids outside this tiny model's vocabulary are dropped
    vocab = token_pool(model, "vocab")
    assert set(pool) < set(vocab) and not set(hf_tok.all_special_ids) & set(vocab)
    assert token_pool(model, "auto", n_docs=20) == pool


@pytest.mark.parametrize("family,gqa", VARIANTS, ids=VARIANT_IDS)
def test_v_weight_is_the_real_value_projection(family, gqa):
    """v_weight @ x + v_bias equals the values the attention interface receives (biases made non-zero)."""
    hf = tiny_random_hf(family, gqa)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("bias"):
                p.normal_()
    model = interp.Model(hf)
    ids = torch.randint(3, 96, (2, 7), generator=torch.Generator().manual_seed(0))
    layer = 1
    got = {}

    def grab(module, args, kwargs):
        got["x"] = args[0] if args else kwargs["hidden_states"]

    hook = model.adapter.attention(layer).register_forward_pre_hook(grab, with_kwargs=True)
    cap = interp.Capture([f"L{layer}.v"])
    try:
        with model.intervene(cap):
            model.forward(ids)
    finally:
        hook.remove()
    w, b = model.adapter.v_weight(layer), model.adapter.v_bias(layer)
    spec = model.spec
    assert tuple(w.shape) == (spec.n_kv_heads * spec.head_dim, spec.d_model)
    v = (got["x"] @ w.t() + (0 if b is None else b)).view(2, 7, spec.n_kv_heads, spec.head_dim)
    ref = cap[f"L{layer}.v"]
    assert ref.abs().max() > 1e-3  # non-trivial values
    torch.testing.assert_close(v, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family,gqa", [("qwen2", True), ("gpt2", False), ("gpt_neox", False)])
def test_head_values_match_real_head_output(family, gqa):
    """A single token attends only to itself, so each query head outputs its kv head's value."""
    model = interp.Model(tiny_random_hf(family, gqa))
    tokens = torch.arange(3, 13)
    cap = interp.Capture(["L1.head_out", "L1.resid_pre"])
    with model.intervene(cap):
        model.forward(tokens[:, None])
    x = head_inputs(model, cap["L1.resid_pre"][:, 0], [1])[1][0]
    for h in range(model.spec.n_heads):
        torch.testing.assert_close(head_values(model, 1, h, x), cap["L1.head_out"][:, 0, h], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma2"])
def test_final_norm_linearisation(family):
    """N(x) = L(x) / s(x) + N(0) for LayerNorm (centres), RMSNorm and Gemma's (1 + w) RMSNorm."""
    model = interp.Model(tiny_random_hf(family))
    norm = model.adapter.final_norm()
    with torch.no_grad():
        norm.weight.normal_()
    lin = FinalNormLinear(model)
    assert lin.centers == (family == "gpt2")
    x = torch.randn(5, model.spec.d_model) * 3
    with torch.no_grad():
        want = norm(x)
    got = lin.linear(x) / lin.scale(x)[:, None] + lin.zero
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lin.linear(2 * x + x.flip(0)), 2 * lin.linear(x) + lin.linear(x.flip(0)),
                               atol=1e-4, rtol=1e-4)


def test_cli_induction_writes_results(tmp_path, capsys):
    import json

    o = tmp_path / "o"
    code, out, err = run_cli(["detect", "induction", "-m", "tiny-random-gpt2", "--copy-lengths", "6", "--n-seqs", "3",
                           "--heads", "L1H1", "--draws", "1", "--copy-tokens", "40", "--n-boot", "100", "--json",
                           "--out", str(o)], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d == json.loads((o / "induction.json").read_text())
    assert [c["name"] for c in d["causal"]["conditions"]] == ["baseline", "target", "random-1"]
    assert np.array(d["scores"]["induction"]).shape == (3, 4)
    for stem in ("induction_heatmap", "prev_token_heatmap", "copying_heatmap", "induction_vs_copying",
                 "ablation_late_loss"):
        assert (o / f"{stem}.html").stat().st_size > 1000


@pytest.mark.parametrize("args,msg", [
    (["detect", "induction", "--tokens", "bogus"], "--tokens 'bogus'"),
    (["detect", "induction", "--mode", "shuffle"], "unknown ablation mode 'shuffle'"),
    (["detect", "induction", "--copy-lengths", "1"], "lengths must be >= 2"),
    (["detect", "induction", "--heads", "L1X"], "bad head id"),
    (["detect", "induction", "-m", "tiny-random-gpt2", "--heads", "L9H0"], "outside the model"),
    (["detect", "copy-suppression", "-m", "tiny-random-qwen2"], "has no tokenizer"),
    (["detect", "copy-suppression", "--texts", "/no/such.txt"], "/no/such.txt: no such file"),
])
def test_cli_bad_input_exits_2(args, msg, capsys, tmp_path):
    code, _, err = run_cli(args + ["--out", str(tmp_path / "o")], capsys)
    assert code == 2, err
    assert msg in err and "Traceback" not in err


def test_single_head_sweep_finds_the_circuit():
    """Ablating the previous-token or the induction head alone breaks the copy; the negative head helps it."""
    d = detect_induction_heads(planted_model("qwen2"), _config(sweep=True, draws=0)).to_dict()
    late = np.array(d["single_head_effects"]["late_loss"])
    assert late[0, 0] > 2.0 and late[1, 1] > 2.0
    assert late[2, 2] < -0.1  # without the copy suppression the second copy is predicted more confidently
    others = np.ones_like(late, dtype=bool)
    others[0, 0] = others[1, 1] = others[2, 2] = False
    assert np.abs(late[others]).max() < 1e-4
    assert np.abs(np.array(d["single_head_effects"]["early_loss"])).max() < 0.05  # first copy: nothing to copy
    # each head's change is tested (sign-flip over sequences) and adjusted over every head (Benjamini-Hochberg)
    from interp.stats import benjamini_hochberg

    sw = d["single_head_effects"]
    p, bh = np.array(sw["late_loss_p"]), np.array(sw["late_loss_p_bh"])
    assert p[0, 0] == pytest.approx(np.array(sw["late_loss_p_floor"])[0, 0]) and p[0, 0] < 0.05
    np.testing.assert_allclose(bh.ravel(), benjamini_hochberg(p.ravel()), atol=1e-7)
    assert bh[1, 1] < 0.05 and "Benjamini-Hochberg" in sw["p_method"]
    from interp.figures.heads import induction_figures

    figs = induction_figures(d)
    assert {"single_head_ablation_heatmap", "ablation_late_loss"} <= set(figs)
    assert list(figs["ablation_late_loss"].data[0].x) == ["baseline", "target"]  # draws=0: no random conditions
    assert figs["induction_vs_copying"].data[0].marker.color[4 + 1] == "crimson"  # L1H1, the induction head


@pytest.mark.parametrize("family", ["gemma3", "olmo2"])
@torch.no_grad()
def test_ov_scores_read_through_the_post_attention_norm(family):
    """Negating the post-attention norm's gain negates what the attention sublayer adds to the residual stream
    (an RMSNorm's scale ignores the sign), so every head's OV copying score must flip sign and its top-k copying
    become top-k suppression: a score that left the norm out would not move."""
    from interp.analyses.circuits import ov_scores

    model = interp.Model(tiny_random_hf(family))
    last = model.spec.n_layers - 1  # the effective embedding (through layer 0) stays as it is
    toks = torch.arange(3, 60)
    before = ov_scores(model, toks, k=3, layers=[last])
    norm = model.adapter.attn_out_module(last)
    gain = norm(torch.ones(1, model.spec.d_model)).float()[0]  # rms(ones) = 1: the gain itself (eps aside)
    assert (gain - 1).abs().max() < 1e-2  # the test's premise: a gain far from its negation
    norm.weight.sub_(2 * gain)  # Gemma's 1 + w and OLMo-2's w both become their negation
    torch.testing.assert_close(norm(torch.ones(1, model.spec.d_model)).float()[0], -gain, atol=1e-4, rtol=1e-4)
    after = ov_scores(model, toks, k=3, layers=[last])
    b, a = np.array(before["copying"][last]), np.array(after["copying"][last])
    assert np.abs(b).max() > 0.05
    np.testing.assert_allclose(a, -b, atol=1e-4)
    assert after["copy_top_k"][last] == before["suppress_top_k"][last]
    assert after["suppress_top_k"][last] == before["copy_top_k"][last]


def test_random_sets_keep_out_heads_that_nearly_pass_by_default():
    """L2H2 attends like an induction head (score 0.9) but its OV circuit suppresses: it is not ablated, and a
    random control set must not contain it unless asked (control_exclude="none"), and then it is named."""
    from interp.sites import HeadId

    model = planted_model("qwen2")
    d = detect_induction_heads(model, _config(heads=(HeadId(2, 0),), draws=3)).to_dict()
    cz = d["causal"]
    assert cz["near_target_heads"] == {"L1H1": pytest.approx(1.0, abs=0.01), "L2H2": pytest.approx(0.9, abs=0.05)}
    assert cz["excluded_from_controls"] == ["L1H1", "L2H2"] and cz["control_exclude"] == "near"
    sets = [c["heads"] for c in cz["conditions"] if c["name"].startswith("random-")]
    assert sets == [["L2H1"], ["L2H3"]] and cz["controls_overlap"] == {} and cz["controls_overlap_note"] is None
    d = detect_induction_heads(model, _config(heads=(HeadId(2, 0),), draws=3, control_exclude="none")).to_dict()
    cz = d["causal"]
    sets = [c["heads"] for c in cz["conditions"] if c["name"].startswith("random-")]
    assert ["L2H2"] in sets and cz["excluded_from_controls"] == []
    name = next(c["name"] for c in cz["conditions"] if c["heads"] == ["L2H2"])
    assert cz["controls_overlap"] == {name: ["L2H2"]} and "L2H2 (0.9" in cz["controls_overlap_note"]
    with pytest.raises(InvalidInputError, match="control_exclude"):
        _config(control_exclude="all")


def test_random_head_controls_take_head_strings():
    from interp.experiments import random_head_controls

    spec = planted_model("qwen2").spec
    c = random_head_controls(["L2H0", "L2H1"], spec, lambda hs: (), draws=2, exclude=["L2H2"])
    sets = [[str(h) for h in x.heads] for x in c.conditions]
    assert len(sets) == 2 and all(len(x) == 2 and not {"L2H0", "L2H1", "L2H2"} & set(x) for x in sets)
    assert all("L2H3" in x for x in sets)  # layer 2's one free head, the other from the nearest layer
    assert c.excluded == ["L2H2"]
