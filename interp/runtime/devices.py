"""The machine's devices and free memory: which torch.device a name means, the RAM available, and the
memory budget a run may plan with."""

from __future__ import annotations

import torch

from interp.errors import InvalidInputError

SAFETY = 0.9  # fraction of the free memory a run may plan to use (the rest: allocator slack, context, Python)


def resolve_device(device) -> torch.device:
    """A torch.device the machine has, or InvalidInputError saying what to pass instead."""
    if isinstance(device, torch.device):
        device = str(device)
    from interp.runtime.distributed import local_cuda_index

    rank_gpu = local_cuda_index()  # under torchrun: each rank its own GPU (LOCAL_RANK)
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda", rank_gpu % torch.cuda.device_count()) if rank_gpu is not None else \
                torch.device("cuda")
        return torch.device("cpu")
    if rank_gpu is not None and str(device).strip() == "cuda" and torch.cuda.is_available():
        return torch.device("cuda", rank_gpu % torch.cuda.device_count())
    hint = "use cpu, cuda, cuda:N (or mps on Apple silicon)"
    try:
        d = torch.device(str(device).strip())
    except (RuntimeError, TypeError, ValueError):
        raise InvalidInputError(f"unknown device {device!r}: {hint}") from None
    if d.type == "cuda":
        if not torch.cuda.is_available():
            raise InvalidInputError(f"device {device!r} requested but CUDA is not available here; use --device cpu")
        if d.index is not None and d.index >= torch.cuda.device_count():
            raise InvalidInputError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s) "
                                    f"(cuda:0..cuda:{torch.cuda.device_count() - 1})")
    elif d.type == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise InvalidInputError(f"device {device!r}: this PyTorch build has no usable MPS backend; use --device cpu")
    elif d.type != "cpu":
        raise InvalidInputError(f"device type {d.type!r} is not supported by interp: {hint}")
    return d


def available_ram() -> int:
    """MemAvailable of /proc/meminfo (Linux), else the total physical memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def default_budget(device=None, safety: float = SAFETY) -> int:
    """The bytes a run may plan to use: `safety` x the free memory of `device` (CUDA: torch.cuda.mem_get_info;
    CPU: MemAvailable)."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        return int(free * safety)
    return int(available_ram() * safety)
