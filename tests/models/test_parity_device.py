"""Parity with plain transformers on a chosen device and dtype (bench/gpu_check.sh runs it on CUDA).

INTERP_TEST_DEVICE (default cpu) and INTERP_TEST_DTYPES (default bfloat16 on cpu: float32 is
tests/models/test_parity.py's; gpu_check.sh passes float32,bfloat16). Both models run the same dtype on the
same device, so the wrapper itself should add nothing; the tolerances allow for kernels that differ
between a wrapped and a plain call:

- logits: float32 1e-4 (TF32 off), bfloat16 0.02 absolute on logits of magnitude ~1 (bf16 keeps 8
  bits of mantissa: one rounding step at 1.0 is 0.0078);
- attention rows (recomputed by interp in float32 from the model's real q and k) against eager
  attention weights of a model in that dtype: float32 1e-4, bfloat16 0.02 (the eager softmax runs in
  float32 and is rounded to bf16; q and k are bf16 in both);
- head ablation: interp's AblateHeads vs the same heads zeroed by a hook on o_proj's input of the
  plain model: float32 1e-4, bfloat16 0.05.

Measured on CPU in bfloat16 (torch 2.13, all 12 decoder variants): logits bit-identical (max |diff| 0),
rows max |diff| 0.0043. On CUDA (bench/gpu_check.sh on an NVIDIA H200, torch 2.11.0+cu130, transformers 5.17.0,
2026-12-04): all 39 tests passed in float32 and bfloat16 (bench/results/gpu/parity.log, parity.xml); the test
asserts the tolerances and does not record the differences themselves.
"""

import os

import pytest
import torch

import interp

from tests.helpers import DECODER_IDS, DECODERS, ids, left_padded

DEVICE = os.environ.get("INTERP_TEST_DEVICE", "cpu")
DTYPES = [d for d in os.environ.get("INTERP_TEST_DTYPES", "bfloat16").split(",") if d]
TOL = {"float32": dict(logits=1e-4, rows=1e-4, ablate=1e-4), "bfloat16": dict(logits=0.02, rows=0.02, ablate=0.05),
       "float16": dict(logits=0.02, rows=0.01, ablate=0.02)}

if DEVICE.startswith("cuda") and not torch.cuda.is_available():
    pytest.skip("INTERP_TEST_DEVICE=cuda but CUDA is not available", allow_module_level=True)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def _models(family, gqa, dtype, impl=None):
    from interp.models.tiny import tiny_random_hf

    dt = getattr(torch, dtype)
    plain = tiny_random_hf(family, gqa, seed=0, attn_implementation=impl).to(DEVICE, dt).eval()
    wrapped = interp.Model(tiny_random_hf(family, gqa, seed=0).to(DEVICE, dt).eval())
    return plain, wrapped


def _hf(hf, x, mask, **kw):
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        return hf(input_ids=x, attention_mask=mask, position_ids=pos, **kw)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family,gqa", DECODERS, ids=DECODER_IDS)
def test_logits_and_rows_equal_plain_hf(family, gqa, dtype):
    plain, model = _models(family, gqa, dtype)
    _, xp, mask = left_padded()
    xp, mask = xp.to(DEVICE), mask.to(DEVICE)
    real = mask.bool()
    ref = _hf(plain, xp, mask).logits.float()
    got = model.forward(xp, attention_mask=mask).float()
    assert (got[real] - ref[real]).abs().max().item() <= TOL[dtype]["logits"]

    eager, _ = _models(family, gqa, dtype, impl="eager")
    att = _hf(eager, xp, mask, output_attentions=True).attentions
    positions = [5, 9, 11]
    rows = interp.attention_rows(model, xp, positions, attention_mask=mask)
    for layer, a in enumerate(att):
        diff = (rows[:, layer].float() - a[:, :, positions, :].float()).abs().amax(dim=(1, 3))[real[:, positions]]
        assert diff.max().item() <= TOL[dtype]["rows"], f"layer {layer}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family,gqa", [d for d in DECODERS if d[0] in ("llama", "qwen2", "gpt2")],
                         ids=[i for d, i in zip(DECODERS, DECODER_IDS) if d[0] in ("llama", "qwen2", "gpt2")])
def test_head_ablation_equals_a_hook_on_the_output_projection(family, gqa, dtype):
    """The reference: the plain model with the heads' slices of o_proj's (c_proj's) input zeroed by a
    forward pre-hook; interp: AblateHeads(mode="zero")."""
    plain, model = _models(family, gqa, dtype)
    spec = model.spec
    heads = [(0, h) for h in range(0, spec.n_heads, 2)] + [(spec.n_layers - 1, spec.n_heads - 1)]
    x = ids(2, 12).to(DEVICE)
    mask = torch.ones_like(x)
    blocks = plain.model.layers if family != "gpt2" else plain.transformer.h
    handles = []
    for layer, head in heads:
        proj = blocks[layer].self_attn.o_proj if family != "gpt2" else blocks[layer].attn.c_proj

        def zero(mod, args, head=head):
            z = args[0].clone()
            z[..., head * spec.head_dim:(head + 1) * spec.head_dim] = 0
            return (z,)

        handles.append(proj.register_forward_pre_hook(zero))
    try:
        ref = _hf(plain, x, mask).logits.float()
    finally:
        for h in handles:
            h.remove()
    with model.intervene(interp.AblateHeads([f"L{l}H{h}" for l, h in heads], mode="zero")):
        got = model.forward(x).float()
    assert (got - ref).abs().max().item() <= TOL[dtype]["ablate"]
    unablated = model.forward(x).float()
    assert (unablated - got).abs().max().item() > 2 * TOL[dtype]["ablate"]  # the ablation did something


def test_default_dtype_is_bf16_on_gpus_and_float32_on_cpu():
    """The choice load_model makes when no dtype is given (CUDA itself is not needed to test the rule)."""
    from interp.models.loading import default_dtype

    assert default_dtype(torch.device("cuda", 0)) is torch.bfloat16
    assert default_dtype(torch.device("cpu")) is torch.float32
    assert default_dtype(None, "auto", cuda_available=True) is torch.bfloat16
    assert default_dtype(None, "auto", cuda_available=False) is torch.float32
    assert next(interp.load_model("tiny-random-llama", device="cpu").hf.parameters()).dtype is torch.float32
