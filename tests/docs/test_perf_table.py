"""The README's performance table is what bench/table.py computes from the committed bench/results/*.json:
no number in it is typed by hand, and a changed result file changes the table or fails here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_performance_table_is_computed_from_the_committed_results():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- perf-table -->\n(.*?)\n<!-- /perf-table -->", readme, re.S)
    assert m, "README.md lacks the <!-- perf-table --> block"
    want = subprocess.run([sys.executable, "bench/table.py"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    assert m.group(1).strip() == want, "README's table differs from `python bench/table.py`: paste its output"
    rows = [ln for ln in want.splitlines()[2:]]
    assert len(rows) >= 6
    for ln in rows:  # every row names a committed result file and the command that wrote it
        f = re.search(r"`bench/results/([^`]+)`", ln).group(1)
        assert (ROOT / "bench" / "results" / f).is_file(), f
        assert re.search(r"`python bench/\w+\.py", ln), ln
