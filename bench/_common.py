"""Helpers the benchmark scripts share: device sync and the /proc memory counters of a child process."""

from __future__ import annotations


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
