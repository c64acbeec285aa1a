"""`batch_size="auto"` and the memory check before a run: the planner (interp.models.memory) on a loaded model.

Every analysis that takes a batch size takes "auto" too and resolves it here, from the model and the work it
planned (its lengths, how many rows, what it keeps). The budget is `model.max_memory`'s entry for the model's
device (cpu, or the CUDA index) when set (`LoadOptions.max_memory`, the CLI's --max-memory), else the free
memory of the device measured now plus the loaded weights; either way x SAFETY (0.9: the planner does not
count the allocator's slack). "auto" takes the largest batch whose planned peak fits (at most the number of
rows) or refuses, before any work, with the bytes batch 1 needs. A batch size given while `model.max_memory`
is set is checked against the budget the same way and refused with the largest batch that fits; without it,
it is used as given. A model spread over devices (a device map) takes a given batch size only.

The choice is said on the `interp.batch` logger (INFO): "batch size auto: N (planned peak ...)".
"""

from __future__ import annotations

import logging

from interp.errors import InvalidInputError

AUTO = "auto"
log = logging.getLogger("interp.batch")


def _device_key(device):
    return (device.index or 0) if device.type == "cuda" else "cpu"


def budget_of(model, max_memory: dict | None) -> tuple[int, str]:
    """(bytes a run on `model` may plan to use, where the number comes from)."""
    import torch

    from interp.runtime.devices import SAFETY, default_budget

    dev = model.device
    if max_memory:
        from accelerate.utils import convert_file_size_to_int

        key = _device_key(dev)
        if key not in max_memory:
            raise InvalidInputError(f"--max-memory gives no entry for the model's device {dev} (add "
                                    f"{key}=SIZE, e.g. {key}=20GiB)")
        size = max_memory[key]
        total = size if isinstance(size, int) else convert_file_size_to_int(size)
        return int(total * SAFETY), f"{SAFETY:g} x --max-memory {key}={size}"
    weights = sum(p.numel() * p.element_size() for p in model.hf.parameters() if p.device.type == dev.type)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return default_budget(dev) + weights, f"{SAFETY:g} x the free memory of {dev} + the loaded weights"


def batch_for(model, batch_size, analysis: str, lengths, *, n_rows: int, max_memory: dict | None = None,
              device_map=None, **plan_kw) -> int:
    """The batch size a run uses: `batch_size` as given (checked when `max_memory` gives a budget), or for
    "auto" the planner's pick (module docstring). `plan_kw` go to `interp.models.memory.estimate` (new_tokens,
    logits, rows, sites, store_dtype)."""
    from interp.models.memory import estimate, gib, pick_batch_size

    if batch_size != AUTO and not max_memory:
        return int(batch_size)
    if device_map is not None:
        if batch_size == AUTO:
            raise InvalidInputError("--batch-size auto plans the memory of one device; with --device-map (layers "
                                    "over several devices) give --batch-size N")
        return int(batch_size)
    budget, source = budget_of(model, max_memory)
    dtype = next(model.hf.parameters()).dtype
    lengths = [int(x) for x in lengths]
    config = model.hf.config
    if batch_size == AUTO:
        b = pick_batch_size(budget, config, lengths, dtype, analysis, max_batch=max(1, n_rows), **plan_kw)
        plan = estimate(config, max(lengths), b, dtype, analysis, **plan_kw)
        log.info(f"batch size auto: {b} (planned peak {gib(plan.peak)} at {max(lengths)} tokens; budget "
                 f"{gib(budget)} = {source})")
        return b
    plan = estimate(config, max(lengths), int(batch_size), dtype, analysis, **plan_kw)
    if plan.peak > budget:
        fits = pick_batch_size(budget, config, lengths, dtype, analysis, **plan_kw)
        raise InvalidInputError(f"--batch-size {batch_size} needs {gib(plan.peak)} at {max(lengths)} tokens (planned); "
                                f"the budget is {gib(budget)} ({source}): use --batch-size {fits} or auto")
    return int(batch_size)


def resolve_batch_size(model, batch_size, analysis: str, lengths, n_rows: int, **plan_kw) -> int:
    """`batch_for` with the model's own budget (`model.max_memory`) and device map (a model loaded with one)."""
    return batch_for(model, batch_size, analysis, lengths, n_rows=n_rows, max_memory=getattr(model, "max_memory", None),
                     device_map=getattr(model, "device_map", None) or getattr(model.hf, "hf_device_map", None),
                     **plan_kw)


def niah_batch(model, batch_size, niah, analysis: str = "ablate") -> int:
    """The batch size of a NIAH run (one length per batch: at most depths x seeds prompts; decoding up to
    `max_new_tokens`, else 16 new tokens)."""
    return resolve_batch_size(model, batch_size, analysis, niah.context_lengths, len(niah.depths) * niah.n_seeds,
                              new_tokens=niah.max_new_tokens or 16)


def experiment_batch(model, batch_size, niah, task, detecting: bool) -> int:
    """The batch size of a head experiment (ablate, rope-zero, a head curve): NIAH (`task` None) or a PromptTask
    scored on every position's logits, and the retrieval detection run first when `detecting` (NIAH, with
    attention rows): a batch fitting all."""
    sizes = []
    if detecting:
        sizes.append(niah_batch(model, batch_size, niah, "detect"))
    if task is None:
        sizes.append(niah_batch(model, batch_size, niah, "ablate"))
    else:
        sizes.append(resolve_batch_size(model, batch_size, "ablate", [max(len(x) for x in task.inputs())], task.n,
                                        logits="all"))
    return min(sizes)
