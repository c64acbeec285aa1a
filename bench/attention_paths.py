#!/usr/bin/env python
"""What an exact patching grid's attention calls cost through torch's CPU attention kernel, and what they would cost
through a grouped matmul path with a float32 softmax, per model dtype: the data behind the "faster small-shape
attention path" option of docs/precision.md#speed.

One process per (task, dtype): the grid of bench/precision_speed.py's patch rows runs once with every call to
torch's `scaled_dot_product_attention` recorded (shapes, mask, causal flag), then each distinct call shape is timed
both ways on random inputs of that shape (a bottom-right causal mask of the call's size), best of 3 timings, and the
two totals are weighted by how often the grid made each call:

- `sdpa`: what transformers' sdpa attention does on CPU: the KV heads repeated to the query heads when the call
  was made with them repeated, then torch's kernel (its flash kernel on CPU), the output made contiguous;
- `grouped`: the query heads of one KV head stacked into one matmul against that head's keys (no repeat), the
  scores and softmax in float32, the weighted sum of the values in float32, rounded once to the model dtype.

Each path's max abs difference from a float32 computation of the same call is reported too. The grid's own CPU time
(unrecorded run) puts the totals in proportion: `est_grid_s_grouped` is the grid with its attention calls swapped
for the grouped path's time, an estimate, not a measured run.

    python bench/attention_paths.py --model smollm2-135m     # bench/results/attention-paths-smollm2-135m-cpu.json
"""

from __future__ import annotations

import collections
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import setup_torch  # noqa: E402


def _record(torch, fn):
    """Run fn() with torch's sdpa wrapped: {(q shape, k shape, masked, is_causal, enable_gqa): calls}."""
    import torch.nn.functional as F

    calls: collections.Counter = collections.Counter()
    orig = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        calls[(tuple(q.shape), tuple(k.shape), attn_mask is not None, bool(is_causal), bool(enable_gqa))] += 1
        return orig(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                    enable_gqa=enable_gqa)

    F.scaled_dot_product_attention = spy
    try:
        fn()
    finally:
        F.scaled_dot_product_attention = orig
    return calls


def _paths(torch, key, n_kv: int, dtype):
    """(sdpa path, grouped path, float32 reference, (q, k, v)) for one recorded call shape: random inputs, k and v
    with the model's `n_kv` heads."""
    import torch.nn.functional as F

    (b, hq, s, d), (_, hk, kl, _), masked, causal, gqa = key
    g = hq // n_kv
    gen = torch.Generator().manual_seed(0)
    q = (torch.randn(b, hq, s, d, generator=gen) * 2).to(dtype)
    k = (torch.randn(b, n_kv, kl, d, generator=gen) * 2).to(dtype)
    v = torch.randn(b, n_kv, kl, d, generator=gen).to(dtype)
    allowed = (torch.arange(kl)[None, :] <= (kl - s + torch.arange(s))[:, None])  # bottom-right causal
    mask = allowed[None, None].expand(b, 1, s, kl).contiguous() if masked else None
    scale = d ** -0.5
    repeat = hk != n_kv  # the call was made with the KV heads repeated to the query heads

    def sdpa():
        kk, vv = k, v
        if repeat:
            kk = k[:, :, None].expand(b, n_kv, g, kl, d).reshape(b, hq, kl, d)
            vv = v[:, :, None].expand(b, n_kv, g, kl, d).reshape(b, hq, kl, d)
        out = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, is_causal=causal and not masked,
                                             scale=scale, enable_gqa=gqa and not repeat)
        return out.transpose(1, 2).contiguous()

    def grouped():
        sc = torch.matmul(q.reshape(b, n_kv, g * s, d).float(), k.float().transpose(-1, -2)).view(b, hq, s, kl)
        sc = sc.mul_(scale).masked_fill_(~allowed, float("-inf"))
        p = torch.softmax(sc, dim=-1).view(b, n_kv, g * s, kl)
        return torch.matmul(p, v.float()).view(b, hq, s, d).to(dtype).transpose(1, 2).contiguous()

    def reference():
        sc = torch.einsum("bkgsd,bktd->bkgst", q.float().view(b, n_kv, g, s, d), k.float()) * scale
        p = torch.softmax(sc.masked_fill(~allowed, float("-inf")), dim=-1)
        return torch.einsum("bkgst,bktd->bkgsd", p, v.float()).reshape(b, hq, s, d).transpose(1, 2)

    return sdpa, grouped, reference, (q, k, v)


def _best_us(fn, reps: int) -> float:
    fn()
    best = float("inf")
    for _ in range(3):
        t = time.process_time()
        for _ in range(reps):
            fn()
        best = min(best, (time.process_time() - t) / reps)
    return best * 1e6


def child_main(spec: dict) -> None:
    torch = setup_torch(spec["threads"])
    import interp
    from _common import torch_dtype
    from precision_speed import warm_grid

    model, pairs, cfg = warm_grid(spec["model"], spec["dtype"], spec["task"])
    c0 = time.process_time()
    interp.run_patching(model, pairs, cfg)
    grid_s = time.process_time() - c0
    calls = _record(torch, lambda: interp.run_patching(model, pairs, cfg))
    dtype = torch_dtype(spec["dtype"])
    shapes, tot = [], {"sdpa": 0.0, "grouped": 0.0}
    err = {"sdpa": 0.0, "grouped": 0.0}
    for key, n in calls.most_common():
        sdpa, grouped, ref, _ = _paths(torch, key, model.spec.n_kv_heads, dtype)
        r = ref()
        us = {}
        for name, fn in (("sdpa", sdpa), ("grouped", grouped)):
            us[name] = _best_us(fn, reps=max(3, min(200, int(2e5 / (key[0][0] * key[0][2] * key[1][2]) + 1))))
            tot[name] += n * us[name] / 1e6
            err[name] = max(err[name], (fn().float() - r).abs().max().item())
        shapes.append({"q": list(key[0]), "k": list(key[1]), "masked": key[2], "is_causal": key[3], "calls": n,
                       "sdpa_us": us["sdpa"], "grouped_us": us["grouped"]})
    print("RESULT " + json.dumps({
        "grid_cpu_s": grid_s, "n_calls": sum(calls.values()), "n_shapes": len(calls),
        "attention_s": tot, "attention_share_sdpa": tot["sdpa"] / grid_s,
        "est_grid_s_grouped": grid_s - tot["sdpa"] + tot["grouped"],
        "max_abs_diff_vs_float32": err, "shapes": shapes}))


def _show_row(task: str, dtype: str, r: dict) -> None:
    a, err = r["attention_s"], r["max_abs_diff_vs_float32"]
    print(f"{task:5s} {dtype:9s} grid {r['grid_cpu_s']:.1f} CPU s; its {r['n_calls']} attention calls "
          f"({r['n_shapes']} shapes): sdpa {a['sdpa']:.2f} s ({r['attention_share_sdpa']:.0%}), grouped "
          f"{a['grouped']:.2f} s ({a['sdpa'] / a['grouped']:.2f}x); grid with grouped (estimate) "
          f"{r['est_grid_s_grouped']:.1f} s; max abs diff vs float32: sdpa {err['sdpa']:.2g}, grouped "
          f"{err['grouped']:.2g}", flush=True)


def _show_task(task: str, f: dict, b: dict) -> None:
    print(f"{task}: float32 / bfloat16 grid ratio {f['grid_cpu_s'] / b['grid_cpu_s']:.2f}x measured; with the "
          f"grouped path in both (estimate) {f['est_grid_s_grouped'] / b['est_grid_s_grouped']:.2f}x, in "
          f"bfloat16 only {f['grid_cpu_s'] / b['est_grid_s_grouped']:.2f}x")


def main(argv=None) -> int:
    from precision_speed import grid_main

    return grid_main(argv, __doc__, "attention-paths", __file__, child_main, _show_row, _show_task)

if __name__ == "__main__":
    sys.exit(main())
