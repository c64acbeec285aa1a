#!/usr/bin/env python
"""Activation store on a real model's residual stream: write throughput against np.save, cold memmap reads
against np.load(mmap_mode="r"), every value checked.

The arrays (--model NAME, e.g. smollm2-135m) are a real model's residual stream
at every depth, the store's "resid" sites (each layer's resid_pre plus the last layer's resid_post:
31 sites of [tokens, 576] float32 for SmolLM2-135M, ~71 KB per token) plus the per-token metadata,
of real text (the fetched Sherlock Holmes text, `interp texts fetch sherlock-holmes`; interp's corpus
generator where it is missing or too short) cut into sequences of 512 tokens, run in batches of 8
sequences until the site data reaches --gb GiB (default 1). The activations are computed ONCE, before
any timing (a fresh process on --threads threads, through the store's own batch code,
interp.store.cache.batch_rows), and kept in a scratch .npy per array; each write measurement (a
fresh process) loads them all into RAM first, so the timing compares writers on identical arrays,
not forward passes (unlike the synthetic mode, whose times include producing the batches).
  write     store (StoreWriter, default settings: crc32 in a second thread, fsync + rename + manifest;
            shards of CacheConfig's default 256 sequences, appended batch by batch) vs np.save and
            np.save+fsync of the same arrays (per shard, one file per site); MB/s, ratio to np.save
            (median over repeats of the within-repeat ratio), repeats in a rotated order, a `sync`
            (untimed) before each so no writer pays for the previous one's writeback
  read      one store and one np.save copy, read back in a fresh process per measurement through
            memmaps: the store's reader (open_store + ActivationStore.numpy) vs np.load(mmap_mode="r"):
            scan-site (sum over one site, --read-site), scan-all (sum over every site), random
            (--rows random (site, token) rows, the same for both, copied one by one), and for the
            store also random-get (the same rows through store.get, its torch API); each timed from
            opening the copy (open_store / np.load) to the last value, after one untimed warm-up pass
            of every test (imports and code paths loaded). Before each timed read
            the page cache is dropped (sync; echo 1 > /proc/sys/vm/drop_caches, needs root; the
            output says "warm cache" where that fails) and the bytes of the files still resident are
            recorded (fincore). Every value read is checked against the arrays written (the scan sums
            against the same sums of the source, the rows elementwise), and afterwards every file of
            both copies is compared with the source and the store's checksums verified; any
            mismatch stops the run with an error.
Disk: the scratch source (size of the data) plus two kept copies plus the one being written (~4x).

Disk: the scratch source (size of the data) plus two kept copies plus the one being written (~4x).

Usage: python bench/store_model.py --model smollm2-135m [--gb 1] [--repeats 5] [--rows 10000] [--dir DIR]
                                   [--algos sha256,blake2b] [--out FILE]
       (python bench/store.py --model ... runs this script)
Results: tables on stdout and bench/results/store-<model>-cpu.json (--out overrides it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GiB, HERE, MiB  # noqa: E402
from store_common import run_store_child, save_npy, writer_options  # noqa: E402

SEQ_LEN, MODEL_BATCH = 512, 8  # sequences of 512 tokens, 8 per forward / per append


def run_child(spec: dict, timeout: float = 1800, stream: bool = False) -> dict:
    return run_store_child(spec, __file__, timeout=timeout, stream=stream)


# ------------------------------------------------------------------------------- children
META_NAMES = ("tokens", "positions", "seq", "special", "category")


def _token_stream(model, n_tokens: int):
    """(ids, categories, source description): >= n_tokens tokens of the Sherlock Holmes text, then of
    interp's corpus generator where that text is missing or too short."""
    import numpy as np

    from interp.store.labels import token_categories
    from interp.tasks.texts import text_path

    tok = model.tokenizer
    ids, cats, sources = [], [], []

    def add(text):
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        ids.append(np.asarray(enc["input_ids"], dtype=np.int64))
        cats.append(token_categories(text, enc["offset_mapping"]))
        return len(enc["input_ids"])

    path = text_path("sherlock-holmes")
    have = 0
    if path is not None:
        have += add(path.read_text(encoding="utf-8"))
        sources.append({"text": "sherlock-holmes", "path": str(path), "tokens": min(have, n_tokens)})
    if have < n_tokens:
        from interp.store.data import CorpusData

        n0 = have
        for text in CorpusData(n_sequences=10 ** 6, n_sentences=64).texts():
            have += add(text)
            if have >= n_tokens:
                break
        sources.append({"text": "corpus", "generator": "interp.store.CorpusData(n_sentences=64)",
                        "tokens": min(have, n_tokens) - n0})
    return np.concatenate(ids)[:n_tokens], np.concatenate(cats)[:n_tokens], sources


def child_prep(spec: dict) -> dict:
    """Run the model once over the text and keep every array the store would write in src/<name>.npy."""
    import numpy as np
    import torch

    torch.set_num_threads(spec["threads"])
    from interp.models.loading import load_model
    from interp.store.cache import batch_rows, resolve_sites

    t0 = time.perf_counter()
    model = load_model(spec["model"], device="cpu")
    sites = resolve_sites(model, ("resid",))
    d = model.spec.d_model
    names = [str(s) for s in sites]
    n_seq = max(1, -(-int(spec["gb"] * GiB) // (len(sites) * d * 4 * SEQ_LEN)))
    n = n_seq * SEQ_LEN
    ids, cats, sources = _token_stream(model, n)
    if len(ids) < n:
        raise RuntimeError(f"only {len(ids)} tokens of text, {n} needed")
    special_ids = np.asarray(sorted(model.tokenizer.all_special_ids))
    src = Path(spec["dir"])
    src.mkdir(parents=True)
    out = {name: np.lib.format.open_memmap(src / f"{name}.npy", mode="w+", dtype=np.float32, shape=(n, d))
           for name in names}
    out.update({m: np.lib.format.open_memmap(src / f"{m}.npy", mode="w+", dtype=_meta_dtype(m), shape=(n,))
                for m in META_NAMES})
    load_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    with torch.no_grad():
        for i in range(0, n_seq, MODEL_BATCH):
            seqs = []
            for j in range(i, min(i + MODEL_BATCH, n_seq)):
                x = ids[j * SEQ_LEN:(j + 1) * SEQ_LEN]
                seqs.append((x, np.isin(x, special_ids).astype(np.uint8), cats[j * SEQ_LEN:(j + 1) * SEQ_LEN]))
            rows = batch_rows(model, sites, seqs, i, "float32")
            a, b = i * SEQ_LEN, (i + len(seqs)) * SEQ_LEN
            for name, arr in out.items():
                if len(rows[name]) != b - a:
                    raise RuntimeError(f"{name}: {len(rows[name])} rows from the batch, {b - a} expected")
                arr[a:b] = rows[name]
            print(f"    forward: {b}/{n} tokens", file=sys.stderr, flush=True)
    for arr in out.values():
        arr.flush()
    from interp.store.cache import CacheConfig

    info = {"model": spec["model"], "model_name": model.name, "n_layers": model.spec.n_layers, "d_model": d,
            "sites": names, "meta": list(META_NAMES), "n_sequences": n_seq, "seq_len": SEQ_LEN, "n_tokens": n,
            "batch_sequences": MODEL_BATCH, "shard_sequences": CacheConfig().shard_sequences,
            "site_bytes": n * d * 4 * len(names), "sources": sources, "threads": spec["threads"],
            "load_seconds": load_s, "forward_seconds": time.perf_counter() - t1}
    (src / "info.json").write_text(json.dumps(info, indent=2))
    return info


def _meta_dtype(name: str):
    from interp.store.format import META_ARRAYS

    return META_ARRAYS[name]


def _shard_ranges(info: dict) -> list[tuple[int, int, int]]:
    """(token start, token stop, sequences) of each shard: the store's default shard size in sequences."""
    step = info["shard_sequences"] * info["seq_len"]
    return [(a, min(a + step, info["n_tokens"]), (min(a + step, info["n_tokens"]) - a) // info["seq_len"])
            for a in range(0, info["n_tokens"], step)]


def child_write_model(spec: dict) -> dict:
    import numpy as np

    from interp.store import StoreWriter

    src, out, how = Path(spec["src"]), Path(spec["dir"]), spec["how"]
    info = json.loads((src / "info.json").read_text())
    t_load = time.perf_counter()
    arrays = {name: np.load(src / f"{name}.npy") for name in info["sites"] + info["meta"]}  # into RAM
    load_s = time.perf_counter() - t_load
    step = info["batch_sequences"] * info["seq_len"]
    t0 = time.perf_counter()
    if how.startswith("store"):
        header = {"identity": {"bench": "model", "model": info["model"], "n_tokens": info["n_tokens"]},
                  "model": {"name": info["model_name"]},
                  "sites": {s: {"shape": [info["d_model"]], "dtype": "float32"} for s in info["sites"]},
                  "meta": info["meta"]}
        with StoreWriter(out, header, **writer_options(how)) as w:
            for a, b, n_seq in _shard_ranges(info):
                sw = w.shard(b - a, n_seq)
                for i in range(a, b, step):
                    sw.append({name: arr[i:min(i + step, b)] for name, arr in arrays.items()})
                sw.commit()
            w.finish()
    else:
        for k, (a, b, _) in enumerate(_shard_ranges(info)):
            d = out / f"{k:05d}"
            d.mkdir(parents=True)
            for name, arr in arrays.items():
                save_npy(d / f"{name}.npy", arr[a:b], fsync=how == "np.save+fsync")
    dt = time.perf_counter() - t0
    data = sum(p.stat().st_size for p in out.rglob("*.npy"))
    return {"seconds": dt, "bytes": data, "load_seconds": load_s}


def _drop_cache(files: list[Path]) -> dict:
    """sync, then drop the page cache (root only); and the bytes of `files` still resident (fincore)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        state = "cold"
    except OSError as e:
        state = f"warm cache (drop_caches: {e.strerror or e})"
    resident = None
    if shutil.which("fincore"):
        p = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "-o", "RES", *map(str, files)],
                           capture_output=True, text=True)
        if p.returncode == 0:
            resident = sum(int(x) for x in p.stdout.split())
    return {"cache": state, "resident_bytes": resident}


class _Copy:
    """One written copy, read through memmaps: the store's reader, or np.load of the np.save files."""

    def __init__(self, how: str, path: Path, info: dict):
        import numpy as np

        self.how, self.path, self.info = how, path, info
        if how == "store":
            from interp.store import open_store

            self.store = open_store(path)
            self.starts = np.array([s["tok_start"] for s in self.store.shards])
            self.n_shards = len(self.store.shards)
        else:
            self.dirs = sorted(p for p in path.iterdir() if p.is_dir())
            self.n_shards = len(self.dirs)
            self.starts = np.array([a for a, _, _ in _shard_ranges(info)])

    def map(self, name: str, shard: int):
        import numpy as np

        if self.how == "store":
            return self.store.numpy(name, shard)
        return np.load(self.dirs[shard] / f"{name}.npy", mmap_mode="r")


def child_read(spec: dict) -> dict:
    import numpy as np

    src, path, how = Path(spec["src"]), Path(spec["dir"]), spec["how"]
    info = json.loads((src / "info.json").read_text())
    sites, d, n = info["sites"], info["d_model"], info["n_tokens"]
    files = sorted(path.rglob("*.npy"))
    site = spec["site"]
    rng = np.random.default_rng(spec["seed"])
    pick_site, pick_tok = rng.integers(0, len(sites), spec["rows"]), rng.integers(0, n, spec["rows"])
    ranges = _shard_ranges(info)
    res = []

    def check(ok, what):
        if not ok:
            raise RuntimeError(f"{how} {path}: {what}: the values read differ from those written")

    def scan(which):
        cache = _drop_cache(files)
        t0 = time.perf_counter()
        c = _Copy(how, path, info)
        tot = {s: sum(float(c.map(s, i).sum(dtype=np.float64)) for i in range(c.n_shards)) for s in which}
        dt = time.perf_counter() - t0
        srcs = {s: np.load(src / f"{s}.npy", mmap_mode="r") for s in which}
        for s in which:
            check(tot[s] == sum(float(srcs[s][a:b].sum(dtype=np.float64)) for a, b, _ in ranges), f"sum of {s}")
        return {"seconds": dt, "bytes": len(which) * n * d * 4, **cache}

    def random(api):
        cache = _drop_cache(files)
        out = np.empty((len(pick_tok), d), dtype=np.float32)
        t0 = time.perf_counter()
        c = _Copy(how, path, info)
        if api == "get":
            st = c.store
            for k, (si, t) in enumerate(zip(pick_site, pick_tok)):
                out[k] = st.get(sites[si], int(t), int(t) + 1)[0].numpy()
        else:
            maps = [[c.map(s, i) for i in range(c.n_shards)] for s in sites]
            shard = np.searchsorted(c.starts, pick_tok, side="right") - 1
            for k, (si, t, h) in enumerate(zip(pick_site, pick_tok, shard)):
                out[k] = maps[si][h][t - c.starts[h]]
        dt = time.perf_counter() - t0
        srcs = [np.load(src / f"{s}.npy", mmap_mode="r") for s in sites]
        want = np.stack([srcs[si][t] for si, t in zip(pick_site, pick_tok)])
        check(np.array_equal(out, want), f"{len(out)} random rows ({api})")
        return {"seconds": dt, "bytes": out.nbytes, "rows": len(out), **cache}

    # warm-up, untimed: every import and code path the timed reads take is loaded before the cache is dropped
    scan([site])
    random("memmap")
    if how == "store":
        random("get")
    res.append({"test": "scan-site", "site": site, **scan([site])})
    res.append({"test": "scan-all", **scan(sites)})
    res.append({"test": "random", **random("memmap")})
    if how == "store":
        res.append({"test": "random-get", **random("get")})
    return {"reads": res}


def child_verify(spec: dict) -> dict:
    """Every file of both copies equal to the source; the store's checksums (store.verify())."""
    import numpy as np

    src = Path(spec["src"])
    info = json.loads((src / "info.json").read_text())
    for how, path in (("store", spec["store"]), ("np.save", spec["npsave"])):
        checked = 0
        c = _Copy(how, Path(path), info)
        if how == "store":
            c.store.verify()
            if c.store.n_tokens != info["n_tokens"] or not c.store.complete:
                raise RuntimeError(f"store {path}: {c.store.n_tokens} tokens, complete={c.store.complete}")
        for name in info["sites"] + info["meta"]:
            a = np.load(src / f"{name}.npy", mmap_mode="r")
            for i, (lo, hi, _) in enumerate(_shard_ranges(info)):
                if not np.array_equal(c.map(name, i), a[lo:hi]):
                    raise RuntimeError(f"{how} {path}: shard {i} {name} differs from the arrays written")
                checked += (hi - lo) * a[0:1].nbytes
    return {"verified": True, "bytes_compared": checked}  # per copy


# ------------------------------------------------------------------------------- parent
def model_tag(name: str) -> str:
    return Path(name.rstrip("/")).name.replace(":", "_") or "model"


def part_model(args, root: Path) -> dict:
    """Real-model mode: compute the activations once, then the write and read measurements."""
    src = root / "src"
    print(f"activations of {args.model} (computed once, before any timing):", file=sys.stderr)
    info = run_child({"mode": "prep", "model": args.model, "gb": args.gb, "dir": str(src), "threads": args.threads},
                     timeout=7200, stream=True)
    if "error" in info:
        raise SystemExit(f"computing the activations failed:\n{info['error']}")
    print(f"  {info['n_tokens']} tokens x {len(info['sites'])} sites x {info['d_model']} float32 = "
          f"{info['site_bytes'] / MiB:.0f} MiB; forward {info['forward_seconds']:.0f} s", file=sys.stderr)
    extra = [f"store-{a}" for a in (args.algos.split(",") if args.algos else []) if a and a != "crc32"]
    kinds = ["store", *extra, "np.save", "np.save+fsync"]
    keep = {}
    write = []
    print("write throughput (arrays loaded into RAM before timing):", file=sys.stderr)
    for rep in range(args.repeats):
        for how in kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]:
            d = root / f"w-{how}-{rep}"
            os.sync()  # the previous writer's dirty pages are flushed before this one starts (untimed)
            r = run_child({"mode": "write-model", "how": how, "src": str(src), "dir": str(d)})
            if "error" in r:
                raise SystemExit(f"{how} rep {rep} failed:\n{r['error']}")
            if rep == args.repeats - 1 and how in ("store", "np.save"):
                keep[how] = root / f"read-{how}"
                d.rename(keep[how])
            else:
                shutil.rmtree(d, ignore_errors=True)
            write.append({"how": how, "rep": rep, **r})
            print(f"  {how:16s} rep {rep}: {r['bytes'] / MiB / r['seconds']:.0f} MB/s", file=sys.stderr)
    site = args.read_site or info["sites"][len(info["sites"]) // 2]
    if site not in info["sites"]:
        raise SystemExit(f"--read-site {site}: not one of {', '.join(info['sites'])}")
    read = []
    print("memmap reads (page cache dropped before each):", file=sys.stderr)
    hows = ["store", "np.save"]
    for rep in range(args.repeats):
        for how in hows[rep % 2:] + hows[:rep % 2]:
            r = run_child({"mode": "read", "how": how, "src": str(src), "dir": str(keep[how]), "site": site,
                           "rows": args.rows, "seed": 0})
            if "error" in r:
                raise SystemExit(f"reading {how} rep {rep} failed:\n{r['error']}")
            for x in r["reads"]:
                read.append({"how": how, "rep": rep, **x})
                rate = (f"{x['rows'] / x['seconds']:.0f} rows/s" if "rows" in x else
                        f"{x['bytes'] / MiB / x['seconds']:.0f} MB/s")
                print(f"  {how:8s} {x['test']:10s} rep {rep}: {rate} ({x['cache']})", file=sys.stderr)
    v = run_child({"mode": "verify", "src": str(src), "store": str(keep["store"]), "npsave": str(keep["np.save"])})
    if "error" in v:
        raise SystemExit(f"VERIFY FAILED: {v['error']}")
    print(f"verified: both copies equal the arrays written ({v['bytes_compared'] / MiB:.0f} MiB each), "
          f"store checksums ok", file=sys.stderr)
    return {"model": args.model, "info": info, "tokens": info["n_tokens"], "read_site": site, "rows": args.rows,
            "write": write, "read": read, "verify": v}


def report_model(res: dict) -> None:
    import statistics

    info = res["info"]
    print(f"\n{res['model']}: residual stream, {info['n_tokens']} tokens ({info['n_sequences']} x {info['seq_len']}, "
          f"{', '.join(x['text'] for x in info['sources'])}) x {len(info['sites'])} sites x {info['d_model']} float32 "
          f"= {info['site_bytes'] / MiB:.0f} MiB (+ metadata) into {res['dir']}")
    print("Write throughput (identical arrays in RAM; forward passes not timed)")
    print(f"{'writer':16s} {'MB/s (median)':>14s} {'vs np.save':>11s} {'vs np.save+fsync':>17s}")
    speed = {(r["how"], r["rep"]): r["bytes"] / MiB / r["seconds"] for r in res["write"]}
    kinds = list(dict.fromkeys(r["how"] for r in res["write"]))

    def paired(how, ref):  # median over repeats of the within-repeat ratio
        v = [speed[how, k] / speed[ref, k] for (h, k) in speed if h == how and (ref, k) in speed]
        return statistics.median(v) if v else float("nan")

    summary = {}
    for how in kinds:
        med = statistics.median(v for (h, _), v in speed.items() if h == how)
        a, b = paired(how, "np.save"), paired(how, "np.save+fsync")
        summary[how] = {"mb_s": med, "vs_np_save": a, "vs_np_save_fsync": b}
        print(f"{how:16s} {med:14.0f} {a:10.2f}x {b:16.2f}x")
    res["write_summary"] = summary
    print(f"\nMemmap reads, page cache dropped before each ({'; '.join(sorted({r['cache'] for r in res['read']}))}); "
          f"scan-site = {res['read_site']}, random = {res['rows']} random (site, token) rows")
    print(f"{'test':12s} {'reader':10s} {'MB/s (median)':>14s} {'rows/s':>10s} {'resident before':>16s}")
    rsum = {}
    for test in dict.fromkeys(r["test"] for r in res["read"]):
        for how in ("store", "np.save"):
            rows = [r for r in res["read"] if r["test"] == test and r["how"] == how]
            if not rows:
                continue
            mb = statistics.median(r["bytes"] / MiB / r["seconds"] for r in rows)
            rps = statistics.median(r["rows"] / r["seconds"] for r in rows) if "rows" in rows[0] else None
            resid = [r["resident_bytes"] for r in rows if r.get("resident_bytes") is not None]
            rsum[f"{test}/{how}"] = {"mb_s": mb, "rows_s": rps, "resident_bytes_max": max(resid) if resid else None}
            print(f"{test:12s} {how + (' .get' if test == 'random-get' else ''):10s} {mb:14.1f} "
                  f"{f'{rps:.0f}' if rps else '':>10s} {f'{max(resid) / MiB:.1f} MiB' if resid else '?':>16s}")
    res["read_summary"] = rsum


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="the checkpoint whose residual stream is written (e.g. smollm2-135m)")
    ap.add_argument("--gb", type=float, default=1.0, help=f"GiB of site data to write (rounded up to whole "
                    f"{SEQ_LEN}-token sequences)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the forward passes (untimed)")
    ap.add_argument("--rows", type=int, default=10000, help="random rows in the random-access read")
    ap.add_argument("--read-site", default=None, help="the site of the sequential scan (default: the middle one)")
    ap.add_argument("--algos", default="", help="also time the store with these checksums (sha256,blake2b,adler32)")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir under bench/results)")
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/store-<model>-cpu.json)")
    ap.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child:
        spec = json.loads(args._child)
        out = {"prep": child_prep, "write-model": child_write_model, "read": child_read,
               "verify": child_verify}[spec["mode"]](spec)
        print("RESULT " + json.dumps(out))
        return
    if not args.model:
        ap.error("--model is required (a checkpoint interp loads, e.g. smollm2-135m)")
    (HERE / "results").mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="store-bench-", dir=args.dir or (HERE / "results")))
    try:
        res = part_model(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    res.update(dir=str(root.parent), time_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    report_model(res)
    out = Path(args.out) if args.out else HERE / "results" / f"store-{model_tag(args.model)}-cpu.json"
    out.write_text(json.dumps(res, indent=2))
    print(f"results: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
