"""The attention-row view of a retrieval detection (`attention_example`): one panel per head with the needle
shaded, pooled rows placed at their bins' centres, and old retrieval.json files (written before the field) still
loading and rendering their page without it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from interp.figures.experiments import attention_rows_view

OLD = Path(__file__).parents[2] / "bench" / "results" / "gpu" / "sweep-1"  # a retrieval run from before the field


def _example(n_keys=12, width=1, span=(4, 7), heads=("L2H7", "L2H6", "L1H0")):
    n_bins = -(-n_keys // width)
    rows = {h: [0.001] * n_bins for h in heads}
    for i, h in enumerate(heads):
        rows[h][span[0] // width] = 0.9 - 0.1 * i
    return {"model": "m", "attention_example": {"sample_id": "L12-d0.5-s1", "recalled": True,
                                                "query_position": n_keys - 1, "n_keys": n_keys, "bin": width,
                                                "needle_span": list(span), "heads": rows}}


def _vrects(fig):
    return [s for s in fig.layout.shapes if s.type == "rect"]


def test_one_panel_per_head_with_the_needle_shaded():
    d = _example()
    fig = attention_rows_view(d)
    assert [t.name for t in fig.data] == ["L2H7", "L2H6", "L1H0"]
    assert len({t.yaxis for t in fig.data}) == 3  # a panel each
    assert list(fig.data[0].x) == list(range(12)) and fig.data[0].y[4] == pytest.approx(0.9)
    rects = _vrects(fig)
    assert len(rects) == 3 and {r.yref for r in rects} == {"y domain", "y2 domain", "y3 domain"}
    assert all(r.x0 <= 3.5 and r.x1 >= 6.5 and r.x1 - r.x0 < 12 for r in rects)  # keys 4-6 inside, not the row
    title = fig.layout.title.text.replace("<br>", " ")
    assert "(11)" in title and "12-key" in title and "keys 4-6" in title and "every key" in title
    assert all(ax.type == "log" for ax in (fig.layout.yaxis, fig.layout.yaxis2, fig.layout.yaxis3))


def test_pooled_rows_sit_at_their_bins_and_a_short_needle_stays_visible():
    d = _example(n_keys=40000, width=40, span=(20000, 20012), heads=("L0H0",))
    fig = attention_rows_view(d)
    x = list(fig.data[0].x)
    assert len(x) == 1000 and x[0] == 19.5 and x[500] == 20019.5  # bin 500 holds keys 20000-20039
    assert list(fig.data[0].customdata[500]) == [20000, 20039]
    r = _vrects(fig)[0]
    assert r.x0 <= 19999.5 and r.x1 >= 20039.5  # the whole bin the needle lies in ...
    assert r.x1 - r.x0 >= 40000 / 150 - 1e-6  # ... and wide enough to see on a 40000-key axis
    assert "bins of 40 keys" in fig.layout.title.text.replace("<br>", " ")


def test_no_example_no_figure():
    assert attention_rows_view({"model": "m"}) is None
    assert attention_rows_view({"model": "m", "attention_example": None}) is None


def test_an_old_retrieval_json_loads_and_renders_without_the_view(tmp_path):
    from interp.analyses.heads import SavedDetection
    from interp.analyses.retrieval import RetrievalResult
    from interp.figures.report import write_report

    old = tmp_path / "old"
    shutil.copytree(OLD, old)
    d = json.loads((old / "retrieval.json").read_text())
    assert "attention_example" not in d
    assert RetrievalResult.from_dict(d).attention_example is None
    assert SavedDetection.read(old, "retrieval").heads == d["heads"]
    html = write_report(old).read_text()
    assert 'data-figure="retrieval_heatmap"' in html and "attention_rows" not in html
    assert not (old / "attention_rows.html").exists()
    d.update(_example(n_keys=len(d["scores"]) + 20, span=(3, 5), heads=d["heads"][:2] or ["L0H0"]))
    d["model"] = json.loads((OLD / "retrieval.json").read_text())["model"]
    (old / "retrieval.json").write_text(json.dumps(d))
    assert 'data-figure="attention_rows"' in write_report(old).read_text()
    assert (old / "attention_rows.html").is_file()
