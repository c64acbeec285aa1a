"""What a run cost: wall and CPU seconds since a clock started, and torch's thread count. run.json records it
for every run folder (interp.runtime.runs: every CLI run and every organisms sweep)."""

from __future__ import annotations

import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Clock:
    """Starts when made; `compute()` reads it."""

    started: tuple[float, float] = field(default_factory=lambda: (time.perf_counter(), time.process_time()))

    def compute(self) -> dict:
        """Wall and CPU seconds so far (CPU: every thread of this process, so with N busy threads about
        N x wall), torch's thread count (None when torch was never imported) and the CPU's model name (CPU
        seconds, and what bfloat16 gains, differ between CPUs)."""
        wall, cpu = time.perf_counter() - self.started[0], time.process_time() - self.started[1]
        torch = sys.modules.get("torch")
        return {"wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1),
                "torch_threads": torch.get_num_threads() if torch is not None else None, "cpu": cpu_model()}


def cpu_model(cpuinfo: str | None = None) -> str | None:
    """The CPU's model name ("model name" in /proc/cpuinfo; `platform.processor()` where there is none, None when
    that is empty too): CPU seconds and bfloat16 speed-ups are only comparable on the same CPU. `cpuinfo` replaces
    the real /proc/cpuinfo (tests)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
        except OSError:
            cpuinfo = ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "model name" and value.strip():
            return value.strip()
    return platform.processor() or None
