"""Plotly figures of a probe result. They read the result dict (as written to JSON) only."""

from __future__ import annotations

HEAD_COLORS = {"offset": 0, "sink": 1, "mixed": 2, "content": 3}


def _go():
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    return go, make_subplots


def _x(result):
    return [l["site"] for l in result["layers"]]


def probes_by_layer(result: dict):
    """Held-out position R^2 and classification accuracies by site, with their baselines."""
    go, make_subplots = _go()
    x = _x(result)
    L = result["layers"]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("position regression (held-out R²)",
                                                        "semantic probes (held-out accuracy)"))
    fig.add_trace(go.Scatter(x=x, y=[l["position"]["r2_test"] for l in L], name="position R²", mode="lines+markers"),
                  1, 1)
    fig.add_trace(go.Scatter(x=x, y=[l["position"]["r2_shuffled"] for l in L], name="position R², shuffled labels",
                             mode="lines", line={"dash": "dash"}), 1, 1)
    for key, label in (("category", "word category"), ("token", "token identity")):
        fig.add_trace(go.Scatter(x=x, y=[l[key]["acc_test"] for l in L], name=label, mode="lines+markers"), 1, 2)
        fig.add_trace(go.Scatter(x=x, y=[l[key]["acc_shuffled"] for l in L], name=f"{label}, shuffled labels",
                                 mode="lines", line={"dash": "dash"}), 1, 2)
        fig.add_trace(go.Scatter(x=x, y=[l[key]["acc_majority"] for l in L], name=f"{label}, majority class",
                                 mode="lines", line={"dash": "dot"}), 1, 2)
    fig.update_layout(title=f"Positional and semantic probes by layer, {result['model']}")
    return fig


def angles_by_layer(result: dict):
    """Smallest principal angle between the positional and semantic subspaces, vs random subspaces."""
    go, _ = _go()
    x = _x(result)
    fig = go.Figure()
    for key in ("category", "token"):
        a = [l["angles"][key] for l in result["layers"]]
        fig.add_trace(go.Scatter(x=x, y=[v["encoding_min_angle"] for v in a], mode="lines+markers",
                                 name=f"{key}: pos[t] PCs vs class means"))
        fig.add_trace(go.Scatter(x=x, y=[(v["encoding_random"] or {}).get("min_angle_median") for v in a],
                                 mode="lines", line={"dash": "dash"}, name=f"{key}: random subspaces (median)"))
        fig.add_trace(go.Scatter(x=x, y=[v["readout_angle"] for v in a], mode="lines+markers",
                                 name=f"{key}: position probe vs {key} probe"))
    fig.update_layout(title=f"Principal angles, positional vs semantic subspaces, {result['model']}",
                      yaxis_title="smallest principal angle (degrees)", yaxis_range=[0, 90])
    return fig


def decomposition_by_layer(result: dict):
    """Stacked bars by site: the shares of variance of h = mean + pos[t] + ctx[seq] + rest held by the
    position, context (sequence) and remaining parts. Returns a plotly Figure."""
    go, _ = _go()
    x = _x(result)
    fig = go.Figure()
    for part in ("pos", "ctx", "rest"):
        fig.add_trace(go.Bar(x=x, y=[l["decomposition"][f"share_{part}"] for l in result["layers"]], name=part))
    fig.update_layout(barmode="stack", yaxis_title="share of variance",
                      title=f"h = mean + pos[t] + ctx[seq] + rest, {result['model']}")
    return fig


def pos_pca_curves(result: dict):
    """pos[t] in its top two principal components, one panel per site, coloured by position."""
    go, make_subplots = _go()
    L = [l for l in result["layers"] if l["pos_pca"].get("curve")]
    cols = min(4, max(1, len(L)))
    rows = max(1, -(-len(L) // cols))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[
        f"{l['site']} ({100 * sum(l['pos_pca']['explained_variance_ratio'][:2]):.0f}% in 2 PCs)" for l in L])
    for i, l in enumerate(L):
        c = l["pos_pca"]["curve"]
        pos = l["pos_pca"]["positions"]
        fig.add_trace(go.Scatter(x=[p[0] for p in c], y=[p[1] for p in c], mode="lines+markers", showlegend=False,
                                 marker={"color": pos, "colorscale": "Viridis", "size": 5,
                                         "showscale": i == 0, "colorbar": {"title": "position"}},
                                 line={"color": "lightgrey"}, text=[f"t={p}" for p in pos]),
                      i // cols + 1, i % cols + 1)
    fig.update_layout(title=f"Per-position means pos[t], top two principal components, {result['model']}",
                      height=320 * rows)
    return fig


def head_classes(result: dict):
    go, _ = _go()
    heads = result["heads"]["heads"]
    L = max(h["layer"] for h in heads) + 1
    H = max(h["index"] for h in heads) + 1
    z = [[None] * H for _ in range(L)]
    text = [[""] * H for _ in range(L)]
    for h in heads:
        z[h["layer"]][h["index"]] = HEAD_COLORS[h["label"]]
        text[h["layer"]][h["index"]] = (f"{h['label']}<br>offset {h['best_offset']:+d}: {h['offset_mass']:.2f}<br>"
                                        f"match {h['match_mass']:.2f} (uniform {h['match_uniform']:.2f})<br>"
                                        f"sink {h['sink_mass']:.2f}")
    scale = [[0, "#1f77b4"], [0.25, "#1f77b4"], [0.25, "#aec7e8"], [0.5, "#aec7e8"], [0.5, "#dddddd"],
             [0.75, "#dddddd"], [0.75, "#d62728"], [1, "#d62728"]]
    fig = go.Figure(go.Heatmap(z=z, text=text, hovertemplate="L%{y}H%{x}<br>%{text}<extra></extra>", zmin=-0.5,
                               zmax=3.5, colorscale=scale,
                               colorbar={"tickvals": list(HEAD_COLORS.values()), "ticktext": list(HEAD_COLORS)}))
    fig.update_layout(title=f"Heads: structure (offset, sink) vs semantic (content match), {result['model']}",
                      xaxis_title="head", yaxis_title="layer")
    return fig


def figures(result: dict) -> dict:
    """{file stem: figure} of a probes result."""
    figs = {"probes_by_layer": probes_by_layer, "angles_by_layer": angles_by_layer,
            "decomposition_by_layer": decomposition_by_layer, "pos_pca": pos_pca_curves}
    if result.get("heads"):
        figs["head_classes"] = head_classes
    return {name: f(result) for name, f in figs.items()}


def write_all(result: dict, out) -> list:
    from pathlib import Path

    from interp.figures.base import write_html

    out = Path(out)
    return [write_html(fig, out / f"{name}.html") for name, fig in figures(result).items()]
