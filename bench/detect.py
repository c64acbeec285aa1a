#!/usr/bin/env python
"""Retrieval-head detection at long context: interp's detector against eager output_attentions and plain decoding.

On the bundled Qwen2 organism by default (`tiny-qwen2`: 4 layers, 8 query heads, 2 KV heads; RoPE run
past its configured 2048 positions as is), or on any model interp loads with a tokenizer (`--model`,
e.g. smollm2-135m), at each context length, time and peak memory of
    interp     interp.analyses.retrieval.detect_retrieval_heads: greedy decoding with sdpa kept;
               at the prefill and every decode step only the current query's attention row is
               recomputed from the real post-RoPE q and k (O(T) per head, never [T, T])
    eager      a reference written here: the same prompts and batches (left padding, batch_size
               of RetrievalConfig), decoded greedily with the plain HF model (interp's wrapper
               detached) loaded with attn_implementation="eager" and output_attentions=True at the
               prefill and at each KV-cached decode step; the retrieval score is computed from those
               weights
    greedy     the cost floor: plain greedy decoding of the same prompts, batches and number of new
               tokens with the plain HF model (interp's wrapper detached; the adapter's attention,
               sdpa) and no attention capture, decoded as model.greedy_decode does (prefill with
               logits_to_keep=1, then KV-cached steps); interp's and eager's time and peak memory are
               reported as multiples of it
The prompts are `interp.tasks.niah.build_niah` samples (one depth, 0.5, and 2 seeds by default),
built before the timer starts and passed to each method; the parent checks that every method got
the same prompt tokens. Needles and haystack: on a model trained on interp's corpus (the organisms)
the corpus's needles in the corpus haystack, as before; on any other model the standard needles
(`interp.tasks.niah.resolve_niah`) in real text, `--haystack` (default: the fetched text
sherlock-holmes, `interp texts fetch sherlock-holmes`; `--haystack corpus` for the synthetic corpus),
so that a pretrained model actually recalls the needle. The reference mirrors the detector's rules
(Wu et al. 2024): at the step that generates token t, a head copies when its top-1 key lies in
the needle span and the token there equals token t; its score on a sample is the number of
distinct needle positions copied / the answer's token count, capped at 1; scores are averaged
over the samples whose answer was recalled (RetrievalConfig.only_successful, default True), all
zeros when none was. Wherever eager ran, the parent checks that both give the same mean scores
and the same per-sample scores (max |diff| <= 1e-4; the detector's per-sample scores are read from
the recorder it creates, since its result keeps only the mean over recalled samples), the same
generated tokens and the same recall, and fails loudly (exit 1) otherwise. Wherever greedy ran, the
parent checks that it generated the same tokens as the detector (the recorder only observes), and
fails loudly otherwise.

Each (context, method) runs in a fresh subprocess, after a warm-up at a short context. Times on CPU are the
measuring process's CPU time (one torch thread: other processes sharing the cores stretch its wall time, not
the CPU time the work takes; wall times are kept in the JSON's times_s); on CUDA, wall time. Peak memory
is measured as in bench/overhead.py (`PeakMemory`, bench/_common.py): the rise of the resident set on CPU (VmHWM
after resetting it through /proc/self/clear_refs, minus VmRSS before), torch.cuda
max_memory_allocated minus the allocation before on CUDA. Eager keeps every layer's
[b, H, T, T] prefill pattern; where its estimate exceeds the memory budget it is skipped and the
estimate printed. Every method pays the plain sdpa/eager forward with a left-padding mask (seeds'
prompts differ by a few tokens and share a batch): at long contexts that mask, not interp, dominates
interp's peak on CPU. The result's `ratios` hold, per context, interp/greedy, eager/greedy and
eager/interp time and peak memory (as the table prints them).

Usage: python bench/detect.py [--model tiny-qwen2] [--contexts 1024 2048 8192] [--seeds 2]
                              [--depths 0.5] [--methods interp greedy eager] [--haystack TEXT]
                              [--device cpu|cuda] [--threads N] [--mem-budget-gb G] [--out PATH]
Results: a table on stdout and bench/results/detect-<device>.json (the default model) or
bench/results/detect-<model>-<device>.json (any other --model; or --out).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from _common import (  # noqa: E402
    GiB,
    MiB,
    PeakMemory,
    add_common_args,
    bench_env,
    parse_and_setup,
    print_progress,
    print_skips_and_errors,
    run_child,
    setup_torch,
    sync,
    torch_dtype,
    write_result,
)

MODEL_NAME = "tiny-qwen2"  # the default --model (its results: bench/results/detect-<device>.json)
METHODS = ("interp", "greedy", "eager")
DEFAULT_HAYSTACK = "sherlock-holmes"  # real text for models not trained on interp's corpus
WARMUP_CTX = 128
TOLERANCE = 1e-4


# ---------------------------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------------------------
def niah_config(ctx: int, depths, seeds: int, needle_source: str | None = None, haystack: str | None = None):
    from interp.tasks.niah import NiahConfig

    return NiahConfig(context_lengths=(ctx,), depths=tuple(depths), n_seeds=seeds, needle_source=needle_source,
                      haystack_file=haystack)


def niah_choice(name: str, haystack: str | None) -> tuple[str | None, str | None]:
    """(needle_source, haystack_file) for model `name`: for a model trained on interp's corpus (the organisms)
    the corpus needles (None, as build_niah's default) in `haystack` (default: the corpus); for any other the
    standard needles (resolve_niah's rule) in `haystack` (default: the fetched sherlock-holmes text).
    `haystack` "corpus" means the corpus generator's sentences."""
    from types import SimpleNamespace

    from interp.models.loading import resolve
    from interp.tasks.niah import trained_on_corpus

    corpus = trained_on_corpus(SimpleNamespace(source=resolve(name)[1]))
    if haystack is None:
        haystack = "corpus" if corpus else DEFAULT_HAYSTACK
    return (None if corpus else "standard"), (None if haystack == "corpus" else haystack)


def model_config(name: str = MODEL_NAME) -> dict:
    from interp.models.loading import resolve

    path = Path(resolve(name)[1]) / "config.json"
    if path.is_file():
        return json.loads(path.read_text())
    from interp.models.loading import load_model  # a GGUF file, a tiny random model...: its HF config

    return load_model(name, device="cpu").hf.config.to_dict()


def load_plain(name: str, device: str, dtype: str, attn: str | None = None):
    """(plain HF model, tokenizer): interp loads `name` (the same weights and tokenizer as the detector's) with
    attn_implementation `attn` (None: the adapter's default, sdpa), then detaches its wrapper."""
    from interp.models.loading import load_model

    model = load_model(name, device=device, dtype=dtype, attn_implementation=attn)
    model.detach()  # the model's own attention implementation: no interp wrapper in the way
    return model.hf.eval(), model.tokenizer


def _cache_kw(hf) -> str:
    """The name of the forward's KV-cache argument ("cache" in newer transformers, else "past_key_values")."""
    import inspect

    return "cache" if "cache" in inspect.signature(hf.forward).parameters else "past_key_values"


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
    ckw = _cache_kw(hf)
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
            out = hf(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, output_attentions=True,
                     **{ckw: cache})
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
                out = hf(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, use_cache=True,
                         output_attentions=True, **{ckw: cache})
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
# the floor: plain greedy decoding, no attention capture
# ---------------------------------------------------------------------------------------------
def plain_greedy(hf, tok, samples, batch_size: int, max_new_tokens: int | None, device: str) -> dict:
    """Greedy-decode `samples` with the same batches, left padding, positions and token count as run_niah, the
    way model.greedy_decode does (prefill keeping the last position's logits only, then KV-cached steps)."""
    import torch
    from transformers import DynamicCache

    from interp.experiments.tasks import length_batches
    from interp.models.model import pad_left, position_ids_from_mask
    from interp.tasks.niah import score_answer

    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    ckw = _cache_kw(hf)
    recall, generated = [None] * len(samples), [None] * len(samples)
    for idx in length_batches([s.context_length for s in samples], batch_size):
        group = [samples[i] for i in idx]
        ids, mask = pad_left([s.input_ids for s in group], pad_id)
        ids, mask = ids.to(device), mask.to(device)
        n_new = max_new_tokens or max(len(s.answer_ids) for s in group) + 2
        cache = DynamicCache()
        toks = []
        with torch.no_grad():
            out = hf(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask), use_cache=True,
                     logits_to_keep=1, **{ckw: cache})
            for step in range(n_new):
                nxt = out.logits[:, -1].argmax(-1)
                toks.append(nxt)
                if step == n_new - 1:
                    break
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                pos = position_ids_from_mask(mask)[:, -1:]
                out = hf(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, use_cache=True,
                         **{ckw: cache})
        gen = torch.stack(toks, dim=1).cpu()
        for row, (i, s) in enumerate(zip(idx, group)):
            generated[i] = gen[row].tolist()
            recall[i] = score_answer(tok.decode(generated[i], skip_special_tokens=True), s.answer)[0]
    return {"recall": [bool(r) for r in recall], "generated": generated,
            "attn_implementation": hf.config._attn_implementation}


# ---------------------------------------------------------------------------------------------
# child: one (context, method) measurement in a fresh process
# ---------------------------------------------------------------------------------------------
def child_main(spec: dict) -> None:
    setup_torch(spec["threads"])
    import interp
    from interp.analyses import retrieval
    from interp.analyses.retrieval import RetrievalConfig
    from interp.tasks.niah import build_niah

    device, dtype, method, name = spec["device"], spec["dtype"], spec["method"], spec["model"]
    if method == "interp":
        model = interp.load_model(name, device=device, dtype=dtype)
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
        hf, tok = load_plain(name, device, dtype, attn="eager")

        def run(samples, cfg):
            return reference_detect(hf, tok, samples, cfg.batch_size, cfg.niah.max_new_tokens, device)
    elif method == "greedy":
        hf, tok = load_plain(name, device, dtype)

        def run(samples, cfg):
            return plain_greedy(hf, tok, samples, cfg.batch_size, cfg.niah.max_new_tokens, device)
    else:
        raise SystemExit(f"unknown method {method}")

    def config(ctx):
        return RetrievalConfig(niah=niah_config(ctx, spec["depths"], spec["seeds"], spec.get("needle_source"),
                                                spec.get("haystack")))

    warm = config(WARMUP_CTX)
    run(build_niah(tok, warm.niah), warm)  # warm-up: lazy init, kernel selection
    cfg = config(spec["ctx"])
    t0 = time.perf_counter()
    samples = build_niah(tok, cfg.niah)
    build_s = time.perf_counter() - t0
    times, cpu = [], []  # wall; this process's CPU time (one thread: immune to other processes on the cores)
    for r in range(spec["repeats"]):
        sync(device)
        if r == 0:
            with PeakMemory(device) as pm:
                t0, c0 = time.perf_counter(), time.process_time()
                out = run(samples, cfg)
                sync(device)
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
        else:
            t0, c0 = time.perf_counter(), time.process_time()
            run(samples, cfg)
            sync(device)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    print("RESULT " + json.dumps({
        "times_s": times, "cpu_s": cpu, "peak_bytes": pm.peak, "mem_method": pm.method, "build_niah_s": build_s,
        "n_samples": len(samples), "prompt_tokens": [len(s.input_ids) for s in samples],
        "prompts_sha256": hashlib.sha256(json.dumps([s.input_ids for s in samples]).encode()).hexdigest(),
        "batch_size": cfg.batch_size, **out}))


# ---------------------------------------------------------------------------------------------
# parent
# ---------------------------------------------------------------------------------------------
def measure(args, cfg: dict) -> tuple[list[dict], list[dict], list[dict]]:
    import numpy as np

    from interp.analyses.retrieval import RetrievalConfig

    elem = torch_dtype(args.dtype).itemsize
    batch = min(RetrievalConfig().batch_size, args.seeds * len(args.depths))  # the largest batch at a context
    methods = [m for m in METHODS if m in args.methods]
    results, checks, greedy_checks = [], [], []
    calib = None  # measured / estimated eager peak at the largest context that ran
    for ctx in args.contexts:
        by = {}
        for method in methods:
            entry = {"ctx": ctx, "method": method}
            if method == "eager":
                est = eager_bytes_estimate(ctx, batch, elem, cfg)
                if calib is not None:
                    est = int(est * max(1.0, calib))
                entry["estimate_bytes"] = est
                if est > args.mem_budget_gb * GiB:
                    entry["skipped"] = f"would need ~{est / GiB:.1f} GiB > budget {args.mem_budget_gb:.1f} GiB"
            if "skipped" not in entry:
                spec = {"device": args.device, "dtype": args.dtype, "ctx": ctx, "method": method, "model": args.model,
                        "threads": args.threads, "seeds": args.seeds, "depths": list(args.depths),
                        "repeats": args.repeats, "needle_source": args._needle_source, "haystack": args._haystack}
                t0 = time.perf_counter()
                entry.update(run_child(spec, timeout=args.child_timeout, script=__file__))
                entry["wall_s"] = time.perf_counter() - t0
                if "times_s" in entry:  # CPU seconds on CPU (see the module docstring), wall seconds on CUDA
                    entry["seconds"] = min(entry["cpu_s"] if args.device == "cpu" else entry["times_s"])
                    if method == "eager" and entry["peak_bytes"]:
                        calib = entry["peak_bytes"] / eager_bytes_estimate(ctx, batch, elem, cfg)
            results.append(entry)
            by[method] = entry
            _progress(entry)
        ran = {m: e for m, e in by.items() if "times_s" in e}
        same_prompts = len({e["prompts_sha256"] for e in ran.values()}) <= 1
        if not same_prompts:
            print(f"  [ctx {ctx:>5}] the methods got different prompt tokens: "
                  f"{ {m: e['prompts_sha256'][:12] for m, e in ran.items()} }  MISMATCH", flush=True)
        a, g = by.get("interp", {}), by.get("greedy", {})
        if "generated" in a and "generated" in g:
            same_gen = a["generated"] == g["generated"]
            greedy_checks.append({"ctx": ctx, "same_generated": same_gen, "same_recall": a["recall"] == g["recall"],
                                  "same_prompts": same_prompts, "ok": same_gen and same_prompts})
            print(f"  [ctx {ctx:>5}] greedy vs interp: same generated tokens: {same_gen}"
                  f"{'' if same_gen and same_prompts else '  MISMATCH'}", flush=True)
        b = by.get("eager", {})
        if "scores" in a and "scores" in b:
            diff = float(np.abs(np.array(a["scores"]) - np.array(b["scores"])).max())
            diff_s = float(np.abs(np.array(a["sample_scores"]) - np.array(b["sample_scores"])).max())
            same_gen, same_rec = a["generated"] == b["generated"], a["recall"] == b["recall"]
            chk = {"ctx": ctx, "max_abs_diff": diff, "max_abs_diff_per_sample": diff_s,
                   "n_used": [a["n_used"], b["n_used"]], "n_samples": a["n_samples"],
                   "nonzero_sample_scores": int((np.array(b["sample_scores"]) > 0).sum()),
                   "same_generated": same_gen, "same_recall": same_rec, "same_prompts": same_prompts,
                   "ok": diff <= TOLERANCE and diff_s <= TOLERANCE and same_gen and same_rec and same_prompts}
            checks.append(chk)
            print(f"  [ctx {ctx:>5}] max |interp - eager|: mean scores {diff:.3g} ({a['n_used']} recalled sample(s) "
                  f"of {a['n_samples']}), per-sample scores {diff_s:.3g}; same generated tokens: {same_gen}"
                  f"{'' if chk['ok'] else '  MISMATCH'}", flush=True)
    return results, checks, greedy_checks


def ratios(results: list[dict], contexts) -> list[dict]:
    """Per context: interp's and eager's time and peak memory as multiples of greedy's, and eager's of interp's
    (None where either did not run; a memory ratio also where the denominator's peak rose under 1 MiB)."""
    by = {(e["ctx"], e["method"]): e for e in results if "times_s" in e}
    out = []
    for ctx in contexts:
        row = {"ctx": ctx}
        for num, den in (("interp", "greedy"), ("eager", "greedy"), ("eager", "interp")):
            x, y = by.get((ctx, num)), by.get((ctx, den))
            row[f"{num}/{den} time"] = x["seconds"] / y["seconds"] if x and y else None
            row[f"{num}/{den} memory"] = (x["peak_bytes"] / y["peak_bytes"] if x and y and y["peak_bytes"] >= MiB
                                          else None)
        out.append(row)
    return out


def _progress(e: dict):
    print_progress(e, f"{e['method']:<6}", lambda e: f"{e['seconds']:.2f} s, peak +{e['peak_bytes'] / MiB:.0f} MiB, "
                                                     f"recall {sum(e['recall'])}/{e['n_samples']}")


def print_report(res: dict):
    print()
    a = res["args"]
    print(f"== retrieval-head detection on {res['model']} ({res['device']}, {res['dtype']}, torch threads "
          f"{res['env']['torch_threads']}): {a['seeds']} seed(s) x depths {a['depths']} per context; needles "
          f"{res['niah']['needles']}, haystack {res['niah']['haystack']} ==")
    mem = next((e["mem_method"] for e in res["results"] if "mem_method" in e), "n/a")
    print(f"   peak memory: {mem}")

    def x(v, w):
        return f"{'-':>{w}}" if v is None else f"{v:>{w - 1}.2f}x"

    print(f"   {'ctx':>6}  {'method':<7}{'seconds':>10}{'peak MiB':>11}{'recall':>8}   {'/greedy time':>13}"
          f"{'/greedy mem':>12}{'eager/interp time':>19}{'eager/interp mem':>18}")
    by = {(e["ctx"], e["method"]): e for e in res["results"]}
    rat = {r["ctx"]: r for r in res["ratios"]}
    for ctx in a["contexts"]:
        r = rat[ctx]
        for m in METHODS:
            e = by.get((ctx, m))
            if e is None:
                continue
            if "skipped" in e:
                cells = f"{'skipped':>10}{'~' + format(e['estimate_bytes'] / MiB, '.0f'):>11}{'':>8}"
            elif "error" in e:
                cells = f"{'error':>10}{'-':>11}{'':>8}"
            else:
                cells = (f"{e['seconds']:>10.2f}{e['peak_bytes'] / MiB:>11.0f}"
                         f"{str(sum(e['recall'])) + '/' + str(e['n_samples']):>8}")
            ratio = ""
            if m != "greedy" and "times_s" in e:
                ratio = x(r[f"{m}/greedy time"], 13) + x(r[f"{m}/greedy memory"], 12)
                if m == "eager":
                    ratio += x(r["eager/interp time"], 19) + x(r["eager/interp memory"], 18)
            print(f"   {ctx:>6}  {m:<7}{cells}   {ratio}")
    print_skips_and_errors(res["results"], "method", a["mem_budget_gb"])
    if res["greedy_checks"]:
        print()
        print("== generated tokens (greedy vs interp) ==")
        for c in res["greedy_checks"]:
            print(f"   {c['ctx']:>6}  same tokens: {c['same_generated']!s:<6} same prompts: {c['same_prompts']!s:<6}"
                  f"  {'ok' if c['ok'] else 'MISMATCH'}")
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


def result_name(model: str) -> str:
    """The result file's stem: detect (the default model, as before) or detect-<model> (path-safe)."""
    if model == MODEL_NAME:
        return "detect"
    return "detect-" + re.sub(r"[^A-Za-z0-9._-]+", "_", Path(model.rstrip("/")).name or model)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=MODEL_NAME,
                    help=f"any model interp loads with a tokenizer (default {MODEL_NAME}, the bundled organism)")
    ap.add_argument("--contexts", type=int, nargs="+", default=[1024, 2048, 8192])
    ap.add_argument("--seeds", type=int, default=2, help="NIAH seeds per (context, depth)")
    ap.add_argument("--depths", type=float, nargs="+", default=[0.5])
    ap.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS),
                    help="what to measure (default all three; eager is still skipped past the memory budget)")
    ap.add_argument("--haystack", default=None,
                    help=f"NIAH haystack: a text file, a directory of .txt files, a fetched text's alias, or 'corpus' "
                         f"(default: corpus for the organisms, {DEFAULT_HAYSTACK} for any other model)")
    add_common_args(ap, "detect", child_timeout=3600)
    ap.add_argument("--dtype", default="float32",
                    help="every method (default float32: in bf16, eager's rounded weights tie more and scores may differ)")
    ap.add_argument("--repeats", type=int, default=1, help="timed runs per child (time: the min; memory: the first)")
    args, torch = parse_and_setup(ap, argv, child_main)
    if args is None:
        return
    cfg = model_config(args.model)
    args._needle_source, args._haystack = niah_choice(args.model, args.haystack)
    niah = niah_config(max(args.contexts), args.depths, args.seeds, args._needle_source, args._haystack)  # checked now

    t_start = time.perf_counter()
    print(f"retrieval-head detection benchmark on {args.device} ({args.dtype}, torch threads "
          f"{torch.get_num_threads()}); {args.model}: L={cfg['num_hidden_layers']} H={cfg['num_attention_heads']} "
          f"KV={cfg['num_key_value_heads']} d={cfg['hidden_size']}; needles {niah.needles}, haystack {niah.haystack}; "
          f"methods {' '.join(m for m in METHODS if m in args.methods)}; memory budget {args.mem_budget_gb:.1f} GiB; "
          f"one subprocess per measurement ...", flush=True)
    results, checks, greedy_checks = measure(args, cfg)

    res = {
        "model": args.model, "device": args.device, "dtype": args.dtype,
        "model_config": {k: cfg.get(k) for k in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                                  "hidden_size", "vocab_size", "max_position_embeddings")},
        "niah": {"needles": niah.needles, "haystack": niah.haystack},
        "args": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "env": bench_env(args, torch),
        "results": results, "ratios": ratios(results, args.contexts), "checks": checks,
        "greedy_checks": greedy_checks, "total_wall_s": None,
    }
    res["total_wall_s"] = time.perf_counter() - t_start
    print_report(res)
    write_result(res, args, result_name(args.model))
    failed = [c for c in checks if not c["ok"]]
    failed_greedy = [c for c in greedy_checks if not c["ok"]]
    errors = [e for e in results if "error" in e]
    if failed:
        raise SystemExit(f"FAIL: interp's scores differ from the eager reference at ctx "
                         f"{[c['ctx'] for c in failed]} (max |diff| "
                         f"{max(max(c['max_abs_diff'], c['max_abs_diff_per_sample']) for c in failed):.3g}, "
                         f"tolerance {TOLERANCE:g}; or the generated tokens or prompts differ)")
    if failed_greedy:
        raise SystemExit(f"FAIL: plain greedy decoding generated other tokens than the detector (or got other "
                         f"prompts) at ctx {[c['ctx'] for c in failed_greedy]}")
    if errors:
        raise SystemExit(f"FAIL: {len(errors)} measurement(s) failed")


if __name__ == "__main__":
    main()
