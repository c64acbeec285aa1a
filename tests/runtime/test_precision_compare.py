"""bench/precision_compare.py's verdict checks: the same result in both dtypes agrees, and a changed head set,
criterion, CI or label is reported as a change (the study's tables rest on these flags)."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("precision_compare", ROOT / "bench" / "precision_compare.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ci(mean, lo, hi):
    return {"mean": mean, "lo": lo, "hi": hi}


def _copy_suppression():
    rng = np.random.default_rng(0)
    scores = {k: rng.normal(size=(4, 3)).tolist() for k in ("ov_suppression", "qk_lift")}
    cand = [{"head": h, "ov_suppression": 0.6, "qk_lift": 0.2,
             "criteria": {"ov": True, "qk": False, "dla": True, "ablation": True},
             "ablation": {"delta_prob": _ci(0.03, 0.02, 0.04), "direct": _ci(-0.9, -1.0, -0.8),
                          "total": _ci(-1.1, -1.2, -1.0), "self_repair": _ci(0.25, 0.16, 0.35)}}
            for h in ("L3H1", "L2H0")]
    return {"scores": scores, "candidates": cand, "copy_suppression_heads": []}


def test_copy_suppression_same_and_changed():
    pc = _module()
    f = _copy_suppression()
    same = pc.copy_suppression({"float32": f, "bfloat16": copy.deepcopy(f)})
    assert same["verdict_same"] and same["ci_verdicts_same"] == "10 of 10"
    assert abs(same["spearman_qk_lift"] - 1) < 1e-12 and same["max_abs_diff_qk_lift"] == 0
    b = copy.deepcopy(f)
    b["candidates"][1]["ablation"]["delta_prob"] = _ci(0.01, -0.01, 0.02)  # the CI now includes 0
    r = pc.copy_suppression({"float32": f, "bfloat16": b})
    assert not r["verdict_same"] and r["ci_verdicts_same"] == "9 of 10"
    b = copy.deepcopy(f)
    b["candidates"][0]["criteria"]["qk"] = True
    b["copy_suppression_heads"] = ["L3H1"]
    r = pc.copy_suppression({"float32": f, "bfloat16": b})
    assert not r["verdict_same"] and not r["same_heads"]


def _rope_mode(target_ci):
    dose = {"dose": 4, "target": {"metric": {"mean": 0.0}}, "random_pooled": {"metric": {"mean": 0.4}},
            "matched_pooled": {"metric": {"mean": 0.6}}, "task": {"vs_baseline": {"diff": 0.005}},
            "target_vs_random_dims": {"diff": target_ci[0], "diff_lo": target_ci[1], "diff_hi": target_ci[2],
                                      "p_value": 0.004},
            "target_vs_matched_heads": {"diff": -0.6, "diff_lo": -0.8, "diff_hi": -0.4, "p_value": 5e-4}}
    return {"config": {"mode": "magnitude"}, "baseline": {"metric": {"mean": 0.75}},
            "doses": [{"dose": 0, "target": {"metric": {"mean": 0.75}}}, dose]}


def test_rope_mode_reads_the_band_dose_and_flags_a_changed_ci():
    pc = _module()
    f = _rope_mode((-0.35, -0.57, -0.15))
    r = pc.rope_mode({"float32": f, "bfloat16": _rope_mode((-0.36, -0.58, -0.14))})
    assert r["verdict_same"] and r["float32"]["dose"] == 4 and r["float32"]["random_dims"] == 0.4
    r = pc.rope_mode({"float32": f, "bfloat16": _rope_mode((-0.1, -0.3, 0.05))})
    assert not r["verdict_same"] and r["ci_verdicts_same"] == "1 of 2"


def _streaming(scores, labels):
    counts = {k: int(sum(x == k for row in labels for x in row)) for k in ("far-context", "streaming", "mixed")}
    return {"unit": "head", "scores": scores, "labels": labels, "counts": counts, "baseline": {}}


def test_streaming_top_unit_and_label_agreement():
    pc = _module()
    s = [[0.1, 3.0], [31.9, 0.05]]
    lab = [["mixed", "far-context"], ["far-context", "streaming"]]
    r = pc.streaming({"float32": _streaming(s, lab), "bfloat16": _streaming(s, lab)})
    assert r["same_top"] and r["top5"]["float32"][:2] == ["L1H0", "L0H1"] and r["label_agreement"] == 1.0
    lab2 = [["mixed", "far-context"], ["far-context", "mixed"]]
    r = pc.streaming({"float32": _streaming(s, lab), "bfloat16": _streaming([[0.1, 40.0], [31.9, 0.05]], lab2)})
    assert not r["same_top"] and r["label_agreement"] == 0.75 and r["max_abs_score_diff"] == 37.0


def test_streaming_by_kv_group_names_groups():
    pc = _module()
    s = [[0.1, 0.1, 12.2, 12.2], [1.0, 1.0, 0.7, 0.7]]  # 2 layers x 2 groups of 2 query heads
    lab = [["mixed"] * 4, ["mixed"] * 4]
    f = dict(_streaming(s, lab), unit="kv_group")
    r = pc.streaming({"float32": f, "bfloat16": copy.deepcopy(f)})
    assert r["top5"]["float32"] == ["L0G1", "L1G0", "L1G1", "L0G0"]
    assert r["top5_scores"]["float32"][0] == 12.2



def _retrieval(heads, scores):
    return {"heads": heads, "scores": scores, "baseline_recall": 0.6, "jaccard_by_length": []}


def _patching(mean):
    return {"sites": {"resid_pre": {"mean": mean}}, "base_value": [2.0, 3.0], "donor_value": [0.5, 0.5]}


def test_markdown_names_each_retrieval_run_and_ioi_corruption():
    pc = _module()
    s = [[0.5, 0.05], [0.2, 0.0]]
    a = {"retrieval": pc.retrieval({"float32": _retrieval(["L0H0", "L1H0"], s),
                                    "bfloat16": _retrieval(["L0H0", "L1H0"], s)}),
         "retrieval-long": pc.retrieval({"float32": _retrieval(["L0H0", "L1H0"], s),
                                         "bfloat16": _retrieval(["L0H0"], [[0.5, 0.05], [0.09, 0.0]])}),
         "ioi-resid-s2": pc.patching({"float32": _patching([[1.0, 0.0], [0.5, 0.2]]),
                                      "bfloat16": _patching([[0.98, 0.01], [0.5, 0.2]])})}
    assert a["retrieval"]["jaccard"] == 1.0 and a["retrieval-long"]["jaccard"] == 0.5
    md = pc.markdown({"model": "m", "analyses": a, "cpu_s": {}})
    lines = md.splitlines()
    assert any(l.startswith("| retrieval heads (score > 0.1) | 2 | 2 | Jaccard 1.00") for l in lines)
    long_row = [l for l in lines if l.startswith("| retrieval heads, long contexts (score > 0.1)")]
    assert len(long_row) == 1 and "Jaccard 0.50" in long_row[0] and "only in one: L1H0" in long_row[0]
    assert any(l.startswith("| NIAH recall (all prompts, long contexts)") for l in lines)
    ioi = [l for l in lines if l.startswith("| IOI exact patching (repeated name)")]
    assert len(ioi) == 1 and "same top cell: True" in ioi[0]
    assert not any("(ABC)" in l or "needle token" in l for l in lines)  # runs not in the results get no row


def _normalised(effects, base, donor):
    """A normalised patching result of one site from raw effects [pair][layer][position] (patched - base)."""
    eff = np.asarray(effects, dtype=float)
    gap = np.asarray(donor) - np.asarray(base)
    per = eff / gap[:, None, None]
    return {"normalized": True, "base_value": list(base), "donor_value": list(donor),
            "sites": {"resid_pre": {"mean": np.nanmean(per, 0).tolist(), "per_pair": per.tolist()}}}


def test_patching_ratio_of_means_is_not_ruled_by_a_pair_with_a_tiny_gap():
    """Pair 2's donor - base gap is 0.05 in one dtype and 0.015 in the other: its per-pair normalised effect
    triples, the per-pair mean moves far, the ratio of means and the effect in logits barely move."""
    pc = _module()
    eff = [[[1.0, 0.1], [2.0, 0.0]], [[1.5, 0.2], [2.5, 0.1]], [[-1.0, 0.0], [-1.1, 0.0]]]
    f = _normalised(eff, base=[0.0, 0.0, 1.0], donor=[3.0, 4.0, 1.05])
    b = _normalised(np.asarray(eff) * 1.01, base=[0.0, 0.0, 1.0], donor=[3.0, 4.0, 1.015])
    r = pc.patching({"float32": f, "bfloat16": b})["resid_pre"]
    assert r["max_abs_diff"] > 10  # the per-pair mean: pair 2's -22 becomes -73
    assert r["ratio_of_means"]["max_abs_diff"] < 0.1 and r["ratio_of_means"]["argmax_same"]
    assert r["effect"]["max_abs_diff"] < 0.03  # logits: every effect moved by 1%
    assert r["unstable_pairs"] == {"float32": [2], "bfloat16": [2]}
    md = pc.markdown({"model": "m", "analyses": {"ioi-resid-s2": pc.patching({"float32": f, "bfloat16": b})},
                      "cpu_s": {}})
    row = [l for l in md.splitlines() if l.startswith("| IOI exact patching (repeated name)")][0]
    assert "ratio of means" in row and "unstable gap: 1 / 1" in row
