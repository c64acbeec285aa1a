"""Every JSON the CLI writes parses with a strict parser: no NaN / Infinity literals. Non-finite
numbers become null, and the dict that held them names them in "nonfinite"."""

from __future__ import annotations

import json
import math

import pytest

from interp.runtime.jsonio import dumps, strict

from tests.helpers import run_cli

pytestmark = pytest.mark.slow  # the heavy tier: every command run once


def _strict_load(text: str):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


def test_strict_replaces_non_finite_numbers_and_names_them():
    d = strict({"cohens_d": -math.inf, "p": 0.5, "rows": [1.0, math.nan], "inner": {"x": math.inf}})
    assert d == {"cohens_d": None, "p": 0.5, "rows": [1.0, None], "inner": {"x": None, "nonfinite": {"x": "inf"}},
                 "nonfinite": {"cohens_d": "-inf"}}
    _strict_load(dumps({"a": math.nan}))
    with pytest.raises(ValueError):
        _strict_load(json.dumps({"a": math.nan}))  # what plain json.dumps would have written


@pytest.mark.parametrize("args", [
    # masking the retrieval heads takes recall 1 -> 0 on every prompt: d_z = -inf
    ["ablate", "-m", "tiny-qwen2", "--heads", "L2H4,L2H5,L2H6,L2H7", "--lengths", "256", "--depths", "0.5",
     "--n-seeds", "2", "--draws", "1"],
    ["detect", "induction", "-m", "tiny-random-gpt2", "--copy-lengths", "6", "--n-seqs", "3", "--heads", "L1H1",
     "--draws", "1", "--copy-tokens", "40", "--n-boot", "100"],
    ["patch", "-m", "tiny-llama", "--task", "repeated", "--n-seeds", "3", "--copy-length", "6", "--site",
     "resid_pre", "--n-boot", "50"],
    ["patch", "-m", "tiny-llama", "--task", "repeated", "--n-seeds", "3", "--copy-length", "6", "--site",
     "head_out", "--method", "atp-qk", "--verify-top", "2", "--verify-sample", "2", "--n-boot", "50"],
    ["patch", "-m", "tiny-llama", "--task", "repeated", "--n-seeds", "3", "--copy-length", "6", "--method", "path",
     "--senders", "L0H0", "--via", "logits", "--n-boot", "50"],
    ["detect", "retrieval", "-m", "tiny-qwen2", "--lengths", "256", "--depths", "0.5", "--n-seeds", "2"],
    ["detect", "copy-suppression", "-m", "tiny-qwen2", "--n-texts", "4", "--seq-len", "32", "--circuit-tokens",
     "64", "--candidates", "1", "--n-boot", "50"],
    ["rope-zero", "-m", "tiny-qwen2", "--heads", "L2H4", "--lengths", "256", "--depths", "0.5", "--n-seeds", "2",
     "--dims", "0,8", "--random-draws", "1", "--head-draws", "1"],
    ["rope-profile", "-m", "tiny-qwen2", "--heads", "L2H4", "--n-texts", "2", "--n-tokens", "64"],
    ["probe", "-m", "tiny-qwen2", "-n", "48", "--max-length", "32", "--no-heads"],
    ["cache", "-m", "tiny-qwen2", "-n", "4", "--max-length", "32"],
], ids=lambda a: " ".join(a[:2]))
def test_every_result_json_is_strict(args, tmp_path, capsys):
    o = tmp_path / "o"
    code, out, err = run_cli(args + ["--out", str(o), "--json"], capsys)
    assert code == 0, err
    _strict_load(out)
    files = sorted(o.rglob("*.json"))  # results, run.json, a store's manifest
    assert files and (args[0] == "cache" or (o / "run.json") in files)
    for f in files:
        _strict_load(f.read_text())
    if args[0] == "ablate":
        target = _strict_load((o / "ablation.json").read_text())["conditions"][1]["vs_baseline"]["recall"]
        assert target["cohens_d"] is None and target["nonfinite"] == {"cohens_d": "-inf"}


@pytest.mark.parametrize("args", [["models", "--json"], ["info", "-m", "tiny-qwen2", "--json"],
                                  ["info", "-m", "tiny-qwen2", "--config-only", "--json"]])
def test_json_on_stdout_is_strict(args, capsys):
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    _strict_load(out)
