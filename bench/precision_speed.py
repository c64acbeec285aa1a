#!/usr/bin/env python
"""float32 vs bfloat16 on the CPU: time and peak memory of interp's main kinds of work, and how close its forward
comes to the machine's matmul peak (docs/precision.md, docs/benchmarks.md).

Each measurement runs in a fresh process (one torch thread unless `--threads`), the model loaded before the clock
starts; the same work in float32 and in bfloat16 side by side, records named by dtype ("float32" / "bfloat16"):

- forward: one batch of book text (B x T tokens), logits of every position (a bf16 model's output head runs in
  float32: interp.hooks.float_logits); body: the same without the output head (final hidden states);
- rows: interp's attention rows (4 last queries, every head) of one T-token text;
- detect: retrieval-head detection on NIAH prompts of T tokens (prefill + greedy decoding + rows per step);
- ablate: a forward with 25% of the heads zero-ablated;
- patch: a full resid_pre exact-patching grid (every layer x every position) on 8 IOI pairs (14-16 tokens) and on
  one NIAH pair of 64 tokens (the needle's value swapped: `interp patch`'s default task);
- atp: attribution patching (AtP-QK) of head_out and resid_pre on the same pairs, no exact check;
- sdpa: torch's CPU attention kernel alone (scaled_dot_product_attention, causal, the model's query and key-value
  heads and head size, random q/k/v of T tokens): the part of a long forward that bfloat16 may not speed up;
- matmul: this machine's measured matmul rate in each dtype (the shapes of the model's MLP at 16 and at T tokens, and a 2048-cube),
  against which the forward's achieved FLOP rate is set (the physical-limit row).

    python bench/precision_speed.py --model smollm2-135m            # bench/results/precision-speed-smollm2-135m-cpu.json
    python bench/precision_speed.py --model smollm2-135m --only forward --threads 2 --out ...
    python bench/precision_speed.py --model smollm2-135m --only patch --rounds 3 --out ...   # alternating dtypes
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PeakMemory, add_common_args, bench_env, parse_and_setup, run_child, setup_torch  # noqa: E402

DTYPES = ("float32", "bfloat16")
WORKS = ("matmul", "sdpa", "forward", "body", "rows", "detect", "ablate", "patch", "atp")


def _book_ids(tok, n: int, seed: int = 0) -> list[int]:
    from interp.tasks.texts import text_path

    p = text_path("sherlock-holmes")
    if p is None:
        raise SystemExit("the book is not fetched: interp texts fetch sherlock-holmes")
    ids = tok(Path(p).read_text(encoding="utf-8")[100_000:100_000 + 12 * n], add_special_tokens=False)["input_ids"]
    if len(ids) < n:
        raise SystemExit(f"book slice has {len(ids)} tokens, need {n}")
    return ids[:n]


def forward_flops(model, batch: int, seq: int, head: bool = True) -> float:
    """Multiply-adds x 2 of one forward: every linear layer of the decoder blocks and the output head per token,
    plus causal attention's q.k and weights.v (about T/2 keys per query on average)."""
    import torch

    spec = model.spec
    head_mod = model.hf.get_output_embeddings()
    blocks = sum(m.weight.numel() for m in model.hf.modules() if isinstance(m, torch.nn.Linear) and m is not head_mod)
    head = head_mod.weight.numel() if head else 0
    attn = 2 * 2 * spec.n_layers * spec.n_heads * spec.head_dim * (seq + 1) / 2
    return 2.0 * batch * seq * (blocks + head) + batch * seq * attn


def _timed(fn, repeats: int, device: str = "cpu") -> dict:
    fn()  # warm-up: kernel selection, lazy init
    wall, cpu = [], []
    with PeakMemory(device) as pm:
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return {"wall_s": wall, "cpu_s": cpu, "median_cpu_s": statistics.median(cpu),
            "median_wall_s": statistics.median(wall), "peak_bytes": pm.peak, "mem_method": pm.method}


def child_main(spec: dict) -> None:
    torch = setup_torch(spec["threads"])
    import interp

    work, dtype, T, reps = spec["work"], spec["dtype"], spec["seq"], spec["repeats"]
    dt = getattr(torch, dtype)
    out = {}
    if work == "matmul":
        from interp.models.loading import load_config

        c = load_config(spec["model"])
        shapes = [(16, c.hidden_size, c.intermediate_size), (T, c.hidden_size, c.intermediate_size), (2048, 2048, 2048)]
        rows = []
        for m, k, n in shapes:  # as a linear layer computes it (weight [n, k]), calls enough for ~0.5 s per repeat
            a, w = torch.randn(m, k, dtype=dt), torch.randn(n, k, dtype=dt)
            calls = max(1, int(0.5 * 100e9 / (2 * m * k * n)))

            def many():
                for _ in range(calls):
                    torch.nn.functional.linear(a, w)
            r = _timed(many, reps)
            rows.append({"shape": [m, k, n], "calls": calls,
                         "gflops": 2 * m * k * n * calls / r["median_wall_s"] / 1e9, **r})
        print("RESULT " + json.dumps({"matmul": rows}))
        return
    if work == "sdpa":
        import torch.nn.functional as F

        s = interp.spec_from_config(spec["model"])
        q = torch.randn(1, s.n_heads, T, s.head_dim, dtype=dt)
        k, v = (torch.randn(1, s.n_kv_heads, T, s.head_dim, dtype=dt) for _ in range(2))
        gqa = s.n_heads != s.n_kv_heads
        out = _timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa), reps)
        fl = 2 * 2 * s.n_heads * s.head_dim * T * (T + 1) / 2
        out.update(flops=fl, achieved_gflops=fl / out["median_wall_s"] / 1e9, layers=s.n_layers)
        print("RESULT " + json.dumps(out))
        return
    model = interp.load_model(spec["model"], dtype=dtype)
    tok = model.tokenizer
    with torch.no_grad():
        if work in ("forward", "body", "ablate"):
            ids = torch.tensor(_book_ids(tok, spec["batch"] * T)).reshape(spec["batch"], T)
            if work in ("forward", "body"):
                r = _timed(lambda: model.forward(ids, logits=work == "forward"), reps)
            else:
                s = model.spec
                heads = [f"L{l}H{h}" for l in range(s.n_layers) for h in range(s.n_heads) if (l * s.n_heads + h) % 4 == 0]
                with model.intervene(interp.AblateHeads(heads, mode="zero")):
                    r = _timed(lambda: model.forward(ids), reps)
            fl = forward_flops(model, spec["batch"], T, head=work != "body")
            out = {**r, "flops": fl, "achieved_gflops": fl / r["median_wall_s"] / 1e9}
        elif work == "rows":
            ids = torch.tensor(_book_ids(tok, T))[None]
            pos = list(range(T - 4, T))
            out = _timed(lambda: interp.attention_rows(model, ids, pos), reps)
    if work == "detect":
        from interp.tasks.niah import NiahConfig

        cfg = interp.RetrievalConfig(niah=NiahConfig(context_lengths=(T,), depths=(0.25, 0.75), n_seeds=1,
                                                     haystack_file="sherlock-holmes", needle_source="standard"))
        samples = interp.build_niah(tok, cfg.niah)
        res = {}

        def run():
            res["r"] = interp.detect_retrieval_heads(model, cfg, samples=samples)
        out = _timed(run, reps)
        out["n_prompts"] = len(samples)
        out["recall"] = res["r"].baseline_recall
    elif work in ("patch", "atp"):
        pairs = patch_pairs(model, spec.get("task", "ioi"), T, spec.get("pairs", 8))
        if work == "patch":
            cfg = interp.PatchingConfig(sites=("resid_pre",), n_boot=10)
            out = _timed(lambda: interp.run_patching(model, pairs, cfg), reps)
        else:
            cfg = interp.PatchingConfig(sites=("head_out", "resid_pre"), n_boot=10)
            out = _timed(lambda: interp.run_attribution(model, pairs, cfg, method="atp-qk", verify_top=0,
                                                        verify_sample=0), reps)
        out["n_pairs"] = len(pairs)
        out["pair_tokens"] = [len(p.clean) for p in pairs]
    print("RESULT " + json.dumps(out))


def patch_pairs(model, task: str, T: int, n: int) -> list:
    """The pairs a patching measurement runs on: `ioi`, n of Wang et al.'s ABC pairs (14-16 tokens), or `niah`,
    the corpus needle's value swapped in a T-token NIAH prompt at depth 0.5 (`interp patch`'s default task)."""
    import interp

    if task == "ioi":
        return interp.ioi_pairs(model.tokenizer, n=n, corrupt="abc")
    from interp.cli.options import niah_config
    from interp.tasks.niah import niah_for_model

    niah = niah_for_model(model, niah_config(str(T), "0.5", n, None, "corpus", "\\n", None), decode=False)
    return interp.niah_pairs(model.tokenizer, niah, 0)


#: task -> (prompt tokens, pairs) of the patch rows: 8 IOI pairs, one NIAH pair at context length 64
PATCH_TASKS = {"ioi": (0, 8), "niah": (64, 1)}


def warm_grid(model_name: str, dtype: str, task: str):
    """(model, pairs, config) of a patch row's full resid_pre grid, the model loaded in `dtype` and warmed by a
    one-position grid (kernel selection, lazy init) before any clock starts."""
    import interp

    model = interp.load_model(model_name, dtype=dtype)
    T, n = PATCH_TASKS[task]
    pairs = patch_pairs(model, task, T, n)
    cfg = interp.PatchingConfig(sites=("resid_pre",), n_boot=10)
    interp.run_patching(model, pairs[:1], interp.PatchingConfig(sites=("resid_pre",), n_boot=10, positions=(-1,)))
    return model, pairs, cfg



def grid_main(argv, doc: str, name: str, script: str, child_main, show_row, show_task) -> int:
    """The driver of a benchmark over the patch rows' grids (bench/patch_profile.py, bench/attention_paths.py):
    `--model`, `--tasks` (PATCH_TASKS), one child process of SCRIPT per (task, dtype), `show_row(task, dtype, r)`
    for each finished child, `show_task(task, float32 row, bfloat16 row)` for each task both dtypes finished, the
    rows written to bench/results/NAME-MODEL-DEVICE.json (or --out)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tasks", default=",".join(PATCH_TASKS))
    add_common_args(ap, name, child_timeout=3600)
    args, torch = parse_and_setup(ap, argv, child_main)
    if args is None:
        return 0
    tasks = args.tasks.split(",")
    if set(tasks) - set(PATCH_TASKS):
        ap.error(f"unknown tasks {', '.join(sorted(set(tasks) - set(PATCH_TASKS)))}; known: {', '.join(PATCH_TASKS)}")
    rows = []
    for task in tasks:
        for dtype in DTYPES:
            spec = {"model": args.model, "task": task, "dtype": dtype, "threads": args.threads}
            r = run_child(spec, timeout=args.child_timeout, script=script)
            rows.append({**spec, **r})
            if "error" in r:
                print(f"{task} {dtype}: {r['error']}")
                continue
            show_row(task, dtype, r)
    for task in tasks:
        by = {r["dtype"]: r for r in rows if r["task"] == task and "error" not in r}
        if set(by) == set(DTYPES):
            show_task(task, by["float32"], by["bfloat16"])
    out = Path(args.out or f"bench/results/{name}-{args.model}-{args.device.split(':')[0]}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": args.model, "threads": args.threads, "env": bench_env(args, torch),
                               "rows": rows}, indent=1))
    print(f"written to {out}")
    return 0

PLAN = {  # work -> [(seq, extra spec)]
    "matmul": [(1024, {})],
    "sdpa": [(1024, {}), (4096, {})],
    "forward": [(1024, {"batch": 1})],
    "body": [(1024, {"batch": 1})],
    "rows": [(4096, {}), (8192, {})],
    "detect": [(1024, {}), (2048, {}), (4096, {})],
    "ablate": [(1024, {"batch": 1})],
    "patch": [(0, {"pairs": 8, "task": "ioi"}), (64, {"pairs": 1, "task": "niah"})],
    "atp": [(0, {"pairs": 8})],
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--only", default=",".join(WORKS), help="comma-separated kinds of work: " + ", ".join(WORKS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1,
                    help="run each dtype's process this many times, alternating which dtype goes first; a ratio is "
                         "the median over rounds (on a machine whose speed drifts between processes)")
    ap.add_argument("--merge", action="store_true", help="keep the existing output's rows of the work not rerun")
    add_common_args(ap, "precision-speed", child_timeout=3600)
    args, torch = parse_and_setup(ap, argv, child_main)
    if args is None:
        return 0
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    rows = []
    for work in only:
        for seq, extra in PLAN[work]:
            for rnd in range(args.rounds):  # odd rounds run bfloat16 first: a drift of the machine's speed cancels
                for dtype in (DTYPES if rnd % 2 == 0 else DTYPES[::-1]):
                    spec = {"work": work, "dtype": dtype, "seq": seq, "model": args.model, "threads": args.threads,
                            "repeats": 1 if work in ("detect", "patch", "atp") else args.repeats, **extra}
                    r = run_child(spec, timeout=args.child_timeout, script=__file__)
                    rows.append({**spec, **r, "round": rnd})
                    msg = r.get("error") or (f"{r['median_cpu_s']:.2f} CPU s, peak {r['peak_bytes'] / 2**20:.0f} MiB"
                                             if "median_cpu_s" in r else "ok")
                    print(f"  {work:8s} T={seq:<5d} {dtype:9s} round {rnd} {msg}", flush=True)
    out = Path(args.out or f"bench/results/precision-speed-{args.model}-{args.device.split(':')[0]}"
                           f"{'-t%d' % args.threads if args.threads != 1 else ''}.json")
    env = bench_env(args, torch)
    for r in rows:
        r["load_average_1_5_15"] = env["load_average_1_5_15"]
    if args.merge and out.exists():  # the rows of work not rerun now, as measured before (each row has its load)
        old = json.loads(out.read_text())
        redone = {(r["work"], r["seq"], r["dtype"]) for r in rows}
        kept = [{**r, "load_average_1_5_15": r.get("load_average_1_5_15", old["env"]["load_average_1_5_15"])}
                for r in old["rows"] if (r["work"], r["seq"], r["dtype"]) not in redone]
        rows = [r for w in WORKS for r in kept + rows if r["work"] == w]
    res = {"model": args.model, "threads": args.threads, "env": env, "rows": rows, "ratios": ratios(rows)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    for r in res["ratios"]:
        if r["work"] == "matmul":
            for i, shape in enumerate(r["shapes"]):
                print(f"matmul {'x'.join(map(str, shape))}: float32 {r['peaks']['float32'][i]:.0f} GFLOPS, "
                      f"bfloat16 {r['peaks']['bfloat16'][i]:.0f} GFLOPS")
            continue
        print(f"{r['work']:8s} T={r['seq']:<5d} float32/bfloat16 CPU time {r['cpu_ratio']:.2f}x, "
              f"peak memory {r['mem_ratio']:.2f}x" + (f", achieved {r['gflops']['bfloat16']:.0f} / "
                                                      f"{r['gflops']['float32']:.0f} GFLOPS (bf16 / fp32)"
                                                      if r.get("gflops") else ""))
    print(f"written to {out}")
    return 0


def ratios(rows: list[dict]) -> list[dict]:
    """float32 / bfloat16 per (work, seq): CPU time and peak memory; achieved GFLOPS of forwards; matmul peaks.
    With several rounds (`--rounds`): each dtype's CPU time is the median over rounds, the ratio the median of the
    rounds' own ratios (a round's two processes ran back to back), peak memory the largest of any round."""
    out = []
    key = lambda r: (r["work"], r["seq"])  # noqa: E731
    for k in dict.fromkeys(key(r) for r in rows):
        rounds = {d: [r for r in rows if key(r) == k and r["dtype"] == d and "error" not in r] for d in DTYPES}
        if not all(rounds.values()):
            continue
        f, b = rounds["float32"], rounds["bfloat16"]
        if k[0] == "matmul":  # each shape's rate: the median over rounds
            out.append({"work": "matmul", "seq": k[1],
                        "peaks": {d: [statistics.median(r["matmul"][i]["gflops"] for r in rs)
                                      for i in range(len(rs[0]["matmul"]))] for d, rs in rounds.items()},
                        "shapes": [m["shape"] for m in f[0]["matmul"]], "cpu_ratio": float("nan"),
                        "mem_ratio": float("nan")})
            continue
        cpu = {d: statistics.median(r["median_cpu_s"] for r in rs) for d, rs in rounds.items()}
        per_round = [x["median_cpu_s"] / y["median_cpu_s"] for x, y in zip(f, b)]
        row = {"work": k[0], "seq": k[1], "cpu_ratio": statistics.median(per_round),
               "mem_ratio": max(r["peak_bytes"] for r in f) / max(max(r["peak_bytes"] for r in b), 1),
               "cpu_s": cpu}
        if "flops" in f[0]:
            row["gflops"] = {d: rs[0]["flops"] / statistics.median(r["median_wall_s"] for r in rs) / 1e9
                             for d, rs in rounds.items()}
        if len(per_round) > 1:  # the spread behind the median
            row["round_cpu_s"] = {d: [r["median_cpu_s"] for r in rs] for d, rs in rounds.items()}
            row["round_cpu_ratios"] = per_round
        out.append(row)
    return out


if __name__ == "__main__":
    sys.exit(main())
