"""Robust facts of the real pretrained models (docs/results-real.md), pinned on fast grids so that a regression in
loading or in interventions on real weights fails CI: detection finds the heads the full runs found, and
knocking them out does far more than knocking out matched random heads.

Marked `real` (fetched on first use, like tests/models/test_real_models.py)."""

from __future__ import annotations

import pytest

from interp.analyses.induction import InductionConfig, detect_induction_heads
from interp.tasks.repeated import RepeatedConfig

from tests.models.test_real_models import model_of

pytestmark = pytest.mark.real

# the induction heads of the full runs (docs/results-real.md: 32 sequences x 50 tokens)
FULL_RUN_INDUCTION = {"smollm2-135m": {"L18H6", "L17H3", "L17H4", "L18H7", "L23H2", "L20H6"},
                      "gemma3-270m": {"L5H1", "L11H2", "L5H2"}}


@pytest.mark.parametrize("alias", ["smollm2-135m", "gemma3-270m"])
def test_induction_heads_carry_the_copy_and_random_heads_do_not(alias, one_thread):
    model = model_of(alias)
    cfg = InductionConfig(repeated=RepeatedConfig(lengths=(24,), n_seqs=8), draws=2, copy_tokens=64, n_boot=300,
                          n_perm=300)
    res = detect_induction_heads(model, cfg)
    found = set(res.induction_heads)
    assert len(found & FULL_RUN_INDUCTION[alias]) >= 2, (found, FULL_RUN_INDUCTION[alias])
    c = res.causal
    target = next(r for r in c["conditions"] if r["name"] == "target")["vs_baseline"]["late_loss"]["diff"]
    rand = c["random_pooled"]["vs_baseline"]["late_loss"]["diff"]
    tvr = c["target_vs_random"][0]
    assert target > 3.0 and target > 4 * max(rand, 0.1), (target, rand)  # nats per second-copy token
    assert tvr["metric"] == "late_loss" and tvr["diff_lo"] > 0
