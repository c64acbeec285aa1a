"""Figures of retrieval detection, head ablation and the RoPE experiments (rope-zero, rope-profile)."""

from __future__ import annotations

import math

from interp.figures.base import _go, _metric_axis, ci_error_y, condition_colors, head_grid_axes, reads_result, wrap_title


@reads_result
def retrieval_heatmap(result: dict):
    go = _go()
    scores = result["scores"]
    marked = set(result["heads"])
    text = [[("●" if f"L{l}H{h}" in marked else "") for h in range(len(row))] for l, row in enumerate(scores)]
    fig = go.Figure(go.Heatmap(z=scores, colorscale="Viridis", zmin=0, zmax=1, text=text, texttemplate="%{text}",
                               colorbar={"title": "retrieval score<br>(fixed 0-1)"},
                               hovertemplate="layer %{y} head %{x}: %{z:.3f}<extra></extra>"))
    fig.update_layout(title=f"Retrieval scores, {result['model']} (● score > {result['threshold']}: "
                            f"{len(result['heads'])} heads)")
    head_grid_axes(fig, len(scores[0]) if scores else 0, len(scores))
    return fig


@reads_result
def streaming_heatmap(result: dict):
    go = _go()
    z = result["streaming"]
    fig = go.Figure(go.Heatmap(z=z, colorscale="Cividis", zmin=0, zmax=1,
                               colorbar={"title": "attention mass<br>(fixed 0-1)"},
                               hovertemplate="layer %{y} head %{x}: %{z:.3f}<extra></extra>"))
    fig.update_layout(title=f"Streaming score (attention mass on sink + recent window), {result['model']}")
    head_grid_axes(fig, len(z[0]) if z else 0, len(z))
    return fig


@reads_result
def threshold_sweep(result: dict):
    go = _go()
    xs = [s["threshold"] for s in result["sweep"]]
    ys = [s["n_heads"] for s in result["sweep"]]
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="lines+markers", name="heads above the threshold"))
    fig.add_vline(x=result["threshold"], line_dash="dash", line_color="crimson",
                  annotation_text=f"threshold used: {result['threshold']}", annotation_position="top right")
    fig.update_layout(title=f"Retrieval heads vs threshold, {result['model']}", xaxis_title="retrieval-score threshold",
                      yaxis_title="heads with score above it", xaxis_type="log", yaxis_rangemode="tozero")
    return fig


@reads_result
def niah_recall_heatmap(result: dict):
    """NIAH recall of the unmasked model by needle depth x context length (each cell: recalled / prompts), from a
    retrieval detection's outcomes (their ids say length, depth and seed: L1024-d0.5-s7)."""
    import re

    go = _go()
    cells: dict = {}
    for o in result.get("outcomes", []):
        m = re.match(r"^L(\d+)-d([^-]+(?:e-\d+)?)-s(\d+)$", o["id"])
        if m:
            cells.setdefault((int(m.group(1)), float(m.group(2))), []).append(bool(o["recall"]))
    lengths = sorted({k[0] for k in cells})
    depths = sorted({k[1] for k in cells})
    z = [[(sum(cells[(n, d)]) / len(cells[(n, d)])) if (n, d) in cells else None for n in lengths] for d in depths]
    text = [[f"{sum(cells[(n, d)])}/{len(cells[(n, d)])}" if (n, d) in cells else "" for n in lengths] for d in depths]
    fig = go.Figure(go.Heatmap(z=z, x=[str(n) for n in lengths], y=[f"{d:g}" for d in depths], zmin=0, zmax=1,
                               colorscale="RdYlGn", text=text, texttemplate="%{text}",
                               colorbar={"title": "recall<br>(fixed 0-1)"},
                               hovertemplate="length %{x}, depth %{y}: recall %{z:.2f}<extra></extra>"))
    n = sum(len(v) for v in cells.values())
    fig.update_layout(title=f"NIAH recall by needle depth and context length, {result['model']} (unmasked; "
                            f"{n} prompts, recalled / prompts per cell)", xaxis_title="context length (tokens)",
                      yaxis_title="needle depth (fraction of the haystack before it)", xaxis_type="category",
                      yaxis_type="category")
    return fig


@reads_result
def metric_by_condition(result: dict):
    """Bars: the ablation result's primary metric per condition, with its 95% bootstrap CI."""
    go = _go()
    metric = result["metric"]
    conds = list(result["conditions"])
    if result.get("random_pooled"):
        conds.append({**result["random_pooled"], "pooled": True})
    names = [c["name"] for c in conds]
    est = [c["estimates"][metric] for c in conds]
    fig = go.Figure(go.Bar(x=names, y=[e["mean"] for e in est], marker_color=condition_colors(conds),
                           text=[f"{e['mean']:.2f}" for e in est], textposition="outside", cliponaxis=False,
                           error_y=ci_error_y(est)))
    fig.update_layout(title=f"{metric} by condition, {result['model']} ({result['mode']} ablation of "
                            f"{len(result['heads'])} heads, {result['scope']}; 95% bootstrap CI)<br>"
                            "<sup>grey: baseline · red: target heads · blue: matched random heads "
                            "(dark: their pool)</sup>", xaxis_title="condition", **_metric_axis(metric))
    return fig


@reads_result
def head_curve(result: dict):
    """The metric vs k: the top k heads (kept alone, or masked) against k random heads, 95% CIs; the baseline and,
    for a keep curve, the reach goal as lines."""
    go = _go()
    pts = sorted(result["points"], key=lambda p: p["k"])
    fig = go.Figure()
    ranking = (result.get("ranking_source") or "retrieval score").split(" (")[0]
    for key, name in (("target", f"top k by {ranking}"), ("random_pooled", "k random heads (pooled sets)")):
        xs = [p for p in pts if p.get(key)]
        fig.add_trace(go.Scatter(x=[p["k"] for p in xs], y=[p[key]["metric"]["mean"] for p in xs],
                                 mode="lines+markers", name=name, error_y=ci_error_y([p[key]["metric"] for p in xs])))
    base = result["baseline"]["mean"]
    fig.add_hline(y=base, line_dash="dot", line_color="grey", annotation_text=f"baseline {base:.2f}")
    reach = result.get("reach") or {}
    if result["kind"] == "keep" and reach.get("goal") is not None:
        fig.add_hline(y=reach["goal"], line_dash="dash", line_color="green",
                      annotation_text=f"{reach['frac']:.0%} of baseline", annotation_position="bottom right")
    what = "every head masked but the top k" if result["kind"] == "keep" else "the top k heads masked"
    fig.update_xaxes(type="log" if max(p["k"] for p in pts) >= 16 and min(p["k"] for p in pts) > 0 else "linear",
                     tickmode="array", tickvals=[p["k"] for p in pts])
    fig.update_layout(title=f"{result['metric']} vs k, {result['model']}: {what} ({result['mode']}), vs k random "
                            "heads (95% CI)", xaxis_title="k (heads)", **_metric_axis(result["metric"]))
    return fig


@reads_result
def rope_dose_response(result: dict):
    go = _go()
    fig = go.Figure()
    doses = result["doses"]
    verb = result.get("patch", "zeroed")
    side = "q and the head's keys" if result.get("mode") == "phase" else f"{result['side']} side"
    for key, name in ((("target", f"target heads, band {verb}"), ("random_pooled", "same heads, random dims"),
                       ("matched_pooled", f"matched other heads, band {verb}"))):
        pts = [(d["dose"], d[key]["metric"]) for d in doses if d.get(key)]
        xs = [p[0] for p in pts]
        fig.add_trace(go.Scatter(
            x=xs, y=[p[1]["mean"] for p in pts], mode="lines+markers", name=name,
            error_y=ci_error_y([p[1] for p in pts])))
    rope = result["baseline"]["rope"]
    fig.update_xaxes(tickmode="array", tickvals=[d["dose"] for d in doses])
    unit = result.get("unit", "dims")
    fig.update_layout(title=f"{result['metric']} vs {result['band']}-frequency {unit} {verb} ({side}), "
                            f"{result['model']} (of {rope['rotary_dims']} rotary dims; 95% CI)",
                      xaxis_title=f"{unit} {verb} per head", **_metric_axis(result["metric"]))
    return fig


@reads_result
def rope_usage_heatmap(result: dict):
    go = _go()
    order = result["pair_order"]
    marked = set(result["retrieval_heads"])
    labels, rows = [], []
    for l, layer in enumerate(result["usage"]):
        for h, u in enumerate(layer):
            labels.append(f"L{l}H{h}" + (" ●" if f"L{l}H{h}" in marked else ""))
            rows.append([u[j] for j in order] + u[len(order):])
    xs = [f"p{j} ({result['pair_freqs'][j]:.2g})" for j in order]
    if rows and len(rows[0]) > len(order):
        xs.append("non-rotary")
    fig = go.Figure(go.Heatmap(z=rows, x=xs, y=labels, colorscale="Magma", colorbar={"title": "share of |q.k|"}))
    fig.update_layout(title=f"RoPE pair usage per head (low to high frequency), {result['model']} (● retrieval)",
                      xaxis_title="rotary pair (inv_freq)", yaxis_title="head", height=max(400, 14 * len(rows)))
    return fig


@reads_result
def necessity_heatmap(result: dict):
    """Far-context necessity per head (streaming.json): minus the answer log-prob change when the head alone is
    windowed; ● far-context heads, ○ mixed (the labels' rule is in the title's result)."""
    go = _go()
    z = result["scores"]
    mark = {"far-context": "●", "mixed": "○", "streaming": ""}
    text = [[mark.get(lab, "") for lab in row] for row in result["labels"]]
    top = max([abs(v) for row in z for v in row if v is not None] or [1.0])
    fig = go.Figure(go.Heatmap(z=z, colorscale="RdBu", reversescale=True, zmin=-top, zmax=top, text=text,
                               texttemplate="%{text}", colorbar={"title": "necessity<br>(nats)"},
                               hovertemplate="layer %{y} head %{x}: %{z:.4f} nats<extra></extra>"))
    c = result["counts"]
    fig.update_layout(title=f"Far-context necessity, {result['model']}: each {result['unit'].replace('_', ' ')} "
                            f"windowed to {result['sinks']} sinks + {result['window']} keys<br>"
                            f"(● far-context {c.get('far-context', 0)}, ○ mixed {c.get('mixed', 0)}, streaming "
                            f"{c.get('streaming', 0)})")
    head_grid_axes(fig, len(z[0]) if z else 0, len(z))
    return fig


@reads_result
def kv_frontier(result: dict):
    """A window-mode keep curve as the memory / accuracy frontier: the metric against the share of KV-cache memory
    kept (full attention for the top k heads of the ranking, every other head windowed), for the ranking and the
    random sets (their mean share), 95% CIs; None for other curves."""
    pts = sorted([p for p in result["points"] if p.get("kv_kept")], key=lambda p: p["kv_kept"]["target"])
    if result.get("mode") != "window" or not pts:
        return None
    go = _go()
    fig = go.Figure()
    ranking = (result.get("ranking_source") or "retrieval score").split(" (")[0]
    fig.add_trace(go.Scatter(x=[p["kv_kept"]["target"] for p in pts], y=[p["target"]["metric"]["mean"] for p in pts],
                             text=_k_labels(pts), mode="lines+markers+text", textposition="top center",
                             name=f"top k by {ranking}", error_y=ci_error_y([p["target"]["metric"] for p in pts])))
    rs = [p for p in pts if p.get("random_pooled") and p["kv_kept"].get("random_mean") is not None]
    if rs:
        fig.add_trace(go.Scatter(x=[p["kv_kept"]["random_mean"] for p in rs],
                                 y=[p["random_pooled"]["metric"]["mean"] for p in rs], mode="lines+markers",
                                 name="k random heads (pooled sets)",
                                 error_y=ci_error_y([p["random_pooled"]["metric"] for p in rs])))
    base = result["baseline"]["mean"]
    fig.add_hline(y=base, line_dash="dot", line_color="grey", annotation_text=f"baseline {base:.2f}")
    kv = pts[0]["kv_kept"]
    cfg = result.get("config") or {}
    fig.update_xaxes(tickformat=".0%", range=[0, 1.02])
    fig.update_layout(title=f"{result['metric']} vs KV memory kept, {result['model']}: every head but the top k "
                            f"windowed to {cfg.get('sinks')} sinks + {cfg.get('window')} keys<br>(KV bytes at "
                            f"{kv['context']} tokens, per key-value head; 95% CI)", xaxis_title="KV-cache memory kept",
                      **_metric_axis(result["metric"]))
    return fig


def _k_labels(pts) -> list[str]:
    """One label per x position: points keeping the same memory share one label ("k=2,4"), on their last point."""
    xs = [p["kv_kept"]["target"] for p in pts]
    out = []
    for i, p in enumerate(pts):
        same = [q["k"] for q, x in zip(pts, xs) if x == xs[i]]
        out.append("k=" + ",".join(map(str, same)) if i == len(xs) - 1 or xs[i + 1] != xs[i] else "")
    return out


@reads_result
def attention_rows_view(result: dict):
    """Which keys the shown heads read on one NIAH prompt (a retrieval detection's `attention_example`): one small
    panel per head, the attention weight (log scale) of the last prompt position's query over the key positions
    (each point the max over `bin` keys when the row was pooled), the needle shaded; None without an example."""
    ex = result.get("attention_example")
    if not ex or not ex.get("heads"):
        return None
    from plotly.subplots import make_subplots

    go = _go()
    heads, width, n = ex["heads"], int(ex["bin"]), int(ex["n_keys"])
    fig = make_subplots(rows=len(heads), cols=1, shared_xaxes=True, vertical_spacing=min(0.05, 0.3 / len(heads)))
    for r, (name, row) in enumerate(heads.items(), start=1):
        starts = [i * width for i in range(len(row))]
        fig.add_trace(go.Scatter(x=[s + (width - 1) / 2 for s in starts], y=[max(v, ROW_FLOOR) for v in row],
                                 customdata=[[s, min(s + width, n) - 1] for s in starts], mode="lines", name=name,
                                 line={"width": 1.2}, showlegend=False,
                                 hovertemplate=f"{name}, keys %{{customdata[0]}}-%{{customdata[1]}}: "
                                               "%{y:.3g}<extra></extra>"), row=r, col=1)
        fig.update_yaxes(title_text=f"{name}<br>weight", title_font_size=11, row=r, col=1)
    lo, hi = ex["needle_span"]
    x0, x1 = (lo // width) * width - 0.5, -(-hi // width) * width - 0.5  # the bins the needle touches
    grow = max(0.0, n / 150 - (x1 - x0)) / 2  # at least ~1/150 of the axis wide, so a long prompt's needle shows
    fig.add_vrect(x0=x0 - grow, x1=x1 + grow, row="all", col=1, fillcolor="crimson", opacity=0.25, line_width=0,
                  layer="below")
    fig.update_yaxes(type="log", range=[math.log10(ROW_FLOOR), 0.05], tickvals=[1e-4, 1e-2, 1],
                     ticktext=["1e-4", "0.01", "1"])
    fig.update_xaxes(range=[-0.5, n - 0.5])
    fig.update_xaxes(title_text="key position (token index in the prompt)", row=len(heads), col=1)
    pooled = f"max over bins of {width} keys" if width > 1 else "every key"
    sid = ex.get("sample_id", "")
    fig.update_layout(
        title=wrap_title(f"Attention of the query at the last prompt position ({ex['query_position']}) over the "
                         f"{n}-key prompt {sid}, {result['model']}: red band = needle, keys {lo}-{hi - 1} "
                         f"({pooled}; weights below {ROW_FLOOR:g} drawn at {ROW_FLOOR:g})", 100),
        height=170 + 120 * len(heads), margin={"t": 120})
    return fig


ROW_FLOOR = 1e-4  # attention weights below it are drawn at it (log axis)


# ------------------------------------------------------------------------ each result kind's figures (its record)


def retrieval_figures(d: dict) -> dict:
    """A retrieval result's figures: {figure stem: figure} (None: a figure this result has not)."""
    return {"retrieval_heatmap": retrieval_heatmap(d), "streaming_heatmap": streaming_heatmap(d),
            "threshold_sweep": threshold_sweep(d), "niah_recall": niah_recall_heatmap(d),
            "attention_rows": attention_rows_view(d)}


def ablation_figures(d: dict) -> dict:
    """An ablation result's figures."""
    return {"metric_by_condition": metric_by_condition(d)}


def head_curve_figures(d: dict) -> dict:
    """A head curve's figures: the curve and its KV frontier."""
    return {"head_curve": head_curve(d), "kv_frontier": kv_frontier(d)}


def streaming_figures(d: dict) -> dict:
    """A streaming scan's figures."""
    return {"necessity_heatmap": necessity_heatmap(d)}


def rope_zero_figures(d: dict) -> dict:
    """A rope-zero result's figures."""
    return {"rope_dose_response": rope_dose_response(d)}


def rope_profile_figures(d: dict) -> dict:
    """A rope-profile result's figures (with --decompose, also the needle's logit by band)."""
    out = {"rope_usage": rope_usage_heatmap(d)}
    if d.get("decomposition"):
        out["needle_bands"] = needle_band_bars(d)
    return out


@reads_result
def needle_band_bars(result: dict):
    """rope-profile --decompose: the retrieval heads' attention-logit advantage of the needle's keys, by rotary band
    (bars with 95% CIs), and per needle depth (one trace per band)."""
    go = _go()
    from plotly.subplots import make_subplots

    dec = result["decomposition"]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("by band (mean over heads and prompts)",
                                                         "by needle distance (tokens)"))
    bands = dec["bands"]
    fig.add_trace(go.Bar(x=[b["band"] for b in bands], y=[b["estimate"]["mean"] for b in bands],
                         error_y=ci_error_y([b["estimate"] for b in bands]), name="needle minus other keys",
                         showlegend=False), row=1, col=1)
    depth = sorted(dec["by_depth"], key=lambda d: d["distance"])
    for i, b in enumerate(bands[:len(depth[0]["bands"])] if depth else []):
        fig.add_trace(go.Scatter(x=[d["distance"] for d in depth], y=[d["bands"][i] for d in depth],
                                 mode="lines+markers", name=b["band"]), row=1, col=2)
    g = dec["gap"]
    fig.update_layout(title=wrap_title(f"{result['model']}: attention logit at the needle minus the other keys, "
                                       f"{len(dec['heads'])} heads, {dec['n_prompts']} prompts: {g['mean']:+.2f} "
                                       f"[{g['lo']:+.2f}, {g['hi']:+.2f}] (95% CI)"))
    fig.update_yaxes(title_text="logit difference", row=1, col=1)
    return fig
