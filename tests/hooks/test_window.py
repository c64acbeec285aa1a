"""Key windows (streaming heads) against an independent reference: the model's own eager attention with a
per-head mask built entry by entry, on tiny random models of every decoder family, MHA and GQA."""

import sys

import pytest
import torch

import interp
from interp.errors import InvalidInputError
from interp.hooks.window import WindowCells, WindowHeads, kv_memory, whole_groups
from interp.models.tiny import tiny_random_hf
from interp.sites import HeadId

from tests.helpers import DECODERS, DECODER_IDS, hf_out, ids, left_padded

HEADS = [(0, 1), (1, 2)]


def _reference_logits(family, gqa, x, mask, heads, window, sinks):
    """Plain HF (eager) forward in which each listed head's attention mask is rebuilt by hand: key j is
    visible to query i when the model's mask allows it and (j is among the first `sinks` real tokens of the
    row, or i - window < j <= i)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    hf = tiny_random_hf(family, gqa, seed=0, attn_implementation="eager")
    start = (mask == 0).sum(-1).tolist()  # left padding: the first real token of each row
    targets = {}
    for l, h in heads:
        targets.setdefault(l, []).append(h)

    def ref(module, q, k, v, attention_mask, **kw):
        eager = sys.modules[type(module).__module__].eager_attention_forward
        layer = module.layer_idx
        if layer not in targets:
            return eager(module, q, k, v, attention_mask, **kw)
        b, hq, s, _ = q.shape
        k_len = k.shape[2]
        if attention_mask is None:
            base = torch.zeros(b, 1, s, k_len)
            for i in range(s):
                base[:, :, i, i + 1:] = float("-inf")
        else:
            base = attention_mask[..., :k_len].float()
            if base.dtype == torch.bool:
                base = torch.where(base, 0.0, float("-inf"))
        per_head = base.expand(b, hq, s, k_len).clone()
        for r in range(b):
            for h in targets[layer]:
                for i in range(s):
                    for j in range(k_len):
                        if not (j < start[r] + sinks or i - window < j <= i):
                            per_head[r, h, i, j] = float("-inf")
        return eager(module, q, k, v, per_head, **kw)

    AttentionInterface.register("test_window_ref", ref)
    AttentionMaskInterface.register("test_window_ref", ALL_MASK_ATTENTION_FUNCTIONS._global_mapping["eager"])
    hf.config._attn_implementation = "test_window_ref"
    for m in hf.modules():
        if hasattr(m, "config") and hasattr(m.config, "_attn_implementation"):
            m.config._attn_implementation = "test_window_ref"
    return hf_out(hf, x, mask).logits


@pytest.mark.parametrize("family,gqa", DECODERS, ids=DECODER_IDS)
def test_window_matches_eager_reference_with_a_hand_built_mask(family, gqa):
    _, x, mask = left_padded()
    model = interp.Model(tiny_random_hf(family, gqa, seed=0))
    with model.intervene(WindowHeads(HEADS, window=3, sinks=2)):
        got = model.forward(x, attention_mask=mask)
    want = _reference_logits(family, gqa, x, mask, HEADS, window=3, sinks=2)
    real = mask.bool()
    assert torch.allclose(got[real], want[real], atol=2e-5), (got[real] - want[real]).abs().max()
    plain = model.forward(x, attention_mask=mask)
    assert (plain[real] - got[real]).abs().max() > 1e-3  # the window does change the heads it restricts


@pytest.mark.parametrize("family,gqa", [("llama", True), ("gpt2", False), ("gemma3", True)])
def test_a_window_covering_the_context_changes_nothing(family, gqa):
    model = interp.Model(tiny_random_hf(family, gqa, seed=0))
    x = ids(seq=12)
    plain = model.forward(x)
    with model.intervene(WindowHeads(HEADS, window=12, sinks=0)):
        same = model.forward(x)
    assert torch.equal(plain, same)
    with model.intervene(WindowHeads(HEADS, window=11, sinks=0)):
        moved = model.forward(x)
    assert not torch.equal(plain, moved)  # one key short of the context: the last query loses key 0


def test_gemma3_sliding_layers_under_their_own_window_are_unchanged():
    """transformers' sliding window (6 in the tiny Gemma-3) counts the query inside it, as interp's window
    does: windowing every head of the sliding layers to 6 keys, no sinks, leaves the logits as they were;
    5 keys does not."""
    hf = tiny_random_hf("gemma3", True, seed=0)
    model = interp.Model(hf)
    sliding = [i for i, t in enumerate(hf.config.layer_types) if t == "sliding_attention"]
    w = hf.config.sliding_window
    heads = [(l, h) for l in sliding for h in range(model.spec.n_heads)]
    x = ids(seq=16)
    plain = model.forward(x)
    with model.intervene(WindowHeads(heads, window=w, sinks=0)):
        same = model.forward(x)
    assert torch.allclose(plain, same, atol=1e-5)
    with model.intervene(WindowHeads(heads, window=w - 1, sinks=0)):
        assert not torch.allclose(plain, model.forward(x), atol=1e-3)


def test_attention_rows_see_the_window():
    model = interp.Model(tiny_random_hf("llama", True, seed=0))
    x = ids(batch=1, seq=12)
    with model.intervene(WindowHeads([(1, 2)], window=3, sinks=2)):
        rows = interp.attention_rows(model, x, [-1])  # [b, L, H, 1, k]
    r = rows[0, 1, 2, 0]
    assert torch.allclose(r.sum(), torch.tensor(1.0))
    assert r[2:9].abs().max() == 0 and r[:2].min() > 0 and r[9:].min() > 0  # sinks 0-1, window 9-11
    assert rows[0, 1, 1, 0, 2:9].min() > 0  # the other heads read everything


def test_window_cells_equal_one_windowing_per_row():
    model = interp.Model(tiny_random_hf("qwen2", True, seed=0))
    x = ids(batch=1, seq=12).expand(3, -1)
    cells = WindowCells([0, 1, 0], [1, 2, -1], window=4, sinks=1)
    with model.intervene(cells):
        got = model.forward(x)
    for r, (l, h) in enumerate([(0, 1), (1, 2)]):
        with model.intervene(WindowHeads([(l, h)], window=4, sinks=1)):
            assert torch.allclose(got[r], model.forward(x[:1])[0], atol=1e-6)
    assert torch.equal(got[2], model.forward(x[:1])[0])  # head -1: nothing windowed


def test_rows_select_which_prompts_are_windowed():
    model = interp.Model(tiny_random_hf("llama", False, seed=0))
    x = ids(batch=2, seq=12)
    plain = model.forward(x)
    with model.intervene(WindowHeads(HEADS, window=3, sinks=1, rows=[1])):
        got = model.forward(x)
    assert torch.equal(got[0], plain[0]) and not torch.allclose(got[1], plain[1], atol=1e-3)


def test_kv_memory_counts_whole_groups_only():
    spec = interp.Model(tiny_random_hf("llama", True, seed=0)).spec  # GQA: query heads share KV heads
    g = spec.n_heads // spec.n_kv_heads
    assert g > 1
    one = kv_memory(spec, [(0, 0)], context=1000, window=60, sinks=4)
    assert one["windowed_kv_heads"] == 0 and one["fraction"] == 1.0  # a lone query head frees nothing
    group = whole_groups([(0, 0)], spec)
    assert group == tuple(HeadId(0, i) for i in range(g))
    m = kv_memory(spec, group, context=1000, window=60, sinks=4, bytes_per_value=2)
    per_key = 2 * spec.head_dim * 2
    n_kv = spec.n_layers * spec.n_kv_heads
    assert m["full_bytes"] == n_kv * 1000 * per_key
    assert m["kept_bytes"] == (n_kv - 1) * 1000 * per_key + 64 * per_key


def test_bad_windows_are_refused():
    with pytest.raises(InvalidInputError, match="window must be >= 1"):
        WindowHeads(HEADS, window=0)
    with pytest.raises(InvalidInputError, match="sinks must be >= 0"):
        WindowHeads(HEADS, window=4, sinks=-1)
    model = interp.Model(tiny_random_hf("llama", False, seed=0))
    with pytest.raises(InvalidInputError, match="outside the model"):
        with model.intervene(WindowHeads([(9, 0)], window=4)):
            pass


def test_cached_decoding_under_a_window_matches_full_forwards():
    """Greedy decoding (KV cache, one query per step, left padding) under a window picks the tokens a full
    forward under the same window ranks first at every step."""
    model = interp.Model(tiny_random_hf("qwen2", True, seed=0))
    _, x, mask = left_padded()
    iv = WindowHeads([(0, 1), (1, 0), (1, 3)], window=3, sinks=1)
    with model.intervene(iv):
        new = model.greedy_decode(x, 4, attention_mask=mask)
        for step in range(4):
            ids_ = torch.cat([x, new[:, :step]], dim=1)
            m = torch.cat([mask, torch.ones_like(new[:, :step])], dim=1)
            assert torch.equal(model.forward(ids_, attention_mask=m)[:, -1].argmax(-1), new[:, step])
