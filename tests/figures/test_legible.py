"""Report pages read at a glance: numbers in the HTML tables rounded (the CSV keeps every digit), and heatmaps
of a 30-layer model tall enough that every layer's tick has room."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from interp.figures.base import PLOT_MARGIN_PX, ROW_PX, layer_rows_height


def _patching_result(n_layers: int, n_heads: int = 9, positions=(-3, -2, -1)) -> dict:
    rng = np.random.default_rng(0)
    P = len(positions)
    grid = lambda *shape: rng.uniform(-1, 1, shape).round(6).tolist()  # noqa: E731
    return {"model": "m", "direction": "denoising", "metric": "logit_diff", "normalized": True, "method": "exact",
            "n_pairs": 2, "pair_lengths": [3, 3], "base_value": [0.0, 0.1], "align": "end",
            "tokens": {"clean": [["a", "b", "c"], ["a", "x", "c"]], "corrupt": [["a", "b", "c"], ["a", "x", "c"]]},
            "sites": {"resid_pre": {"axes": ["layer", "position"], "mean": grid(n_layers, P),
                                    "n_pairs": [[2] * P] * n_layers, "positions": list(positions)},
                      "head_out": {"axes": ["layer", "head"], "mean": grid(n_layers, n_heads),
                                   "n_pairs": [[2] * n_heads] * n_layers, "positions": None}}}


def test_thirty_layer_heatmaps_give_every_layer_tick_room():
    from interp.figures.heads import score_heatmap
    from interp.figures.patching import patching_heatmaps

    figs = patching_heatmaps(_patching_result(30))
    for name in ("patching_resid_pre", "patching_head_out"):
        fig = figs[name]
        assert fig.layout.yaxis.dtick == 1  # every layer labelled ...
        assert (fig.layout.height - PLOT_MARGIN_PX) / 30 >= ROW_PX >= 16  # ... with a 12-px label's room each
        assert "<br>" in fig.layout.title.text  # a long title wraps instead of running off the figure
    assert figs["patching_resid_pre"].data[0].x == ("-3 a", "-2", "-1 c")  # token only where every pair has it
    heads = score_heatmap({"model": "m", "scores": {"induction": np.zeros((30, 9)).tolist()}}, "induction", "scores")
    assert heads.layout.yaxis.dtick == 1 and heads.layout.height == layer_rows_height(30) > 450
    assert patching_heatmaps(_patching_result(4))["patching_resid_pre"].layout.height == 450  # small models as before


def test_report_tables_round_numbers_and_the_csv_keeps_them(tmp_path):
    from interp.figures.report import _table, table_number

    assert [table_number(v) for v in (3.0, 0.0098113, 9.999e-05, 1.2345e-05, -0.53712, 12345.6, float("nan"))] == \
        ["3", "0.00981", "0.0001", "1.23e-05", "-0.537", "12346", ""]
    df = pd.DataFrame({"site": ["head_out"] * 3, "layer": [23.0, 25.0, 16.0], "head": [3.0, 7.0, 0.0],
                       "mean": [1.3160449, 0.71271933, -0.53712121], "p_value": [0.25, 9.999000099990002e-05, 1.0]})
    df.to_csv(tmp_path / "patching.csv", index=False)
    html = _table(tmp_path, "patching", {"sites": {}})
    cells = re.findall(r"<td>([^<]*)</td>", html)
    assert "1.32" in cells and "0.713" in cells and "-0.537" in cells and "0.0001" in cells and "23" in cells
    decimals = [c for c in cells if re.fullmatch(r"-?\d*\.\d+", c)]
    assert decimals and all(len(re.sub(r"\D", "", c).lstrip("0")) <= 3 for c in decimals), decimals  # 3 digits
    assert "0.71271933" in (tmp_path / "patching.csv").read_text()
    json.dumps(html)  # plain text
