"""Bootstrap CIs and sign-flip tests for many cells at once (patching grids, single-head sweeps): pairs x cells,
missing cells as NaN."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from interp.stats._common import _check_count, _check_level, _check_seed


@dataclass(frozen=True)
class GridEstimate:
    """Per cell: mean over the pairs that have it, a percentile-bootstrap CI (pairs resampled with
    replacement, the same resample for every cell), and how many pairs it has."""

    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    n: np.ndarray
    level: float
    n_boot: int
    seed: int


def column_mean_ci(values, n_boot: int = 1000, level: float = 0.95, seed: int = 0,
                   max_elements: int = 2 ** 24) -> GridEstimate:
    """values [n_pairs, n_cells] (NaN = the pair does not have that cell) -> GridEstimate over cells.

    Vectorised: resampled means are computed in column blocks of at most `max_elements` numbers.
    Cells with one pair get lo == hi == mean; cells with none get NaN."""
    n_boot = _check_count("n_boot", n_boot)
    level = _check_level(level)
    seed = _check_seed(seed)
    v = np.asarray(values, dtype=float)
    if v.ndim != 2:
        raise ValueError("values must be [n_pairs, n_cells]")
    P, C = v.shape
    have = ~np.isnan(v)
    n = have.sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, np.nansum(v, 0) / np.maximum(n, 1), np.nan)
    idx = np.random.default_rng(seed).integers(0, P, size=(n_boot, P))
    lo, hi = np.full(C, np.nan), np.full(C, np.nan)
    a = (1 - level) / 2
    block = max(1, max_elements // max(1, n_boot * P))
    filled = np.where(have, v, 0.0)
    for c0 in range(0, C, block):
        sl = slice(c0, min(C, c0 + block))
        s = filled[idx, sl].sum(1)  # [n_boot, cells]
        k = have[idx, sl].sum(1)
        with np.errstate(invalid="ignore", divide="ignore"):
            m = np.where(k > 0, s / np.maximum(k, 1), np.nan)
        ok = np.isfinite(m).any(0)
        if ok.any():
            mm = m[:, ok]
            q = np.quantile if np.isfinite(mm).all() else np.nanquantile  # nanquantile is ~20x slower
            lo[sl][ok] = q(mm, a, axis=0)
            hi[sl][ok] = q(mm, 1 - a, axis=0)
    one = n == 1
    lo[one], hi[one] = mean[one], mean[one]
    return GridEstimate(mean, lo, hi, n, level, n_boot, seed)


@dataclass(frozen=True)
class GridTest:
    """Per cell: a two-sided sign-flip p of mean == 0 over the pairs (pairs without the cell, and differences of
    0, flip to themselves), the smallest p its design allows (`p_floor`: 2 / 2^k for the cell's k non-zero
    pairs; at least 1 / (n_perm + 1) when drawn), and `p_bh`: Benjamini-Hochberg adjusted over every cell with a
    p (the false discovery rate of calling cells effects). NaN where no pair has the cell. `exact`: every sign
    pattern enumerated (2^n_pairs <= max(n_perm, 4096)), else `n_perm` drawn with the +1 correction."""

    p_value: np.ndarray
    p_floor: np.ndarray
    p_bh: np.ndarray
    exact: bool
    n_perm: int
    seed: int


def column_sign_flip(values, n_perm: int = 2000, seed: int = 0, max_elements: int = 2 ** 23) -> GridTest:
    """values [n_pairs, n_cells] (NaN = the pair does not have that cell) -> GridTest: the paired sign-flip test
    of `paired_diff`, for every cell at once (the same sign patterns for every cell), with Benjamini-Hochberg
    over the cells. Statistic |sum(s * d)|; ties within 1e-9 * sum|d| count as extreme."""
    from interp.stats.multiple import benjamini_hochberg

    n_perm = _check_count("n_perm", n_perm)
    seed = _check_seed(seed)
    v = np.asarray(values, dtype=float)
    if v.ndim != 2:
        raise ValueError("values must be [n_pairs, n_cells]")
    P, C = v.shape
    have = ~np.isnan(v)
    d = np.where(have, v, 0.0)
    k = np.count_nonzero(d != 0, axis=0)  # informative pairs per cell
    obs = np.abs(d.sum(0))
    tol = 1e-9 * np.abs(d).sum(0)
    exact = 2 ** P <= max(n_perm, 4096)
    if exact:
        codes = np.arange(2 ** P, dtype=np.int64)
        signs = 1.0 - 2.0 * ((codes[:, None] >> np.arange(P, dtype=np.int64)) & 1)
    else:
        signs = 1.0 - 2.0 * np.random.default_rng(seed).integers(0, 2, size=(n_perm, P))
    count = np.zeros(C, dtype=np.int64)
    block = max(1, max_elements // max(1, signs.shape[0]))
    for c0 in range(0, C, block):
        sl = slice(c0, min(C, c0 + block))
        count[sl] = np.count_nonzero(np.abs(signs @ d[:, sl]) >= obs[sl] - tol[sl], axis=0)
    exact_floor = np.minimum(1.0, 2.0 / 2.0 ** k)
    if exact:
        p = count / signs.shape[0]
        floor = exact_floor
    else:  # a drawn p never below what the cell's design allows
        p = np.maximum((count + 1) / (n_perm + 1), exact_floor)
        floor = np.maximum(1.0 / (n_perm + 1), exact_floor)
    p = np.minimum(1.0, p)
    none = ~have.any(0)
    p[none], floor = np.nan, np.where(none, np.nan, floor)
    bh = np.full(C, np.nan)
    ok = ~none
    if ok.any():
        bh[ok] = benjamini_hochberg(p[ok])
    return GridTest(p, floor, bh, bool(exact), int(signs.shape[0]), seed)
