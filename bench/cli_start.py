"""How fast the CLI answers when it has no model to load: `interp -h`, `interp models`, a refused argument, and
`interp info --config-only` (which reads a config through transformers), each as a fresh process, beside a bare
`python -c pass` and a `python -c "import torch, transformers"` (what every command paid before it imported them
lazily). Prints the median of --repeats runs in seconds and each command's ratio to the heavy import.

    .venv/bin/python bench/cli_start.py --repeats 5 --out bench/results/cli-start-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

INTERP = str(Path(sys.executable).with_name("interp"))
CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import torch, transformers": [sys.executable, "-c", "import torch, transformers"],
    "interp -h": [INTERP, "-h"],
    "interp models": [INTERP, "models"],
    "interp ablate --heads (refused: no value)": [INTERP, "ablate", "--heads"],
    "interp info --config-only -m qwen2.5-7b": [INTERP, "info", "--config-only", "-m", "qwen2.5-7b"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    rows = []
    for name, cmd in CASES.items():
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            subprocess.run(cmd, capture_output=True, env=env)
            times.append(time.perf_counter() - t)
        rows.append({"command": name, "median_s": round(statistics.median(times), 3)})
    heavy = next(r["median_s"] for r in rows if r["command"] == "import torch, transformers")
    for r in rows:
        r["vs_heavy_import"] = round(r["median_s"] / heavy, 2)
        print(f"{r['command']:45s} {r['median_s']:6.2f} s  ({r['vs_heavy_import']:.2f}x import torch, transformers)")
    if args.out:
        Path(args.out).write_text(json.dumps({"bench": "cli_start", "repeats": args.repeats, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
