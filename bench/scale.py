#!/usr/bin/env python
"""Scale rehearsal without real weights: Qwen2.5-7B attention geometry, random weights, 2 layers.

The model (random weights, transformers Qwen2Config -> AutoModelForCausalLM.from_config, sdpa, float32 on CPU /
bfloat16 on CUDA, wrapped in interp.Model(hf, None, name=...)):
    kept from Qwen2.5-7B: hidden_size 3584, 28 query heads / 4 key-value heads (GQA 7:1), head_dim 128,
        rope_theta 1e6, max_position_embeddings 32768, rms_norm_eps 1e-6, untied embeddings
    REDUCED (so it fits and runs on a small machine; see REDUCTIONS): 2 layers instead of 28, intermediate_size
        4864 instead of 18944, vocab_size 32000 instead of 152064.
Attention per layer is exactly Qwen2.5-7B's, so every attention-side cost (sdpa, interp's interception, attention
rows, eager's [heads, T, T] patterns) per layer is the real one; the MLP and the vocabulary are smaller, so the
non-attention share of the time is smaller than in the real model (which makes interp's attention-side overheads
LOOK LARGER here, not smaller).

Modes, each at every length of --lengths (batch 1, random token ids), each (mode, length) in a fresh subprocess:
    plain    plain HF sdpa forward: hf(input_ids, logits_to_keep=1) under torch.no_grad
    ablate   interp forward with 25% of heads zero-ablated (AblateHeads on 7 of 28 heads in every layer):
             with model.intervene(AblateHeads(...)): model.forward(ids, last_only=True)   (= logits_to_keep=1 too)
    rows     interp.attention_rows(model, ids, [-1]): attention weights of the last query, every layer and head
             (interp's body-only forward, rows recomputed from the real post-RoPE q, k)
    greedy   plain HF greedy decoding: prefill (logits_to_keep=1) + cached steps with a DynamicCache, --new-tokens
             tokens (3: the prefill chooses the first, 2 cached decode forwards choose the others; = hf.generate(
             max_new_tokens=3, do_sample=False))
    detect   interp retrieval detection on the same tokens: RetrievalRecorder inside model.intervene around
             model.greedy_decode (what run_niah does), with a fake 16-token needle span at depth 0.5
    eager    plain HF eager attention, output_attentions=True (logits_to_keep=1), the last query's rows taken
             from the returned patterns; skipped where its estimate exceeds --mem-budget-gb, estimate printed

Time: median (and min) of --repeats timed calls after one warm-up call of the same mode at --warmup-tokens tokens
(lazy imports, kernel selection). Peak memory: of the first timed call, as bench/memory_plan.py measures it: on
CPU the rise of the resident set (VmHWM after resetting it through /proc/self/clear_refs, minus VmRSS before the
call; the weights are already resident; glibc malloc pinned with MALLOC_MMAP_THRESHOLD_=65536), on CUDA
torch.cuda.max_memory_allocated() minus memory_allocated() before the call. Next to it the memory planner's
estimate (interp.models.memory.estimate(...).peak - weights; see PLAN) and measured/estimated.
Ratios and targets: ablate/plain time <= 1.05; rows/plain time <= 1.2 and memory <= 1.5;
detect/greedy time <= 1.3; planner within 30% of the measured peak.

Usage: python bench/scale.py [--quick] [--device cpu|cuda] [--lengths 4096,8192] [--repeats 3] [--repeats-long N]
       [--interleave ROUNDS [--interleave-length T]]   (plain/ablate/greedy/detect round-robin in one process)
(on 1 CPU core a plain forward is ~20 s at 4096 and ~47 s at 8192: the default full run takes ~20 minutes;
--quick (512,1024, 1 repeat) about 4. Time ratios across subprocesses are sensitive to other load on the machine:
each measurement records the load average before and after.)
Results: a table on stdout and bench/results/scale-<device>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_modes import (CONFIG, GiB, HERE, MiB, MODES, REDUCTIONS, ROOT, TARGETS,  # noqa: E402
                         ablated_heads, child_env, child_main, plan_for)


def run_child(spec: dict, timeout: float) -> dict:
    from _common import run_child as run

    return run(spec, timeout, script=__file__, env=child_env(spec["threads"]))


# ---------------------------------------------------------------------------------------------
# parent
# ---------------------------------------------------------------------------------------------
def default_budget_gb(device: str) -> float:
    """~18 GiB (the issue's eager budget), at most 0.8 x what is free now."""
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
    else:
        free = 0
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    free = int(line.split()[1]) * 1024
    return min(18.0, 0.8 * free / GiB)


def ratios_of(by: dict, T: int) -> dict:
    def get(mode, key):
        e = by.get((T, mode))
        return e.get(key) if e else None

    out = {}
    for name, (a, b, key) in {"ablate/plain time": ("ablate", "plain", "median_s"),
                              "ablate/plain memory": ("ablate", "plain", "peak_bytes"),
                              "rows/plain time": ("rows", "plain", "median_s"),
                              "rows/plain memory": ("rows", "plain", "peak_bytes"),
                              "detect/greedy time": ("detect", "greedy", "median_s"),
                              "detect/greedy memory": ("detect", "greedy", "peak_bytes"),
                              "eager/rows time": ("eager", "rows", "median_s"),
                              "eager/rows memory": ("eager", "rows", "peak_bytes")}.items():
        x, y = get(a, key), get(b, key)
        if x is not None and y:
            r = {"ratio": x / y}
            if name in TARGETS:
                r["target"] = TARGETS[name]
                r["met"] = r["ratio"] <= TARGETS[name]
            # min-of-repeats ratio too (less sensitive to other load on a shared machine)
            if key == "median_s":
                r["ratio_min"] = get(a, "min_s") / get(b, "min_s")
            out[name] = r
    return out


def fmt_mib(n) -> str:
    return "-" if n is None else f"{n / MiB:,.0f}"


def print_report(res: dict) -> None:
    a = res["args"]
    reps = f"{a['repeats']}" if a["repeats_long"] is None else f"{a['repeats']} ({a['repeats_long']} at T > 4096)"
    print()
    print(f"== scale rehearsal on {res['device']} ({res['dtype']}, torch {res['env']['torch']}, "
          f"{res['env']['torch_threads']} thread(s)); batch 1; median of {reps} timed calls after a "
          f"{a['warmup_tokens']}-token warm-up ==")
    print("   model: random Qwen2.5-7B attention geometry (3584 hidden, 28 q / 4 kv heads, head_dim 128, rope_theta "
          "1e6)\n   REDUCED: 2 of 28 layers, intermediate 4864 (not 18944), vocab 32000 (not 152064)")
    print("   plain / ablate / greedy prefill use logits_to_keep=1 (interp: last_only=True); rows runs the body only")
    s = res.get("sanity", {})
    if s and "error" not in s:
        print(f"   sanity at {s['length']} tokens: interp vs plain max|diff| {s['interp_vs_plain_max_abs_diff']:.3g}, "
              f"ablation moves logits by {s['ablation_max_abs_logit_change']:.3g}, rows vs eager max|diff| "
              f"{s['rows_vs_eager_max_abs_diff']:.3g}, detect tokens == greedy tokens: {s['detect_equals_greedy']}")
    print(f"   memory: {res.get('mem_method')}; planner: interp.models.memory.estimate(...).peak - weights "
          f"(weights {res['weights_bytes'] / MiB:,.0f} MiB)")
    by = {(e["length"], e["mode"]): e for e in res["measurements"]}
    hdr = (f"   {'T':>6} {'mode':<7} {'median s':>9} {'min s':>8} {'peak MiB':>9} {'plan MiB':>9} {'meas/plan':>9}")
    print(hdr)
    for T in a["lengths"]:
        for mode in a["modes"]:
            e = by.get((T, mode))
            if e is None:
                continue
            est = e["estimated_bytes"]
            if "skipped" in e:
                print(f"   {T:>6} {mode:<7} {'skipped':>9} {'':>8} {'':>9} {fmt_mib(est):>9} {'':>9}  ({e['skipped']})")
            elif "error" in e:
                print(f"   {T:>6} {mode:<7} ERROR {e['error']}")
            else:
                print(f"   {T:>6} {mode:<7} {e['median_s']:>9.3g} {e['min_s']:>8.3g} {fmt_mib(e['peak_bytes']):>9} "
                      f"{fmt_mib(est):>9} {e['peak_bytes'] / est:>9.3f}")
    print()
    print(f"   {'T':>6} {'ratio':<22} {'median':>8} {'min':>8} {'target':>8}  met")
    for T in a["lengths"]:
        for name, r in res["ratios"][str(T)].items():
            tgt = f"<= {r['target']}" if "target" in r else ""
            met = ("yes" if r["met"] else "NO") if "met" in r else ""
            rmin = f"{r['ratio_min']:.3f}" if "ratio_min" in r else ""
            print(f"   {T:>6} {name:<22} {r['ratio']:>8.3f} {rmin:>8} {tgt:>8}  {met}")
    pl = res["planner"]
    print(f"\n   planner within 30% of measured peak: {pl['n_within']} of {pl['n']} measurements "
          f"(measured/estimated {pl['min_ratio']:.3f} .. {pl['max_ratio']:.3f})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    ap.add_argument("--dtype", default=None, help="float32 (CPU default) / bfloat16 (CUDA default)")
    ap.add_argument("--lengths", default=None, help="comma-separated (default 4096,8192; --quick 512,1024)")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls per (mode, length) (default 3; --quick 1)")
    ap.add_argument("--repeats-long", type=int, default=None,
                    help="timed calls at lengths > 4096 (default: --repeats); one forward at 8192 is ~45 s on 1 CPU core")
    ap.add_argument("--warmup-tokens", type=int, default=256, help="length of the one warm-up call per process")
    ap.add_argument("--new-tokens", type=int, default=3, help="tokens decoded by greedy / detect")
    ap.add_argument("--modes", default=",".join(MODES), help=f"subset of {','.join(MODES)}")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (CPU default 1, CUDA default torch's)")
    ap.add_argument("--mem-budget-gb", type=float, default=None,
                    help="skip eager where its estimate exceeds this (default min(18, 0.8 x free memory))")
    ap.add_argument("--child-timeout", type=float, default=1800)
    ap.add_argument("--no-check", action="store_true", help="skip the short-length sanity check")
    ap.add_argument("--quick", action="store_true", help="lengths 512,1024, 1 repeat: a development iteration")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/scale-<device>.json)")
    ap.add_argument("--interleave", type=int, default=0, metavar="ROUNDS",
                    help="also time plain/ablate/greedy/detect round-robin in one process, ROUNDS rounds, at "
                         "--interleave-length (the steadier time ratios on a shared machine)")
    ap.add_argument("--interleave-length", type=int, default=None, help="default: the first of --lengths")
    ap.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child is not None:
        child_main(json.loads(args._child))
        return 0

    import torch

    cuda = args.device.startswith("cuda")
    if args.threads is None:
        args.threads = 0 if cuda else 1
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    sys.path.insert(0, str(ROOT))
    args.dtype = args.dtype or ("bfloat16" if cuda else "float32")
    args.lengths = [int(x) for x in (args.lengths or ("512,1024" if args.quick else "4096,8192")).split(",")]
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in args.modes if m not in MODES]
    if bad:
        ap.error(f"unknown modes {bad}; choose from {MODES}")
    if args.mem_budget_gb is None:
        args.mem_budget_gb = default_budget_gb(args.device)
    max_len = max(args.lengths)
    base = {"device": args.device, "dtype": args.dtype, "threads": args.threads, "repeats": args.repeats,
            "warmup_tokens": args.warmup_tokens, "new_tokens": args.new_tokens, "max_len": max_len}

    t_start = time.perf_counter()
    print(f"scale rehearsal on {args.device} ({args.dtype}, torch threads {torch.get_num_threads()}): random-weight "
          f"Qwen2.5-7B attention geometry, REDUCED to 2 layers / intermediate 4864 / vocab 32000; lengths "
          f"{args.lengths}, {args.repeats} repeat(s); eager budget {args.mem_budget_gb:.1f} GiB", flush=True)
    sanity_res = {}
    if not args.no_check:
        sanity_res = run_child({**base, "mode": "check", "length": 256}, args.child_timeout)
        print(f"  sanity: {json.dumps({k: v for k, v in sanity_res.items() if not k.endswith('tokens')})}", flush=True)

    measurements = []
    for T in args.lengths:
        for mode in args.modes:
            p = plan_for(mode, T, args.dtype, args.new_tokens)
            e = {"length": T, "mode": mode, **p}
            if mode == "eager" and p["estimated_bytes"] > args.mem_budget_gb * GiB:
                e["skipped"] = (f"estimate {p['estimated_bytes'] / GiB:.1f} GiB > budget {args.mem_budget_gb:.1f} "
                                f"GiB: not run")
            else:
                reps = args.repeats if T <= 4096 or args.repeats_long is None else args.repeats_long
                t0 = time.perf_counter()
                e["loadavg_before"] = os.getloadavg()[0]
                e.update(run_child({**base, "mode": mode, "length": T, "repeats": reps}, args.child_timeout))
                e["wall_s"] = time.perf_counter() - t0
                e["loadavg_after"] = os.getloadavg()[0]
                e["repeats"] = reps
                if "times_s" in e:
                    e["median_s"] = statistics.median(e["times_s"])
                    e["min_s"] = min(e["times_s"])
                    e["measured_over_estimated"] = e["peak_bytes"] / e["estimated_bytes"]
            measurements.append(e)
            if "skipped" in e:
                msg = f"skipped ({e['skipped']})"
            elif "error" in e:
                msg = f"ERROR {e['error']}"
            else:
                # 3 significant digits: seconds on a CPU, milliseconds on a GPU
                msg = (f"median {e['median_s']:.3g} s (all {', '.join(f'{t:.3g}' for t in e['times_s'])}), peak "
                       f"+{e['peak_bytes'] / MiB:,.0f} MiB, planner {e['estimated_bytes'] / MiB:,.0f} MiB "
                       f"(x{e['measured_over_estimated']:.3f}), wall {e['wall_s']:.0f} s, load {e['loadavg_before']:.1f}"
                       f"->{e['loadavg_after']:.1f}")
            print(f"  [T {T:>5}] {mode:<6} {msg}", flush=True)

    interleaved = None
    if args.interleave:
        T = args.interleave_length or args.lengths[0]
        interleaved = run_child({**base, "mode": "interleave", "length": T, "rounds": args.interleave,
                                 "max_len": max(max_len, T)}, args.child_timeout)
        for k in ("ablate/plain time", "detect/greedy time"):
            if k in interleaved:
                r = interleaved[k]
                r["met"] = r["ratio"] <= r["target"]
                print(f"  interleaved at {T} ({args.interleave} rounds): {k} {r['ratio']:.3f} (of mins "
                      f"{r['ratio_min']:.3f}), target <= {r['target']}", flush=True)
    by = {(e["length"], e["mode"]): e for e in measurements}
    ratios = {str(T): ratios_of(by, T) for T in args.lengths}
    for T in args.lengths:
        g, d = by.get((T, "greedy")), by.get((T, "detect"))
        if g and d and g.get("tokens") is not None and d.get("tokens") is not None:
            ratios[str(T)]["detect tokens == greedy tokens"] = {"ratio": float(g["tokens"] == d["tokens"])}
    measured = [e for e in measurements if "measured_over_estimated" in e]
    pr = [e["measured_over_estimated"] for e in measured]
    planner = {"n": len(pr), "n_within": sum(abs(r - 1) <= 0.30 for r in pr),
               "min_ratio": min(pr) if pr else float("nan"), "max_ratio": max(pr) if pr else float("nan"),
               "per_measurement": {f"{e['length']}/{e['mode']}": e["measured_over_estimated"] for e in measured}}
    import transformers

    res = {
        "device": args.device, "dtype": args.dtype, "config": dict(CONFIG), "reductions": REDUCTIONS,
        "ablated_heads": [f"L{l}H{h}" for l, h in ablated_heads()],
        "modes_doc": {m: line.strip() for m, line in zip(MODES, [
            "hf(input_ids, logits_to_keep=1), torch.no_grad, sdpa",
            "with model.intervene(AblateHeads(7 of 28 heads per layer, mode='zero')): model.forward(ids, last_only=True)",
            "interp.attention_rows(model, ids, [-1]) (body-only forward + rows of the last query)",
            f"plain HF prefill (logits_to_keep=1) + cached greedy steps, DynamicCache, {args.new_tokens} new tokens",
            "RetrievalRecorder in model.intervene around model.greedy_decode (same tokens), fake needle span",
            "plain HF eager, output_attentions=True, logits_to_keep=1, last-query rows from the patterns"])},
        "targets": TARGETS,
        "args": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "env": {"torch": torch.__version__, "transformers": transformers.__version__,
                "python": platform.python_version(), "cpu_count": os.cpu_count(),
                "torch_threads": (measured[0]["torch_threads"] if measured else torch.get_num_threads()),
                "OMP_NUM_THREADS": child_env(args.threads).get("OMP_NUM_THREADS"),
                "MALLOC_MMAP_THRESHOLD_": "65536", "machine": platform.machine(),
                "gpu": torch.cuda.get_device_name(torch.device(args.device)) if cuda else None},
        "weights_bytes": measurements[0]["weights_bytes"] if measurements else None,
        "mem_method": measured[0]["mem_method"] if measured else None,
        "sanity": sanity_res, "measurements": measurements, "ratios": ratios, "planner": planner,
        "interleaved": interleaved,
    }
    res["total_wall_s"] = time.perf_counter() - t_start
    print_report(res)
    out = Path(args.out) if args.out else HERE / "results" / f"scale-{args.device.split(':')[0]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"\ntotal {res['total_wall_s']:.0f} s; wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
