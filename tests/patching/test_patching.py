"""Activation patching: the batched sweep equals one forward pass per cell (a naive loop written here,
on every adapter, MHA and GQA, left-padded pairs of different lengths), equals TransformerLens's
`patching` functions, and finds the known flow on the organisms' NIAH pairs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import interp
from interp.hooks.interventions import Intervention
from interp.models.loading import bundled_models
from interp.patching import GRID_SITES, PatchingConfig, PatchPair, niah_pairs, run_patching
from interp.sites import Site

from tests.helpers import FAST_DECODERS, decoder_params, run_cli

TOL = 1e-5


def _pairs(lengths=(7, 5, 7), seed=1, vocab=90):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, n in enumerate(lengths):
        c = torch.randint(3, vocab, (n,), generator=g).tolist()
        x = list(c)
        x[1] = 3 + (x[1] + 7) % (vocab - 3)  # corrupt one early token: its effect flows to the end
        x[-2] = 3 + (x[-2] + 11) % (vocab - 3)
        out.append(PatchPair(c, x, 10 + i, 20 + i, f"pair{i}"))
    return out


class _Edit(Intervention):
    """One-cell patch for the naive loop: fn(t [1, s, (heads,) d]) on one layer's q, k, v or head_out."""

    def __init__(self, layer, kind, fn):
        super().__init__(None)
        self.layer, self.kind, self.fn = layer, kind, fn
        self.edits_qkv = kind in ("q", "k", "v")
        self.edits_out = kind == "head_out"

    def edit_qkv(self, call, q, k, v):
        if call.layer == self.layer:
            t = {"q": q, "k": k, "v": v}[self.kind]
            t = self.fn(t.transpose(1, 2)).transpose(1, 2)
            q, k, v = (t if self.kind == n else x for n, x in (("q", q), ("k", k), ("v", v)))
        return q, k, v

    def edit_out(self, call, out):
        return self.fn(out) if call.layer == self.layer else out


def naive(model, pairs, site, denoise=True):
    """One forward pass per (pair, cell), unbatched, no padding: {(pair, *cell): raw logit diff}."""
    kind, axes = GRID_SITES[site]
    kind = kind.value
    spec = model.spec
    T = max(p.n for p in pairs)
    size = {"layer": spec.n_layers, "position": T, "head": spec.n_heads, "kv_head": spec.n_kv_heads}
    out = {}
    for pi, p in enumerate(pairs):
        base, donor = (p.corrupt, p.clean) if denoise else (p.clean, p.corrupt)
        cap = interp.Capture([Site(l, kind) for l in range(spec.n_layers)])
        with model.intervene(cap):
            model.forward(torch.tensor([donor]))
        for cell in np.ndindex(*[size[a] for a in axes]):
            c = dict(zip(axes, cell))
            pos = None
            if "position" in c:
                pos = p.n - (T - c["position"])  # axis index i is position i - T
                if pos < 0:
                    continue
            h = c.get("head", c.get("kv_head"))
            src = cap[Site(c["layer"], kind)]

            def fn(t, src=src, h=h, pos=pos):
                t = t.clone()
                if h is None:
                    t[:, pos] = src[:, pos]
                elif pos is None:
                    t[:, :, h] = src[:, :, h]
                else:
                    t[:, pos, h] = src[:, pos, h]
                return t

            iv = (_Edit(c["layer"], kind, fn) if kind in ("q", "k", "v", "head_out")
                  else interp.Patch({Site(c["layer"], kind): fn}))
            with model.intervene(iv):
                last = model.forward(torch.tensor([base]))[0, -1]
            out[(pi,) + cell] = float(last[p.answer] - last[p.wrong])
    return out


@pytest.mark.parametrize("family,gqa", decoder_params())
def test_batched_sweep_equals_naive_loop(family, gqa):
    """Every grid site, pairs of lengths 7, 5, 7 (left-padded together), chunks that cut across pairs."""
    from interp.models.tiny import tiny_random_hf

    model = interp.Model(tiny_random_hf(family, gqa=gqa, seed=0))
    pairs = _pairs()
    cfg = dict(sites=tuple(GRID_SITES), normalize=False, max_batch=13)
    res = run_patching(model, pairs, PatchingConfig(**cfg))  # prefix reuse and layer skipping (the defaults)
    whole = run_patching(model, pairs, PatchingConfig(**cfg, reuse_prefix=False, skip_layers=False))
    skip_only = run_patching(model, pairs, PatchingConfig(**cfg, reuse_prefix=False))
    assert res.n_forward > len(GRID_SITES)  # several chunks per site
    assert res.n_prefix_rows > 0 and whole.n_prefix_rows == 0 and res.tokens_computed < whole.tokens_computed
    assert res.n_skip_rows > 0 and whole.n_skip_rows == 0 and skip_only.n_prefix_rows == 0
    # the work: nothing skipped runs every layer of every position of every row; the bound is below all
    assert whole.n_rows <= whole.work_done <= whole.n_rows * 7 / 5  # padding: a 5-token pair in a 7-wide chunk
    assert res.work_bound <= res.work_done < skip_only.work_done < whole.work_done
    for site in GRID_SITES:
        want = naive(model, pairs, site)
        for other in (whole, skip_only):
            np.testing.assert_allclose(np.array(other.sites[site].per_pair, dtype=float),
                                       np.array(res.sites[site].per_pair, dtype=float), atol=TOL)
        got = np.array(res.sites[site].per_pair, dtype=float)
        assert np.isnan(got).sum() == got.size - len(want)  # exactly the cells a pair lacks are empty
        diffs = [abs(got[k] - v) for k, v in want.items()]
        assert max(diffs) <= TOL, (site, max(diffs))
        moved = max(abs(v - res.base_value[k[0]]) for k, v in want.items())
        # a no-op on both sides would pass the equality: some cell must move the metric (q/k only change
        # the attention pattern, which is nearly uniform in a random tiny model: a smaller bar, still
        # 100x the float noise of an unpatched run)
        assert moved > (2e-5 if site in ("q", "k") else 1e-3), (site, moved)
        mean = np.array(res.sites[site].mean, dtype=float)
        np.testing.assert_allclose(mean, np.nanmean(got, 0), atol=1e-7)  # JSON keeps 8 decimals


def test_noising_and_normalisation():
    model = interp.load_model("tiny-random-qwen2")
    pairs = _pairs((6, 6))
    raw = run_patching(model, pairs, PatchingConfig(sites=("resid_pre",), direction="noising", normalize=False))
    want = naive(model, pairs, "resid_pre", denoise=False)
    got = np.array(raw.sites["resid_pre"].per_pair, dtype=float)
    assert max(abs(got[k] - v) for k, v in want.items()) <= TOL
    norm = run_patching(model, pairs, PatchingConfig(sites=("resid_pre",), direction="noising"))
    base, donor = np.array(norm.base_value), np.array(norm.donor_value)  # noising: base = clean, donor = corrupt
    expect = (got - base[:, None, None]) / (donor - base)[:, None, None]
    np.testing.assert_allclose(np.array(norm.sites["resid_pre"].per_pair, dtype=float), expect, atol=1e-6)


def test_kv_patching_acts_on_kv_heads_and_records_query_heads():
    model = interp.load_model("tiny-random-llama")  # GQA: 4 query heads, 2 key-value heads
    res = run_patching(model, _pairs((6, 6)), PatchingConfig(sites=("k", "v", "q"), normalize=False))
    assert np.array(res.sites["k"].mean, dtype=float).shape == (model.spec.n_layers, model.spec.n_kv_heads)
    assert res.sites["k"].kv_query_heads == [[h for h in range(4) if model.spec.kv_head_of(h) == kv]
                                             for kv in range(model.spec.n_kv_heads)]
    assert np.array(res.sites["q"].mean, dtype=float).shape == (model.spec.n_layers, model.spec.n_heads)


def test_anchor_alignment_and_position_subset():
    model = interp.load_model("tiny-random-llama")
    pairs = _pairs((7, 5, 7))
    for p, a in zip(pairs, (1, 1, 1)):
        p.anchor = a  # the corrupted token
    res = run_patching(model, pairs, PatchingConfig(sites=("resid_pre",), normalize=False, align="anchor"))
    g = res.sites["resid_pre"]
    assert g.positions == list(range(-1, 6))  # offsets from the anchor that some pair has
    got = np.array(g.per_pair, dtype=float)
    end = run_patching(model, pairs, PatchingConfig(sites=("resid_pre",), normalize=False))
    e = np.array(end.sites["resid_pre"].per_pair, dtype=float)
    for pi, p in enumerate(pairs):  # the same cells, indexed from the anchor instead of the end
        for j, off in enumerate(g.positions):
            i = p.anchor + off  # token index
            if 0 <= i < p.n:
                np.testing.assert_allclose(got[pi, :, j], e[pi, :, end.sites["resid_pre"].positions.index(i - p.n)],
                                           atol=1e-6)
    sub = run_patching(model, pairs, PatchingConfig(sites=("resid_pre",), normalize=False, positions=(-1,)))
    np.testing.assert_allclose(np.array(sub.sites["resid_pre"].per_pair, dtype=float)[..., 0], e[..., -1], atol=1e-6)
    with pytest.raises(interp.InvalidInputError, match="not on the position axis"):
        run_patching(model, pairs, PatchingConfig(positions=(-99,)))


def test_result_json_frame_and_figures():
    from interp.figures.patching import patching_heatmaps

    model = interp.load_model("tiny-random-gpt2")
    res = run_patching(model, _pairs((6, 4)), PatchingConfig(sites=("resid_pre", "head_out", "head_out_by_pos")))
    d = json.loads(json.dumps(res.to_dict()))  # valid JSON (NaN cells are null)
    assert d["sites"]["resid_pre"]["axes"] == ["layer", "position"] and d["sites"]["resid_pre"]["positions"][-1] == -1
    assert len(d["tokens"]["clean"][1]) == 6 and d["tokens"]["clean"][1][:2] == ["", ""]  # the 4-token pair
    df = res.to_frame()
    hd = df[df.site == "head_out"]
    assert len(hd) == model.spec.n_layers * model.spec.n_heads and {"layer", "head", "mean", "lo", "hi"} <= set(df)
    assert (df[df.site == "resid_pre"].n_pairs.max(), df[df.site == "resid_pre"].n_pairs.min()) == (2, 1)
    figs = patching_heatmaps(d)
    assert set(figs) == {"patching_resid_pre", "patching_head_out", "patching_head_out_by_pos"}
    hm = figs["patching_resid_pre"].data[0]
    assert (hm.zmin, hm.zmax, hm.zmid) == (-1, 1, 0) and hm.colorscale[0][1] != hm.colorscale[-1][1]


def test_every_cell_has_a_sign_flip_p_and_a_bh_adjusted_one():
    """Many cells, many tests: each cell's p is the paired sign-flip test of its effect (patched - base) over the
    pairs, with its floor, beside the Benjamini-Hochberg p over the site's cells."""
    from interp.stats import benjamini_hochberg, paired_diff

    model = interp.load_model("tiny-random-gpt2")
    pairs = _pairs((5, 5, 5))
    for normalize in (True, False):
        res = run_patching(model, pairs, PatchingConfig(sites=("head_out",), normalize=normalize, n_boot=20))
        g = res.sites["head_out"]
        per = np.array(g.per_pair, dtype=float)
        eff = per if normalize else per - np.array(res.base_value)[:, None, None]
        p, floor, bh = (np.array(x, dtype=float) for x in (g.p_value, g.p_floor, g.p_bh))
        for l, h in np.ndindex(p.shape):
            col = eff[:, l, h][~np.isnan(eff[:, l, h])]
            assert p[l, h] == pytest.approx(paired_diff(col, np.zeros(col.size), n_boot=10).p_value, abs=1e-9)
        assert floor.max() == pytest.approx(2 / 8)  # three pairs: 2^3 sign patterns, p >= 0.25 at best
        np.testing.assert_allclose(bh.ravel(), benjamini_hochberg(p.ravel()), atol=1e-8)
        df = res.to_frame()
        assert {"p_value", "p_floor", "p_bh"} <= set(df.columns)
        row = df[(df["layer"] == 1) & (df["head"] == 0)]
        assert row.p_value.item() == pytest.approx(p[1, 0]) and row.p_bh.item() == pytest.approx(bh[1, 0])


# ---- TransformerLens's patching functions -----------------------------------------------------
TL_CASES = [("gpt2", False), ("gpt_neox", False), ("llama", False), ("llama", True), ("qwen2", True),
            ("mistral", True), ("gemma2", False), ("olmo2", True)]
TL_FUNCS = {"resid_pre": "get_act_patch_resid_pre", "attn_out": "get_act_patch_attn_out",
            "mlp_out": "get_act_patch_mlp_out", "head_out": "get_act_patch_attn_head_out_all_pos",
            "head_out_by_pos": "get_act_patch_attn_head_out_by_pos", "q": "get_act_patch_attn_head_q_all_pos",
            "k": "get_act_patch_attn_head_k_all_pos", "v": "get_act_patch_attn_head_v_all_pos"}


@pytest.mark.parametrize("family,gqa", [
    pytest.param(f, g, id=i, marks=() if i in FAST_DECODERS else pytest.mark.slow)
    for (f, g), i in zip(TL_CASES, [f"{f}-{'gqa' if g else 'mha'}" for f, g in TL_CASES])])
def test_equals_transformerlens_patching(family, gqa, tmp_path):
    pytest.importorskip("transformer_lens")
    import transformer_lens.patching as tlp

    from interp.models.tiny import VOCAB, tiny_random_hf

    from tests.helpers import tl_bridge

    br, _ = tl_bridge(family, gqa, tmp_path)
    model = interp.Model(tiny_random_hf(family, gqa=gqa, seed=0))
    pairs = _pairs((8, 8), vocab=VOCAB)
    clean = torch.tensor([p.clean for p in pairs])
    corrupt = torch.tensor([p.corrupt for p in pairs])
    ans = torch.tensor([p.answer for p in pairs])
    wrong = torch.tensor([p.wrong for p in pairs])

    def metric(logits):  # mean over pairs of the raw logit difference at the last position
        last = logits[:, -1]
        return (last.gather(1, ans[:, None]) - last.gather(1, wrong[:, None])).mean()

    with torch.no_grad():
        _, cache = br.run_with_cache(clean)
    res = run_patching(model, pairs, PatchingConfig(sites=tuple(TL_FUNCS), normalize=False))
    base = float(np.mean(res.base_value))
    for site, fn in TL_FUNCS.items():
        if family == "olmo2" and site in ("q", "k"):
            # TL's hook_q/hook_k are the projections before OLMo-2's q/k norm, which spans all heads, so
            # patching one head there changes every head; interp patches the post-norm, post-RoPE head
            # (the naive-loop test covers it on OLMo-2)
            continue
        with torch.no_grad():
            ref = getattr(tlp, fn)(br, corrupt, cache, metric).float().numpy()
        ours = np.array(res.sites[site].mean, dtype=float)
        assert ours.shape == ref.shape, (site, ours.shape, ref.shape)
        assert np.abs(ours - ref).max() <= TOL, (site, np.abs(ours - ref).max())
        assert np.abs(ref - base).max() > (2e-5 if site in ("q", "k") else 1e-3), f"{site}: the TL patch moves nothing"


# ---- the organisms: the known flow -------------------------------------------------------------
@pytest.mark.parametrize("name", ["tiny-qwen2", pytest.param("tiny-llama", marks=pytest.mark.slow)])
def test_niah_patching_finds_the_retrieval_heads_and_the_needle(bundled, name):
    from interp.analyses.retrieval import RetrievalConfig, detect_retrieval_heads
    from interp.tasks.niah import NiahConfig, build_niah

    if name not in bundled_models():
        pytest.fail(f"bundled organism {name} is missing from data/organisms")
    model = bundled(name)
    niah = NiahConfig(context_lengths=(512,), depths=(0.0, 0.5, 1.0), n_seeds=2)  # at 256 tokens qwen2's L1H1
    # the confident retrieval heads (score > 0.5; on this 6-prompt grid a layer-1 head of qwen2 scores just above
    # the usual 0.1, which the 80-prompt grid of the README does not find)
    det = detect_retrieval_heads(model, RetrievalConfig(niah=niah, threshold=0.5),
                                 samples=build_niah(model.tokenizer, niah))
    detected = set(det.heads)
    assert detected
    pairs = niah_pairs(model.tokenizer, niah)
    res = run_patching(model, pairs, PatchingConfig(sites=("head_out_by_pos",), positions=(-1,), n_boot=200))
    z = np.array(res.sites["head_out_by_pos"].mean, dtype=float)[:, 0, :]  # [layer, head] at the last token
    H = z.shape[1]
    ranked = [f"L{i // H}H{i % H}" for i in np.argsort(-z.ravel())]
    # every head that moves the value at the last token (> 0.05 of the logit difference) is a detected retrieval
    # head, and the strongest two are; a detected head may move little alone (the first v2 tiny-llama's L3H1
    # copied the value too, after layer 2 had written it)
    movers = {ranked[i] for i in range(len(ranked)) if np.sort(z.ravel())[::-1][i] > 0.05}
    assert len(movers) >= 2 and movers <= detected and set(ranked[:2]) <= detected, (ranked[:6], detected)
    assert np.mean(res.donor_value) - np.mean(res.base_value) > 5  # clean predicts its value, corrupt the other
    # resid_pre aligned on the needle value: the value position carries the answer into the retrieval layer (the
    # layer of the strongest head), and from the layer after it the last position does
    ret_layer = int(ranked[0][1:].split("H")[0])
    anch = run_patching(model, pairs, PatchingConfig(sites=("resid_pre",), align="anchor", positions=(0,), n_boot=200))
    at_value = np.array(anch.sites["resid_pre"].mean, dtype=float)[:, 0]
    end = run_patching(model, pairs, PatchingConfig(sites=("resid_pre",), positions=(-1,), n_boot=200))
    at_last = np.array(end.sites["resid_pre"].mean, dtype=float)[:, 0]
    assert (at_value[:ret_layer] > 0.95).all() and (at_value[ret_layer + 1:] < 0.05).all(), at_value
    assert (at_last[:ret_layer] < 0.05).all() and (at_last[ret_layer + 1:] > 0.95).all(), at_last


# ---- CLI -----------------------------------------------------------------------------------------
def test_cli_patch_end_to_end(tmp_path, capsys):
    o = tmp_path / "o"
    code, out, err = run_cli(["patch", "-m", "tiny-llama", "--task", "repeated", "--n-seeds", "4", "--copy-length", "8",
                              "--site", "resid_pre,head_out", "--n-boot", "100", "--out", str(o), "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d == json.loads((o / "patching.json").read_text())
    corrupted = d["tokens"]["clean"][0]
    assert len(corrupted) == len(d["sites"]["resid_pre"]["positions"])
    assert 0 < d["work_bound"] <= d["work_done"]
    for f in ("patching.csv", "pairs.jsonl", "patching_resid_pre.html", "patching_head_out.html"):
        assert (o / f).stat().st_size > 100, f
    assert not (o / ".partial").exists()


@pytest.mark.parametrize("lines,args,msg", [
    ([{"clean": "The secret code is Oscar", "corrupt": "The secret code of the lamp is Oscar", "answer": " A",
       "wrong": " B"}], [], "p.jsonl:1: the clean prompt is"),
    ([{"clean": "a b", "corrupt": "a c", "answer": " Oscar Oscar", "wrong": " B"}], [], "is 2 tokens"),
    ([{"clean": "a b", "corrupt": "a c", "answer": " A"}], [], "missing or empty string field(s) ['wrong']"),
    ([], [], "has no pairs"),
    ([{"clean": "a b", "corrupt": "a c", "answer": " Oscar", "wrong": " Henry"}], ["--site", "resid_mid"],
     "resid_mid is not available"),
    ([{"clean": "a b", "corrupt": "a c", "answer": " Oscar", "wrong": " Henry"}], ["--site", "bogus"],
     "unknown patching site 'bogus'"),
    ([{"clean": "a b", "corrupt": "a c", "answer": " Oscar", "wrong": " Henry"}], ["--direction", "up"],
     "unknown direction 'up'"),
])
def test_cli_patch_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, lines, args, msg):
    p = tmp_path / "p.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    o = tmp_path / "o"
    code, _, err = run_cli(["patch", "-m", "tiny-qwen2", "--pairs", str(p), "--out", str(o)] + args, capsys)
    assert code == 2 and msg in err and "Traceback" not in err, err
    assert not o.exists()


def test_a_task_the_model_cannot_do_warns_that_normalised_values_are_noise(tmp_path, capsys):
    """Pairs whose change cannot move the answer (an adjective early in a sentence vs two nouns the prompt does
    not choose between: measured median |donor - base| 0.046 nats on tiny-qwen2; the v2 tiny-qwen2 moves
    " lantern" vs " kettle" by 0.35 with red vs blue, so that pair no longer serves): every normalised cell
    divides by ~0; the run says so (one warning line, recorded in run.json). NIAH, which it does, does not."""
    import json

    from tests.helpers import run_cli

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"clean": f" The red {s} was quiet and calm, and then the old man",
                                         "corrupt": f" The blue {s} was quiet and calm, and then the old man",
                                         "answer": " compass", "wrong": " candle"}) + "\n"
                             for s in ("river", "garden", "tower", "bridge", "market", "forest", "castle", "village")))
    code, _, err = run_cli(["patch", "--model", "tiny-qwen2", "--pairs", str(pairs), "--site", "resid_pre",
                            "--positions=-1", "--out", str(tmp_path / "ioi")], capsys)
    assert code == 0, err
    assert err.count("warning: the clean and corrupt runs barely differ") == 1
    assert any("barely differ" in w for w in json.loads((tmp_path / "ioi" / "run.json").read_text())["warnings"])
    code, _, err = run_cli(["patch", "--model", "tiny-qwen2", "--task", "niah", "--lengths", "128", "--depths", "0,1",
                            "--n-seeds", "2", "--site", "resid_pre", "--positions=-1", "--out", str(tmp_path / "niah")],
                           capsys)
    assert code == 0, err
    assert "barely differ" not in err
    code, _, err = run_cli(["patch", "--model", "tiny-qwen2", "--pairs", str(pairs), "--site", "resid_pre",
                            "--positions=-1", "--raw", "--out", str(tmp_path / "raw")], capsys)
    assert code == 0 and "barely differ" not in err  # raw values divide by nothing


@pytest.mark.parametrize("family,gqa", [("llama", True), ("gemma3", True), ("gpt2", False)])
@pytest.mark.parametrize("site", ["resid_pre", "attn_out"])
def test_passes_mixing_prompt_lengths_equal_the_naive_loop(family, gqa, site, monkeypatch):
    """Pairs of 9, 3 and 7 tokens, passes of at most 5 rows: a pass computes the last w positions of rows of
    different lengths, so a short pair's row is left-padded inside the window and the cached prefix holds padding
    for the shorter pairs (both seen in the masks the cached passes get); every cell equals the naive loop."""
    from interp.models.tiny import tiny_random_hf

    model = interp.Model(tiny_random_hf(family, gqa=gqa, seed=0))
    pairs = _pairs((9, 3, 7))
    masks, cached = [], model.forward_cached

    def spy(ids, mask, cache, *a, **kw):
        masks.append((mask.clone(), ids.shape[1]))
        return cached(ids, mask, cache, *a, **kw)

    monkeypatch.setattr(model, "forward_cached", spy)
    res = run_patching(model, pairs, PatchingConfig(sites=(site,), normalize=False, max_batch=5))
    assert any(len(set(r.sum(-1).tolist())) > 1 for r, _ in masks)  # rows of different lengths in a cached pass
    assert any(bool((r[:, -w:] == 0).any()) for r, w in masks)  # a row padded inside the computed window
    assert any(bool((r[:, :-w] == 0).any()) for r, w in masks)  # padding in the cached prefix
    got = np.array(res.sites[site].per_pair, dtype=float)
    want = naive(model, pairs, site)
    assert np.isnan(got).sum() == got.size - len(want)
    assert max(abs(got[k] - v) for k, v in want.items()) <= TOL
    assert max(abs(v - res.base_value[k[0]]) for k, v in want.items()) > 1e-3  # some cell moves the metric


def test_chunks_group_by_start_layer_and_merge_only_where_a_pass_costs_more():
    """Rows of a 30-layer resid_pre grid over 8 pairs of 121-128 tokens: with no per-pass overhead every pass holds
    one start layer and one window (positions from the end), rows of different prompt lengths together, and the
    work done equals the bound W; a large overhead merges start layers and windows (fewer passes, more work);
    every row lands in exactly one pass, at or below its own start layer, inside its window."""
    from interp.patching.run import _chunks

    L, lengths = 30, np.arange(121, 129)
    cells = [(l, i, k) for l in range(L) for i, n in enumerate(lengths) for k in range(1, n + 1)]
    layer, pair, need = (np.array(x) for x in zip(*cells))
    n = lengths[pair]
    bound = np.sum((L - layer) / L * need / n)

    def work(chunks):  # each row computes the pass's last w positions of its prompt from layer l0
        return sum((L - l0) / L * np.sum(w / n[sel]) for sel, w, l0 in chunks)

    exact = _chunks(need, layer, None, 2048, overhead=0.0)
    merged = _chunks(need, layer, None, 2048, overhead=5000.0)
    for chunks in (exact, merged):
        rows = np.concatenate([sel for sel, _, _ in chunks])
        assert sorted(rows.tolist()) == list(range(len(layer)))
        assert all((layer[sel] >= l0).all() and (need[sel] <= w).all() for sel, w, l0 in chunks)
        assert all(len(sel) * w <= 2048 or len(sel) == 1 for sel, w, _ in chunks)  # the token budget
    assert all((layer[sel] == l0).all() and (need[sel] == w).all() for sel, w, l0 in exact)
    assert work(exact) == pytest.approx(bound)
    assert any(len(set(n[sel].tolist())) > 1 for sel, _, _ in exact)  # prompt lengths share passes
    assert len(merged) < len(exact) / 2 and work(merged) > bound
    assert any(len(set(need[sel].tolist())) > 1 for sel, _, _ in merged)  # a pass may span several windows


def test_prob_and_kl_metrics_by_hand():
    """--metric prob is p(answer); --metric kl is KL(donor || run) in nats, 0 for the donor run: the unpatched
    values equal plain-transformers forwards, and every patched cell equals the same metric written as a callable."""
    from interp.models.tiny import tiny_random_hf
    from tests.helpers import hf_out

    hf = tiny_random_hf("llama", True, seed=0)
    model = interp.Model(tiny_random_hf("llama", True, seed=0))
    pairs = _pairs((6, 6, 6))

    def last(seqs):
        return hf_out(hf, torch.tensor(seqs)).logits[:, -1].float()

    clean, corrupt = last([p.clean for p in pairs]), last([p.corrupt for p in pairs])
    ans = torch.tensor([p.answer for p in pairs])
    ref = torch.log_softmax(clean, -1)
    kl_base = (ref.exp() * (ref - torch.log_softmax(corrupt, -1))).sum(-1)
    index = {id(p): i for i, p in enumerate(pairs)}

    def prob(logits, ps):
        return torch.softmax(logits.float(), -1)[torch.arange(len(ps)), [p.answer for p in ps]]

    def kl(logits, ps):
        r = ref[[index[id(p)] for p in ps]]
        return (r.exp() * (r - torch.log_softmax(logits.float(), -1))).sum(-1)

    for name, fn in (("prob", prob), ("kl", kl)):
        cfg = dict(sites=("resid_pre", "head_out"), normalize=False, n_boot=10)
        got = run_patching(model, pairs, PatchingConfig(metric=name, **cfg))
        want = run_patching(model, pairs, PatchingConfig(metric=fn, **cfg))
        for site in cfg["sites"]:
            np.testing.assert_allclose(np.array(got.sites[site].per_pair, dtype=float),
                                       np.array(want.sites[site].per_pair, dtype=float), atol=1e-6)
        assert got.metric == name
        if name == "prob":
            np.testing.assert_allclose(got.base_value, torch.softmax(corrupt, -1)[torch.arange(3), ans], atol=1e-6)
            np.testing.assert_allclose(got.donor_value, torch.softmax(clean, -1)[torch.arange(3), ans], atol=1e-6)
        else:
            np.testing.assert_allclose(got.base_value, kl_base, atol=1e-5)
            np.testing.assert_allclose(got.donor_value, 0.0, atol=1e-6)
    with pytest.raises(interp.InvalidInputError, match="kl"):
        from interp.patching import run_attribution

        run_attribution(model, pairs, PatchingConfig(metric="kl"), method="atp")


UNEQUAL = [("The secret code of the green lantern is {}. What is the secret code of the green lantern? It is",
            " Oscar", " Victor"),
           ("The red door has the number {} in the old town. The number of the red door is", " seven", " three"),
           ("Note: the colour of the box is {}, keep it safe. The colour of the box is", " green", " blue")]


def _write_pairs(path, anchors=None):
    rows = [{"clean": t.format(a.strip()), "corrupt": t.format(w.strip()), "answer": a, "wrong": w}
            for t, a, w in UNEQUAL]
    for r, a in zip(rows, anchors or [None] * len(rows)):
        if a is not None:
            r["anchor"] = a
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def test_pairs_file_anchor_aligns_positions_on_each_pairs_anchor(tmp_path, capsys):
    """An "anchor" per line of a pairs file (text of the clean prompt or a token index, negative from the end):
    `--align anchor` puts it at position 0 of every pair; the axis and each cell's values checked against the
    token indices worked out here from the tokenizer and against the end-aligned run of the same pairs."""
    f = tmp_path / "pairs.jsonl"
    rows = _write_pairs(f, [" Oscar", 3, -5])
    runs = {}
    for align in ("anchor", "end"):
        o = tmp_path / align
        code, _, err = run_cli(["patch", "--model", "tiny-llama", "--pairs", str(f), "--site", "resid_pre", "--raw",
                                "--align", align, "--out", str(o)], capsys)
        assert code == 0, err
        runs[align] = json.loads((o / "patching.json").read_text())
    tok = interp.load_model("tiny-llama").tokenizer
    bos = [tok.bos_token_id] if tok("a")["input_ids"][0] == tok.bos_token_id else []
    ids = [bos + tok(r["clean"], add_special_tokens=False)["input_ids"] for r in rows]
    oscar = tok(" Oscar", add_special_tokens=False)["input_ids"]
    anchors = [ids[0].index(oscar[0]), 3, len(ids[2]) - 5]  # by hand: first " Oscar", index 3, 5th from the end
    lengths = [len(x) for x in ids]
    a, e = runs["anchor"], runs["end"]
    assert a["pair_lengths"] == e["pair_lengths"] == lengths and len(set(lengths)) > 1
    pos = a["sites"]["resid_pre"]["positions"]
    assert pos == list(range(-max(anchors), max(n - k for n, k in zip(lengths, anchors))))
    zero = pos.index(0)
    assert [t[zero] for t in a["tokens"]["clean"]] == [tok.decode([x[k]]) for x, k in zip(ids, anchors)]
    pa, pe = (np.array(r["sites"]["resid_pre"]["per_pair"], dtype=float) for r in (a, e))
    epos = e["sites"]["resid_pre"]["positions"]
    for p, (n, k) in enumerate(zip(lengths, anchors)):
        for j, off in enumerate(pos):
            i = k + off  # the token index of this cell in pair p
            if 0 <= i < n:
                np.testing.assert_allclose(pa[p, :, j], pe[p, :, epos.index(i - n)], atol=1e-5)
            else:
                assert np.isnan(pa[p, :, j]).all()
    saved = [json.loads(x)["anchor"] for x in (tmp_path / "anchor" / "pairs.jsonl").read_text().splitlines()]
    assert saved == anchors


def test_unequal_pairs_label_positions_by_offset_unless_every_pair_shares_the_token(tmp_path, capsys):
    """End-aligned pairs of different lengths: a tick names a clean token only where every pair has that position
    and the same token there, and says [k/N] where only k of the N pairs reach it; the figure says so."""
    from interp.figures.patching import _position_labels, patching_heatmaps

    f = tmp_path / "pairs.jsonl"
    _write_pairs(f)
    o = tmp_path / "p"
    code, _, err = run_cli(["patch", "--model", "tiny-llama", "--pairs", str(f), "--site", "resid_pre", "--out",
                            str(o)], capsys)
    assert code == 0, err
    d = json.loads((o / "patching.json").read_text())
    pos, toks = d["sites"]["resid_pre"]["positions"], d["tokens"]["clean"]
    labels = _position_labels(d, pos)
    n_pairs = np.array(d["sites"]["resid_pre"]["n_pairs"])[0]
    shared = seen_varied = seen_partial = 0
    for j, (p, lab) in enumerate(zip(pos, labels)):
        words = [t[j] for t in toks if t[j]]
        assert len(words) == n_pairs[j]  # the CSV's / JSON's n_pairs is the number of pairs with a token there
        if len(words) == 3 and len(set(words)) == 1:
            assert lab == f"{p} {words[0].strip()}"
            shared += 1
        elif len(words) == 3:
            assert lab == str(p)
            seen_varied += 1
        else:
            assert lab == f"{p} [{len(words)}/3]"
            seen_partial += 1
    assert labels[-1] == "-1 is" and shared and seen_varied and seen_partial
    fig = patching_heatmaps(d)["patching_resid_pre"]
    assert list(fig.data[0].x) == labels
    assert "[k/N]: only k of the N pairs have the position" in fig.layout.xaxis.title.text
