"""Plotly figures. Plotting only reads result dicts (as written to JSON); it computes nothing."""

from __future__ import annotations

from pathlib import Path


def _go():
    import plotly.graph_objects as go

    return go


def retrieval_heatmap(result: dict):
    go = _go()
    scores = result["scores"]
    marked = set(result["heads"])
    text = [[("●" if f"L{l}H{h}" in marked else "") for h in range(len(row))] for l, row in enumerate(scores)]
    fig = go.Figure(go.Heatmap(z=scores, colorscale="Viridis", text=text, texttemplate="%{text}",
                               colorbar={"title": "retrieval score"},
                               hovertemplate="layer %{y} head %{x}: %{z:.3f}<extra></extra>"))
    fig.update_layout(title=f"Retrieval scores, {result['model']} (● > {result['threshold']}; "
                            f"{len(result['heads'])} heads)", xaxis_title="query head", yaxis_title="layer")
    return fig


def streaming_heatmap(result: dict):
    go = _go()
    fig = go.Figure(go.Heatmap(z=result["streaming"], colorscale="Cividis", zmin=0, zmax=1,
                               colorbar={"title": "sink+recent mass"}))
    fig.update_layout(title=f"Streaming score (attention mass on sink + recent window), {result['model']}",
                      xaxis_title="query head", yaxis_title="layer")
    return fig


def threshold_sweep(result: dict):
    go = _go()
    xs = [s["threshold"] for s in result["sweep"]]
    ys = [s["n_heads"] for s in result["sweep"]]
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="lines+markers"))
    fig.update_layout(title="Retrieval heads vs threshold", xaxis_title="threshold", yaxis_title="heads above",
                      xaxis_type="log")
    return fig


def recall_by_condition(result: dict):
    go = _go()
    conds = list(result["conditions"])
    if result.get("random_pooled"):
        conds.append(result["random_pooled"])
    names = [c["name"] for c in conds]
    means = [c["recall"]["mean"] for c in conds]
    hi = [c["recall"]["hi"] - c["recall"]["mean"] for c in conds]
    lo = [c["recall"]["mean"] - c["recall"]["lo"] for c in conds]
    fig = go.Figure(go.Bar(x=names, y=means, error_y={"type": "data", "array": hi, "arrayminus": lo}))
    fig.update_layout(title=f"NIAH recall by condition, {result['model']} ({result['mode']} ablation of "
                            f"{len(result['heads'])} heads, {result['scope']}; 95% bootstrap CI)",
                      yaxis_title="recall", yaxis_range=[0, 1.05])
    return fig


def write_html(fig, path: str | Path) -> Path:
    """Write a figure; plotly.js goes once into the same folder so the pages work offline."""
    path = Path(path)
    fig.write_html(str(path), include_plotlyjs="directory", full_html=True)
    return path
