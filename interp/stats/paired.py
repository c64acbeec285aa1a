"""Paired designs: bootstrap CIs of means and paired differences, sign-flip permutation, Cohen's d."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from interp.errors import InvalidInputError
from interp.stats._common import (EXACT_SIGN_FLIP_MAX_N, BCA_MAX_N, _BATCH_ELEMS, _ToDict, _check_seed, _check_count, _check_level, _as_1d, _is_constant, _bootstrap_mean_ci, _std_effect)  # noqa: F401


@dataclass(frozen=True)
class Estimate(_ToDict):
    """A mean with a bootstrap confidence interval.

    method: "bca", "percentile (BCa degenerate)" (BCa's bias/acceleration were undefined, e.g. a
    very lopsided 0/1 sample, so the percentile interval of the same resamples is used),
    "percentile" (n > BCA_MAX_N) or "constant" (all values equal, up to a few ulps of rounding:
    lo == hi == mean, no resampling done).
    """

    mean: float
    lo: float
    hi: float
    n: int
    level: float
    method: str
    n_boot: int
    seed: int


def mean_ci(x, n_boot: int = 10000, level: float = 0.95, seed: int = 0) -> Estimate:
    """Mean of per-sample values (e.g. 0/1 recall per prompt) with a bootstrap CI.

    Uses `scipy.stats.bootstrap` with the BCa interval; when BCa is degenerate (scipy warns, or the
    bounds are not finite) falls back to the percentile interval of the same bootstrap
    distribution; above BCA_MAX_N samples uses the percentile interval directly. All-equal data
    (including n == 1) returns lo == hi == mean with method "constant", without warnings or NaN. NaN/inf in `x` raise `InvalidInputError`: decide what a
    failed sample means before averaging.
    """
    a = _as_1d("x", x)
    n_boot = _check_count("n_boot", n_boot)
    level = _check_level(level)
    seed = _check_seed(seed)
    m = float(np.mean(a))
    if _is_constant(a):
        return Estimate(m, m, m, int(a.size), level, "constant", n_boot, seed)
    lo, hi, method = _bootstrap_mean_ci(a, n_boot, level, np.random.default_rng(seed))
    return Estimate(m, lo, hi, int(a.size), level, method, n_boot, seed)


# --------------------------------------------------------------------------- 2. paired_diff


@dataclass(frozen=True)
class PairedComparison(_ToDict):
    """Condition `x` against baseline `y` on the same samples.

    diff = mean(x - y) (== mean_x - mean_y up to rounding); [diff_lo, diff_hi] its paired-bootstrap
    CI; p_value a two-sided paired sign-flip permutation test of mean(x - y) == 0; cohens_d the
    paired d_z = mean(x - y) / sd(x - y, ddof=1) (NaN, undefined, if every difference is 0; +-inf if the
    differences are all equal and non-zero). n_perm: number of sign patterns actually evaluated
    (2**k when exact, k = n_informative: the pairs whose difference is not 0; the others flip to
    themselves). p_method: "exact sign-flip (2^k patterns of the k non-zero differences)" or
    "monte-carlo sign-flip (+1)". p_floor: the smallest p the design allows (exact: 2 / 2**k; Monte
    Carlo: 1 / (n_perm + 1)); at_floor: p_value sits on it; p_note: words for a p on its floor or a
    test without power (floor above 0.05), None otherwise.
    """

    mean_x: float
    mean_y: float
    diff: float
    diff_lo: float
    diff_hi: float
    p_value: float
    cohens_d: float
    n: int
    level: float
    n_boot: int
    n_perm: int
    ci_method: str
    p_method: str
    seed: int
    n_informative: int = 0
    p_floor: float = 0.0
    at_floor: bool = False
    p_note: str | None = None


def _sign_flip_p(d: np.ndarray, n_perm: int, rng: np.random.Generator) -> tuple[float, int, bool]:
    """Two-sided sign-flip p of mean(d). Returns (p, n_patterns, exact).

    Hand-written, vectorised numpy rather than `scipy.stats.permutation_test(...,
    permutation_type="samples")`: scipy draws a full permutation of each pair to flip one sign, which
    made Monte Carlo 7-10x slower (25 s for n = 20000, n_perm = 10000), and this keeps one tie rule
    for the exact and Monte Carlo paths. The test suite cross-checks it against scipy and against
    brute-force enumeration.

    Statistic |sum(s * d)| (equivalent to |mean|). A pattern is "as extreme" when its statistic is
    >= the observed one minus 1e-9 * sum|d|: every signed sum is exact up to ~n * eps * sum|d|, so
    patterns that tie in exact arithmetic (e.g. 0/1 data) are never lost to rounding.
    Exact: count / 2**n over all sign patterns (the observed one included). Monte Carlo:
    (count + 1) / (n_perm + 1). Call it with the non-zero differences only: a zero flips to itself, so
    2**n_zero patterns share each statistic and the p-value is the same, while the number of distinct
    patterns, which decides exact vs Monte Carlo, is 2**(non-zero).
    """
    n = d.size
    if n == 0:  # nothing to flip: the one pattern is the observed one
        return 1.0, 1, True
    exact = n <= EXACT_SIGN_FLIP_MAX_N or n_perm >= 2**n
    obs = abs(float(np.sum(d)))
    tol = 1e-9 * float(np.sum(np.abs(d)))
    total = float(np.sum(d))
    batch = max(1, _BATCH_ELEMS // n)
    count = 0
    if exact:
        n_pat = 2**n
        for start in range(0, n_pat, batch):
            codes = np.arange(start, min(n_pat, start + batch), dtype=np.int64)
            flips = ((codes[:, None] >> np.arange(n, dtype=np.int64)) & 1).astype(np.float64)
            # flipping the signs of a subset F: sum(s * d) = sum(d) - 2 * sum(d[F])
            count += int(np.count_nonzero(np.abs(total - 2.0 * (flips @ d)) >= obs - tol))
        return min(1.0, count / n_pat), n_pat, True
    done = 0
    while done < n_perm:
        b = min(batch, n_perm - done)
        flips = rng.integers(0, 2, size=(b, n), dtype=np.int8).astype(np.float64)
        count += int(np.count_nonzero(np.abs(total - 2.0 * (flips @ d)) >= obs - tol))
        done += b
    return min(1.0, (count + 1) / (n_perm + 1)), n_perm, False


def paired_diff(x, y, n_boot: int = 10000, n_perm: int = 10000, level: float = 0.95,
                seed: int = 0) -> PairedComparison:
    """Paired comparison of condition `x` against baseline `y` (same samples, same order).

    * CI: paired bootstrap - resample sample indices and use the same index in both arms. For the
      mean this is exactly the bootstrap of mean(x - y), so it is computed as
      `mean_ci(x - y, n_boot, level, seed)` (identical bounds for the same seed).
    * p-value: two-sided sign-flip permutation test of mean(x - y), P(|mean(s * d)| >= |mean(d)|)
      over random signs s: exact over all 2**n sign patterns when n <= 16 (or n_perm >= 2**n),
      else `n_perm` random patterns with the +1 correction, so the smallest possible p is
      1/(n_perm+1) (exact: 2/2**n). Pairs with d == 0 flip to themselves: they change no pattern's
      statistic, so only the k non-zero differences are flipped (n above is that k: twenty 0/1 recall
      pairs of which ten differ have 2**10 distinct patterns, enumerated, and p cannot fall below
      2/1024, where a Monte Carlo p could reach 1/(n_perm+1)). `p_floor`, `at_floor` and `p_note`
      say when p is at that floor or the design has no power (a floor above 0.05).
      Its random stream is independent of the bootstrap's (child of the same seed).
    * cohens_d: paired d_z = mean(d) / sd(d, ddof=1), d = x - y. NaN when all d are 0 (0/0: no
      effect size to speak of, where 0.0 would read as a measured null) and +inf / -inf (sign of
      mean(d)) when all d are equal but non-zero - sd 0 makes the ratio unbounded; check
      `math.isfinite` before averaging effect sizes. "Equal" tolerates rounding noise of a few ulps.

    Raises InvalidInputError (a ValueError) when the lengths differ (the samples are not paired)
    or n < 2 (sd(d, ddof=1) is undefined and one pair has no resampling or sign-flip
    distribution worth reporting).
    """
    xa = _as_1d("x", x)
    ya = _as_1d("y", y)
    if xa.size != ya.size:
        raise InvalidInputError(
            f"paired_diff needs x and y on the same samples in the same order: got {xa.size} values "
            f"for x and {ya.size} for y"
        )
    if xa.size < 2:
        raise InvalidInputError(
            f"paired_diff needs at least 2 pairs, got {xa.size}: with one pair sd(x - y) is undefined "
            "and neither the bootstrap nor the sign-flip test has anything to resample"
        )
    n_boot = _check_count("n_boot", n_boot)
    n_perm = _check_count("n_perm", n_perm)
    level = _check_level(level)
    seed = _check_seed(seed)

    d = xa - ya
    est = mean_ci(d, n_boot=n_boot, level=level, seed=seed)
    perm_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    nz = d[np.abs(d) > 1e-12 * float(np.max(np.abs(d)))] if np.any(d != 0) else d[:0]
    p, n_pat, exact = _sign_flip_p(nz, n_perm, perm_rng)
    p_floor = min(1.0, 2.0 / n_pat) if exact else 1.0 / (n_perm + 1)
    scale = float(max(np.max(np.abs(xa)), np.max(np.abs(ya)), np.max(np.abs(d))))
    # every difference 0: d_z is 0/0, undefined (NaN; strict JSON writes null with a "nonfinite" note), not 0
    dz = math.nan if nz.size == 0 else _std_effect(float(np.mean(d)), float(np.std(d, ddof=1)), scale)
    return PairedComparison(
        mean_x=float(np.mean(xa)), mean_y=float(np.mean(ya)), diff=est.mean, diff_lo=est.lo,
        diff_hi=est.hi, p_value=p, cohens_d=dz, n=int(d.size), level=level, n_boot=n_boot,
        n_perm=n_pat, ci_method=f"paired bootstrap, {est.method}",
        p_method=(f"exact sign-flip (2^{nz.size} patterns of the {nz.size} non-zero differences)" if exact
                  else "monte-carlo sign-flip (+1)"),
        seed=seed, n_informative=int(nz.size), p_floor=p_floor, at_floor=bool(p <= p_floor * (1 + 1e-9)),
        p_note=_sign_flip_note(p, p_floor, exact, int(nz.size), int(d.size), n_perm),
    )


def _sign_flip_note(p: float, p_floor: float, exact: bool, k: int, n: int, n_perm: int) -> str | None:
    """Words for a sign-flip p that cannot say much: a floor above 0.05 (no power), or p on its floor."""
    pairs = f"{k} of {n} pairs differ" if k < n else f"{n} pairs, all differ"
    if k == 0:
        return "no power: every pair's difference is 0 (p = 1)"
    if p_floor > 0.05:
        return f"no power at 0.05: {pairs}, 2^{k} sign patterns, so p cannot fall below {p_floor:.3g}"
    if p <= p_floor * (1 + 1e-9):
        if exact:
            return (f"p is at the floor of its design: {pairs}, and of the 2^{k} sign patterns only the observed "
                    f"one and its mirror are as extreme; the smallest attainable p is {p_floor:.3g}")
        return (f"p is at the Monte Carlo floor 1 / ({n_perm} + 1) = {p_floor:.3g}: no sign pattern drawn was as "
                "extreme; more permutations would resolve a smaller p")
    return None


# --------------------------------------------------------------------------- 3. cohens_d


def cohens_d(a, b) -> float:
    """Independent-groups Cohen's d: (mean(a) - mean(b)) / pooled SD.

    pooled SD = sqrt((SS_a + SS_b) / (n_a + n_b - 2)), SS the sum of squared deviations (so each
    group's variance is ddof=1). Needs n_a, n_b >= 1 and n_a + n_b >= 3. If the pooled SD is 0
    (up to rounding): 0.0 when the means are equal, else +-inf with the sign of the difference.
    """
    aa = _as_1d("a", a)
    bb = _as_1d("b", b)
    if aa.size + bb.size < 3:
        raise InvalidInputError(
            f"cohens_d needs n_a + n_b >= 3 for a pooled SD (ddof=1 per group), got {aa.size} + {bb.size}"
        )
    ss = float(np.sum((aa - aa.mean()) ** 2) + np.sum((bb - bb.mean()) ** 2))
    sd = math.sqrt(ss / (aa.size + bb.size - 2))
    scale = float(max(np.max(np.abs(aa)), np.max(np.abs(bb))))
    return _std_effect(float(aa.mean() - bb.mean()), sd, scale)


# --------------------------------------------------------------------------- 4. layer-clustered permutation




# --------------------------------------------------------------------------- 4. pooled controls


def sets_mean_ci(values, minus=None, n_boot: int = 10000, level: float = 0.95, seed: int = 0,
                 chunk: int = 500) -> tuple[float, float, float, str]:
    """(mean, lo, hi, method) of the mean over control SETS and samples of `values` [n_sets, n_samples] (minus a
    per-sample reference `minus` [n_samples], e.g. the baseline or the target, for a paired difference).

    The unit of a control is the set: a pooled control's CI must carry the spread between sets as well as
    between prompts, so this is a two-level percentile bootstrap: each resample draws the sets with
    replacement, then the samples with replacement (the same samples for every set, and for `minus`: the design
    stays paired), and takes the mean. With one set it is the plain paired bootstrap over samples.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.shape[0] < 1 or v.shape[1] < 1:
        raise InvalidInputError(f"values must be [n_sets, n_samples] with both >= 1, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise InvalidInputError("values contain NaN or inf: decide what a failed sample means before pooling")
    if minus is not None:
        m = _as_1d("minus", minus)
        if m.size != v.shape[1]:
            raise InvalidInputError(f"minus has {m.size} samples, values {v.shape[1]}: not paired")
        v = v - m[None, :]
    n_boot = _check_count("n_boot", n_boot)
    level = _check_level(level)
    rng = np.random.default_rng(np.random.SeedSequence(_check_seed(seed)).spawn(2)[1])
    k, n = v.shape
    mean = float(v.mean())
    if k * n == 1 or np.ptp(v) == 0:
        return mean, mean, mean, "constant"
    stats_ = np.empty(n_boot)
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        per_sample = v[rng.integers(k, size=(b, k))].mean(axis=1)  # [b, n]: the resampled sets' mean per sample
        pick = rng.integers(n, size=(b, n))
        stats_[start:start + b] = np.take_along_axis(per_sample, pick, axis=1).mean(axis=1)
    a = (1 - level) / 2
    lo, hi = np.quantile(stats_, [a, 1 - a])
    return mean, float(lo), float(hi), f"two-level bootstrap over {k} sets and {n} samples (percentile)"
