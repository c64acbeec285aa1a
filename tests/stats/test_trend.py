"""interp.stats.trend: head counts per setting with a two-level bootstrap, and the exact slope permutation test
checked against a brute-force enumeration written here."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from interp.errors import InvalidInputError
from interp.stats.trend import BuildScores, count_trend, head_count


def _build(setting, n_above, name, n_prompts=12, n_clusters=4, noise=0.0, seed=0, n_heads=16):
    """Per-prompt scores on a 4 x 4 grid: `n_above` heads at 0.5, the rest at 0.02 (+ noise), all recalled."""
    rng = np.random.default_rng(seed)
    s = np.full((n_prompts, 4, n_heads // 4), 0.02) + noise * rng.random((n_prompts, 4, n_heads // 4))
    s.reshape(n_prompts, -1)[:, :n_above] = 0.5
    return BuildScores(setting, s, np.ones(n_prompts, bool), np.arange(n_prompts) % n_clusters, name)


def _brute_p(x, y):
    """Two-sided p of the OLS slope over every permutation of y (the reference for scipy's pairings test)."""
    xc = np.asarray(x) - np.mean(x)
    obs = np.polyfit(x, y, 1)[0]
    null = (np.array(list(itertools.permutations(y))) - np.mean(y)) @ xc / (xc @ xc)
    eps = 1e-12 * max(1.0, abs(obs))
    return min(1.0, 2 * min(np.mean(null >= obs - eps), np.mean(null <= obs + eps)))


def test_counts_slope_and_exact_p_match_an_independent_reference():
    counts = {1e3: [2, 3], 1e4: [3, 4], 5e5: [5, 6]}
    builds = [_build(t, c, f"t{t:g}-{i}") for t, cs in counts.items() for i, c in enumerate(cs)]
    res = count_trend(builds, threshold=0.1, n_boot=200)
    assert [s.counts for s in res.settings] == [[2, 3], [3, 4], [5, 6]]
    assert [s.mean for s in res.settings] == [2.5, 3.5, 5.5]
    x = np.log10([t for t, cs in counts.items() for _ in cs])
    y = np.array([c for cs in counts.values() for c in cs], float)
    assert res.slope == pytest.approx(np.polyfit(x, y, 1)[0])
    assert res.p_value == pytest.approx(_brute_p(x, y), abs=1e-9)
    assert res.n_permutations == 720 and res.p_value < 0.05
    # no prompt noise: each build's count is fixed, so the interval is the spread over the training seeds
    assert [(s.lo, s.hi) for s in res.settings] == [(2, 3), (3, 4), (5, 6)]
    assert res.slope_lo <= res.slope <= res.slope_hi


def test_an_unordered_setting_is_not_significant_and_equal_counts_give_p_one():
    builds = [_build(t, c, f"b{i}") for i, (t, c) in enumerate([(1e3, 4), (1e3, 2), (1e4, 3), (1e4, 3),
                                                                (5e5, 2), (5e5, 4)])]
    res = count_trend(builds, n_boot=100)
    assert res.p_value > 0.5
    flat = count_trend([_build(t, 3, f"f{t:g}{i}") for t in (1e3, 1e4) for i in range(2)], n_boot=50)
    assert flat.slope == 0 and flat.p_value == 1.0 and flat.n_permutations == 0


def test_prompt_noise_widens_the_interval_and_the_seed_makes_it_repeatable():
    # heads near the threshold: which NIAH seeds are drawn decides whether they count
    def noisy(t, i):
        rng = np.random.default_rng(i)
        s = np.full((16, 4, 4), 0.02)
        s[:, 0, :3] = 0.1 + 0.05 * rng.standard_normal((16, 3))
        return BuildScores(t, s, np.ones(16, bool), np.arange(16) % 8, f"{t:g}-{i}")

    builds = [noisy(t, i) for t in (1e3, 1e4) for i in range(2)]
    a = count_trend(builds, n_boot=300, seed=1)
    b = count_trend(builds, n_boot=300, seed=1)
    assert a == b
    assert any(s.hi - s.lo > 0 for s in a.settings)
    for s in a.settings:
        assert s.lo <= s.mean <= s.hi


def test_slope_permutation_equals_the_enumeration_and_refuses_bad_shapes():
    from interp.stats.trend import slope_permutation

    x = np.log10([1e3, 1e3, 1e4, 1e4, 5e5, 5e5, 5e5])
    y = np.array([0.89, 0.50, 1.0, 0.21, 1.0, 1.0, 0.95])
    slope, p, n = slope_permutation(x, y)
    assert slope == pytest.approx(np.polyfit(x, y, 1)[0]) and n == 5040
    assert p == pytest.approx(_brute_p(x, y), abs=1e-9)
    assert slope_permutation(x, np.ones(7)) == (0.0, 1.0, 0)
    from scipy.stats import permutation_test  # the same test, scipy's implementation (slow when exact)

    ref = permutation_test((x[:5], y[:5]), lambda u, v: np.polyfit(u, v, 1)[0], permutation_type="pairings",
                           n_resamples=np.inf)
    assert slope_permutation(x[:5], y[:5])[1] == pytest.approx(ref.pvalue, abs=1e-9)
    xs, ys = np.arange(12.0), np.random.default_rng(0).random(12)  # n > 8: random pairings
    mc = slope_permutation(xs, ys, seed=3)
    assert mc[2] == 20000 and abs(mc[1] - permutation_test((xs, ys), lambda u, v: np.polyfit(u, v, 1)[0],
                                                           permutation_type="pairings", n_resamples=1000,
                                                           random_state=0).pvalue) < 0.05
    with pytest.raises(InvalidInputError, match="same length"):
        slope_permutation(x, y[:3])


def test_only_recalled_prompts_count():
    s = np.zeros((4, 1, 2))
    s[:2, 0, 0] = 1.0  # high only on the prompts that were not recalled
    assert head_count(s, np.array([False, False, True, True]), 0.1) == 0
    assert head_count(s, np.array([True, True, False, False]), 0.1) == 1
    assert head_count(s, np.zeros(4, bool), 0.1) == 0


def test_bad_input_is_refused():
    good = _build(1e3, 2, "a")
    with pytest.raises(InvalidInputError, match="at least 2 distinct settings"):
        count_trend([good, _build(1e3, 3, "b")])
    with pytest.raises(InvalidInputError, match="differ in"):
        count_trend([good, _build(1e4, 3, "c", n_heads=8)])
    with pytest.raises(InvalidInputError, match="one entry per prompt"):
        BuildScores(1e3, np.zeros((3, 2, 2)), np.ones(2, bool), np.zeros(3), "d")
    with pytest.raises(InvalidInputError, match="NaN"):
        BuildScores(1e3, np.full((3, 2, 2), np.nan), np.ones(3, bool), np.zeros(3), "e")
    with pytest.raises(InvalidInputError, match="positive"):
        BuildScores(0.0, np.zeros((3, 2, 2)), np.ones(3, bool), np.zeros(3), "f")
