"""Big-model loading: layers spread over devices or offloaded to disk by accelerate (device_map) still get
every intervention: the same ablated logits as a plain load. On a CPU machine, disk offload runs the
same dispatch hooks a multi-GPU map does."""

from __future__ import annotations

import json

import pytest
import torch

import interp
from interp.models.tiny import tiny_random_hf

from tests.helpers import run_cli


def _disk_map(family: str) -> dict:
    """Embeddings, head and layer 0 on CPU; layers 1 and 2 (of the tiny models' 3) offloaded to disk."""
    if family == "gpt2":
        return {"transformer.wte": "cpu", "transformer.wpe": "cpu", "transformer.h.0": "cpu",
                "transformer.h.1": "disk", "transformer.h.2": "disk", "transformer.ln_f": "cpu", "lm_head": "cpu"}
    return {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk", "model.layers.2": "disk",
            "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}


@pytest.mark.parametrize("family,gqa", [("llama", True), ("qwen2", True), ("gpt2", False)])
def test_interventions_apply_to_layers_offloaded_to_disk(family, gqa, tmp_path):
    hf = tiny_random_hf(family, gqa, seed=0)
    hf.save_pretrained(tmp_path / "ckpt")
    ref = interp.load_model(str(tmp_path / "ckpt"))
    dm = _disk_map(family)
    off = interp.load_model(str(tmp_path / "ckpt"), device_map=dm, offload_folder=str(tmp_path / "off"))
    assert any(p.device.type == "meta" for p in off.hf.parameters())  # really offloaded
    x = torch.randint(3, 90, (2, 10))
    assert torch.equal(ref.forward(x), off.forward(x))
    heads = ["L1H0", "L2H1"]
    with ref.intervene(interp.AblateHeads(heads)):
        a = ref.forward(x)
    with off.intervene(interp.AblateHeads(heads)):
        b = off.forward(x)
    assert torch.equal(a, b) and (a - ref.forward(x)).abs().max() > 1e-3
    cap_r, cap_o = interp.Capture(["L2.resid_pre", "L2.head_out"]), interp.Capture(["L2.resid_pre", "L2.head_out"])
    with ref.intervene(cap_r):
        ref.forward(x)
    with off.intervene(cap_o):
        off.forward(x)
    assert all(torch.equal(cap_r[s], cap_o[s]) for s in ("L2.resid_pre", "L2.head_out"))


def test_the_cli_runs_with_a_device_map_and_gets_the_same_numbers(tmp_path, capsys):
    args = ["patch", "-m", "tiny-llama", "--task", "repeated", "--n-seeds", "3", "--copy-length", "6", "--site",
            "head_out", "--n-boot", "50"]
    assert run_cli(args + ["--out", str(tmp_path / "a")], capsys)[0] == 0
    code, _, err = run_cli(args + ["--device-map", "auto", "--max-memory", "cpu=8GiB", "--out", str(tmp_path / "b")],
                           capsys)
    assert code == 0, err
    a, b = (json.loads((tmp_path / d / "patching.json").read_text())["sites"]["head_out"]["mean"] for d in "ab")
    assert a == b


def test_max_memory_is_parsed_to_accelerates_form():
    from interp.cli.options import parse_max_memory

    assert parse_max_memory("0=20GiB, cuda:1=20GiB,cpu=60GiB") == {0: "20GiB", 1: "20GiB", "cpu": "60GiB"}
