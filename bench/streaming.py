#!/usr/bin/env python
"""The far-context necessity scan (`interp detect streaming`) against one full forward per head, same run.

Both sides window every head alone (interp.hooks.window.WindowCells, rows batched `--rows` at a time) on the same
NIAH prompts and corpus passages and score the same metrics:
    interp     rows start at their head's layer from the unwindowed residual stream (models.skip.start_at): the
               scan's work bound, the sum over heads of (L - l) / L forwards per sequence
    full       every row runs the whole model (StreamingConfig(skip_layers=False)): one forward per head
The parent checks that both give the same necessity grid (max |diff| <= 1e-3 nats) and fails loudly (exit 1)
otherwise. Times are the process's CPU time (one torch thread; `--threads`), each side run once after a warm-up
scan on one short prompt. Output: ratios printed and a JSON in bench/results/.

    python bench/streaming.py                                   # tiny-qwen2, 512 tokens
    python bench/streaming.py --model smollm2-135m --length 1024 --model-dtype bfloat16 --haystack sherlock-holmes
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny-qwen2")
    ap.add_argument("--model-dtype", default="float32")
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--prompts", type=int, default=2, help="NIAH prompts (depths spread over the haystack)")
    ap.add_argument("--texts", type=int, default=1)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--sinks", type=int, default=4)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--haystack", default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)

    import torch

    import interp
    from interp.analyses.streaming import StreamingConfig, run_streaming_scan
    from interp.tasks.niah import NiahConfig

    torch.set_num_threads(a.threads)
    model = interp.load_model(a.model, dtype=a.model_dtype)
    depths = tuple(float(x) for x in np.linspace(0.1, 0.7, a.prompts))
    niah = NiahConfig(context_lengths=(a.length,), depths=depths, n_seeds=1, haystack_file=a.haystack)

    def scan(skip: bool, niah_cfg=niah, texts=a.texts):
        cfg = StreamingConfig(niah=niah_cfg, window=a.window, sinks=a.sinks, texts=texts, max_rows=a.rows,
                              skip_layers=skip, n_boot=100, n_perm=100)
        c0, t0 = time.process_time(), time.perf_counter()
        res = run_streaming_scan(model, cfg)
        return res, time.process_time() - c0, time.perf_counter() - t0

    warm = NiahConfig(context_lengths=(a.window + a.sinks + 32,), depths=(0.2,), n_seeds=1, haystack_file=a.haystack)
    scan(True, warm, 0)
    fast, cpu_fast, wall_fast = scan(True)
    full, cpu_full, wall_full = scan(False)
    diff = float(np.nanmax(np.abs(np.array(fast.scores, dtype=float) - np.array(full.scores, dtype=float))))
    out = {"model": a.model, "model_dtype": a.model_dtype, "length": a.length, "prompts": a.prompts, "texts": a.texts,
           "window": a.window, "sinks": a.sinks, "rows": a.rows, "threads": a.threads,
           "heads": model.spec.n_layers * model.spec.n_heads, "max_abs_diff_necessity": diff,
           "interp": {"cpu_s": round(cpu_fast, 3), "wall_s": round(wall_fast, 3), **fast.work},
           "full": {"cpu_s": round(cpu_full, 3), "wall_s": round(wall_full, 3), **full.work},
           "ratio_cpu_full_over_interp": round(cpu_full / cpu_fast, 3)}
    print(f"{a.model}, {a.prompts} prompts + {a.texts} texts of {a.length} tokens, {out['heads']} heads windowed "
          f"to {a.sinks} sinks + {a.window} keys")
    print(f"  interp (rows start at their layer): {cpu_fast:.1f} CPU-s, {fast.work['forwards']:.1f} forward-equivalents "
          f"(work bound {fast.work['work_bound']:.1f})")
    print(f"  one full forward per head:          {cpu_full:.1f} CPU-s, {full.work['forwards']:.1f} forwards")
    print(f"  full / interp, CPU time: {cpu_full / cpu_fast:.2f}x; work ratio {full.work['forwards'] / fast.work['forwards']:.2f}x; "
          f"necessity grids agree to {diff:.1e} nats")
    if not diff <= 1e-3:
        print("FAIL: the two scans disagree", file=sys.stderr)
        return 1
    path = Path(a.out or Path(__file__).parent / "results" / f"streaming-{a.model}-cpu.json")
    path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"  written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
