"""The paper checkpoints' aliases work offline without weights: interp ships their config.json facts
(data/configs/), so `interp info --config-only` gives each ModelSpec. The expected geometry below is from
each model card's config (Hub repos named in data/configs/README.md)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_cli

EXPECTED = {  # alias: (layers, query heads, kv heads, head_dim, max positions, positional, rope theta)
    "qwen2.5-7b": (28, 28, 4, 128, 131072, "rope", 1e6),
    "qwen2.5-14b": (48, 40, 8, 128, 131072, "rope", 1e6),
    "llama-2-7b": (32, 32, 32, 128, 4096, "rope", 1e4),
    "llama-3.1-8b": (32, 32, 8, 128, 131072, "rope", 5e5),
    "mistral-7b": (32, 32, 8, 128, 32768, "rope", 1e4),
    "gemma-2-9b": (42, 16, 8, 256, 8192, "rope", 1e4),
    "olmo-2-7b": (32, 32, 32, 128, 4096, "rope", 5e5),
    "gpt2": (12, 12, 12, 64, 1024, "learned", None),
}


@pytest.mark.parametrize("alias", list(EXPECTED))
def test_info_config_only_works_offline_for_every_alias(alias, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = run_cli(["info", "-m", alias, "--config-only", "--json"], capsys)
    assert code == 0, err
    spec = json.loads(out)["spec"]
    layers, heads, kv, hd, maxpos, positional, theta = EXPECTED[alias]
    assert (spec["n_layers"], spec["n_heads"], spec["n_kv_heads"], spec["head_dim"], spec["max_positions"],
            spec["positional"]) == (layers, heads, kv, hd, maxpos, positional)
    if theta is not None:
        assert spec["rope"]["theta"] == theta and spec["rope"]["rotary_dims"] == hd
    src = json.loads(out)["config_source"]
    assert "interp's copy" in src or "/" in src  # the shipped copy, or the HF cache's own config


def test_llama_3_1_frequencies_are_the_scaled_ones(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from interp.models.loading import spec_from_config

    f = spec_from_config("llama-3.1-8b").rope.inv_freq
    plain = 5e5 ** (-126 / 128)
    assert f[-1] == pytest.approx(plain / 8, rel=1e-3)  # llama3 rope_scaling: low frequencies / factor 8
    assert f[0] == pytest.approx(1.0)  # high frequencies untouched


def test_loading_weights_of_an_alias_without_them_says_how_to_get_them(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = run_cli(["detect", "retrieval", "-m", "qwen2.5-7b", "--out", "/tmp/interp-never-written"], capsys)
    assert code == 2 and "hf download Qwen/Qwen2.5-7B" in err and "--config-only" in err, err


def test_provenance_records_code_and_device(tmp_path):
    import re
    from pathlib import Path

    import interp
    from interp.runtime.provenance import provenance

    p = provenance(interp.load_model("tiny-qwen2"))
    if (Path(interp.__file__).resolve().parents[1] / ".git").exists():
        assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", p["interp_git"]), p["interp_git"]
    assert p["device_info"]["torch"] and "cuda" in p["device_info"] and p["hub_snapshot"] is None
    assert p["weights"] and p["config_source"]


@pytest.mark.parametrize("family", ["qwen2", "llama", "gpt2"])
def test_config_only_spec_equals_the_loaded_models_spec_for_tiny_randoms(family):
    import interp

    name = f"tiny-random-{family}"
    assert interp.spec_from_config(name) == interp.load_model(name).spec
