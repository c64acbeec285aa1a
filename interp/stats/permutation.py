"""Layer-clustered permutation test of a per-head statistic (labels permuted within layers)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from interp.errors import InvalidInputError
from interp.stats._common import (_BATCH_ELEMS, _ToDict, _check_seed, _check_count)  # noqa: F401


@dataclass(frozen=True)
class PermutationResult(_ToDict):
    """Layer-clustered permutation test of labelled vs unlabelled heads.

    observed: the statistic on the real labels; p_value: two-sided, equal-tailed,
    min(1, 2 * min(P_upper, P_lower)). Exact (`exact`, every one of the `n_labellings` labellings
    the null allows, when there are no more than the `n_perm` asked): P_upper = #{null >= observed} /
    n_labellings, so p >= 2 / n_labellings. Monte Carlo otherwise: P_upper = (1 + #{null >= observed})
    / (n_perm + 1), so p >= 2 / (n_perm + 1). `p_floor` is that smallest attainable p, `at_floor`
    whether p_value sits on it, `p_method` which test ran and `note` says, in words, when p is at its
    floor or the design has no power (no free layer; a floor above 0.05); None otherwise.
    null_mean / null_sd (ddof=1) summarise the permutation null - compare `observed` with
    `null_mean`, not with 0. n_perm: labellings evaluated (n_labellings when exact).
    labelled_by_layer / heads_by_layer: per-layer label counts kept fixed by the null (to_dict
    turns the int layer keys into strings). n_free_layers: layers with both labelled and
    unlabelled heads - the only ones whose labels actually move; if 0, p_value is 1.
    """

    observed: float
    p_value: float
    n_perm: int
    null_mean: float
    null_sd: float
    statistic: str
    n_labelled: int
    n_unlabelled: int
    n_free_layers: int
    labelled_by_layer: dict = field(default_factory=dict)
    heads_by_layer: dict = field(default_factory=dict)
    seed: int = 0
    n_labellings: int | float = 0  # a float past 2**53
    exact: bool = False
    p_method: str = ""
    p_floor: float = 0.0
    at_floor: bool = False
    note: str | None = None


def _layer_groups(labels: np.ndarray, layers: np.ndarray):
    """[(layer, column indices, n_labelled)] in sorted layer order."""
    groups = []
    for lay in np.unique(layers):
        cols = np.flatnonzero(layers == lay)
        groups.append((int(lay), cols, int(labels[cols].sum())))
    return groups


def _permute_within_layers(labels: np.ndarray, layers: np.ndarray, n: int,
                           rng: np.random.Generator) -> np.ndarray:
    """(n, N) boolean label matrix: each row shuffles `labels` within every layer independently.

    Each layer keeps its number of labelled heads; within a layer every subset of that size is
    equally likely (the first k of a uniform random ordering).
    """
    out = np.zeros((n, labels.size), dtype=bool)
    rows = np.arange(n)[:, None]
    for _, cols, k in _layer_groups(labels, layers):
        if k == 0:
            continue
        if k == cols.size:
            out[:, cols] = True
            continue
        order = np.argsort(rng.random((n, cols.size)), axis=1)[:, :k]
        out[rows, cols[order]] = True
    return out


def _n_labellings(labels: np.ndarray, layers: np.ndarray) -> int:
    """How many labellings keep every layer's labelled count: the product of C(heads, labelled) per layer."""
    return math.prod(math.comb(int(cols.size), k) for _, cols, k in _layer_groups(labels, layers))


def _count(n: int):
    """A count as JSON keeps it: the int while a float holds it exactly (< 2**53), else a float (inf past 1e308)."""
    if n < 2 ** 53:
        return int(n)
    try:
        return float(n)
    except OverflowError:
        return math.inf


def _every_labelling(labels: np.ndarray, layers: np.ndarray, start: int, stop: int) -> np.ndarray:
    """(stop - start, N) boolean label matrix: labellings number start..stop-1 of all those that keep each
    layer's labelled count, in a fixed order (a mixed-radix number whose digits are each free layer's
    combination index; fixed layers keep their labels)."""
    idx = np.arange(start, stop, dtype=np.int64)
    out = np.zeros((idx.size, labels.size), dtype=bool)
    for _, cols, k in _layer_groups(labels, layers):
        if k == 0:
            continue
        if k == cols.size:
            out[:, cols] = True
            continue
        combos = np.array(list(itertools.combinations(range(cols.size), k)), dtype=np.int64)  # [C, k]
        digit = idx % combos.shape[0]
        idx = idx // combos.shape[0]
        out[np.arange(out.shape[0])[:, None], cols[combos[digit]]] = True
    return out


def _floor_note(p: float, p_floor: float, exact: bool, n_labellings: int, n_perm: int, n_free: int,
                free_layers: list[int]) -> str | None:
    """The words for a p-value that cannot say much: no free layer, a floor above 0.05, or p on its floor."""
    layers_txt = (f"one free layer, L{free_layers[0]}" if n_free == 1
                  else f"{n_free} free layers")
    if n_free == 0:
        return ("no power: no layer has both labelled and other heads, so the within-layer null cannot move a "
                "label (p = 1)")
    if p_floor > 0.05:
        return (f"no power at 0.05: only {n_labellings} labellings keep each layer's count ({layers_txt}), so p "
                f"cannot fall below {p_floor:.3g}")
    if p <= p_floor * (1 + 1e-9):
        if exact:
            return (f"p is at the floor of its design: of all {n_labellings} labellings that keep each layer's "
                    f"count ({layers_txt}), none but the observed one is as extreme; the smallest attainable p is "
                    f"{p_floor:.3g}")
        return (f"p is at the Monte Carlo floor 2 / ({n_perm} + 1) = {p_floor:.3g}: no permutation was as extreme "
                f"(of {_count(n_labellings):.3g} labellings); more permutations would resolve a smaller p")
    if n_free == 1:
        return (f"one free layer (L{free_layers[0]}): the labelled heads are compared with the other heads of "
                "that layer only")
    return None


def _group_stat(masks: np.ndarray, v: np.ndarray, statistic: str) -> np.ndarray:
    """Statistic for each row of `masks` (labelled = True); every row has the same label total."""
    m = masks.astype(np.float64)
    n1 = float(masks[0].sum())
    n0 = float(v.size) - n1
    s1 = m @ v
    s0 = float(v.sum()) - s1
    diff = s1 / n1 - s0 / n0
    if statistic == "mean_diff":
        return diff
    q1 = m @ (v * v)
    q0 = float((v * v).sum()) - q1
    ss = np.maximum(q1 - s1 * s1 / n1, 0.0) + np.maximum(q0 - s0 * s0 / n0, 0.0)
    sd = np.sqrt(ss / (v.size - 2))
    # `v` is standardised (overall SD 1) and the sums of squares above carry rounding noise of
    # about sqrt(N * eps); a pooled SD below this is treated as exactly 0.
    tiny = 1e-7 * math.sqrt(v.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = diff / sd
    flat = sd <= tiny
    if np.any(flat):
        d = np.where(flat, np.where(np.abs(diff) <= tiny, 0.0, np.copysign(np.inf, diff)), d)
    return d


def layer_clustered_permutation(values, labels, layers=None, n_perm: int = 10000, seed: int = 0,
                                statistic: str = "cohens_d") -> PermutationResult:
    """Do labelled heads (e.g. retrieval heads) differ in `values` from the other heads?

    values, labels, layers: one entry per head (1-D, same length): a per-head statistic, a
    boolean label and the head's layer. Alternatively pass `values` and `labels` as 2-D
    [layer, head] arrays and `layers=None`: row index = layer.

    statistic: "cohens_d" (pooled-SD Cohen's d, labelled minus unlabelled, as `cohens_d`) or
    "mean_diff" (mean labelled - mean unlabelled). The null permutes the labels WITHIN each layer,
    keeping every layer's labelled count, so a layer-wide trend in `values` (e.g. norms growing
    with depth) cannot by itself produce a small p-value when the labelled heads cluster in some
    layers. Under that null the statistic is generally NOT centred on 0 (labelled heads inherit
    their layers' level), so the p-value is two-sided equal-tailed Monte Carlo:
    min(1, 2 * min(P_upper, P_lower)), P_upper = (1 + #{null >= observed}) / (n_perm + 1) and
    P_lower = (1 + #{null <= observed}) / (n_perm + 1); null statistics within
    1e-9 * (1 + |observed|) of the observed one (computed on standardised values) count as ties,
    i.e. as extreme in both tails.
    The smallest attainable p is 2 / (n_perm + 1). When the design allows no more labellings than
    `n_perm` (few heads in the free layers, e.g. four labelled heads of one 8-head layer: 70), every
    labelling is enumerated instead and the test is exact: P_upper = #{null >= observed} /
    n_labellings (the observed labelling among them), and the smallest attainable p is
    2 / n_labellings - a Monte Carlo p there could fall below what the design allows. The result says
    which (`exact`, `p_method`), carries that floor (`p_floor`, `at_floor`) and a `note` when p sits on
    it or the test has no power.

    A pooled within-group SD below ~1e-7 * sqrt(n_heads) of the overall SD counts as 0 (d is then
    0.0 or +-inf, as in `cohens_d`).

    Implemented in vectorised numpy (scipy's permutation_test cannot stratify); values are
    standardised before the sums so the observed statistic may differ from `cohens_d` in the last
    few bits.
    """
    if statistic not in ("cohens_d", "mean_diff"):
        raise InvalidInputError(f"statistic must be 'cohens_d' or 'mean_diff', got {statistic!r}")
    n_perm = _check_count("n_perm", n_perm)
    seed = _check_seed(seed)

    vals = np.asarray(values, dtype=np.float64)
    labs = np.asarray(labels)
    if layers is None:
        if vals.ndim != 2:
            raise InvalidInputError(
                "layers=None needs values and labels as 2-D [layer, head] arrays; for 1-D per-head "
                f"values pass each head's layer (values has shape {vals.shape})"
            )
        lays = np.broadcast_to(np.arange(vals.shape[0])[:, None], vals.shape).reshape(-1)
    else:
        lays = np.asarray(layers).reshape(-1)
    if vals.shape != labs.shape:
        raise InvalidInputError(f"values and labels must have the same shape, got {vals.shape} and {labs.shape}")
    vals = vals.reshape(-1)
    labs = labs.reshape(-1)
    if lays.size != vals.size:
        raise InvalidInputError(f"layers must give one layer per head: {lays.size} layers for {vals.size} values")
    if labs.dtype != bool:
        if not np.all(np.isin(labs, (0, 1))):
            raise InvalidInputError("labels must be boolean (or 0/1): True = labelled head")
        labs = labs.astype(bool)
    if not np.all(np.isfinite(vals)):
        raise InvalidInputError("values contains NaN/inf: drop those heads (and their labels/layers) first")
    if lays.dtype.kind not in "iu":
        raise InvalidInputError(f"layers must be integers (one layer index per head), got dtype {lays.dtype}")
    lays = lays.astype(np.int64)
    n1 = int(labs.sum())
    n0 = int(labs.size - n1)
    if n1 == 0 or n0 == 0:
        raise InvalidInputError(f"need both labelled and unlabelled heads, got {n1} labelled and {n0} unlabelled")
    if statistic == "cohens_d" and labs.size < 3:
        raise InvalidInputError("cohens_d needs at least 3 heads in all (pooled SD with ddof=1 per group)")

    # Standardise: the sums of squares below then do not lose precision to a large common offset.
    sd_all = float(np.std(vals))
    v = (vals - vals.mean()) / (sd_all if sd_all > 0 else 1.0)
    if statistic == "mean_diff":
        v_scale = sd_all if sd_all > 0 else 1.0
    else:
        v_scale = 1.0

    # Everything below is in standardised units (both statistics are then O(1)); mean_diff is
    # scaled back only for reporting.
    obs_std = float(_group_stat(labs[None, :], v, statistic)[0])
    n_lab = _n_labellings(labs, lays)
    exact = n_lab <= n_perm
    n_eval = n_lab if exact else n_perm
    rng = np.random.default_rng(seed)
    batch = max(1, _BATCH_ELEMS // labs.size)
    null_parts = []
    done = 0
    while done < n_eval:
        b = min(batch, n_eval - done)
        masks = (_every_labelling(labs, lays, done, done + b) if exact
                 else _permute_within_layers(labs, lays, b, rng))
        null_parts.append(_group_stat(masks, v, statistic))
        done += b
    null_std = np.concatenate(null_parts)

    # Equal-tailed two-sided p. The within-layer null is NOT centred on 0 when labels cluster in
    # layers whose values differ, so |null| >= |observed| would be wrong; double the smaller tail.
    # Ties: the same labelling can come out a few ulps apart through a different summation order
    # (BLAS blocking depends on the batch shape), so differences below 1e-9 count as ties.
    # Exact: the observed labelling is one of the enumerated ones, so it counts itself; Monte Carlo adds it (+1).
    tol = 0.0 if np.isinf(obs_std) else 1e-9 * (1.0 + abs(obs_std))
    extra, denom = (0, n_lab) if exact else (1, n_perm + 1)
    p_upper = (extra + int(np.count_nonzero(null_std >= obs_std - tol))) / denom
    p_lower = (extra + int(np.count_nonzero(null_std <= obs_std + tol))) / denom
    p = min(1.0, 2.0 * min(p_upper, p_lower))
    p_floor = min(1.0, 2.0 / denom)

    observed = obs_std * v_scale
    null = null_std * v_scale
    groups = _layer_groups(labs, lays)
    finite = np.isfinite(null)
    null_f = null[finite]
    null_mean = float(null_f.mean()) if null_f.size else float("nan")
    null_sd = float(null_f.std(ddof=1)) if null_f.size > 1 else 0.0
    free = [lay for lay, cols, k in groups if 0 < k < cols.size]
    return PermutationResult(
        observed=observed, p_value=float(p), n_perm=n_eval, null_mean=null_mean, null_sd=null_sd,
        statistic=statistic, n_labelled=n1, n_unlabelled=n0,
        n_free_layers=len(free),
        labelled_by_layer={lay: k for lay, _, k in groups},
        heads_by_layer={lay: int(cols.size) for lay, cols, _ in groups},
        seed=seed, n_labellings=_count(n_lab), exact=exact,
        p_method=(f"exact: all {n_lab} labellings that keep each layer's labelled count" if exact
                  else f"monte-carlo: {n_perm} within-layer permutations (+1) of {_count(n_lab):.3g} labellings"),
        p_floor=p_floor, at_floor=bool(p <= p_floor * (1 + 1e-9)),
        note=_floor_note(p, p_floor, exact, n_lab, n_perm, len(free), free),
    )


# --------------------------------------------------------------------------- 5. matched random heads


