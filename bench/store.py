#!/usr/bin/env python
"""Activation store: write throughput against plain numpy, and memory that stays flat.

Part 1, write throughput (a fresh subprocess per measurement, same target directory): the same
arrays (7 sites of [tokens, 384] float32, like MiniLM's residual stream, plus the per-token
metadata), produced batch by batch, written
    store      interp.store.StoreWriter: shards appended batch by batch, fsync + rename + manifest,
               each file's CRC-32 updated batch by batch as it is written (the default)
    store-nosum     the same with the checksum switched off (StoreWriter(checksum=None), bench only)
    store-serial    the same with the CRC-32 computed in the writing thread (StoreWriter(checksum_thread=False))
    store-sha256, store-blake2b, store-adler32   (--algos) the store with another checksum
    np.save    numpy: each shard's arrays concatenated in memory, then np.save per file
    np.save+fsync   the same, with an fsync per file (the durability the store pays for)
Reported: MB/s (bytes of array data / wall time; the time includes producing the batches, which
every writer shares), the ratio to np.save, and each checksum's cost: 1 - MB/s(store with it) /
MB/s(store-nosum), the median over repeats of this ratio within a repeat (the variants of one
repeat run back to back, in an order rotated every repeat, so a busy machine slows both sides of
a ratio alike; target: crc32 < 10%).

Part 2, peak memory against dataset size (a fresh subprocess per measurement): a full
`cache_activations` run (a random-weight Qwen2, d_model 256, 4 layers, the organisms' tokenizer,
residual stream at every depth) over N and 4N tokens, versus a naive cache that keeps every
activation in RAM and saves at the end. Peak RSS rise over the process after loading the model
(VmHWM after resetting it through /proc/self/clear_refs, minus VmRSS before).

The real-model mode (a checkpoint's residual stream: write throughput and cold memmap reads) is
bench/store_model.py; `python bench/store.py --model NAME ...` runs it.

Usage: python bench/store.py [--tokens N] [--rss-tokens N] [--dir DIR] [--quick] [--algos sha256,blake2b]
                            [--write-only]
Results: tables on stdout and bench/results/store-cpu.json (--out overrides it, e.g. for smoke runs).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MiB, ROOT, HERE, PeakMemory  # noqa: E402
from store_common import run_store_child, save_npy, writer_options  # noqa: E402

SITES, D, BATCH_TOKENS, SHARD_TOKENS = 7, 384, 2048, 32768
RSS_MODEL = dict(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                 num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512, tie_word_embeddings=False)


# ------------------------------------------------------------------------------- children
def _batches(n_tokens: int):
    import numpy as np

    rng = np.random.default_rng(0)
    for start in range(0, n_tokens, BATCH_TOKENS):
        n = min(BATCH_TOKENS, n_tokens - start)
        x = rng.standard_normal((n, D), dtype=np.float32)
        arrays = {f"L{i}.resid_pre": x + i for i in range(SITES)}
        arrays.update(tokens=np.arange(n, dtype=np.int32), positions=np.arange(n, dtype=np.int32) % 128,
                      seq=(start + np.arange(n, dtype=np.int32)) // 128, special=np.zeros(n, np.uint8),
                      category=np.zeros(n, np.int8))
        yield arrays


def child_write(spec: dict) -> dict:
    import numpy as np

    from interp.store import StoreWriter

    n, out, how = spec["tokens"], Path(spec["dir"]), spec["how"]
    t0 = time.perf_counter()
    if how.startswith("store"):
        header = {"identity": {"bench": n}, "sites": {f"L{i}.resid_pre": {"shape": [D], "dtype": "float32"}
                                                      for i in range(SITES)},
                  "meta": ["tokens", "positions", "seq", "special", "category"]}
        with StoreWriter(out, header, **writer_options(how)) as w:
            it = _batches(n)
            for start in range(0, n, SHARD_TOKENS):
                m = min(SHARD_TOKENS, n - start)
                sw = w.shard(m, m // 128)
                for _ in range(0, m, BATCH_TOKENS):
                    sw.append(next(it))
                sw.commit()
            w.finish()
    else:
        it = _batches(n)
        for k, start in enumerate(range(0, n, SHARD_TOKENS)):
            m = min(SHARD_TOKENS, n - start)
            parts = [next(it) for _ in range(0, m, BATCH_TOKENS)]
            d = out / f"{k:05d}"
            d.mkdir(parents=True)
            for name in parts[0]:
                save_npy(d / f"{name}.npy", np.concatenate([b[name] for b in parts]), fsync=how == "np.save+fsync")
    dt = time.perf_counter() - t0
    data = sum(p.stat().st_size for p in out.rglob("*.npy"))
    return {"seconds": dt, "bytes": data}


def _ckpt(path: Path) -> Path:
    import torch
    import transformers as tf

    if not (path / "config.json").is_file():
        torch.manual_seed(0)
        tf.AutoModelForCausalLM.from_config(tf.Qwen2Config(**RSS_MODEL)).save_pretrained(path)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(ROOT / "data" / "organisms" / "tokenizer" / f, path / f)
    return path


def child_rss(spec: dict) -> dict:
    import numpy as np
    import torch

    torch.set_num_threads(spec["threads"])
    import interp
    from interp.store import CacheConfig, CorpusData, cache_activations

    model = interp.load_model(str(_ckpt(Path(spec["ckpt"]))), device="cpu")
    n_seq = spec["tokens"] // 128
    data = CorpusData(n_sequences=n_seq)
    cfg = CacheConfig(sites=("resid",), max_length=128, batch_size=16, shard_sequences=64)
    data.fingerprint()
    # warm-up: one small batch through every code path, so both variants start from the same RSS
    cache_activations(model, CorpusData(n_sequences=32), Path(spec["dir"]) / "warm", cfg)
    t0 = time.perf_counter()
    with PeakMemory("cpu") as pm:
        if spec["how"] == "store":
            store = cache_activations(model, data, Path(spec["dir"]) / "s", cfg)
            n_tok = store.n_tokens
        else:  # naive: every activation kept in RAM, saved at the end
            cap = interp.Capture(["L0.resid_pre", "L1.resid_pre", "L2.resid_pre", "L3.resid_pre", "L3.resid_post"],
                                 to_cpu=True)
            texts = list(data.texts())
            with model.intervene(cap), torch.no_grad():
                for i in range(0, len(texts), 16):
                    model.forward(model.tokenizer(texts[i:i + 16], truncation=True, max_length=128,
                                                  return_tensors="pt", padding=True)["input_ids"], logits=False)
            out = Path(spec["dir"]) / "naive"
            out.mkdir()
            n_tok = 0
            for s in cap.sites:
                a = cap[s].numpy()
                n_tok = a.shape[0] * a.shape[1]
                np.save(out / f"{s}.npy", a)
    return {"peak_bytes": pm.peak, "method": pm.method, "tokens": n_tok, "seconds": time.perf_counter() - t0}


# ------------------------------------------------------------------------------- parent
def write_kinds(args) -> list[str]:
    extra = [f"store-{a}" for a in (args.algos.split(",") if args.algos else []) if a and a != "crc32"]
    return ["store", "store-nosum", "store-serial", *extra, "np.save", "np.save+fsync"]


def part_write(args, root: Path) -> list[dict]:
    rows = []
    kinds = write_kinds(args)
    for rep in range(args.repeats):
        for how in kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]:  # rotate the order: no fixed slot
            d = root / f"w-{how}-{rep}"
            r = run_store_child({"mode": "write", "how": how, "tokens": args.tokens, "dir": str(d)}, __file__)
            shutil.rmtree(d, ignore_errors=True)
            rows.append({"how": how, "rep": rep, **r})
            print(f"  {how:16s} rep {rep}: " + (f"{r['bytes'] / MiB / r['seconds']:.0f} MB/s" if "seconds" in r
                                                  else r["error"]), file=sys.stderr)
    return rows


def part_rss(args, root: Path) -> list[dict]:
    rows = []
    ckpt = root / "ckpt"
    for n in (args.rss_tokens, 4 * args.rss_tokens):
        for how in ("store", "naive"):
            d = root / f"r-{how}-{n}"
            d.mkdir(parents=True)
            r = run_store_child({"mode": "rss", "how": how, "tokens": n, "dir": str(d), "ckpt": str(ckpt),
                                 "threads": args.threads}, __file__)
            shutil.rmtree(d, ignore_errors=True)
            rows.append({"how": how, "target_tokens": n, **r})
            print(f"  {how:6s} {n:7d} tokens: " + (f"peak +{r['peak_bytes'] / MiB:.0f} MiB" if "peak_bytes" in r
                                                   else r["error"]), file=sys.stderr)
    return rows


def report(res: dict) -> None:
    import statistics

    print(f"\nWrite throughput, {res['tokens']} tokens x {SITES} sites x {D} float32 "
          f"({res['tokens'] * SITES * D * 4 / MiB:.0f} MiB) into {res['dir']}")
    print(f"{'writer':16s} {'MB/s (median)':>14s} {'vs np.save':>11s} {'checksum cost':>14s}")
    med = {}
    kinds = list(dict.fromkeys(r["how"] for r in res["write"]))
    for how in kinds:
        v = [r["bytes"] / MiB / r["seconds"] for r in res["write"] if r["how"] == how and "seconds" in r]
        med[how] = statistics.median(v) if v else float("nan")
    speed = {(r["how"], r["rep"]): r["bytes"] / MiB / r["seconds"] for r in res["write"] if "seconds" in r}

    def paired(how):  # median over repeats of MB/s(how) / MB/s(store-nosum) within the repeat
        v = [speed[how, k] / speed["store-nosum", k] for (h, k) in speed if h == how and ("store-nosum", k) in speed]
        return statistics.median(v) if v else float("nan")

    ratio = {h: paired(h) for h in med if h.startswith("store") and h != "store-nosum"}
    for how, v in med.items():
        cost = f"{1 - ratio[how]:13.1%}" if how in ratio else ""
        print(f"{how:16s} {v:14.0f} {v / med['np.save']:10.2f}x {cost:>14s}")
    if "store" in ratio:
        r = ratio["store"]
        res["checksum"] = {"algo": "crc32", "store_mb_s": med["store"], "nosum_mb_s": med["store-nosum"],
                           "paired_ratio": r, "cost": 1 - r,
                           "cost_by_variant": {h[6:] or "crc32": 1 - v for h, v in ratio.items()}}
        print(f"checksum (crc32): store with / without = {r:.3f} (paired median) -> costs {1 - r:.1%} of write "
              f"throughput (target < 10%)")
    if not res["rss"]:
        return
    print("\nPeak RSS rise during caching (fresh process each; after model load)")
    print(f"{'tokens':>8s} {'store MiB':>10s} {'naive MiB':>10s}")
    by = {}
    for r in res["rss"]:
        by.setdefault(r["target_tokens"], {})[r["how"]] = r
    for n, d in sorted(by.items()):
        cells = [f"{d[h]['peak_bytes'] / MiB:10.0f}" if "peak_bytes" in d.get(h, {}) else f"{'error':>10s}"
                 for h in ("store", "naive")]
        print(f"{n:8d} {cells[0]} {cells[1]}")
    ns = sorted(by)
    if len(ns) == 2 and all("peak_bytes" in by[n].get("store", {}) for n in ns):
        a, b = (by[n]["store"]["peak_bytes"] for n in ns)
        print(f"store peak at 4x tokens / at 1x: {b / max(a, 1):.2f}  (flat = 1.0; naive: "
              f"{by[ns[1]]['naive']['peak_bytes'] / max(by[ns[0]]['naive']['peak_bytes'], 1):.2f})")


def main():
    if "--model" in sys.argv[1:] or any(a.startswith("--model=") for a in sys.argv[1:]):
        import store_model  # the real-model mode

        return store_model.main()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=65536, help="tokens in the write-throughput test")
    ap.add_argument("--rss-tokens", type=int, default=16384, help="N of the memory test (runs N and 4N)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir under bench/results)")
    ap.add_argument("--quick", action="store_true", help="smaller sizes, three repeats")
    ap.add_argument("--algos", default="", help="also time the store with these checksums (sha256,blake2b,adler32)")
    ap.add_argument("--write-only", action="store_true", help="skip the memory part")
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/store-cpu.json)")
    ap.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child:
        spec = json.loads(args._child)
        out = {"write": child_write, "rss": child_rss}[spec["mode"]](spec)
        print("RESULT " + json.dumps(out))
        return
    if args.quick:
        args.tokens, args.rss_tokens, args.repeats = 16384, 4096, 3
    (HERE / "results").mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="store-bench-", dir=args.dir or (HERE / "results")))
    try:
        print("write throughput:", file=sys.stderr)
        write = part_write(args, root)
        rss = []
        if not args.write_only:
            print("peak memory:", file=sys.stderr)
            rss = part_rss(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    res = {"tokens": args.tokens, "dir": str(root.parent), "write": write, "rss": rss,
           "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    report(res)  # adds the checksum summary
    (Path(args.out) if args.out else HERE / "results" / "store-cpu.json").write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
