"""`--batch-size N|auto`: the library resolves it (interp.models.batching, from the model's `max_memory` that
`open_run` sets from --max-memory); these names serve the commands that still size their batches here."""

from __future__ import annotations

from interp.models.batching import batch_for, budget_of, experiment_batch, niah_batch
from interp.models.batching import resolve_batch_size as resolve

__all__ = ["batch_for", "budget_of", "experiment_batch", "niah_batch", "resolve"]
