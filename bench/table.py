#!/usr/bin/env python
"""The performance table of docs/benchmarks.md, computed from the committed bench/results/*.json (nothing typed
by hand).

Every row is a ratio of two times (or memories) measured in the same run, with the JSON it comes from and
the command that wrote that JSON. `python bench/table.py` prints the table; docs/benchmarks.md holds it between
the markers `<!-- perf-table -->` and `<!-- /perf-table -->`, and a test checks the two agree (and that the
README's short summary quotes the table's numbers).
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


DETECT_REAL = {"detect-smollm2-135m-cpu.json": (
    "SmolLM2-135M", "python bench/detect.py --model smollm2-135m --contexts 1024 2048 4096 --seeds 2 --threads 1 "
                    "--mem-budget-gb 16")}


def detect_real_rows() -> list[tuple[str, ...]]:
    rows = []
    for name, (label, cmd) in DETECT_REAL.items():
        d = _load(name)
        by = {(r["ctx"], r["method"]): r for r in (d or {}).get("results", []) if "times_s" in r}
        for ctx in sorted({c for c, _ in by}):
            a, g, e = by.get((ctx, "interp")), by.get((ctx, "greedy")), by.get((ctx, "eager"))
            what = f"retrieval-head detection, {label}, {ctx} tokens"
            if a and g:
                rows.append((what, "interp detection / plain greedy decoding, CPU time",
                             f"{a['seconds'] / g['seconds']:.2f}", name, cmd))
            if a and e:
                rows.append((what, "eager output_attentions / interp, CPU time", f"{e['seconds'] / a['seconds']:.1f}x",
                             name, cmd))
                rows.append((what, "eager output_attentions / interp, peak memory",
                             f"{e['peak_bytes'] / a['peak_bytes']:.1f}x", name, cmd))
    return rows


OVERHEAD_REAL = {  # result file -> (model label, command, contexts taken from it, whether its part 1 is shown)
    "overhead-smollm2-135m-cpu.json": (
        "SmolLM2-135M", "python bench/overhead.py --model smollm2-135m --contexts 1024 4096 8192 --mem-budget-gb 16",
        (1024, 4096), True),
    "overhead-smollm2-135m-8k-cpu.json": (
        "SmolLM2-135M", "python bench/overhead.py --model smollm2-135m --contexts 8192 --kinds sdpa,rows,tl --repeats 5 "
                        "--mem-budget-gb 16 --child-timeout 7200 --out bench/results/overhead-smollm2-135m-8k-cpu.json",
        (8192,), False),
}


def overhead_rows() -> list[tuple[str, ...]]:
    rows = []
    for name, (label, cmd, contexts, part1) in OVERHEAD_REAL.items():
        d = _load(name)
        if d is None:
            continue
        o = d["overhead"]
        what = f"forward, {o['batch']} x {o['seq']} tokens, {label}"
        if part1:
            rows.append((what, "interp.Model (no intervention) / plain HF, median time",
                         f"{o['ratio_median']['interp']:.2f}", name, cmd))
            rows.append((what, f"interp, {o['ablated_fraction']:.0%} of heads masked / plain HF, median time",
                         f"{o['ratio_median']['ablate25']:.2f}", name, cmd))
        by = {(r["ctx"], r["kind"]): r for r in d["rows"] if "median_cpu_s" in r}
        for ctx in contexts:
            mine = by.get((ctx, "rows"))
            if mine is None:
                continue
            what = f"attention rows (4 queries, every head), {ctx} tokens, {label}"
            for kind, lab in (("sdpa", "plain sdpa forward"), ("tl", "TransformerLens hook_pattern capture"),
                              ("eager", "eager output_attentions")):
                r = by.get((ctx, kind))
                if r is not None:
                    rows.append((what, f"{lab} / interp rows, CPU time",
                                 f"{r['median_cpu_s'] / mine['median_cpu_s']:.2f}x", name, cmd))
                    rows.append((what, f"{lab} / interp rows, peak memory",
                                 f"{r['peak_bytes'] / max(mine['peak_bytes'], 1):.1f}x", name, cmd))
    return rows


STORE_REAL = {"store-smollm2-135m-cpu.json": (
    "SmolLM2-135M", "python bench/store_model.py --model smollm2-135m --gb 1 --repeats 5 --dir /tmp")}


def store_rows() -> list[tuple[str, ...]]:
    rows = []
    for name, (label, cmd) in STORE_REAL.items():
        d = _load(name)
        if d is None or "write_summary" not in d:
            continue
        info = d["info"]
        what = (f"activation store, {label} residual stream ({len(info['sites'])} sites, "
                f"{info['site_bytes'] / 2 ** 30:.2f} GiB)")
        w = d["write_summary"]["store"]
        rows.append((what, "store writer / np.save, write MB/s", f"{w['vs_np_save']:.2f}", name, cmd))
        rows.append((what, "store writer / np.save + fsync, write MB/s", f"{w['vs_np_save_fsync']:.2f}", name, cmd))
        r = d["read_summary"]
        for test, lab in (("scan-all", "sequential scan of every site"), ("random", "random rows")):
            a, b = r.get(f"{test}/store"), r.get(f"{test}/np.save")
            if a and b:
                rows.append((what, f"store memmap / np.load(mmap_mode='r'), {lab}, cold cache, MB/s",
                             f"{a['mb_s'] / b['mb_s']:.2f}", name, cmd))
    return rows


def load_rows() -> list[tuple[str, ...]]:
    d = _load("load-cpu.json")
    return [] if d is None else [(f"loading {r['model']} (GGUF)", "transformers' GGUF load / interp's cached load",
                                  f"{r['transformers_over_second']:.1f}x", "load-cpu.json", "python bench/load.py")
                                 for r in d["rows"]]


PRECISION = {"precision-speed-smollm2-135m-cpu.json": (
    "SmolLM2-135M", "python bench/precision_speed.py --model smollm2-135m --repeats 2", ""),
    "precision-speed-smollm2-135m-cpu-t2.json": (
    "SmolLM2-135M, 2 threads", "python bench/precision_speed.py --model smollm2-135m --threads 2 --only "
                               "matmul,forward,detect,patch --repeats 2", ""),
    "precision-speed-smollm2-135m-cpu-avx512bf16.json": (
    "SmolLM2-135M, a CPU with AVX512-BF16 and no AMX", "python bench/precision_speed.py --model smollm2-135m --only "
                               "matmul,body,detect,patch --repeats 1 --out "
                               "bench/results/precision-speed-smollm2-135m-cpu-avx512bf16.json (sdpa: --only sdpa "
                               "--repeats 2 --merge, same --out)", "AVX512-BF16 without AMX"),
    "precision-speed-smollm2-135m-cpu-amx2.json": (
    "SmolLM2-135M, a second CPU with AMX", "python bench/precision_speed.py --model smollm2-135m --only patch "
                               "--rounds 3 --out bench/results/precision-speed-smollm2-135m-cpu-amx2.json (matmul: "
                               "--only matmul --rounds 2 --repeats 2 --merge; detect: --only detect --rounds 3 --merge, "
                               "same --out)", "a second CPU with AMX"),
    "precision-speed-gemma3-270m-cpu-avx512bf16.json": (
    "Gemma-3-270M, a CPU with AVX512-BF16 and no AMX", "python bench/precision_speed.py --model gemma3-270m --only "
                               "forward,body --repeats 2 --out "
                               "bench/results/precision-speed-gemma3-270m-cpu-avx512bf16.json",
                               "AVX512-BF16 without AMX")}  # file -> (label, command, the CPU where not the first AMX one)
WORK_LABEL = {"sdpa": "torch's CPU attention kernel alone (one layer's heads, causal), {seq} tokens",
              "forward": "forward with logits, 1 x {seq} tokens", "body": "forward without the output head, 1 x {seq} tokens",
              "rows": "attention rows (4 queries, every head), {seq} tokens", "detect": "retrieval detection, 2 NIAH prompts of {seq} tokens",
              "ablate": "forward with 25% of heads zero-ablated, 1 x {seq} tokens",
              "patch": "exact patching, resid_pre x every layer x every position, 8 IOI pairs",
              "patch-niah": "exact patching, resid_pre x every layer x every position, 1 NIAH pair (context length {seq})",
              "atp": "AtP-QK of head_out and resid_pre, 8 IOI pairs"}


def precision_rows() -> list[tuple[str, ...]]:
    rows = []
    for name, (label, cmd, cpu) in PRECISION.items():
        d = _load(name)
        for r in (d or {}).get("ratios", []):
            if r["work"] == "matmul":
                for shape, f, b in zip(r["shapes"], r["peaks"]["float32"], r["peaks"]["bfloat16"]):
                    threads = "one thread" if d.get("threads", 1) == 1 else f"{d['threads']} threads"
                    rows.append((f"matmul {'x'.join(map(str, shape))} (F.linear), {threads}{', ' + cpu if cpu else ''}",
                                 "bfloat16 / float32, GFLOPS",
                                 f"{b / f:.1f}x ({b:.0f} / {f:.0f})", name, cmd))
                continue
            work = "patch-niah" if r["work"] == "patch" and r["seq"] else r["work"]
            what = f"{WORK_LABEL[work].format(seq=r['seq'])}, {label}"
            spread = (f" (rounds {min(r['round_cpu_ratios']):.2f}-{max(r['round_cpu_ratios']):.2f}x)"
                      if len(r.get("round_cpu_ratios", ())) > 1 else "")
            what_of = "float32 / bfloat16, CPU time" + (", median of rounds" if spread else "")
            rows.append((what, what_of, f"{r['cpu_ratio']:.2f}x{spread}", name, cmd))
            if r.get("gflops"):
                rows.append((what, "achieved GFLOPS, bfloat16 (float32)",
                             f"{r['gflops']['bfloat16']:.0f} ({r['gflops']['float32']:.0f})", name, cmd))
    return rows


def thread_rows() -> list[tuple[str, ...]]:
    """Wall time of the same work on one thread and on two (precision-speed's two files), per dtype."""
    one, two = _load("precision-speed-smollm2-135m-cpu.json"), _load("precision-speed-smollm2-135m-cpu-t2.json")
    if one is None or two is None:
        return []
    by = {(r["work"], r["seq"], r["dtype"]): r for r in one["rows"] if "median_wall_s" in r}
    rows = []
    for r in two["rows"]:
        k = (r["work"], r["seq"], r["dtype"])
        if "median_wall_s" not in r or k not in by or r["work"] not in ("forward", "detect", "patch"):
            continue
        work = "patch-niah" if r["work"] == "patch" and r["seq"] else r["work"]
        rows.append((f"{WORK_LABEL[work].format(seq=r['seq'])}, SmolLM2-135M, {r['dtype']}", "wall time, 1 thread / 2 threads",
                     f"{by[k]['median_wall_s'] / r['median_wall_s']:.2f}x", "precision-speed-smollm2-135m-cpu-t2.json",
                     PRECISION["precision-speed-smollm2-135m-cpu-t2.json"][1]))
    return rows


STREAMING = {"streaming-tiny-qwen2-cpu.json": "python bench/streaming.py"}


def streaming_rows() -> list[tuple[str, ...]]:
    rows = []
    for name, cmd in STREAMING.items():
        d = _load(name)
        if d is None:
            continue
        what = (f"far-context necessity scan, {d['heads']} heads each windowed alone, {d['prompts']} NIAH prompts + "
                f"{d['texts']} text of {d['length']} tokens, {d['model']}")
        rows.append((what, "one full forward per head / interp (rows start at their layer), CPU time",
                     f"{d['ratio_cpu_full_over_interp']:.2f}x", name, cmd))
        per_fast = d["interp"]["cpu_s"] / d["interp"]["forwards"]
        per_full = d["full"]["cpu_s"] / d["full"]["forwards"]
        rows.append((what, "CPU time per forward-equivalent, interp / one full forward per head",
                     f"{per_fast / per_full:.2f}", name, cmd))
    return rows


def table() -> str:
    head = ["| measurement | ratio of | value | result | command |", "|---|---|---|---|---|"]
    rows = (patching_rows() + attribution_rows() + overhead_rows() + detect_rows() + detect_real_rows()
            + store_rows() + load_rows() + precision_rows() + thread_rows() + streaming_rows())
    return "\n".join(head + [f"| {w} | {o} | {v} | `bench/results/{f}` | `{c}` |" for w, o, v, f, c in rows])


if __name__ == "__main__":
    print(table())
