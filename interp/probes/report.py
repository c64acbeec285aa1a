"""Markdown tables of a probe result (reads the result dict only)."""

from __future__ import annotations


def _f(x, nd=3):
    return "-" if x is None else f"{x:.{nd}f}"


def markdown(result: dict) -> str:
    s = result["store"]
    probed = s.get("n_probed_tokens")  # results before it recorded every stored token as probed
    lines = [f"**{result['model']}**: {s['n_tokens']} tokens"
             f"{'' if probed is None or probed == s['n_tokens'] else f' ({probed} probed)'}, {s['n_sequences']} sequences of up to "
             f"{s['max_length']} tokens ({(s.get('dataset') or {}).get('kind')}), {s['n_test_sequences']} held-out sequences "
             f"score every probe; special tokens excluded"
             + ((", and the first position of every sequence." if k == 1 else
                 f", and the first {k} positions of every sequence.")
                if (k := (result.get("config") or {}).get("skip_first", 0)) else "."), "",
             "| site | position R² (shuffled) | category acc (shuffled / majority) | token acc (shuffled / majority) |"
             " var share pos / ctx / rest |", "|---|---|---|---|---|"]
    for l in result["layers"]:
        p, c, k, d = l["position"], l["category"], l["token"], l["decomposition"]
        lines.append(f"| {l['site']} | {_f(p['r2_test'])} ({_f(p['r2_shuffled'])}) | {_f(c['acc_test'])} "
                     f"({_f(c['acc_shuffled'])} / {_f(c['acc_majority'])}) | {_f(k['acc_test'])} "
                     f"({_f(k['acc_shuffled'])} / {_f(k['acc_majority'])}) | {_f(d['share_pos'])} / "
                     f"{_f(d['share_ctx'])} / {_f(d['share_rest'])} |")
    lines += ["", "| site | min angle pos[t] PCs vs category means (random) | vs token means (random) | "
              "pos-probe vs category-probe angle (random) | pos[t] var in category subspace (random) | "
              "pos[t]: top-2 PCs share, participation ratio, smoothness |", "|---|---|---|---|---|---|"]
    for l in result["layers"]:
        a, t, pca = l["angles"]["category"], l["angles"]["token"], l["pos_pca"]
        ev = pca.get("explained_variance_ratio") or []

        def rnd(x):
            return _f((x or {}).get("min_angle_median"), 1)
        lines.append(f"| {l['site']} | {_f(a['encoding_min_angle'], 1)}° ({rnd(a['encoding_random'])}°) | "
                     f"{_f(t['encoding_min_angle'], 1)}° ({rnd(t['encoding_random'])}°) | "
                     f"{_f(a['readout_angle'], 1)}° ({rnd(a['readout_random'])}°) | "
                     f"{_f(a['pos_var_in_sem_subspace'])} ({_f(a['pos_var_in_sem_random'])}) | "
                     f"{_f(sum(ev[:2]) if ev else None, 2)}, {_f(pca.get('participation_ratio'), 1)}, "
                     f"{_f(pca.get('curve_smoothness'), 2)} |")
    h = result.get("heads")
    if h:
        lines += ["", "| layer | offset | sink | content | mixed | heads (label, best offset: mass / match mass) |",
                  "|---|---|---|---|---|---|"]
        for row in h["per_layer"]:
            notable = [x for x in h["heads"] if x["layer"] == row["layer"] and x["label"] in ("offset", "content")]
            desc = ", ".join(f"H{x['index']} {x['label']} {x['best_offset']:+d}: {x['offset_mass']:.2f} / "
                             f"{x['match_mass']:.2f}" for x in notable)
            lines.append(f"| {row['layer']} | {row['offset']} | {row['sink']} | {row['content']} | {row['mixed']} | "
                         f"{desc or '-'} |")
        lines.append(f"\nUniform attention would put {h['heads'][0]['match_uniform']:.3f} on content matches and "
                     f"{h['heads'][0]['offset_uniform']:.3f} on one offset.")
    return "\n".join(lines) + "\n"
