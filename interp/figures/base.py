"""What every figure shares: a result object or its dict as input, head-grid axes, condition colours and
the HTML writer. Plotting only reads results (a result object or its dict, as written to JSON); it
computes nothing."""

from __future__ import annotations

import functools
from pathlib import Path


def as_result_dict(result) -> dict:
    """A result's dict: a result object (anything with `to_dict()`) or the dict itself (e.g. read from JSON)."""
    if isinstance(result, dict):
        return result
    if callable(getattr(result, "to_dict", None)):
        return result.to_dict()
    from interp.errors import InvalidInputError

    raise InvalidInputError(f"a figure needs a result object or its dict, got {type(result).__name__}")


def reads_result(fn):
    """Decorator: the figure function's first argument may be a result object or its dict."""
    @functools.wraps(fn)
    def wrapper(result, *args, **kwargs):
        return fn(as_result_dict(result), *args, **kwargs)

    return wrapper


def _go():
    import plotly.graph_objects as go

    return go


def ci_error_y(estimates) -> dict:
    """plotly's error_y for estimates {"mean", "lo", "hi"} (a 95% CI around each mean; a missing bound: no bar)."""
    return {"type": "data", "array": [0 if e["hi"] is None else e["hi"] - e["mean"] for e in estimates],
            "arrayminus": [0 if e["lo"] is None else e["mean"] - e["lo"] for e in estimates]}


ROW_PX = 18  # plot height per layer row: a tick label of plotly's 12-px font each, with room between them
PLOT_MARGIN_PX = 200  # title, x axis and its title, margins


def layer_rows_height(n_rows: int, minimum: int = 450) -> int:
    """The figure height at which a heatmap of `n_rows` layer rows shows every row's tick legibly (plotly's default
    450 px leaves about 8 px per row of a 30-layer model, and the labels overlap)."""
    return max(minimum, PLOT_MARGIN_PX + ROW_PX * int(n_rows))


def head_grid_axes(fig, n_heads: int, n_layers: int, head_title: str = "query head") -> None:
    """Integer ticks (every one while they fit) on a layer x head grid, layer 0 at the bottom; the figure tall
    enough for every layer's tick (`layer_rows_height`)."""
    fig.update_layout(xaxis={"title": head_title, "tickmode": "linear", "tick0": 0,
                             "dtick": 1 if n_heads <= 32 else max(1, n_heads // 16)},
                      yaxis={"title": "layer", "tickmode": "linear", "tick0": 0,
                             "dtick": 1 if n_layers <= 64 else max(1, n_layers // 32)},
                      height=layer_rows_height(min(n_layers, 64)))


def wrap_title(text: str, width: int = 110) -> str:
    """A long figure title broken into lines (plotly does not wrap titles: a long one is cut at the figure's
    edge)."""
    import textwrap

    return "<br>".join(textwrap.wrap(text, width)) or text


ROLE_COLORS = {"baseline": "#9e9e9e", "target": "#d62728", "control": "#4c78a8", "pooled": "#1f3b63"}


def condition_colors(conds) -> list[str]:
    """A colour per condition by its kind: baseline grey, target red, random controls blue, their pool dark."""
    return [ROLE_COLORS["pooled"] if c.get("pooled") else ROLE_COLORS.get(c.get("role"), ROLE_COLORS["control"])
            for c in conds]


def _metric_axis(metric: str) -> dict:
    """Axis title and, for 0/1 metrics, the fixed [0, 1] range."""
    if metric in ("recall", "exact_prefix"):
        return {"yaxis_title": f"NIAH {metric}", "yaxis_range": [0, 1.05]}
    return {"yaxis_title": metric}


def write_html(fig, path: str | Path) -> Path:
    """Write a figure; plotly.js goes once into the same folder so the pages work offline."""
    path = Path(path)
    fig.write_html(str(path), include_plotlyjs="directory", full_html=True)
    return path
