"""`--batch-size auto` and the memory check before a run: the planner (interp.models.memory) on the loaded model.

The budget is `--max-memory`'s entry for the model's device (cpu, or the CUDA index) when given, else the
free memory of the device measured after the model loaded plus the loaded weights; either way x SAFETY
(0.9: the planner does not count the allocator's slack). `auto` takes the largest batch whose planned
peak fits (at most the number of prompts) or refuses, before any work, with the bytes batch 1 needs. A
batch size given with `--max-memory` is checked against the budget the same way and refused with the
largest batch that fits; without `--max-memory` it is used as given.
"""

from __future__ import annotations


from interp.cli.options import AUTO
from interp.cli.runs import current
from interp.errors import InvalidInputError

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
    """The batch size a command runs with: `batch_size` as given (checked when a budget is given), or for
    `auto` the planner's pick (module docstring). `plan_kw` go to `interp.models.memory.estimate` (new_tokens,
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
        from interp.cli.output import console

        console().print(f"batch size auto: {b} (planned peak {gib(plan.peak)} at {max(lengths)} tokens; budget "
                        f"{gib(budget)} = {source})", highlight=False, soft_wrap=True)
        return b
    plan = estimate(config, max(lengths), int(batch_size), dtype, analysis, **plan_kw)
    if plan.peak > budget:
        fits = pick_batch_size(budget, config, lengths, dtype, analysis, **plan_kw)
        raise InvalidInputError(f"--batch-size {batch_size} needs {gib(plan.peak)} at {max(lengths)} tokens (planned); "
                                f"the budget is {gib(budget)} ({source}): use --batch-size {fits} or auto")
    return int(batch_size)


def resolve(model, batch_size, analysis: str, lengths, n_rows: int, **plan_kw) -> int:
    """`batch_for` with this CLI call's --max-memory and --device-map."""
    return batch_for(model, batch_size, analysis, lengths, n_rows=n_rows, max_memory=current().max_memory,
                     device_map=current().device_map, **plan_kw)


def niah_batch(model, batch_size, niah, analysis: str = "ablate") -> int:
    """The batch size of a NIAH run (one length per batch: at most depths x seeds prompts; decoding up to
    --max-new-tokens, else 16 new tokens)."""
    return resolve(model, batch_size, analysis, niah.context_lengths, len(niah.depths) * niah.n_seeds,
                   new_tokens=niah.max_new_tokens or 16)


def experiment_batch(model, batch_size, niah, task, detecting: bool) -> int:
    """The batch size of ablate / rope-zero: NIAH (`task` None) or --prompts scored on every position's logits,
    and the retrieval detection run first when `detecting` (NIAH, with attention rows): a batch fitting all."""
    sizes = []
    if detecting:
        sizes.append(niah_batch(model, batch_size, niah, "detect"))
    if task is None:
        sizes.append(niah_batch(model, batch_size, niah, "ablate"))
    else:
        sizes.append(resolve(model, batch_size, "ablate", [max(len(x) for x in task.inputs())], task.n, logits="all"))
    return min(sizes)
