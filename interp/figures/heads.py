"""Figures of the induction and copy-suppression analyses. Reads result dicts (as written to JSON)."""

from __future__ import annotations

import math

from interp.figures.base import ci_error_y, reads_result


def _go():
    import plotly.graph_objects as go

    return go


def _grid(scores):
    """[layer][head] with None -> NaN (plotly leaves those cells empty)."""
    return [[math.nan if v is None else v for v in row] for row in scores]


LABELS = {"induction": "induction score", "prev_token": "previous-token score", "duplicate": "duplicate-token score",
          "copying": "OV copying score", "copy_top_k": "OV copy top-k", "ov_suppression": "OV self-suppression",
          "ov_self_z": "OV self z-score", "qk_circuit": "QK circuit score", "qk_lift": "QK lift over uniform",
          "dla_attended": "direct logit effect (nats)", "late_loss_change": "second-copy loss change (nats)"}


def score_heatmap(result: dict, name: str, title: str, marked=(), colorscale: str = "Viridis", zmid=None,
                  zrange=None):
    """Layer x head heatmap of result["scores"][name]; heads in `marked` get a dot. `zrange` fixes the colour
    range (scores in [0, 1] are shown on [0, 1], so noise does not look strong); the colour bar says so."""
    from interp.figures.base import head_grid_axes

    go = _go()
    z = _grid(result["scores"][name])
    marked = set(marked)
    text = [[("●" if f"L{l}H{h}" in marked else "") for h in range(len(row))] for l, row in enumerate(z)]
    label = LABELS.get(name, name.replace("_", " "))
    rng = {"zmin": zrange[0], "zmax": zrange[1]} if zrange else {}
    bar = f"{label}<br>(fixed {zrange[0]:g} to {zrange[1]:g})" if zrange else label
    fig = go.Figure(go.Heatmap(z=z, colorscale=colorscale, zmid=zmid, text=text, texttemplate="%{text}", **rng,
                               colorbar={"title": bar},
                               hovertemplate="layer %{y} head %{x}: %{z:.3f}<extra></extra>"))
    fig.update_layout(title=f"{title}, {result['model']}")
    head_grid_axes(fig, len(z[0]) if z else 0, len(z))
    return fig


def _scatter(result: dict, x: str, y: str, title: str, marked=()):
    go = _go()
    xs, ys, labels, colors = [], [], [], []
    for l, row in enumerate(result["scores"][x]):
        for h, v in enumerate(row):
            w = result["scores"][y][l][h]
            if v is None or w is None:
                continue
            xs.append(v)
            ys.append(w)
            labels.append(f"L{l}H{h}")
            colors.append("crimson" if f"L{l}H{h}" in set(marked) else "steelblue")
    # labels only on the marked heads (every head labelled overlaps): the rest show theirs on hover
    shown = [t if c == "crimson" else "" for t, c in zip(labels, colors)]
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="markers+text", text=shown, customdata=labels,
                               textposition="top center", marker={"color": colors, "size": 9},
                               hovertemplate="%{customdata}: %{x:.3f}, %{y:.3f}<extra></extra>"))
    fig.update_layout(title=f"{title}, {result['model']} (red: marked heads)",
                      xaxis_title=LABELS.get(x, x.replace("_", " ")), yaxis_title=LABELS.get(y, y.replace("_", " ")))
    return fig


def _ci_bars(names, estimates, title, yaxis, colors=None):
    go = _go()
    means = [e["mean"] for e in estimates]
    fig = go.Figure(go.Bar(x=names, y=means, marker_color=colors, text=[f"{m:.2f}" for m in means],
                           textposition="outside", cliponaxis=False, error_y=ci_error_y(estimates)))
    fig.update_layout(title=title, yaxis_title=yaxis, xaxis_title="condition")
    return fig


@reads_result
def induction_figures(result: dict) -> dict:
    """{file stem: figure}: heatmaps per score, induction vs copying scatter, causal check bars."""
    ind = result["induction_heads"]
    figs = {
        "induction_heatmap": score_heatmap(result, "induction", "Induction score (● induction heads)", ind,
                                           zrange=(0, 1)),
        "prev_token_heatmap": score_heatmap(result, "prev_token", "Previous-token score (● previous-token heads)",
                                            result["prev_token_heads"], "Cividis", zrange=(0, 1)),
        "duplicate_heatmap": score_heatmap(result, "duplicate", "Duplicate-token score", (), "Cividis",
                                           zrange=(0, 1)),
        "copying_heatmap": score_heatmap(result, "copying", "OV copying score (eigenvalues; ● induction heads)", ind,
                                         "RdBu", 0.0, zrange=(-1, 1)),
        "induction_vs_copying": _scatter(result, "induction", "copying", "Induction vs OV copying score", ind),
    }
    sweep = result.get("single_head_effects")
    if sweep:
        figs["single_head_ablation_heatmap"] = score_heatmap(
            {"model": result["model"], "scores": {"late_loss_change": sweep["late_loss"]}}, "late_loss_change",
            f"Second-copy loss change when one head is ablated ({sweep['mode']})", ind, "RdBu", 0.0)
    causal = result.get("causal")
    if causal:
        conds = list(causal["conditions"]) + ([{**causal["random_pooled"], "pooled": True}]
                                              if causal.get("random_pooled") else [])
        from interp.figures.base import condition_colors

        figs["ablation_late_loss"] = _ci_bars(
            [c["name"] for c in conds], [c["estimates"]["late_loss"] for c in conds],
            f"Second-copy loss by condition, {result['model']} ({causal['mode']} ablation; 95% bootstrap CI)<br>"
            "<sup>grey: baseline · red: induction heads · blue: matched random heads (dark: their pool)</sup>",
            "second-copy loss (nats)", condition_colors(conds))
    return figs


@reads_result
def copy_suppression_figures(result: dict) -> dict:
    found = result["copy_suppression_heads"]
    cands = [c["head"] for c in result["candidates"]]
    figs = {
        "ov_suppression_heatmap": score_heatmap(result, "ov_suppression", "OV self-suppression: fraction of tokens "
                                                "a head's OV circuit suppresses most (● candidates)", cands,
                                                zrange=(0, 1)),
        "qk_lift_heatmap": score_heatmap(result, "qk_lift", "Attention to earlier copies of the predicted token "
                                         "(lift over uniform)", found, "Cividis"),
        "dla_attended_heatmap": score_heatmap(result, "dla_attended", "Direct logit effect on the attended token",
                                              found, "RdBu", 0.0),
        "ov_vs_dla": _scatter(result, "ov_suppression", "dla_attended", "OV self-suppression vs direct effect on "
                              "attended tokens", found),
    }
    rows = [(c["head"], k, c["ablation"][k]) for c in result["candidates"] for k in ("direct", "total", "self_repair")
            if c["ablation"].get(k)]
    if rows:
        go = _go()
        fig = go.Figure()
        for k in ("direct", "total", "self_repair"):
            sel = [(h, e) for h, kk, e in rows if kk == k]
            fig.add_trace(go.Bar(name=k, x=[h for h, _ in sel], y=[e["mean"] for _, e in sel],
                                 error_y=ci_error_y([e for _, e in sel])))
        fig.update_layout(barmode="group", yaxis_title="centred logit of the copied token (nats)",
                          title=f"Ablating candidate heads: direct vs total effect, {result['model']}")
        figs["self_repair"] = fig
    return figs
