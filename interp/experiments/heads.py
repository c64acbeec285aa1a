"""How much every head writes into the residual stream (so weak controls are visible). Which heads an
experiment targets is the analyses layer's business (interp.analyses.heads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from interp.sites import as_heads

@dataclass
class WriteNorms:
    """[layer][head] mean ||W_O,h z_h|| over the real tokens of the first prompts (see capture.head_write_norms)."""

    norms: np.ndarray
    n_prompts: int

    @property
    def median(self) -> float:
        return float(np.median(self.norms))

    def relative(self, heads: Sequence) -> float | None:
        """Mean write norm of `heads` (HeadIds, "L3H1" strings or (layer, head) pairs) relative to the model's
        median head (None for no heads)."""
        heads = as_heads(heads)
        if not heads or self.median <= 0:
            return None
        return float(np.mean([self.norms[h.layer, h.head] for h in heads]) / self.median)

    def as_list(self) -> list:
        return [[round(float(v), 6) for v in row] for row in self.norms]


def write_norms(model, inputs: Sequence[Sequence[int]], batch_size: int = 8) -> WriteNorms:
    from interp.hooks.capture import head_write_norms

    b = model.pad(list(inputs))
    return WriteNorms(head_write_norms(model, b, batch_size=batch_size).numpy(), len(inputs))


def control_write_strength(controls, writes: WriteNorms, min_rel: float = 0.5) -> dict:
    """How strong a set of random controls is: its head sets (distinct, in draw order), each set's mean write
    norm relative to the median head (`WriteNorms.relative`, the `head_write_rel` of `interp ablate`'s
    conditions) and how many reach `min_rel`. `controls` is a `Controls` (`random_head_controls`)."""
    rows = [{"heads": [str(h) for h in sorted(c.heads)], "head_write_rel": writes.relative(c.heads), "draws": 1}
            for c in controls.conditions]
    strong = [r for r in rows if r["head_write_rel"] is not None and r["head_write_rel"] >= min_rel]
    return {"pool": controls.pool, "n_draws": controls.requested or len(controls.conditions), "distinct_sets": len(rows),
            "strong_sets": len(strong), "min_rel": min_rel, "shortfall_by_layer": dict(controls.shortfall_by_layer),
            "median_write_norm": writes.median, "write_prompts": writes.n_prompts, "sets": rows}
