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

from interp.runtime import records

PLOTLY_JS = "plotly.min.js"
INDEX = "index.html"
TABLE_ROWS = 40  # rows of the headline table on the page (the CSV holds them all)


def _figures_of(stem: str) -> Callable[[dict], dict] | None:
    """result dict -> {figure stem: plotly figure} of result kind `stem`: its record's `figures`
    (interp.runtime.records, the one place that says which figures a result has)."""
    from interp.runtime.records import BY_NAME, resolve

    r = BY_NAME.get(stem)
    return resolve(r.figures) if r is not None and r.figures else None


RESULTS = records.RESULTS  # result files, in the order a page shows them (a run's own detection last)
# what each result file must hold for its page (the fields its figures and headline read), by JSON type
RESULT_FIELDS = {r.name: r.fields for r in records.RECORDS if r.file}
RERUN = records.RERUN


def check_result(stem: str, d, f: Path) -> dict:
    """`d`, the parsed result file `f` (RESULTS stem `stem`), if it is an object holding the fields its page
    reads (RESULT_FIELDS) with their JSON types; InvalidInputError in one line naming the file otherwise.
    (`interp report` reads the file with runtime.jsonio.read_json first: not JSON, cut short, nested too deeply.)"""
    return records.check_result(stem, d, f)


def result_files(folder: Path) -> list[tuple[str, Path]]:
    """(stem, path) of the result files in `folder`, in page order."""
    return records.result_files(folder)


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


PRIMARY = {r.name: r.primary for r in records.RECORDS if r.primary}  # a head table's main score
HEADLINE_ROWS = 12  # top heads of a layer x head table
CELL_CHARS = 28  # longer text cells are cut on the page


def headline(stem: str, d: dict, df):
    """The rows worth a first look, as the result's record says (`Record.headline`): the top heads by the result's
    main score (layer x head tables, "heads"), the largest cells of each grid site ("cells": patching), the rows of
    the result's metric (condition tables), else the first rows. Constant columns go (the model)."""
    import pandas as pd

    kind = records.BY_NAME[stem].headline if stem in records.BY_NAME else None
    if kind == "heads" and {"quantity", "value"} <= set(df.columns):
        q = PRIMARY.get(stem, df["quantity"].iloc[0] if len(df) else None)
        df = df[df["quantity"] == q].sort_values("value", ascending=False, key=abs).head(HEADLINE_ROWS)
    elif kind == "cells" and "mean" in df.columns and "condition" not in df.columns and len(df) > HEADLINE_ROWS:
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
