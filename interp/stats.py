"""Statistics shared by every causal analysis: bootstrap CIs, paired comparisons, effect sizes,
layer-clustered permutation tests and matched random-head controls.

Design conventions
------------------
* **Paired-seed designs.** Every condition runs on the same seeded prompts, so a condition and its
  baseline are compared sample-by-sample: `paired_diff(x, y)` works on `x - y` and resamples /
  sign-flips whole pairs, never the two arms independently.
* **Explicit randomness.** Every random function takes an integer `seed` and builds its own
  `numpy.random.Generator` from it; nothing reads or touches global random state. The same inputs
  and seed give the same result (with the same numpy/scipy versions: scipy's bootstrap resampling
  order may change between releases).
* **Pure functions.** numpy (or array-like) in, a frozen dataclass out. Every result has
  `to_dict()` returning plain Python types (float/int/str/bool/list/dict with str keys) that
  `json.dumps` accepts. Infinite effect sizes (see `paired_diff`) stay `float('inf')`; json writes
  them as `Infinity`, so pass `allow_nan=False` only if you have ruled that case out.
* **Errors.** Bad input raises `interp.errors.InvalidInputError`, a subclass of `ValueError`.

Where scipy is used and where not
---------------------------------
* `mean_ci` / the CI of `paired_diff`: `scipy.stats.bootstrap` (BCa, falling back to the
  percentile interval of the same bootstrap distribution when BCa is degenerate).
* `paired_diff` p-value: hand-written, vectorised numpy sign-flip test (exact enumeration or Monte
  Carlo). `scipy.stats.permutation_test(permutation_type="samples")` computes the same test but was
  7-10x slower for Monte Carlo at large n; the tests cross-check the two.
* `layer_clustered_permutation`: hand-written, vectorised numpy. scipy's `permutation_test` has
  no notion of permuting labels within strata (layers) while keeping each stratum's label count.
* `matched_random_heads`, `threshold_sweep`, `cohens_d`: plain numpy.
"""

from __future__ import annotations

import inspect
import math
import operator
import warnings
from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Sequence

import numpy as np
from scipy import stats as _sps

from .errors import InvalidInputError

__all__ = [
    "Estimate",
    "PairedComparison",
    "PermutationResult",
    "MatchedDraws",
    "mean_ci",
    "paired_diff",
    "cohens_d",
    "layer_clustered_permutation",
    "matched_random_heads",
    "threshold_sweep",
    "EXACT_SIGN_FLIP_MAX_N",
    "BCA_MAX_N",
]

#: `paired_diff` enumerates all 2**n sign patterns exactly when n is at most this.
EXACT_SIGN_FLIP_MAX_N = 16
#: Above this many samples `mean_ci` uses the percentile interval: scipy's BCa jackknife costs
#: O(n^2) (about 3 s at n = 20000), and for a mean BCa's corrections vanish as n grows.
BCA_MAX_N = 20000

# Values whose spread is below this many ulps of their magnitude are treated as all equal: x - y
# for y = x + c is rarely bit-for-bit constant in floating point.
_CONST_ULPS = 64
# Upper bound on the elements of one resampling batch (memory: 8 bytes each, a few live copies).
_BATCH_ELEMS = 2_000_000


# --------------------------------------------------------------------------- helpers


def _jsonable(v: Any) -> Any:
    """Convert numpy scalars/arrays, tuples and dicts into plain JSON-able Python values."""
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return [_jsonable(x) for x in v.tolist()]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v)
    return v


class _ToDict:
    def to_dict(self) -> dict[str, Any]:
        """Plain-Python dict of every field (numbers as int/float, dict keys as str)."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


def _check_seed(seed: Any) -> int:
    if isinstance(seed, (bool, np.bool_)):
        raise InvalidInputError(f"seed must be a non-negative int, got {seed!r}")
    try:
        s = operator.index(seed)
    except TypeError:
        raise InvalidInputError(
            f"seed must be a non-negative int, got {type(seed).__name__} {seed!r}: pass an explicit integer"
        ) from None
    if s < 0:
        raise InvalidInputError(f"seed must be a non-negative int, got {s}")
    return int(s)


def _check_count(name: str, v: Any, minimum: int = 1) -> int:
    try:
        n = operator.index(v)
    except TypeError:
        raise InvalidInputError(f"{name} must be an int >= {minimum}, got {v!r}") from None
    if n < minimum:
        raise InvalidInputError(f"{name} must be an int >= {minimum}, got {n}")
    return int(n)


def _check_level(level: Any) -> float:
    lv = float(level)
    if not (0.0 < lv < 1.0):
        raise InvalidInputError(f"level must be strictly between 0 and 1 (e.g. 0.95), got {level!r}")
    return lv


def _as_1d(name: str, x: Any, min_n: int = 1) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype == object:
        raise InvalidInputError(f"{name} must be numeric, got an object array")
    if a.ndim > 1:
        raise InvalidInputError(f"{name} must be 1-D (one value per sample), got shape {a.shape}")
    a = a.astype(np.float64, copy=False).reshape(-1)
    if a.size < min_n:
        raise InvalidInputError(f"{name} needs at least {min_n} value(s), got {a.size}")
    if not np.all(np.isfinite(a)):
        bad = int(np.count_nonzero(~np.isfinite(a)))
        raise InvalidInputError(f"{name} contains {bad} NaN/inf value(s): drop or fix those samples first")
    return a


def _is_constant(a: np.ndarray) -> bool:
    """All values equal, up to a few ulps of their magnitude (rounding noise of x - y)."""
    if a.size <= 1:
        return True
    spread = float(np.max(a) - np.min(a))
    scale = float(np.max(np.abs(a)))
    return spread <= _CONST_ULPS * np.finfo(np.float64).eps * scale


def _rng_kw(func) -> str:
    """scipy >= 1.15 calls the generator argument `rng`; older releases call it `random_state`."""
    return "rng" if "rng" in inspect.signature(func).parameters else "random_state"


_BOOT_RNG_KW = _rng_kw(_sps.bootstrap)


def _mean_stat(a, axis=-1):
    return np.mean(a, axis=axis)


def _bootstrap_mean_ci(a: np.ndarray, n_boot: int, level: float, rng: np.random.Generator):
    """(lo, hi, method) for the mean of `a` (not constant). BCa, or percentile if BCa degenerates
    or n > BCA_MAX_N."""
    batch = max(1, _BATCH_ELEMS // a.size)
    if a.size > BCA_MAX_N:
        res = _sps.bootstrap(
            (a,), _mean_stat, n_resamples=n_boot, batch=batch, vectorized=True,
            confidence_level=level, method="percentile", **{_BOOT_RNG_KW: rng},
        )
        return float(res.confidence_interval.low), float(res.confidence_interval.high), "percentile"
    with warnings.catch_warnings(record=True) as caught, np.errstate(all="ignore"):
        warnings.simplefilter("always")
        res = _sps.bootstrap(
            (a,), _mean_stat, n_resamples=n_boot, batch=batch, vectorized=True,
            confidence_level=level, method="BCa", **{_BOOT_RNG_KW: rng},
        )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    bca_failed = any(issubclass(w.category, _sps.DegenerateDataWarning) for w in caught)
    if bca_failed or not (np.isfinite(lo) and np.isfinite(hi)):
        # Same bootstrap distribution, plain percentile interval.
        alpha = (1.0 - level) / 2.0
        lo, hi = (float(q) for q in np.quantile(res.bootstrap_distribution, [alpha, 1.0 - alpha]))
        return lo, hi, "percentile (BCa degenerate)"
    return lo, hi, "bca"


def _std_effect(mean_diff: float, sd: float, scale: float) -> float:
    """mean/sd with the documented conventions for sd == 0 (up to rounding noise of size `scale`)."""
    tiny = _CONST_ULPS * np.finfo(np.float64).eps * scale
    if sd <= tiny:
        if abs(mean_diff) <= tiny:
            return 0.0
        return math.copysign(math.inf, mean_diff)
    return float(mean_diff / sd)


# --------------------------------------------------------------------------- 1. mean_ci


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
    paired d_z = mean(x - y) / sd(x - y, ddof=1) (0.0 if every difference is 0, +-inf if the
    differences are all equal and non-zero). n_perm: number of sign patterns actually evaluated
    (2**n when exact). p_method: "exact sign-flip (2^n patterns)" or "monte-carlo sign-flip (+1)".
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
    (count + 1) / (n_perm + 1).
    """
    n = d.size
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
      1/(n_perm+1) (exact: 2/2**n). Pairs with d == 0 stay in (they add nothing to either side).
      Its random stream is independent of the bootstrap's (child of the same seed).
    * cohens_d: paired d_z = mean(d) / sd(d, ddof=1), d = x - y. Defined as 0.0 when all d are 0
      and as +inf / -inf (sign of mean(d)) when all d are equal but non-zero - sd 0 makes the
      ratio unbounded; check `math.isinf` before averaging effect sizes. "Equal" tolerates
      rounding noise of a few ulps.

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
    p, n_pat, exact = _sign_flip_p(d, n_perm, perm_rng)
    scale = float(max(np.max(np.abs(xa)), np.max(np.abs(ya)), np.max(np.abs(d))))
    dz = _std_effect(float(np.mean(d)), float(np.std(d, ddof=1)), scale)
    return PairedComparison(
        mean_x=float(np.mean(xa)), mean_y=float(np.mean(ya)), diff=est.mean, diff_lo=est.lo,
        diff_hi=est.hi, p_value=p, cohens_d=dz, n=int(d.size), level=level, n_boot=n_boot,
        n_perm=n_pat, ci_method=f"paired bootstrap, {est.method}",
        p_method="exact sign-flip (2^n patterns)" if exact else "monte-carlo sign-flip (+1)",
        seed=seed,
    )


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


@dataclass(frozen=True)
class MatchedDraws(_ToDict):
    """Random control head sets matched to a selection, layer by layer.

    draws: `n_draws` sorted lists of (layer, head) tuples, each as large as the selection.
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


def _as_pair(h: Any, n_layers: int, n_heads: int, what: str) -> tuple[int, int]:
    if hasattr(h, "layer") and hasattr(h, "head"):
        pair = (h.layer, h.head)
    elif isinstance(h, str):
        from .types import HeadId

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
                         exclude: Iterable | None = None) -> MatchedDraws:
    """Draw `n_draws` random head sets matched to `selected` layer by layer.

    Each draw has len(selected) heads, none of them in `selected` or `exclude`, with the same
    number of heads in every layer as `selected` - unless a layer has too few available heads:
    then all of that layer's available heads are taken and the rest ("shortfall", reported in
    `shortfall_by_layer`) comes from the nearest layers' remaining heads. Heads are (layer, head)
    tuples (HeadId and "L3H1" strings are accepted too). Draws are independent of each other
    (two draws may coincide when the pool is small) and reproducible for a seed.

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
    draws: list[list[tuple[int, int]]] = []
    for _ in range(n_draws):
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
        draws.append(sorted(chosen))
    return MatchedDraws(
        draws=draws, shortfall_by_layer=shortfall, seed=seed,
        selected_by_layer={int(lay): int(need[lay]) for lay in range(n_layers) if need[lay] > 0},
    )


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
