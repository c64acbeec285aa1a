"""Layer-clustered permutation test of a per-head statistic (labels permuted within layers)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from interp.errors import InvalidInputError
from interp.stats._common import (_BATCH_ELEMS, _ToDict, _check_seed, _check_count)  # noqa: F401


@dataclass(frozen=True)
class PermutationResult(_ToDict):
    """Layer-clustered permutation test of labelled vs unlabelled heads.

    observed: the statistic on the real labels; p_value: two-sided, equal-tailed,
    min(1, 2 * min(P_upper, P_lower)) with P_upper = (1 + #{null >= observed}) / (n_perm + 1) and
    P_lower likewise (so p >= 2 / (n_perm + 1)); null_mean / null_sd (ddof=1) summarise the
    permutation null - compare `observed` with `null_mean`, not with 0.
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
    The smallest attainable p is 2 / (n_perm + 1).

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
    rng = np.random.default_rng(seed)
    batch = max(1, _BATCH_ELEMS // labs.size)
    null_parts = []
    done = 0
    while done < n_perm:
        b = min(batch, n_perm - done)
        null_parts.append(_group_stat(_permute_within_layers(labs, lays, b, rng), v, statistic))
        done += b
    null_std = np.concatenate(null_parts)

    # Equal-tailed two-sided p. The within-layer null is NOT centred on 0 when labels cluster in
    # layers whose values differ, so |null| >= |observed| would be wrong; double the smaller tail.
    # Ties: the same labelling can come out a few ulps apart through a different summation order
    # (BLAS blocking depends on the batch shape), so differences below 1e-9 count as ties.
    tol = 0.0 if np.isinf(obs_std) else 1e-9 * (1.0 + abs(obs_std))
    p_upper = (1 + int(np.count_nonzero(null_std >= obs_std - tol))) / (n_perm + 1)
    p_lower = (1 + int(np.count_nonzero(null_std <= obs_std + tol))) / (n_perm + 1)
    p = min(1.0, 2.0 * min(p_upper, p_lower))

    observed = obs_std * v_scale
    null = null_std * v_scale
    groups = _layer_groups(labs, lays)
    finite = np.isfinite(null)
    null_f = null[finite]
    null_mean = float(null_f.mean()) if null_f.size else float("nan")
    null_sd = float(null_f.std(ddof=1)) if null_f.size > 1 else 0.0
    return PermutationResult(
        observed=observed, p_value=float(p), n_perm=n_perm, null_mean=null_mean, null_sd=null_sd,
        statistic=statistic, n_labelled=n1, n_unlabelled=n0,
        n_free_layers=sum(1 for _, cols, k in groups if 0 < k < cols.size),
        labelled_by_layer={lay: k for lay, _, k in groups},
        heads_by_layer={lay: int(cols.size) for lay, cols, _ in groups},
        seed=seed,
    )


# --------------------------------------------------------------------------- 5. matched random heads


