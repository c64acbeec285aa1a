"""Loading by name and the CLI: clear errors with exit code 2, JSON output, local directories."""

import json

import pytest
import torch
import transformers as tf

import interp
from interp.errors import ModelNotFoundError, UnsupportedModelError
from interp.models.tiny import tiny_random_hf

from tests.helpers import run_cli


def _save_tiny(tmp_path, family="llama"):
    hf = tiny_random_hf(family, gqa=True)
    hf.save_pretrained(tmp_path)
    return hf


def test_load_local_directory_roundtrip(tmp_path):
    hf = _save_tiny(tmp_path)
    cfg_only = interp.spec_from_config(str(tmp_path))
    m = interp.load_model(str(tmp_path))
    assert cfg_only == m.spec and m.spec.n_kv_heads == 2
    x = torch.randint(0, 96, (1, 9))
    with torch.no_grad():
        assert torch.equal(m.forward(x), hf(x).logits)
    # no tokenizer files were saved: text input says so instead of crashing deep inside
    assert m.tokenizer is None
    with pytest.raises(interp.InterpError, match="no tokenizer"):
        m.forward("some text")


def test_hub_alias_without_weights_fails_fast_with_advice(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match=r"--model DIR") as e:
        interp.load_model("llama-3.1-8b")
    assert "meta-llama/Llama-3.1-8B" in str(e.value)


def test_unknown_names_and_paths():
    with pytest.raises(ModelNotFoundError, match="interp models"):
        interp.load_model("not-a-model")
    with pytest.raises(ModelNotFoundError, match="no such model directory"):
        interp.load_model("./missing/dir")


def test_unsupported_architecture_directory(tmp_path):
    tf.OPTConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, ffn_dim=32, num_attention_heads=2).save_pretrained(tmp_path)
    with pytest.raises(UnsupportedModelError, match="'opt'"):
        interp.load_model(str(tmp_path))


def test_cli_info_json(capsys):
    code, out, _ = run_cli(["info", "--model", "tiny-random-gpt_neox", "--json"], capsys)
    assert code == 0
    spec = json.loads(out)["spec"]
    assert spec["rope"]["rotary_dims"] == 8 and spec["n_heads"] == 4


def test_cli_models_json_lists_aliases(capsys):
    code, out, _ = run_cli(["models", "--json"], capsys)
    assert code == 0
    aliases = {e["alias"] for e in json.loads(out)}
    assert {"qwen2.5-7b", "llama-2-7b", "gemma-2-9b", "olmo-2-7b", "gpt2", "minilm-l6"} <= aliases


@pytest.mark.parametrize("args,msg", [
    (["info", "--model", "nope"], "unknown model"),
    (["info", "--model", "/no/such/dir"], "no such model directory"),
    (["info", "--no-such-flag"], "No such option"),
])
def test_cli_bad_input_exits_2(args, msg, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = run_cli(args, capsys)
    assert code == 2
    assert msg in err
    assert "Traceback" not in err


def test_minilm_encoder_loads_and_matches_plain_bert():
    m = interp.load_model("minilm-l6")
    assert m.spec.model_type == "bert" and not m.spec.causal
    batch = m.tokenize(["the cat sat on the mat", "a dog"])
    plain = tf.AutoModel.from_pretrained(interp.models.loading.minilm_path())
    with torch.no_grad():
        ref = plain(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                    position_ids=batch.position_ids).last_hidden_state
    got = m.forward(batch)
    real = batch.attention_mask.bool()
    assert (got[real] - ref[real]).abs().max() <= 1e-5


@pytest.mark.parametrize("args,msg", [
    (["ablate", "--mode", "shuffle"], "valid modes: zero, mean, uniform, window"),
    (["ablate", "--random-pool", "layers"], "use layer (same count per layer) or any"),
    (["ablate", "--lengths", "abc"], "--lengths must be comma-separated integers"),
    (["ablate", "--depths", "0,2"], "depths must lie in [0, 1]"),
    (["ablate", "--needles", "/no/such.jsonl"], "--needles /no/such.jsonl: no such file"),
    (["ablate", "--heads", "L1X"], "bad head id"),
    (["detect", "retrieval", "--model", "tiny-random-qwen2"], "NIAH needs a tokenizer"),
    (["detect", "retrieval", "--model", "no-such-model"], "no-such-model"),
    (["ablate", "--heads", "L9H0"], "is outside the model: layers 0..3, query heads 0..7"),
    (["ablate", "--heads", "L0H8", "--model", "tiny-llama"], "is outside the model: layers 0..3, query heads 0..3"),
    (["ablate", "--heads", "L9H*"], "is outside the model: layers 0..3, query heads 0..7"),
    (["ablate", "--heads", "L2H*,L2H1"], "listed more than once"),
    (["ablate", "--heads", "L0H0", "--lengths", "24"], "is too short for the needle and question"),
    (["ablate", "--heads", "L0H0", "--needles", "NEEDLES_MISSING_FIELD"], "missing or empty string field(s)"),
])
def test_analysis_cli_bad_input_exits_2(args, msg, capsys, tmp_path):
    if "NEEDLES_MISSING_FIELD" in args:
        bad = tmp_path / "needles.jsonl"
        bad.write_text(json.dumps({"needle": "The code is 7.", "question": "What is the code?"}) + "\n")
        args = [str(bad) if a == "NEEDLES_MISSING_FIELD" else a for a in args]
    code, out, err = run_cli(args + ["--out", str(tmp_path / "o")], capsys)
    assert code == 2, err
    assert msg in " ".join(err.split())
    assert "Traceback" not in err
    assert not (tmp_path / "o" / "ablation.json").exists()


def test_detect_then_ablate_cli_end_to_end(capsys, tmp_path):
    """The main job's two commands on a bundled organism: tables, notes and files, exit code 0."""
    det = tmp_path / "det"
    code, _, err = run_cli(["detect", "retrieval", "--model", "tiny-qwen2", "--lengths", "256", "--depths", "0.5",
                            "--n-seeds", "2", "--out", str(det)], capsys)
    assert code == 0, err
    assert "retrieval heads (score > 0.1)" in err
    assert {"retrieval.json", "prompts.jsonl"} <= {p.name for p in det.iterdir()}
    abl = tmp_path / "abl"
    code, out, err = run_cli(["ablate", "--model", "tiny-qwen2", "--heads", "retrieval", "--from", str(det),
                              "--lengths", "256", "--depths", "0.5", "--n-seeds", "2", "--draws", "2",
                              "--out", str(abl), "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert sorted(res["heads"]) == sorted(json.loads((det / "retrieval.json").read_text())["heads"])
    assert (abl / "ablation.json").exists() and (abl / "metric_by_condition.html").exists()
    # the 4 retrieval heads are half of layer 2: its other 4 heads are the one layer-matched set there is
    assert [c["name"] for c in res["conditions"]] == ["baseline", "target", "random-1"]
    assert res["distinct_draws"] == 1 and res["requested_draws"] == 2
    code, _, err = run_cli(["ablate", "--model", "tiny-qwen2", "--heads", "retrieval", "--from", str(det),
                            "--lengths", "256", "--depths", "0.5", "--n-seeds", "2", "--draws", "2",
                            "--out", str(tmp_path / "abl2")], capsys)
    assert code == 0, err
    assert "written to" in err
    assert "note: only 1 distinct layer-matched random head set(s) exist for these heads (2 asked)" in " ".join(err.split())
    assert all(c["head_write_rel"] > 0 for c in res["conditions"][1:])
    assert len(res["head_write_norm"]) == 4 and len(res["head_write_norm"][0]) == 8


def test_ablation_printer_warns_about_silent_control_heads(capsys):
    from types import SimpleNamespace as NS

    from interp.cli.retrieval_cmds import _print_ablation

    def cond(name, rel):
        r = {"mean": 1.0, "lo": 1.0, "hi": 1.0}
        v = None if name == "baseline" else {"diff": 0.0, "diff_lo": 0.0, "diff_hi": 0.0, "p_value": 1.0,
                                             "cohens_d": 0.0}
        return NS(name=name, heads=[] if name == "baseline" else ["L0H0"], estimates={"recall": r},
                  vs_baseline=None if v is None else {"recall": v}, head_write_rel=rel)

    for rnd_write, warned in [(0.2, True), (1.5, False)]:  # target writes 2.0: warn below half of it
        res = NS(model="m", mode="zero", heads=["L0H0"], heads_source="explicit", scope="prefill+decode",
                 conditions=[cond("baseline", None), cond("target", 2.0), cond("random-1", rnd_write),
                             cond("random-2", rnd_write + 0.1)],
                 random_pooled=None, distinct_draws=2, random_pool="layer", metric="recall",
                 target_vs_random=None, controls_note=None, to_dict=lambda: {})
        _print_ablation(res, "out")
        err = " ".join(capsys.readouterr().err.split())
        assert ("weak control" in err) is warned, err


def test_layer_wildcard_is_every_head_of_that_layer():
    """'L2H*' expands with the model's query-head count (ablate --heads, patch --senders/--receivers); without
    a head count it is refused, not guessed."""
    from interp.analyses.heads import resolve_heads
    from interp.sites import HeadId, as_heads

    assert as_heads("L1H*,L0H3", n_heads=4) == (HeadId(0, 3),) + tuple(HeadId(1, h) for h in range(4))
    assert as_heads(["l2h*"], n_heads=2) == (HeadId(2, 0), HeadId(2, 1))
    with pytest.raises(interp.InvalidInputError, match="needs the model's head count"):
        as_heads("L1H*")
    model = interp.load_model("tiny-random-qwen2")  # 3 layers, 4 query heads each (GQA 4:2)
    assert (model.spec.n_layers, model.spec.n_heads) == (3, 4)
    assert resolve_heads("L2H*", model).heads == tuple(HeadId(2, h) for h in range(4))



def test_info_keeps_the_spec_and_rebuilds_it_when_the_checkpoint_changes(tmp_path, monkeypatch, capsys):
    """`interp info` of a model on disk keeps its spec in interp's cache: a second call prints the same without
    loading anything; a changed config.json, a damaged cache entry, or --config-only (its own entry) build it
    again."""
    import interp.models.loading as loading

    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "cache"))
    ck = tmp_path / "ck"
    _save_tiny(ck)
    first = [run_cli(["info", "-m", str(ck), *a], capsys) for a in ([], ["--json"])]
    assert all(code == 0 for code, _, _ in first)
    assert len(list((tmp_path / "cache" / "specs").glob("*.json"))) == 1

    def refuse(*a, **k):
        raise AssertionError("the spec was built again")

    with monkeypatch.context() as m:
        for f in ("load_model", "spec_from_config", "load_config", "config_source"):
            m.setattr(loading, f, refuse)
        again = [run_cli(["info", "-m", str(ck), *a], capsys) for a in ([], ["--json"])]
    assert again == first  # the same table and JSON, config_source included
    assert json.loads(again[1][1])["spec"]["n_kv_heads"] == 2

    cfg = json.loads((ck / "config.json").read_text())
    (ck / "config.json").write_text(json.dumps({**cfg, "rope_parameters": {**cfg["rope_parameters"],
                                                                          "rope_theta": 12345.0}}))
    code, out, _ = run_cli(["info", "-m", str(ck), "--json"], capsys)
    assert code == 0 and json.loads(out)["spec"]["rope"]["theta"] == 12345.0  # read again, not the kept spec
    for f in (tmp_path / "cache" / "specs").glob("*.json"):
        f.write_text("{damaged")
    code, out, _ = run_cli(["info", "-m", str(ck), "--json"], capsys)
    assert code == 0 and json.loads(out)["spec"]["rope"]["theta"] == 12345.0
    code, out, _ = run_cli(["info", "-m", str(ck), "--config-only", "--json"], capsys)
    assert code == 0 and json.loads(out)["spec"]["rope"]["theta"] == 12345.0


def test_info_read_back_imports_neither_torch_nor_transformers(tmp_path):
    """The second `interp info` of a bundled model reads the kept spec: no torch, no transformers (most of a
    first call's time)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import sys; from interp.cli import main; sys.argv = ['interp', 'info', '-m', 'tiny-llama']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('HEAVY', 'torch' in sys.modules, 'transformers' in sys.modules)")
    env = {**os.environ, "INTERP_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    runs = [subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-2000:]
    assert runs[0].stdout.splitlines()[-1] == "HEAVY True True"  # the first call builds the spec
    assert runs[1].stdout.splitlines()[-1] == "HEAVY False False"
    assert runs[0].stdout.splitlines()[:-1] == runs[1].stdout.splitlines()[:-1]
