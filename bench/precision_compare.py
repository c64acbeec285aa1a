"""bfloat16 vs float32 on one real model: the verdicts of the precision study (docs/precision.md).

Reads the two run folders that `bash bench/precision_runs.sh MODEL float32|bfloat16` wrote
(runs/precision/MODEL/{float32,bfloat16}/<analysis>) and compares them number by number, then loads the model in
both dtypes and compares logits on the book (max |diff|, top-1 agreement, KL, loss) and attention rows against
float32 eager attention weights. Writes bench/results/precision-MODEL.json and prints a Markdown table.

    python bench/precision_compare.py smollm2-135m [--root runs/precision] [--no-forward]
    python bench/precision_compare.py smollm2-135m --no-forward --analyses copy-suppression,streaming --merge
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats

DTYPES = ("float32", "bfloat16")


def _load(root: Path, model: str, analysis: str, name: str) -> dict | None:
    out = {}
    for d in DTYPES:
        f = root / model / d / analysis / name
        if not (root / model / d / analysis / "run.json").is_file() or not f.is_file():
            return None
        out[d] = json.loads(f.read_text())
    return out


def _cost(root: Path, model: str, analysis: str) -> dict:
    out = {}
    for d in DTYPES:
        f = root / model / d / analysis / "run.json"
        if f.is_file():
            run = json.loads(f.read_text())
            if (run.get("sweep") or {}).get("reused"):  # finished units of an earlier try reused: CPU not comparable
                out[f"{d}_reused_units"] = run["sweep"]["reused"]
                continue
            out[d] = (run.get("compute") or {}).get("cpu_seconds")
            if (run.get("compute") or {}).get("cpu"):  # the CPU the seconds were spent on (runs record it)
                out[f"{d}_cpu"] = run["compute"]["cpu"]
    if all(out.get(d) for d in DTYPES):
        out["ratio"] = out["float32"] / out["bfloat16"]
    return out


def _jaccard(a, b) -> float:
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a | b else 1.0


def _flat(m) -> np.ndarray:
    return np.asarray(m, dtype=float).ravel()


def _spearman(a, b) -> float:
    a, b = _flat(a), _flat(b)
    ok = np.isfinite(a) & np.isfinite(b)
    return float(stats.spearmanr(a[ok], b[ok]).statistic)


def _pearson(a, b) -> float:
    a, b = _flat(a), _flat(b)
    ok = np.isfinite(a) & np.isfinite(b)
    return float(stats.pearsonr(a[ok], b[ok]).statistic)


def _maxdiff(a, b) -> float:
    a, b = _flat(a), _flat(b)
    ok = np.isfinite(a) & np.isfinite(b)
    return float(np.max(np.abs(a[ok] - b[ok]))) if ok.any() else float("nan")


def _ci(c: dict) -> list:
    return [c.get("diff"), c.get("diff_lo"), c.get("diff_hi"), c.get("p_value")]


def _excludes_zero(c: dict) -> bool:
    return (c["diff_lo"] > 0) or (c["diff_hi"] < 0)


def retrieval(r: dict) -> dict:
    f, b = r["float32"], r["bfloat16"]
    return {"heads": {d: r[d]["heads"] for d in DTYPES}, "n_heads": {d: len(r[d]["heads"]) for d in DTYPES},
            "jaccard": _jaccard(f["heads"], b["heads"]), "spearman_scores": _spearman(f["scores"], b["scores"]),
            "max_abs_score_diff": _maxdiff(f["scores"], b["scores"]),
            "baseline_recall": {d: r[d]["baseline_recall"] for d in DTYPES},
            "by_length_jaccard": {d: r[d].get("jaccard_by_length") for d in DTYPES}}


def induction(r: dict) -> dict:
    f, b = r["float32"], r["bfloat16"]
    out = {"induction_heads": {d: r[d]["induction_heads"] for d in DTYPES},
           "same_set": set(f["induction_heads"]) == set(b["induction_heads"]),
           "prev_token_jaccard": _jaccard(f["prev_token_heads"], b["prev_token_heads"])}
    for k in ("induction", "prev_token", "copying"):
        out[f"spearman_{k}"] = _spearman(f["scores"][k], b["scores"][k])
        out[f"max_abs_diff_{k}"] = _maxdiff(f["scores"][k], b["scores"][k])
    tv = {d: r[d]["causal"].get("target_vs_random_late_loss") for d in DTYPES}
    out["ablation_target_vs_random"] = {d: _ci(tv[d]) for d in DTYPES if tv[d]}
    out["verdict_same"] = bool(all(tv.values()) and _excludes_zero(tv["float32"]) == _excludes_zero(tv["bfloat16"])
                               and np.sign(tv["float32"]["diff"]) == np.sign(tv["bfloat16"]["diff"]))
    return out


def ablate(r: dict) -> dict:
    out = {}
    for d in DTYPES:
        a = r[d]
        cond = {c["name"]: c for c in a["conditions"]}
        out[d] = {"heads": len(a["heads"]), "baseline": cond["baseline"]["estimates"]["recall"]["mean"],
                  "target": cond["target"]["estimates"]["recall"]["mean"],
                  "random_pooled": a["random_pooled"]["estimates"]["recall"]["mean"],
                  "target_vs_random": _ci(a["target_vs_random"])}
    tf, tb = r["float32"]["target_vs_random"], r["bfloat16"]["target_vs_random"]
    out["verdict_same"] = bool(_excludes_zero(tf) == _excludes_zero(tb) and np.sign(tf["diff"]) == np.sign(tb["diff"]))
    return out


def rope_profile(r: dict) -> dict:
    out = {}
    for d in DTYPES:
        comps = r[d].get("comparisons") or {r[d]["statistic"]: r[d]["comparison"]}
        out[d] = {k: [c["cohens_d"], *c["cohens_d_ci"], c["layer_clustered_permutation"]["p_value"]]
                  for k, c in comps.items()}
    out["spearman_usage"] = _spearman(r["float32"]["usage"], r["bfloat16"]["usage"])
    out["max_abs_usage_diff"] = _maxdiff(r["float32"]["usage"], r["bfloat16"]["usage"])
    same = []
    for k in out["float32"]:
        if k in out["bfloat16"]:
            f, b = out["float32"][k], out["bfloat16"][k]
            same.append(((f[1] > 0) or (f[2] < 0)) == ((b[1] > 0) or (b[2] < 0)) and (f[3] < 0.05) == (b[3] < 0.05))
    out["verdict_same"] = bool(same and all(same))
    return out


def _dose(x: dict) -> dict:
    """One dose of a rope-zero result: recall of the target heads, random pairs and matched heads, task loss change,
    and the two target-vs-control CIs."""
    return {"dose": x["dose"], "target": x["target"]["metric"]["mean"],
            "random_dims": x["random_pooled"]["metric"]["mean"] if x.get("random_pooled") else None,
            "matched_heads": x["matched_pooled"]["metric"]["mean"] if x.get("matched_pooled") else None,
            "task_loss_diff": ((x.get("task") or {}).get("vs_baseline") or {}).get("diff"),
            "target_vs_random": _ci(x["target_vs_random_dims"]) if x.get("target_vs_random_dims") else None,
            "target_vs_matched": _ci(x["target_vs_matched_heads"]) if x.get("target_vs_matched_heads") else None}


def rope_zero(r: dict) -> dict:
    out = {}
    for d in DTYPES:
        out[d] = [_dose(x) for x in r[d]["doses"]]
        out[d].insert(0, {"dose": 0, "target": r[d]["baseline"]["metric"]["mean"]})
    same = []
    for f, b in zip(out["float32"][1:], out["bfloat16"][1:]):
        for k in ("target_vs_random", "target_vs_matched"):
            if f.get(k) and b.get(k) and None not in f[k][:3] and None not in b[k][:3]:
                ef, eb = (f[k][1] > 0) or (f[k][2] < 0), (b[k][1] > 0) or (b[k][2] < 0)
                same.append(ef == eb)
    out["ci_verdicts_same"] = f"{sum(same)} of {len(same)}"
    out["verdict_same"] = bool(same) and all(same)
    return out


def _agreement(f, b) -> dict:
    return {"pearson": _pearson(f, b), "max_abs_diff": _maxdiff(f, b),
            "argmax_same": int(np.nanargmax(_flat(f))) == int(np.nanargmax(_flat(b)))}


def patching(r: dict) -> dict:
    """Per grid site: the per-pair mean of normalised effects (the grid's `mean`), the ratio of means (Wang et
    al.'s normalisation, the one results-real.md reports: a pair whose donor - base gap is near 0 cannot dominate
    it) and the mean effect in the metric's own units (patched - base, not normalised) compared between the
    dtypes, and each dtype's pairs with an unstable gap (`unstable_gaps`), which the per-pair mean divides by."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ioi_summary import _raw_change  # (patched - base) per pair and cell

    from interp.patching.result import pooled_effect, unstable_gaps

    out = {}
    for site in r["float32"]["sites"]:
        f, b = r["float32"]["sites"][site]["mean"], r["bfloat16"]["sites"][site]["mean"]
        out[site] = _agreement(f, b)
        if r["float32"].get("normalized") and r["bfloat16"].get("normalized"):
            pooled = {d: pooled_effect(r[d], site) for d in DTYPES}
            with np.errstate(invalid="ignore"):
                raw = {d: np.nanmean(_raw_change(r[d], site)[0], axis=0) for d in DTYPES}
            out[site]["ratio_of_means"] = _agreement(pooled["float32"], pooled["bfloat16"])
            out[site]["effect"] = _agreement(raw["float32"], raw["bfloat16"])  # metric units (logits)
            out[site]["unstable_pairs"] = {d: unstable_gaps(r[d]["donor_value"], r[d]["base_value"]) for d in DTYPES}
    out["clean_minus_corrupt"] = {d: float(np.mean(np.asarray(r[d]["base_value"]) - np.asarray(r[d]["donor_value"])))
                                  for d in DTYPES}
    ver = {d: r[d].get("verification") for d in DTYPES}
    if all(ver.values()):
        out["atp_vs_exact"] = {d: {s: {k: v[k] for k in ("pearson", "spearman", "top_k_recall") if k in v}
                                   for s, v in ver[d].items()} for d in DTYPES}
    return out


def copy_suppression(r: dict) -> dict:
    """Copy-suppression heads, their candidates' criteria and ablation CIs, and every per-head circuit score."""
    f, b = r["float32"], r["bfloat16"]
    cand = {d: {c["head"]: c for c in r[d]["candidates"]} for d in DTYPES}
    out = {"heads": {d: r[d]["copy_suppression_heads"] for d in DTYPES},
           "candidates": {d: list(cand[d]) for d in DTYPES},
           "same_heads": set(f["copy_suppression_heads"]) == set(b["copy_suppression_heads"]),
           "same_candidates": list(cand["float32"]) == list(cand["bfloat16"])}
    for k in f["scores"]:
        if k in b["scores"]:
            out[f"spearman_{k}"] = _spearman(f["scores"][k], b["scores"][k])
            out[f"max_abs_diff_{k}"] = _maxdiff(f["scores"][k], b["scores"][k])
    same = []
    for h in set(cand["float32"]) & set(cand["bfloat16"]):
        cf, cb = cand["float32"][h], cand["bfloat16"][h]
        same.append(cf["criteria"] == cb["criteria"])
        for q in ("delta_prob", "direct", "total", "self_repair"):
            ef, eb = cf["ablation"][q], cb["ablation"][q]
            same.append((ef["lo"] > 0 or ef["hi"] < 0) == (eb["lo"] > 0 or eb["hi"] < 0)
                        and np.sign(ef["mean"]) == np.sign(eb["mean"]))
    out["candidate_numbers"] = {d: {h: {"ov_suppression": c["ov_suppression"], "qk_lift": c["qk_lift"],
                                        **{q: c["ablation"][q]["mean"] for q in ("delta_prob", "direct", "self_repair")}}
                                    for h, c in cand[d].items()} for d in DTYPES}
    out["ci_verdicts_same"] = f"{sum(same)} of {len(same)}"
    out["verdict_same"] = bool(out["same_heads"] and out["same_candidates"] and same and all(same))
    return out


def rope_mode(r: dict) -> dict:
    """One band patch of the phase-or-content runs (rope-zero --mode): recall of the target heads, random pairs
    outside the band and matched heads at the band's dose, the two CI verdicts and the corpus-loss change."""
    out = {}
    for d in DTYPES:
        x = r[d]["doses"][-1]
        out[d] = {"mode": r[d]["config"].get("mode"), "baseline": r[d]["baseline"]["metric"]["mean"], **_dose(x)}
    same = []
    for k in ("target_vs_random", "target_vs_matched"):
        f, b = out["float32"][k], out["bfloat16"][k]
        if f and b and None not in f[:3] and None not in b[:3]:
            same.append(((f[1] > 0) or (f[2] < 0)) == ((b[1] > 0) or (b[2] < 0)))
    out["ci_verdicts_same"] = f"{sum(same)} of {len(same)}"
    out["verdict_same"] = bool(same) and all(same)
    return out


def rope_decompose(r: dict) -> dict:
    """The needle's attention-logit gap split by rotary band (rope-profile --decompose): gap and band shares."""
    out = {}
    for d in DTYPES:
        dec = r[d]["decomposition"]
        out[d] = {"gap": [dec["gap"]["mean"], dec["gap"]["lo"], dec["gap"]["hi"]],
                  "bands": {x["band"]: [x["estimate"]["mean"], x["share_of_gap"]] for x in dec["bands"]}}
    f, b = out["float32"]["bands"], out["bfloat16"]["bands"]
    out["max_abs_share_diff"] = max(abs(f[k][1] - b[k][1]) for k in f if k in b and f[k][1] is not None
                                    and b[k][1] is not None)
    return out


def _group_size(grid: np.ndarray) -> int:
    """The largest g such that every run of g consecutive heads of each layer holds one value (a KV group's)."""
    n = grid.shape[1]
    for g in range(n, 1, -1):
        if n % g == 0 and np.array_equal(grid, np.repeat(grid[:, ::g], g, axis=1)):
            return g
    return 1


def streaming(r: dict) -> dict:
    """The streaming scan: necessity per head or KV group, labels, the most necessary units."""
    f, b = r["float32"], r["bfloat16"]
    lf, lb = np.asarray(f["labels"], dtype=object).ravel(), np.asarray(b["labels"], dtype=object).ravel()
    # per unit: a KV group's value is repeated over its query heads (consecutive heads share a KV head)
    g = _group_size(np.asarray(f["scores"], dtype=float)) if f["unit"] == "kv_group" else 1
    units = {d: np.asarray(r[d]["scores"], dtype=float)[:, ::g] for d in DTYPES}
    sf, sb = units["float32"].ravel(), units["bfloat16"].ravel()
    top = {d: [int(i) for i in np.argsort(-units[d].ravel(), kind="stable")[:5]] for d in DTYPES}
    n = units["float32"].shape[1]
    name = (lambda i: f"L{i // n}{'G' if g > 1 else 'H'}{i % n}")
    return {"unit": f["unit"], "counts": {d: r[d]["counts"] for d in DTYPES},
            "label_agreement": float(np.mean(lf == lb)), "spearman_scores": _spearman(sf, sb),
            "max_abs_score_diff": _maxdiff(sf, sb), "top5": {d: [name(i) for i in top[d]] for d in DTYPES},
            "top5_scores": {d: [float(units[d].ravel()[i]) for i in top[d]] for d in DTYPES},
            "baseline": {d: r[d]["baseline"] for d in DTYPES}, "same_top": top["float32"][0] == top["bfloat16"][0]}


def probe(r: dict) -> dict:
    out = {}
    for d in DTYPES:
        out[d] = {L["site"]: [L["position"]["r2_test"], L["category"]["acc_test"]] for L in r[d]["layers"]}
    r2 = [(out["float32"][s][0], out["bfloat16"][s][0]) for s in out["float32"] if s in out["bfloat16"]]
    out["max_abs_r2_diff"] = max(abs(a - b) for a, b in r2)
    return out


def forward_checks(model: str, n_texts: int = 4, n_tokens: int = 1024, row_positions: int = 4) -> dict:
    """Logits of the model in bfloat16 vs float32 on book text, and attention rows of the bf16 model vs eager
    float32 attention weights at the last `row_positions` positions of one text, every layer."""
    import torch

    import interp
    from interp.tasks.texts import text_path

    path = text_path("sherlock-holmes")
    if path is None:
        raise SystemExit("the book is not fetched: interp texts fetch sherlock-holmes")
    text = Path(path).read_text(encoding="utf-8")
    m32 = interp.load_model(model, dtype="float32")
    m16 = interp.load_model(model, dtype="bfloat16")
    ids = m32.tokenizer(text[200_000:400_000], add_special_tokens=False)["input_ids"]
    chunks = torch.tensor([ids[i * n_tokens:(i + 1) * n_tokens] for i in range(n_texts)])
    maxd, sumd, agree, kls, klmax, nll = 0.0, 0.0, 0, [], 0.0, {"float32": 0.0, "bfloat16": 0.0}
    with torch.no_grad():
        for row in chunks:  # one text at a time: Gemma-3's 262k-token vocabulary makes [T, V] logits GBs
            x = row[None]
            a, b = m32.forward(x)[0].float(), m16.forward(x)[0].float()
            d = (a - b).abs()
            maxd, sumd = max(maxd, float(d.max())), sumd + float(d.mean())
            agree += int((a.argmax(-1) == b.argmax(-1)).sum())
            la, lb = torch.log_softmax(a, -1), torch.log_softmax(b, -1)
            del a, b, d
            kl = (la.exp() * (la - lb)).sum(-1)
            kls.append(float(kl.mean()))
            klmax = max(klmax, float(kl.max()))
            tgt = row[1:, None]
            nll["float32"] += float(-la[:-1].gather(-1, tgt).mean()) / len(chunks)
            nll["bfloat16"] += float(-lb[:-1].gather(-1, tgt).mean()) / len(chunks)
            del la, lb, kl
    out = {"tokens": int(chunks.numel()), "max_abs_logit_diff": maxd, "mean_abs_logit_diff": sumd / len(chunks),
           "top1_agreement": agree / chunks.numel(), "kl_mean": float(np.mean(kls)), "kl_max": klmax, "loss": nll}
    eager = interp.load_model(model, dtype="float32", attn_implementation="eager")
    pos = list(range(n_tokens - row_positions, n_tokens))
    with torch.no_grad():
        att = eager.hf(input_ids=chunks[:1], output_attentions=True).attentions
    rows = interp.attention_rows(m16, chunks[:1], pos)
    diffs = [float((rows[:, layer] - w[:, :, pos, :].float()).abs().max()) for layer, w in enumerate(att)]
    top = [float((rows[:, layer].argmax(-1) == w[:, :, pos, :].argmax(-1)).float().mean()) for layer, w in enumerate(att)]
    out["rows_vs_eager_float32"] = {"positions": pos, "max_abs_diff": max(diffs), "by_layer": diffs,
                                    "top1_source_agreement": float(np.mean(top))}
    return out


# retrieval runs of the battery -> their label; IOI resid_pre grids -> their corruption
RETRIEVAL_RUNS = {"retrieval": "retrieval heads", "retrieval-needle": "retrieval heads, scored per needle token",
                  "retrieval-long": "retrieval heads, long contexts"}
IOI_RUNS = {"ioi-resid": "ABC", "ioi-resid-both": "both names", "ioi-resid-s2": "repeated name"}


def _ci_text(c) -> str:
    return "-" if not c else f"{c[0]:+.2f} [{c[1]:+.2f}, {c[2]:+.2f}], p = {c[3]:.2g}"


def markdown(res: dict) -> str:
    """The study's rows for docs/precision.md: what was compared, the float32 and bfloat16 values, agreement."""
    a, m = res["analyses"], res["model"]
    rows = []
    for name, label in RETRIEVAL_RUNS.items():
        if name not in a:
            continue
        r = a[name]
        rows.append((f"{label} (score > 0.1)", f"{r['n_heads']['float32']}", f"{r['n_heads']['bfloat16']}",
                     f"Jaccard {r['jaccard']:.2f}; scores Spearman {r['spearman_scores']:.3f}, max abs diff "
                     f"{r['max_abs_score_diff']:.3f}; only in one: "
                     + (", ".join(sorted(set(r['heads']['float32']) ^ set(r['heads']['bfloat16']))) or "none")))
        rows.append((f"NIAH recall (all prompts{label[len('retrieval heads'):]})", f"{r['baseline_recall']['float32']:.2f}",
                     f"{r['baseline_recall']['bfloat16']:.2f}", "same" if r['baseline_recall']['float32']
                     == r['baseline_recall']['bfloat16'] else "differs"))
    if "induction" in a:
        r = a["induction"]
        rows.append(("induction heads", ", ".join(r["induction_heads"]["float32"]),
                     ", ".join(r["induction_heads"]["bfloat16"]),
                     f"{'identical' if r['same_set'] else 'DIFFERENT'}; induction scores Spearman "
                     f"{r['spearman_induction']:.4f}, max abs diff {r['max_abs_diff_induction']:.3f}; previous-token "
                     f"heads Jaccard {r['prev_token_jaccard']:.2f}"))
        t = r["ablation_target_vs_random"]
        rows.append(("ablating them vs random sets, second-copy loss (nats)", _ci_text(t.get("float32")),
                     _ci_text(t.get("bfloat16")), "same verdict" if r["verdict_same"] else "VERDICT CHANGES"))
    if "ablate" in a:
        r = a["ablate"]
        f, b = r["float32"], r["bfloat16"]
        rows.append(("(i) masking retrieval heads: recall baseline -> masked (random sets)",
                     f"{f['baseline']:.2f} -> {f['target']:.2f} ({f['random_pooled']:.2f})",
                     f"{b['baseline']:.2f} -> {b['target']:.2f} ({b['random_pooled']:.2f})", ""))
        rows.append(("(i) target vs pooled random", _ci_text(f["target_vs_random"]), _ci_text(b["target_vs_random"]),
                     "same verdict" if r["verdict_same"] else "VERDICT CHANGES"))
    if "rope-profile" in a:
        r = a["rope-profile"]
        for k in ("low_share", "qk_norm"):
            if k in r["float32"] and k in r["bfloat16"]:
                f, b = r["float32"][k], r["bfloat16"][k]
                rows.append((f"(iii) {k}: Cohen's d [CI], layer-clustered p",
                             f"{f[0]:+.2f} [{f[1]:+.2f}, {f[2]:+.2f}], p = {f[3]:.2g}",
                             f"{b[0]:+.2f} [{b[1]:+.2f}, {b[2]:+.2f}], p = {b[3]:.2g}", ""))
        rows.append(("(iii) verdicts (CI excludes 0, p < 0.05) of every statistic", "", "",
                     ("same" if r["verdict_same"] else "CHANGE") + f"; usage Spearman {r['spearman_usage']:.3f}"))
    if "rope-zero" in a:
        r = a["rope-zero"]
        for f, b in zip(r["float32"][1:], r["bfloat16"][1:]):
            if not f["dose"]:  # the unablated baseline, repeated as the grid's dose 0
                continue
            rows.append((f"(iv) {f['dose']} lowest pairs zeroed: recall (random pairs / matched heads); task loss +",
                         f"{f['target']:.2f} ({f['random_dims']:.2f} / {f['matched_heads']:.2f}); "
                         f"{f['task_loss_diff']:+.2f}",
                         f"{b['target']:.2f} ({b['random_dims']:.2f} / {b['matched_heads']:.2f}); "
                         f"{b['task_loss_diff']:+.2f}", ""))
        rows.append(("(iv) CI verdicts vs random pairs and matched heads", "", "",
                     f"{r['ci_verdicts_same']} the same"))
    for name, corrupt in IOI_RUNS.items():
        if name not in a:
            continue
        r = a[name]["resid_pre"]
        if "ratio_of_means" in r:
            q, e = r["ratio_of_means"], r["effect"]
            unstable = {d: len(r["unstable_pairs"][d]) for d in DTYPES}
            rows.append((f"IOI exact patching ({corrupt}), resid_pre every layer x position: ratio of means; effect "
                         "in logits; per-pair mean of normalised effects", "", "",
                         f"Pearson {q['pearson']:.4f}, max abs diff {q['max_abs_diff']:.3f}, same top cell: "
                         f"{q['argmax_same']}; Pearson {e['pearson']:.4f}, max abs diff {e['max_abs_diff']:.3f}; "
                         f"Pearson {r['pearson']:.4f}, max abs diff {r['max_abs_diff']:.3f} (pairs with an unstable "
                         f"gap: {unstable['float32']} / {unstable['bfloat16']})"))
            continue
        rows.append((f"IOI exact patching ({corrupt}), resid_pre every layer x position (normalised effects)", "", "",
                     f"Pearson {r['pearson']:.4f}, max abs diff {r['max_abs_diff']:.3f}, same top cell: "
                     f"{r['argmax_same']}"))
    if "ioi-atp" in a and "atp_vs_exact" in a["ioi-atp"]:
        v = a["ioi-atp"]["atp_vs_exact"]
        for site in v["float32"]:
            f, b = v["float32"][site], v["bfloat16"].get(site, {})
            rows.append((f"AtP-QK vs exact, {site}: Pearson, top-k recall",
                         f"{f.get('pearson', float('nan')):.3f}, {f.get('top_k_recall', float('nan')):.2f}",
                         f"{b.get('pearson', float('nan')):.3f}, {b.get('top_k_recall', float('nan')):.2f}", ""))
    if "copy-suppression" in a:
        r = a["copy-suppression"]
        rows.append(("copy-suppression heads (all four criteria); candidates ablated",
                     f"{', '.join(r['heads']['float32']) or 'none'}; {', '.join(r['candidates']['float32'])}",
                     f"{', '.join(r['heads']['bfloat16']) or 'none'}; {', '.join(r['candidates']['bfloat16'])}",
                     ("same heads and candidates" if r["same_heads"] and r["same_candidates"] else "DIFFERENT")
                     + f"; criteria and ablation CI verdicts {r['ci_verdicts_same']} the same; OV suppression "
                     f"Spearman {r['spearman_ov_suppression']:.3f}, QK lift Spearman {r['spearman_qk_lift']:.3f}"))
    for mode in ("zero", "phase", "content", "magnitude"):
        if f"rope-mode-{mode}" in a:
            r = a[f"rope-mode-{mode}"]

            def cell(x):
                return (f"{x['target']:.2f} ({x['random_dims']:.2f} / {x['matched_heads']:.2f}); "
                        f"{x['task_loss_diff']:+.3f}")
            rows.append((f"band patch '{mode}' ({r['float32']['dose']} lowest pairs): recall (random pairs / matched "
                         "heads); corpus loss +", cell(r["float32"]), cell(r["bfloat16"]),
                         f"CI verdicts {r['ci_verdicts_same']} the same"))
    if "rope-decompose" in a:
        r = a["rope-decompose"]
        low = {d: next(iter(r[d]["bands"].values())) for d in DTYPES}
        rows.append(("needle logit gap; lowest quarter's share", *(
            f"{r[d]['gap'][0]:+.2f} [{r[d]['gap'][1]:+.2f}, {r[d]['gap'][2]:+.2f}]; {low[d][1]:.0%}" for d in DTYPES),
            f"band shares within {r['max_abs_share_diff']:.3f}"))
    if "streaming" in a:
        r = a["streaming"]
        rows.append((f"streaming scan (per {r['unit'].replace('_', ' ')}): most necessary",
                     *(", ".join(f"{u} {v:.2f}" for u, v in zip(r["top5"][d][:3], r["top5_scores"][d][:3]))
                       for d in DTYPES),
                     f"same top unit: {r['same_top']}; necessity Spearman {r['spearman_scores']:.3f}, max abs diff "
                     f"{r['max_abs_score_diff']:.2f}; labels agree on {r['label_agreement']:.0%}"))
        rows.append(("streaming labels: far-context / streaming / mixed (query heads)",
                     *(" / ".join(str(r["counts"][d].get(k, 0)) for k in ("far-context", "streaming", "mixed"))
                       for d in DTYPES), ""))
    if "probe" in a:
        rows.append(("probes: held-out position R² per layer", "", "",
                     f"max abs diff {a['probe']['max_abs_r2_diff']:.3f}"))
    fw = res.get("forward")
    if fw:
        rows.append((f"logits on the book ({fw['tokens']} tokens)", "", "",
                     f"max abs diff {fw['max_abs_logit_diff']:.3f} (mean {fw['mean_abs_logit_diff']:.4f}); top-1 agreement "
                     f"{fw['top1_agreement']:.4f}; KL mean {fw['kl_mean']:.5f} (max {fw['kl_max']:.3f}); loss "
                     f"{fw['loss']['float32']:.4f} vs {fw['loss']['bfloat16']:.4f}"))
        rw = fw["rows_vs_eager_float32"]
        rows.append(("bf16 attention rows vs float32 eager weights (last 4 positions, every layer)", "", "",
                     f"max abs diff {rw['max_abs_diff']:.4f}; top-1 source agreement {rw['top1_source_agreement']:.3f}"))
    cost = {k: v for k, v in res["cpu_s"].items() if v.get("ratio")}
    lines = [f"**{m}**", "", "| compared | float32 | bfloat16 | agreement |", "|---|---|---|---|"]
    lines += [f"| {w} | {f} | {b} | {g} |" for w, f, b, g in rows]
    if cost:
        lines += ["", "CPU seconds (float32 / bfloat16, from run.json): " + "; ".join(
            f"{k} {v['float32']:.0f} / {v['bfloat16']:.0f} ({v['ratio']:.2f}x)" for k, v in cost.items())]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--root", default="runs/precision")
    p.add_argument("--no-forward", action="store_true", help="skip the logits / rows comparison (loads the model)")
    p.add_argument("--forward-from", default=None, help="a JSON {model: forward_checks(model)} computed before")
    p.add_argument("--out", default=None)
    p.add_argument("--analyses", default=None,
                   help="comma-separated analyses to compare (default: every one both dtypes finished), e.g. "
                        "copy-suppression,streaming")
    p.add_argument("--merge", action="store_true",
                   help="keep the analyses (and forward checks) of the existing output that this root lacks: a later "
                        "battery adds its comparisons to an earlier one's")
    a = p.parse_args(argv)
    root = Path(a.root)
    res = {"model": a.model, "dtypes": list(DTYPES), "root": str(root), "analyses": {}, "cpu_s": {}}
    table = {**{n: ("retrieval.json", retrieval) for n in RETRIEVAL_RUNS}, "induction": ("induction.json", induction),
             "ablate": ("ablation.json", ablate), "rope-profile": ("rope_profile.json", rope_profile),
             "rope-zero": ("rope_zero.json", rope_zero), **{n: ("patching.json", patching) for n in IOI_RUNS},
             "ioi-atp": ("patching.json", patching), "probe": ("probes.json", probe),
             "copy-suppression": ("copy_suppression.json", copy_suppression),
             **{f"rope-mode-{m}": ("rope_zero.json", rope_mode) for m in ("zero", "phase", "content", "magnitude")},
             "rope-decompose": ("rope_profile.json", rope_decompose), "streaming": ("streaming.json", streaming)}
    only = set(a.analyses.split(",")) if a.analyses else None
    if only and only - set(table):
        p.error(f"unknown analyses {', '.join(sorted(only - set(table)))}; known: {', '.join(table)}")
    for name, (file, fn) in table.items():
        if only and name not in only:
            continue
        r = _load(root, a.model, name, file)
        res["cpu_s"][name] = _cost(root, a.model, name)
        if r is not None:
            res["analyses"][name] = fn(r)
    if a.forward_from:
        res["forward"] = json.loads(Path(a.forward_from).read_text())[a.model]
    elif not a.no_forward:
        res["forward"] = forward_checks(a.model)
    out = Path(a.out or f"bench/results/precision-{a.model}.json")
    if a.merge and out.exists():
        old = json.loads(out.read_text())
        for name, v in old.get("analyses", {}).items():
            if name not in res["analyses"]:
                res["analyses"][name] = v
                res["cpu_s"][name] = old.get("cpu_s", {}).get(name, {})
        if "forward" not in res and "forward" in old:
            res["forward"] = old["forward"]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1, default=lambda x: None if isinstance(x, float) and math.isnan(x) else x))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
