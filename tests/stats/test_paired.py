"""Tests for interp.stats. Every expected number is derived independently in the test itself."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from interp import stats as S
from interp.stats import _common as SC
from interp.stats import permutation as SP
from interp.errors import InvalidInputError
from interp.stats import (
    cohens_d,
    layer_clustered_permutation,
    mean_ci,
    paired_diff,
    threshold_sweep,
)

# Any warning (scipy's DegenerateDataWarning, numpy RuntimeWarning for 0/0, ...) fails a test.
pytestmark = pytest.mark.filterwarnings("error")


def _exact_sign_flip_p(d) -> float:
    """Two-sided sign-flip p by brute-force enumeration of all 2**n sign patterns."""
    d = np.asarray(d, dtype=float)
    obs = abs(d.mean())
    hits = 0
    total = 0
    for signs in itertools.product((1.0, -1.0), repeat=d.size):
        total += 1
        if abs(np.mean(np.array(signs) * d)) >= obs - 1e-12:
            hits += 1
    return hits / total


# --------------------------------------------------------------------------- mean_ci


def test_mean_ci_bernoulli_contains_truth_with_wald_like_width():
    p_true, n = 0.3, 400
    x = (np.random.default_rng(123).random(n) < p_true).astype(float)
    est = mean_ci(x, n_boot=4000, seed=0)
    assert est.n == n and est.level == 0.95 and est.method == "bca"
    assert est.mean == pytest.approx(x.mean())
    assert est.lo < p_true < est.hi
    assert est.lo < est.mean < est.hi
    # The Wald interval +-1.96 * sqrt(p(1-p)/n) is accurate at this n: bounds agree to ~0.01.
    se = math.sqrt(est.mean * (1 - est.mean) / n)
    assert est.lo == pytest.approx(est.mean - 1.96 * se, abs=0.012)
    assert est.hi == pytest.approx(est.mean + 1.96 * se, abs=0.012)


def test_mean_ci_coverage_is_near_nominal():
    rng = np.random.default_rng(7)
    covered = 0
    reps = 80
    for i in range(reps):
        x = rng.normal(loc=2.0, scale=1.0, size=40)
        e = mean_ci(x, n_boot=500, level=0.9, seed=i)
        covered += e.lo <= 2.0 <= e.hi
    # nominal 0.90; binomial sd over 80 reps is ~0.034
    assert 0.78 <= covered / reps <= 0.98


def test_mean_ci_all_equal_collapses_without_warnings():
    for data in ([1.0] * 25, [0] * 7, [3.5]):
        e = mean_ci(data, seed=1)
        assert e.lo == e.hi == e.mean == float(data[0])
        assert e.method == "constant"
        assert not any(math.isnan(v) for v in (e.mean, e.lo, e.hi))


def test_mean_ci_lopsided_bernoulli_is_finite_and_ordered():
    e = mean_ci([0] * 29 + [1], n_boot=2000, seed=0)
    assert 0.0 <= e.lo <= e.mean <= e.hi <= 1.0
    assert e.hi > e.lo


def test_mean_ci_deterministic_for_seed_and_seed_matters():
    x = np.random.default_rng(0).normal(size=50)
    a, b, c = mean_ci(x, n_boot=800, seed=5), mean_ci(x, n_boot=800, seed=5), mean_ci(x, n_boot=800, seed=6)
    assert a == b
    assert (a.lo, a.hi) != (c.lo, c.hi)


def test_mean_ci_wider_at_higher_level():
    x = np.random.default_rng(2).normal(size=60)
    e90 = mean_ci(x, n_boot=2000, level=0.90, seed=0)
    e99 = mean_ci(x, n_boot=2000, level=0.99, seed=0)
    assert e99.lo < e90.lo and e99.hi > e90.hi


def test_mean_ci_bca_fallback_uses_percentile_of_same_distribution(monkeypatch):
    real = SC._sps.bootstrap
    seen = {}

    def degenerate_bca(*args, **kwargs):
        res = real(*args, **kwargs)
        seen["dist"] = res.bootstrap_distribution.copy()
        import warnings

        warnings.warn("forced", SC._sps.DegenerateDataWarning)
        return res

    monkeypatch.setattr(SC._sps, "bootstrap", degenerate_bca)
    e = mean_ci(np.arange(20.0), n_boot=1000, seed=3)
    assert e.method == "percentile (BCa degenerate)"
    lo, hi = np.quantile(seen["dist"], [0.025, 0.975])
    assert (e.lo, e.hi) == (pytest.approx(lo), pytest.approx(hi))


def test_mean_ci_large_n_uses_percentile():
    x = (np.random.default_rng(4).random(S.BCA_MAX_N + 1) < 0.5).astype(float)
    e = mean_ci(x, n_boot=200, seed=0)
    assert e.method == "percentile"
    se = x.std() / math.sqrt(x.size)
    assert e.lo < x.mean() < e.hi and (e.hi - e.lo) == pytest.approx(2 * 1.96 * se, rel=0.25)


def test_mean_ci_rejects_bad_input():
    with pytest.raises(ValueError, match="NaN"):
        mean_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="at least 1"):
        mean_ci([])
    with pytest.raises(ValueError, match="level"):
        mean_ci([1.0, 2.0], level=95)
    with pytest.raises(ValueError, match="seed"):
        mean_ci([1.0, 2.0], seed=None)


# --------------------------------------------------------------------------- paired_diff


def test_paired_diff_shift_exact():
    x = np.random.default_rng(0).normal(size=12)
    r = paired_diff(x, x + 1.0, seed=0)
    assert r.diff == pytest.approx(-1.0)
    assert r.mean_x - r.mean_y == pytest.approx(-1.0)
    assert r.diff_lo == pytest.approx(-1.0) and r.diff_hi == pytest.approx(-1.0)
    # only the all-(+) and all-(-) patterns are as extreme: 2 / 2**12
    assert r.p_value == pytest.approx(2 / 2**12)
    assert r.n_perm == 2**12 and r.p_method.startswith("exact")
    assert r.cohens_d == -math.inf


def test_paired_diff_shift_monte_carlo_hits_floor():
    x = np.random.default_rng(1).normal(size=30)
    r = paired_diff(x, x + 1.0, n_boot=500, n_perm=999, seed=0)
    assert r.p_method.startswith("monte-carlo") and r.n_perm == 999
    assert r.p_value == pytest.approx(1 / 1000)  # +1 correction: never 0


def test_paired_diff_noisy_shift():
    rng = np.random.default_rng(2)
    x = rng.normal(size=30)
    y = x + 1.0 + rng.normal(scale=0.3, size=30)
    r = paired_diff(x, y, n_boot=2000, n_perm=2000, seed=0)
    d = x - y
    assert r.diff == pytest.approx(d.mean())
    assert r.diff_lo < -1.0 < r.diff_hi  # true shift inside the CI
    assert r.diff_hi < 0
    assert r.p_value < 0.001
    assert r.cohens_d == pytest.approx(d.mean() / d.std(ddof=1))
    assert r.cohens_d < -2


def test_paired_diff_identical_gives_p1_and_an_undefined_d():
    x = np.random.default_rng(3).normal(size=25)
    r = paired_diff(x, x.copy(), n_boot=500, n_perm=500)
    assert r.p_value == 1.0
    assert math.isnan(r.cohens_d)  # 0/0: undefined, not a measured 0
    assert r.diff == 0.0 and r.diff_lo == 0.0 and r.diff_hi == 0.0
    r_small = paired_diff([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert r_small.p_value == 1.0 and math.isnan(r_small.cohens_d)


def test_paired_diff_hand_computed_exact_p():
    # d = [1, 2, 3]: sums of +-1 +-2 +-3 are {6, 4, 2, 0, 0, -2, -4, -6}; |sum| >= 6 twice -> 2/8.
    r = paired_diff([2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    assert r.p_value == pytest.approx(0.25)
    # d = [1, 2, 3] has mean 2 and sd 1 -> d_z = 2
    assert r.cohens_d == pytest.approx(2.0)


@pytest.mark.parametrize("n", [5, 9])
def test_paired_diff_exact_p_matches_enumeration(n):
    rng = np.random.default_rng(10 + n)
    x = rng.normal(size=n)
    y = x - 0.4 + rng.normal(scale=0.8, size=n)
    r = paired_diff(x, y, n_boot=200, seed=4)
    assert r.p_value == pytest.approx(_exact_sign_flip_p(x - y), abs=1e-12)


def test_paired_diff_exact_p_with_ties():
    # 0.1 + 0.2 + 0.3 - 0.4 + 0.4 ties the observed 0.6 only in exact arithmetic; 0/1 data tie a lot.
    d = np.array([0.1, 0.2, 0.3, 0.4, -0.4])
    r = paired_diff(d, np.zeros(5), n_boot=100)
    assert r.p_value == pytest.approx(_exact_sign_flip_p(d), abs=1e-12)
    rng = np.random.default_rng(21)
    x, y = (rng.random(12) < 0.7).astype(float), (rng.random(12) < 0.4).astype(float)
    r = paired_diff(x, y, n_boot=100)
    assert r.p_value == pytest.approx(_exact_sign_flip_p(x - y), abs=1e-12)


def test_paired_diff_agrees_with_scipy_permutation_test():
    from scipy import stats as sps

    def stat(a, axis=-1):
        return np.abs(np.mean(a, axis=axis))

    rng = np.random.default_rng(31)
    d = rng.normal(loc=0.3, size=10)
    ref = sps.permutation_test((d,), stat, permutation_type="samples", vectorized=True,
                               n_resamples=np.inf, alternative="greater")
    assert paired_diff(d, np.zeros(10), n_boot=100).p_value == pytest.approx(ref.pvalue, abs=1e-12)
    d = rng.normal(loc=0.25, size=40)
    ref = sps.permutation_test((d,), stat, permutation_type="samples", vectorized=True,
                               n_resamples=4000, alternative="greater",
                               **{SC._rng_kw(sps.permutation_test): np.random.default_rng(0)})
    mine = paired_diff(d, np.zeros(40), n_boot=100, n_perm=4000, seed=0).p_value
    assert 0.02 < mine < 0.98  # not at a boundary, so the comparison means something
    assert mine == pytest.approx(ref.pvalue, abs=0.02)  # two MC estimates, sd ~0.005 each


def test_paired_diff_monte_carlo_p_close_to_exact():
    n = 18  # above the exact limit; enumerate 2**18 patterns here, vectorised
    rng = np.random.default_rng(5)
    d = rng.normal(loc=0.35, size=n)
    bits = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1).astype(float)
    signs = 1.0 - 2.0 * bits
    exact = np.mean(np.abs(signs @ d) >= abs(d.sum()) - 1e-9)
    r = paired_diff(d, np.zeros(n), n_boot=200, n_perm=20000, seed=0)
    assert r.p_method.startswith("monte-carlo")
    assert 0.01 < exact < 0.9
    assert r.p_value == pytest.approx(exact, abs=0.012)  # MC sd ~ 0.003


def test_paired_diff_null_is_calibrated():
    rng = np.random.default_rng(11)
    ps = []
    for i in range(40):
        x, y = rng.normal(size=20), rng.normal(size=20)
        ps.append(paired_diff(x, y, n_boot=50, n_perm=199, seed=i).p_value)
    ps = np.array(ps)
    assert np.mean(ps < 0.05) <= 0.2
    assert 0.3 < np.median(ps) < 0.7


def test_paired_diff_ci_equals_bootstrap_of_differences_and_is_paired():
    rng = np.random.default_rng(6)
    base = rng.normal(scale=5.0, size=40)  # large shared per-sample variation
    x = base + 0.5 + rng.normal(scale=0.2, size=40)
    y = base
    r = paired_diff(x, y, n_boot=1500, n_perm=500, seed=9)
    m = mean_ci(x - y, n_boot=1500, seed=9)
    assert (r.diff_lo, r.diff_hi) == (m.lo, m.hi)
    # Pairing removes the shared variation: the CI is far narrower than an unpaired one would be.
    assert r.diff_hi - r.diff_lo < 0.3
    assert r.diff_lo < 0.5 < r.diff_hi


def test_paired_diff_deterministic_and_jsonable():
    rng = np.random.default_rng(8)
    x, y = rng.normal(size=20), rng.normal(size=20)
    a = paired_diff(x, y, n_boot=300, n_perm=300, seed=2)
    b = paired_diff(x, y, n_boot=300, n_perm=300, seed=2)
    assert a == b
    d = a.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert all(type(v) in (int, float, str, bool) or v is None for v in d.values())


def test_paired_diff_flips_only_nonzero_differences_exactly_and_names_its_floor():
    # 20 recall pairs, 10 of them differ (all the same way): 2^10 distinct sign patterns, fewer than the
    # 10000 permutations asked, so the test is exact and p is 2 / 1024, never the Monte Carlo 1 / 10001.
    x = np.array([0.0] * 10 + [1.0] * 10)
    y = np.ones(20)
    r = paired_diff(x, y, n_boot=200, n_perm=10000, seed=0)
    assert r.p_method.startswith("exact") and r.n_perm == 2**10 and r.n_informative == 10
    assert r.p_value == pytest.approx(2 / 2**10) and r.p_floor == pytest.approx(2 / 2**10)
    assert r.at_floor and "floor of its design" in r.p_note and "10 of 20 pairs differ" in r.p_note
    # the p-value equals the one over every pattern of all the pairs (zeros flip to themselves)
    d = np.array([0.0, 1.0, 0.0, -1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    assert paired_diff(d, np.zeros(12), n_boot=100).p_value == pytest.approx(_exact_sign_flip_p(d), abs=1e-12)
    # a p off its floor has no note; Monte Carlo names its own floor
    z = paired_diff([1.0, 2.0, -0.5, 3.0, 0.2, -1.0, 2.5], np.zeros(7), n_boot=100)
    assert not z.at_floor and z.p_note is None and z.p_floor == pytest.approx(2 / 2**7)
    mc = paired_diff(np.arange(30.0), np.arange(30.0) + 1, n_boot=100, n_perm=999)
    assert mc.p_floor == pytest.approx(1 / 1000) and mc.at_floor and "Monte Carlo floor" in mc.p_note


def test_paired_diff_says_when_it_has_no_power():
    r = paired_diff([0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], n_boot=100)  # 2^4 patterns: floor 0.125
    assert r.p_value == pytest.approx(0.125) and r.p_floor == pytest.approx(0.125)
    assert r.p_note.startswith("no power at 0.05")
    same = paired_diff([1.0, 2.0], [1.0, 2.0], n_boot=100)
    assert same.p_value == 1.0 and same.n_informative == 0 and same.p_note.startswith("no power")


def test_paired_diff_rejects_unpaired_or_tiny():
    with pytest.raises(ValueError, match="same samples"):
        paired_diff([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="at least 2 pairs"):
        paired_diff([1.0], [0.0])
    assert issubclass(InvalidInputError, ValueError)


# --------------------------------------------------------------------------- cohens_d


def test_cohens_d_hand_formula():
    a, b = [1.0, 2.0, 3.0], [2.0, 3.0, 4.0, 5.0]
    # means 2 and 3.5; SS_a = 2, SS_b = 5; pooled var = 7 / 5
    assert cohens_d(a, b) == pytest.approx(-1.5 / math.sqrt(7 / 5))
    assert cohens_d(b, a) == pytest.approx(1.5 / math.sqrt(7 / 5))
    rng = np.random.default_rng(0)
    a, b = rng.normal(1, 2, 30), rng.normal(0, 1, 45)
    pooled = math.sqrt(((30 - 1) * a.var(ddof=1) + (45 - 1) * b.var(ddof=1)) / (30 + 45 - 2))
    assert cohens_d(a, b) == pytest.approx((a.mean() - b.mean()) / pooled)


def test_cohens_d_degenerate():
    assert cohens_d([1.0, 1.0], [1.0, 1.0]) == 0.0
    assert cohens_d([2.0, 2.0], [1.0, 1.0]) == math.inf
    assert cohens_d([0.0, 0.0], [1.0]) == -math.inf
    with pytest.raises(ValueError):
        cohens_d([1.0], [2.0])


# --------------------------------------------------------------------------- layer_clustered_permutation


def _layer_table(rng, n_layers=10, n_heads=12):
    layers = np.repeat(np.arange(n_layers), n_heads)
    return layers, n_layers * n_heads


def _counts_by_layer(mask, layers):
    return np.bincount(layers, weights=mask.astype(float), minlength=layers.max() + 1)


def test_permute_within_layers_keeps_counts_and_mixes():
    rng = np.random.default_rng(0)
    layers = np.repeat(np.arange(4), 6)
    labels = np.zeros(24, bool)
    labels[[0, 1, 7, 18, 19, 20, 21, 22, 23]] = True  # layer 3 fully labelled, layer 2 none
    masks = SP._permute_within_layers(labels, layers, 4000, rng)
    want = _counts_by_layer(labels, layers)
    for row in masks[:200]:
        np.testing.assert_array_equal(_counts_by_layer(row, layers), want)
    # every head of a mixed layer is labelled at rate k/m; fixed layers never change
    rate = masks.mean(axis=0)
    np.testing.assert_allclose(rate[:6], 2 / 6, atol=0.03)
    np.testing.assert_allclose(rate[6:12], 1 / 6, atol=0.03)
    assert np.all(rate[12:18] == 0) and np.all(rate[18:] == 1)
    assert len({r.tobytes() for r in masks[:, :12]}) > 50


def test_layer_permutation_only_uses_within_layer_shuffles(monkeypatch):
    real = SP._permute_within_layers
    recorded = []

    def spy(labels, layers, n, rng):
        out = real(labels, layers, n, rng)
        recorded.append((np.asarray(layers).copy(), out.copy()))
        return out

    monkeypatch.setattr(SP, "_permute_within_layers", spy)
    rng = np.random.default_rng(1)
    layers, n = _layer_table(rng, 5, 8)
    labels = rng.random(n) < 0.25
    values = rng.normal(size=n)
    res = layer_clustered_permutation(values, labels, layers, n_perm=300, seed=0)
    assert sum(m.shape[0] for _, m in recorded) == 300
    want = _counts_by_layer(labels, layers)
    for lay, masks in recorded:
        for row in masks:
            np.testing.assert_array_equal(_counts_by_layer(row, lay), want)
    assert res.labelled_by_layer == {i: int(want[i]) for i in range(5)}


def test_layer_permutation_detects_real_effect():
    rng = np.random.default_rng(2)
    layers, n = _layer_table(rng)
    labels = np.zeros(n, bool)
    labels[rng.choice(n, 15, replace=False)] = True
    values = rng.normal(size=n) + 1.5 * labels
    res = layer_clustered_permutation(values, labels, layers, n_perm=2000, seed=0)
    assert res.observed == pytest.approx(cohens_d(values[labels], values[~labels]), rel=1e-9)
    assert res.observed > 1.0
    assert res.p_value < 0.005
    assert res.p_value >= 1 / 2001
    assert abs(res.null_mean) < 0.5 * res.observed
    assert res.n_labelled == 15 and res.n_unlabelled == n - 15


def test_layer_permutation_random_labels_are_calibrated():
    rng = np.random.default_rng(3)
    layers, n = _layer_table(rng)
    values = rng.normal(size=n) + 0.3 * layers  # depth trend, no label effect
    ps = []
    for i in range(30):
        labels = rng.random(n) < 0.15
        ps.append(layer_clustered_permutation(values, labels, layers, n_perm=199, seed=i).p_value)
    ps = np.array(ps)
    assert np.mean(ps < 0.05) <= 0.2
    assert np.median(ps) > 0.25


def test_layer_permutation_not_fooled_by_layer_trend():
    # Values grow with depth; labelled heads sit in deep layers but are typical *for their layer*.
    rng = np.random.default_rng(4)
    n_layers, n_heads = 8, 10
    layers = np.repeat(np.arange(n_layers), n_heads)
    ps, naive_ps = [], []
    for i in range(15):
        values = 2.0 * layers + rng.normal(size=layers.size)
        labels = np.zeros(layers.size, bool)
        for lay in (5, 6, 7):
            labels[rng.choice(np.flatnonzero(layers == lay), 3, replace=False)] = True
        res = layer_clustered_permutation(values, labels, layers, n_perm=199, seed=i)
        ps.append(res.p_value)
        # the null is centred on the layer-induced difference, far from 0
        assert res.null_mean > 0.8
        # a naive (unstratified) shuffle calls this hugely significant
        obs = cohens_d(values[labels], values[~labels])
        naive = np.array([cohens_d(values[p], values[~p]) for p in (rng.permutation(labels) for _ in range(100))])
        naive_ps.append(np.mean(np.abs(naive) >= abs(obs)))
    assert max(naive_ps) < 0.02
    ps = np.array(ps)
    assert np.mean(ps < 0.05) <= 0.2
    assert np.median(ps) > 0.25


def test_layer_permutation_detects_effect_below_layer_level():
    # Labelled heads are LOWER than their layer peers but still above the global mean: only a
    # two-sided test around the null (not around 0) sees this.
    rng = np.random.default_rng(6)
    layers = np.repeat(np.arange(8), 10)
    values = 2.0 * layers + 0.3 * rng.normal(size=layers.size)
    labels = np.zeros(layers.size, bool)
    for lay in (5, 6, 7):
        idx = rng.choice(np.flatnonzero(layers == lay), 3, replace=False)
        labels[idx] = True
        values[idx] -= 1.0
    res = layer_clustered_permutation(values, labels, layers, n_perm=999, seed=0)
    assert res.observed > 0 and res.observed < res.null_mean
    assert res.p_value == pytest.approx(2 / 1000)


def test_layer_permutation_mean_diff_2d_and_determinism():
    rng = np.random.default_rng(5)
    vals2d = rng.normal(size=(6, 8))
    labs2d = rng.random((6, 8)) < 0.3
    labs2d[0, 0] = True
    r2 = layer_clustered_permutation(vals2d, labs2d, None, n_perm=400, seed=1, statistic="mean_diff")
    r1 = layer_clustered_permutation(vals2d.ravel(), labs2d.ravel(), np.repeat(np.arange(6), 8),
                                     n_perm=400, seed=1, statistic="mean_diff")
    assert r1 == r2
    assert r2.observed == pytest.approx(vals2d[labs2d].mean() - vals2d[~labs2d].mean())
    assert r2.heads_by_layer == {i: 8 for i in range(6)}
    d = r2.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["labelled_by_layer"]["0"] == int(labs2d[0].sum())
    r3 = layer_clustered_permutation(vals2d, labs2d, None, n_perm=400, seed=2, statistic="mean_diff")
    assert r3.p_value != r2.p_value or r3.null_mean != r2.null_mean


def test_layer_permutation_no_free_layers_gives_p1():
    layers = np.repeat(np.arange(3), 4)
    labels = layers == 1  # a whole layer labelled: nothing can move within layers
    values = np.arange(12.0)
    res = layer_clustered_permutation(values, labels, layers, n_perm=50, seed=0)
    assert res.n_free_layers == 0
    assert res.p_value == 1.0
    assert res.null_sd == pytest.approx(0.0, abs=1e-9)


def _brute_layer_p(values, labels, layers):
    """Equal-tailed two-sided p over every labelling that keeps each layer's count (brute force)."""
    groups = [np.flatnonzero(layers == lay) for lay in np.unique(layers)]
    choices = [list(itertools.combinations(g, int(labels[g].sum()))) for g in groups]
    obs = cohens_d(values[labels], values[~labels])
    null = []
    for combo in itertools.product(*choices):
        m = np.zeros(labels.size, bool)
        m[[i for part in combo for i in part]] = True
        null.append(cohens_d(values[m], values[~m]))
    null = np.array(null)
    tol = 1e-9 * (1 + abs(obs))
    up, lo = np.mean(null >= obs - tol), np.mean(null <= obs + tol)
    return min(1.0, 2 * min(up, lo)), len(null)


def test_layer_permutation_enumerates_when_few_labellings_exist():
    # the retrieval heads are the top 4 of one 8-head layer: 70 labellings, so p is exactly 2/70 (its
    # floor), never the Monte Carlo value that can fall below it
    layers = np.repeat([0, 1], 8)
    values = np.arange(16.0)
    labels = np.zeros(16, bool)
    labels[4:8] = True
    res = layer_clustered_permutation(values, labels, layers, n_perm=10000, seed=0)
    assert res.exact and res.n_labellings == 70 and res.n_perm == 70
    assert res.p_value == pytest.approx(2 / 70) and res.p_floor == pytest.approx(2 / 70) and res.at_floor
    assert "floor of its design" in res.note and "one free layer, L0" in res.note
    assert res.p_method.startswith("exact")
    # the same p for any seed (nothing random is drawn)
    assert layer_clustered_permutation(values, labels, layers, n_perm=10000, seed=7).p_value == res.p_value
    # two free layers: 10 x 10 labellings, compared with brute force on noisy values
    rng = np.random.default_rng(9)
    layers = np.repeat([0, 1, 2], 5)
    values = rng.normal(size=15) + 0.3 * layers
    labels = np.zeros(15, bool)
    labels[[0, 3, 6, 7]] = True
    res = layer_clustered_permutation(values, labels, layers, n_perm=5000, seed=0)
    want, n = _brute_layer_p(values, labels, layers)
    assert n == 100 and res.n_labellings == 100 and res.exact
    assert res.p_value == pytest.approx(want, abs=1e-12)
    # more labellings than permutations asked: Monte Carlo, with its own floor
    mc = layer_clustered_permutation(values, labels, layers, n_perm=50, seed=0)
    assert not mc.exact and mc.n_perm == 50 and mc.p_floor == pytest.approx(2 / 51)
    assert mc.p_method.startswith("monte-carlo")


def test_layer_permutation_says_when_it_has_no_power():
    layers = np.repeat([0, 1], 4)
    labels = np.array([1, 1, 0, 0, 0, 0, 0, 0], bool)  # C(4, 2) = 6 labellings: p >= 1/3
    res = layer_clustered_permutation(np.arange(8.0), labels, layers, n_perm=1000, seed=0)
    assert res.p_floor == pytest.approx(2 / 6) and res.note.startswith("no power at 0.05")
    whole = layer_clustered_permutation(np.arange(8.0), layers == 1, layers, n_perm=1000, seed=0)
    assert whole.n_free_layers == 0 and whole.note.startswith("no power") and whole.p_value == 1.0
    d = res.to_dict()
    assert json.loads(json.dumps(d)) == d and d["p_floor"] == pytest.approx(1 / 3)


def test_layer_permutation_rejects_bad_input():
    with pytest.raises(ValueError, match="labelled and unlabelled"):
        layer_clustered_permutation([1.0, 2.0, 3.0], [False] * 3, [0, 0, 1])
    with pytest.raises(ValueError, match="statistic"):
        layer_clustered_permutation([1.0, 2.0, 3.0], [True, False, False], [0, 0, 1], statistic="t")
    with pytest.raises(ValueError, match="one layer per head"):
        layer_clustered_permutation([1.0, 2.0, 3.0], [True, False, False], [0, 0])
    with pytest.raises(ValueError, match="2-D"):
        layer_clustered_permutation([1.0, 2.0, 3.0], [True, False, False], None)


# --------------------------------------------------------------------------- threshold_sweep


def test_threshold_sweep_counts():
    scores = np.array([[0.1, 0.5, 0.9], [0.2, 0.6, np.nan]])
    out = threshold_sweep(scores, [0.0, 0.5, 0.95])
    assert [r["threshold"] for r in out] == [0.0, 0.5, 0.95]
    assert [r["n_heads"] for r in out] == [5, 2, 0]  # strict >: 0.5 itself does not count
    assert [r["per_layer"] for r in out] == [[3, 2], [1, 1], [0, 0]]
    assert out[1]["fraction"] == pytest.approx(2 / 5)
    assert json.loads(json.dumps(out)) == out
    single = threshold_sweep(scores, 0.15)
    assert len(single) == 1 and single[0]["n_heads"] == 4
    with pytest.raises(ValueError, match="2-D"):
        threshold_sweep(np.zeros(4), [0.0])

