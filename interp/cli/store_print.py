"""What `interp probe` prints."""

from __future__ import annotations

from pathlib import Path


def _print_probes(r: dict, out: Path):
    from interp.cli.output import console
    from rich.table import Table

    probed = r["store"].get("n_probed_tokens", r["store"]["n_tokens"])
    t = Table(title=f"{r['model']}: probes on {probed} of {r['store']['n_tokens']} tokens "
                    f"({r['store']['n_test_sequences']} held-out sequences)")
    for col in ("site", "pos R² (shuf)", "category acc (shuf / maj)", "token acc (shuf / maj)",
                "angle cat° (random)", "var pos/ctx/rest", "pos[t]: 2 PCs, smooth"):
        t.add_column(col)
    for l in r["layers"]:
        p, c, k, a, dcm, pca = (l["position"], l["category"], l["token"], l["angles"]["category"], l["decomposition"],
                                l["pos_pca"])
        rnd = (a["encoding_random"] or {}).get("min_angle_median")
        ev = pca.get("explained_variance_ratio") or [0, 0]
        t.add_row(l["site"], f"{p['r2_test']:.3f} ({p['r2_shuffled']:.3f})",
                  f"{c['acc_test']:.3f} ({c['acc_shuffled']:.3f} / {c['acc_majority']:.3f})",
                  f"{k['acc_test']:.3f} ({k['acc_shuffled']:.3f} / {k['acc_majority']:.3f})",
                  "-" if a["encoding_min_angle"] is None else f"{a['encoding_min_angle']:.1f} ({rnd:.1f})",
                  f"{dcm['share_pos']:.2f}/{dcm['share_ctx']:.2f}/{dcm['share_rest']:.2f}",
                  f"{sum(ev[:2]):.2f}, {pca.get('curve_smoothness') or float('nan'):.2f}")
    c = console()
    c.print(t)
    if r.get("heads"):
        c.print("heads per layer (offset/sink/content/mixed): " + "  ".join(
            f"L{x['layer']}:{x['offset']}/{x['sink']}/{x['content']}/{x['mixed']}" for x in r["heads"]["per_layer"]))
    c.print(f"written to {out}/")
