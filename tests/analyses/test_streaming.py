"""Streaming heads: the far-context necessity scan against a hand computation, its layer skipping against full
forwards, the organism's retrieval heads as its most necessary heads, and window ablation with controls."""

import numpy as np
import pytest
import torch

from interp.analyses.ablation import AblationConfig, run_ablation
from interp.analyses.head_curve import HeadCurveConfig, run_head_curve
from interp.analyses.streaming import StreamingConfig, agreement, run_streaming_scan
from interp.errors import InvalidInputError
from interp.hooks.window import WindowHeads
from interp.sites import HeadId
from interp.tasks.niah import NiahConfig, build_niah

RETRIEVAL = [f"L2H{h}" for h in range(4, 8)]  # tiny-qwen2's retrieval heads (its card)
GRID = NiahConfig(context_lengths=(512,), depths=(0.1, 0.3), n_seeds=2)


@pytest.fixture(scope="module")
def scan(bundled):
    model = bundled("tiny-qwen2")
    return model, run_streaming_scan(model, StreamingConfig(niah=GRID, window=64, sinks=4, texts=1, n_boot=500))


def test_the_organisms_retrieval_heads_are_its_most_far_context_necessary(scan):
    from interp.figures.experiments import necessity_heatmap

    _, res = scan
    assert sorted(h for h, _ in res.top(4)) == RETRIEVAL
    assert all(res.labels[2][h] == "far-context" for h in range(4, 8))
    assert res.counts["far-context"] == 4
    fig = necessity_heatmap(res)
    assert fig.data[0].text[2][4] == "●" and fig.data[0].text[0][0] == ""


def test_a_cell_equals_windowing_that_head_by_hand(scan):
    """L2H6's mean answer log-prob change, recomputed with WindowHeads and full forwards, prompt by prompt."""
    model, res = scan
    diffs = []
    for s in build_niah(model.tokenizer, GRID):
        ids = torch.tensor([list(s.input_ids) + list(s.answer_ids)])
        n = len(s.answer_ids)
        tgt = ids[0, -n:]

        def logprob():
            lp = torch.log_softmax(model.forward(ids)[0, -n - 1:-1].float(), -1)
            return float(lp[torch.arange(n), tgt].sum())

        base = logprob()
        with model.intervene(WindowHeads(["L2H6"], window=64, sinks=4)):
            diffs.append(logprob() - base)
    assert res.logprob["diff"][2][6] == pytest.approx(np.mean(diffs), abs=1e-4)
    assert res.scores[2][6] == pytest.approx(-np.mean(diffs), abs=1e-4)


def test_layer_skipping_changes_no_number_and_meets_the_work_bound(bundled):
    model = bundled("tiny-qwen2")
    small = NiahConfig(context_lengths=(256,), depths=(0.2,), n_seeds=1)
    a = run_streaming_scan(model, StreamingConfig(niah=small, window=32, sinks=2, texts=1, n_boot=50, n_perm=50))
    b = run_streaming_scan(model, StreamingConfig(niah=small, window=32, sinks=2, texts=1, n_boot=50, n_perm=50,
                                                  skip_layers=False))
    np.testing.assert_allclose(np.array(a.logprob["diff"]), np.array(b.logprob["diff"]), atol=1e-4)
    np.testing.assert_allclose(np.array(a.loss["diff"]), np.array(b.loss["diff"]), atol=1e-5)
    assert a.work["forwards"] == pytest.approx(a.work["work_bound"])
    assert b.work["forwards"] == b.work["one_forward_per_unit"] > a.work["forwards"]


def test_by_group_windows_whole_kv_groups(bundled):
    model = bundled("tiny-qwen2")
    small = NiahConfig(context_lengths=(256,), depths=(0.2,), n_seeds=1)
    res = run_streaming_scan(model, StreamingConfig(niah=small, window=32, sinks=2, texts=0, by_group=True,
                                                    n_boot=50, n_perm=50))
    g = model.spec.n_heads // model.spec.n_kv_heads
    assert res.unit == "kv_group" and res.loss["diff"] is None
    for row in res.scores:  # every query head of a group carries its group's value
        assert all(len(set(row[i:i + g])) == 1 for i in range(0, len(row), g))


def test_agreement_with_a_detection():
    class R:  # the fields agreement reads
        scores = [[0.0, 3.0], [2.0, 1.0]]
        counts = {"far-context": 1}
    a = agreement(R(), [[0.1, 0.9], [0.5, 0.2]], streaming_mass=[[0.9, 0.1], [0.3, 0.6]], k=2)
    assert a["top_k_overlap"] == 2 and a["spearman_retrieval"] == pytest.approx(1.0)
    assert a["spearman_attention_mass"] == pytest.approx(-1.0)
    with pytest.raises(InvalidInputError, match="not the same model"):
        agreement(R(), [[0.1, 0.9, 0.3]])


def test_a_window_wider_than_the_prompts_is_refused(bundled):
    with pytest.raises(InvalidInputError, match="fit inside the window"):
        run_streaming_scan(bundled("tiny-qwen2"), StreamingConfig(
            niah=NiahConfig(context_lengths=(128,), depths=(0.5,), n_seeds=1), window=512))


def test_windowing_the_retrieval_heads_removes_recall_and_random_heads_keep_it(bundled):
    model = bundled("tiny-qwen2")
    cfg = AblationConfig(heads=tuple(HeadId.parse(h) for h in RETRIEVAL), niah=GRID, mode="window", window=64,
                         sinks=4, draws=3, random_pool="any", n_boot=500, n_perm=500)
    res = run_ablation(model, cfg)
    assert res.intervention["mode"] == "window" and res.intervention["window"] == 64
    assert res.condition("target").estimates["recall"]["mean"] == 0.0
    assert res.random_pooled.estimates["recall"]["mean"] == 1.0
    assert res.target_vs_random["diff_hi"] < 0


def test_the_keep_curve_in_window_mode_reports_the_kv_memory_kept(bundled):
    model = bundled("tiny-qwen2")
    ranked = tuple(HeadId.parse(h) for h in RETRIEVAL) + tuple(
        HeadId(l, h) for l in range(4) for h in range(8) if f"L{l}H{h}" not in RETRIEVAL)
    small = NiahConfig(context_lengths=(512,), depths=(0.3,), n_seeds=2)
    res = run_head_curve(model, HeadCurveConfig(ranked=ranked, ks=(0, 4), kind="keep", niah=small, mode="window",
                                                window=64, sinks=4, draws=1, n_boot=200, n_perm=200))
    by_k = {p.k: p for p in res.points}
    assert by_k[4].target["metric"]["mean"] == 1.0 and by_k[0].target["metric"]["mean"] == 0.0
    kv = by_k[4].kv_kept
    spec = model.spec
    # keeping L2H4-7 (all of L2's second KV group) full: that group keeps its keys, every other group 68 of them
    n_kv = spec.n_layers * spec.n_kv_heads
    want = (1 * kv["context"] + (n_kv - 1) * 68) / (n_kv * kv["context"])
    assert kv["target"] == pytest.approx(want) and kv["target_windowed_kv_heads"] == n_kv - 1
    assert by_k[0].kv_kept["target"] == pytest.approx(68 / kv["context"])
    assert res.reach["target_k"] == 4 and res.reach["kv_kept"] == kv["target"]  # the budget that reaches 95%
    from interp.figures.experiments import kv_frontier

    fig = kv_frontier(res)  # the frontier figure: recall against the KV share each point keeps
    assert list(fig.data[0].x) == sorted(p.kv_kept["target"] for p in res.points)
    assert list(fig.data[0].y) == [by_k[0].target["metric"]["mean"], by_k[4].target["metric"]["mean"]]


def test_curve_rankings_by_necessity_and_by_attention_mass(scan, tmp_path):
    import json
    from types import SimpleNamespace

    from interp.analyses.pipeline import detection_ranking

    model, res = scan
    (tmp_path / "streaming.json").write_text(json.dumps(res.to_dict()))
    ranked, source = detection_ranking(SimpleNamespace(model_name=model.name), str(tmp_path))
    assert [str(h) for h in ranked[:4]] == [h for h, _ in res.top(4)] and "necessity" in source
    with pytest.raises(InvalidInputError, match="not 'other'"):
        detection_ranking(SimpleNamespace(model_name="other"), str(tmp_path))
    (tmp_path / "streaming.json").write_text(json.dumps({"model": model.name, "scores": "damaged"}))
    with pytest.raises(InvalidInputError, match="not a streaming.json written by interp"):
        detection_ranking(SimpleNamespace(model_name=model.name), str(tmp_path))
    det = SimpleNamespace(scores=[[0.0, 0.9], [0.5, 0.1]], streaming=[[0.2, 0.9], [0.1, 0.6]])
    exp = SimpleNamespace(selection=SimpleNamespace(source="retrieval (detected)", detector_result=det, detection={}))
    assert [str(h) for h in detection_ranking(exp, "attention-mass")[0]] == ["L1H0", "L0H0", "L1H1", "L0H1"]
    assert [str(h) for h in detection_ranking(exp, "retrieval")[0]] == ["L0H1", "L1H0", "L1H1", "L0H0"]


def test_one_prompt_decides_no_label_and_says_so(bundled):
    from interp.errors import InterpWarning

    with pytest.warns(InterpWarning, match="rest on 1 NIAH prompt"):
        res = run_streaming_scan(bundled("tiny-qwen2"), StreamingConfig(
            niah=NiahConfig(context_lengths=(256,), depths=(0.2,), n_seeds=1), window=32, texts=0, n_boot=50,
            n_perm=50))
    assert res.counts == {"far-context": 0, "streaming": 0, "mixed": 32}
    assert sorted(h for h, _ in res.top(4)) == RETRIEVAL  # the ranking is still there
