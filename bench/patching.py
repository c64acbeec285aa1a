#!/usr/bin/env python
"""Activation patching grids: interp's batched sweep vs one forward pass per cell, side by side.

Grids:
    resid   resid_pre x every layer x every position of 64-token prompts (P pairs, default 8)
    heads   head_out x every head (all positions) on 16 pairs of 64 tokens
Methods, each on its own copy of the same weights:
    interp      interp.patching.run_patching: (pair, cell) rows packed into batches
    naive       one forward per cell (all pairs in its batch), plain torch forward hooks on the HF model
    tl          TransformerLens's patching functions (get_act_patch_resid_pre,
                get_act_patch_attn_head_out_all_pos) on a TransformerBridge: one run_with_hooks per cell
    nnsight     one nnsight trace per cell (all pairs in its batch)
    atp, atp-qk attribution patching (interp.patching.run_attribution): an ESTIMATE of the grid from two
                forward passes and one backward; reported with its time as a multiple of one plain forward
                pass of the same batch (full logits; both the best of 3) and its Pearson correlation with
                the exact grid
Every method's grid (raw logit difference answer - wrong, mean over pairs) is compared with interp's:
`max_diff` must stay <= 1e-4 (float32), else the row says so. Time is wall time of the whole grid
(after one warm-up forward); peak memory the rise of the process's resident set during the grid
(VmHWM reset through /proc/self/clear_refs; on CUDA torch.cuda.max_memory_allocated), measured
in this one process, method after method.

Model: the bundled organism tiny-llama (4 layers, 4 heads, d_model 256) by default, or --model NAME
(any alias interp loads, with a tokenizer).

Part 2 (--long N, default 2048): peak memory of head-level attribution on one N-token pair, beside a
plain forward and a plain forward + backward of the same metric (what the model's own backward needs),
and the size one layer's full attention patterns ([heads, N, N] fp32) would take.

Usage: python bench/patching.py [--model tiny-llama] [--pairs 8] [--seq 64] [--device cpu] [--threads 1]
       [--skip tl,nnsight] [--quick]
Results: a table on stdout and bench/results/patching-<device>.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from overhead import PeakMemory, add_common_args, bench_env, parse_and_setup, sync, write_result  # noqa: E402

METHODS = ("interp", "naive", "tl", "nnsight", "atp", "atp-qk")


def make_pairs(vocab: int, n: int, seq: int, seed: int = 0):
    import torch

    from interp.patching import PatchPair

    g = torch.Generator().manual_seed(seed)
    pairs = []
    for i in range(n):
        c = torch.randint(10, vocab - 10, (seq,), generator=g).tolist()
        x = list(c)
        for j in (seq // 4, seq // 2):  # two corrupted positions
            x[j] = 10 + (x[j] + 17) % (vocab - 20)
        a, w = torch.randint(10, vocab - 10, (2,), generator=g).tolist()
        pairs.append(PatchPair(c, x, a, w if w != a else a + 1, f"bench{i}"))
    return pairs


def metric_fn(pairs):
    import torch

    ans = torch.tensor([p.answer for p in pairs])
    wrong = torch.tensor([p.wrong for p in pairs])

    def metric(logits):
        last = logits[:, -1].float()
        return (last.gather(1, ans[:, None].to(last.device)) - last.gather(1, wrong[:, None].to(last.device))).mean()

    return metric


def run_interp(model, pairs, grid):
    import numpy as np

    from interp.patching import PatchingConfig, run_patching

    site = {"resid": "resid_pre", "heads": "head_out"}[grid]
    res = run_patching(model, pairs, PatchingConfig(sites=(site,), normalize=False, n_boot=10))
    return np.array(res.sites[site].mean, dtype=float), {"forwards": res.n_forward, "rows": res.n_rows,
                                                         "tokens": res.tokens_computed}


def run_atp(model, pairs, grid, method):
    """Attribution estimates of the same grid (raw metric, no verification) and one plain forward of the
    base batch for scale."""
    import numpy as np

    from interp.patching import PatchingConfig, run_attribution

    site = {"resid": "resid_pre", "heads": "head_out"}[grid]
    res = run_attribution(model, pairs, PatchingConfig(sites=(site,), normalize=False, n_boot=10), method=method,
                          verify_top=0, verify_sample=0)
    return np.array(res.sites[site].mean, dtype=float), {"forwards": 2, "backwards": 1,
                                                         "tokens": res.tokens_computed}


def run_naive(hf, adapter, spec, pairs, grid, device):
    """One forward per cell with all pairs in the batch; hand-written torch hooks (no interp)."""
    import numpy as np
    import torch

    clean = torch.tensor([p.clean for p in pairs], device=device)
    corrupt = torch.tensor([p.corrupt for p in pairs], device=device)
    metric = metric_fn(pairs)
    L, H, hd = spec.n_layers, spec.n_heads, spec.head_dim
    layers = adapter.layers()
    store = {}
    hooks = []
    if grid == "resid":
        for l in range(L):
            hooks.append(layers[l].register_forward_pre_hook(
                lambda m, a, kw, l=l: store.__setitem__(l, (a[0] if a else kw["hidden_states"]).clone()),
                with_kwargs=True))
    else:
        for l in range(L):
            hooks.append(adapter.o_proj(l).register_forward_pre_hook(
                lambda m, a, l=l: store.__setitem__(l, a[0].clone())))
    with torch.no_grad():
        hf(input_ids=clean)
    for h in hooks:
        h.remove()
    T = clean.shape[1]
    out = np.zeros((L, T) if grid == "resid" else (L, H))
    with torch.no_grad():
        for l in range(L):
            for c in range(out.shape[1]):
                if grid == "resid":
                    def pre(m, a, kw, l=l, c=c):
                        x = (a[0] if a else kw["hidden_states"]).clone()
                        x[:, c] = store[l][:, c]
                        return ((x,) + tuple(a[1:]), kw) if a else (a, {**kw, "hidden_states": x})
                    h = layers[l].register_forward_pre_hook(pre, with_kwargs=True)
                else:
                    def pre(m, a, l=l, c=c):
                        x = a[0].clone()
                        x[:, :, c * hd:(c + 1) * hd] = store[l][:, :, c * hd:(c + 1) * hd]
                        return (x,)
                    h = adapter.o_proj(l).register_forward_pre_hook(pre)
                try:
                    out[l, c] = float(metric(hf(input_ids=corrupt).logits))
                finally:
                    h.remove()
    return out, {"forwards": out.size, "tokens": out.size * clean.numel()}


def run_tl(br, pairs, grid, device):
    import torch
    import transformer_lens.patching as tlp

    clean = torch.tensor([p.clean for p in pairs], device=device)
    corrupt = torch.tensor([p.corrupt for p in pairs], device=device)
    with torch.no_grad():
        _, cache = br.run_with_cache(clean)
        fn = tlp.get_act_patch_resid_pre if grid == "resid" else tlp.get_act_patch_attn_head_out_all_pos
        out = fn(br, corrupt, cache, metric_fn(pairs))
    return out.float().cpu().numpy(), {"forwards": int(out.numel()), "tokens": int(out.numel()) * corrupt.numel()}


def run_nnsight(lm, blocks_path, o_proj_attr, spec, pairs, grid, device):
    import numpy as np
    import torch

    def get(obj, path):
        for p in path.split("."):
            obj = getattr(obj, p)
        return obj

    clean = torch.tensor([p.clean for p in pairs], device=device)
    corrupt = torch.tensor([p.corrupt for p in pairs], device=device)
    metric = metric_fn(pairs)
    L, H, hd = spec.n_layers, spec.n_heads, spec.head_dim
    blocks = get(lm, blocks_path)
    saved = {}  # filled inside the trace (nnsight runs the block itself; mutate, do not rebind)
    with torch.no_grad(), lm.trace(clean):
        for l in range(L):
            saved[l] = (blocks[l].input if grid == "resid" else get(blocks[l], o_proj_attr).input).save()
    T = clean.shape[1]
    out = np.zeros((L, T) if grid == "resid" else (L, H))
    res = {}
    for l in range(L):
        for c in range(out.shape[1]):
            with torch.no_grad(), lm.trace(corrupt):
                if grid == "resid":
                    blocks[l].input[:, c] = saved[l][:, c]
                else:
                    get(blocks[l], o_proj_attr).input[:, :, c * hd:(c + 1) * hd] = saved[l][:, :, c * hd:(c + 1) * hd]
                res["out"] = lm.output.save()
            o = res["out"]
            out[l, c] = float(metric(o.logits if hasattr(o, "logits") else o))
    return out, {"forwards": out.size, "tokens": out.size * corrupt.numel()}


LONG_JOBS = ("plain forward", "forward + backward", "atp-base-pass head_out", "atp head_out", "atp head_out,q,k",
             "atp-qk q,k")


def long_child(spec: dict) -> None:
    """One memory measurement of part 2 in a fresh process (prints RESULT {json})."""
    import json

    import torch

    from interp.models.loading import load_model
    from interp.patching import PatchingConfig, run_attribution

    torch.set_num_threads(max(1, spec["threads"]))
    model = load_model(spec["model"], device=spec["device"])
    n, what = spec["n"], spec["what"]
    (pair,) = make_pairs(model.spec.d_vocab, 1, n, seed=1)
    x = torch.tensor([pair.corrupt], device=spec["device"])
    with torch.no_grad():
        model.forward(x[:, :16], last_only=True)  # warm-up: lazy imports and first allocations

    def run():
        if what == "plain forward":
            with torch.no_grad():
                model.forward(x, last_only=True)
        elif what == "forward + backward":
            h = model.adapter.embed().register_forward_hook(lambda m, a, o: o.requires_grad_(True))
            try:
                last = model.forward(x, last_only=True, grad=True)[0, -1]
                (last[pair.answer] - last[pair.wrong]).backward()
            finally:
                h.remove()
        elif what.startswith("atp-base-pass"):  # the probed forward + backward alone (no donor pass)
            from interp.patching.attribution import _base_run

            _base_run(model, model.pad([pair.corrupt]), {"head_out"}, PatchingConfig(sites=("head_out",)), [pair],
                      want_calls=False)
        else:
            method, sites = what.split(" ")
            run_attribution(model, [pair], PatchingConfig(sites=tuple(sites.split(",")), normalize=False, n_boot=10),
                            method=method, verify_top=0, verify_sample=0)

    with PeakMemory(spec["device"]) as mem:
        t0 = time.perf_counter()
        run()
        wall = time.perf_counter() - t0
    print("RESULT " + json.dumps({"what": what, "tokens": n, "wall_s": wall, "peak_mb": mem.peak / 2 ** 20,
                                  "mem_method": mem.method}))


def part_long(model, args) -> list[dict]:
    """Peak memory on one long pair, each measurement in a fresh process: plain forward, forward +
    backward, AtP (head_out, q, k), AtP-QK (q, k)."""
    from overhead import run_child

    n = min(args.long, model.spec.max_positions or args.long)
    out = []
    for what in LONG_JOBS:
        r = run_child({"long": True, "what": what, "n": n, "model": args.model, "device": args.device,
                       "threads": args.threads}, args.child_timeout, script=__file__)
        out.append(r)
        if "error" in r:
            print(f"long  {what:24s} error: {r['error']}")
        else:
            print(f"long  {what:24s} {n} tokens  {r['wall_s']:6.2f} s  peak {r['peak_mb']:8.1f} MB", flush=True)
    spec = model.spec
    one_layer = spec.n_heads * n * n * 4 / 2 ** 20
    print(f"long  (one layer's [heads, T, T] fp32 patterns would be {one_layer:.0f} MB; all layers "
          f"{one_layer * spec.n_layers:.0f} MB)")
    out.append({"what": "one layer's attention patterns, fp32", "tokens": n, "mb": one_layer})
    return out


def _has(obj, path: str) -> bool:
    for p in (x for x in path.split(".") if x):
        if not hasattr(obj, p):
            return False
        obj = getattr(obj, p)
    return True


def _tokenizer_dir(model) -> str:
    src = Path(model.source)
    if (src / "tokenizer.json").is_file() or (src / "tokenizer_config.json").is_file():
        return str(src)
    raise SystemExit(f"{model.name}: the TransformerLens bridge needs a tokenizer directory; use a bundled organism")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(ap, "patching", child_timeout=3600)
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--pairs", type=int, default=8, help="pairs of the resid grid (the heads grid uses 2x)")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--skip", default="", help="comma-separated methods to leave out: " + ",".join(METHODS[1:]))
    ap.add_argument("--quick", action="store_true", help="16-token prompts, 2 pairs")
    ap.add_argument("--long", type=int, default=2048, help="tokens of the memory part (0: skip it)")
    args, torch = parse_and_setup(ap, argv, long_child)
    if args is None:
        return
    import numpy as np

    import interp
    from interp.models.loading import load_model

    if args.quick:
        args.seq, args.pairs = 16, 2
    skip = {s for s in args.skip.split(",") if s}
    t_all = time.perf_counter()
    model = load_model(args.model, device=args.device)
    spec = model.spec
    rows = []
    for grid, n_pairs in (("resid", args.pairs), ("heads", 2 * args.pairs)):
        pairs = make_pairs(spec.d_vocab, n_pairs, args.seq)
        results = {}
        for method in METHODS:
            if method in skip:
                continue
            if method == "interp":
                fn = lambda: run_interp(model, pairs, grid)  # noqa: E731
            elif method in ("atp", "atp-qk"):
                fn = lambda method=method: run_atp(model, pairs, grid, method)  # noqa: E731
            elif method == "naive":
                hf = load_model(args.model, device=args.device).hf  # its own plain copy (wrapper inactive)
                adapter = interp.models.adapters.adapter_for(hf)
                fn = lambda hf=hf, adapter=adapter: run_naive(hf, adapter, spec, pairs, grid, args.device)  # noqa: E731
            elif method == "tl":
                from transformer_lens.model_bridge import TransformerBridge
                from transformers import AutoModelForCausalLM, AutoTokenizer

                hf = AutoModelForCausalLM.from_pretrained(model.source).to(args.device).eval()
                hf.config.architectures = [type(hf).__name__]
                br = TransformerBridge.boot_transformers(model.name, hf_model=hf,
                                                         tokenizer=AutoTokenizer.from_pretrained(_tokenizer_dir(model)),
                                                         device=args.device)
                br.eval()
                fn = lambda br=br: run_tl(br, pairs, grid, args.device)  # noqa: E731
            else:
                from nnsight import NNsight
                from transformers import AutoModelForCausalLM

                hf = AutoModelForCausalLM.from_pretrained(model.source).to(args.device).eval()
                a = interp.models.adapters.adapter_for(hf)
                body = next(bp for bp in a.body_paths if _has(hf, bp))
                blocks_path = ".".join(x for x in (body, a.layers_attr) if x)
                o_attr = f"{a.attn_attr}.{a.o_proj_attr}"
                lm = NNsight(hf)
                fn = lambda lm=lm, bp=blocks_path, oa=o_attr: run_nnsight(lm, bp, oa, spec, pairs, grid,  # noqa: E731
                                                                          args.device)
            if method == "interp":  # one warm-up forward (first-call allocations, lazy imports)
                model.forward(torch.tensor([pairs[0].clean], device=args.device), last_only=True)
            with PeakMemory(args.device) as mem:
                t0 = time.perf_counter()
                grid_vals, info = fn()
                sync(args.device)
                wall = time.perf_counter() - t0
            results[method] = grid_vals
            if method.startswith("atp"):  # an estimate: how close, not equal
                a, e = grid_vals.ravel(), results["interp"].ravel()
                ok = np.isfinite(a) & np.isfinite(e)
                corr = float(np.corrcoef(a[ok], e[ok])[0, 1]) if ok.sum() > 2 and a[ok].std() > 0 else None
                # cheap enough to repeat: both numbers are the best of 3 (the first run above included)
                for _ in range(2):
                    t0 = time.perf_counter()
                    fn()
                    wall = min(wall, time.perf_counter() - t0)
                x = torch.tensor([p.corrupt for p in pairs], device=args.device)
                fwd = float("inf")
                for _ in range(3):
                    t0 = time.perf_counter()
                    model.forward(x)
                    fwd = min(fwd, time.perf_counter() - t0)
                rows.append({"grid": grid, "method": method, "pairs": n_pairs, "seq": args.seq, "wall_s": wall,
                             "peak_mb": mem.peak / 2 ** 20, "mem_method": mem.method, "pearson_vs_exact": corr,
                             "one_forward_s": fwd, "x_one_forward": wall / fwd, **info})
                print(f"{grid:5s} {method:8s} {wall:8.2f} s  peak {mem.peak / 2 ** 20:8.1f} MB  "
                      f"{wall / fwd:5.1f}x one forward of the batch  Pearson vs exact "
                      + ("-" if corr is None else f"{corr:.3f}"), flush=True)
                continue
            diff = None if method == "interp" else float(np.abs(grid_vals - results["interp"]).max())
            rows.append({"grid": grid, "method": method, "pairs": n_pairs, "seq": args.seq, "wall_s": wall,
                         "peak_mb": mem.peak / 2 ** 20, "mem_method": mem.method, "max_diff_vs_interp": diff, **info})
            print(f"{grid:5s} {method:8s} {wall:8.2f} s  peak {mem.peak / 2 ** 20:8.1f} MB  "
                  f"{info['forwards']:5d} passes {info['tokens']:8d} tokens"
                  + ("" if diff is None else f"  max |diff| vs interp {diff:.2e}" + ("" if diff <= 1e-4 else "  UNEQUAL")),
                  flush=True)
    long_rows = part_long(model, args) if args.long else []
    print("\nratios (method time / interp time, same grid):")
    for grid in ("resid", "heads"):
        base = next(r["wall_s"] for r in rows if r["grid"] == grid and r["method"] == "interp")
        for r in rows:
            if r["grid"] == grid and r["method"] != "interp":  # atp rows: estimates, timed against exact too
                r["ratio_vs_interp"] = r["wall_s"] / base
                print(f"  {grid:5s} {r['method']:8s} {r['ratio_vs_interp']:6.2f}x")
    res = {"model": args.model, "spec": {"n_layers": spec.n_layers, "n_heads": spec.n_heads, "d_model": spec.d_model},
           "rows": rows, "long_context": long_rows, "env": bench_env(args, torch),
           "total_wall_s": time.perf_counter() - t_all}
    write_result(res, args, "patching")


if __name__ == "__main__":
    main()
