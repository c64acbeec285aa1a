"""Figures of a rope_theta sweep (interp.organisms.theta.ThetaSweepResult or its dict): head count vs theta,
one point per build with the per-theta mean and its two-level bootstrap interval, the paper's two models'
shares beside the organisms', and each build's lowest-band RoPE-zeroing dose response."""

from __future__ import annotations

import math

from interp.figures.base import _go, ci_error_y, reads_result

THETA_COLORS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2"]


@reads_result
def theta_sweep(result: dict):
    """Left: retrieval heads per build vs rope_theta (log axis; points of one theta spread a little by seed),
    the mean over seeds with its 95% interval. Right: the same as a share of all heads, with the paper's
    LLaMA-2 / LLaMA-3.1 shares."""
    go = _go()
    from plotly.subplots import make_subplots

    t = result["trend"]
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        f"retrieval heads per build (score > {t['threshold']:g})", "share of all heads: organisms vs paper"))
    builds = [b for b in result["builds"] if b["retrieves"]]
    seeds = sorted({b["seed"] for b in builds})
    for i, s in enumerate(seeds):
        pts = [b for b in builds if b["seed"] == s]
        fig.add_trace(go.Scatter(x=[log_spread(b["rope_theta"], i, len(seeds)) for b in pts], y=[len(b["heads"]) for b in pts],
                                 mode="markers", marker={"size": 10, "symbol": "circle-open", "line": {"width": 2}},
                                 name=f"training seed {s}", text=[b["name"] for b in pts],
                                 hovertemplate="%{text}: %{y} heads<extra></extra>"), row=1, col=1)
    out = [b for b in result["builds"] if not b["retrieves"]]
    if out:
        fig.add_trace(go.Scatter(x=[b["rope_theta"] for b in out], y=[len(b["heads"]) for b in out], mode="markers",
                                 marker={"size": 9, "symbol": "x", "color": "#999"},
                                 name="recall < 0.9: left out of the count", text=[b["name"] for b in out],
                                 hovertemplate="%{text}: %{y} heads<extra></extra>"), row=1, col=1)
    sets = t["settings"]
    fig.add_trace(go.Scatter(x=[s["setting"] for s in sets], y=[s["mean"] for s in sets], mode="lines+markers",
                             name="mean over seeds (95% CI: seeds, then NIAH seeds)", marker={"size": 8},
                             line={"color": "#333"}, error_y=ci_error_y(sets)), row=1, col=1)
    fig.add_trace(go.Scatter(x=[s["setting"] for s in sets], y=[s["mean"] / s["n_heads"] for s in sets],
                             mode="lines+markers", name="organisms (share)", line={"color": "#333"},
                             error_y=ci_error_y([{k: s[k] / s["n_heads"] for k in ("mean", "lo", "hi")}
                                                 for s in sets]), showlegend=False), row=1, col=2)
    paper = result.get("paper") or []
    fig.add_trace(go.Scatter(x=[p["rope_theta"] for p in paper], y=[p["n_heads"] / p["total_heads"] for p in paper],
                             mode="markers+text", text=[p["model"] for p in paper], textposition="top center",
                             marker={"size": 11, "symbol": "diamond", "color": "#d62728"},
                             name="Bayram 2026 (32 x 32 heads)"), row=1, col=2)
    xs = [b["rope_theta"] for b in result["builds"]] + [p["rope_theta"] for p in paper]
    span = [math.log10(min(xs)) - 0.35, math.log10(max(xs)) + 0.35] if xs else None
    for col in (1, 2):
        fig.update_xaxes(type="log", title_text="rope_theta", range=span, row=1, col=col)
    n_total = sets[0]["n_heads"] if sets else 1
    most = max([len(b["heads"]) for b in result["builds"]] + [s["hi"] for s in sets] + [1])
    fig.update_yaxes(title_text=f"retrieval heads (of {n_total})", range=[-0.3, min(n_total, most + 1.5) + 0.3],
                     dtick=1 if most <= 20 else None, row=1, col=1)
    top = max([s["hi"] / s["n_heads"] for s in sets] + [p["n_heads"] / p["total_heads"] for p in paper] + [0.05])
    fig.update_yaxes(title_text="share of heads", tickformat=".0%", range=[0, top * 1.25], row=1, col=2)
    fig.update_layout(title=f"Retrieval heads vs rope_theta, {result['base']} variants (same recipe, corpus, steps)"
                            f"<br><sup>slope {t['slope']:+.2f} heads per decade [{t['slope_lo']:+.2f}, "
                            f"{t['slope_hi']:+.2f}], exact permutation p = {t['p_value']:.3f}; {_niah_grid(result)}</sup>",
                      width=1100, height=480, legend={"orientation": "h", "y": -0.2})
    return fig


def _niah_grid(result: dict) -> str:
    """"NIAH at 512/1024 tokens, 8 seeds": the detection grid every build was measured on."""
    niah = (result["builds"][0].get("niah") or {}) if result["builds"] else {}
    lengths = "/".join(str(n) for n in niah.get("context_lengths") or [])
    return f"NIAH at {lengths} tokens, {niah.get('n_seeds')} seeds" if lengths else "NIAH"


@reads_result
def theta_dose_response(result: dict):
    """NIAH recall vs lowest-band dims zeroed in the retrieval heads of each build that retrieves (solid), with
    the same heads' random dims (dotted), one colour per theta."""
    go = _go()
    fig = go.Figure()
    thetas = sorted({b["rope_theta"] for b in result["builds"]})
    for b in result["builds"]:
        if not b["rope_zero"] or not b["retrieves"]:
            continue
        c = THETA_COLORS[thetas.index(b["rope_theta"]) % len(THETA_COLORS)]
        xs = [d["dose"] for d in b["rope_zero"]]
        fig.add_trace(go.Scatter(x=xs, y=[d["target"] for d in b["rope_zero"]], mode="lines+markers",
                                 line={"color": c}, name=f"{b['name']}: lowest band",
                                 error_y=ci_error_y([{"mean": d["target"], "lo": d["target_lo"], "hi": d["target_hi"]}
                                                     for d in b["rope_zero"]])))
        rnd = [(d["dose"], d["random_dims"]) for d in b["rope_zero"] if d["random_dims"] is not None]
        fig.add_trace(go.Scatter(x=[r[0] for r in rnd], y=[r[1] for r in rnd], mode="lines",
                                 line={"color": c, "dash": "dot"}, name=f"{b['name']}: random dims"))
    doses = sorted({d["dose"] for b in result["builds"] for d in b["rope_zero"]})
    fig.update_xaxes(tickmode="array", tickvals=doses)
    fig.update_layout(title="NIAH recall vs lowest-frequency dims zeroed in the retrieval heads, per build that "
                            "retrieves (query side; 95% CI)<br><sup>dotted: the same heads, random dims (pooled draws); "
                            f"{_niah_grid(result)}</sup>",
                      xaxis_title="dims zeroed per head", yaxis_title="NIAH recall", yaxis_range=[0, 1.05],
                      width=1000, height=520)
    return fig


def log_spread(x: float, i: int, n: int) -> float:
    """`x` moved a little along a log axis so that n points of one x do not overlap (i of n)."""
    return x * 10 ** (0.04 * (i - (n - 1) / 2)) if x > 0 and math.isfinite(x) else x


def theta_figures(d: dict) -> dict:
    """A theta sweep's figures: head count vs theta and the rope-zero dose response per build."""
    return {"theta_sweep": theta_sweep(d), "theta_dose_response": theta_dose_response(d)}
