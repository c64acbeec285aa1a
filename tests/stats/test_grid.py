"""The vectorised bootstrap of patching grids (interp.stats.column_mean_ci)."""

import numpy as np
import pytest


def test_column_mean_ci_equals_a_loop_over_cells():
    """The vectorised grid bootstrap == resampling the same pair indices cell by cell (NaN = cell absent)."""
    from interp.stats import column_mean_ci

    rng = np.random.default_rng(4)
    v = rng.normal(size=(12, 7))
    v[:4, 5] = np.nan  # a cell only 8 pairs have
    v[:11, 6] = np.nan  # a cell one pair has
    g = column_mean_ci(v, n_boot=500, seed=9, max_elements=50)  # tiny blocks: the block loop is exercised
    idx = np.random.default_rng(9).integers(0, 12, size=(500, 12))
    for c in range(7):
        col = v[:, c]
        have = ~np.isnan(col)
        assert g.n[c] == have.sum() and g.mean[c] == pytest.approx(np.nanmean(col))
        if have.sum() == 1:
            assert g.lo[c] == g.hi[c] == g.mean[c]
            continue
        boots = np.array([np.nanmean(col[i]) if have[i].any() else np.nan for i in idx])
        assert g.lo[c] == pytest.approx(np.nanquantile(boots, 0.025))
        assert g.hi[c] == pytest.approx(np.nanquantile(boots, 0.975))


def test_column_sign_flip_equals_paired_diff_per_cell_and_adjusts_by_bh():
    from interp.stats import benjamini_hochberg, column_sign_flip, paired_diff

    rng = np.random.default_rng(3)
    v = rng.normal(loc=0.6, size=(8, 30))
    v[:, 5] = 0.0  # no effect at all: p = 1
    v[2:, 7] = np.nan  # two pairs have this cell
    v[:, 9] = np.nan  # no pair: NaN
    t = column_sign_flip(v, n_perm=100, seed=0)
    assert t.exact  # 2^8 patterns, enumerated
    for c in range(30):
        if c == 9:
            assert np.isnan(t.p_value[c]) and np.isnan(t.p_bh[c])
            continue
        col = v[:, c][~np.isnan(v[:, c])]
        want = paired_diff(col, np.zeros(col.size), n_boot=10).p_value if col.size >= 2 else 1.0
        assert t.p_value[c] == pytest.approx(want, abs=1e-12), c
    assert t.p_floor[7] == pytest.approx(2 / 4) and t.p_floor[0] == pytest.approx(2 / 256) and t.p_value[5] == 1.0
    ok = ~np.isnan(t.p_value)
    np.testing.assert_allclose(t.p_bh[ok], benjamini_hochberg(t.p_value[ok]))
    # 20 pairs: drawn, never below a cell's own floor
    w = rng.normal(loc=2.0, size=(20, 4))
    w[3:, 1] = np.nan
    m = column_sign_flip(w, n_perm=500, seed=1)
    assert not m.exact and m.p_floor[0] == pytest.approx(1 / 501)
    assert m.p_value[1] >= 2 / 8 and m.p_floor[1] == pytest.approx(2 / 8)
