"""interp.interop: the TransformerLens site-name map (checked against a real TransformerBridge),
interp.from_bridge, interp.Model on nnsight wrappers, and the nnsight head helpers.

Every equality is <= 1e-5 and every ablation / patch must also move the logits by > 1e-3, so a no-op
on either side fails.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch

import interp
from interp.errors import InvalidInputError, UnsupportedModelError
from interp.interop.transformer_lens import (
    FROM_TL, from_transformer_lens, head_hook, site_hook, to_transformer_lens,
)
from interp.models.tiny import VOCAB, tiny_config, tiny_random_hf
from interp.sites import HeadId, Site

from tests.helpers import VARIANT_IDS, VARIANTS

TOL = 1e-5
MIN_EFFECT = 1e-3
KINDS = ("resid_pre", "attn_out", "mlp_out", "resid_post", "head_out", "q", "k", "v", "pattern_rows")
HEADS = ["L0H3", "L1H2", "L2H0", "L2H1"]  # spread over layers; both members of a GQA group in layer 2


def _ids(batch=2, seq=10, seed=1):
    return torch.randint(3, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


def _maxdiff(a, b) -> float:
    assert a.shape == b.shape, (tuple(a.shape), tuple(b.shape))
    return (a.float() - b.float()).abs().max().item()


def _spec(family, gqa):
    return interp.Model(tiny_random_hf(family, gqa, seed=0)).spec


def _no_tl_hook(family, kind) -> bool:
    """interp sites TransformerLens has no hook for on this architecture."""
    return (family == "gpt_neox" and kind in ("q", "k")) or (family == "bert" and kind in ("attn_out", "mlp_out"))


# ---- the map: pure strings ----------------------------------------------------------------

def test_default_map_names():
    want = {"resid_pre": "blocks.2.hook_resid_pre", "attn_out": "blocks.2.hook_attn_out",
            "mlp_out": "blocks.2.hook_mlp_out", "resid_post": "blocks.2.hook_resid_post",
            "head_out": "blocks.2.attn.hook_z", "q": "blocks.2.attn.hook_rot_q", "k": "blocks.2.attn.hook_rot_k",
            "v": "blocks.2.attn.hook_v", "pattern_rows": "blocks.2.attn.hook_pattern"}
    for kind, name in want.items():
        assert to_transformer_lens(Site(2, kind)) == name
        assert to_transformer_lens(f"L2.{kind}") == name
        assert from_transformer_lens(name) == Site(2, kind)
        assert Site.parse(name) == Site(2, kind)
    assert site_hook("L2.head_out.H1") == ("blocks.2.attn.hook_z", 1)
    assert site_hook(Site(3, "k", 1)) == ("blocks.3.attn.hook_rot_k", 1)
    assert head_hook(HeadId(2, 1)) == head_hook("L2H1") == head_hook((2, 1)) == ("blocks.2.attn.hook_z", 1)
    assert from_transformer_lens("blocks.2.attn.hook_z", head=1) == Site(2, "head_out", 1)
    # the bridge's own aliases
    for alias, kind in [("hook_in", "resid_pre"), ("hook_out", "resid_post"), ("attn.o.hook_in", "head_out"),
                        ("attn.hook_out", "attn_out"), ("mlp.hook_out", "mlp_out"), ("attn.v.hook_out", "v")]:
        assert from_transformer_lens(f"blocks.4.{alias}") == Site(4, kind)


@pytest.mark.parametrize("family,gqa", VARIANTS, ids=VARIANT_IDS)
def test_map_round_trips_on_every_adapter(family, gqa):
    spec = _spec(family, gqa)
    for layer in range(spec.n_layers):
        for kind in KINDS:
            heads = [None] + ([0, spec.n_kv_heads - 1] if kind in ("k", "v")
                              else [0, spec.n_heads - 1] if Site(0, kind).site_kind.per_head else [])
            for head in heads:
                site = Site(layer, kind, head)
                if family == "gpt_neox" and kind in ("q", "k"):
                    with pytest.raises(InvalidInputError, match="never fires"):
                        to_transformer_lens(site, model=spec)
                    continue
                name, h = site_hook(site, model=spec)
                assert h == head and name.startswith(f"blocks.{layer}.")
                assert from_transformer_lens(name, head=head, model=spec) == site
                assert Site.parse(str(site)) == site
    # every TL name the map reads comes back as a site whose TL name reads back the same site
    for rest in FROM_TL:
        name = f"blocks.1.{rest}"
        try:
            site = from_transformer_lens(name, model=spec)
        except InvalidInputError:
            continue  # refused on this architecture (checked below)
        assert from_transformer_lens(to_transformer_lens(site, model=spec), model=spec) == site


def test_architecture_specific_names():
    assert to_transformer_lens("L1.q", model="gpt2") == "blocks.1.attn.hook_q"
    assert to_transformer_lens("L1.k", model="bert") == "blocks.1.attn.hook_k"
    assert from_transformer_lens("blocks.1.attn.hook_q", model="gpt2") == Site(1, "q")
    # sublayers that end in a norm (Gemma-2/3, OLMo-2): interp's attn_out / mlp_out are after it, as TL's hooks
    for mt in ("gemma2", "gemma3_text", "olmo2"):
        assert to_transformer_lens("L1.attn_out", model=mt) == "blocks.1.hook_attn_out"
        assert to_transformer_lens("L1.mlp_out", model=mt) == "blocks.1.hook_mlp_out"
        assert from_transformer_lens("blocks.1.hook_mlp_out", model=mt) == Site(1, "mlp_out")
        for sub in ("attn", "mlp"):
            with pytest.raises(InvalidInputError, match=f"before the norm.*blocks.1.hook_{sub}_out"):
                from_transformer_lens(f"blocks.1.{sub}.hook_out", model=mt)
    assert to_transformer_lens("L1.attn_out", model="llama") == "blocks.1.hook_attn_out"
    assert from_transformer_lens("blocks.1.attn.hook_out", model="llama") == Site(1, "attn_out")
    with pytest.raises(InvalidInputError, match="no RoPE"):
        from_transformer_lens("blocks.1.attn.hook_rot_q", model="gpt2")
    with pytest.raises(InvalidInputError, match="never fires"):
        from_transformer_lens("blocks.1.attn.hook_rot_k", model="gpt_neox")
    with pytest.raises(InvalidInputError, match="fires no post-RoPE hook"):
        from_transformer_lens("blocks.1.attn.hook_q", model="gpt_neox")


@pytest.mark.parametrize("name,why", [
    ("blocks.1.hook_resid_mid", "no resid_mid site"),
    ("blocks.1.attn.hook_attn_scores", "pre-softmax"),
    ("blocks.1.attn.hook_result", "after W_O"),
    ("blocks.1.attn.hook_q", "before RoPE"),
    ("blocks.1.attn.hook_k", "before RoPE"),
    ("blocks.1.ln1.hook_normalized", "no interp site"),
    ("blocks.1.mlp.hook_post", "no interp site"),
    ("blocks.1.hook_q_input", "no interp site"),
    ("hook_embed", "embeddings"),
    ("ln_final.hook_normalized", "final norm"),
    ("unembed.hook_out", "unembedding"),
])
def test_names_without_an_interp_site_say_why(name, why):
    with pytest.raises(InvalidInputError, match=why):
        from_transformer_lens(name)
    with pytest.raises(InvalidInputError, match=why):
        Site.parse(name)


def test_bad_inputs_to_the_map():
    with pytest.raises(InvalidInputError, match="unknown site kind"):
        to_transformer_lens("L2.nothing")
    with pytest.raises(InvalidInputError, match="bad site"):
        to_transformer_lens(42)
    with pytest.raises(InvalidInputError, match="model="):
        to_transformer_lens("L2.q", model=3.5)
    with pytest.raises(InvalidInputError, match="TransformerLens hook name"):
        Site.parse("blocks2")
    with pytest.raises(InvalidInputError, match="has no heads"):
        from_transformer_lens("blocks.2.hook_resid_pre", head=1)


def test_interop_imports_neither_package():
    code = ("import sys, interp.interop, interp.interop.nnsight, interp.interop.transformer_lens as t; "
            "from interp.sites import Site; Site.parse('blocks.1.attn.hook_z'); t.to_transformer_lens('L1.q'); "
            "bad = [m for m in ('transformer_lens', 'nnsight') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- against a real TransformerBridge -----------------------------------------------------

def _bert_mlm(seed=0):
    from transformers import BertForMaskedLM

    torch.manual_seed(seed)
    return BertForMaskedLM(tiny_config("bert")).eval()


def _own_and_bridge(family, gqa, tmp_path):
    """interp's own load of the seeded weights, and a TransformerBridge on another copy (BERT: the MLM model
    the bridge supports, on both sides)."""
    pytest.importorskip("transformer_lens")
    from tests.helpers import tl_bridge

    if family == "bert":
        own = interp.Model(_bert_mlm())
        br, _ = tl_bridge(family, gqa, tmp_path, hf=_bert_mlm())
    else:
        own = interp.Model(tiny_random_hf(family, gqa, seed=0))
        br, _ = tl_bridge(family, gqa, tmp_path)
    return own, br


@pytest.mark.parametrize("family,gqa", VARIANTS, ids=VARIANT_IDS)
def test_mapped_hooks_record_interp_sites_on_a_bridge(family, gqa, tmp_path):
    own, br = _own_and_bridge(family, gqa, tmp_path)
    ids, spec = _ids(), own.spec
    sites = [Site(l, k) for l in range(spec.n_layers) for k in KINDS
             if k != "pattern_rows" and not _no_tl_hook(family, k)]
    cap = interp.Capture(sites)
    with own.intervene(cap):
        own.forward(ids)
    rows = interp.attention_rows(own, ids, list(range(ids.shape[1])))  # [b, layer, head, q, k]
    with torch.no_grad():
        _, cache = br.run_with_cache(ids, attention_mask=torch.ones_like(ids))
    compared = set()
    for s in sites + [Site(l, "pattern_rows") for l in range(spec.n_layers)]:
        name = to_transformer_lens(s, model=spec)
        assert name in cache, f"{s} -> {name}: the bridge recorded nothing there"
        mine = rows[:, s.layer] if s.kind == "pattern_rows" else cap[s]
        assert _maxdiff(mine, cache[name]) <= TOL, (str(s), name)
        assert from_transformer_lens(name, model=spec) == s
        compared.add(s.kind)
    expected = set(KINDS) - {k for k in KINDS if _no_tl_hook(family, k)}
    assert compared == expected
    assert [to_transformer_lens(s, model=br) for s in sites] == [to_transformer_lens(s, model=spec) for s in sites]
    # per-head: the head index is the hook's head axis; the bridge itself tells the architecture too
    name, h = site_hook(Site(1, "head_out", 2), model=br)
    assert _maxdiff(cap[Site(1, "head_out", 2)], cache[name][:, :, h]) <= TOL
    if family == "gpt_neox":  # what the bridge exposes but never fires (TransformerLens 4.3)
        assert "blocks.1.attn.hook_rot_q" in br.hook_dict and "blocks.1.attn.hook_rot_q" not in cache


@pytest.mark.parametrize("family,gqa", VARIANTS, ids=VARIANT_IDS)
def test_from_transformer_lens_gives_interp_own_ablations(family, gqa, tmp_path):
    own, br = _own_and_bridge(family, gqa, tmp_path)
    ids = _ids()
    with torch.no_grad():
        tl_before = br(ids, return_type="logits") if family != "bert" else None
    model = interp.from_bridge(br)
    # same tensors, not a copy
    bridged = {p.data_ptr() for p in br.original_model.parameters()}
    assert all(p.data_ptr() in bridged for p in model.hf.parameters())
    assert not any(type(m).__module__.startswith("transformer_lens") for m in model.hf.modules())
    clean = model.forward(ids)
    assert _maxdiff(clean, own.forward(ids)) <= TOL
    for mode in ("zero",) if family == "bert" else ("zero", "uniform"):  # uniform barely moves BERT's MLM logits
        with model.intervene(interp.AblateHeads(HEADS, mode=mode)):
            got = model.forward(ids)
        with own.intervene(interp.AblateHeads(HEADS, mode=mode)):
            want = own.forward(ids)
        assert _maxdiff(got, want) <= TOL
        assert _maxdiff(got, clean) > MIN_EFFECT
    if tl_before is not None:  # the bridge still runs as before, and agrees with interp's clean logits
        with torch.no_grad():
            tl_after = br(ids, return_type="logits")
        assert _maxdiff(tl_after, tl_before) == 0.0
        assert _maxdiff(tl_after, clean) <= TOL


def test_bridge_and_rewired_model_are_refused_with_the_way_in(tmp_path):
    pytest.importorskip("transformer_lens")
    from tests.helpers import tl_bridge

    br, hf = tl_bridge("llama", True, tmp_path)
    with pytest.raises(UnsupportedModelError, match=r"interp\.from_bridge\(bridge\)"):
        interp.Model(br)
    with pytest.raises(UnsupportedModelError, match="rewired by a TransformerLens bridge"):
        interp.Model(hf)
    with pytest.raises(InvalidInputError, match="expected a TransformerLens TransformerBridge"):
        interp.from_bridge(tiny_random_hf("llama", seed=0))


def test_processed_bridge_weights_are_refused(tmp_path):
    pytest.importorskip("transformer_lens")
    from tests.helpers import tl_bridge

    br, _ = tl_bridge("llama", False, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        br.enable_compatibility_mode(disable_warnings=True)  # folds LayerNorm, centres weights
    with pytest.raises(UnsupportedModelError, match="processed"):
        interp.from_bridge(br)


# ---- nnsight ----------------------------------------------------------------------------

NN_CASES = [("llama", True), ("qwen2", True), ("gpt2", False), ("gpt_neox", False), ("gemma2", True)]
NN_IDS = [f"{f}-{'gqa' if g else 'mha'}" for f, g in NN_CASES]


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="t0", pad_token="t0", bos_token="t1",
                                   eos_token="t2")


def _lm(family, gqa, kind="TransformersModel"):
    nnsight = pytest.importorskip("nnsight")
    hf = tiny_random_hf(family, gqa, seed=0)
    if kind == "NNsight":
        return nnsight.NNsight(hf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LanguageModel is deprecated in nnsight 0.8
        return getattr(nnsight, kind)(hf, tokenizer=_tokenizer(), task="text-generation")


def _both(own, lm, x, intervention, nnsight_edit):
    """(interp's logits under `intervention`, the nnsight trace's logits with `nnsight_edit()` inside it)."""
    with own.intervene(intervention):
        want = own.forward(x)
    with lm.trace(x):
        nnsight_edit()
        got = lm.output.logits.save()
    return want, got


@pytest.mark.parametrize("kind", ["LanguageModel", "TransformersModel", "NNsight"])
@pytest.mark.parametrize("family,gqa", [("llama", True), ("qwen2", True), ("gpt2", False)],
                         ids=["llama-gqa", "qwen2-gqa", "gpt2-mha"])
def test_model_on_an_nnsight_wrapper_applies_interventions(family, gqa, kind):
    lm = _lm(family, gqa, kind)
    model = interp.Model(lm)
    own = interp.Model(tiny_random_hf(family, gqa, seed=0))
    assert model.hf is object.__getattribute__(lm, "_module")
    assert (model.tokenizer is not None) == (kind != "NNsight")
    x = _ids()
    clean = model.forward(x)
    with model.intervene(interp.AblateHeads(HEADS)):
        got = model.forward(x)
    with own.intervene(interp.AblateHeads(HEADS)):
        want = own.forward(x)
    assert _maxdiff(got, want) <= TOL and _maxdiff(got, clean) > MIN_EFFECT
    # interp's interventions also apply to the wrapper's own trace, and nothing leaks outside them
    with model.intervene(interp.AblateHeads(HEADS)):
        with lm.trace(x):
            traced = lm.output.logits.save()
    assert _maxdiff(traced, want) <= TOL
    with lm.trace(x):
        plain = lm.output.logits.save()
    assert _maxdiff(plain, clean) <= TOL


def test_undispatched_wrapper_is_loaded(tmp_path):
    nnsight = pytest.importorskip("nnsight")
    tiny_random_hf("llama", True, seed=0).save_pretrained(tmp_path)
    _tokenizer().save_pretrained(tmp_path)
    lm = nnsight.TransformersModel(str(tmp_path), tokenizer=_tokenizer(), task="text-generation")
    assert lm.dispatched is False
    model = interp.Model(lm)
    assert lm.dispatched and not any(p.is_meta for p in model.hf.parameters())
    own = interp.Model(tiny_random_hf("llama", True, seed=0))
    assert _maxdiff(model.forward(_ids()), own.forward(_ids())) <= TOL


@pytest.mark.parametrize("family,gqa", NN_CASES, ids=NN_IDS)
def test_nnsight_ablate_heads_equals_interp(family, gqa):
    from interp.interop.nnsight import ablate_heads

    lm = _lm(family, gqa)
    own = interp.Model(tiny_random_hf(family, gqa, seed=0))
    x = _ids()
    clean = own.forward(x)
    means = interp.head_output_means(own, _ids(4, 10, seed=7))
    for kw in (dict(mode="zero"), dict(mode="mean", means=means), dict(mode="zero", rows=[1])):
        want, got = _both(own, lm, x, interp.AblateHeads(HEADS, **kw), lambda: ablate_heads(lm, HEADS, **kw))
        assert _maxdiff(got, want) <= TOL, kw
        assert _maxdiff(got, clean) > MIN_EFFECT, kw
    assert _maxdiff(want[0], clean[0]) == 0.0  # rows=[1] left row 0 alone
    # the one-call form (its trace lives in interp's source, so it runs from stdin too) gives the same logits
    from interp.interop.nnsight import ablated_logits

    one = ablated_logits(lm, x, HEADS, mode="zero")
    with own.intervene(interp.AblateHeads(HEADS, mode="zero")):
        ref = own.forward(x)
    assert _maxdiff(one, ref) <= TOL and _maxdiff(one, clean) > MIN_EFFECT


@pytest.mark.parametrize("family,gqa", NN_CASES[:3], ids=NN_IDS[:3])
def test_nnsight_head_outputs_and_patch_heads_equal_interp(family, gqa):
    from interp.interop.nnsight import head_outputs, patch_heads

    lm = _lm(family, gqa)
    own = interp.Model(tiny_random_hf(family, gqa, seed=0))
    x = _ids()
    corrupt = x.clone()
    corrupt[:, 2] = (corrupt[:, 2] + 7) % VOCAB
    with lm.trace(x):
        z = head_outputs(lm, layers=[1, 2])
    cap = interp.Capture(["L1.head_out", "L2.head_out"])
    with own.intervene(cap):
        own.forward(x)
    assert sorted(z) == [1, 2]
    for layer in (1, 2):
        assert _maxdiff(z[layer], cap[f"L{layer}.head_out"]) <= TOL
    base = own.forward(corrupt)
    for kw in ({}, dict(positions=range(3, 10)), dict(rows=[0], positions=[4, 5])):
        pos = list(kw.get("positions", range(10)))
        rows = kw.get("rows", [0, 1])
        vals = {"L1H2": z[1][rows][:, pos, 2], "L2H1": z[2][rows][:, pos, 1]}
        patch = interp.Patch({"L1.head_out.H2": vals["L1H2"], "L2.head_out.H1": vals["L2H1"]}, **kw)
        want, got = _both(own, lm, corrupt, patch, lambda: patch_heads(lm, vals, **kw))
        assert _maxdiff(got, want) <= TOL, kw
        assert _maxdiff(got, base) > MIN_EFFECT, kw


def test_nnsight_helpers_refuse_bad_input():
    from interp.interop.nnsight import ablate_heads, head_outputs, patch_heads

    lm = _lm("llama", True)
    x = _ids()
    for call, match in [
        (lambda: ablate_heads(lm, ["L9H0"]), "outside the model"),
        (lambda: ablate_heads(lm, ["L1H0"], mode="uniform"), "unknown ablation mode"),
        (lambda: ablate_heads(lm, ["L1H0"], mode="mean"), "needs means"),
        (lambda: ablate_heads(lm, ["L1H0"], mode="mean", means=torch.zeros(3, 4, 3)), "expected"),
        (lambda: patch_heads(lm, {}), "non-empty"),
        (lambda: head_outputs(lm, layers=[5]), "outside the model"),
    ]:
        with pytest.raises(InvalidInputError, match=match):
            with lm.trace(x):
                call()
    with pytest.raises(InvalidInputError, match="expected an nnsight model"):
        ablate_heads(tiny_random_hf("llama", seed=0), ["L1H0"])


def test_nnsight_helpers_ship_by_value_without_interp(tmp_path):
    """What remote=True needs: after nnsight.register('interp') the helper pickles by value, and runs
    where interp cannot be imported (torch, transformers and nnsight only)."""
    nnsight = pytest.importorskip("nnsight")
    import cloudpickle

    from interp.interop.nnsight import ablate_heads

    nnsight.register("interp")
    try:
        blob = cloudpickle.dumps(ablate_heads)
    finally:
        from cloudpickle.cloudpickle import _PICKLE_BY_VALUE_MODULES

        _PICKLE_BY_VALUE_MODULES.discard("interp")
    (tmp_path / "fn.pkl").write_bytes(blob)
    own = interp.Model(tiny_random_hf("llama", True, seed=0))
    x = _ids()
    with own.intervene(interp.AblateHeads(HEADS)):
        want = own.forward(x)
    torch.save({"x": x, "want": want, "sd": own.hf.state_dict()}, tmp_path / "ref.pt")
    code = f"""
import sys, pickle, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "interp" or name.startswith("interp."):
            raise ImportError("interp is not installed here")
sys.meta_path.insert(0, Block())
import torch, nnsight, transformers
fn = pickle.loads(open({str(tmp_path / 'fn.pkl')!r}, "rb").read())
ref = torch.load({str(tmp_path / 'ref.pt')!r})
cfg = transformers.LlamaConfig(**{tiny_config('llama', True).to_dict()!r})
hf = transformers.LlamaForCausalLM(cfg).eval()
hf.load_state_dict(ref["sd"])
lm = nnsight.NNsight(hf)
with lm.trace(ref["x"]):
    fn(lm, {HEADS!r})
    out = lm.output.logits.save()
assert "interp" not in sys.modules
d = (out - ref["want"]).abs().max().item()
assert d <= 1e-5, d
print("ok", d)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("ok")
