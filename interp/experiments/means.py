"""Reference means for mean ablation, computed in one place, on prompts disjoint from the evaluated ones."""

from __future__ import annotations

import torch

from interp.errors import InvalidInputError


def mean_head_outputs(model, batches, batch_size: int | None = None) -> torch.Tensor:
    """Mean per-head output (o_proj input) over the real tokens of (ids, mask) batches:
    [n_layers, n_heads, head_dim], the `means` of AblateHeads(mode="mean")."""
    from interp.hooks.capture import head_output_means

    total, count = None, 0.0
    for ids, mask in batches:
        n = float(mask.sum())
        m = head_output_means(model, ids, mask, batch_size=batch_size) * n
        total = m if total is None else total + m
        count += n
    if total is None or count == 0:
        raise InvalidInputError("reference means need at least one reference token")
    return total / count


def reference_means(model, task, batch_size: int | None = None) -> tuple[torch.Tensor, str]:
    """(means, note): mean head outputs over the task's reference prompts and what they were."""
    batches = task.reference_batches(model)
    return mean_head_outputs(model, batches, batch_size), getattr(task, "reference_note", "reference prompts")
