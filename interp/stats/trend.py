"""A head count across builds that differ in one setting (e.g. rope_theta): a two-level bootstrap and a trend test.

Each build (one training seed of one setting) gives per-prompt head scores; its head count is the number of
heads whose mean score over the recalled prompts exceeds a threshold. The uncertainty has two sources, the
training seed (which build) and the prompts (which NIAH seeds), so the bootstrap resamples both: builds with
replacement within each setting, then the prompt clusters (all prompts built from one NIAH seed) with
replacement within each drawn build, and recounts. With k builds per setting the top level has few distinct
draws (k = 2: three), so the interval is the spread of what these builds show, not a population interval.

The trend test (`slope_permutation`): the OLS slope of per-build count on log10(setting), its p-value from the
exact permutation distribution of the pairing of builds to settings (all n! assignments when n <= 8; the test
`scipy.stats.permutation_test(permutation_type="pairings")` computes, vectorised here). It asks whether the
setting orders the counts more than chance would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from interp.errors import InvalidInputError
from interp.stats._common import _ToDict, _check_count, _check_level, _check_seed


@dataclass(frozen=True)
class BuildScores:
    """One build: `setting` (e.g. its rope_theta), `scores` [prompt, layer, head], `recalled` [prompt] (only
    recalled prompts are averaged, as in retrieval-head detection), `clusters` [prompt] (the NIAH seed each
    prompt was built from: the unit the prompt level resamples)."""

    setting: float
    scores: np.ndarray
    recalled: np.ndarray
    clusters: np.ndarray
    name: str = ""

    def __post_init__(self):
        s = np.asarray(self.scores, dtype=np.float64)
        r = np.asarray(self.recalled, dtype=bool)
        c = np.asarray(self.clusters)
        if s.ndim != 3:
            raise InvalidInputError(f"build {self.name!r}: scores must be [prompt, layer, head], got shape {s.shape}")
        if r.shape != (s.shape[0],) or c.shape != (s.shape[0],):
            raise InvalidInputError(f"build {self.name!r}: recalled {r.shape} and clusters {c.shape} must have one "
                                    f"entry per prompt ({s.shape[0]})")
        if not np.isfinite(s).all():
            raise InvalidInputError(f"build {self.name!r}: scores contain NaN or inf")
        if not (np.isfinite(self.setting) and self.setting > 0):
            raise InvalidInputError(f"build {self.name!r}: setting must be a positive number, got {self.setting}")
        object.__setattr__(self, "scores", s)
        object.__setattr__(self, "recalled", r)
        object.__setattr__(self, "clusters", c)


def head_count(scores: np.ndarray, recalled: np.ndarray, threshold: float) -> int:
    """Heads whose mean score over the recalled prompts is above `threshold` (0 when none was recalled)."""
    if not recalled.any():
        return 0
    return int(np.count_nonzero(scores[recalled].mean(0) > threshold))


@dataclass(frozen=True)
class SettingCount(_ToDict):
    """One setting: the builds' counts, their mean and the two-level bootstrap interval of the mean."""

    setting: float
    counts: list[int]
    builds: list[str]
    mean: float
    lo: float
    hi: float
    n_heads: int  # heads in each model (share = count / n_heads)


@dataclass(frozen=True)
class TrendResult(_ToDict):
    """Head count vs log10(setting): per setting (`SettingCount`), the OLS slope per decade with its
    two-level bootstrap interval, and the exact pairing-permutation p-value of the slope (two-sided)."""

    threshold: float
    settings: list[SettingCount]
    slope: float
    slope_lo: float
    slope_hi: float
    p_value: float
    n_permutations: int
    level: float
    n_boot: int
    seed: int


def _slope(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    xc = x - x.mean(axis=axis, keepdims=True)
    yc = y - y.mean(axis=axis, keepdims=True)
    den = (xc * xc).sum(axis=axis)
    return np.where(den > 0, (xc * yc).sum(axis=axis) / np.where(den > 0, den, 1), 0.0)


EXACT_PAIRINGS_MAX_N = 8  # every pairing enumerated up to n! = 40320; above, MC_PAIRINGS random ones
MC_PAIRINGS = 20000


def slope_permutation(x, y, seed: int = 0) -> tuple[float, float, int]:
    """(OLS slope of y on x, its two-sided p-value, pairings used). The null distribution is the slope over
    every pairing of y with x when n <= EXACT_PAIRINGS_MAX_N (n!, enumerated, vectorised), else over
    MC_PAIRINGS random pairings (p = (1 + hits) / (1 + MC_PAIRINGS)); two-sided: twice the smaller tail, at
    most 1, ties within a relative 1e-12 counted as extreme. Constant y or x: (slope, 1.0, 0). Same test as
    `scipy.stats.permutation_test(permutation_type="pairings")` (the tests check the two agree), whose exact
    enumeration took 75 s at n = 7 here."""
    import itertools

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise InvalidInputError(f"x and y must be 1-D of the same length >= 2, got {x.shape} and {y.shape}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise InvalidInputError("x and y must be finite")
    slope = float(_slope(x, y))
    if np.ptp(y) == 0 or np.ptp(x) == 0:  # nothing to order
        return slope, 1.0, 0
    n = len(x)
    if n <= EXACT_PAIRINGS_MAX_N:
        order = np.array(list(itertools.permutations(range(n))))
    else:
        rng = np.random.default_rng(_check_seed(seed))
        order = np.argsort(rng.random((MC_PAIRINGS, n)), axis=1)
    xc = x - x.mean()
    null = (y[order] - y.mean()) @ xc / (xc @ xc)
    eps = 1e-12 * max(1.0, abs(slope))
    hi, lo = np.count_nonzero(null >= slope - eps), np.count_nonzero(null <= slope + eps)
    if n <= EXACT_PAIRINGS_MAX_N:
        p = 2 * min(hi, lo) / len(order)
    else:
        p = 2 * (1 + min(hi, lo)) / (1 + MC_PAIRINGS)
    return slope, float(min(1.0, p)), len(order)


def count_trend(builds: Sequence[BuildScores], threshold: float = 0.1, n_boot: int = 2000, level: float = 0.95,
                seed: int = 0) -> TrendResult:
    """Per-setting head counts with two-level bootstrap intervals and the slope test (module docstring)."""
    n_boot = _check_count("n_boot", n_boot)
    level = _check_level(level)
    seed = _check_seed(seed)
    if not np.isfinite(threshold):
        raise InvalidInputError(f"threshold must be a finite number, got {threshold}")
    builds = list(builds)
    if len(builds) < 2:
        raise InvalidInputError(f"a trend needs at least 2 builds, got {len(builds)}")
    shapes = {b.scores.shape[1:] for b in builds}
    if len(shapes) != 1:
        raise InvalidInputError(f"builds differ in [layer, head] shape: {sorted(shapes)}")
    (n_layers, n_heads), = shapes
    settings = sorted({float(b.setting) for b in builds})
    if len(settings) < 2:
        raise InvalidInputError(f"a trend needs at least 2 distinct settings, got {settings}")
    by_setting = {s: [b for b in builds if float(b.setting) == s] for s in settings}
    counts = {s: [head_count(b.scores, b.recalled, threshold) for b in bs] for s, bs in by_setting.items()}

    rng = np.random.default_rng(seed)
    boot_means = np.empty((n_boot, len(settings)))
    boot_slopes = np.empty(n_boot)
    logs = {s: np.log10(s) for s in settings}
    for i in range(n_boot):
        xs, ys = [], []
        for j, s in enumerate(settings):
            drawn = rng.integers(0, len(by_setting[s]), len(by_setting[s]))
            cs = []
            for k in drawn:
                b = by_setting[s][k]
                ids = np.unique(b.clusters)
                pick = rng.choice(ids, size=len(ids), replace=True)
                rows = np.concatenate([np.flatnonzero(b.clusters == c) for c in pick])
                cs.append(head_count(b.scores[rows], b.recalled[rows], threshold))
            boot_means[i, j] = np.mean(cs)
            xs += [logs[s]] * len(cs)
            ys += cs
        boot_slopes[i] = _slope(np.array(xs), np.array(ys, dtype=np.float64))
    a = (1 - level) / 2
    lo, hi = np.quantile(boot_means, [a, 1 - a], axis=0)

    x = np.array([logs[s] for s in settings for _ in counts[s]])
    y = np.array([c for s in settings for c in counts[s]], dtype=np.float64)
    slope, p, n_perm = slope_permutation(x, y, seed)
    out = [SettingCount(s, counts[s], [b.name for b in by_setting[s]], float(np.mean(counts[s])), float(lo[j]),
                        float(hi[j]), n_layers * n_heads) for j, s in enumerate(settings)]
    slo, shi = np.quantile(boot_slopes, [a, 1 - a])
    return TrendResult(float(threshold), out, slope, float(slo), float(shi), p, n_perm, level, n_boot, seed)
