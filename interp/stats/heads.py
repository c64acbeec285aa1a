"""Head sets: matched random draws (same per-layer counts) and threshold sweeps."""

from __future__ import annotations

import itertools
import math
import operator
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from interp.errors import InvalidInputError
from interp.stats._common import (_ToDict, _check_seed, _check_count)  # noqa: F401


@dataclass(frozen=True)
class MatchedDraws(_ToDict):
    """Random control head sets matched to a selection, layer by layer.

    draws: up to `n_draws` DISTINCT sorted lists of (layer, head) tuples, each as large as the selection (a
    control is a head set: a set drawn twice would count twice in a pooled control). Fewer than asked only
    when fewer distinct sets exist: `n_possible` is how many exist (None when a layer's shortfall makes the
    count not a product of binomials; then up to 100 draws per missing set are tried), `n_requested` how
    many were asked for.
    shortfall_by_layer: {layer: k} for every layer whose available heads (not selected, not
    excluded) were k fewer than the selection has there; those k heads were drawn from other
    layers' available heads, nearest layers first (equidistant layers above and below pooled,
    uniformly). Empty means every draw has exactly the selection's per-layer counts.
    selected_by_layer: the per-layer counts being matched. seed: the seed used.
    """

    draws: list
    shortfall_by_layer: dict
    seed: int
    selected_by_layer: dict = field(default_factory=dict)
    by_layer: bool = True  # False: drawn from all available heads, layers not matched
    n_requested: int = 0
    n_possible: int | None = None


def _as_pair(h: Any, n_layers: int, n_heads: int, what: str) -> tuple[int, int]:
    if hasattr(h, "layer") and hasattr(h, "head"):
        pair = (h.layer, h.head)
    elif isinstance(h, str):
        from interp.sites import HeadId

        hid = HeadId.parse(h)
        pair = (hid.layer, hid.head)
    else:
        try:
            pair = tuple(h)
        except TypeError:
            pair = ()
    try:
        if len(pair) != 2:
            raise TypeError
        lay, hd = operator.index(pair[0]), operator.index(pair[1])
    except TypeError:
        raise InvalidInputError(f"bad {what} head {h!r}: give heads as (layer, head) int tuples") from None
    if not (0 <= lay < n_layers and 0 <= hd < n_heads):
        raise InvalidInputError(
            f"{what} head {h!r} is outside the model: layers are 0..{n_layers - 1}, heads 0..{n_heads - 1}"
        )
    return int(lay), int(hd)


def matched_random_heads(selected: Iterable, n_layers: int, n_heads: int, n_draws: int, seed: int = 0,
                         exclude: Iterable | None = None, by_layer: bool = True) -> MatchedDraws:
    """Draw `n_draws` random head sets matched to `selected` layer by layer.

    With `by_layer=False` only the size is matched: each draw takes len(selected) heads uniformly
    from every available head of the model (a complement to the layer-matched control when a
    layer has few non-selected heads, so that the layer-matched draws coincide).

    Each draw has len(selected) heads, none of them in `selected` or `exclude`, with the same
    number of heads in every layer as `selected` - unless a layer has too few available heads:
    then all of that layer's available heads are taken and the rest ("shortfall", reported in
    `shortfall_by_layer`) comes from the nearest layers' remaining heads. Heads are (layer, head)
    tuples (HeadId and "L3H1" strings are accepted too). Draws are distinct sets, reproducible for a seed:
    a set that coincides with an earlier draw is drawn again, and when no more than `n_draws` distinct
    sets exist, every one of them is returned (fewer than asked; `n_possible` says how many exist).

    Raises InvalidInputError for heads outside [0, n_layers) x [0, n_heads), duplicate selected
    heads, or when fewer heads are available in total than are selected.
    """
    n_layers = _check_count("n_layers", n_layers)
    n_heads = _check_count("n_heads", n_heads)
    n_draws = _check_count("n_draws", n_draws, minimum=0)
    seed = _check_seed(seed)
    sel = [_as_pair(h, n_layers, n_heads, "selected") for h in selected]
    if len(set(sel)) != len(sel):
        dups = sorted({h for h in sel if sel.count(h) > 1})
        raise InvalidInputError(f"selected heads must be distinct; repeated: {dups}")
    exc = {_as_pair(h, n_layers, n_heads, "excluded") for h in (exclude or ())}
    blocked = set(sel) | exc

    need = np.zeros(n_layers, dtype=np.int64)
    for lay, _ in sel:
        need[lay] += 1
    avail = [np.array([h for h in range(n_heads) if (lay, h) not in blocked], dtype=np.int64)
             for lay in range(n_layers)]
    n_avail = sum(a.size for a in avail)
    if n_avail < len(sel):
        raise InvalidInputError(
            f"cannot draw {len(sel)} control heads: only {n_avail} heads are neither selected nor excluded"
        )
    own = np.minimum(need, [a.size for a in avail])
    short = need - own
    shortfall = {int(lay): int(short[lay]) for lay in range(n_layers) if short[lay] > 0}

    rng = np.random.default_rng(seed)
    selected_by_layer = {int(lay): int(need[lay]) for lay in range(n_layers) if need[lay] > 0}
    if not by_layer:
        pool_all = [(lay, int(h)) for lay in range(n_layers) for h in avail[lay]]
        possible = math.comb(len(pool_all), len(sel))
        if possible <= n_draws:
            every = [sorted(c) for c in itertools.combinations(pool_all, len(sel))]
        else:
            every = _distinct(lambda: sorted(pool_all[i] for i in rng.choice(len(pool_all), size=len(sel),
                                                                              replace=False)), n_draws)
        return MatchedDraws(draws=every, shortfall_by_layer={}, seed=seed, selected_by_layer=selected_by_layer,
                            by_layer=False, n_requested=n_draws, n_possible=possible)
    possible = None if shortfall else math.prod(math.comb(a.size, int(k)) for a, k in zip(avail, own))
    if possible is not None and possible <= n_draws:  # all of them, in a fixed order
        per_layer = [list(itertools.combinations([(lay, int(h)) for h in avail[lay]], int(own[lay])))
                     for lay in range(n_layers) if own[lay]]
        every = [sorted(x for part in combo for x in part) for combo in itertools.product(*per_layer)]
        return MatchedDraws(draws=every, shortfall_by_layer=shortfall, seed=seed,
                            selected_by_layer=selected_by_layer, n_requested=n_draws, n_possible=possible)

    def one() -> list[tuple[int, int]]:
        remaining = [a for a in avail]
        chosen: list[tuple[int, int]] = []
        for lay in range(n_layers):
            k = int(own[lay])
            if k == 0:
                continue
            pool = remaining[lay]
            pick = rng.choice(pool.size, size=k, replace=False)
            chosen.extend((lay, int(h)) for h in pool[pick])
            remaining[lay] = np.delete(pool, pick)
        for lay, s in shortfall.items():
            dist = 1
            while s > 0:
                near = [ly for ly in (lay - dist, lay + dist) if 0 <= ly < n_layers and remaining[ly].size]
                if near:
                    pool_l = np.concatenate([np.full(remaining[ly].size, ly) for ly in near])
                    pool_i = np.concatenate([np.arange(remaining[ly].size) for ly in near])
                    k = min(s, pool_l.size)
                    pick = rng.choice(pool_l.size, size=k, replace=False)
                    for ly in near:
                        idx = pool_i[pick][pool_l[pick] == ly]
                        chosen.extend((ly, int(h)) for h in remaining[ly][idx])
                        remaining[ly] = np.delete(remaining[ly], idx)
                    s -= k
                dist += 1
        return sorted(chosen)

    return MatchedDraws(draws=_distinct(one, n_draws), shortfall_by_layer=shortfall, seed=seed,
                        selected_by_layer=selected_by_layer, n_requested=n_draws, n_possible=possible)


def _distinct(draw, n: int, tries_per_set: int = 100) -> list:
    """Up to `n` distinct results of `draw()` (a set drawn again is redrawn), giving up after `tries_per_set`
    draws per set still missing."""
    out, seen, tries = [], set(), 0
    while len(out) < n and tries < tries_per_set * n:
        d = draw()
        tries += 1
        if tuple(d) not in seen:
            seen.add(tuple(d))
            out.append(d)
    return out


# --------------------------------------------------------------------------- 6. threshold sweep


def threshold_sweep(scores, thresholds: Sequence[float] | float) -> list[dict]:
    """How many heads score strictly above each threshold.

    scores: 2-D [layer, head] array. Returns one dict per threshold, in the given order:
    {"threshold": t, "n_heads": #heads with score > t, "fraction": n_heads / #non-NaN scores,
    "per_layer": [count for layer 0, 1, ...]}. NaN scores never count (comparison is False).
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2:
        raise InvalidInputError(f"scores must be a 2-D [layer, head] array, got shape {s.shape}")
    ts = np.atleast_1d(np.asarray(thresholds, dtype=np.float64))
    if ts.ndim != 1:
        raise InvalidInputError(f"thresholds must be a number or a 1-D sequence, got shape {ts.shape}")
    if np.any(np.isnan(ts)):
        raise InvalidInputError("thresholds contains NaN")
    n_finite = int(np.count_nonzero(~np.isnan(s)))
    out = []
    with np.errstate(invalid="ignore"):
        for t in ts:
            per_layer = np.count_nonzero(s > t, axis=1)
            total = int(per_layer.sum())
            out.append({
                "threshold": float(t),
                "n_heads": total,
                "fraction": total / n_finite if n_finite else 0.0,
                "per_layer": [int(c) for c in per_layer],
            })
    return out
