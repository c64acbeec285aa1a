"""rope-profile: each rotary pair's share of |q.k| (blocked computation = the direct [P, T, T] sum), and the
retrieval-vs-other comparison (Cohen's d with a bootstrap CI, layer-clustered permutation) for every statistic."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from interp.analyses.rope_profile import STATISTICS, RopeProfileConfig, compare_heads, pair_usage, run_rope_profile
from interp.sites import as_heads


def _direct(q, k, rope):
    """Every (pair, query, key) contribution at once, causal, summed: the definition, written out."""
    s = q.shape[0]
    out = []
    for j in range(rope.n_pairs):
        a, b = rope.pair_dims(j)
        c = torch.outer(q[:, a], k[:, a]) + torch.outer(q[:, b], k[:, b])
        out.append(sum(abs(float(c[i, jj])) for i in range(s) for jj in range(i + 1)))
    if rope.rotary_dims < rope.head_dim:
        rest = slice(rope.rotary_dims, rope.head_dim)
        c = q[:, rest] @ k[:, rest].T
        out.append(sum(abs(float(c[i, jj])) for i in range(s) for jj in range(i + 1)))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("rotary", [16, 8])
def test_pair_usage_in_blocks_equals_the_definition(rotary):
    g = torch.Generator().manual_seed(0)
    rope = SimpleNamespace(n_pairs=rotary // 2, rotary_dims=rotary, head_dim=16,
                           pair_dims=lambda j, P=rotary // 2: (j, j + P))
    q, k = torch.randn(21, 16, generator=g), torch.randn(21, 16, generator=g)
    ref = _direct(q, k, rope)
    for block in (1, 7 * 4 * rope.n_pairs * 21, 1 << 20):  # one query row, 7 rows, everything in one block
        got = pair_usage(q, k, rope, block_bytes=block).double()
        assert torch.allclose(got, ref, rtol=1e-5), (block, got, ref)


def test_compare_heads_finds_a_planted_difference_and_not_a_random_one():
    rng = np.random.default_rng(1)
    values = rng.normal(size=(6, 8))
    labels = np.zeros((6, 8), dtype=bool)
    labels[[2, 3, 4], [1, 5, 6]] = True
    labels[4, 2] = True
    null = compare_heads(values, labels, n_perm=2000, seed=0)
    planted = values.copy()
    planted[labels] += 3.0
    hit = compare_heads(planted, labels, n_perm=2000, seed=0)
    for c in (null, hit):
        lo, hi = c["cohens_d_ci"]
        assert lo <= c["cohens_d"] <= hi
    assert hit["cohens_d_ci"][0] > 0.5 and hit["layer_clustered_permutation"]["p_value"] < 0.05
    assert null["cohens_d_ci"][0] < 0 < null["cohens_d_ci"][1]
    assert null["layer_clustered_permutation"]["p_value"] > 0.05


def test_every_statistic_is_compared_and_the_chosen_one_is_the_comparison():
    import interp

    m = interp.load_model("tiny-llama", device="cpu")
    cfg = RopeProfileConfig(retrieval_heads=tuple(as_heads("L2H1,L3H0")), n_texts=2, n_tokens=32,
                            statistic="low_share", n_perm=200)
    res = run_rope_profile(m, cfg)
    assert set(res.comparisons) == set(STATISTICS)
    assert res.comparison == res.comparisons["low_share"]
    usage = np.array(res.usage)
    low = res.pair_order[: max(1, len(res.pair_freqs) // 4)]
    assert np.allclose(np.array(res.head_statistic), usage[:, :, low].sum(-1), atol=1e-5)
    assert np.allclose(usage.sum(-1), 1.0, atol=1e-5)
    # two heads in two 4-head layers: 4 x 4 labellings, enumerated; p cannot go below 2/16, and says so
    perms = [res.comparisons[s]["layer_clustered_permutation"] for s in STATISTICS]
    for pm in perms:
        assert pm["exact"] and pm["n_labellings"] == 16 and pm["p_floor"] == pytest.approx(2 / 16)
        assert pm["note"].startswith("no power at 0.05")
    # Holm over the four statistics, by hand
    ps = [pm["p_value"] for pm in perms]
    order = sorted(range(4), key=lambda i: ps[i])
    run = 0.0
    for rank, i in enumerate(order):
        run = max(run, min(1.0, (4 - rank) * ps[i]))
        assert perms[i]["p_holm"] == pytest.approx(run) and perms[i]["p_holm_family"] == 4
