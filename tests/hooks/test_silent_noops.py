"""Silent no-ops are errors: an intervention that could not apply raises instead of returning
unchanged numbers that look like a result."""

from __future__ import annotations

import pytest
import torch

import interp
from interp.errors import InterventionError, InvalidInputError, UnsupportedModelError
from interp.models.tiny import tiny_random_hf

from tests.helpers import ids


def _model():
    return interp.Model(tiny_random_hf("llama", True, seed=0))


def test_detached_model_refuses_interventions_and_attach_restores():
    model = _model()
    x = ids(2, 8)
    clean = model.forward(x)
    model.detach()
    with pytest.raises(InterventionError, match="detached"):
        with model.intervene(interp.AblateHeads(["L1H0"])):
            model.forward(x)
    model.attach()
    with model.intervene(interp.AblateHeads(["L1H0"])):
        ablated = model.forward(x)
    assert (ablated - clean).abs().max() > 1e-3


def test_attention_that_bypasses_the_wrapper_is_an_error():
    """Someone resets the attention implementation behind interp's back: the ablation would change
    nothing; the call count per layer catches it (attention-level interventions only)."""
    model = _model()
    x = ids(2, 8)
    for module in model.hf.modules():  # what a wrapper that switches attention in place does
        cfg = getattr(module, "config", None)
        if cfg is not None and hasattr(cfg, "_attn_implementation"):
            cfg._attn_implementation = "sdpa"
    with pytest.raises(InterventionError, match=r"did not apply: 1 forward pass\(es\) ran .* layer\(s\) \[0, 1, 2\]"):
        with model.intervene(interp.AblateHeads(["L1H0"])):
            model.forward(x)
    cap = interp.Capture(["L1.resid_pre"])  # module hooks still work: no error for them
    with model.intervene(cap):
        model.forward(x)
    assert cap["L1.resid_pre"].shape[:2] == (2, 8)


def test_nnsight_wrapped_model_is_unwrapped_and_interventions_apply():
    nnsight = pytest.importorskip("nnsight")
    x = ids(2, 8)
    plain = _model()
    wrapped = interp.Model(nnsight.NNsight(tiny_random_hf("llama", True, seed=0)))
    assert isinstance(wrapped.hf, torch.nn.Module) and type(wrapped.hf).__module__.startswith("transformers")
    with plain.intervene(interp.AblateHeads(["L1H0", "L2H3"])):
        want = plain.forward(x)
    with wrapped.intervene(interp.AblateHeads(["L1H0", "L2H3"])):
        got = wrapped.forward(x)
    assert (got - want).abs().max() <= 1e-6 and (got - wrapped.forward(x)).abs().max() > 1e-3


def test_transformerlens_bridge_is_refused_with_a_reason(tmp_path):
    pytest.importorskip("transformer_lens")
    from tests.helpers import tl_bridge

    hf = tiny_random_hf("llama", True, seed=0)
    model = interp.Model(hf)  # built first, then the bridge rewires the same HF model in place
    br, _ = tl_bridge("llama", True, tmp_path, hf=hf)
    with pytest.raises(UnsupportedModelError, match="TransformerLens TransformerBridge"):
        interp.Model(br)
    with pytest.raises(InterventionError, match="did not apply"):
        with model.intervene(interp.AblateHeads(["L1H0"])):
            model.forward(ids(2, 8))


@pytest.mark.parametrize("make", [
    lambda: interp.AblateHeads(["L1H0"], rows=[99]),
    lambda: interp.ZeroRopeDims(["L1H0"], dims=[0, 1], rows=[2]),
    lambda: interp.RemapPositions(["L1H0"], scale=0.5, rows=[2]),
    lambda: interp.Patch({"L1.resid_pre": lambda t: t * 0}, rows=[5]),
])
def test_rows_outside_the_batch_are_refused(make):
    model = _model()
    with pytest.raises(InvalidInputError, match="the batch has 2 rows"):
        with model.intervene(make()):
            model.forward(ids(2, 8))
    with pytest.raises(InvalidInputError, match="the batch has 2 rows"):
        with model.intervene(make()):
            model.greedy_decode(ids(2, 8), max_new_tokens=2)


def test_negative_rows_are_refused():
    with pytest.raises(InvalidInputError, match="negative"):
        interp.AblateHeads(["L1H0"], rows=[-1])


def test_reused_capture_and_rows_recorder_start_fresh():
    model = _model()
    x = ids(2, 8)
    cap = interp.Capture(["L1.resid_pre", "L1.head_out"])
    rec = interp.AttentionRows([-1])
    for _ in range(2):
        with model.intervene(cap, rec):
            model.forward(x)
        assert cap["L1.resid_pre"].shape == (2, 8, model.spec.d_model)  # not (2, 16, ...) from two runs
        assert cap["L1.head_out"].shape[:2] == (2, 8)
        assert rec.result().shape[0] == 2 and len(rec.steps) == 1


def test_an_observer_under_the_old_flag_name_is_refused_not_skipped():
    """`observes_qk` is now `observes_qkv`: an intervention still using the old name would never be called, so
    `intervene` refuses it with the new names; the renamed one records."""
    from interp.hooks.interventions import Intervention

    class Old(Intervention):
        observes_qk = True

        def observe_qk(self, call, q, k, v):
            self.seen = True

    class New(Intervention):
        observes_qkv = True

        def observe_qkv(self, call, q, k, v):
            self.seen = True

    model = _model()
    with pytest.raises(InterventionError, match="observes_qkv"):
        with model.intervene(Old()):
            model.forward(ids(1, 6))
    new = New()
    with model.intervene(new):
        model.forward(ids(1, 6))
    assert new.seen
