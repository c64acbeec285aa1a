"""What bench/store.py and bench/store_model.py share: their fresh-process runner, the np.save baselines' write
of one file, and the store variants' writer options (a variant's name, e.g. store-serial-sha256, as StoreWriter
keyword arguments)."""

from __future__ import annotations

import os
from pathlib import Path

from _common import ROOT, run_child


def run_store_child(spec: dict, script: str | Path, timeout: float = 1800, stream: bool = False) -> dict:
    """A store measurement in a fresh process (bench/_common.run_child). glibc's dynamic mmap threshold makes RSS
    depend on allocation history; pinning it makes large buffers go back to the OS when freed, so the peak RSS
    measures live memory."""
    env = {**os.environ, "OMP_NUM_THREADS": str(spec.get("threads", 1)), "OPENBLAS_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
    return run_child(spec, timeout, script, env=env, stream=stream, cwd=ROOT)


def save_npy(path: Path, arr, fsync: bool) -> None:
    """The np.save baselines' write of one file; with `fsync` the durability the store pays for."""
    import numpy as np

    np.save(path, arr)
    if fsync:
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def writer_options(how: str) -> dict:
    """StoreWriter's checksum options for a store variant: `store` (CRC-32 in a second thread, the default),
    `store-nosum` (no checksum), `store-serial` (computed in the writing thread), `store-ALGO` (another one)."""
    opts = how.split("-")[1:]
    algo = ([o for o in opts if o != "serial"] or ["crc32"])[0]
    return {"checksum": None if algo == "nosum" else algo, "checksum_thread": "serial" not in opts}
