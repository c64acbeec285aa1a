"""The one runner: evaluate conditions on a task in batches, each distinct condition once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from interp.errors import InvalidInputError
from interp.experiments.conditions import Condition
from interp.experiments.tasks import Task


@dataclass
class Outcomes:
    """Per-sample metric arrays of every condition: `values[condition][metric] -> np.ndarray[n]`."""

    task: Task
    conditions: list[Condition]
    values: dict[str, dict[str, np.ndarray]]
    n_evaluated: int  # distinct conditions actually run

    def __getitem__(self, name: str) -> dict[str, np.ndarray]:
        return self.values[name]

    def condition(self, name: str) -> Condition:
        for c in self.conditions:
            if c.name == name:
                return c
        raise KeyError(name)

    def names(self, role: str | None = None) -> list[str]:
        return [c.name for c in self.conditions if role is None or c.role == role]


def run_conditions(model, task: Task, conditions: Sequence[Condition], batch_size: int = 8,
                   progress: Callable[[int], None] | None = None, known: dict | None = None,
                   **evaluate_kw) -> Outcomes:
    """Evaluate every condition on the same samples of `task` (paired). Conditions with equal `key`
    (the same interventions) are evaluated once and share their arrays; progress still advances by
    `task.n` per condition, so bars stay in step with the planned count. `known` maps condition names
    to arrays already computed on this task (e.g. the clean pass of a detector), used instead of a
    run (and for every condition with the same key)."""
    if batch_size < 1:
        raise InvalidInputError("batch_size must be >= 1")
    if len(conditions) > 1 and task.n < 2:
        raise InvalidInputError(f"{task.n} sample(s): paired comparisons between conditions need at least 2 "
                                "(more seeds, lengths, depths or prompts)")
    names = [c.name for c in conditions]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InvalidInputError(f"condition names must be unique; repeated: {', '.join(dup)}")
    done: dict[str, dict[str, np.ndarray]] = {}
    by_name = {c.name: c for c in conditions}
    for name, arrays in (known or {}).items():
        if name not in by_name:
            raise InvalidInputError(f"known outcomes for {name!r}, which is not a condition")
        done[by_name[name].key] = {m: np.asarray(a) for m, a in arrays.items()}
    values = {}
    for c in conditions:
        key = c.key
        if key in done:
            if progress is not None:
                progress(task.n)
        else:
            done[key] = task.evaluate(model, c.interventions, batch_size=batch_size, progress=progress,
                                      **evaluate_kw)
        values[c.name] = done[key]
    return Outcomes(task, list(conditions), values, len(done) - len(known or {}))
