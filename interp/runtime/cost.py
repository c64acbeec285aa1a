"""What a run cost: wall and CPU seconds since a clock started, and torch's thread count. run.json records it
for every run folder (interp.runtime.runs: every CLI run and every organisms sweep)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field


@dataclass
class Clock:
    """Starts when made; `compute()` reads it."""

    started: tuple[float, float] = field(default_factory=lambda: (time.perf_counter(), time.process_time()))

    def compute(self) -> dict:
        """Wall and CPU seconds so far (CPU: every thread of this process, so with N busy threads about
        N x wall), and torch's thread count (None when torch was never imported)."""
        wall, cpu = time.perf_counter() - self.started[0], time.process_time() - self.started[1]
        torch = sys.modules.get("torch")
        return {"wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1),
                "torch_threads": torch.get_num_threads() if torch is not None else None}
