#!/usr/bin/env python
"""How many rows an exact patching pass should hold, per model dtype: the CPU time of full resid_pre grids when a
pass's fixed cost (interp.patching.run.FORWARD_OVERHEAD_FLOP, which decides when rows are merged into one pass at
the price of recomputed base-run tokens and layers) is set to each of several values, in float32 and in bfloat16.
interp uses one value for both dtypes, the one best over the tasks and dtypes (docs/precision.md#speed).

Where the pairs have several prompt lengths (IOI), the same grid also runs split by length, one grid per length,
so that no pass mixes prompt lengths: the alternative to interp's passes, which share rows of any length.

Each (dtype, task) runs in a fresh process, one torch thread, the model loaded and warmed before the clock; every
value runs the same grid, and its effects are compared with the first value's (merging changes no number beyond
the dtype's rounding: float32 ~1e-6, bfloat16 ~1e-2 of the normalised effect).

    python bench/patch_overhead.py --model smollm2-135m        # bench/results/patch-overhead-smollm2-135m-cpu.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_common_args, bench_env, parse_and_setup, run_child, setup_torch  # noqa: E402

DTYPES = ("float32", "bfloat16")
FLOPS = (4e8, 1.6e9, 6.4e9)
TASKS = ("ioi", "niah")  # bench/precision_speed.py's patch rows (PATCH_TASKS)


def child_main(spec: dict) -> None:
    torch = setup_torch(spec["threads"])
    import numpy as np

    import interp
    import interp.patching.run as run
    from precision_speed import warm_grid

    model, pairs, cfg = warm_grid(spec["model"], spec["dtype"], spec["task"])
    rows, first = [], None
    for flop in spec["flops"]:
        run.FORWARD_OVERHEAD_FLOP["cpu"] = flop
        c0, t0 = time.process_time(), time.perf_counter()
        with torch.no_grad():
            r = interp.run_patching(model, pairs, cfg)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        v = np.array(r.sites["resid_pre"].mean, dtype=float)
        first = v if first is None else first
        rows.append({"overhead_flop": flop, "cpu_s": cpu, "wall_s": wall, "n_forward": r.n_forward,
                     "tokens": r.tokens_computed, "work_done": r.work_done, "work_bound": r.work_bound,
                     "max_abs_diff_vs_first": float(np.nanmax(np.abs(v - first)))})
    split = None
    lengths = sorted({len(p.clean) for p in pairs})
    if len(lengths) > 1:  # the alternative: no pass mixes prompt lengths (one grid per length, at interp's value)
        run.FORWARD_OVERHEAD_FLOP["cpu"] = spec["used_flop"]
        c0, n_fwd = time.process_time(), 0
        with torch.no_grad():
            for n_tok in lengths:
                n_fwd += interp.run_patching(model, [p for p in pairs if len(p.clean) == n_tok], cfg).n_forward
        split = {"cpu_s": time.process_time() - c0, "n_forward": n_fwd, "lengths": lengths}
    print("RESULT " + json.dumps({"rows": rows, "pair_tokens": [len(p.clean) for p in pairs], "split_by_length": split}))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="model dtypes to time (each its own process)")
    ap.add_argument("--flops", default=",".join(f"{f:g}" for f in FLOPS), help="fixed costs per pass to try (FLOP)")
    add_common_args(ap, "patch-overhead", child_timeout=3600)
    args, torch = parse_and_setup(ap, argv, child_main)
    if args is None:
        return 0
    flops = [float(x) for x in args.flops.split(",")]
    bad = [d for d in args.dtypes.split(",") if d not in DTYPES]
    if bad:
        ap.error(f"--dtypes {','.join(bad)}: choose from {', '.join(DTYPES)}")
    from interp.patching.run import FORWARD_OVERHEAD_FLOP

    out_rows = []
    for task in args.tasks.split(","):
        for dtype in args.dtypes.split(","):
            spec = {"model": args.model, "task": task, "dtype": dtype, "threads": args.threads, "flops": flops,
                    "used_flop": FORWARD_OVERHEAD_FLOP["cpu"]}
            r = run_child(spec, timeout=args.child_timeout, script=__file__)
            if "error" in r:
                print(f"{task} {dtype}: {r['error']}")
                continue
            best = min(r["rows"], key=lambda x: x["cpu_s"])
            used = FORWARD_OVERHEAD_FLOP["cpu"]
            out_rows.append({**spec, **r, "best_flop": best["overhead_flop"], "used_flop": used})
            for x in r["rows"]:
                mark = (" best" if x is best else "") + (" (interp's)" if x["overhead_flop"] == used else "")
                print(f"{task:5s} {dtype:9s} {x['overhead_flop']:8.2g} FLOP/pass: {x['cpu_s']:7.2f} CPU s, "
                      f"{x['n_forward']:4d} passes, work {x['work_done']:.0f} (bound {x['work_bound']:.0f}), "
                      f"max |diff| {x['max_abs_diff_vs_first']:.2g}{mark}", flush=True)
            sp = r.get("split_by_length")
            if sp:
                mixed = next((x["cpu_s"] for x in r["rows"] if x["overhead_flop"] == used), None)
                print(f"{task:5s} {dtype:9s} pairs split by prompt length {sp['lengths']} (no pass mixes lengths): "
                      f"{sp['cpu_s']:7.2f} CPU s, {sp['n_forward']:4d} passes"
                      + (f"; interp's mixed passes {sp['cpu_s'] / mixed:.2f}x faster" if mixed else ""), flush=True)
    ratios = []
    for task in dict.fromkeys(r["task"] for r in out_rows):
        by = {r["dtype"]: r for r in out_rows if r["task"] == task}
        if set(by) == set(DTYPES):
            at = {d: next(x for x in by[d]["rows"] if x["overhead_flop"] == by[d]["used_flop"])["cpu_s"]
                  if by[d]["used_flop"] in flops else None for d in DTYPES}
            best = {d: min(x["cpu_s"] for x in by[d]["rows"]) for d in DTYPES}
            base = next(x["cpu_s"] for x in by["float32"]["rows"] if x["overhead_flop"] == flops[0])
            ratios.append({"task": task, "best_cpu_s": best, "used_cpu_s": at,
                           "ratio_best": best["float32"] / best["bfloat16"],
                           "ratio_vs_first_float32": base / best["bfloat16"]})
            print(f"{task}: float32 / bfloat16 CPU time at each dtype's best value {ratios[-1]['ratio_best']:.2f}x")
    res = {"model": args.model, "threads": args.threads, "flops": flops, "env": bench_env(args, torch),
           "rows": out_rows, "ratios": ratios}
    out = Path(args.out or f"bench/results/patch-overhead-{args.model}-{args.device.split(':')[0]}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
