#!/usr/bin/env python
"""Retrieval-head detection at long context: interp's detector against eager output_attentions.

On the bundled Qwen2 organism (`tiny-qwen2`: 4 layers, 8 query heads, 2 KV heads; RoPE run past
its configured 2048 positions as is), at each context length, time and peak memory of
    interp     interp.analyses.retrieval.detect_retrieval_heads: greedy decoding with sdpa kept;
               at the prefill and every decode step only the current query's attention row is
               recomputed from the real post-RoPE q and k (O(T) per head, never [T, T])
    eager      a reference written here: the same prompts and batches (left padding, batch_size
               of RetrievalConfig), decoded greedily with a plain HF model loaded with
               attn_implementation="eager" and output_attentions=True at the prefill and at each
               KV-cached decode step; the retrieval score is computed from those weights
The prompts are `interp.tasks.niah.build_niah` samples (one depth, 0.5, and 2 seeds by default),
built before the timer starts and passed to both. The reference mirrors the detector's rules
(Wu et al. 2024): at the step that generates token t, a head copies when its top-1 key lies in
the needle span and the token there equals token t; its score on a sample is the number of
distinct needle positions copied / the answer's token count, capped at 1; scores are averaged
over the samples whose answer was recalled (RetrievalConfig.only_successful, default True), all
zeros when none was. Wherever eager ran, the parent checks that both give the same mean scores
and the same per-sample scores (max |diff| <= 1e-4; the detector's per-sample scores are read from
the recorder it creates, since its result keeps only the mean over recalled samples), the same
generated tokens and the same recall, and fails loudly (exit 1) otherwise.

Each (context, method) runs in a fresh subprocess, after a warm-up at a short context. Peak memory
is measured as in bench/overhead.py (`PeakMemory`): the rise of the resident set on CPU (VmHWM
after resetting it through /proc/self/clear_refs, minus VmRSS before), torch.cuda
max_memory_allocated minus the allocation before on CUDA. Eager keeps every layer's
[b, H, T, T] prefill pattern; where its estimate exceeds the memory budget it is skipped and the
estimate printed. Both pay the plain sdpa/eager forward with a left-padding mask (seeds' prompts
differ by a few tokens and share a batch): at long contexts that mask, not interp, dominates
interp's peak on CPU.

Usage: python bench/detect.py [--contexts 1024 2048 8192] [--seeds 2] [--depths 0.5]
                              [--device cpu|cuda] [--threads N] [--mem-budget-gb G]
Results: a table on stdout and bench/results/detect-<device>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from overhead import (
    GiB,
    MiB,
    PeakMemory,
    _dtype,
    _setup_torch,
    add_common_args,
    bench_env,
    parse_and_setup,
    print_progress,
    print_skips_and_errors,
    write_result,
    run_child,
    sync,
)

MODEL_NAME = "tiny-qwen2"
WARMUP_CTX = 128
TOLERANCE = 1e-4


# ---------------------------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------------------------
def niah_config(ctx: int, depths, seeds: int):
    from interp.tasks.niah import NiahConfig

    return NiahConfig(context_lengths=(ctx,), depths=tuple(depths), n_seeds=seeds)


def model_config() -> dict:
    from interp.models.loading import resolve

    return json.loads((Path(resolve(MODEL_NAME)[1]) / "config.json").read_text())


def eager_bytes_estimate(ctx: int, batch: int, elem: int, cfg: dict) -> int:
    """Eager prefill with output_attentions: every layer's [b, H, T, T] pattern is kept, plus the live
    layer's scores and softmax temporaries, the [b, 1, T, T] mask, and the fp32 logits."""
    L, H, V = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["vocab_size"]
    t2 = ctx * ctx
    return batch * (H * t2 * elem * (L + 2) + t2 * elem + ctx * V * 4)


# ---------------------------------------------------------------------------------------------
# the reference: eager + output_attentions, scores computed here
# ---------------------------------------------------------------------------------------------
def reference_detect(hf, tok, samples, batch_size: int, max_new_tokens: int | None, device: str) -> dict:
    """Greedy-decode `samples` as run_niah does (same batches, left padding, positions, token count)
    with output_attentions at every call; score heads from each call's last attention row."""
    import numpy as np
    import torch
    from transformers import DynamicCache

    from interp.experiments.tasks import length_batches
    from interp.models.model import pad_left
    from interp.tasks.niah import score_answer

    L, H = hf.config.num_hidden_layers, hf.config.num_attention_heads
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    scores, recall, generated = [None] * len(samples), [None] * len(samples), [None] * len(samples)
    for idx in length_batches([s.context_length for s in samples], batch_size):
        group = [samples[i] for i in idx]
        ids, mask = pad_left([s.input_ids for s in group], pad_id)
        ids, mask = ids.to(device), mask.to(device)
        n_new = max_new_tokens or max(len(s.answer_ids) for s in group) + 2
        cache = DynamicCache()
        top, toks = [], []  # per step: [b, L, H] top-1 key, [b] token
        with torch.no_grad():
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            out = hf(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True,
                     output_attentions=True)
            for step in range(n_new):
                nxt = out.logits[:, -1].argmax(-1)
                # the last query's row in every layer: the attention that produced token `step`
                top.append(torch.stack([a[:, :, -1].argmax(-1) for a in out.attentions], dim=1).cpu())
                toks.append(nxt.cpu())
                out = None  # free this call's attention weights before the next call
                if step == n_new - 1:
                    break
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                pos = (mask.cumsum(-1) - 1).clamp(min=0)[:, -1:]
                out = hf(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, cache=cache,
                         use_cache=True, output_attentions=True)
        top_t = torch.stack(top).numpy()  # [steps, b, L, H]
        gen = torch.stack(toks, dim=1).numpy()  # [b, steps]
        ids_np = ids.cpu().numpy()
        n_pad = (mask[:, :ids.shape[1]] == 0).sum(1).cpu().numpy()
        for row, (i, s) in enumerate(zip(idx, group)):
            lo, hi = s.needle_span[0] + n_pad[row], s.needle_span[1] + n_pad[row]
            sc = np.zeros((L, H))
            for layer in range(L):
                for head in range(H):
                    keys = top_t[:, row, layer, head]
                    copied = {int(k) for t, k in enumerate(keys) if lo <= k < hi and ids_np[row, k] == gen[row, t]}
                    sc[layer, head] = min(1.0, len(copied) / max(1, len(s.answer_ids)))
            scores[i] = sc
            generated[i] = gen[row].tolist()
            recall[i] = score_answer(tok.decode(generated[i], skip_special_tokens=True), s.answer)[0]
    ok = np.array(recall, dtype=bool)
    allsc = np.stack(scores)
    mean = allsc[ok].mean(0) if ok.any() else np.zeros(allsc.shape[1:])
    return {"scores": mean.tolist(), "n_used": int(ok.sum()), "recall": [bool(r) for r in recall],
            "generated": generated, "sample_scores": allsc.tolist()}


# ---------------------------------------------------------------------------------------------
# child: one (context, method) measurement in a fresh process
# ---------------------------------------------------------------------------------------------
def child_main(spec: dict) -> None:
    _setup_torch(spec["threads"])
    import interp
    from interp.analyses import retrieval
    from interp.analyses.retrieval import RetrievalConfig
    from interp.tasks.niah import build_niah

    device, dtype, method = spec["device"], spec["dtype"], spec["method"]
    if method == "interp":
        model = interp.load_model(MODEL_NAME, device=device, dtype=dtype)
        tok = model.tokenizer

        # The result keeps only the mean over recalled samples; to compare every sample's scores too,
        # keep a handle on the recorder the detector creates.
        recorders = []

        class _Recorder(retrieval.RetrievalRecorder):
            def __init__(self, *a, **kw):
                super().__init__(*a, **kw)
                recorders.append(self)

        retrieval.RetrievalRecorder = _Recorder

        def run(samples, cfg):
            recorders.clear()
            res = retrieval.detect_retrieval_heads(model, cfg, samples=samples)
            per_sample = recorders[0].per_sample(samples)[0].tolist()
            return {"scores": res.scores, "n_used": res.n_used, "recall": [o["recall"] for o in res.outcomes],
                    "generated": [o["generated_ids"] for o in res.outcomes], "sample_scores": per_sample}
    elif method == "eager":
        import transformers as tf

        from interp.models.loading import resolve

        source = resolve(MODEL_NAME)[1]
        hf = tf.AutoModelForCausalLM.from_pretrained(source, attn_implementation="eager", dtype=_dtype(dtype))
        hf = hf.to(device).eval()
        tok = tf.AutoTokenizer.from_pretrained(source)
        if tok.pad_token is None:  # as interp.Model does
            tok.pad_token = tok.eos_token if tok.eos_token is not None else tok.unk_token

        def run(samples, cfg):
            return reference_detect(hf, tok, samples, cfg.batch_size, cfg.niah.max_new_tokens, device)
    else:
        raise SystemExit(f"unknown method {method}")

    def config(ctx):
        return RetrievalConfig(niah=niah_config(ctx, spec["depths"], spec["seeds"]))

    warm = config(WARMUP_CTX)
    run(build_niah(tok, warm.niah), warm)  # warm-up: lazy init, kernel selection
    cfg = config(spec["ctx"])
    t0 = time.perf_counter()
    samples = build_niah(tok, cfg.niah)
    build_s = time.perf_counter() - t0
    times = []
    for r in range(spec["repeats"]):
        sync(device)
        if r == 0:
            with PeakMemory(device) as pm:
                t0 = time.perf_counter()
                out = run(samples, cfg)
                sync(device)
                times.append(time.perf_counter() - t0)
        else:
            t0 = time.perf_counter()
            run(samples, cfg)
            sync(device)
            times.append(time.perf_counter() - t0)
    print("RESULT " + json.dumps({
        "times_s": times, "peak_bytes": pm.peak, "mem_method": pm.method, "build_niah_s": build_s,
        "n_samples": len(samples), "prompt_tokens": [len(s.input_ids) for s in samples],
        "batch_size": cfg.batch_size, **out}))


# ---------------------------------------------------------------------------------------------
# parent
# ---------------------------------------------------------------------------------------------
def measure(args, cfg: dict) -> tuple[list[dict], list[dict]]:
    import numpy as np

    from interp.analyses.retrieval import RetrievalConfig

    elem = _dtype(args.dtype).itemsize
    batch = min(RetrievalConfig().batch_size, args.seeds * len(args.depths))  # the largest batch at a context
    results, checks = [], []
    calib = None  # measured / estimated eager peak at the largest context that ran
    for ctx in args.contexts:
        by = {}
        for method in ("interp", "eager"):
            entry = {"ctx": ctx, "method": method}
            if method == "eager":
                est = eager_bytes_estimate(ctx, batch, elem, cfg)
                if calib is not None:
                    est = int(est * max(1.0, calib))
                entry["estimate_bytes"] = est
                if est > args.mem_budget_gb * GiB:
                    entry["skipped"] = f"would need ~{est / GiB:.1f} GiB > budget {args.mem_budget_gb:.1f} GiB"
            if "skipped" not in entry:
                spec = {"device": args.device, "dtype": args.dtype, "ctx": ctx, "method": method,
                        "threads": args.threads, "seeds": args.seeds, "depths": list(args.depths),
                        "repeats": args.repeats}
                t0 = time.perf_counter()
                entry.update(run_child(spec, timeout=args.child_timeout, script=__file__))
                entry["wall_s"] = time.perf_counter() - t0
                if "times_s" in entry:
                    entry["seconds"] = min(entry["times_s"])
                    if method == "eager" and entry["peak_bytes"]:
                        calib = entry["peak_bytes"] / eager_bytes_estimate(ctx, batch, elem, cfg)
            results.append(entry)
            by[method] = entry
            _progress(entry)
        a, b = by["interp"], by["eager"]
        if "scores" in a and "scores" in b:
            diff = float(np.abs(np.array(a["scores"]) - np.array(b["scores"])).max())
            diff_s = float(np.abs(np.array(a["sample_scores"]) - np.array(b["sample_scores"])).max())
            same_gen, same_rec = a["generated"] == b["generated"], a["recall"] == b["recall"]
            chk = {"ctx": ctx, "max_abs_diff": diff, "max_abs_diff_per_sample": diff_s,
                   "n_used": [a["n_used"], b["n_used"]], "n_samples": a["n_samples"],
                   "nonzero_sample_scores": int((np.array(b["sample_scores"]) > 0).sum()),
                   "same_generated": same_gen, "same_recall": same_rec,
                   "ok": diff <= TOLERANCE and diff_s <= TOLERANCE and same_gen and same_rec}
            checks.append(chk)
            print(f"  [ctx {ctx:>5}] max |interp - eager|: mean scores {diff:.3g} ({a['n_used']} recalled sample(s) "
                  f"of {a['n_samples']}), per-sample scores {diff_s:.3g}; same generated tokens: {same_gen}"
                  f"{'' if chk['ok'] else '  MISMATCH'}", flush=True)
    return results, checks


def _progress(e: dict):
    print_progress(e, f"{e['method']:<6}", lambda e: f"{e['seconds']:.2f} s, peak +{e['peak_bytes'] / MiB:.0f} MiB, "
                                                     f"recall {sum(e['recall'])}/{e['n_samples']}")


def print_report(res: dict):
    print()
    a = res["args"]
    print(f"== retrieval-head detection on {res['model']} ({res['device']}, {res['dtype']}, torch threads "
          f"{res['env']['torch_threads']}): {a['seeds']} seed(s) x depths {a['depths']} per context ==")
    mem = next((e["mem_method"] for e in res["results"] if "mem_method" in e), "n/a")
    print(f"   peak memory: {mem}")
    print(f"   {'ctx':>6}  {'method':<7}{'seconds':>10}{'peak MiB':>11}   {'eager/interp time':>17}{'eager/interp mem':>17}")
    by = {(e["ctx"], e["method"]): e for e in res["results"]}
    for ctx in a["contexts"]:
        i, e = by.get((ctx, "interp")), by.get((ctx, "eager"))
        for m, x in (("interp", i), ("eager", e)):
            if x is None:
                continue
            if "skipped" in x:
                cells = f"{'skipped':>10}{'~' + format(x['estimate_bytes'] / MiB, '.0f'):>11}"
            elif "error" in x:
                cells = f"{'error':>10}{'-':>11}"
            else:
                cells = f"{x['seconds']:>10.2f}{x['peak_bytes'] / MiB:>11.0f}"
            ratio = ""
            if m == "eager" and "seconds" in x and i is not None and "seconds" in i:
                ratio = (f"{x['seconds'] / i['seconds']:>17.2f}x"
                         f"{x['peak_bytes'] / max(i['peak_bytes'], 1):>16.1f}x")
            print(f"   {ctx:>6}  {m:<7}{cells}   {ratio}")
    print_skips_and_errors(res["results"], "method", a["mem_budget_gb"])
    print()
    print("== score agreement (interp vs eager reference) ==")
    if not res["checks"]:
        print("   none: eager did not run at any context")
    print(f"   {'ctx':>6}{'mean |diff|':>13}{'recalled':>10}{'per-sample |diff|':>19}{'nonzero (s,l,h)':>17}"
          f"{'same tokens':>13}")
    for c in res["checks"]:
        print(f"   {c['ctx']:>6}{c['max_abs_diff']:>13.3g}{str(c['n_used'][0]) + '/' + str(c['n_samples']):>10}"
              f"{c['max_abs_diff_per_sample']:>19.3g}{c['nonzero_sample_scores']:>17}{c['same_generated']!s:>13}"
              f"  {'ok' if c['ok'] else 'MISMATCH'}")
    if any(c["n_used"][0] == 0 for c in res["checks"]):
        print("   (where no sample was recalled, the detector's mean is all zeros: the per-sample scores, every\n"
              "    sample's [L, H] scores before averaging, carry the check)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", type=int, nargs="+", default=[1024, 2048, 8192])
    ap.add_argument("--seeds", type=int, default=2, help="NIAH seeds per (context, depth)")
    ap.add_argument("--depths", type=float, nargs="+", default=[0.5])
    add_common_args(ap, "detect", child_timeout=3600)
    ap.add_argument("--dtype", default="float32",
                    help="both methods (default float32: in bf16, eager's rounded weights tie more and scores may differ)")
    ap.add_argument("--repeats", type=int, default=1, help="timed runs per child (time: the min; memory: the first)")
    args, torch = parse_and_setup(ap, argv, child_main)
    if args is None:
        return
    cfg = model_config()

    t_start = time.perf_counter()
    print(f"retrieval-head detection benchmark on {args.device} ({args.dtype}, torch threads "
          f"{torch.get_num_threads()}); {MODEL_NAME}: L={cfg['num_hidden_layers']} H={cfg['num_attention_heads']} "
          f"KV={cfg['num_key_value_heads']} d={cfg['hidden_size']}; memory budget {args.mem_budget_gb:.1f} GiB; "
          f"one subprocess per measurement ...", flush=True)
    results, checks = measure(args, cfg)


    res = {
        "model": MODEL_NAME, "device": args.device, "dtype": args.dtype,
        "model_config": {k: cfg[k] for k in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                              "hidden_size", "vocab_size", "max_position_embeddings")},
        "args": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "env": bench_env(args, torch),
        "results": results, "checks": checks, "total_wall_s": None,
    }
    res["total_wall_s"] = time.perf_counter() - t_start
    print_report(res)
    write_result(res, args, "detect")
    failed = [c for c in checks if not c["ok"]]
    errors = [e for e in results if "error" in e]
    if failed:
        raise SystemExit(f"FAIL: interp's scores differ from the eager reference at ctx "
                         f"{[c['ctx'] for c in failed]} (max |diff| "
                         f"{max(max(c['max_abs_diff'], c['max_abs_diff_per_sample']) for c in failed):.3g}, "
                         f"tolerance {TOLERANCE:g}; or the generated tokens differ)")
    if errors:
        raise SystemExit(f"FAIL: {len(errors)} measurement(s) failed")


if __name__ == "__main__":
    main()
