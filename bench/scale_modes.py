"""bench/scale.py's model and measured modes: the Qwen2.5-7B-geometry rehearsal model (random weights, 2
layers), one runner per mode, the planner's estimate per mode, and the code a child process runs
(`child_main`: one (mode, length) measurement; `interleave`: round-robin timing; `sanity`). See
bench/scale.py's docstring for what each mode is and how time and memory are measured."""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import proc_kib as _proc_kib, sync  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
GiB, MiB = 1024 ** 3, 1024 ** 2

# Qwen2.5-7B's attention geometry; 2 layers, smaller MLP and vocabulary (REDUCTIONS)
CONFIG = dict(hidden_size=3584, num_attention_heads=28, num_key_value_heads=4, head_dim=128, rope_theta=1e6,
              max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False, use_sliding_window=False,
              num_hidden_layers=2, intermediate_size=4864, vocab_size=32000)
REDUCTIONS = {
    "num_hidden_layers": {"qwen2.5-7b": 28, "here": 2},
    "intermediate_size": {"qwen2.5-7b": 18944, "here": 4864},
    "vocab_size": {"qwen2.5-7b": 152064, "here": 32000},
    "note": ("Random weights. Attention geometry is Qwen2.5-7B's (hidden 3584, 28 query / 4 KV heads, head_dim 128, "
             "rope_theta 1e6, max_position_embeddings 32768), but the model is truncated to 2 of 28 layers, with "
             "intermediate_size 4864 instead of 18944 and vocab_size 32000 instead of 152064. Per-layer attention "
             "costs are the real model's; MLP costs per layer are ~26% of the real ones, so interp's attention-side "
             "overheads are a LARGER fraction of the time here than they would be in Qwen2.5-7B. Whole-model memory "
             "and time are NOT Qwen2.5-7B's (28 layers, 4x MLP, 4.75x vocab)."),
}
MODES = ("plain", "ablate", "rows", "greedy", "detect", "eager")
# planner analysis per mode: interp.models.memory.estimate(config, T, 1, dtype, analysis, **kw)
PLAN = {  # batch 1, no padding: transformers passes no mask (padded=False)
    "plain": ("ablate", dict(logits="last", padded=False)),
    "ablate": ("ablate", dict(logits="last", padded=False)),
    "rows": ("detect", dict(logits="none", rows=True, n_query=1, padded=False)),
    "greedy": ("ablate", dict(logits="last", new_tokens=3, padded=False)),
    "detect": ("detect", dict(new_tokens=3, padded=False)),
    "eager": ("ablate", dict(logits="last", padded=False)),  # + the eager / output_attentions terms (eager_extra_bytes)
}
ABLATED_PER_LAYER = 7  # of 28: 25%
NEEDLE_LEN = 16
TARGETS = {"ablate/plain time": 1.05, "rows/plain time": 1.2, "rows/plain memory": 1.5, "detect/greedy time": 1.3,
           "planner |measured/estimated - 1|": 0.30}


# ---------------------------------------------------------------------------------------------
# helpers (parent and child)
# ---------------------------------------------------------------------------------------------
def child_env(threads: int) -> dict:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    if threads > 0:
        env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def qwen_config(max_len: int = 0):
    import transformers as tf

    cfg = dict(CONFIG)
    cfg["max_position_embeddings"] = max(cfg["max_position_embeddings"], max_len)
    return tf.Qwen2Config(**cfg)


def dtype_of(name: str):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def elem_bytes(name: str) -> int:
    return {"float32": 4, "bfloat16": 2, "float16": 2}[name]




def ablated_heads(seed: int = 7) -> list[tuple[int, int]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    H = CONFIG["num_attention_heads"]
    return [(l, int(h)) for l in range(CONFIG["num_hidden_layers"])
            for h in sorted(torch.randperm(H, generator=g)[:ABLATED_PER_LAYER].tolist())]


def eager_extra_bytes(T: int, b: int) -> int:
    """What eager + output_attentions adds to the sdpa plan (interp.models.memory has no output_attentions term): the
    returned [heads, T, T] patterns of the other layers, (L - 1) x H x T^2 x b, plus the live layer's transients:
    two [H, T, T] tensors alive at once (scores and scaled scores, scaled and masked scores, masked scores and
    their float32 softmax, the softmax and its cast back), H x T^2 x (b + max(b, 4)); plus the additive float mask
    [1, 1, T, T] x b (the planner counts a boolean one)."""
    L, H = CONFIG["num_hidden_layers"], CONFIG["num_attention_heads"]
    t2 = T * T
    return (L - 1) * H * t2 * b + H * t2 * (b + max(b, 4)) + t2 * b


def plan_for(mode: str, T: int, dtype: str, new_tokens: int) -> dict:
    """The planner's estimate for this mode: the MemoryPlan dict, its peak - weights ('estimated'), the call."""
    from interp.models import memory

    analysis, kw = PLAN[mode]
    kw = dict(kw)
    if "new_tokens" in kw:
        kw["new_tokens"] = new_tokens
    plan = memory.estimate(qwen_config(T), [T], batch_size=1, dtype=dtype, analysis=analysis, **kw)[0]
    est = plan.peak - plan.weights
    call = f"memory.estimate(config, lengths=[{T}], batch_size=1, dtype={dtype!r}, analysis={analysis!r}" + "".join(
        f", {k}={v!r}" for k, v in kw.items()) + ")"
    out = {"estimated_bytes": est, "weights_bytes": plan.weights, "call": call, "plan": plan.to_dict()}
    if mode == "eager":
        extra = eager_extra_bytes(T, elem_bytes(dtype))
        out["estimated_bytes"] = est + extra
        out["eager_extra_bytes"] = extra
        out["call"] += " + eager_extra_bytes (bench/scale.py: interp.models.memory has no output_attentions term)"
    return out


# ---------------------------------------------------------------------------------------------
# child: one (mode, length) measurement in a fresh process
# ---------------------------------------------------------------------------------------------
def build(spec: dict, attn: str):
    import torch
    import transformers as tf

    torch.manual_seed(0)  # same seed, same device: the same weights in every process
    with torch.device(spec["device"]):
        hf = tf.AutoModelForCausalLM.from_config(qwen_config(spec["max_len"]), attn_implementation=attn,
                                                 dtype=dtype_of(spec["dtype"]))
    return hf.eval()


def make_runner(spec: dict, hf=None):
    """(function of the input ids, the model) for spec['mode'] (on `hf` when given, else a fresh build)."""
    import torch
    from transformers import DynamicCache

    import interp
    from interp.analyses.retrieval import RetrievalRecorder
    from interp.tasks.niah import NiahSample

    mode, n_new = spec["mode"], spec["new_tokens"]
    if hf is None:
        hf = build(spec, "eager" if mode == "eager" else "sdpa")
    if mode in ("plain", "greedy", "eager"):
        import inspect

        cache_kw = "cache" if "cache" in inspect.signature(hf.forward).parameters else "past_key_values"
        if mode == "plain":
            def run(ids):
                with torch.no_grad():
                    return hf(input_ids=ids, logits_to_keep=1).logits
        elif mode == "eager":
            def run(ids):
                with torch.no_grad():
                    out = hf(input_ids=ids, output_attentions=True, logits_to_keep=1)
                return torch.stack([a[:, :, -1:] for a in out.attentions], dim=1)  # [b, L, H, 1, T] like interp's
        else:
            def run(ids):
                with torch.no_grad():
                    cache = DynamicCache()
                    out = hf(input_ids=ids, use_cache=True, logits_to_keep=1, **{cache_kw: cache})
                    toks = []
                    for step in range(n_new):
                        nxt = out.logits[:, -1].argmax(-1)
                        toks.append(nxt)
                        if step == n_new - 1:
                            break
                        out = hf(input_ids=nxt[:, None], use_cache=True, **{cache_kw: cache})
                    return torch.stack(toks, dim=1)
        return run, hf

    model = hf if isinstance(hf, interp.Model) else interp.Model(hf, None, name="random-qwen2.5-7b-geometry-2L")
    if mode == "ablate":
        abl = interp.AblateHeads(ablated_heads(), mode="zero")

        def run(ids):
            with model.intervene(abl):
                return model.forward(ids, last_only=True)
    elif mode == "rows":
        def run(ids):
            return interp.attention_rows(model, ids, [-1])
    elif mode == "interp":  # no intervention (sanity check only)
        def run(ids):
            return model.forward(ids, last_only=True)
    elif mode == "detect":
        def run(ids):
            cpu_ids = ids.cpu()
            T = cpu_ids.shape[1]
            lo = max(0, T // 2 - NEEDLE_LEN // 2)
            hi = min(T, lo + NEEDLE_LEN)
            sample = NiahSample(id="fake", seed=0, context_length=T, depth=0.5, input_ids=cpu_ids[0].tolist(),
                                needle_span=(lo, hi), needle="(random tokens)", question="", answer="",
                                answer_ids=cpu_ids[0, lo:lo + n_new].tolist())
            rec = RetrievalRecorder()
            mask = torch.ones_like(cpu_ids)
            rec.begin_batch([sample], cpu_ids, mask)
            with model.intervene(rec):
                gen = model.greedy_decode(ids, n_new, attention_mask=mask)
            gen = gen.cpu()
            rec.end_batch(gen)
            run.scores = rec.sample_scores[-1]
            return gen
    else:
        raise SystemExit(f"unknown mode {mode}")
    return run, model


def child_main(spec: dict) -> None:
    import torch

    if spec["threads"] > 0:
        torch.set_num_threads(spec["threads"])
    sys.path.insert(0, str(ROOT))
    if spec["mode"] == "check":
        print("RESULT " + json.dumps(sanity(spec)))
        return
    if spec["mode"] == "interleave":
        print("RESULT " + json.dumps(interleave(spec)))
        return
    device, T = spec["device"], spec["length"]
    run, _ = make_runner(spec)
    g = torch.Generator().manual_seed(1234)
    V = CONFIG["vocab_size"]
    ids = torch.randint(0, V, (1, T), generator=g).to(device)
    warm = torch.randint(0, V, (1, spec["warmup_tokens"]), generator=g).to(device)
    t0 = time.perf_counter()
    run(warm)
    sync(device)
    warm_s = time.perf_counter() - t0
    del warm
    gc.collect()
    # the first timed call: peak memory
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        method = "torch.cuda.max_memory_allocated - memory_allocated before"
    else:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
        base = _proc_kib("VmRSS") * 1024
        method = "VmHWM - VmRSS before (clear_refs reset; MALLOC_MMAP_THRESHOLD_=65536)"
    times = []
    t0 = time.perf_counter()
    out = run(ids)
    sync(device)
    times.append(time.perf_counter() - t0)
    peak = (torch.cuda.max_memory_allocated() - base) if device.startswith("cuda") else \
        max(0, _proc_kib("VmHWM") * 1024 - base)
    shape = list(out.shape)
    tokens = out[0].tolist() if spec["mode"] in ("greedy", "detect") else None
    del out
    for _ in range(spec["repeats"] - 1):
        gc.collect()
        sync(device)
        t0 = time.perf_counter()
        out = run(ids)
        sync(device)
        times.append(time.perf_counter() - t0)
        del out
    res = {"times_s": times, "warmup_s": warm_s, "peak_bytes": peak, "base_bytes": base, "mem_method": method,
           "out_shape": shape, "tokens": tokens, "torch_threads": torch.get_num_threads()}
    if spec["mode"] == "detect":
        import numpy as np

        sc = np.asarray(run.scores)
        res["retrieval_scores_nonzero"] = int((sc > 0).sum())
    print("RESULT " + json.dumps(res))


INTERLEAVED = ("plain", "ablate", "greedy", "detect")


def interleave(spec: dict) -> dict:
    """Time ratios in one process: plain and greedy on one plain HF copy, ablate and detect on an interp.Model of
    a second copy (same seed, same weights), run round-robin for `rounds` rounds (the order rotating each round)
    after a warm-up of each, so other load on the machine hits every mode alike. Ratios of medians and of mins."""
    import torch

    device, T = spec["device"], spec["length"]
    import interp

    hf_plain = build(spec, "sdpa")
    model = interp.Model(build(spec, "sdpa"), None, name="random-qwen2.5-7b-geometry-2L")  # one wrapper, both modes
    runs = {m: make_runner({**spec, "mode": m}, hf=hf_plain if m in ("plain", "greedy") else model)[0]
            for m in INTERLEAVED}
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, CONFIG["vocab_size"], (1, T), generator=g).to(device)
    warm = torch.randint(0, CONFIG["vocab_size"], (1, spec["warmup_tokens"]), generator=g).to(device)
    for m in INTERLEAVED:
        runs[m](warm)
    times = {m: [] for m in INTERLEAVED}
    for r in range(spec["rounds"]):
        order = INTERLEAVED[r % len(INTERLEAVED):] + INTERLEAVED[:r % len(INTERLEAVED)]
        for m in order:
            gc.collect()
            sync(device)
            t0 = time.perf_counter()
            runs[m](ids)
            sync(device)
            times[m].append(time.perf_counter() - t0)
    med = {m: statistics.median(v) for m, v in times.items()}
    mins = {m: min(v) for m, v in times.items()}
    return {"length": T, "rounds": spec["rounds"], "times_s": times,
            "ablate/plain time": {"ratio": med["ablate"] / med["plain"], "ratio_min": mins["ablate"] / mins["plain"],
                                  "target": TARGETS["ablate/plain time"]},
            "detect/greedy time": {"ratio": med["detect"] / med["greedy"],
                                   "ratio_min": mins["detect"] / mins["greedy"], "target": TARGETS["detect/greedy time"]}}


def sanity(spec: dict) -> dict:
    """At a short length, in one process: interp without intervention == plain HF (bit-identical logits); the
    ablation moves the logits; interp's rows == eager's output_attentions rows; detect's tokens == greedy's."""
    import torch

    T = spec["length"]
    ids = torch.randint(0, CONFIG["vocab_size"], (1, T), generator=torch.Generator().manual_seed(99)).to(spec["device"])
    out = {"length": T}
    res = {}
    hf = build(spec, "sdpa")
    for mode in ("plain", "greedy"):  # on the plain model, before interp.Model wraps it
        res[mode] = make_runner({**spec, "mode": mode}, hf)[0](ids).float().cpu()
    model = None
    for mode in ("interp", "ablate", "rows", "detect"):
        run, model = make_runner({**spec, "mode": mode}, model if model is not None else hf)
        res[mode] = run(ids).float().cpu()
    del hf, model, run
    gc.collect()
    res["eager"] = make_runner({**spec, "mode": "eager"})[0](ids).float().cpu()
    out["interp_vs_plain_max_abs_diff"] = (res["interp"] - res["plain"]).abs().max().item()
    out["ablation_max_abs_logit_change"] = (res["ablate"] - res["plain"]).abs().max().item()
    out["rows_vs_eager_max_abs_diff"] = (res["rows"] - res["eager"]).abs().max().item()
    out["rows_shape"] = list(res["rows"].shape)
    out["greedy_tokens"] = res["greedy"][0].long().tolist()
    out["detect_tokens"] = res["detect"][0].long().tolist()
    out["detect_equals_greedy"] = out["greedy_tokens"] == out["detect_tokens"]
    return out
