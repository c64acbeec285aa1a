"""Figures of activation patching: one heatmap per grid site. Reads result dicts (as written to JSON)."""

from __future__ import annotations

import math
from collections import Counter

from interp.figures.base import ci_error_y, layer_rows_height, reads_result, wrap_title


def _mean(xs) -> float:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else math.nan


def _flat(grid):
    """The leaves of a nested list."""
    if isinstance(grid, list):
        return [y for x in grid for y in _flat(x)]
    return [grid]


def _nan(grid):
    if isinstance(grid, list):
        return [_nan(x) for x in grid]
    return math.nan if grid is None else grid


def _position_labels(result: dict, positions: list[int]) -> list[str]:
    """One tick label per position of the axis: the offset ('-3'), followed by the clean token only where
    every pair has that position and the same clean token there ('-3 the'; what a token under a cell means
    when pairs differ in length or content: the tokens of some pairs are not those of the others), and by
    '[k/N]' where only k of the N pairs reach the position (the `tokens` lists are indexed like the position
    axis of every per-position site; "" where a pair has no token)."""
    toks = result["tokens"]["clean"]
    n_all = len(toks)
    out = []
    for i, p in enumerate(positions):
        words = [t[i] for t in toks if i < len(t) and t[i]]
        label = str(p)
        if words and len(words) == n_all and len(set(words)) == 1:
            label += f" {words[0].strip() or repr(words[0])}"
        if len(words) < n_all:
            label += f" [{len(words)}/{n_all}]"
        out.append(label)
    return out


def _axis_note(result: dict, positions: list[int]) -> str:
    """What the position ticks show, for the axis title."""
    n_all = len(result["tokens"]["clean"])
    lengths = set(result.get("pair_lengths") or [])
    note = "token shown where every pair has the same clean token"
    if n_all > 1 and (len(lengths) > 1 or result.get("align") == "anchor"):
        note += "; [k/N]: only k of the N pairs have the position"
    return f"position ({result['align']}-aligned): {note}"


@reads_result
def patching_heatmaps(result: dict) -> dict:
    """{file stem: figure}: layer x position (token labels), layer x head, and per position x head for
    head_out_by_pos (one panel per position when there are few); diverging scale centred at 0, fixed
    to [-1, 1] for the normalised metric."""
    import plotly.graph_objects as go

    figs = {}
    norm = result["normalized"]
    rng = {"zmin": -1, "zmax": 1} if norm else {}
    what = (f"normalised {result['metric']} ((patched - base) / (donor - base))" if norm else
            f"patched {result['metric']} (raw; unpatched base {_mean(result['base_value']):+.3f})")
    bar = {"title": "effect" if norm else f"patched {result['metric']}"}
    method = result.get("method", "exact")
    if method != "exact":  # attribution: first-order estimates of the effect, not measurements
        what = f"{method} estimate (not measured) of the {what}"
        bar = {"title": f"estimate ({method})"}
    for name, g in result["sites"].items():
        z = _nan(g["mean"])
        axes = g["axes"]
        n = [int(x) for x in _flat(g["n_pairs"]) if x is not None and x == x and x > 0]
        over = (f"mean over {max(n)} pairs" if n and min(n) == max(n) else
                f"mean over the pairs that have each cell ({min(n)}-{max(n)} of {result['n_pairs']})" if n else
                "no pair has these cells")
        title = f"{result['direction']} patching of {name}, {result['model']}: {what}, {over}"
        if axes == ["layer", "position"]:
            x = _position_labels(result, g["positions"])
            fig = go.Figure(go.Heatmap(z=z, x=x, colorscale="RdBu", zmid=0, **rng, colorbar=bar,
                                       customdata=_nan(g["n_pairs"]),
                                       hovertemplate="layer %{y}, position %{x}: %{z:.3f} (mean over %{customdata} "
                                                     "pairs)<extra></extra>"))
            fig.update_layout(xaxis_title=_axis_note(result, g["positions"]), yaxis_title="layer",
                              yaxis_dtick=1, height=layer_rows_height(len(z)))
        elif axes in (["layer", "head"], ["layer", "kv_head"]):
            fig = go.Figure(go.Heatmap(z=z, colorscale="RdBu", zmid=0, **rng, colorbar=bar,
                                       hovertemplate="layer %{y} head %{x}: %{z:.3f}<extra></extra>"))
            fig.update_layout(xaxis_title="key-value head" if axes[1] == "kv_head" else "query head",
                              yaxis_title="layer", xaxis_dtick=1, yaxis_dtick=1, height=layer_rows_height(len(z)))
        else:  # layer x position x head: heads of every layer side by side, positions down
            L, P = len(z), len(z[0])
            H = len(z[0][0])
            flat = [[z[l][p][h] for l in range(L) for h in range(H)] for p in range(P)]
            fig = go.Figure(go.Heatmap(z=flat, x=[f"L{l}H{h}" for l in range(L) for h in range(H)],
                                       y=_position_labels(result, g["positions"]), colorscale="RdBu", zmid=0, **rng,
                                       colorbar=bar,
                                       hovertemplate="%{x}, position %{y}: %{z:.3f}<extra></extra>"))
            fig.update_layout(xaxis_title="head", yaxis_title=_axis_note(result, g["positions"]),
                              height=layer_rows_height(P))
        fig.update_layout(title=wrap_title(title))
        figs[f"patching_{name}"] = fig
    return figs


@reads_result
def attribution_scatter(result: dict):
    """{file stem: figure}: per site, the attribution estimate vs exact patching on the cells the
    verification checked (top cells and a random sample), with the y = x line."""
    import plotly.graph_objects as go

    figs = {}
    for name, v in (result.get("verification") or {}).items():
        cells = v["cells"]
        top = [c for i, c in enumerate(cells) if i < v["top"]]
        rest = cells[v["top"]:]
        fig = go.Figure()
        for group, label in ((top, f"top {v['top']} by |estimate|"), (rest, "random sample")):
            fig.add_trace(go.Scatter(x=[c["exact"] for c in group], y=[c["estimate"] for c in group], mode="markers",
                                     name=label, text=[c["cell"] for c in group],
                                     hovertemplate="%{text}: exact %{x:.3f}, estimate %{y:.3f}<extra></extra>"))
        vals = [c["exact"] for c in cells] + [c["estimate"] for c in cells]
        lo, hi = (min(vals), max(vals)) if vals else (0, 1)
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="estimate = exact",
                                 line={"dash": "dot", "color": "grey"}))

        def f(x):
            return "-" if x is None else f"{x:.2f}"
        fig.update_layout(title=f"{result['method']} estimate vs exact patching, {name}, {result['model']}: Pearson "
                                f"{f(v['pearson'])}, top-{v['top']} recall {f(v['top_k_recall'])}, slope "
                                f"{f(v.get('slope'))} (estimate ~ slope x exact)", xaxis_title="exact",
                          yaxis_title="estimate")
        figs[f"attribution_vs_exact_{name}"] = fig
    return figs


@reads_result
def path_effects(result: dict):
    """Bars: each path-patching effect with its 95% bootstrap CI (none when there is one pair)."""
    import plotly.graph_objects as go

    names = list(result["effects"])
    est = [result["effects"][n] for n in names]
    fig = go.Figure(go.Bar(x=names, y=[e["mean"] for e in est], error_y=ci_error_y(est), marker_color="#4c78a8"))
    target = f"via {result['via']} of {', '.join(result['receivers'])}" if result["receivers"] else "on the logits"
    metric = f"{'normalised ' if result['normalized'] else ''}{result['metric']}"
    senders = result["senders"]  # a long list (every head of some layers) is named by its count; the bars name them
    who = ", ".join(senders) if len(senders) <= 6 else f"{len(senders)} sender heads"
    fig.update_layout(title=f"Path patching of {who} {target}, {result['model']} (95% CI)",
                      yaxis_title=metric.replace("_", " "), xaxis_title="effect")
    return fig


def patching_figures(d: dict) -> dict:
    """A patching result's figures: one heatmap per grid site, and the AtP-vs-exact scatter where verified."""
    return {**patching_heatmaps(d), **attribution_scatter(d)}


def path_patching_figures(d: dict) -> dict:
    """A path-patching result's figures."""
    return {"path_patching_effects": path_effects(d)}
