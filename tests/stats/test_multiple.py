"""Multiple-comparison adjustment: Holm against a hand computation, Benjamini-Hochberg against scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from interp.errors import InvalidInputError
from interp.stats import adjust, benjamini_hochberg, holm


def test_holm_by_hand():
    # sorted 0.01, 0.02, 0.03, 0.04 (m = 4): 4*0.01, 3*0.02, 2*0.03, 1*0.04 -> 0.04, 0.06, 0.06, 0.06 (running max)
    p = [0.03, 0.01, 0.04, 0.02]
    np.testing.assert_allclose(holm(p), [0.06, 0.04, 0.06, 0.06])
    np.testing.assert_allclose(holm([0.5, 0.9]), [1.0, 1.0])  # capped at 1
    assert holm([0.2]).tolist() == [0.2] and holm([]).size == 0
    # never above Bonferroni, never below the raw p
    p = np.random.default_rng(0).random(30) ** 3
    assert np.all(holm(p) <= np.minimum(1, 30 * p) + 1e-15) and np.all(holm(p) >= p)


def test_benjamini_hochberg_equals_scipy():
    for seed in range(5):
        p = np.random.default_rng(seed).random(40) ** 2
        np.testing.assert_allclose(benjamini_hochberg(p), sps.false_discovery_control(p), rtol=1e-12)
    np.testing.assert_allclose(adjust([0.01, 0.04], "bh"), [0.02, 0.04])


def test_adjust_rejects_bad_input():
    with pytest.raises(InvalidInputError):
        adjust([0.1], "bonferroni")
    with pytest.raises(InvalidInputError):
        holm([0.1, 1.5])
    with pytest.raises(InvalidInputError):
        holm([np.nan])
