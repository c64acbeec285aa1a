"""Strict JSON for every file interp writes: no NaN/Infinity literals, written atomically."""

from __future__ import annotations

import json
from pathlib import Path


def strict(obj):
    """`obj` with every non-finite float replaced by null, so strict JSON parsers accept it. A dict that
    held any gets a "nonfinite" entry naming them ({"cohens_d": "-inf"}): the value is kept, as text."""
    import math

    if isinstance(obj, dict):
        out, bad = {}, {}
        for k, v in obj.items():
            if isinstance(v, float) and not math.isfinite(v):
                out[k] = None
                bad[str(k)] = "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
            else:
                out[k] = strict(v)
        if bad:
            out["nonfinite"] = {**out.get("nonfinite", {}), **bad} if isinstance(out.get("nonfinite"), dict) else bad
        return out
    if isinstance(obj, (list, tuple)):
        return [None if isinstance(v, float) and not math.isfinite(v) else strict(v) for v in obj]
    return obj


def dumps(obj, **kw) -> str:
    """Strict JSON (no NaN/Infinity literals; see `strict`)."""
    return json.dumps(strict(obj), allow_nan=False, **kw)


def write_json(obj: dict, path: str | Path) -> None:
    """Write atomically (a half-written file never looks valid), as strict JSON."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".partial")
    tmp.write_text(dumps(obj, indent=2))
    tmp.replace(path)
