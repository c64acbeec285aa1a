"""Editors before observers, and vectorised per-row edits checked against reference Python loops.

(a) inside attention: a Capture of q/k/head_out sees the values after ZeroRopeDims / AblateHeads /
    Patch, in both argument orders and in nested `intervene` contexts;
(b) module sites: an outer Capture sees an inner Patch at the same site; editors keep their order;
(c) row/head/position edits (AblateHeads, ZeroRopeDims, Patch) equal loops written here, also with
    chunked forwards whose row ids cross chunk boundaries;
(d) a Patch of 200+ rows, each with its own value row, in one forward equals one row at a time.
"""

import functools

import pytest
import torch

import interp
from interp import AblateHeads, Capture, Patch, Site, ZeroRopeDims
from interp.hooks.interventions import Intervention, _assign
from interp.models.tiny import tiny_random_hf
from interp.sites import HEAD_KINDS, MODULE_KINDS, RESID_KINDS, SITE_KINDS, SiteKind

from tests.helpers import ids

MODELS = [("llama", True), ("qwen2", False)]  # a GQA and an MHA RoPE model
MODEL_IDS = ["llama-gqa", "qwen2-mha"]
ARRANGEMENTS = ["editor_first", "observer_first", "outer_observer", "outer_editor"]


@functools.lru_cache(maxsize=None)
def _model(family, gqa):
    """One wrapped tiny model per variant, shared by the tests (interventions are scoped)."""
    return interp.Model(tiny_random_hf(family, gqa, seed=0))


def _run(model, x, editor, observer, how, **fw):
    """Forward under `editor` and `observer` arranged as `how`; returns the logits."""
    if how == "editor_first":
        with model.intervene(editor, observer):
            return model.forward(x, **fw)
    if how == "observer_first":
        with model.intervene(observer, editor):
            return model.forward(x, **fw)
    if how == "outer_observer":
        with model.intervene(observer):
            with model.intervene(editor):
                return model.forward(x, **fw)
    assert how == "outer_editor"
    with model.intervene(editor):
        with model.intervene(observer):
            return model.forward(x, **fw)


def _clean(model, x, sites):
    cap = Capture(sites)
    with model.intervene(cap):
        model.forward(x)
    return cap


# ---- (a) observers inside attention see every edit ----------------------------------------------

@pytest.mark.parametrize("how", ARRANGEMENTS)
@pytest.mark.parametrize("family,gqa", MODELS, ids=MODEL_IDS)
def test_capture_q_sees_zeroed_rope_dims(family, gqa, how):
    model = _model(family, gqa)
    x = ids(3, 10)
    layer, head, dims = 1, 2, [0, 3, 8, 11]
    clean_q = _clean(model, x, ["L1.q"])["L1.q"]  # [b, s, H, d]
    cap = Capture(["L1.q"])
    _run(model, x, ZeroRopeDims([(layer, head)], dims, side="q"), cap, how)
    got = cap["L1.q"]
    assert got[:, :, head][..., dims].abs().max() == 0
    assert clean_q[:, :, head][..., dims].abs().min() > 0  # the edit really changed something
    want = clean_q.clone()  # layer 1's q is computed from unedited layer-0 output: post-edit = clean, zeroed
    want[:, :, head, dims] = 0
    assert torch.equal(got, want)


@pytest.mark.parametrize("how", ARRANGEMENTS)
def test_capture_k_sees_key_side_zeroing(how):
    model = _model("llama", False)  # MHA: no GQA warning
    x = ids(2, 10)
    dims = [1, 2, 9]
    clean_k = _clean(model, x, ["L2.k"])["L2.k"]
    cap = Capture(["L2.k"])
    _run(model, x, ZeroRopeDims([(2, 1)], dims, side="k"), cap, how)
    want = clean_k.clone()
    want[:, :, 1, dims] = 0
    assert torch.equal(cap["L2.k"], want)


@pytest.mark.parametrize("how", ARRANGEMENTS)
@pytest.mark.parametrize("family,gqa", MODELS, ids=MODEL_IDS)
def test_capture_head_out_sees_ablation(family, gqa, how):
    model = _model(family, gqa)
    x = ids(3, 10)
    clean = _clean(model, x, ["L1.head_out"])["L1.head_out"]
    cap = Capture(["L1.head_out"])
    _run(model, x, AblateHeads([(1, 2)], mode="zero"), cap, how)
    got = cap["L1.head_out"]
    assert clean[:, :, 2].abs().max() > 0
    assert got[:, :, 2].abs().max() == 0
    keep = [0, 1, 3]
    assert torch.equal(got[:, :, keep], clean[:, :, keep])


@pytest.mark.parametrize("how", ARRANGEMENTS)
def test_capture_q_sees_uniform_ablation_and_rows(how):
    """AblateHeads(mode="uniform") zeroes the query of the head, for the listed rows only."""
    model = _model("llama", True)
    x = ids(4, 8)
    clean = _clean(model, x, ["L2.q"])["L2.q"]
    cap = Capture(["L2.q"])
    _run(model, x, AblateHeads([(2, 3)], mode="uniform", rows=[2, 0]), cap, how, batch_size=3)
    got = cap["L2.q"]
    want = clean.clone()
    want[[0, 2], :, 3] = 0
    assert torch.equal(got, want)


@pytest.mark.parametrize("how", ARRANGEMENTS)
def test_capture_sees_patched_q_and_head_out(how):
    model = _model("qwen2", True)
    x = ids(2, 9)
    g = torch.Generator().manual_seed(3)
    vq = torch.randn(2, 9, 16, generator=g)
    vo = torch.randn(2, 9, 16, generator=g)
    cap = Capture(["L1.q", "L1.head_out"])
    _run(model, x, Patch({"L1.q.H1": vq, "L1.head_out.H3": vo}), cap, how)
    assert torch.equal(cap["L1.q.H1"], vq)
    assert torch.equal(cap["L1.head_out.H3"], vo)


def test_observers_agree_across_arrangements_and_with_attention_rows():
    """Every arrangement gives the same captures and logits; the legacy observe_qk recorder
    (AttentionRows) sees the same edited q as Capture."""
    model = _model("llama", True)
    x = ids(2, 10)
    outs = []
    for how in ARRANGEMENTS:
        cap = Capture(["L1.q", "L1.head_out"])
        editor = ZeroRopeDims([(1, 0), (1, 3)], [2, 5], side="q")
        logits = _run(model, x, editor, cap, how)
        outs.append((logits, cap["L1.q"], cap["L1.head_out"]))
    for o in outs[1:]:
        for a, b in zip(outs[0], o):
            assert torch.equal(a, b)
    rec = interp.AttentionRows(list(range(10)), layers=[1])
    with model.intervene(rec, ZeroRopeDims([(1, 0), (1, 3)], [2, 5], side="q")):
        model.forward(x)
    clean_k = _clean(model, x, ["L1.k"])["L1.k"]
    q = outs[0][1]  # captured (edited) q [b, s, H, d]
    spec = model.spec
    scores = torch.einsum("bshd,bthd->bhst", q, clean_k.repeat_interleave(spec.group_size, dim=2))
    scores = scores * spec.head_dim ** -0.5
    causal = torch.triu(torch.ones(10, 10, dtype=torch.bool), 1)
    want = torch.softmax(scores.masked_fill(causal, float("-inf")), -1)
    assert torch.allclose(rec.result()[:, 0], want, atol=1e-5)


# ---- (b) module sites: editors before observers ------------------------------------------------

@pytest.mark.parametrize("family,gqa", [("llama", True), ("gpt2", False)])
@pytest.mark.parametrize("kind", MODULE_KINDS)
def test_outer_capture_sees_inner_patch_at_module_site(family, gqa, kind):
    model = _model(family, gqa)
    x = ids(2, 8)
    site = f"L1.{kind}"
    v = torch.randn(2, 8, model.spec.d_model, generator=torch.Generator().manual_seed(4))
    cap = Capture([site])
    with model.intervene(cap):
        with model.intervene(Patch({site: v})):
            patched = model.forward(x)
        assert torch.equal(cap[site], v)
        cap.clear()
        clean = model.forward(x)  # the inner patch is gone; the outer capture still records
        assert not torch.equal(cap[site], v)
    assert (patched - clean).abs().max() > 1e-4
    for how in ARRANGEMENTS:
        cap = Capture([site])
        _run(model, x, Patch({site: v}), cap, how)
        assert torch.equal(cap[site], v), how
    assert all(not _own_hooks(m) and not m._forward_pre_hooks for m in model.hf.modules())


def test_editors_keep_their_order_at_a_module_site():
    model = _model("llama", True)
    x = ids(2, 8)
    g = torch.Generator().manual_seed(5)
    v1, v2 = torch.randn(2, 8, 64, generator=g), torch.randn(2, 8, 64, generator=g)
    cap = Capture(["L2.resid_pre"])
    with model.intervene(cap):
        with model.intervene(Patch({"L2.resid_pre": v1})):
            with model.intervene(Patch({"L2.resid_pre": lambda t: t * 2})):
                model.forward(x)
    assert torch.equal(cap["L2.resid_pre"], v1 * 2)  # outer patch first, then the inner function
    cap = Capture(["L2.resid_pre"])
    with model.intervene(Patch({"L2.resid_pre": lambda t: t * 2}), cap, Patch({"L2.resid_pre": v2})):
        model.forward(x)
    assert torch.equal(cap["L2.resid_pre"], v2)  # argument order: the later patch wins


# ---- (c) vectorised row edits equal reference loops --------------------------------------------

def _local(rows, call_start, b):
    """Reference row mapping: (local row, position in rows) for rows inside the chunk, first occurrence."""
    seen, out = set(), []
    for i, r in enumerate(rows):
        if 0 <= r - call_start < b and r not in seen:
            seen.add(r)
            out.append((r - call_start, i))
    return out


class LoopAblate(Intervention):
    """Reference: AblateHeads written as Python loops over rows and heads."""

    def __init__(self, heads, mode="zero", means=None, rows=None):
        super().__init__(rows)
        self.heads, self.mode, self.means = heads, mode, means
        self.edits_qkv = mode == "uniform"
        self.edits_out = mode != "uniform"

    def _rows(self, call, b):
        return [r for r, _ in _local(self.rows, call.batch_start, b)] if self.rows is not None else range(b)

    def edit_qkv(self, call, q, k, v):
        q = q.clone()
        for r in self._rows(call, q.shape[0]):
            for layer, h in self.heads:
                if layer == call.layer:
                    q[r, h] = 0.0
        return q, k, v

    def edit_out(self, call, out):
        out = out.clone()
        for r in self._rows(call, out.shape[0]):
            for layer, h in self.heads:
                if layer == call.layer:
                    out[r, :, h] = 0.0 if self.mode == "zero" else self.means[layer, h]
        return out


class LoopZero(Intervention):
    """Reference: ZeroRopeDims(side=q or k) as loops."""

    edits_qkv = True

    def __init__(self, heads, dims, side, kv_of, rows=None):
        super().__init__(rows)
        self.heads, self.dims, self.side, self.kv_of = heads, dims, side, kv_of

    def edit_qkv(self, call, q, k, v):
        q, k = q.clone(), k.clone()
        rows = [r for r, _ in _local(self.rows, call.batch_start, q.shape[0])] if self.rows else range(q.shape[0])
        for r in rows:
            for layer, h in self.heads:
                if layer != call.layer:
                    continue
                for d in self.dims:
                    if self.side in ("q", "both"):
                        q[r, h, :, d] = 0.0
                    if self.side in ("k", "both"):
                        k[r, self.kv_of(h), :, d] = 0.0
        return q, k, v


def _loop_patch(t, value, rows, positions, batch_start, head=None):
    """Reference Patch of t [b, s, ...]: row by row, position by position."""
    t = t.clone()
    b = t.shape[0]
    pairs = _local(rows, batch_start, b) if rows is not None else [(r, r + batch_start) for r in range(b)]
    pos = list(range(t.shape[1])) if positions is None else positions
    for r, src in pairs:
        for j, p in enumerate(pos):
            cur = t[r, p] if head is None else t[r, p, head]
            new = value(cur) if callable(value) else value[src, j]
            if head is None:
                t[r, p] = new
            else:
                t[r, p, head] = new
    return t


class LoopPatch(Intervention):
    """Reference: Patch of head_out.H / q.H / resid_pre via loops (module site through a raw hook)."""

    def __init__(self, site, value, rows=None, positions=None):
        super().__init__(rows)
        self.site, self.value, self.positions = Site.parse(site), value, positions
        self.edits_out = self.site.kind == "head_out"
        self.edits_qkv = self.site.kind == "q"

    def edit_out(self, call, out):
        if call.layer != self.site.layer:
            return out
        return _loop_patch(out, self.value, self.rows, self.positions, call.batch_start, self.site.head)

    def edit_qkv(self, call, q, k, v):
        if call.layer != self.site.layer:
            return q, k, v
        qt = _loop_patch(q.transpose(1, 2), self.value, self.rows, self.positions, call.batch_start, self.site.head)
        return qt.transpose(1, 2), k, v

    def hooks(self, model):
        if self.site.kind != "resid_pre":
            return []

        def pre(module, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            new = _loop_patch(h, self.value, self.rows, self.positions, model._state.batch_start)
            if args:
                return (new,) + tuple(args[1:]), kwargs
            return args, {**kwargs, "hidden_states": new}

        return [model.adapter.layers()[self.site.layer].register_forward_pre_hook(pre, with_kwargs=True)]


ROW_SETS = [None, [1], [4, 1, 2], [0, 4, 3, 3]]  # unordered, crossing chunks, duplicate (out of range: refused,
# tests/hooks/test_silent_noops.py)


def _forward(model, x, iv, batch_size):
    with model.intervene(iv):
        return model.forward(x, batch_size=batch_size)


@pytest.mark.parametrize("batch_size", [None, 2])
@pytest.mark.parametrize("rows", ROW_SETS)
@pytest.mark.parametrize("family,gqa", MODELS, ids=MODEL_IDS)
def test_ablate_heads_rows_equal_loop(family, gqa, rows, batch_size):
    model = _model(family, gqa)
    x = ids(5, 8)
    heads = [(0, 1), (1, 0), (1, 3), (2, 2)]
    means = torch.randn(3, 4, 16, generator=torch.Generator().manual_seed(6))
    clean = model.forward(x)
    for mode in ("zero", "mean", "uniform"):
        got = _forward(model, x, AblateHeads(heads, mode=mode, means=means, rows=rows), batch_size)
        want = _forward(model, x, LoopAblate(heads, mode=mode, means=means, rows=rows), batch_size)
        assert torch.equal(got, want), mode
        hit = sorted({r for r in (rows or range(5)) if 0 <= r < 5})
        miss = [r for r in range(5) if r not in hit]
        assert (got[hit] - clean[hit]).abs().max() > 1e-4, mode
        if miss:
            assert torch.allclose(got[miss], clean[miss], atol=1e-6), mode


@pytest.mark.parametrize("batch_size", [None, 2])
@pytest.mark.parametrize("rows", ROW_SETS)
@pytest.mark.parametrize("family,gqa", MODELS, ids=MODEL_IDS)
def test_zero_rope_dims_rows_equal_loop(family, gqa, rows, batch_size):
    model = _model(family, gqa)
    x = ids(5, 8)
    heads, dims = [(1, 0), (1, 3), (2, 1)], [0, 5, 6, 13]
    for side in ("q", "k", "both"):
        with pytest.warns(UserWarning, match="GQA") if gqa and side != "q" else _nullcontext():
            iv = ZeroRopeDims(heads, dims, side=side, rows=rows)
            got = _forward(model, x, iv, batch_size)
        want = _forward(model, x, LoopZero(heads, dims, side, model.spec.kv_head_of, rows=rows), batch_size)
        assert torch.equal(got, want), side
        assert (got - model.forward(x)).abs().max() > 1e-5, side


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("batch_size", [None, 2])
@pytest.mark.parametrize("rows", ROW_SETS)
@pytest.mark.parametrize("family,gqa", MODELS, ids=MODEL_IDS)
@pytest.mark.parametrize("site", ["L1.resid_pre", "L1.head_out.H2", "L2.q.H1"])
def test_patch_rows_and_positions_equal_loop(family, gqa, rows, batch_size, site):
    model = _model(family, gqa)
    x = ids(5, 8)
    width = model.spec.d_model if "resid" in site else model.spec.head_dim
    n_rows = 5 if rows is None else len(rows)
    g = torch.Generator().manual_seed(7)
    for positions in (None, [1, 4, 7], [-1, 0]):
        n_pos = 8 if positions is None else len(positions)
        v = torch.randn(n_rows, n_pos, width, generator=g)
        got = _forward(model, x, Patch({site: v}, rows=rows, positions=positions), batch_size)
        want = _forward(model, x, LoopPatch(site, v, rows=rows, positions=positions), batch_size)
        assert torch.equal(got, want), positions
        assert (got - model.forward(x)).abs().max() > 1e-4
    fn = lambda t: t * -3.0  # noqa: E731  (a callable patch, elementwise)
    got = _forward(model, x, Patch({site: fn}, rows=rows, positions=[2, 3]), batch_size)
    want = _forward(model, x, LoopPatch(site, fn, rows=rows, positions=[2, 3]), batch_size)
    assert torch.equal(got, want)


def test_assign_equals_loop_on_random_tensors():
    g = torch.Generator().manual_seed(8)
    t = torch.randn(6, 5, 7, 4, generator=g)  # [b, H, s, d] / [b, s, H, d] alike
    means = torch.randn(2, 4, generator=g)
    for axis in (1, 2):
        for rows in (None, torch.tensor([5, 0, 3]), torch.tensor([], dtype=torch.long)):
            for value in (0.0, means):
                got = _assign(t, rows, axis, [3, 1], value)
                want = t.clone()
                for r in (range(6) if rows is None else rows.tolist()):
                    for i, h in enumerate([3, 1]):
                        val = value if not torch.is_tensor(value) else value[i]
                        if axis == 1:
                            want[r, h] = val
                        else:
                            want[r, :, h] = val
                assert torch.equal(got, want)
                assert got.data_ptr() != t.data_ptr()


# ---- (d) hundreds of rows in one forward --------------------------------------------------------

@pytest.mark.parametrize("site,chunk", [("L1.resid_pre", None), ("L2.head_out.H1", 64)])
def test_patch_of_240_rows_equals_one_row_at_a_time(site, chunk):
    model = _model("llama", True)
    n, s = 240, 6
    x = ids(n, s, seed=9)
    g = torch.Generator().manual_seed(10)
    rows = torch.randperm(n, generator=g)[:210].tolist()  # 210 of 240 rows, shuffled
    width = model.spec.d_model if "resid" in site else model.spec.head_dim
    positions = [1, 2, 5]
    v = torch.randn(len(rows), len(positions), width, generator=g)
    clean = model.forward(x, batch_size=chunk)
    with model.intervene(Patch({site: v}, rows=rows, positions=positions)):
        got = model.forward(x, batch_size=chunk)
    for i, r in enumerate(rows):
        with model.intervene(Patch({site: v[i:i + 1]}, positions=positions)):
            one = model.forward(x[r:r + 1])
        assert torch.allclose(got[r], one[0], atol=1e-5), r
        assert (got[r] - clean[r]).abs().max() > 1e-4
    untouched = [r for r in range(n) if r not in set(rows)]
    assert torch.equal(got[untouched], clean[untouched])


# ---- site kinds ---------------------------------------------------------------------------------

def test_site_kinds_defined_once():
    assert SITE_KINDS == tuple(k.value for k in SiteKind)
    assert set(HEAD_KINDS) == {"head_out", "q", "k", "v"}
    assert set(MODULE_KINDS) == {"resid_pre", "resid_post", "attn_out", "mlp_out"}
    assert RESID_KINDS == ("resid_pre", "resid_post")
    assert all(SiteKind(k).in_attention for k in HEAD_KINDS + ("pattern_rows",))
    assert SiteKind.RESID_PRE.hook == "pre" and SiteKind.MLP_OUT.hook == "post"
    assert SiteKind.K.heads == "n_kv_heads" and SiteKind.Q.heads == "n_heads"
    s = Site(1, SiteKind.Q)
    assert s == Site.parse("L1.q") and type(s.kind) is str and s.kind == "q" and str(s) == "L1.q"
    model = _model("llama", True)
    spec = model.spec
    from interp.store.cache import site_shape

    assert site_shape(spec, Site(0, "k")) == (2, 16) and site_shape(spec, Site(0, "q")) == (4, 16)
    assert site_shape(spec, Site(0, "attn_out")) == (64,) and site_shape(spec, Site(0, "v", 1)) == (16,)
    cap = _clean(model, ids(2, 5), [Site(0, k) for k in HEAD_KINDS + MODULE_KINDS])
    for k in HEAD_KINDS + MODULE_KINDS:
        assert tuple(cap[Site(0, k)].shape) == (2, 5) + SiteKind(k).token_shape(spec), k


def _own_hooks(module) -> list:
    """A module's forward hooks (the float32 unembedding of a low-precision model's head is its forward, no hook)."""
    return list(module._forward_hooks.values())
