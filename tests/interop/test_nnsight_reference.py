"""nnsight as an independent reference for patching and head ablation on the same HF weights.

nnsight edits module inputs/outputs directly (its own tracing), so agreement with interp's
attention-interface route checks both the site resolution and the per-head slicing.
"""

import pytest
import torch
from nnsight import NNsight

import interp
from interp.models.tiny import tiny_random_hf

from tests.helpers import ids as make_ids

# (family, gqa, path to the block list, attribute of the output projection inside a block)
CASES = [("llama", True, "model.layers", "self_attn.o_proj"), ("gpt2", False, "transformer.h", "attn.c_proj"),
         ("gpt_neox", False, "gpt_neox.layers", "attention.dense")]


def _get(obj, path):
    for p in path.split("."):
        obj = getattr(obj, p)
    return obj


def _setup(family, gqa):
    model = interp.Model(tiny_random_hf(family, gqa, seed=0))
    ref = NNsight(tiny_random_hf(family, gqa, seed=0))
    x = make_ids(2, 10, seed=3)
    corrupt = x.clone()
    corrupt[:, 2] = (corrupt[:, 2] + 7) % 96
    return model, ref, x, corrupt


@pytest.mark.parametrize("family,gqa,blocks,o_proj", CASES, ids=[c[0] for c in CASES])
def test_residual_patch_matches_nnsight(family, gqa, blocks, o_proj):
    model, ref, x, corrupt = _setup(family, gqa)
    with ref.trace(x):
        clean_h = _get(ref, blocks)[1].output.save()
    with ref.trace(corrupt):
        _get(ref, blocks)[1].output[:, 3:] = clean_h[:, 3:]
        want = ref.output.save()
    cap = interp.Capture(["L1.resid_post"])
    with model.intervene(cap):
        model.forward(x)
    assert torch.allclose(cap["L1.resid_post"], clean_h, atol=1e-6)
    with model.intervene(interp.Patch({"L1.resid_post": cap["L1.resid_post"][:, 3:]}, positions=range(3, 10))):
        got = model.forward(corrupt)
    assert (got - want.logits).abs().max().item() <= 1e-5
    assert (got - model.forward(corrupt)).abs().max().item() > 1e-3  # the patch did something


@pytest.mark.parametrize("family,gqa,blocks,o_proj", CASES, ids=[c[0] for c in CASES])
def test_head_zero_ablation_matches_nnsight_o_proj_input(family, gqa, blocks, o_proj):
    model, ref, x, _ = _setup(family, gqa)
    d = model.spec.head_dim
    with ref.trace(x):
        _get(_get(ref, blocks)[1], o_proj).input[:, :, 2 * d:3 * d] = 0
        want = ref.output.save()
    with model.intervene(interp.AblateHeads([(1, 2)])):
        got = model.forward(x)
    assert (got - want.logits).abs().max().item() <= 1e-5
    assert (got - model.forward(x)).abs().max().item() > 1e-3


def test_head_out_patch_matches_nnsight():
    model, ref, x, corrupt = _setup("llama", True)
    d = model.spec.head_dim
    with ref.trace(x):
        z = ref.model.layers[2].self_attn.o_proj.input.save()
    with ref.trace(corrupt):
        ref.model.layers[2].self_attn.o_proj.input[:, :, d:2 * d] = z[:, :, d:2 * d]
        want = ref.output.save()
    cap = interp.Capture(["L2.head_out"])
    with model.intervene(cap):
        model.forward(x)
    with model.intervene(interp.Patch({"L2.head_out.H1": cap["L2.head_out.H1"]})):
        got = model.forward(corrupt)
    assert (got - want.logits).abs().max().item() <= 1e-5
