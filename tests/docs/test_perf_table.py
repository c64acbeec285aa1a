"""The performance table of docs/benchmarks.md is what bench/table.py computes from the committed
bench/results/*.json: no number in it is typed by hand, and a changed result file changes the table or fails here.
The README's short summary quotes that table: its ranges and ratios are recomputed from the table's rows here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _table() -> str:
    return subprocess.run([sys.executable, "bench/table.py"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_benchmarks_performance_table_is_computed_from_the_committed_results():
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- perf-table -->\n(.*?)\n<!-- /perf-table -->", page, re.S)
    assert m, "docs/benchmarks.md lacks the <!-- perf-table --> block"
    want = _table()
    assert m.group(1).strip() == want, "docs/benchmarks.md's table differs from `python bench/table.py`: paste its output"
    rows = [ln for ln in want.splitlines()[2:]]
    assert len(rows) >= 6
    for ln in rows:  # every row names a committed result file and the command that wrote it
        f = re.search(r"`bench/results/([^`]+)`", ln).group(1)
        assert (ROOT / "bench" / "results" / f).is_file(), f
        assert re.search(r"`python bench/\w+\.py", ln), ln


def test_readme_performance_summary_quotes_the_table():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "<!-- perf-table -->" not in readme  # the full table lives in docs/benchmarks.md
    m = re.search(r"<!-- perf-summary -->\n(.*?)\n<!-- /perf-summary -->", readme, re.S)
    assert m, "README.md lacks the <!-- perf-summary --> block"
    summary = " ".join(m.group(1).split())
    assert len(m.group(1).splitlines()) <= 6 and "docs/benchmarks.md#the-performance-table" in summary
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in _table().splitlines()[2:]]

    def vals(what, ratio):
        return [r[2] for r in rows if what in r[0] and re.search(ratio, r[1])]

    smol = "SmolLM2-135M (30 layers)"
    bound = [float(v) for v in vals(smol, r"work bound")]
    faster = [float(v.rstrip("x")) for v in vals(smol, r"^(one forward per cell|TransformerLens|nnsight)")]
    assert bound and faster
    assert f"{min(bound):.2f}-{max(bound):.2f} times its work bound" in summary
    assert f"{min(faster):.1f}x-{max(faster):.1f}x faster" in summary
    assert f"({vals('forward, 1 x 1024 tokens, SmolLM2-135M', r'^interp.Model')[0]})" in summary
    for model, label in (("smollm2-135m", "SmolLM2-135M"), ("gemma3-270m", "Gemma-3-270M")):
        assert f"{vals(f'loading {model}', 'GGUF load')[0]} ({label})" in summary
