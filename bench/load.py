"""Loading the real models: interp's first load of a GGUF (dequantise + write the cached safetensors copy), its
second load (the cache), and transformers' own GGUF load (dequantising every time), side by side.

Each measurement runs in a fresh process on one thread (torch, OpenBLAS), with an empty INTERP_CACHE for the
first load. Needs the models fetched (`interp models fetch smollm2-135m gemma3-270m`: the GGUFs are read from
interp's cache). Prints seconds and the ratios; --out writes JSON.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/load.py --out bench/results/load-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, time, torch
torch.set_num_threads(1)
mode, path = sys.argv[1], sys.argv[2]
t = time.perf_counter()
if mode == "transformers":
    import os, transformers as tf
    tf.utils.logging.disable_progress_bar()
    hf = tf.AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                 dtype=torch.float32)
    tok = tf.AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
else:
    import interp
    m = interp.load_model(path, device="cpu")
print(time.perf_counter() - t)
"""


def run(mode: str, path: str, cache: str) -> float:
    env = {**os.environ, "INTERP_CACHE": cache, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "TQDM_DISABLE": "1"}
    r = subprocess.run([sys.executable, "-c", CHILD, mode, path], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{mode} {path} failed:\n{r.stderr[-2000:]}")
    return float(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from interp.models.fetch import fetched_path, gguf_path

    rows = []
    for alias in args.models.split(","):
        if fetched_path(alias) is None:
            raise SystemExit(f"{alias} is not fetched: interp models fetch {alias}")
        g = str(gguf_path(alias))
        with tempfile.TemporaryDirectory() as cache:
            first = run("interp", g, cache)  # converts into the empty cache
            second = run("interp", g, cache)  # reads the copy (hashes the GGUF to find it)
        alias_load = run("interp", alias, os.environ.get("INTERP_CACHE", ""))  # the alias: no hashing
        hf = run("transformers", g, "")
        rows.append({"model": alias, "interp_first_s": round(first, 2), "interp_second_s": round(second, 2),
                     "interp_alias_s": round(alias_load, 2), "transformers_gguf_s": round(hf, 2),
                     "transformers_over_second": round(hf / second, 1)})
        r = rows[-1]
        print(f"{alias}: interp first load (dequantise + cache) {first:.1f} s; second (cache, from the .gguf path) "
              f"{second:.1f} s; by alias {alias_load:.1f} s; transformers' own GGUF load {hf:.1f} s "
              f"({r['transformers_over_second']}x interp's second load); each in a fresh process incl. imports")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"bench": "load", "threads": 1, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
