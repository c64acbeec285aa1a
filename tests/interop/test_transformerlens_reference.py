"""TransformerLens as an independent reference for interp's attention rows and head ablations.

interp recomputes attention rows from the post-RoPE q and k it sees inside its attention
wrapper, and ablates heads by editing the per-head output (the o_proj input) there. Both are
checked here against TransformerLens 4.3's ``TransformerBridge``, which wraps a *separate* HF
model object with the same seeded weights and exposes its own hook points:

* attention rows  <->  ``blocks.{l}.attn.hook_pattern``   [batch, head, query, key]
* AblateHeads(mode="zero")  <->  a hook on ``blocks.{l}.attn.hook_z`` (alias of
  ``blocks.{l}.attn.o.hook_in``, reshaped to [batch, pos, head, d_head]) that zeroes the head
* AblateHeads(mode="uniform")  <->  zeroing the head's query: ``hook_q`` (q projection output;
  RoPE is linear, so this zeroes the post-RoPE query too) except on OLMo-2, whose query norm
  spans all heads, where it is ``hook_rot_q`` (post-norm, post-RoPE)

Every comparison is at every query position and <= 1e-5; every ablation is also required to move
the logits by far more than that, so a no-op on either side fails the test.

What works offline, and how (TransformerLens 4.3.0, transformers 5.x, no Hub access):

* ``TransformerBridge.boot_transformers(name, hf_model=hf, tokenizer=tok)`` wraps an
  already-built HF model; with ``hf_model=`` the config is taken from the model, and with
  ``tokenizer=`` nothing is fetched. ``name`` is only a label.
* The tokenizer must carry ``name_or_path`` in its ``init_kwargs`` (the bridge's
  ``get_tokenizer_with_bos`` pops that key and re-loads the tokenizer from it with
  ``add_bos_token=True``); a ``PreTrainedTokenizerFast`` built in memory has no such key and
  raises ``KeyError: 'name_or_path'``. So a WordLevel tokenizer over the 96-token tiny vocab is
  saved to a tmp directory and loaded back from there. Token ids are passed directly, so the
  tokenizer never shapes the inputs.
* Models built with ``from_config`` have ``config.architectures`` unset; the bridge falls back to
  a model_type table that lacks ``olmo2`` ("Could not determine supported architecture"). Setting
  ``config.architectures = [type(hf).__name__]`` (what ``save_pretrained`` would record) fixes it.
* The bridge switches the model it wraps to eager attention *in place*, and replaces its
  submodules, so it always gets its own copy; interp's model keeps its default (sdpa; eager for
  Gemma-2, whose attention softcap sdpa cannot do).
* Covered: gpt2, gpt_neox, llama, qwen2, mistral, gemma2, olmo2 (the last four with MHA and
  GQA, llama too). Gemma-2's tiny config has a sliding window (6) shorter than the test sequence,
  so windowed masking is exercised as well.
* BERT: interp wraps the headless ``BertModel``; the bridge supports only ``BertForMaskedLM`` /
  ``BertLMHeadModel`` (booting a ``BertModel`` fails with ``'BertModel' object has no attribute
  'bert'``). So the reference is a ``BertForMaskedLM`` whose ``.bert`` gets the same weights, and
  interp's output (last hidden state) is compared with the bridge's ``blocks.{last}.hook_out``.

Nothing needed the HookedTransformer fallback.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformer_lens")
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformer_lens.model_bridge import TransformerBridge  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

import interp  # noqa: E402
from interp.models.tiny import VOCAB, tiny_random_hf  # noqa: E402

TOL = 1e-5
MIN_EFFECT = 1e-3  # an ablation must move some logit by at least this much

CAUSAL_CASES = [
    ("gpt2", False),
    ("gpt_neox", False),
    ("llama", False),
    ("llama", True),
    ("qwen2", False),
    ("qwen2", True),
    ("mistral", False),
    ("mistral", True),
    ("gemma2", False),
    ("gemma2", True),
    ("olmo2", False),
    ("olmo2", True),
]
CASE_IDS = [f"{f}-{'gqa' if g else 'mha'}" for f, g in CAUSAL_CASES]

# (layer, head) pairs ablated together; spread over layers and, under GQA (2 kv heads of 4 query
# heads), over both members of a group in layer 2
ABLATED = [(0, 3), (1, 2), (2, 0), (2, 1)]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    vocab = {f"t{i}": i for i in range(VOCAB)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="t0", pad_token="t0", bos_token="t1",
                                  eos_token="t2")
    d = tmp_path_factory.mktemp("tiny-tokenizer")
    tok.save_pretrained(d)
    return PreTrainedTokenizerFast.from_pretrained(d)  # now has name_or_path (see module docstring)


@pytest.fixture(scope="module")
def ids():
    g = torch.Generator().manual_seed(1)
    return torch.randint(3, VOCAB, (2, 14), generator=g)


def _bridge(hf, tokenizer, label: str):
    hf.config.architectures = [type(hf).__name__]
    br = TransformerBridge.boot_transformers(label, hf_model=hf, tokenizer=tokenizer, device="cpu")
    br.eval()
    return br


def _pair(family: str, gqa: bool, tokenizer):
    """interp.Model on one copy of the seeded weights, TransformerBridge on another."""
    model = interp.Model(tiny_random_hf(family, gqa=gqa, seed=0))
    br = _bridge(tiny_random_hf(family, gqa=gqa, seed=0), tokenizer, f"tiny-random-{family}")
    return model, br


def _zero_head_hook(heads: list[int]):
    def hook(z, hook):  # z: [batch, pos, head, d_head]
        z = z.clone()
        z[:, :, heads] = 0.0
        return z

    return hook


def _by_layer(pairs):
    out: dict[int, list[int]] = {}
    for layer, head in pairs:
        out.setdefault(layer, []).append(head)
    return out


def _maxdiff(a, b) -> float:
    assert a.shape == b.shape, (tuple(a.shape), tuple(b.shape))
    return (a.float() - b.float()).abs().max().item()


@pytest.mark.parametrize("family,gqa", CAUSAL_CASES, ids=CASE_IDS)
def test_patterns_and_zero_ablation_match_transformerlens(family, gqa, tokenizer, ids):
    model, br = _pair(family, gqa, tokenizer)
    n_layers, seq = model.spec.n_layers, ids.shape[1]
    with torch.no_grad():
        clean = model.forward(ids)
        tl_clean, cache = br.run_with_cache(ids)
    # the two copies agree before anything is compared (sdpa vs eager: float reordering only)
    assert _maxdiff(clean, tl_clean) <= TOL

    # (1) attention rows at every query position == TL's hook_pattern
    rows = interp.attention_rows(model, ids, list(range(seq)))  # [b, layer, head, q, k]
    tl_rows = torch.stack([cache[f"blocks.{l}.attn.hook_pattern"] for l in range(n_layers)], dim=1)
    assert rows.shape == (ids.shape[0], n_layers, model.spec.n_heads, seq, seq)
    assert _maxdiff(rows, tl_rows) <= TOL
    # they are real causal softmax rows, not something degenerate both sides happen to share
    assert torch.allclose(rows.sum(-1), torch.ones(()), atol=1e-5)
    assert rows.triu(1).abs().max().item() == 0.0

    # (2) zero ablation through hook_z == AblateHeads(mode="zero")
    with model.intervene(interp.AblateHeads(ABLATED, mode="zero")):
        ablated = model.forward(ids)
    hooks = [(f"blocks.{l}.attn.hook_z", _zero_head_hook(hs)) for l, hs in _by_layer(ABLATED).items()]
    with torch.no_grad():
        tl_ablated = br.run_with_hooks(ids, fwd_hooks=hooks)
    assert _maxdiff(ablated, tl_ablated) <= TOL
    assert _maxdiff(ablated, clean) > MIN_EFFECT

    # a single head too (the brief's case), on the last layer so only that head differs
    last = n_layers - 1
    with model.intervene(interp.AblateHeads([(last, 1)], mode="zero")):
        one = model.forward(ids)
    with torch.no_grad():
        tl_one = br.run_with_hooks(ids, fwd_hooks=[(f"blocks.{last}.attn.hook_z", _zero_head_hook([1]))])
    assert _maxdiff(one, tl_one) <= TOL
    assert _maxdiff(one, clean) > MIN_EFFECT


# Where to zero a head's query on the bridge so that it equals interp's post-RoPE, post-QK-norm
# zeroing: without a query norm, zeroing the projection output (hook_q) is enough, since RoPE is
# linear; OLMo-2 normalises q over all heads at once (zeroing one head's projection would change
# the others), so it needs the post-norm, post-RoPE hook_rot_q. (On GPT-NeoX the bridge
# recomputes attention from its joint qkv and never fires hook_rot_q.)
QUERY_HOOK = {"olmo2": "hook_rot_q"}


@pytest.mark.parametrize("family,gqa", CAUSAL_CASES, ids=CASE_IDS)
def test_uniform_ablation_matches_zeroed_query(family, gqa, tokenizer, ids):
    model, br = _pair(family, gqa, tokenizer)
    q_hook = QUERY_HOOK.get(family, "hook_q")
    with torch.no_grad():
        clean = model.forward(ids)
    with model.intervene(interp.AblateHeads(ABLATED, mode="uniform")):
        ablated = model.forward(ids)
    fired = []

    def counted(hook_fn):
        def hook(x, hook):
            fired.append(hook.name)
            return hook_fn(x, hook)

        return hook

    hooks = [(f"blocks.{l}.attn.{q_hook}", counted(_zero_head_hook(hs))) for l, hs in _by_layer(ABLATED).items()]
    with torch.no_grad():
        tl_ablated = br.run_with_hooks(ids, fwd_hooks=hooks)
    assert len(fired) == len(hooks), f"{q_hook} fired {len(fired)} times, expected {len(hooks)}"
    assert _maxdiff(ablated, tl_ablated) <= TOL
    assert _maxdiff(ablated, clean) > MIN_EFFECT


def test_left_padded_rows_and_ablation_match_transformerlens(tokenizer):
    """Left padding on llama: interp derives position ids from the mask; TL gets the same ones."""
    model, br = _pair("llama", True, tokenizer)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(3, VOCAB, (2, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :5] = 0
    ids[1, :5] = 0
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    kw = dict(attention_mask=mask, position_ids=pos)
    real = mask.bool()
    with torch.no_grad():
        clean = model.forward(ids, attention_mask=mask)
        tl_clean, cache = br.run_with_cache(ids, **kw)
    assert _maxdiff(clean[real], tl_clean[real]) <= TOL

    rows = interp.attention_rows(model, ids, list(range(ids.shape[1])), attention_mask=mask)
    tl_rows = torch.stack([cache[f"blocks.{l}.attn.hook_pattern"] for l in range(model.spec.n_layers)], dim=1)
    # compare real query positions only (padding queries: interp returns 0 rows, eager a NaN-free fill)
    for b in range(ids.shape[0]):
        q = real[b].nonzero().squeeze(-1)
        assert _maxdiff(rows[b][:, :, q], tl_rows[b][:, :, q]) <= TOL
        if (~real[b]).any():
            assert rows[b][:, :, q][..., ~real[b]].abs().max().item() == 0.0  # no weight on padding

    with model.intervene(interp.AblateHeads(ABLATED, mode="zero")):
        ablated = model.forward(ids, attention_mask=mask)
    hooks = [(f"blocks.{l}.attn.hook_z", _zero_head_hook(hs)) for l, hs in _by_layer(ABLATED).items()]
    with torch.no_grad():
        tl_ablated = br.run_with_hooks(ids, fwd_hooks=hooks, **kw)
    assert _maxdiff(ablated[real], tl_ablated[real]) <= TOL
    assert _maxdiff(ablated[real], clean[real]) > MIN_EFFECT


def _bert_pair(tokenizer):
    from transformers import BertForMaskedLM

    from interp.models.tiny import tiny_config

    model = interp.Model(tiny_random_hf("bert", seed=0))
    ref = BertForMaskedLM(tiny_config("bert")).eval()  # its own config: the bridge edits it in place
    missing, unexpected = ref.bert.load_state_dict(tiny_random_hf("bert", seed=0).state_dict(), strict=False)
    assert not missing and all(k.startswith("pooler.") for k in unexpected), (missing, unexpected)
    return model, _bridge(ref, tokenizer, "tiny-random-bert")


def _bert_rows(tokenizer, ids, mask):
    model, br = _bert_pair(tokenizer)
    n_layers, seq = model.spec.n_layers, ids.shape[1]
    with torch.no_grad():
        _, cache = br.run_with_cache(ids, attention_mask=mask)
    rows = interp.attention_rows(model, ids, list(range(seq)), attention_mask=mask)
    tl_rows = torch.stack([cache[f"blocks.{l}.attn.hook_pattern"] for l in range(n_layers)], dim=1)
    return rows, tl_rows


def test_bert_hidden_states_and_zero_ablation_match_transformerlens(tokenizer, ids):
    """Encoder: interp's output is the last hidden state, TL's is blocks.{last}.hook_out."""
    model, br = _bert_pair(tokenizer)
    out_hook = f"blocks.{model.spec.n_layers - 1}.hook_out"
    mask = torch.ones_like(ids)
    captured = {}

    def grab(x, hook):
        captured[hook.name] = x.detach().clone()
        return x

    with torch.no_grad():
        hidden = model.forward(ids)
        br.run_with_hooks(ids, attention_mask=mask, fwd_hooks=[(out_hook, grab)])
    assert _maxdiff(hidden, captured.pop(out_hook)) <= TOL

    with model.intervene(interp.AblateHeads(ABLATED, mode="zero")):
        ablated = model.forward(ids)
    hooks = [(f"blocks.{l}.attn.hook_z", _zero_head_hook(hs)) for l, hs in _by_layer(ABLATED).items()]
    with torch.no_grad():
        br.run_with_hooks(ids, attention_mask=mask, fwd_hooks=hooks + [(out_hook, grab)])
    assert _maxdiff(ablated, captured[out_hook]) <= TOL
    assert _maxdiff(ablated, hidden) > MIN_EFFECT


def test_bert_rows_with_padding_match_transformerlens(tokenizer, ids):
    """With padding the model builds a 4D mask, and interp's rows are the real bidirectional ones."""
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    rows, tl_rows = _bert_rows(tokenizer, ids, mask)
    real = mask.bool()
    for b in range(ids.shape[0]):
        q = real[b].nonzero().squeeze(-1)
        assert _maxdiff(rows[b][:, :, q], tl_rows[b][:, :, q]) <= TOL
    assert rows[0].triu(1).abs().max().item() > 0.0  # keys after the query get weight


def test_bert_rows_without_padding_match_transformerlens(tokenizer, ids):
    rows, tl_rows = _bert_rows(tokenizer, ids, torch.ones_like(ids))
    assert _maxdiff(rows, tl_rows) <= TOL
