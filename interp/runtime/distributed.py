"""Sweeps sharded over processes with torch.distributed, and resumable from per-unit files.

A sweep is cut into *units*: the batches of a task's prompts (NIAH decoding, teacher-forced prompts)
and the chunks of patched rows of activation patching, in an order every process computes the same
way (it depends on the prompts and the batch size only). `map_units(name, n, fn)` evaluates
`fn(i)` for every unit:

* one process (the default): every unit in turn;
* under `torchrun --nproc-per-node N` (or `accelerate launch`, which sets the same environment):
  unit i runs on rank i % N; the results are gathered to every rank with
  `torch.distributed.all_gather_object`, so every rank holds the same outcomes, computes the same
  statistics, and rank 0 alone writes the result. A unit is a whole batch, computed with exactly the
  shapes the single process uses, so the numbers are the same as a one-process run (on CPU,
  bit-identical; tests/runtime/test_distributed.py compares them);
* inside a `sweep(folder)` (the CLI opens one per run): each finished unit is also written to
  `folder/CALL-NAME-KEY/UNIT.json` (atomically), and a rerun of the same command reads it back
  instead of computing it, so a killed sweep resumes without redoing finished units, whatever the
  world size of either run. The files hold exact values (arrays as raw bytes, floats by repr).

The process group is torch's own (`init_process_group`, env:// rendezvous from torchrun): gloo
for the CPU collectives, with nccl added for CUDA tensors when CUDA is present.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from interp.runtime import interrupt


@dataclass(frozen=True)
class World:
    """This process's place: `rank` of `size` processes (0 of 1 without a launcher)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def main(self) -> bool:
        return self.rank == 0


def launched() -> bool:
    """True when a launcher (torchrun, accelerate launch, srun + torchrun) started several processes."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def world() -> World:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0") or 0),
                     str(dist.get_backend()))
    return World()


def init() -> World:
    """Join the process group the launcher describes (RANK, WORLD_SIZE, MASTER_ADDR/PORT), once. Gloo
    carries the gathered results (CPU objects); nccl is added for CUDA tensors where CUDA exists."""
    import datetime

    import torch
    import torch.distributed as dist

    if not launched() or (dist.is_available() and dist.is_initialized()):
        return world()
    from interp.errors import InvalidInputError

    if not dist.is_available():
        raise InvalidInputError("this PyTorch build has no torch.distributed: run one process (no torchrun)")
    missing = [v for v in ("RANK", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        raise InvalidInputError(f"WORLD_SIZE={os.environ['WORLD_SIZE']} but {', '.join(missing)} not set: start "
                                "the processes with torchrun (or accelerate launch), or unset WORLD_SIZE")
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    minutes = float(os.environ.get("INTERP_DIST_TIMEOUT_MIN", "120"))
    if torch.cuda.is_available():  # more ranks than GPUs share them round-robin, as resolve_device places them
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(minutes=minutes))
    return world()


def local_cuda_index() -> int | None:
    """The CUDA device of this rank under a launcher (LOCAL_RANK), None for a single process."""
    if not launched():
        return None
    try:
        return int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        return None


def replica_gpus(n_gpus: int, local_rank: int, local_world: int) -> list[int]:
    """The GPUs of one model copy when `local_world` ranks of a node share its `n_gpus` GPUs (model parallel
    inside each replica): rank r gets the r-th of `local_world` equal, contiguous slices."""
    from interp.errors import InvalidInputError

    if local_world < 1 or not 0 <= local_rank < local_world:
        raise InvalidInputError(f"LOCAL_RANK {local_rank} of LOCAL_WORLD_SIZE {local_world} is not a rank")
    k = n_gpus // local_world
    if k < 1:
        raise InvalidInputError(f"{local_world} processes per node but {n_gpus} GPU(s): with --device-map each rank "
                                "needs at least one GPU of its own (lower --nproc-per-node)")
    return list(range(local_rank * k, (local_rank + 1) * k))


def replica_max_memory(max_memory: dict | None, gpus: list[int], free: dict[int, int], cpu_share: int) -> dict:
    """accelerate's max_memory for one replica: only its `gpus` (the user's size where --max-memory gives one,
    else the GPU's free memory), plus the user's cpu/disk entries (cpu: `cpu_share`, this rank's part of the
    free RAM, when not given). GPUs outside the slice are not listed, so accelerate never places this copy's
    layers on another rank's GPUs."""
    mm = dict(max_memory or {})
    out = {g: mm.get(g, free[g]) for g in gpus}
    out.update({k: v for k, v in mm.items() if isinstance(k, str)})
    out.setdefault("cpu", cpu_share)
    return out


def finish() -> None:
    """Leave the process group (end of a CLI call), so every rank exits cleanly."""
    import sys

    if "torch.distributed" not in sys.modules:  # never imported: no process group (and no slow import now)
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# ---- exact, JSON-based unit files ---------------------------------------------------------------
def _enc(x):
    if isinstance(x, np.ndarray):
        a = np.ascontiguousarray(x)
        return {"__nd__": a.dtype.str, "shape": list(a.shape), "b64": base64.b64encode(a.tobytes()).decode()}
    if isinstance(x, np.generic):
        return {**_enc(np.asarray(x)), "scalar": True}
    if isinstance(x, float) and not np.isfinite(x):
        return {"__float__": repr(x)}
    if isinstance(x, dict):
        if not all(isinstance(k, str) for k in x):
            raise TypeError("unit results: dict keys must be strings")
        return {"__dict__": {k: _enc(v) for k, v in x.items()}}
    if isinstance(x, (list, tuple)):
        return [_enc(v) for v in x]
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise TypeError(f"unit results must be arrays, numbers, strings, lists or dicts, not {type(x).__name__}")


def _dec(x):
    if isinstance(x, list):
        return [_dec(v) for v in x]
    if isinstance(x, dict):
        if "__nd__" in x:
            a = np.frombuffer(base64.b64decode(x["b64"]), dtype=np.dtype(x["__nd__"])).reshape(x["shape"]).copy()
            return a[()] if x.get("scalar") else a
        if "__float__" in x:
            return float(x["__float__"])
        return {k: _dec(v) for k, v in x["__dict__"].items()}
    return x


def normalize(result):
    """The value a unit file gives back (lists for tuples, exact numbers): fresh results take the same form,
    so a resumed run and an uninterrupted one hold the same objects."""
    return _dec(json.loads(json.dumps(_enc(result))))


# ---- sweeps --------------------------------------------------------------------------------------
@dataclass
class Sweep:
    """The units of one run: where their files go (None: not kept) and what happened to them."""

    folder: Path | None = None
    calls: int = 0
    units: int = 0
    computed: int = 0  # over every rank
    reused: int = 0  # read back from unit files of an earlier, interrupted run
    touched: list = field(default_factory=list)  # unit folders this process used

    def summary(self) -> dict:
        w = world()
        return {"world_size": w.size, "units": self.units, "computed": self.computed, "reused": self.reused}


_SWEEP: Sweep | None = None


def current() -> Sweep | None:
    return _SWEEP


@contextmanager
def sweep(folder: str | Path | None = None):
    """Collect `map_units` calls into one sweep whose finished units are kept in `folder` (resume)."""
    global _SWEEP
    prev, _SWEEP = _SWEEP, Sweep(Path(folder) if folder is not None else None)
    try:
        yield _SWEEP
    finally:
        _SWEEP = prev


def begin(folder: str | Path | None) -> Sweep:
    """Start the sweep of a CLI call (see `sweep`); `end` closes it."""
    global _SWEEP
    _SWEEP = Sweep(Path(folder) if folder is not None else None)
    return _SWEEP


def end(ok: bool) -> dict | None:
    """Close the CLI call's sweep. ok: its unit files are deleted (the result holds them now); otherwise they
    stay for a rerun to resume from. Returns the sweep's summary (None without a sweep)."""
    global _SWEEP
    s, _SWEEP = _SWEEP, None
    if s is None:
        return None
    if ok and s.folder is not None:
        import shutil

        for d in s.touched:
            shutil.rmtree(d, ignore_errors=True)
        top = s.folder
        for d in (top, top.parent):
            try:
                d.rmdir()
            except OSError:
                pass
    return s.summary()


def fingerprint(*seqs) -> str:
    """sha256 of integer sequences (token ids, row indices), as raw int64 bytes with their lengths: what a
    unit key says about the prompts and rows it covers, without writing them out as text."""
    h = hashlib.sha256()
    for group in seqs:
        for x in group:
            a = np.asarray(x, dtype=np.int64).reshape(-1)
            h.update(len(a).to_bytes(8, "little"))
            h.update(a.tobytes())
        h.update(b"|")
    return h.hexdigest()


def _key(name: str, key: str) -> str:
    return hashlib.sha256(f"{name}\0{key}".encode()).hexdigest()[:12]


def map_units(name: str, n: int, fn: Callable[[int], Any], key: str = "",
              progress: Callable[[int], None] | None = None, sizes=None) -> list:
    """[fn(0), ..., fn(n-1)], sharded over the ranks and resumed from unit files (module docstring).

    `name` and `key` (text that fixes what the units compute, e.g. the interventions' description) name
    the units' folder together with the call's position in the run. `fn` returns arrays, numbers,
    strings, lists and dicts (see `normalize`). `progress(sizes[i])` is called for units computed
    elsewhere (read back, or on other ranks); `fn` reports its own."""
    import torch.distributed as dist

    w = world()
    s = _SWEEP
    sizes = list(sizes) if sizes is not None else [1] * n
    if s is None and w.size == 1:
        return [normalize(fn(i)) for i in range(n)]
    folder = None
    if s is not None:
        s.calls += 1
        s.units += n
        if s.folder is not None:
            folder = s.folder / f"{s.calls:03d}-{name}-{_key(name, key)}"
            s.touched.append(folder)
    mine: dict[int, Any] = {}
    computed = reused = 0
    for i in range(w.rank, n, w.size):
        interrupt.check()  # a Ctrl-C swallowed somewhere inside the last unit stops the sweep here
        f = folder / f"{i:05d}.json" if folder is not None else None
        value = _read(f, name, key) if f is not None else None
        if value is not None:
            mine[i] = value[0]
            reused += 1
            if progress is not None:
                progress(sizes[i])
            continue
        mine[i] = normalize(fn(i))
        computed += 1
        if f is not None:
            _write(f, name, key, i, mine[i], w)
    if w.size > 1:
        parts: list = [None] * w.size
        dist.all_gather_object(parts, (mine, computed, reused))
        every = {}
        computed = reused = 0
        for m, c, r in parts:
            every.update(m)
            computed += c
            reused += r
        if progress is not None:
            done = sum(sizes[i] for i in every if i not in mine)
            if done:
                progress(done)
    else:
        every = mine
    if s is not None:
        s.computed += computed
        s.reused += reused
    return [every[i] for i in range(n)]


def _read(f: Path, name: str, key: str):
    """(value,) from a unit file of the same units, or None (absent, damaged, other units)."""
    try:
        d = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or d.get("name") != name or d.get("key") != _key(name, key):
        return None
    try:
        return (_dec(d["value"]),)
    except (KeyError, ValueError, TypeError):
        return None


def _write(f: Path, name: str, key: str, i: int, value, w: World) -> None:
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_name(f".{f.name}.{os.getpid()}.partial")
    tmp.write_text(json.dumps({"name": name, "key": _key(name, key), "unit": i, "rank": w.rank, "pid": os.getpid(),
                               "value": _enc(value)}), encoding="utf-8")
    os.replace(tmp, f)
