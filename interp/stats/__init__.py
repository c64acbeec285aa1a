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
  `json.dumps` accepts. Infinite effect sizes (see `paired_diff`) stay `float('inf')` here; the CLI
  writes strict JSON, with such a value as null plus a "nonfinite" note (`interp.runtime.jsonio.strict`).
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
* `sets_mean_ci`: hand-written two-level bootstrap (control sets, then samples) for pooled random controls;
  scipy's bootstrap resamples one level only.
* `count_trend` (stats/trend.py): hand-written two-level bootstrap (builds within a setting, then NIAH seeds
  within a build) of head counts; `slope_permutation`: the pairing permutation test of a slope, enumerated
  and vectorised in numpy (scipy's `permutation_test` gives the same p-values - the tests check it - but its
  exact enumeration took 75 s at n = 7).
* `holm` / `benjamini_hochberg` (stats/multiple.py): multiple-comparison adjustment, hand-written (a sort and a
  running max / min); `benjamini_hochberg` equals `scipy.stats.false_discovery_control` (tested).
* `column_sign_flip`: the sign-flip test of `paired_diff` for every cell of a grid at once (one matrix product
  of sign patterns by cells), with Benjamini-Hochberg over the cells.
* `column_mean_ci`: vectorised percentile bootstrap over pairs for every cell of a patching grid
  (scipy's bootstrap runs one statistic at a time; a grid has thousands of cells).
"""

from interp import package_face

_EXPORTS = {
    "BCA_MAX_N": "_common",
    "EXACT_SIGN_FLIP_MAX_N": "_common",
    "GridEstimate": "grid",
    "GridTest": "grid",
    "column_mean_ci": "grid",
    "column_sign_flip": "grid",
    "MatchedDraws": "heads",
    "matched_random_heads": "heads",
    "threshold_sweep": "heads",
    "adjust": "multiple",
    "benjamini_hochberg": "multiple",
    "holm": "multiple",
    "Estimate": "paired",
    "PairedComparison": "paired",
    "cohens_d": "paired",
    "mean_ci": "paired",
    "paired_diff": "paired",
    "sets_mean_ci": "paired",
    "PermutationResult": "permutation",
    "layer_clustered_permutation": "permutation",
}

__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS)
