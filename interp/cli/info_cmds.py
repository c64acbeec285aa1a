"""`interp info`: a model's ModelSpec."""

from __future__ import annotations

from typing import Optional

import typer

from interp.cli.options import JSON, MODEL, model_label
from interp.runtime.jsonio import dumps


def info(model: Optional[str] = MODEL, as_json: bool = JSON,
         config_only: bool = typer.Option(False, "--config-only", help="Read only config.json (no weights); the RoPE "
                                           "frequencies then come from a meta-device model.")):
    """Show a model's ModelSpec: geometry, GQA grouping, RoPE frequencies and layout."""
    from interp.models.spec_cache import spec_info

    name = model_label(model)
    # kept in interp's cache for a model on disk while its files and interp's code stay the same: a repeated
    # call reads it back instead of importing torch and transformers (interp.models.spec_cache)
    entry = spec_info(name, config_only, with_source=as_json)
    d = entry["spec"]
    if as_json:
        typer.echo(dumps({"model": name, "config_source": entry["config_source"], "spec": d}, indent=2))
        return
    from rich.table import Table

    from interp.cli.output import stdout_console

    t = Table(title=f"{name}: {d['architecture']}")
    t.add_column("field")
    t.add_column("value")
    for k, v in d.items():
        if k == "rope" and v is not None:
            v = _rope_line(v) + (" (layer 0's; per layer type below)" if d["layer_ropes"] else "")
        elif k == "layer_types" and v:
            v = "; ".join(f"{lt} x{v.count(lt)}: layers {_ranges([i for i, x in enumerate(v) if x == lt])}"
                          for lt in dict.fromkeys(v))
        elif k == "layer_ropes":
            if not v:
                continue
            v = "; ".join(f"{lt}: {_rope_line(r)}" for lt, r in v.items())
        t.add_row(k, str(tuple(v) if isinstance(v, list) else v))  # the spec's tuples, also when read back as lists
    stdout_console().print(t)


def _rope_line(v: dict) -> str:
    freqs = v["inv_freq"]
    return (f"theta={v['theta']:g}, layout={v['layout']}, rotary_dims={v['rotary_dims']}/{v['head_dim']}, "
            f"scaling={v['scaling']}, inv_freq[0]={freqs[0]:.3g} .. inv_freq[-1]={freqs[-1]:.3g}")


def _ranges(xs: list[int]) -> str:
    """[0, 1, 2, 4, 6, 7] -> '0-2, 4, 6-7'."""
    out, start = [], None
    for i, x in enumerate(xs):
        if start is None:
            start = x
        if i + 1 == len(xs) or xs[i + 1] != x + 1:
            out.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ", ".join(out)
