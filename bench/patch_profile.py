#!/usr/bin/env python
"""Where an exact patching grid's CPU time goes, per model dtype: torch.profiler's self CPU time of each operator
over one full resid_pre grid (the pairs of bench/precision_speed.py's patch rows), in float32 and in bfloat16,
grouped into matmuls, the attention kernel, elementwise work and the rest, beside the grid's CPU time unprofiled.

It says what bounds bfloat16's gain on short passes (docs/precision.md#speed): the matmuls gain what the machine's
matmul rates allow, the rest of a pass does not.

    python bench/patch_profile.py --model smollm2-135m     # bench/results/patch-profile-smollm2-135m-cpu.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import setup_torch  # noqa: E402

GROUPS = {  # operator -> group; operators not named here count as "other"
    "aten::mm": "matmul", "aten::addmm": "matmul", "aten::bmm": "matmul",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention kernel",
    **{f"aten::{op}": "elementwise" for op in ("mul", "add", "silu", "pow", "neg", "rsqrt", "mean", "sum", "div_",
                                               "where", "copy_", "cat", "index", "sub", "exp", "fill_")},
}


def child_main(spec: dict) -> None:
    torch = setup_torch(spec["threads"])
    from torch.profiler import ProfilerActivity, profile

    import interp
    from precision_speed import warm_grid

    model, pairs, cfg = warm_grid(spec["model"], spec["dtype"], spec["task"])
    c0 = time.process_time()
    r = interp.run_patching(model, pairs, cfg)
    plain = time.process_time() - c0
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        interp.run_patching(model, pairs, cfg)
    ops = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
    groups: dict[str, float] = {}
    for k, v in ops.items():
        g = GROUPS.get(k, "other")
        groups[g] = groups.get(g, 0.0) + v
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:12]
    print("RESULT " + json.dumps({"cpu_s": plain, "n_forward": r.n_forward, "profiled_self_cpu_s": sum(ops.values()),
                                  "groups_s": groups, "top_ops_s": top}))


def _show_row(task: str, dtype: str, r: dict) -> None:
    shares = ", ".join(f"{g} {s:.1f} s ({s / r['profiled_self_cpu_s']:.0%})"
                       for g, s in sorted(r["groups_s"].items(), key=lambda kv: -kv[1]))
    print(f"{task:5s} {dtype:9s} {r['cpu_s']:.1f} CPU s unprofiled; profiled operators: {shares}", flush=True)


def _show_task(task: str, f: dict, b: dict) -> None:
    f, b = f["groups_s"], b["groups_s"]
    print(f"{task}: float32 / bfloat16 per group: " + ", ".join(f"{g} {f[g] / b[g]:.2f}x" for g in f if b.get(g)))


def main(argv=None) -> int:
    from precision_speed import grid_main

    return grid_main(argv, __doc__, "patch-profile", __file__, child_main, _show_row, _show_task)

if __name__ == "__main__":
    sys.exit(main())
