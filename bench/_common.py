"""The harness every benchmark script here shares: one measurement per fresh child process (`run_child`, its
`RESULT {json}` line), peak memory of a `with` body (`PeakMemory`), the arguments and defaults every
subprocess benchmark takes (device, threads, memory budget, output), machine facts recorded with each
result, and the result file. A benchmark script holds only its own children, parts and report."""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
GiB = 1024 ** 3
MiB = 1024 ** 2


def sync(device: str) -> None:
    """Wait for queued CUDA work (timings stop when the GPU is done); nothing on CPU."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def proc_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (VmRSS, VmHWM, ...)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def setup_torch(threads: int):
    """torch with `threads` intra-op threads (0: torch's default)."""
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    return torch


def torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


class PeakMemory:
    """Peak memory added by the body of a `with`, in bytes: on CUDA torch.cuda.max_memory_allocated minus the
    allocation before; on CPU the rise of the resident set (VmHWM after resetting it through
    /proc/self/clear_refs, minus VmRSS before). `method` says which was measured."""

    def __init__(self, device: str):
        self.device = device
        self.method = None
        self.peak = None

    def __enter__(self):
        gc.collect()
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            self.method = "torch.cuda.max_memory_allocated"
        else:
            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")  # reset VmHWM to the current RSS
                self.method = "VmHWM-VmRSS (clear_refs reset)"
            except OSError:
                self.method = "VmHWM-VmRSS (no reset: includes earlier peaks)"
            self.base = proc_kib("VmRSS") * 1024
        return self

    def __exit__(self, *exc):
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() - self.base
        else:
            self.peak = max(0, proc_kib("VmHWM") * 1024 - self.base)
        return False


def run_child(spec: dict, timeout: float, script: str | Path, env: dict | None = None, stream: bool = False,
              cwd: str | Path | None = None) -> dict:
    """Run `script --_child SPEC` in a fresh process and return its `RESULT {json}` line, or {"error": ...}
    (timeout, crash, out of memory). `env` defaults to this environment with OMP threads from the spec;
    `stream` passes the child's stderr through (progress of long children)."""
    cmd = [sys.executable, str(Path(script).resolve()), "--_child", json.dumps(spec)]
    if env is None:
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        if spec.get("threads", 0) > 0:
            env["OMP_NUM_THREADS"] = str(spec["threads"])
    try:
        p = subprocess.run(cmd, check=False, stdout=subprocess.PIPE, stderr=None if stream else subprocess.PIPE,
                           text=True, timeout=timeout, env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = (p.stderr or p.stdout or "").strip().splitlines()[-3:]
    reason = "killed (out of memory?)" if p.returncode in (-9, 137) else f"exit {p.returncode}"
    return {"error": f"{reason}: {' | '.join(tail)}"}


def print_progress(e: dict, label: str, measured: Callable[[dict], str]) -> None:
    """One line per finished child: skipped, error, or `measured(e)`."""
    if "skipped" in e:
        msg = f"skipped ({e['skipped']})"
    elif "error" in e:
        msg = f"ERROR {e['error']}"
    else:
        msg = measured(e)
    print(f"  [ctx {e['ctx']:>5}] {label} {msg}", flush=True)


def print_skips_and_errors(entries, label_key: str, budget_gb: float) -> None:
    """One line per skipped (over the memory budget) or failed measurement."""
    for e in entries:
        if "skipped" in e:
            print(f"   ctx {e['ctx']} {e[label_key]}: skipped (would need ~{e['estimate_bytes'] / GiB:.1f} GiB; "
                  f"budget {budget_gb:.1f} GiB)")
        if "error" in e:
            print(f"   ctx {e['ctx']} {e[label_key]}: {e['error']}")


def _meminfo_kib(field: str) -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def default_budget_gb(device: str) -> float:
    """The memory budget a measurement must fit: 0.8 x free on CUDA; on CPU min(8, 0.4 x MemAvailable)
    (shared machines: stay well below what is free)."""
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return 0.8 * free / GiB
    try:
        avail = _meminfo_kib("MemAvailable") * 1024
    except (OSError, RuntimeError):
        return 4.0
    return min(8.0, 0.4 * avail / GiB)


def add_common_args(ap: argparse.ArgumentParser, name: str, child_timeout: float) -> None:
    """Arguments every subprocess benchmark here takes (device, threads, memory budget, output)."""
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (CPU default 1: a fair, quiet single-core number; 0 = torch default)")
    ap.add_argument("--mem-budget-gb", type=float, default=None,
                    help="GiB; skip a measurement whose estimate exceeds this (CPU default: min(8, 0.4 x MemAvailable))")
    ap.add_argument("--child-timeout", type=float, default=child_timeout)
    ap.add_argument("--out", default=None, help=f"JSON path (default bench/results/{name}-<device>.json)")
    ap.add_argument("--_child", default=None, help=argparse.SUPPRESS)


def parse_and_setup(ap: argparse.ArgumentParser, argv, child_main):
    """Parse a benchmark's arguments. In a measurement subprocess run `child_main` and return
    (None, None); otherwise fill the device-dependent defaults (threads, memory budget), set up
    torch and return (args, torch)."""
    args = ap.parse_args(argv)
    if args._child is not None:
        child_main(json.loads(args._child))
        return None, None
    if args.threads is None:
        args.threads = 0 if args.device.startswith("cuda") else 1
    torch = setup_torch(args.threads)
    if args.mem_budget_gb is None:
        args.mem_budget_gb = default_budget_gb(args.device)
    return args, torch


def bench_env(args, torch) -> dict:
    """Package versions and machine facts recorded with every benchmark result."""
    import transformers

    from interp.runtime.cost import cpu_model
    from interp.runtime.precision import cpu_bf16_support

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "cpu_count": os.cpu_count(),
            "cpu": cpu_model(), "cpu_bf16": cpu_bf16_support()[1],  # which bfloat16 instructions the CPU has
            "torch_threads": torch.get_num_threads(), "machine": platform.machine(),
            "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],  # other processes sharing the cores
            "gpu": torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda") else None}


def write_result(res: dict, args, name: str) -> None:
    """Print the report's footer and write the result JSON (default bench/results/NAME-<device>.json)."""
    out = Path(args.out) if args.out else HERE / "results" / f"{name}-{args.device.split(':')[0]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"\ntotal {res['total_wall_s']:.0f} s; wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
