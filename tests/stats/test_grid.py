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
