"""Attribution patching (AtP, AtP* QK fix): gradients equal finite differences, the QK fix closes the
saturation gap on a planted head whose keys are patched, and the built-in verification runs exact
patching on the cells it names."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import interp
from interp.patching import PatchingConfig, PatchPair, run_patching
from interp.patching.attribution import run_attribution
from interp.models.tiny import tiny_random_hf
from interp.sites import Site

from tests.planted import BOS, CONTENT, planted_model


def _pairs(vocab=90, n=2, length=7, seed=3):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        c = torch.randint(3, vocab, (length,), generator=g).tolist()
        x = list(c)
        x[2] = 3 + (x[2] + 9) % (vocab - 3)
        out.append(PatchPair(c, x, 10 + i, 20 + i))
    return out


@pytest.mark.parametrize("family,gqa", [("llama", True), ("gpt2", False)])
def test_atp_equals_finite_differences(family, gqa):
    """d/de M(a_base + e (a_donor - a_base)) at e = 0, by central differences in float64, equals the AtP
    estimate (raw metric) for residual, head-output and query cells (a sign or slice error would be
    off by far more than the 0.5% the differences allow)."""
    model = interp.Model(tiny_random_hf(family, gqa=gqa, seed=0).double())
    pairs = _pairs()
    res = run_attribution(model, pairs, PatchingConfig(sites=("resid_pre", "head_out", "q"), normalize=False),
                          method="atp", verify_top=0, verify_sample=0)
    p = pairs[0]
    clean, corrupt = torch.tensor([p.clean]), torch.tensor([p.corrupt])
    cases = [("resid_pre", Site(1, "resid_pre"), (1, 5), 5), ("resid_pre", Site(2, "resid_pre"), (2, 6), 6),
             ("head_out", Site(1, "head_out", 2), (1, 2), None), ("q", Site(2, "q", 1), (2, 1), None)]
    for site, s, cell, pos in cases:
        cap = interp.Capture([Site(s.layer, s.kind)])
        with model.intervene(cap):
            model.forward(clean)
        donor = cap[s]  # [1, T, (d)] for the head: cap of the whole site indexed by head
        eps = 1e-2  # the rotary tables stay float32 in a float64 model: smaller steps drown in their rounding

        def metric(e):
            def fn(t):
                return t + e * (donor[:, pos:pos + 1] if pos is not None else donor).to(t.dtype) - e * t
            iv = interp.Patch({s: fn}, positions=None if pos is None else [pos])
            with model.intervene(iv):
                last = model.forward(corrupt)[0, -1]
            return float(last[p.answer] - last[p.wrong])

        fd = (metric(eps) - metric(-eps)) / (2 * eps)
        per_pair = np.array(res.sites[site].per_pair, dtype=float)[0] - res.base_value[0]  # raw = base + change
        est = per_pair[cell]  # both pairs have 7 tokens: the end-aligned axis index is the token index
        assert abs(fd) > 1e-6, (site, fd)  # the cell matters (else the check is vacuous)
        assert est == pytest.approx(fd, rel=5e-3, abs=1e-7), (site, est, fd)


def _induction_key_pairs(n=6, length=8, seed=0):
    """[BOS] R R[:j]: clean predicts R[j] by induction. Corrupt replaces the FIRST copy's R[j-1]: the key
    at position j no longer says 'after R[j-1]', so the induction head L1H1 finds no match. Patching its
    keys from the clean run restores the match: a large change of a saturated attention pattern."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    j = length // 2
    for _ in range(n):
        r = torch.tensor(CONTENT)[torch.randperm(len(CONTENT), generator=g)[:length + 1]].tolist()
        seq, spare = r[:length], r[length]
        clean = [BOS] + seq + seq[:j]
        corrupt = list(clean)
        corrupt[1 + j - 1] = spare
        pairs.append(PatchPair(clean, corrupt, seq[j], spare))
    return pairs


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_qk_fix_closes_the_saturation_gap_on_a_patched_key(family):
    """Patching the induction head's keys restores the match (exact: +3 nats or more). Linear AtP sees
    nothing: the softmax is saturated, its gradient ~0. With the QK fix the pattern is recomputed, so
    the estimate becomes the exact change of the head's output taken through dM/dz: the same number as
    AtP of that head's output patch (which exact patching shows has the same effect as the keys here).
    What remains is the linearisation after the head, which the fix does not claim to remove."""
    model = planted_model(family)
    pairs = _induction_key_pairs()
    cfg = PatchingConfig(sites=("k", "head_out"), normalize=False, n_boot=50)
    exact = run_patching(model, pairs, cfg).sites
    atp = run_attribution(model, pairs, cfg, method="atp", verify_top=0, verify_sample=0).sites
    qk = run_attribution(model, pairs, cfg, method="atp-qk", verify_top=0, verify_sample=0).sites
    kv = model.spec.kv_head_of(1)  # the key-value head the induction head L1H1 reads

    base = float(np.mean(run_patching(model, pairs, PatchingConfig(sites=("k",), normalize=False,
                                                                   positions=None)).base_value))

    def at(sites, site, h):  # the (estimated) change of the metric, mean over pairs
        return float(np.array(sites[site].mean, dtype=float)[1, h]) - base

    e_k, e_z = at(exact, "k", kv), at(exact, "head_out", 1)
    assert e_k > 3.0 and e_k == pytest.approx(e_z, rel=1e-4)  # keys or head output: the same restoration
    assert abs(at(atp, "k", kv)) < 0.05 * e_k  # saturation: linear AtP misses it
    assert at(qk, "k", kv) == pytest.approx(at(atp, "head_out", 1), rel=1e-4)  # the fix: exact through the head
    assert at(qk, "k", kv) > 0.9 * e_k  # right sign and size; the rest is the (shared) downstream linearisation


def test_verification_reports_agreement_on_exact_cells():
    model = planted_model("llama")
    pairs = _induction_key_pairs()
    res = run_attribution(model, pairs, PatchingConfig(sites=("head_out", "k"), n_boot=50), method="atp-qk",
                          verify_top=3, verify_sample=4)
    v = res.verification["k"]
    assert v["n_checked"] == 3 + 4 and v["top"] == 3 and len(v["cells"]) == 7
    exact = np.array(run_patching(model, pairs, PatchingConfig(sites=("k",), n_boot=50)).sites["k"].mean,
                     dtype=float)
    for c in v["cells"]:  # the check's exact numbers are exact patching's
        layer, kvh = (int(x[1:].replace("V", "")) for x in c["cell"].split())
        assert c["exact"] == pytest.approx(exact[layer, kvh], abs=1e-6)
    assert v["top_k_recall"] is not None and 0 <= v["top_k_recall"] <= 1
    assert res.method == "atp-qk" and res.to_dict()["verification"]["head_out"]["n_checked"] == 7
    # the scale of the agreement, which a correlation cannot show: slope through 0, estimate / exact, misses
    a = np.array([c["estimate"] for c in v["cells"]])
    e = np.array([c["exact"] for c in v["cells"]])
    assert v["slope"] == pytest.approx(float((a * e).sum() / (e * e).sum()))
    worst = max(v["cells"], key=lambda c: abs(c["estimate"] - c["exact"]))
    assert v["largest_misses"][0] == worst and len(v["largest_misses"]) == 3
    assert res.to_frame()["method"].unique().tolist() == ["atp-qk"]  # the CSV says these are estimates


def test_scale_agreement_by_hand():
    from interp.patching.attribution import scale_agreement

    e = np.array([1.0, 0.5, 0.02, -0.4])
    a = np.array([0.6, 0.3, 0.05, -0.2])  # about 55-60% of the truth: a perfect correlation cannot say so
    r = scale_agreement(a, e, ["A", "B", "C", "D"], top=a[:2], top_exact=e[:2])
    assert r["slope"] == pytest.approx((0.6 + 0.15 + 0.001 + 0.08) / (1 + 0.25 + 0.0004 + 0.16))
    assert r["ratio_top"] == {"min": pytest.approx(0.6), "median": pytest.approx(0.6), "max": pytest.approx(0.6),
                              "n": 2}
    assert [m["cell"] for m in r["largest_misses"]] == ["A", "B", "D"]
    assert r["largest_misses"][0] == {"cell": "A", "estimate": 0.6, "exact": 1.0}


def test_cli_atp_says_its_values_are_estimates_and_how_their_scale_agrees(tmp_path, capsys):
    from tests.helpers import run_cli

    out = tmp_path / "atp"
    code, _, err = run_cli(["patch", "-m", "tiny-llama", "--task", "repeated", "--n-seeds", "3", "--copy-length", "6",
                            "--site", "head_out", "--method", "atp", "--verify-top", "3", "--verify-sample", "2",
                            "--n-boot", "20", "--out", str(out)], capsys)
    assert code == 0, err
    v = json.loads((out / "patching.json").read_text())["verification"]["head_out"]
    assert "head_out top cells by |atp estimate (not measured) of the normalised effect|" in err
    assert f"slope {v['slope']:.2f} (estimate ~ {v['slope']:.2f} x exact)" in err
    assert "largest misses (estimate vs exact): " + f"{v['largest_misses'][0]['cell']}: " in err
    page = (out / "index.html").read_text()
    assert "every value of these grids is a first-order estimate of the patching effect" in page
    assert f"slope {v['slope']:.2f}" in page


# ---- path patching ---------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_path_patching_previous_token_head_reaches_the_induction_head_through_its_keys(family):
    """The previous-token head L0H0 writes PREV, which the induction head L1H1 reads through its KEYS:
    the path L0H0 -> L1H1 via k carries the effect, via q it does not, and L0H0 -> an unrelated head
    (L1H3: zero query and output) carries nothing."""
    from interp.patching.path import run_path_patching

    model = planted_model(family)
    pairs = _induction_key_pairs()
    cfg = PatchingConfig(n_boot=200)
    via_k = run_path_patching(model, pairs, ["L0H0"], ["L1H1"], via="k", config=cfg)
    via_q = run_path_patching(model, pairs, ["L0H0"], ["L1H1"], via="q", config=cfg)
    other = run_path_patching(model, pairs, ["L0H0"], ["L1H3"], via="k" if family == "gpt2" else "q", config=cfg)
    k, q, o = (r.effects["L0H0"]["mean"] for r in (via_k, via_q, other))
    assert k > 0.5, via_k.effects
    assert abs(q) < 0.02 and abs(o) < 0.05 * k, (q, o, k)
    if model.spec.group_size > 1:  # GQA: the key input is the receiver's key-value head, shared by its group
        assert "feeds" in via_k.receiver_inputs[0]
    direct = run_path_patching(model, pairs, ["L0H0"], via="logits", config=cfg)
    assert abs(direct.effects["L0H0"]["mean"]) < 0.05  # PREV is not read by the unembedding directly
    with pytest.raises(interp.InvalidInputError, match="later layers"):
        run_path_patching(model, pairs, ["L1H1"], ["L0H0"], via="k")


def test_path_patching_figure_names_few_senders_and_counts_many():
    """The bar figure's title lists up to six sender heads; a longer list (every head of some layers) is named
    by its count, so the title stays on the page; the bars still name every sender."""
    from interp.patching.path import run_path_patching
    from interp.figures.patching import path_effects

    model = planted_model("llama")
    pairs = _induction_key_pairs()
    few = run_path_patching(model, pairs, ["L0H0", "L0H1"], ["L1H1"], via="k", config=PatchingConfig(n_boot=50))
    senders = [f"L{l}H{h}" for l in range(model.spec.n_layers) for h in range(model.spec.n_heads)]
    assert len(senders) > 6
    many = run_path_patching(model, pairs, senders, via="logits", config=PatchingConfig(n_boot=50))
    t_few, t_many = (path_effects(r).layout.title.text for r in (few, many))
    assert t_few.startswith("Path patching of L0H0, L0H1 via k of L1H1"), t_few
    assert t_many.startswith(f"Path patching of {len(senders)} sender heads on the logits"), t_many
    assert list(path_effects(many).data[0].x)[: len(senders)] == senders


def test_cli_path_senders_layer_wildcard_equals_the_listed_heads(tmp_path, capsys):
    """`--senders 'L1H*'` (every head of layer 1) runs the same path patching as the four heads listed."""
    import json

    from tests.helpers import run_cli

    base = ["patch", "-m", "tiny-llama", "--task", "repeated", "--n-seeds", "2", "--copy-length", "6", "--method",
            "path", "--receivers", "L2H0,L2H1", "--via", "k", "--n-boot", "20"]
    got = {}
    for tag, senders in (("star", "L1H*"), ("listed", "L1H0,L1H1,L1H2,L1H3")):
        code, _, err = run_cli(base + ["--senders", senders, "--out", str(tmp_path / tag)], capsys)
        assert code == 0, err
        got[tag] = json.loads((tmp_path / tag / "path_patching.json").read_text())
    assert got["star"]["senders"] == ["L1H0", "L1H1", "L1H2", "L1H3"] == got["listed"]["senders"]
    assert got["star"]["effects"] == got["listed"]["effects"]


@pytest.mark.parametrize("name", ["tiny-qwen2", pytest.param("tiny-llama", marks=pytest.mark.slow)])
def test_atp_qk_top_heads_on_niah_are_exact_patchings_top_heads(bundled, name):
    """On the organisms' NIAH pairs the heads exact patching ranks highest at the last token (the
    retrieval heads) are AtP-QK's top heads too, and the verification says how well the rest agrees."""
    from interp.models.loading import bundled_models
    from interp.patching import niah_pairs
    from interp.tasks.niah import NiahConfig

    if name not in bundled_models():
        pytest.fail(f"bundled organism {name} is missing from data/organisms")
    model = bundled(name)
    pairs = niah_pairs(model.tokenizer, NiahConfig(context_lengths=(512,), depths=(0.0, 0.5, 1.0), n_seeds=2))
    cfg = PatchingConfig(sites=("head_out_by_pos",), positions=(-1,), n_boot=100)
    exact = np.array(run_patching(model, pairs, cfg).sites["head_out_by_pos"].mean, dtype=float)[:, 0].ravel()
    res = run_attribution(model, pairs, cfg, method="atp-qk", verify_top=4, verify_sample=8)
    est = np.array(res.sites["head_out_by_pos"].mean, dtype=float)[:, 0].ravel()
    k = int((exact > 0.02).sum())  # the heads that move the value (qwen2: 4, llama: 2)
    assert k >= 2
    assert set(np.argsort(-est)[:k]) == set(np.argsort(-exact)[:k])
    v = res.verification["head_out_by_pos"]
    assert v["n_checked"] == 12 and v["pearson"] is not None and v["pearson"] > 0.5


def test_atp_is_exact_where_the_model_is_linear_in_the_activation():
    """With the final norm removed, the logits are linear in the last layer's MLP output: AtP equals exact
    patching there (every position), and not in earlier layers, whose changes pass through attention."""
    hf = tiny_random_hf("llama", gqa=True, seed=0)
    hf.model.norm = torch.nn.Identity()
    model = interp.Model(hf)
    pairs = _pairs(n=3)
    cfg = PatchingConfig(sites=("mlp_out",), normalize=False, n_boot=50)
    exact = np.array(run_patching(model, pairs, cfg).sites["mlp_out"].per_pair, dtype=float)
    est = np.array(run_attribution(model, pairs, cfg, method="atp", verify_top=0, verify_sample=0)
                   .sites["mlp_out"].per_pair, dtype=float)
    last = model.spec.n_layers - 1
    np.testing.assert_allclose(est[:, last], exact[:, last], atol=1e-6)
    base = np.array(run_patching(model, pairs, cfg).base_value)
    assert np.nanmax(np.abs(exact[:, last] - base[:, None])) > 5e-5  # not vacuous: 100x the float noise
    assert np.nanmax(np.abs(est[:, :last] - exact[:, :last])) > 5e-6  # > the 1e-6 that holds at the last layer


def test_atp_token_labels_follow_the_position_subset():
    """The tokens of a result are indexed like its position axis (as exact patching's), also for a subset."""
    model = interp.load_model("tiny-random-llama")
    pairs = _pairs(n=2)
    cfg = PatchingConfig(sites=("resid_pre",), positions=(-2, -1), normalize=False, n_boot=20)
    atp = run_attribution(model, pairs, cfg, method="atp", verify_top=0, verify_sample=0)
    exact = run_patching(model, pairs, cfg)
    assert atp.sites["resid_pre"].positions == exact.sites["resid_pre"].positions == [-2, -1]
    assert atp.tokens == exact.tokens and len(atp.tokens["clean"][0]) == 2
