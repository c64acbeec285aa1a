"""Tidy (long) tables from per-head grids: one row per (layer, head, quantity). Results' `to_frame()`."""

from __future__ import annotations

from typing import Iterable, Mapping


def head_frame(grids: Mapping[str, list], marked: Mapping[str, Iterable[str]] | None = None, **constant):
    """Long DataFrame from {quantity: [layer][head] grid}: columns layer, head, head_id, quantity, value, the
    boolean columns of `marked` ({column: head ids}) and the `constant` columns (e.g. model=...)."""
    import pandas as pd

    marked = {k: set(v) for k, v in (marked or {}).items()}
    recs = []
    for name, grid in grids.items():
        for layer, row in enumerate(grid):
            for head, v in enumerate(row):
                hid = f"L{layer}H{head}"
                recs.append({**constant, "layer": layer, "head": head, "head_id": hid, "quantity": name,
                             "value": None if v is None else float(v), **{k: hid in s for k, s in marked.items()}})
    return pd.DataFrame.from_records(recs)


def flatten_scalars(d: Mapping, prefix: str = "") -> dict:
    """{"a": 1, "b": {"c": 2.0, "d": [..]}} -> {"a": 1, "b.c": 2.0}: the scalar leaves of nested dicts."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten_scalars(v, key + "."))
        elif isinstance(v, (int, float, str, bool)) or v is None:
            out[key] = v
    return out


def records_frame(records: Iterable[Mapping], **constant):
    """One row per record, its scalar leaves as columns (nested keys joined with '.')."""
    import pandas as pd

    return pd.DataFrame.from_records([{**constant, **flatten_scalars(r)} for r in records])


def _test_row(test: str, metric: str | None, v: dict | None, estimate: str = "diff") -> dict | None:
    if not v:
        return None
    lo, hi = (v.get("diff_lo"), v.get("diff_hi")) if estimate == "diff" else (v.get("lo"), v.get("hi"))
    return {"test": test, "metric": metric, "estimate": v.get(estimate), "lo": lo, "hi": hi,
            "p_value": v.get("p_value"), "p_floor": v.get("p_floor"), "at_floor": v.get("at_floor"),
            "p_holm": v.get("p_holm"), "p_note": v.get("p_note") or v.get("note")}


def main_tests(stem: str, d: Mapping) -> tuple[list[dict], list[str]]:
    """The tests a result is about, in a form every page and terminal shows alike: (rows, notes).

    rows: {test, metric, estimate, lo, hi, p_value, p_floor, at_floor, p_holm, p_note} for the target against its pooled
    random controls (ablate, induction, each k of a curve, each dose of rope-zero: random dims and matched
    heads) and for retrieval vs other heads (rope-profile: Cohen's d, layer-clustered permutation p). An AtP
    patching result has no test rows but notes: its values are estimates, and how they agree with exact patching.
    notes: the sentences a reader needs beside them (fewer distinct control sets than asked, controls that
    overlap the target, p-values at the floor of their design or without power), each once."""
    rows: list[dict | None] = []
    notes: list[str] = []
    if stem == "ablation":
        tv = d.get("target_vs_random")
        rows.append(_test_row(f"target vs {tv['y']}" if tv else "", d.get("metric"), tv))
        notes += [d.get("controls_note")]
    elif stem == "induction":
        cz = d.get("causal") or {}
        rows += [_test_row(f"target vs {t['y']}", t.get("metric"), t) for t in cz.get("target_vs_random") or []]
        notes += [cz.get("controls_note"), cz.get("controls_overlap_note")]
    elif stem == "head_curve":
        for p in d.get("points") or []:
            tv = p.get("target_vs_random")
            rows.append(_test_row(f"k={p['k']}: top {p['k']} vs {p['k']} random heads", d.get("metric"), tv))
    elif stem == "rope_zero":
        for dose in d.get("doses") or []:
            for key, what in (("target_vs_random_dims", "random dims"), ("target_vs_matched_heads", "matched heads")):
                rows.append(_test_row(f"{dose['dose']} {d.get('unit', 'dims')}: target vs {what}", d.get("metric"),
                                      dose.get(key)))
        notes += [d.get("controls_note"), d.get("controls_overlap_note")]
    elif stem == "rope_profile":
        for name, c in sorted((d.get("comparisons") or {}).items(), key=lambda kv: kv[0] != d.get("statistic")):
            perm = dict(c.get("layer_clustered_permutation") or {})
            lo, hi = c.get("cohens_d_ci") or (None, None)
            rows.append({"test": f"{name}{' (chosen)' if name == d.get('statistic') else ''}: retrieval vs other "
                                 "heads (Cohen's d; layer-clustered permutation)", "metric": name,
                         "estimate": c.get("cohens_d"), "lo": lo, "hi": hi, "p_value": perm.get("p_value"),
                         "p_floor": perm.get("p_floor"), "at_floor": perm.get("at_floor"),
                         "n_free_layers": perm.get("n_free_layers"), "p_holm": perm.get("p_holm"),
                         "p_note": perm.get("note")})
    elif stem == "patching" and d.get("method", "exact") != "exact":
        notes.append(f"{d['method']}: every value of these grids is a first-order estimate of the patching effect "
                     "(two forward passes and one backward), not a measurement")
        for site, v in (d.get("verification") or {}).items():
            def f(x):
                return "-" if x is None else f"{x:.2f}"
            r = v.get("ratio_top")
            misses = "; ".join(f"{m['cell']} {m['estimate']:+.3f} vs {m['exact']:+.3f}"
                               for m in v.get("largest_misses") or [])
            notes.append(f"{site}: against exact patching on {v['n_checked']} cells, Pearson {f(v.get('pearson'))}, "
                         f"top-{v['top']} recall {f(v.get('top_k_recall'))}, slope {f(v.get('slope'))} (estimate ~ "
                         f"slope x exact)" + (f", the top estimates {r['min']:.2f}-{r['max']:.2f} of the exact effect"
                                              if r else "") + (f"; largest misses (estimate vs exact): {misses}"
                                                               if misses else ""))
    out = [r for r in rows if r]
    notes += [r["p_note"] for r in out]
    seen: list[str] = []
    for n in notes:
        if n and n not in seen:
            seen.append(n)
    return out, seen
