"""Tests for random head controls: distinct matched draws (interp.stats.matched_random_heads) and the
two-level bootstrap of pooled control sets (interp.stats.sets_mean_ci). Expected numbers are derived in the
tests themselves."""

from __future__ import annotations

import json

import numpy as np
import pytest

from interp.stats import MatchedDraws, matched_random_heads, mean_ci

# Any warning (scipy's DegenerateDataWarning, numpy RuntimeWarning for 0/0, ...) fails a test.
pytestmark = pytest.mark.filterwarnings("error")


# --------------------------------------------------------------------------- matched_random_heads


def _per_layer(heads, n_layers):
    c = [0] * n_layers
    for lay, _ in heads:
        c[lay] += 1
    return c


def test_matched_draws_match_layers_and_avoid_selected():
    n_layers, n_heads = 8, 8
    selected = [(0, 1), (0, 5), (2, 2), (3, 0), (3, 1), (3, 7), (7, 4)]
    exclude = [(0, 0), (3, 2), (5, 5)]
    md = matched_random_heads(selected, n_layers, n_heads, n_draws=60, seed=0, exclude=exclude)
    assert isinstance(md, MatchedDraws)
    assert md.shortfall_by_layer == {} and md.seed == 0
    assert md.selected_by_layer == {0: 2, 2: 1, 3: 3, 7: 1}
    assert len(md.draws) == 60
    blocked = set(selected) | set(exclude)
    for draw in md.draws:
        assert draw == sorted(draw)
        assert len(draw) == len(set(draw)) == len(selected)
        assert _per_layer(draw, n_layers) == _per_layer(selected, n_layers)
        assert not blocked & set(draw)
        assert all(isinstance(h, tuple) and 0 <= h[0] < n_layers and 0 <= h[1] < n_heads for h in draw)
    assert len({tuple(d) for d in md.draws}) > 50  # draws differ


def test_matched_draws_reproducible_and_seed_dependent():
    sel = [(1, 0), (1, 3), (4, 2)]
    a = matched_random_heads(sel, 6, 6, 20, seed=3)
    b = matched_random_heads(sel, 6, 6, 20, seed=3)
    c = matched_random_heads(sel, 6, 6, 20, seed=4)
    assert a == b
    assert a.draws != c.draws


def test_unmatched_draws_take_the_count_from_any_layer_uniformly():
    # the llama-organism case: layer 2 has 2 selected heads of 4, so only one layer-matched set exists
    sel, exclude = [(2, 0), (2, 1)], [(0, 3)]
    matched = matched_random_heads(sel, 4, 4, n_draws=20, seed=0)
    assert matched.draws == [[(2, 2), (2, 3)]] and (matched.n_possible, matched.n_requested) == (1, 20)
    # any layer: C(13, 2) = 78 distinct pairs exist; asking for more returns each exactly once
    md = matched_random_heads(sel, 4, 4, n_draws=3000, seed=0, exclude=exclude, by_layer=False)
    assert md.by_layer is False and md.shortfall_by_layer == {} and md.selected_by_layer == {2: 2}
    assert md.n_possible == 78 and len(md.draws) == 78 and len({tuple(d) for d in md.draws}) == 78
    for draw in md.draws:
        assert draw == sorted(draw) and len(set(draw)) == 2
        assert not set(draw) & (set(sel) | set(exclude))
    # fewer asked than exist: distinct, and uniform over the 13 available heads across seeds
    counts = np.zeros((4, 4))
    for seed in range(400):
        d = matched_random_heads(sel, 4, 4, n_draws=5, seed=seed, exclude=exclude, by_layer=False).draws
        assert len(d) == 5 and len({tuple(x) for x in d}) == 5
        for draw in d:
            for lay, h in draw:
                counts[lay, h] += 1
    assert counts[2, 0] == counts[2, 1] == counts[0, 3] == 0
    np.testing.assert_allclose(counts[counts > 0], 400 * 5 * 2 / 13, rtol=0.15)


def test_matched_draws_are_distinct_sets_uniform_within_layer():
    # 4 candidates in layer 2: at most 4 distinct sets, every one of them once
    md = matched_random_heads([(2, 0)], 4, 5, n_draws=2000, seed=1)
    assert sorted(md.draws) == [[(2, h)] for h in range(1, 5)] and md.n_possible == 4
    # with fewer asked than exist, each draw is a distinct set and the heads are uniform over seeds
    counts = np.zeros(5)
    for seed in range(1000):
        d = matched_random_heads([(2, 0)], 4, 5, n_draws=2, seed=seed).draws
        assert len(d) == 2 and d[0] != d[1]
        for ((lay, h),) in d:
            assert lay == 2
            counts[h] += 1
    assert counts[0] == 0
    np.testing.assert_allclose(counts[1:], 500, atol=80)


def test_matched_draws_shortfall_borrows_nearest_layers():
    # layer 2 is entirely selected; layer 1 has one free head, which its own selected head uses up.
    # So both of layer 2's heads must come from layer 3 (distance 1), never from 0 or 4.
    sel = [(2, 0), (2, 1), (1, 0)]
    md = matched_random_heads(sel, n_layers=5, n_heads=2, n_draws=10, seed=0)
    assert md.shortfall_by_layer == {2: 2}
    assert md.draws == [[(1, 1), (3, 0), (3, 1)]]  # the one set there is, once (not 10 copies)

    # layer 1 fully blocked (3 selected + 1 excluded): its 3 heads come from layers 0 and 2 only.
    md = matched_random_heads([(1, 0), (1, 1), (1, 2)], 4, 4, 200, seed=0, exclude=[(1, 3)])
    assert md.shortfall_by_layer == {1: 3} and md.n_possible is None  # not a product of binomials
    assert 1 < len(md.draws) <= 200 and len({tuple(d) for d in md.draws}) == len(md.draws)
    used = set()
    for draw in md.draws:
        assert len(draw) == 3 and all(lay in (0, 2) for lay, _ in draw)
        used |= {lay for lay, _ in draw}
    assert used == {0, 2}  # equidistant layers are pooled, both get used
    d = md.to_dict()
    assert json.loads(json.dumps(d)) == d and d["shortfall_by_layer"] == {"1": 3}


def test_matched_draws_errors_and_edge_cases():
    with pytest.raises(ValueError, match="outside the model"):
        matched_random_heads([(4, 0)], 4, 4, 1)
    with pytest.raises(ValueError, match="distinct"):
        matched_random_heads([(1, 0), (1, 0)], 4, 4, 1)
    with pytest.raises(ValueError, match="only 1 heads"):
        matched_random_heads([(0, 0), (0, 1)], 1, 3, 1)
    empty = matched_random_heads([], 3, 3, 4)
    assert empty.draws == [[]] and empty.n_possible == 1  # the empty set, once
    hid = matched_random_heads(["L1H1"], 3, 3, 5, seed=0)
    assert all(_per_layer(d, 3) == [0, 1, 0] and (1, 1) not in d for d in hid.draws)


def test_pooled_sets_ci_carries_the_spread_between_sets():
    """Three control sets with recall 1, 0, 1 on the same 8 prompts: the pooled mean is 2/3, and its CI must not
    be the zero-width interval of the per-prompt means (each prompt's pooled value is 2/3); resampling the sets
    spans 0..1. Checked against a slow two-level resampling loop with the same random stream."""
    from interp.stats import sets_mean_ci

    v = np.array([[1.0] * 8, [0.0] * 8, [1.0] * 8])
    assert mean_ci(v.mean(0), n_boot=500).lo == pytest.approx(2 / 3)  # the per-prompt pool: no spread at all
    mean, lo, hi, method = sets_mean_ci(v, n_boot=2000, seed=0)
    assert mean == pytest.approx(2 / 3) and lo == 0.0 and hi == 1.0 and "two-level" in method
    # a loop over resamples with the same generator gives the same interval
    r = np.random.default_rng(1)
    w = r.normal(size=(4, 10)) + np.arange(4)[:, None]
    base = r.normal(size=10)
    got = sets_mean_ci(w, minus=base, n_boot=300, seed=7, chunk=300)
    rng = np.random.default_rng(np.random.SeedSequence(7).spawn(2)[1])
    s_idx, p_idx = rng.integers(4, size=(300, 4)), rng.integers(10, size=(300, 10))
    ref = [np.mean([(w - base)[s][:, p_idx[b]].mean() for s in [s_idx[b]]]) for b in range(300)]
    assert got[1:3] == pytest.approx(tuple(np.quantile(ref, [0.025, 0.975])))
    assert got[0] == pytest.approx((w - base).mean())
    with pytest.raises(ValueError, match="not paired"):
        sets_mean_ci(w, minus=base[:5])
