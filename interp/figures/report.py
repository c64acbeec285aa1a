"""One report page per run folder: index.html with the command, settings, headline table, every figure,
provenance and links, built from the result files alone (plotting only reads results).

`write_report(folder)` writes each figure's own HTML page and `index.html`; plotly.js goes once into the
folder as `plotly.min.js` and every page loads it from there, so the folder works offline and when
moved as a whole. `interp report DIR` rebuilds a folder's pages from its files.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Callable

PLOTLY_JS = "plotly.min.js"
INDEX = "index.html"
TABLE_ROWS = 40  # rows of the headline table on the page (the CSV holds them all)


def _figures_of(stem: str) -> Callable[[dict], dict] | None:
    """{result file stem: result dict -> {figure stem: plotly figure}}: the one place that says which
    figures a result has."""
    from interp.figures import experiments as plotting
    from interp.figures.atlas import atlas_figures
    from interp.figures.heads import copy_suppression_figures, induction_figures
    from interp.figures.patching import attribution_scatter, path_effects, patching_heatmaps
    from interp.figures import probes as probe_figures
    from interp.figures import sweeps

    return {
        "retrieval": lambda d: {"retrieval_heatmap": plotting.retrieval_heatmap(d),
                                "streaming_heatmap": plotting.streaming_heatmap(d),
                                "threshold_sweep": plotting.threshold_sweep(d),
                                "niah_recall": plotting.niah_recall_heatmap(d),
                                "attention_rows": plotting.attention_rows_view(d)},
        "ablation": lambda d: {"metric_by_condition": plotting.metric_by_condition(d)},
        "head_curve": lambda d: {"head_curve": plotting.head_curve(d), "kv_frontier": plotting.kv_frontier(d)},
        "streaming": lambda d: {"necessity_heatmap": plotting.necessity_heatmap(d)},
        "rope_zero": lambda d: {"rope_dose_response": plotting.rope_dose_response(d)},
        "rope_profile": lambda d: {"rope_usage": plotting.rope_usage_heatmap(d)},
        "induction": induction_figures,
        "copy_suppression": copy_suppression_figures,
        "patching": lambda d: {**patching_heatmaps(d), **attribution_scatter(d)},
        "path_patching": lambda d: {"path_patching_effects": path_effects(d)},
        "probes": probe_figures.figures,
        "atlas": atlas_figures,
        "theta": lambda d: {"theta_sweep": sweeps.theta_sweep(d), "theta_dose_response": sweeps.theta_dose_response(d)},
    }.get(stem)


RESULTS = ("atlas", "ablation", "head_curve", "streaming", "rope_zero", "rope_profile", "patching", "path_patching", "induction", "copy_suppression",
           "probes", "theta", "retrieval")  # result files, in the order a page shows them (a run's own detection last)


# what each result file must hold for its page (the fields its figures and headline read), by JSON type
_NUM, _STR, _LIST, _OBJ = (int, float), str, list, dict
RESULT_FIELDS = {
    "retrieval": {"model": _STR, "scores": _LIST, "heads": _LIST, "threshold": _NUM, "streaming": _LIST, "sweep": _LIST},
    "ablation": {"model": _STR, "metric": _STR, "mode": _STR, "conditions": _LIST},
    "head_curve": {"model": _STR, "metric": _STR, "kind": _STR, "points": _LIST, "baseline": _OBJ},
    "streaming": {"model": _STR, "scores": _LIST, "labels": _LIST, "counts": _OBJ, "unit": _STR, "window": _NUM,
                  "sinks": _NUM},
    "rope_zero": {"model": _STR, "metric": _STR, "doses": _LIST, "baseline": _OBJ},
    "rope_profile": {"model": _STR, "usage": _LIST, "pair_order": _LIST, "pair_freqs": _LIST, "retrieval_heads": _LIST},
    "induction": {"model": _STR, "scores": _OBJ, "induction_heads": _LIST, "prev_token_heads": _LIST},
    "copy_suppression": {"model": _STR, "scores": _OBJ, "copy_suppression_heads": _LIST, "candidates": _LIST},
    "patching": {"model": _STR, "sites": _OBJ},
    "path_patching": {"model": _STR, "effects": _OBJ, "receivers": _LIST, "senders": _LIST},
    "probes": {"model": _STR, "layers": _LIST},
    "theta": {"base": _STR, "builds": _LIST, "trend": _OBJ},
    "atlas": {"models": _LIST, "published": _OBJ},
}
RERUN = "rerun the command that wrote it (its run.json names it)"


def _kind(t) -> str:
    return {_NUM: "a number", _STR: "a string", _LIST: "a list", _OBJ: "an object"}[t]


def check_result(stem: str, d, f: Path) -> dict:
    """`d`, the parsed result file `f` (RESULTS stem `stem`), if it is an object holding the fields its page
    reads (RESULT_FIELDS) with their JSON types; InvalidInputError in one line naming the file otherwise.
    (`interp report` reads the file with runtime.jsonio.read_json first: not JSON, cut short, nested too deeply.)"""
    from interp.errors import InvalidInputError

    if not isinstance(d, dict):
        raise InvalidInputError(f"result file {f} holds a JSON {_json_type(d)}, not a JSON object; {RERUN}")
    fields = RESULT_FIELDS.get(stem, {})
    missing = [k for k in fields if k not in d]
    if missing:
        raise InvalidInputError(f"result file {f} is not a complete {stem} result: it lacks {', '.join(map(repr, missing))}"
                                f" (it holds {', '.join(map(repr, list(d)[:6])) or 'nothing'}"
                                f"{' ...' if len(d) > 6 else ''}); {RERUN}")
    for k, t in fields.items():
        v = d[k]
        if not isinstance(v, t) or isinstance(v, bool):
            raise InvalidInputError(f"result file {f}: {k!r} is a JSON {_json_type(v)}, not {_kind(t)}; the file is "
                                    f"damaged or not a {stem} result; {RERUN}")
    return d


def _json_type(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    return {dict: "object", list: "list", str: "string", int: "number", float: "number"}.get(type(v), type(v).__name__)


def result_files(folder: Path) -> list[tuple[str, Path]]:
    """(stem, path) of the result files in `folder`, in page order."""
    return [(stem, folder / f"{stem}.json") for stem in RESULTS if (folder / f"{stem}.json").is_file()]


def _results(folder: Path) -> list[tuple[str, dict]]:
    return [(stem, check_result(stem, json.loads(f.read_text(encoding="utf-8")), f)) for stem, f in result_files(folder)]


def ensure_plotly_js(folder: Path) -> Path:
    """plotly.js, once per folder (the pages load it by relative path)."""
    p = Path(folder) / PLOTLY_JS
    if not p.is_file():
        from plotly.offline import get_plotlyjs

        tmp = p.with_suffix(".js.partial")
        tmp.write_text(get_plotlyjs(), encoding="utf-8")
        tmp.replace(p)
    return p


def _esc(x) -> str:
    return html.escape(str(x))


PRIMARY = {"retrieval": "retrieval_score", "induction": "induction", "copy_suppression": "ov_suppression",
           "streaming": "necessity"}
HEADLINE_ROWS = 12  # top heads of a layer x head table
CELL_CHARS = 28  # longer text cells are cut on the page


def headline(stem: str, d: dict, df):
    """The rows worth a first look: the top heads by the result's main score (layer x head tables), the
    rows of the result's metric (condition tables), the largest cells of each grid site (patching), else
    the first rows. Constant columns go (the model)."""
    import pandas as pd

    if {"quantity", "value"} <= set(df.columns):
        q = PRIMARY.get(stem, df["quantity"].iloc[0] if len(df) else None)
        df = df[df["quantity"] == q].sort_values("value", ascending=False, key=abs).head(HEADLINE_ROWS)
    elif "mean" in df.columns and "condition" not in df.columns and len(df) > HEADLINE_ROWS:  # grid cells
        by = [c for c in ("site", "sender") if c in df.columns]
        key = "effect" if "effect" in df.columns else "mean"  # patching: the effect, patched - base
        if "n_pairs" in df.columns:  # cells every pair has (the others: in the CSV, with their n)
            full = df.groupby(by)["n_pairs"].transform("max") if by else df["n_pairs"].max()
            df = df[df["n_pairs"] == full]
        top = df.sort_values(key, ascending=False, key=abs)
        df = top.groupby(by, sort=False).head(HEADLINE_ROWS) if by else top.head(HEADLINE_ROWS)
    elif "metric" in df.columns and isinstance(d.get("metric"), str) and (df["metric"] == d["metric"]).any():
        df = df[df["metric"] == d["metric"]]
    df = df.head(TABLE_ROWS)
    keep = [c for c in df.columns if (len(df) < 2 or df[c].astype(str).nunique() > 1 or c in ("value", "mean"))
            and c not in ("p_note", "note")]  # sentences: the page says them once, under the tests (_tests)
    df = df[keep].copy()
    for c in df.columns:  # long lists (dims, head sets) shortened on the page; the CSV has them whole
        if not pd.api.types.is_numeric_dtype(df[c]):
            df[c] = df[c].map(lambda v: v if not isinstance(v, str) or len(v) <= CELL_CHARS else v[:CELL_CHARS] + "…")
    return df


def _table(folder: Path, stem: str, d: dict) -> str:
    if stem == "atlas":  # one row per quantity, one column per model: the table is the result
        from interp.figures.atlas import atlas_table_html

        return atlas_table_html(d)
    f = folder / f"{stem}.csv"
    if not f.is_file():
        return ""
    import pandas as pd

    full = pd.read_csv(f)
    df = headline(stem, d, full)
    note = (f"<p class='note'>{len(df)} of {len(full)} rows; all in <a href='{_esc(f.name)}'>{_esc(f.name)}</a>"
            "</p>" if len(df) < len(full) else "")
    return ("<div class='table'>" + df.to_html(index=False, classes="headline", border=0, na_rep="",
                                               float_format=table_number) + "</div>" + note)


def table_number(v: float) -> str:
    """A number as a report table shows it: whole numbers whole (a layer, a count: 3, not 3.0), three significant
    digits below 1000 (0.00981, 2.0, 0.0001), none after the point above (12345); the CSV keeps every digit."""
    v = float(v)
    if v != v:
        return ""
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def _tests(stem: str, d: dict) -> str:
    """The result's main tests as a small table (estimate, CI, p with its floor flagged, Holm-adjusted p) and the
    notes a reader needs beside them (figures.tables.main_tests), before the long table."""
    from interp.figures.tables import main_tests
    from interp.figures.text import p_flag

    rows, notes = main_tests(stem, d)
    out = ""
    if rows:
        def num(x, fmt="{:+.3g}"):
            return "" if x is None else fmt.format(x)

        def ci(r):
            return "" if r["lo"] is None or r["hi"] is None else f"[{r['lo']:+.3g}, {r['hi']:+.3g}]"

        body = "".join(
            f"<tr><td style='text-align:left'>{_esc(r['test'])}</td><td>{_esc(r['metric'] or '')}</td>"
            f"<td>{num(r['estimate'])}</td><td>{ci(r)}</td><td>{num(r['p_value'], '{:.3g}')}{_esc(p_flag(r))}</td>"
            f"<td>{num(r['p_floor'], '{:.3g}')}</td><td>{num(r['p_holm'], '{:.3g}')}</td></tr>" for r in rows)
        out += ("<div class='table tests'><table class='headline'><thead><tr><th>test</th><th>metric</th>"
                "<th>estimate</th><th>95% CI</th><th>p</th><th>smallest p the design allows</th>"
                "<th>p (Holm)</th></tr></thead><tbody>" + body + "</tbody></table></div>")
    out += "".join(f"<p class='note'>note: {_esc(n)}</p>" for n in notes)
    return out


def _details(title: str, obj) -> str:
    if not obj:
        return ""
    return (f"<details><summary>{_esc(title)}</summary><pre>{_esc(json.dumps(obj, indent=2, default=str))}</pre>"
            "</details>")


_STYLE = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#222}
h1{font-size:1.5em} h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
code,pre{background:#f6f6f6;padding:.2em .4em;border-radius:3px;white-space:pre-wrap;word-break:break-word}
table.headline{border-collapse:collapse;font-size:.85em} table.headline td,table.headline th{padding:.2em .6em;
border-bottom:1px solid #eee;text-align:right} table.headline th{background:#f0f0f0}
.table{overflow-x:auto} .note{color:#666;font-size:.85em} .warn{color:#a60} .figure{margin:1em 0}
#js-errors{color:#b00} #js-errors:empty{display:none} .tests{margin-bottom:1em}"""


def write_report(folder, run: dict | None = None, results: list[tuple[str, dict]] | None = None) -> Path:
    """Write every figure page and index.html for the results in `folder`. `run`: its run.json content
    (read from the folder when not given); `results`: [(stem, parsed result)] already read and checked (read
    from the folder when not given). Every figure is built before the first file is written. Returns the index
    path."""
    folder = Path(folder)
    run = run if run is not None else _read_run(folder)
    results = results if results is not None else _results(folder)
    built = [(stem, d, _figures(folder, stem, d)) for stem, d in results]  # every figure before any file is written
    ensure_plotly_js(folder)
    from interp.figures.base import write_html

    parts, figure_files = [], []
    for stem, d, figs in built:
        parts.append(f"<h2 id='{stem}'>{_esc(stem.replace('_', ' '))}</h2>")
        summary = d.get("summary")
        if isinstance(summary, str):
            parts.append(f"<p>{_esc(summary)}</p>")
        parts.append(_tests(stem, d))
        parts.append(_table(folder, stem, d))
        for name, fig in figs.items():
            write_html(fig, folder / f"{name}.html")
            figure_files.append(f"{name}.html")
            div = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{name}",
                              config={"responsive": True})
            parts.append(f'<div class="figure" data-figure="{_esc(name)}">{div}'
                         f'<p class="note"><a href="{_esc(name)}.html">{_esc(name)}.html</a></p></div>')
        parts.append(_details(f"{stem} settings", d.get("config")))
    first = results[0][1] if results else {}
    command = run.get("command") or "interp"
    words = command.split()[1:]
    name = words[:2] if words[:1] == ["detect"] else words[:1]
    title = "interp " + " ".join(name) if name and not name[0].startswith("-") else "interp run"
    model = first.get("model") or (first.get("provenance") or {}).get("model", {}).get("name", "")
    warn = "".join(f"<p class='warn'>warning: {_esc(w)}</p>" for w in run.get("warnings") or [])
    dt = run.get("dtype") if isinstance(run.get("dtype"), dict) else {}
    dtype = (f" · model dtype {_esc(dt.get('used'))} ({_esc(dt.get('asked'))}: {_esc(dt.get('reason'))})"
             if dt.get("used") else "")
    files = sorted({*(p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")),
                    *figure_files, INDEX} - {PLOTLY_JS})
    links = " · ".join(f"<a href='{_esc(f)}'>{_esc(f)}</a>" for f in files)
    prov = first.get("provenance")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)} · {_esc(model)}</title>
<style>{_STYLE}</style>
<script>window.__jsErrors = [];
window.addEventListener("error", function (e) {{ window.__jsErrors.push(String(e.message));
  var el = document.getElementById("js-errors"); if (el) el.textContent = window.__jsErrors.join("\\n"); }});
</script>
<script src="{PLOTLY_JS}"></script></head>
<body>
<h1>{_esc(title)} · {_esc(model)}</h1>
<p><code>{_esc(command)}</code></p>
<p class="note">{_esc(run.get("finished") or "")} · interp {_esc(run.get("interp_version") or "")}{dtype}</p>
{warn}<pre id="js-errors"></pre>
{"".join(parts) if results else "<p>No result files in this folder.</p>"}
<h2>Provenance</h2>{_details("models, weights, packages", prov) or "<p class='note'>none recorded</p>"}
<h2>Files</h2><p>{links}</p>
</body></html>
"""
    index = folder / INDEX
    tmp = index.with_suffix(".html.partial")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(index)
    return index


def _figures(folder: Path, stem: str, d: dict) -> dict:
    """The figures of result `d`; a result whose inner structure is not what its figures read (a field of the
    wrong shape deeper than RESULT_FIELDS checks) is InvalidInputError naming the file, not a traceback."""
    from interp.errors import InvalidInputError

    try:
        figs = (_figures_of(stem) or (lambda _: {}))(d)
        return {name: fig for name, fig in figs.items() if fig is not None}  # None: a figure this result has not
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        what = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        raise InvalidInputError(f"result file {folder / (stem + '.json')} is damaged: its {stem} data cannot be "
                                f"drawn ({what[:200]}); {RERUN}") from None


def _read_run(folder: Path) -> dict:
    f = folder / "run.json"
    try:
        d = json.loads(f.read_text(encoding="utf-8")) if f.is_file() else {}
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}
