"""The atlas as a table (Markdown and HTML) and figures, from an atlas dict (atlas.json) alone.

`atlas_rows(d)`: (quantity, one cell per model, the published cell) in reading order; `atlas_markdown(d)`:
the table the README's headline holds; `atlas_table_html(d)`: the same on the report page; `atlas_figures(d)`:
NIAH recall by length, retrieval-head share vs rope_theta (finding ii, beside the paper's two Llama points and the
organisms' controlled sweep when the atlas has it), lowest-band RoPE zeroing by dose (iv, beside the paper's).
"""

from __future__ import annotations

import html

from interp.figures.base import _go
from interp.figures.text import no_power

MISSING = "no run given"


def _num(x, fmt="{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def _p(t: dict | None, key="p_value") -> str:
    if not t or t.get(key) is None:
        return "p -"
    flag = " (no power)" if no_power(t) else " (at floor)" if t.get("at_floor") else ""
    return f"p = {t[key]:.2g}{flag}"


def _theta(x) -> str:
    return f"{x:.0e}".replace("e+0", "e").replace("e+", "e")


def _ranges(layers: list[int]) -> str:
    out, start = [], None
    for i, x in enumerate(layers):
        start = x if start is None else start
        if i + 1 == len(layers) or layers[i + 1] != x + 1:
            out.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ", ".join(out)


def _k(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def _dt(m: dict, entry: dict | None) -> str:
    """' (bfloat16)' when an entry ran in another dtype than its column's."""
    dt = (entry or {}).get("dtype")
    return f" ({dt})" if dt and dt != m["dtype"] else ""


def _thetas(m: dict) -> str:
    t = m.get("thetas") or {}
    if not t:
        return "-"
    if list(t) == ["all"]:
        return _theta(t["all"])
    return ", ".join(f"{_theta(v)} ({k.replace('_attention', '')})" for k, v in sorted(t.items(), key=lambda kv: kv[1]))


def _geometry(m: dict) -> str:
    g = m.get("geometry") or {}
    if not g:
        return "-"
    out = f"{g['n_layers']} x {g['n_heads']}"
    if g.get("n_kv_heads"):
        out += f" ({g['n_kv_heads']} KV)"
    if g.get("head_dim"):
        out += f", head_dim {g['head_dim']}"
    return out


def _niah(m: dict) -> str:
    return " · ".join(f"{_k(x['length'])} {_num(x['recall'])}{_dt(m, x)}" for x in m.get("niah") or []) or MISSING


def _retrieval(m: dict, norm: str) -> str:
    r = (m.get("retrieval") or {}).get(norm)
    if not r:
        return MISSING
    share = f" ({100 * r['share']:.1f}%)" if r.get("share") is not None else ""
    return f"{r['n_heads']} of {r['n_total']}{share}{_dt(m, r)}"


def _layers(m: dict) -> str:
    r = (m.get("retrieval") or {}).get("answer")
    if not r:
        return MISSING
    return "L" + _ranges([int(k) for k in r["layers"]]) if r["layers"] else "none"


def _masking(m: dict) -> str:
    x = m.get("masking")
    if not x or not x.get("test"):
        return MISSING
    t = x["test"]
    return (f"{_num(x.get('baseline'))} -> {_num(t.get('mean_x'))} (random {_num(t.get('mean_y'))}): "
            f"{_num(t.get('diff'), '{:+.2f}')} [{_num(t.get('diff_lo'), '{:+.2f}')}, "
            f"{_num(t.get('diff_hi'), '{:+.2f}')}], {_p(t)}; {x['n_heads']} heads, {x.get('grid') or ''}{_dt(m, x)}")


def _norm(m: dict, stat: str) -> str:
    x = (m.get("norms") or {}).get("stats", {}).get(stat)
    if not x:
        return MISSING
    return (f"d {_num(x['d'], '{:+.2f}')} [{_num(x['lo'], '{:+.2f}')}, {_num(x['hi'], '{:+.2f}')}], {_p(x, 'p')}"
            f"{_dt(m, m['norms'])}")


def _rope_zero(m: dict) -> str:
    x = m.get("rope_zero")
    if not x:
        return MISSING
    parts = []
    for d in x["doses"]:
        if not d["dims"]:
            parts.append(f"0: {_num(d['target'])}")
            continue
        parts.append(f"{d['dims']}/{x['head_dim']}: {_num(d['target'])} (random dims {_num(d['random'])}, "
                     f"matched heads {_num(d['matched'])})")
    return " · ".join(parts) + f"; {x['n_heads']} heads, {x.get('grid') or ''}{_dt(m, x)}"


def _induction(m: dict) -> str:
    x = m.get("induction")
    if not x:
        return MISSING
    out = f"{len(x['heads'])}"
    if (m.get("retrieval") or {}).get("answer"):
        out += f", {len(x['overlap'])} of them retrieval heads"
    t = x.get("ablation")
    if t:
        out += (f"; ablated: second-copy loss {_num(t.get('diff'), '{:+.2f}')} [{_num(t.get('diff_lo'), '{:+.2f}')}, "
                f"{_num(t.get('diff_hi'), '{:+.2f}')}] nats vs random")
    return out + _dt(m, x)


def _copy(m: dict) -> str:
    x = m.get("copy_suppression")
    if not x:
        return MISSING
    out = ("yes: " + ", ".join(x["heads"])) if x["found"] else f"no (candidates {', '.join(x['candidates']) or '-'})"
    return out + _dt(m, x)


def atlas_rows(d: dict) -> list[tuple[str, list[str], str]]:
    """(quantity, one cell per model, the published cell), in reading order."""
    ms, pub = d["models"], d.get("published") or {}
    rows = [
        ("RoPE theta", [_thetas(m) for m in ms], "LLaMA-2 1e4, LLaMA-3.1 5e5"),
        ("layers x query heads", [_geometry(m) for m in ms], ""),
        ("model dtype (of most runs; others marked)", [m["dtype"] for m in ms], ""),
        ("NIAH recall by length", [_niah(m) for m in ms], ""),
        ("retrieval heads (score > 0.1, answer-normalised)", [_retrieval(m, "answer") for m in ms],
         pub.get("retrieval_share", "")),
        ("retrieval heads (needle-normalised, Wu et al.'s)", [_retrieval(m, "needle") for m in ms], ""),
        ("layers they sit in", [_layers(m) for m in ms], ""),
        ("(i) masking them: recall, target vs random", [_masking(m) for m in ms], pub.get("masking", "")),
        ("(iii) q.k norm, retrieval vs other heads", [_norm(m, "qk_norm") for m in ms], pub.get("norms", "")),
        ("(iii) lowest-quarter share of |q.k|", [_norm(m, "low_share") for m in ms], ""),
        ("(iv) lowest-band RoPE zeroing: recall by dims zeroed", [_rope_zero(m) for m in ms],
         pub.get("rope_zero", "")),
        ("induction heads", [_induction(m) for m in ms], pub.get("induction", "")),
        ("copy-suppression head", [_copy(m) for m in ms], pub.get("copy_suppression", "")),
    ]
    return rows


def _md(x: str) -> str:
    return x.replace("|", "\\|")


def atlas_markdown(d: dict) -> str:
    """The atlas as a Markdown table: a row per quantity, a column per model, the published numbers last."""
    ms = d["models"]
    lines = ["| | " + " | ".join(f"`{m['label']}`" for m in ms) + " | published |",
             "|---|" + "---|" * (len(ms) + 1)]
    for q, cells, pub in atlas_rows(d):
        lines.append(f"| {_md(q)} | " + " | ".join(_md(c) for c in cells) + f" | {_md(pub)} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- figures


def niah_by_length(d: dict):
    go = _go()
    fig = go.Figure()
    for m in d["models"]:
        pts = [x for x in m.get("niah") or [] if x.get("recall") is not None]
        if pts:
            fig.add_trace(go.Scatter(x=[x["length"] for x in pts], y=[x["recall"] for x in pts], name=m["label"],
                                     mode="lines+markers", text=[f"n = {x['n']}" for x in pts]))
    fig.update_layout(title="NIAH recall by context length (the book haystack, standard needles)",
                      xaxis={"title": "context length (tokens)", "type": "log",
                             "tickvals": sorted({x["length"] for m in d["models"] for x in m.get("niah") or []})},
                      yaxis={"title": "recall", "range": [0, 1.05]})
    return fig


def theta_heads(d: dict):
    """Finding (ii) across models: retrieval-head share against rope_theta (uncontrolled: the models differ in
    everything else), a marker per model and normalisation (circle: answer, diamond: needle), the paper's two
    Llama points, and the organisms' controlled sweep (builds that retrieve) when the atlas has it."""
    go = _go()
    fig = go.Figure()
    top = 5.0
    for m in d["models"]:
        for norm, symbol in (("answer", "circle"), ("needle", "diamond")):
            r = (m.get("retrieval") or {}).get(norm)
            if not r or r.get("share") is None:
                continue
            kinds = sorted((m.get("thetas") or {}).items(), key=lambda kv: kv[1])
            top = max(top, 100 * r["share"])
            fig.add_trace(go.Scatter(
                x=[t for _, t in kinds], y=[100 * r["share"]] * len(kinds), mode="markers+lines",
                marker={"symbol": symbol, "size": 11}, line={"dash": "dot", "width": 1},
                name=f"{m['label']} ({norm}-normalised)",
                hovertext=[f"{m['label']}: {r['n_heads']} of {r['n_total']} heads; theta {t:g}"
                           + ("" if k == "all" else f" ({k})") for k, t in kinds], hoverinfo="text"))
    pts = (d.get("published_points") or {}).get("theta_heads") or []
    if pts:
        fig.add_trace(go.Scatter(x=[p["theta"] for p in pts], y=[100 * p["n_heads"] / p["n_total"] for p in pts],
                                 mode="markers", marker={"symbol": "x", "size": 12, "color": "#555"},
                                 name="the paper: LLaMA-2-7B, LLaMA-3.1-8B",
                                 hovertext=[f"{p['model']}: {p['n_heads']} of {p['n_total']}" for p in pts],
                                 hoverinfo="text"))
    sweep = d.get("theta_sweep")
    if sweep and isinstance(sweep.get("builds"), list):
        b = [x for x in sweep["builds"] if isinstance(x, dict) and x.get("theta") and x.get("n_heads") is not None
             and x.get("n_total") and x.get("retrieves")]
        if b:
            top = max([top] + [100 * x["n_heads"] / x["n_total"] for x in b])
            fig.add_trace(go.Scatter(x=[x["theta"] for x in b], y=[100 * x["n_heads"] / x["n_total"] for x in b],
                                     mode="markers", marker={"symbol": "square-open", "size": 9},
                                     name="organisms that retrieve: theta varied alone"))
    fig.update_layout(title="(ii) Retrieval-head share vs rope_theta (across models: uncontrolled; a model with "
                            "two RoPE bases: both, joined)",
                      xaxis={"title": "rope_theta", "type": "log"},
                      yaxis={"title": "% of query heads above 0.1", "range": [0, 1.15 * top]})
    return fig


def rope_zero_doses(d: dict):
    """Finding (iv): recall against the fraction of head dims zeroed in the lowest band, target heads (solid)
    vs random dims in them (dotted), beside the paper's points."""
    go = _go()
    fig = go.Figure()
    for m in d["models"]:
        x = m.get("rope_zero")
        if not x or not x.get("head_dim"):
            continue
        ds = [p for p in x["doses"] if p.get("frac") is not None]
        fig.add_trace(go.Scatter(x=[p["frac"] for p in ds], y=[p["target"] for p in ds], mode="lines+markers",
                                 name=f"{m['label']}: retrieval heads"))
        rnd = [p for p in ds if p.get("random") is not None]
        if rnd:
            fig.add_trace(go.Scatter(x=[p["frac"] for p in rnd], y=[p["random"] for p in rnd], mode="lines+markers",
                                     line={"dash": "dot"}, name=f"{m['label']}: random dims"))
    for kind, pts in ((d.get("published_points") or {}).get("rope_zero") or {}).items():
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="markers",
                                 marker={"symbol": "x" if kind == "target" else "circle-open", "size": 12,
                                         "color": "#555"}, name=f"the paper: {kind}"))
    fig.update_layout(title="(iv) Zeroing the lowest RoPE frequencies of the retrieval heads",
                      xaxis={"title": "fraction of head dims zeroed (lowest band first)"},
                      yaxis={"title": "NIAH recall", "range": [0, 1.05]})
    return fig


def atlas_figures(d: dict) -> dict:
    return {"atlas_niah": niah_by_length(d), "atlas_theta": theta_heads(d), "atlas_rope_zero": rope_zero_doses(d)}


def atlas_table_html(d: dict) -> str:
    """The atlas table for its report page (the same rows as the Markdown), with the runs it read."""
    ms = d["models"]
    head = "".join(f"<th>{html.escape(m['label'])}</th>" for m in ms)
    body = "".join(f"<tr><th>{html.escape(q)}</th>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
                   + f"<td><i>{html.escape(p)}</i></td></tr>" for q, cells, p in atlas_rows(d))
    runs = "".join(f"<li><b>{html.escape(m['label'])}</b>: " + ", ".join(html.escape(r) for r in m["runs"]) + "</li>"
                   for m in ms)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in d.get("notes") or [])
    return (f"<p class='note'>Every number read from the run folders listed below (nothing recomputed), each cell "
            f"with its grid where runs differ in it; \"{MISSING}\": no run of that analysis was given for the model. "
            "Across models theta varies together with size, data and architecture: the theta figure is "
            "uncontrolled, as in the paper.</p><style>table.atlas td,table.atlas th{text-align:left;vertical-align:top}"
            "</style><div class='table'><table class='headline atlas'><thead><tr><th></th>"
            f"{head}<th>published</th></tr></thead><tbody>{body}</tbody></table></div>"
            f"<details><summary>runs read</summary><ul>{runs}</ul></details>"
            + (f"<p class='note'>notes:</p><ul>{notes}</ul>" if notes else ""))
