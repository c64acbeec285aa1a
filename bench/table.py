#!/usr/bin/env python
"""The README's performance table, computed from the committed bench/results/*.json (nothing typed by hand).

Every row is a ratio of two times (or memories) measured in the same run, with the JSON it comes from and
the command that wrote that JSON. `python bench/table.py` prints the table; the README holds it between
the markers `<!-- perf-table -->` and `<!-- /perf-table -->`, and a test checks the two agree.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

PATCHING = {  # result file -> (model label, the command that wrote it)
    "patching-cpu.json": ("tiny-llama (4 layers)", "python bench/patching.py"),
    "patching-smollm2-cpu.json": ("SmolLM2-135M (30 layers)",
                                  "python bench/patching.py --model smollm2-135m --seq 128 --positions 8 "
                                  "--baseline-cells 16 --skip atp,atp-qk,interp-noskip --long 0 "
                                  "--out bench/results/patching-smollm2-cpu.json"),
    "patching-smollm2-full8-cpu.json": ("SmolLM2-135M (30 layers)",
                                        "python bench/patching.py --model smollm2-135m --seq 128 --grids resid "
                                        "--baseline-cells 16 --skip atp,atp-qk,interp-noskip --long 0 "
                                        "--out bench/results/patching-smollm2-full8-cpu.json"),
}
GRID_LABEL = {"resid": "resid_pre, every layer x {pos} positions", "heads": "head_out, every head",
              "heads_pos": "head_out_by_pos, last 8 positions"}
METHOD_LABEL = {"naive": "one forward per cell (torch hooks)", "tl": "TransformerLens patching",
                "nnsight": "nnsight, one trace per cell"}


def _load(name: str) -> dict | None:
    p = RESULTS / name
    return json.loads(p.read_text()) if p.is_file() else None


def patching_rows() -> list[tuple[str, ...]]:
    rows = []
    for name, (label, cmd) in PATCHING.items():
        d = _load(name)
        if d is None or not any("work_bound" in r for r in d["rows"]):
            continue
        for grid in ("resid", "heads", "heads_pos"):
            mine = next((r for r in d["rows"] if r["grid"] == grid and r["method"] == "interp"), None)
            if mine is None:
                continue
            pos = len(mine["positions"]) if mine.get("positions") else f"all {mine['seq']}"
            what = (f"patching {GRID_LABEL[grid].format(pos=pos)}, {mine['pairs']} pairs "
                    f"x {mine['seq']} tokens, {label}")
            rows.append((what, "interp: time / (work bound W x one forward)", f"{mine['measured_over_bound']:.2f}",
                         name, cmd))
            for r in d["rows"]:
                if r["grid"] == grid and r["method"] in METHOD_LABEL:
                    scaled = f" ({r['cells']} of {r['grid_cells']} cells, time scaled)" if r.get("scaled") else ""
                    rows.append((what, f"{METHOD_LABEL[r['method']]}{scaled} / interp", f"{r['ratio_vs_interp']:.1f}x",
                                 name, cmd))
    return rows


LONG = {"patching-smollm2-long-cpu.json": ("SmolLM2-135M", "python bench/patching.py --model smollm2-135m --grids '' "
                                                           "--long 512,2048 --out bench/results/patching-smollm2-long-cpu.json")}
LONG_LABEL = {"atp head_out": "AtP on head_out", "atp-qk q,k": "AtP-QK on q, k"}


def attribution_rows() -> list[tuple[str, ...]]:
    rows = []
    for name, (label, cmd) in LONG.items():
        d = _load(name)
        for r in (d or {}).get("long_context", []):
            if r.get("what") in LONG_LABEL and "x_forward_backward" in r:
                rows.append((f"attribution patching, {LONG_LABEL[r['what']]}, one {r['tokens']}-token pair, {label}",
                             "time / one forward + backward", f"{r['x_forward_backward']:.2f}", name, cmd))
    return rows


def detect_rows() -> list[tuple[str, ...]]:
    d = _load("detect-cpu.json")
    if d is None:
        return []
    rows = []
    by = {(r["ctx"], r["method"]): r for r in d["results"] if "times_s" in r}
    for ctx in sorted({c for c, _ in by}):
        a, b = by.get((ctx, "interp")), by.get((ctx, "eager"))
        if a and b:
            what = f"retrieval-head detection, tiny-qwen2, {ctx} tokens"
            rows.append((what, "eager output_attentions / interp, time", f"{min(b['times_s']) / min(a['times_s']):.1f}x",
                         "detect-cpu.json", "python bench/detect.py"))
            rows.append((what, "eager output_attentions / interp, peak memory",
                         f"{b['peak_bytes'] / a['peak_bytes']:.1f}x", "detect-cpu.json", "python bench/detect.py"))
    return rows


def load_rows() -> list[tuple[str, ...]]:
    d = _load("load-cpu.json")
    return [] if d is None else [(f"loading {r['model']} (GGUF)", "transformers' GGUF load / interp's cached load",
                                  f"{r['transformers_over_second']:.1f}x", "load-cpu.json", "python bench/load.py")
                                 for r in d["rows"]]


def table() -> str:
    head = ["| measurement | ratio of | value | result | command |", "|---|---|---|---|---|"]
    rows = patching_rows() + attribution_rows() + detect_rows() + load_rows()
    return "\n".join(head + [f"| {w} | {o} | {v} | `bench/results/{f}` | `{c}` |" for w, o, v, f, c in rows])


if __name__ == "__main__":
    print(table())
