"""Memory planner vs measured peak memory on CPU (interp.models.memory).

A random Qwen2 model (d_model 512, 4 layers, 8 query / 2 key-value heads, intermediate 1536, vocab 4096,
float32, sdpa) built with transformers from a config and wrapped in interp.Model; one fresh subprocess per
(analysis, length, batch): the peak RSS rise of one forward (VmHWM after resetting it through
/proc/self/clear_refs, minus VmRSS before; the weights are already resident; malloc pinned, see
ENV) against the plan's peak - weights. Analyses measured: ablate (m.forward, logits of every position, the KV
cache transformers returns) and last (m.forward(last_only=True): [batch, 1, vocab] logits).

Usage: python bench/memory_plan.py [--lengths 1024,2048,4096] [--batch 2]
Results: a table on stdout and bench/results/memory_plan-cpu.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CONFIG = dict(vocab_size=4096, hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=2, max_position_embeddings=16384, tie_word_embeddings=False)


# one thread; glibc's malloc pinned to mmap blocks over 64 KiB (with its dynamic threshold, freed blocks stay in
# the heap and the same forward peaks up to 2x higher from run to run)
ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536", "PATH": "/usr/bin:/bin",
       "HF_HUB_OFFLINE": "1"}


def _config():
    import transformers as tf

    return tf.Qwen2Config(**CONFIG)


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def _child(spec: dict) -> dict:
    import torch
    import transformers as tf

    import interp

    torch.set_num_threads(1)
    torch.manual_seed(0)
    hf = tf.AutoModelForCausalLM.from_config(_config(), attn_implementation="sdpa").eval()
    m = interp.Model(hf, None, name="random-qwen2-512")
    ids = torch.randint(0, CONFIG["vocab_size"], (spec["batch"], spec["length"]))
    with torch.no_grad():
        m.forward(ids[:, :8])  # warm up: lazy imports, kernels
    import gc

    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _status("VmRSS")
    out = m.forward(ids, last_only=spec["analysis"] == "last")
    hwm = _status("VmHWM")
    del out
    return {"rise": hwm - before, "rss_before": before}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="1024,2048,4096")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._child:
        print(json.dumps(_child(json.loads(a._child))))
        return 0
    from interp.models import memory

    rows = []
    for analysis in ("ablate", "last"):
        for t in (int(x) for x in a.lengths.split(",")):
            spec = {"analysis": analysis, "length": t, "batch": a.batch}
            p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--_child", json.dumps(spec)],
                               capture_output=True, text=True, check=True, env=ENV)
            got = json.loads(p.stdout.strip().splitlines()[-1])
            plan = memory.estimate(_config(), t, a.batch, "float32", "ablate",  # equal lengths: no mask
                                   logits="last" if analysis == "last" else "all", padded=False)
            est = plan.peak - plan.weights
            rows.append({**spec, "measured_rise": got["rise"], "estimated": est, "ratio": got["rise"] / est,
                         "plan": plan.to_dict()})
            print(f"{analysis:7s} T={t:5d} B={a.batch}: measured {got['rise'] / 2**20:8.1f} MiB, estimated "
                  f"{est / 2**20:8.1f} MiB (kv {plan.kv_cache / 2**20:.1f}, act {plan.activations / 2**20:.1f}, "
                  f"logits {plan.logits / 2**20:.1f}), measured/estimated {got['rise'] / est:.3f}", flush=True)
    out = Path(__file__).resolve().parent / "results" / "memory_plan-cpu.json"
    out.write_text(json.dumps({"config": CONFIG, "rows": rows}, indent=2))
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
