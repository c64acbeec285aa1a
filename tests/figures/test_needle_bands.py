"""rope-profile --decompose's figure reads the decomposition: one bar per band at its mean with its CI, one trace
per band over the needle distances; a result without a decomposition draws no such figure."""

import numpy as np

from interp.figures.experiments import needle_band_bars, rope_profile_figures


def _est(m):
    return {"mean": m, "lo": m - 0.1, "hi": m + 0.2, "n": 3, "level": 0.95, "method": "bca", "n_boot": 10, "seed": 0}


def _result(decomposition):
    return {"model": "m", "pair_order": [1, 0], "pair_freqs": [1.0, 0.1], "retrieval_heads": ["L0H0"],
            "usage": [[[0.5, 0.5]]], "decomposition": decomposition}


def test_bars_and_depth_traces_come_from_the_decomposition():
    bands = [{"band": n, "pairs": [], "estimate": _est(m), "share_of_gap": None}
             for n, m in (("lowest quarter", 2.0), ("highest quarter", -0.5))]
    dec = {"heads": ["L0H0"], "n_prompts": 3, "gap": _est(1.5), "bands": bands,
           "by_depth": [{"depth": 1.0, "distance": 20.0, "n": 1, "gap": 1.0, "bands": [0.7, 0.3]},
                        {"depth": 0.0, "distance": 500.0, "n": 2, "gap": 2.0, "bands": [1.9, 0.1]}]}
    fig = needle_band_bars(_result(dec))
    bar = fig.data[0]
    assert list(bar.x) == ["lowest quarter", "highest quarter"] and list(bar.y) == [2.0, -0.5]
    assert np.allclose(bar.error_y.array, [0.2, 0.2]) and np.allclose(bar.error_y.arrayminus, [0.1, 0.1])
    lines = fig.data[1:]
    assert [t.name for t in lines] == ["lowest quarter", "highest quarter"]
    assert list(lines[0].x) == [20.0, 500.0] and list(lines[0].y) == [0.7, 1.9]
    assert "+1.50 [+1.40, +1.70]" in fig.layout.title.text
    assert set(rope_profile_figures(_result(dec))) == {"rope_usage", "needle_bands"}
    assert set(rope_profile_figures(_result(None))) == {"rope_usage"}
