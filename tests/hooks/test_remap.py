"""RemapPositions against an independent reference: the plain HF model with its apply_rotary_pos_emb patched to
recompute RoPE at the remapped positions for one layer's heads (frequencies read back off that layer's own
cos/sin), on tiny models of every RoPE family, left-padded batches, llama3 / YaRN scaling and partial rotary."""


import pytest
import torch
import transformers as tf

import interp
from interp import Capture, Site
from interp.errors import InvalidInputError
from interp.hooks.remap import RemapPositions
from interp.models.tiny import tiny_config

from tests.helpers import DECODERS, attn_modules, ids, left_padded, pair, rope_hooked_logits

ROPE = [(f, g) for f, g in DECODERS if f != "gpt2"]
ROPE_IDS = [f"{f}-{'gqa' if g else 'mha'}" for f, g in ROPE]
LAYER = 1


def _reference(plain, x, mask, layer, q_heads, kv_heads, scale=1.0, offset=0.0, shift=0.0, pairs=None, seen=None):
    """Logits of plain HF with layer `layer`'s RoPE recomputed by hand: queries of `q_heads` at s*p + offset +
    shift, keys of `kv_heads` at s*j + shift (only rotary pairs `pairs`, default all). The frequencies and the
    cos/sin magnitude are read off the cos/sin the layer gets (position 1 of row 0). `seen`: a dict that gets
    the layer's remapped query as "q"."""
    pos = (mask.cumsum(-1) - 1).clamp(min=0).float()  # [b, s]
    assert (mask[0] == 1).all()

    def cos_sin(cos, sin, p):
        half = cos.shape[-1] // 2
        w = torch.atan2(sin[0, 1, :half].double(), cos[0, 1, :half].double())  # angle at position 1 = w
        amp = torch.sqrt(cos[0, 1, :half].double() ** 2 + sin[0, 1, :half].double() ** 2)
        ang = p.double()[..., None] * w
        c, s_ = (ang.cos() * amp).float(), (ang.sin() * amp).float()
        c, s_ = torch.cat([c, c], -1), torch.cat([s_, s_], -1)
        if pairs is not None:  # pairs outside the band keep the model's own cos/sin
            keep = torch.ones(half, dtype=torch.bool)
            keep[list(pairs)] = False
            keep = torch.cat([keep, keep])
            c, s_ = torch.where(keep, cos, c), torch.where(keep, sin, s_)
        return c, s_

    def patched(orig, q, k, cos, sin, *a, **kw):
        qe, ke = orig(q, k, cos, sin, *a, **kw)
        qe2, _ = orig(q, k, *cos_sin(cos, sin, pos * scale + offset + shift), *a, **kw)
        _, ke2 = orig(q, k, *cos_sin(cos, sin, pos * scale + shift), *a, **kw)
        qe, ke = qe.clone(), ke.clone()
        qe[:, q_heads] = qe2[:, q_heads]
        ke[:, kv_heads] = ke2[:, kv_heads]
        if seen is not None:
            seen["q"] = qe
        return qe, ke

    return rope_hooked_logits(plain, x, mask, layer, patched)


def _remapped(model, x, mask, *ivs):
    with model.intervene(*ivs):
        return model.forward(x, attention_mask=mask)


def _group(model):
    """Query heads of KV head 0 and [0]: the whole group, so the reference can move its shared keys."""
    return list(range(model.spec.group_size)), [0]


def _close_on_real(a, b, mask, tol=1e-4):
    real = mask.bool()
    err = (a[real] - b[real]).abs().max()
    assert err < tol, err
    return err


def _changed(a, b, mask, err=0.0):
    """Whether the remap changed the logits, well beyond the reference's float error `err`."""
    d = (a - b)[mask.bool()].abs().max()
    return d > 1e-5 and d > 20 * err


@pytest.mark.parametrize("family,gqa", ROPE, ids=ROPE_IDS)
def test_matches_hand_rope_at_remapped_positions(family, gqa):
    plain, model = pair(family, gqa)
    _, x, mask = left_padded()
    qh, kvh = _group(model)
    heads = [(LAYER, h) for h in qh]
    clean = _remapped(model, x, mask)
    for kw in ({"scale": 0.5}, {"offset": 3}, {"scale": 2.0, "offset": -1, "shift": 4}):
        got = _remapped(model, x, mask, RemapPositions(heads, **kw))
        ref = _reference(plain, x, mask, LAYER, qh, kvh, **kw)
        assert _changed(got, clean, mask, _close_on_real(got, ref, mask)), kw  # the remap does something


@pytest.mark.parametrize("family", ["gemma2", "gemma3", "mistral"])
def test_sliding_window_layer(family):
    """A sliding-window layer (window 6 < 12 tokens on the tiny configs): the recomputation keeps the window."""
    plain, model = pair(family, True)
    layer = next(i for i, t in enumerate(model.spec.layer_types or ["sliding_attention"] * 3)
                 if t == "sliding_attention" and i > 0)
    assert model.spec.sliding_window is not None and model.spec.sliding_window < 12
    _, x, mask = left_padded()
    qh, kvh = _group(model)
    got = _remapped(model, x, mask, RemapPositions([(layer, h) for h in qh], scale=0.5, offset=2))
    _close_on_real(got, _reference(plain, x, mask, layer, qh, kvh, scale=0.5, offset=2), mask)


@pytest.mark.parametrize("family,gqa", ROPE, ids=ROPE_IDS)
def test_identity_is_bit_identical_and_shift_changes_nothing(family, gqa):
    _, model = pair(family, gqa)
    _, x, mask = left_padded()
    clean = _remapped(model, x, mask)
    heads = [(LAYER, 0), (2, 1)]
    iv = RemapPositions(heads)
    assert not (iv.edits_qkv or iv.recomputes_heads)
    assert torch.equal(_remapped(model, x, mask, iv), clean)
    # q and keys moved by the same D: distances, hence logits, unchanged (keys moved only for these heads)
    _close_on_real(_remapped(model, x, mask, RemapPositions(heads, shift=7)), clean, mask)
    _close_on_real(_remapped(model, x, mask, RemapPositions(heads, scale=1.0, shift=-2.5, bands="lowest:2")),
                   clean, mask)
    # the query alone moved by D: the logits change
    assert _changed(_remapped(model, x, mask, RemapPositions(heads, offset=7)), clean, mask, 1e-5)


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3"])
def test_one_head_of_a_group_leaves_the_others(family):
    """Scaling head 0 alone: the group's other heads read the unmoved keys (bit-identical outputs); head 0's
    output equals the reference that moves the whole group's shared keys (upstream layers identical)."""
    plain, model = pair(family, True)
    _, x, mask = left_padded()
    site, qsite = Site(LAYER, "head_out"), Site(LAYER, "q")
    cap0, cap1 = Capture([site]), Capture([site, qsite])
    with model.intervene(cap0):
        model.forward(x, attention_mask=mask)
    with model.intervene(cap1, RemapPositions([(LAYER, 0)], scale=0.5)):
        model.forward(x, attention_mask=mask)
    clean, got = cap0[site], cap1[site]
    assert torch.equal(got[:, :, 1:], clean[:, :, 1:])
    qh, kvh = _group(model)
    o_in, seen = {}, {}
    o_proj = (attn_modules(plain)[LAYER]).o_proj
    h = o_proj.register_forward_pre_hook(lambda m, a: o_in.__setitem__(0, a[0]))
    try:
        _reference(plain, x, mask, LAYER, qh, kvh, scale=0.5, seen=seen)
    finally:
        h.remove()
    ref = o_in[0].reshape(*x.shape, model.spec.n_heads, -1)[:, :, 0]
    real = mask.bool()
    # the query itself sits at the position the model gave it, left padding excluded
    assert (cap1[qsite][:, :, 0][real] - seen["q"][:, 0][real]).abs().max() < 1e-5
    assert (got[:, :, 0][real] - ref[real]).abs().max() < 1e-5
    assert (got[:, :, 0][real] - clean[:, :, 0][real]).abs().max() > 1e-3


def _llama_with(rope_parameters):
    cfg = tiny_config("llama", True)
    cfg.rope_parameters = {"rope_theta": 10000.0, **rope_parameters}
    torch.manual_seed(0)
    plain = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).eval()
    torch.manual_seed(0)
    wrapped = interp.Model(tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa",
                                                               dtype=torch.float32).eval())
    return plain, wrapped


SCALINGS = {"default": {"rope_type": "default"},
            "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8},
            "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}}


@pytest.mark.parametrize("scaling", list(SCALINGS))
def test_scaled_rope_and_bands(scaling):
    plain, model = _llama_with(SCALINGS[scaling])
    assert model.spec.rope.scaling == scaling
    if scaling == "yarn":
        assert model.spec.rope.attention_scaling > 1.0  # the cos/sin magnitude a pure rotation keeps
    _, x, mask = left_padded()
    qh, kvh = _group(model)
    heads = [(LAYER, h) for h in qh]
    for kw in ({"scale": 0.25, "offset": 2}, {"scale": 3.0}):
        got = _remapped(model, x, mask, RemapPositions(heads, **kw))
        _close_on_real(got, _reference(plain, x, mask, LAYER, qh, kvh, **kw), mask)
    low = model.spec.rope.pairs_by_frequency()[:3]
    got = _remapped(model, x, mask, RemapPositions(heads, scale=4.0, offset=5, bands="lowest:3"))
    _close_on_real(got, _reference(plain, x, mask, LAYER, qh, kvh, scale=4.0, offset=5, pairs=low), mask)
    got = _remapped(model, x, mask, RemapPositions(heads, scale=4.0, offset=5, bands=[1, 5]))
    _close_on_real(got, _reference(plain, x, mask, LAYER, qh, kvh, scale=4.0, offset=5, pairs=[1, 5]), mask)


def test_key_windows_apply_to_the_recomputed_heads():
    """A key window on the same heads still restricts them: moving q and keys by D under the window changes
    nothing, whatever the order of the two interventions."""
    from interp import WindowHeads

    _, model = pair("llama", True)
    _, x, mask = left_padded()
    heads = [(LAYER, 0), (LAYER, 1)]
    win = _remapped(model, x, mask, WindowHeads(heads, window=3, sinks=1))
    assert _changed(win, _remapped(model, x, mask), mask)
    _close_on_real(_remapped(model, x, mask, WindowHeads(heads, window=3, sinks=1), RemapPositions(heads, shift=5)),
                   win, mask)
    _close_on_real(_remapped(model, x, mask, RemapPositions(heads, shift=5), WindowHeads(heads, window=3, sinks=1)),
                   win, mask)


def test_rows_and_cached_decode():
    """rows= remaps only those rows; a cached decode step sees the same remap as the full forward."""
    _, model = pair("llama", True)
    x = ids(batch=2, seq=10)
    mask = torch.ones_like(x)
    heads = [(LAYER, 0), (2, 3)]
    full = _remapped(model, x, mask, RemapPositions(heads, scale=0.5, offset=1))
    clean = _remapped(model, x, mask)
    only1 = _remapped(model, x, mask, RemapPositions(heads, scale=0.5, offset=1, rows=[1]))
    assert torch.equal(only1[0], clean[0])
    assert (only1[1] - full[1]).abs().max() < 1e-5
    with torch.no_grad(), model.intervene(RemapPositions(heads, scale=0.5, offset=1)):
        out = model.hf(input_ids=x[:, :-1], attention_mask=mask[:, :-1], use_cache=True)
        step = model.forward_cached(x[:, -1:], mask, out.past_key_values)
    assert (step[:, -1] - full[:, -1]).abs().max() < 1e-4


def test_refusals():
    _, gpt2 = pair("gpt2", False)
    with pytest.raises(InvalidInputError, match="no rotary"):
        with gpt2.intervene(RemapPositions([(0, 0)], scale=2)):
            pass
    _, dyn = _llama_with({"rope_type": "dynamic", "factor": 2.0})
    with pytest.raises(InvalidInputError, match="not a function of relative position"):
        with dyn.intervene(RemapPositions([(0, 0)], scale=2)):
            pass
    _, model = pair("llama", True)
    for bad in ("middle:2", "lowest:99", [0, 99]):
        with pytest.raises(InvalidInputError):
            with model.intervene(RemapPositions([(0, 0)], scale=2, bands=bad)):
                pass
    with pytest.raises(InvalidInputError):
        RemapPositions([(0, 0)], scale=-1)
