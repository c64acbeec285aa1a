"""Every public function that takes heads takes every head form: "L2H0" strings (one, or a comma-separated
list), (layer, head) pairs and HeadIds, mixed; each gives the same HeadIds as the HeadId form."""

from __future__ import annotations

import numpy as np
import pytest

import interp
from interp import experiments as ex
from interp.sites import HeadId

FORMS = {"strings": ["L2H0", "L2H1"], "pairs": [(2, 0), (2, 1)], "head_ids": [HeadId(2, 0), HeadId(2, 1)],
         "mixed": ["L2H1", (2, 0)], "comma_list": "L2H0,L2H1"}
WANT = (HeadId(2, 0), HeadId(2, 1))


@pytest.fixture(scope="module")
def spec():
    return interp.load_model("tiny-qwen2").spec


@pytest.mark.parametrize("form", FORMS)
def test_random_head_controls(form, spec):
    ctl = ex.random_head_controls(FORMS[form], spec, lambda hs: (interp.AblateHeads(hs),), draws=2, seed=0,
                                  exclude=FORMS[form] if form != "head_ids" else ["L3H0"])
    ref = ex.random_head_controls(list(WANT), spec, lambda hs: (interp.AblateHeads(hs),), draws=2, seed=0,
                                  exclude=list(WANT) if form != "head_ids" else ["L3H0"])
    assert [c.heads for c in ctl.conditions] == [c.heads for c in ref.conditions]
    assert all(isinstance(h, HeadId) and h not in WANT for c in ctl.conditions for h in c.heads)


@pytest.mark.parametrize("form", FORMS)
def test_head_ablation_and_interventions(form):
    c = ex.head_ablation("target", FORMS[form], role="target")
    assert c.heads == WANT and c.interventions[0].heads == WANT
    assert interp.AblateHeads(FORMS[form]).heads == WANT
    assert interp.ZeroRopeDims(FORMS[form], [0, 1]).heads == WANT


@pytest.mark.parametrize("form", FORMS)
def test_write_norms_and_rope_thetas(form, spec):
    from interp.experiments.heads import WriteNorms
    from interp.models.rope import heads_by_theta

    norms = np.arange(spec.n_layers * spec.n_heads, dtype=float).reshape(spec.n_layers, spec.n_heads) + 1
    w = WriteNorms(norms, 1)
    assert w.relative(FORMS[form]) == pytest.approx(w.relative(list(WANT)))
    assert heads_by_theta(spec, FORMS[form]) == heads_by_theta(spec, list(WANT))


@pytest.mark.parametrize("form", FORMS)
def test_analysis_configs(form):
    from interp.analyses.ablation import AblationConfig
    from interp.analyses.head_curve import HeadCurveConfig
    from interp.analyses.rope_zero import RopeZeroConfig

    assert AblationConfig(heads=FORMS[form]).heads == WANT
    assert RopeZeroConfig(heads=FORMS[form]).heads == WANT
    ranked = HeadCurveConfig(ranked=FORMS[form], ks=(1,)).ranked
    assert set(ranked) == set(WANT) and all(isinstance(h, HeadId) for h in ranked)
    assert HeadCurveConfig(ranked=["L2H1", (2, 0)], ks=(1,)).ranked == (HeadId(2, 1), HeadId(2, 0))  # rank order kept


def test_a_bad_head_is_a_clear_error(spec):
    with pytest.raises(interp.InvalidInputError, match="bad head id 'layer2'.*L<layer>H<head>"):
        ex.random_head_controls(["layer2"], spec, lambda hs: (), draws=1)
    with pytest.raises(interp.InvalidInputError, match="bad head 2.5"):
        ex.head_ablation("x", [2.5])
