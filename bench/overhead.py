#!/usr/bin/env python
"""What interp costs over plain transformers, on a mid-size random-weight Llama.

Part 1 (one process): forward time of
    plain      a plain HF model, sdpa, not wrapped (its own object, same weights)
    control    a second plain HF model: the A/A noise floor of the timer
    interp     the same forward through interp.Model, no intervention
    ablate25   interp.Model with 25% of all heads zero-ablated (AblateHeads, mode="zero")
as ratios to `plain` (target <= 1.05x). Variants run interleaved, round by round (rotating the
order), after warm-up; the table gives the median and the min of the rounds.

Part 2 (a fresh subprocess per measurement): at each context, time and peak memory of
    sdpa       a plain HF forward (sdpa): the floor both others pay
    rows       interp.attention_rows for 4 query positions (sdpa forward + rows from q, k)
    eager      a plain HF model loaded with attn_implementation="eager", output_attentions=True
Peak memory is the rise of the process's resident set (VmHWM after resetting it through
/proc/self/clear_refs, minus VmRSS before the call) on CPU, torch.cuda.max_memory_allocated minus
the allocation before the call on CUDA. Eager needs every layer's full [heads, T, T] pattern; where
its estimate exceeds the memory budget it is skipped and the estimate printed.

With --model NAME (a real checkpoint interp loads, e.g. smollm2-135m) every part runs on that model
instead (plain = the checkpoint with interp's wrapper removed), and part 2 adds
    tl         TransformerLens's TransformerBridge over the same HF model, the rows captured by a
               hook on every layer's hook_pattern that keeps only the 4 query rows (TL computes each
               layer's full [H, T, T] pattern but never holds more than one layer's)
checked equal to interp's rows at ctx 256 (max |diff| <= 1e-4, else exit).

Usage: python bench/overhead.py [--quick] [--device cpu|cuda] [--threads N] [--mem-budget-gb G]
                                [--model NAME] [--kinds sdpa,rows,eager,tl]
Results: a table on stdout and bench/results/overhead-<device>.json (overhead-<model>-<device>.json).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (GiB, MiB, ROOT, PeakMemory, add_common_args, bench_env, parse_and_setup,  # noqa: E402
                     print_progress, print_skips_and_errors, run_child, setup_torch, sync, torch_dtype, write_result)

# the model: mid-size Llama (MHA), random weights; or a real checkpoint (--model), whose geometry then fills MODEL
REAL = {"name": None}
MODEL = dict(vocab_size=8192, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
             num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=8192,
             tie_word_embeddings=False)


# ---------------------------------------------------------------------------------------------
# the model (parent and child)
# ---------------------------------------------------------------------------------------------
def make_hf(attn: str, device: str, dtype: str, seed: int = 0, overrides: dict | None = None):
    """A seeded random-weight LlamaForCausalLM (the same seed gives the same weights), or, with `--model`
    (REAL["name"] set), that checkpoint as a plain HF model (interp's attention wrapper removed)."""
    import torch
    import transformers as tf

    if REAL["name"]:
        sys.path.insert(0, str(ROOT))
        from interp.models.loading import load_model

        m = load_model(REAL["name"], device=device, dtype=torch_dtype(dtype))
        m.detach()
        if attn != m.hf.config._attn_implementation:
            m.hf.set_attn_implementation(attn)
        return m.hf.eval()

    cfg = tf.LlamaConfig(**{**MODEL, **(overrides or {})})
    torch.manual_seed(seed)
    hf = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=torch_dtype(dtype))
    return hf.to(device).eval()




def make_bridge(hf, device: str):
    """TransformerLens's TransformerBridge wrapping `hf` itself (same weights, no conversion)."""
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import AutoTokenizer

    hf.config.architectures = [type(hf).__name__]
    tok = None
    if REAL["name"]:
        from interp.models.loading import load_model  # the checkpoint's own tokenizer

        tok = load_model(REAL["name"], device="cpu").tokenizer
    else:
        tok = AutoTokenizer.from_pretrained(ROOT / "data" / "organisms" / "tokenizer")
    br = TransformerBridge.boot_transformers(REAL["name"] or "random-llama", hf_model=hf, tokenizer=tok, device=device)
    return br.eval()


def tl_rows(bridge, ids, pos):
    """The attention rows at `pos` of every layer, [b, L, H, len(pos), T], captured with a hook_pattern hook."""
    import torch

    rows = {}

    def keep(pattern, hook):
        rows[hook.name] = pattern[:, :, pos].clone()
        return pattern

    with torch.no_grad():
        bridge.run_with_hooks(ids, fwd_hooks=[(lambda n: n.endswith("attn.hook_pattern"), keep)])
    return torch.stack([rows[f"blocks.{l}.attn.hook_pattern"] for l in range(len(rows))], dim=1)


def query_positions(ctx: int) -> list[int]:
    return [ctx // 4, ctx // 2, (3 * ctx) // 4, ctx - 1]


def eager_bytes_estimate(ctx: int, batch: int, elem: int) -> int:
    """Eager with output_attentions: every layer's [b, H, T, T] pattern is kept, plus the live
    layer's scores and softmax temporaries, the additive [b, 1, T, T] mask, and the logits."""
    L, H, V = MODEL["num_hidden_layers"], MODEL["num_attention_heads"], MODEL["vocab_size"]
    t2 = ctx * ctx
    return batch * (H * t2 * elem * (L + 2) + t2 * elem + ctx * V * 4)


def tl_bytes_estimate(ctx: int, batch: int, elem: int) -> int:
    """TransformerLens pattern capture: the sdpa-sized activations plus one layer's scores, pattern and softmax
    temporaries ([b, H, T, T] each, ~3 alive at once) and the additive mask."""
    H = MODEL["num_attention_heads"]
    return sdpa_bytes_estimate(ctx, batch, elem) + batch * (3 * H + 1) * ctx * ctx * elem


def sdpa_bytes_estimate(ctx: int, batch: int, elem: int) -> int:
    """sdpa forward: activations linear in T (residual, q/k/v, MLP) and the logits."""
    d, f, V = MODEL["hidden_size"], MODEL["intermediate_size"], MODEL["vocab_size"]
    return batch * ctx * (8 * d + 3 * f) * elem + batch * ctx * V * 4


# ---------------------------------------------------------------------------------------------
# child: one (context, method) measurement in a fresh process
# ---------------------------------------------------------------------------------------------
def child_main(spec: dict) -> None:
    torch = setup_torch(spec["threads"])
    sys.path.insert(0, str(ROOT))
    MODEL.update(spec["model"])
    REAL["name"] = spec.get("model_name")
    device, ctx, kind, batch = spec["device"], spec["ctx"], spec["kind"], spec["batch"]
    attn = "eager" if kind == "eager" else "sdpa"
    hf = make_hf(attn, device, spec["dtype"])
    g = torch.Generator().manual_seed(123)
    # TransformerLens 3's bridge over this same HF model; it computes every layer's full pattern
    # (hook_pattern); a hook keeps only the 4 query rows, so TL never holds more than one layer's pattern
    bridge = make_bridge(hf, device) if kind == "tl" else None
    V = MODEL["vocab_size"]

    def ids_of(n):
        return torch.randint(0, V, (batch, n), generator=g).to(device)

    if kind == "rows":
        import interp

        model = interp.Model(hf)

        def run(ids):
            return interp.attention_rows(model, ids, query_positions(ids.shape[1]))
    elif kind == "eager":
        def run(ids):
            with torch.no_grad():
                out = hf(input_ids=ids, output_attentions=True)
            pos = query_positions(ids.shape[1])
            return torch.stack([a[:, :, pos] for a in out.attentions], dim=1)  # same rows as interp
    elif kind == "sdpa":
        def run(ids):
            with torch.no_grad():
                return hf(input_ids=ids).logits
    elif kind == "tl":
        def run(ids):
            return tl_rows(bridge, ids, query_positions(ids.shape[1]))
    else:
        raise SystemExit(f"unknown kind {kind}")

    run(ids_of(64))  # warm-up: lazy init, kernel selection
    ids = ids_of(ctx)
    sync(device)
    times, cpu = [], []  # wall time; this process's CPU time (all its threads: on one thread, immune to
    # other processes sharing the cores, which stretch wall time but not the CPU time the work takes)
    with PeakMemory(device) as pm:
        t0, c0 = time.perf_counter(), time.process_time()
        out = run(ids)
        sync(device)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    shape = list(out.shape)
    del out
    for _ in range(spec["repeats"] - 1):
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        out = run(ids)
        sync(device)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        del out
    print("RESULT " + json.dumps({"times_s": times, "cpu_s": cpu, "peak_bytes": pm.peak, "mem_method": pm.method,
                                  "out_shape": shape}))


# ---------------------------------------------------------------------------------------------
# part 1: forward overhead
# ---------------------------------------------------------------------------------------------
def part_overhead(args) -> dict:
    torch = setup_torch(args.threads)
    sys.path.insert(0, str(ROOT))
    import interp

    dev, dt = args.device, args.dtype
    plain = make_hf("sdpa", dev, dt)
    control = make_hf("sdpa", dev, dt)
    model = interp.Model(make_hf("sdpa", dev, dt))
    L, H = MODEL["num_hidden_layers"], MODEL["num_attention_heads"]
    gen = torch.Generator().manual_seed(7)
    per_layer = H // 4  # 25% of every layer's heads
    heads = [(l, int(h)) for l in range(L) for h in torch.randperm(H, generator=gen)[:per_layer]]
    ablate = interp.AblateHeads(heads, mode="zero")
    ids = torch.randint(0, MODEL["vocab_size"], (args.batch, args.seq), generator=gen).to(dev)
    mask = torch.ones_like(ids)

    def f_plain():
        with torch.no_grad():
            return plain(input_ids=ids, attention_mask=mask).logits

    def f_control():
        with torch.no_grad():
            return control(input_ids=ids, attention_mask=mask).logits

    def f_interp():
        return model.forward(ids)

    def f_ablate():
        with model.intervene(ablate):
            return model.forward(ids)

    variants = {"plain": f_plain, "control": f_control, "interp": f_interp, "ablate25": f_ablate}

    # sanity: interp is bit-identical to plain; the ablation does something
    ref = f_plain()
    same = (f_interp() - ref).abs().max().item()
    effect = (f_ablate() - ref).abs().max().item()

    names = list(variants)
    times = {n: [] for n in names}
    cpu = {n: [] for n in names}
    for _ in range(args.warmup):
        for n in names:
            variants[n]()
    sync(dev)
    for r in range(args.repeats):
        order = names[r % len(names):] + names[:r % len(names)]  # rotate: no variant always first
        for n in order:
            sync(dev)
            t0, c0 = time.perf_counter(), time.process_time()
            out = variants[n]()
            sync(dev)
            times[n].append(time.perf_counter() - t0)
            cpu[n].append(time.process_time() - c0)
            del out
    med = {n: statistics.median(ts) for n, ts in times.items()}
    mins = {n: min(ts) for n, ts in times.items()}
    return {
        "batch": args.batch, "seq": args.seq, "repeats": args.repeats, "warmup": args.warmup,
        "ablated_heads": [f"L{l}H{h}" for l, h in heads], "ablated_fraction": len(heads) / (L * H),
        "interp_vs_plain_max_abs_diff": same, "ablation_max_abs_logit_change": effect,
        "times_s": times, "median_s": med, "min_s": mins, "cpu_s": cpu,
        "ratio_median_cpu": {n: statistics.median(cpu[n]) / statistics.median(cpu["plain"]) for n in names},
        "ratio_median": {n: med[n] / med["plain"] for n in names},
        "ratio_min": {n: mins[n] / mins["plain"] for n in names},
    }


def rows_sanity(args) -> dict:
    """At a short context: interp's rows == eager's attention rows (so part 2 compares like with like), within
    1e-4 in float32, 0.02 in bfloat16."""
    torch = setup_torch(args.threads)
    import interp

    ctx = 256
    model = interp.Model(make_hf("sdpa", args.device, args.dtype))
    eager = make_hf("eager", args.device, args.dtype)
    ids = torch.randint(0, MODEL["vocab_size"], (1, ctx), generator=torch.Generator().manual_seed(3)).to(args.device)
    pos = query_positions(ctx)
    rows = interp.attention_rows(model, ids, pos)
    with torch.no_grad():
        att = eager(input_ids=ids, output_attentions=True).attentions
    ref = torch.stack([a[:, :, pos] for a in att], dim=1)
    out = {"ctx": ctx, "positions": pos, "max_abs_diff": (rows.float() - ref.float()).abs().max().item()}
    if "tl" in args.kinds:
        del eager
        tl = tl_rows(make_bridge(make_hf("sdpa", args.device, args.dtype), args.device), ids, pos)
        out["tl_max_abs_diff"] = (rows.float() - tl.float()).abs().max().item()
    # interp's rows are float32 from the model's q, k; eager's are the model's dtype: bf16 rounds (the parity test's
    # tolerances, tests/models/test_parity_device.py)
    out["tolerance"] = tol = {"float32": 1e-4, "bfloat16": 0.02, "float16": 0.01}[args.dtype]
    bad = [k for k in ("max_abs_diff", "tl_max_abs_diff") if out.get(k, 0.0) > tol]
    if bad:
        raise SystemExit(f"attention rows differ from the reference ({', '.join(f'{k} {out[k]:.3g}' for k in bad)}): "
                         "the timings would not compare like with like")
    return out


# ---------------------------------------------------------------------------------------------
# part 2: attention rows vs eager output_attentions
# ---------------------------------------------------------------------------------------------
def part_rows(args) -> list[dict]:
    import torch

    elem = torch.empty((), dtype=torch_dtype(args.dtype)).element_size()
    results = []
    calib = None  # measured / estimated eager peak at the largest context that ran
    for ctx in args.contexts:
        reps = args.repeats_rows if ctx <= 2048 else args.repeats_long
        for kind in args.kinds:
            est = {"eager": eager_bytes_estimate, "tl": tl_bytes_estimate}.get(kind, sdpa_bytes_estimate)(ctx, 1, elem)
            if kind == "eager" and calib is not None:
                est = int(est * max(1.0, calib))
            entry = {"ctx": ctx, "kind": kind, "estimate_bytes": est}
            if est > args.mem_budget_gb * GiB:
                entry["skipped"] = f"would need ~{est / GiB:.1f} GiB > budget {args.mem_budget_gb:.1f} GiB"
            else:
                spec = {"device": args.device, "dtype": args.dtype, "ctx": ctx, "kind": kind, "batch": 1,
                        "threads": args.threads, "repeats": reps, "model": dict(MODEL), "model_name": REAL["name"]}
                t0 = time.perf_counter()
                res = run_child(spec, timeout=args.child_timeout, script=__file__)
                entry["wall_s"] = time.perf_counter() - t0
                entry.update(res)
                if "times_s" in res:
                    entry["median_s"] = statistics.median(res["times_s"])
                    entry["median_cpu_s"] = statistics.median(res["cpu_s"])
                    if kind == "eager" and res["peak_bytes"]:
                        calib = res["peak_bytes"] / eager_bytes_estimate(ctx, 1, elem)
            results.append(entry)
            _progress(entry)
    return results


def _progress(e: dict):
    print_progress(e, f"{e['kind']:<5}", lambda e: f"{e['median_s']:.3f} s (CPU {e['median_cpu_s']:.3f} s), "
                                                   f"peak +{e['peak_bytes'] / MiB:.0f} MiB")


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def print_report(res: dict):
    o = res["overhead"]
    print()
    print(f"== forward overhead: batch {o['batch']} x {o['seq']} tokens, {o['repeats']} interleaved rounds "
          f"after {o['warmup']} warm-up ==")
    print(f"   interp (no intervention) vs plain: max |logit diff| = {o['interp_vs_plain_max_abs_diff']:.3g}; "
          f"ablation moves logits by up to {o['ablation_max_abs_logit_change']:.3g}")
    print(f"   {'variant':<30}{'median ms':>11}{'min ms':>10}{'x plain (med)':>15}{'x plain (min)':>15}")
    labels = {"plain": "plain HF (sdpa)", "control": "plain HF, 2nd object (A/A)",
              "interp": "interp.Model, no intervention",
              "ablate25": f"interp, {o['ablated_fraction']:.0%} heads zeroed"}
    for n, label in labels.items():
        flag = ""
        if n in ("interp", "ablate25"):
            flag = "  ok" if o["ratio_median"][n] <= 1.05 else "  > 1.05x"
        print(f"   {label:<30}{o['median_s'][n] * 1e3:>11.1f}{o['min_s'][n] * 1e3:>10.1f}"
              f"{o['ratio_median'][n]:>15.3f}{o['ratio_min'][n]:>15.3f}{flag}")

    s = res["rows_sanity"]
    kinds = res["args"]["kinds"]
    print()
    print("== attention rows, 4 query positions (T/4, T/2, 3T/4, T-1), batch 1 ==")
    tl_check = f"; TransformerLens hook_pattern rows: {s['tl_max_abs_diff']:.3g}" if "tl_max_abs_diff" in s else ""
    print(f"   check at ctx {s['ctx']}: interp rows vs eager attentions max |diff| = {s['max_abs_diff']:.3g}{tl_check}")
    print(f"   times: CPU seconds of the measuring process (one thread; wall time in the JSON); peak memory: "
          f"{res['rows'][0].get('mem_method', 'n/a') if res['rows'] else 'n/a'}")
    by = {(e["ctx"], e["kind"]): e for e in res["rows"]}
    titles = {"sdpa": "sdpa fwd", "rows": "interp rows", "eager": "eager+output_attn", "tl": "TL hook_pattern"}
    others = [k for k in ("eager", "tl") if k in kinds]
    print(f"   {'ctx':>6} | " + " | ".join(f"{titles[k]:>24}" for k in kinds) + " | "
          + " ".join(f"{k + '/rows time':>15} {k + '/rows mem':>14}" for k in others))

    def cell(e, width):
        if e is None:
            return f"{'-':>{width}}"
        if "skipped" in e:
            return f"{'skipped (~' + format(e['estimate_bytes'] / GiB, '.1f') + ' GiB)':>{width}}"
        if "error" in e:
            return f"{'error':>{width}}"
        return f"{e['median_cpu_s']:>7.3f}s {e['peak_bytes'] / MiB:>7.0f}MiB".rjust(width)

    for ctx in res["args"]["contexts"]:
        r = by.get((ctx, "rows"))
        ratios = []
        for k in others:
            e, tr, mr = by.get((ctx, k)), "-", "-"
            if r and e and "median_s" in r and "median_s" in e:
                tr = f"{e['median_cpu_s'] / r['median_cpu_s']:.2f}x"
                mr = f"{e['peak_bytes'] / max(r['peak_bytes'], 1):.1f}x"
            ratios.append(f"{tr:>15} {mr:>14}")
        print(f"   {ctx:>6} | " + " | ".join(cell(by.get((ctx, k)), 24) for k in kinds) + " | " + " ".join(ratios))
    print_skips_and_errors(res["rows"], "kind", res["args"]["mem_budget_gb"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(ap, "overhead", child_timeout=600)
    ap.add_argument("--dtype", default=None, help="float32 (CPU default) / bfloat16 (CUDA default)")
    ap.add_argument("--quick", action="store_true", help="~20 s: short sequence, fewer repeats, ctx 512 only")
    ap.add_argument("--seq", type=int, default=None, help="tokens per sequence in part 1 (default 1024)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=None, help="timed rounds in part 1 (default 9)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--contexts", type=int, nargs="+", default=None, help="part 2 contexts (default 512 2048 8192)")
    ap.add_argument("--repeats-rows", type=int, default=None, help="timed calls per child at ctx <= 2048 (default 3)")
    ap.add_argument("--repeats-long", type=int, default=1, help="timed calls per child at ctx > 2048")
    ap.add_argument("--model", default=None,
                    help="a real checkpoint interp loads (e.g. smollm2-135m) in place of the random-weight Llama")
    ap.add_argument("--kinds", default=None,
                    help="part 2 methods, comma-separated from sdpa,rows,eager,tl (default sdpa,rows,eager; with "
                         "--model also tl: TransformerLens pattern capture)")
    args, torch = parse_and_setup(ap, argv, child_main)
    if args is None:
        return
    args.kinds = (args.kinds or ("sdpa,rows,eager,tl" if args.model else "sdpa,rows,eager")).split(",")
    unknown = set(args.kinds) - {"sdpa", "rows", "eager", "tl"}
    if unknown:
        ap.error(f"--kinds: unknown {sorted(unknown)}; choose from sdpa, rows, eager, tl")
    if args.model:
        REAL["name"] = args.model
        sys.path.insert(0, str(ROOT))
        from interp.models.loading import load_config

        cfg = load_config(args.model)
        cfg = getattr(cfg, "text_config", cfg)
        MODEL.clear()
        MODEL.update({k: getattr(cfg, k) for k in ("vocab_size", "hidden_size", "intermediate_size",
                                                   "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                                   "max_position_embeddings")})
    cuda = args.device.startswith("cuda")
    args.dtype = args.dtype or ("bfloat16" if cuda else "float32")
    q = args.quick
    args.seq = args.seq or (256 if q else 1024)
    args.repeats = args.repeats or (5 if q else 9)
    args.repeats_rows = args.repeats_rows or (1 if q else 3)
    args.contexts = args.contexts or ([512] if q else [512, 2048, 8192])
    if max(args.contexts) > MODEL["max_position_embeddings"]:
        MODEL["max_position_embeddings"] = max(args.contexts)

    t_start = time.perf_counter()
    print(f"interp overhead benchmark on {args.device} ({args.dtype}, torch threads {torch.get_num_threads()}); "
          f"{args.model or 'random Llama'} L={MODEL['num_hidden_layers']} d={MODEL['hidden_size']} H={MODEL['num_attention_heads']} "
          f"V={MODEL['vocab_size']}; memory budget {args.mem_budget_gb:.1f} GiB", flush=True)
    print("part 1: forward overhead ...", flush=True)
    overhead = part_overhead(args)
    sanity = rows_sanity(args)
    print("part 2: attention rows vs eager (one subprocess per measurement) ...", flush=True)
    rows = part_rows(args)


    res = {
        "device": args.device, "dtype": args.dtype, "model": dict(MODEL), "model_name": args.model or "random-llama",
        "args": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "env": bench_env(args, torch),
        "overhead": overhead, "rows_sanity": sanity, "rows": rows,
        "total_wall_s": None,
    }
    res["total_wall_s"] = time.perf_counter() - t_start
    print_report(res)
    write_result(res, args, f"overhead-{args.model}" if args.model else "overhead")


if __name__ == "__main__":
    main()
