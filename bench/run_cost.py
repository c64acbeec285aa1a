#!/usr/bin/env python
"""What a set of runs cost: the wall and CPU seconds each run folder's run.json records (`compute`), per folder
and in total, under one or more roots (e.g. runs/results-real after `make results-real`). Folders whose run.json
predates the record are listed as not measured, never counted as zero.

Usage: python bench/run_cost.py [ROOT ...]   (default runs/results-real)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def run_costs(roots: list[Path]) -> tuple[list[dict], list[Path]]:
    """(one row per run folder with a compute record, the run folders without one)."""
    rows, missing = [], []
    for root in roots:
        for marker in sorted(root.rglob("run.json")):
            try:
                run = json.loads(marker.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            c = run.get("compute") if isinstance(run, dict) else None
            if not c:
                missing.append(marker.parent)
                continue
            rows.append({"run": str(marker.parent), "wall_s": c["wall_seconds"], "cpu_s": c["cpu_seconds"],
                         "threads": c.get("torch_threads"), "command": run.get("command", "")})
    return rows, missing


def main(argv=None) -> int:
    roots = [Path(a) for a in (argv if argv is not None else sys.argv[1:])] or [Path("runs/results-real")]
    bad = [r for r in roots if not r.is_dir()]
    if bad:
        print(f"error: not a folder: {', '.join(map(str, bad))}", file=sys.stderr)
        return 2
    rows, missing = run_costs(roots)
    print(f"{'run':60s} {'wall min':>9s} {'CPU min':>8s} {'threads':>8s}")
    for r in rows:
        print(f"{r['run']:60s} {r['wall_s'] / 60:9.1f} {r['cpu_s'] / 60:8.1f} {str(r['threads']):>8s}")
    print(f"{'total (' + str(len(rows)) + ' runs)':60s} {sum(r['wall_s'] for r in rows) / 60:9.1f} "
          f"{sum(r['cpu_s'] for r in rows) / 60:8.1f}")
    if missing:
        print(f"not measured (run.json without a compute record): {len(missing)} runs: "
              + ", ".join(str(m) for m in missing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
