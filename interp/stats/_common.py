"""Shared helpers of interp.stats: validation, seeds, JSON conversion, the bootstrap core."""

from __future__ import annotations

import inspect
import math
import operator
import warnings
from dataclasses import fields
from typing import Any

import numpy as np
from scipy import stats as _sps

from interp.errors import InvalidInputError

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
    if isinstance(v, _ToDict):
        return v.to_dict()
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


