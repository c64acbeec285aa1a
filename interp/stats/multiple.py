"""Multiple-comparison adjustment of a family of p-values: Holm (family-wise error) and Benjamini-Hochberg
(false discovery rate)."""

from __future__ import annotations

import numpy as np

from interp.errors import InvalidInputError

METHODS = ("holm", "bh")
#: what each adjustment controls, in the words a table says beside its column
DESCRIBE = {"holm": "Holm (family-wise error rate)", "bh": "Benjamini-Hochberg (false discovery rate)"}


def _pvalues(p) -> np.ndarray:
    a = np.asarray(p, dtype=np.float64).reshape(-1)
    if a.size and (not np.all(np.isfinite(a)) or a.min() < 0 or a.max() > 1):
        raise InvalidInputError("p-values must be finite numbers in [0, 1]")
    return a


def holm(p) -> np.ndarray:
    """Holm's step-down adjusted p-values, in the input order.

    Sorted ascending p_(1) <= ... <= p_(m): adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)). Rejecting where
    adj <= alpha controls the family-wise error rate at alpha under any dependence between the tests (unlike
    Bonferroni, m * p, it is never larger). Ties keep their input order, which does not change the values."""
    a = _pvalues(p)
    m = a.size
    if m == 0:
        return a.copy()
    order = np.argsort(a, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * a[order])
    out = np.empty(m)
    out[order] = np.maximum.accumulate(scaled)
    return out


def benjamini_hochberg(p) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input order: adj_(i) = min_{j >= i} min(1,
    m p_(j) / j). Rejecting where adj <= q controls the false discovery rate at q for independent or positively
    dependent tests. scipy.stats.false_discovery_control computes the same; the tests check it."""
    a = _pvalues(p)
    m = a.size
    if m == 0:
        return a.copy()
    order = np.argsort(a, kind="stable")
    scaled = a[order] * m / np.arange(1, m + 1)
    out = np.empty(m)
    out[order] = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1])
    return out


def adjust(p, method: str = "holm") -> np.ndarray:
    """`holm(p)` or `benjamini_hochberg(p)` by name ("holm" | "bh")."""
    if method not in METHODS:
        raise InvalidInputError(f"unknown adjustment {method!r}; valid: {', '.join(METHODS)}")
    return holm(p) if method == "holm" else benjamini_hochberg(p)
