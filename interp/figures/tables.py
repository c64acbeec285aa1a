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
