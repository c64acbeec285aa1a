"""Conditions: a name + interventions (+ what they mask), and the matched controls made by one function.

A `Condition`'s `key` says when two conditions are the same experiment (by default the
interventions' `describe()`), so the runner evaluates each distinct one once: coinciding random
draws are not decoded twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Sequence

from interp.errors import InvalidInputError
from interp.sites import HeadId

ROLES = ("baseline", "target", "control", "other")
RANDOM_POOLS = ("layer", "any")


@dataclass
class Condition:
    name: str
    interventions: tuple = ()
    role: str = "other"  # baseline | target | control | other
    heads: tuple[HeadId, ...] = ()  # the heads the condition acts on (for write norms and tables)
    info: dict = field(default_factory=dict)  # e.g. {"dims": [...], "dose": 8}

    def __post_init__(self):
        self.interventions = tuple(self.interventions)
        if self.role not in ROLES:
            raise InvalidInputError(f"condition role {self.role!r}: valid roles are {', '.join(ROLES)}")

    @property
    def key(self) -> str:
        return json.dumps([iv.describe() for iv in self.interventions], sort_keys=True, default=str)


def baseline() -> Condition:
    return Condition("baseline", (), role="baseline")


@dataclass
class Controls:
    """Matched random conditions with the bookkeeping every result carries."""

    conditions: list[Condition]  # one per distinct head set
    shortfall_by_layer: dict  # {layer: k}: k heads of that layer's share drawn from other layers
    pool: str
    requested: int = 0  # sets asked for
    possible: int | None = None  # distinct sets that exist (None: not counted, a layer's shortfall)
    excluded: list = field(default_factory=list)  # heads kept out of every set (besides the target)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.conditions]

    @property
    def distinct_draws(self) -> int:
        """The sets run: every one is distinct."""
        return len(self.conditions)

    @property
    def pooled_name(self) -> str:
        k = len(self.conditions)
        return f"random (mean of {k} set{'' if k == 1 else 's'})"

    def fewer(self) -> str | None:
        """"k of n random head sets: no more distinct ones" when fewer sets than asked exist, else None (a
        progress bar's reason for its smaller total)."""
        if len(self.conditions) >= self.requested:
            return None
        return f"{len(self.conditions)} of {self.requested} random head sets: no more distinct ones"

    def note(self) -> str | None:
        """Why there are fewer sets than asked, or None."""
        if len(self.conditions) >= self.requested:
            return None
        kind = "layer-matched " if self.pool == "layer" else ""
        exist = f"only {self.possible} distinct" if self.possible is not None else f"{len(self.conditions)} distinct"
        return (f"{exist} {kind}random head set(s) exist for these heads ({self.requested} asked): each is run once"
                + ("; --random-pool any draws the same count from every layer" if kind else ""))


def random_head_controls(target: Sequence, spec, make, draws: int, seed: int = 0, pool: str = "layer",
                         prefix: str = "random", exclude: Sequence = ()) -> Controls:
    """Up to `draws` distinct random head sets matched to `target` and one condition per set (fewer when fewer
    distinct sets exist: `Controls.note()` says so).

    pool="layer": the same count per layer, from the layer's other heads (spilling into the nearest
    layers when a layer has too few, recorded in `shortfall_by_layer`); pool="any": the same
    count from any layer. `make(heads)` returns the condition's interventions (e.g. AblateHeads).
    `exclude`: heads no control set may contain (e.g. heads that nearly pass the target's criterion).
    Heads (target and exclude) may be HeadIds, "L3H1" strings or (layer, head) pairs.
    """
    from interp import stats
    from interp.sites import as_heads

    if pool not in RANDOM_POOLS:
        raise InvalidInputError(f"random head pool must be 'layer' (matched per layer) or 'any', got {pool!r}")
    if draws < 0:
        raise InvalidInputError("draws must be >= 0")
    target, exclude = as_heads(target), as_heads(exclude)
    d = stats.matched_random_heads([(h.layer, h.head) for h in target], spec.n_layers, spec.n_heads,
                                   n_draws=draws, seed=seed, by_layer=pool == "layer",
                                   exclude=[(h.layer, h.head) for h in exclude])
    sets = [tuple(HeadId(l, h) for l, h in x) for x in d.draws]
    conds = [Condition(f"{prefix}-{i + 1}", make(hs), role="control", heads=hs) for i, hs in enumerate(sets)]
    return Controls(conds, {str(k): v for k, v in d.shortfall_by_layer.items()}, pool, draws, d.n_possible,
                    [str(h) for h in exclude])


def head_ablation(name: str, heads: Sequence, mode: str = "zero", means=None, role: str = "other"
                  ) -> Condition:
    """A condition masking `heads` (HeadIds, "L3H1" strings or (layer, head) pairs; none: the baseline's
    interventions)."""
    from interp.hooks.interventions import AblateHeads
    from interp.sites import as_heads

    heads = as_heads(heads)
    return Condition(name, (AblateHeads(heads, mode=mode, means=means),) if heads else (), role=role, heads=heads)
