"""Run folders: one run per --out (run.json written last), --overwrite to replace, warnings recorded."""

from __future__ import annotations

import json
import warnings

import pytest

from interp.runtime.cost import cpu_model
from tests.helpers import run_cli

DETECT = ["detect", "retrieval", "-m", "tiny-qwen2", "--lengths", "256", "--depths", "0.5", "--n-seeds", "5"]


def _run_cost():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "run_cost.py"
    spec = importlib.util.spec_from_file_location("run_cost", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _files(d):
    return sorted(p.name for p in d.iterdir())


def test_cpu_model_reads_the_model_name():
    info = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu avx512_bf16\n"
    assert cpu_model(info) == "AMD EPYC 9R14"
    assert cpu_model("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8488C\n") == "Intel(R) Xeon(R) Platinum 8488C"


def test_run_json_is_written_last_and_lists_the_runs_files(tmp_path, capsys):
    o = tmp_path / "det"
    code, _, err = run_cli(DETECT + ["--out", str(o)], capsys)
    assert code == 0, err
    run = json.loads((o / "run.json").read_text())
    assert run["command"] == "interp " + " ".join(DETECT + ["--out", str(o)])
    assert run["files"] == [f for f in _files(o) if f != "run.json"] and "retrieval.json" in run["files"]
    assert run["warnings"] == [] and run["format"] == "interp-run"
    c = run["compute"]  # the call's cost: a detection takes measurable wall and CPU time
    assert c["wall_seconds"] > 0 and c["cpu_seconds"] > 0 and c["torch_threads"] >= 1
    assert c["cpu"] == cpu_model()  # which CPU the seconds were spent on
    # bench/run_cost.py sums the records and lists a run without one apart, never as zero
    old = tmp_path / "old"
    old.mkdir()
    (old / "run.json").write_text(json.dumps({"format": "interp-run", "command": "interp x"}))
    rows, missing = _run_cost().run_costs([tmp_path])
    assert [r["cpu_s"] for r in rows] == [c["cpu_seconds"]] and missing == [old]


def test_a_second_run_into_the_same_out_is_refused_then_replaced_with_overwrite(tmp_path, capsys):
    o = tmp_path / "det"
    assert run_cli(DETECT + ["--out", str(o)], capsys)[0] == 0
    (o / "notes.txt").write_text("mine")
    before = {f: (o / f).read_bytes() for f in _files(o)}
    # an ablation into the detection's folder would replace its prompts.jsonl: refused before any work
    code, _, err = run_cli(["ablate", "-m", "tiny-qwen2", "--heads", "L2H4", "--lengths", "256", "--depths", "0.5",
                            "--n-seeds", "2", "--draws", "1", "--out", str(o)], capsys)
    assert code == 2 and "already holds a run (interp detect retrieval" in err and "--overwrite" in err, err
    assert {f: (o / f).read_bytes() for f in _files(o)} == before
    code, _, err = run_cli(["ablate", "-m", "tiny-qwen2", "--heads", "L2H4", "--lengths", "256", "--depths", "0.5",
                            "--n-seeds", "2", "--draws", "1", "--overwrite", "--out", str(o)], capsys)
    assert code == 0, err
    run = json.loads((o / "run.json").read_text())
    assert run["command"].startswith("interp ablate")
    assert "retrieval.json" not in _files(o) and "ablation.json" in _files(o)  # the earlier run's files went
    assert (o / "notes.txt").read_text() == "mine"  # files that were no run's stay
    assert set(_files(o)) == set(run["files"]) | {"run.json", "notes.txt"}


def test_a_folder_with_same_named_files_of_no_run_is_not_overwritten(tmp_path, capsys):
    o = tmp_path / "mine"
    o.mkdir()
    (o / "retrieval.json").write_text('{"my": "own"}')
    code, _, err = run_cli(DETECT + ["--out", str(o)], capsys)
    assert code == 2 and "already has retrieval.json (not from an interp run)" in err, err
    assert _files(o) == ["retrieval.json"] and (o / "retrieval.json").read_text() == '{"my": "own"}'
    assert _files(tmp_path) == ["mine"]


def test_warnings_are_printed_once_and_recorded_in_run_json(tmp_path, capsys):
    o = tmp_path / "long"
    code, _, err = run_cli(["detect", "retrieval", "-m", "tiny-qwen2", "--lengths", "2060", "--depths", "0.5",
                            "--n-seeds", "1", "--out", str(o)], capsys)
    assert code == 0, err
    # past the trained length, and heads declared from one prompt's scores: each warned once, both recorded
    assert err.count("warning:") == 2 and "max_position_embeddings 2048" in err, err
    w, few = json.loads((o / "run.json").read_text())["warnings"]
    assert "past" in w and "2048" in w
    assert "declared from scores averaged over 1 recalled prompt(s) of 1" in few


def test_positions_past_learned_embeddings_are_refused_and_past_rope_training_warned():
    import torch

    import interp
    from interp.errors import InterpWarning, InvalidInputError

    gpt2 = interp.load_model("tiny-random-gpt2")
    n = gpt2.spec.max_positions
    with pytest.raises(InvalidInputError, match="learned positions"):
        gpt2.forward(torch.zeros(1, n + 1, dtype=torch.long))
    with pytest.raises(InvalidInputError, match="learned positions"):
        gpt2.greedy_decode(torch.zeros(1, n - 1, dtype=torch.long), max_new_tokens=3)
    gpt2.greedy_decode(torch.zeros(1, n - 1, dtype=torch.long), max_new_tokens=2)  # the last token is not fed back
    qwen = interp.load_model("tiny-random-qwen2")
    m = qwen.spec.max_positions
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        qwen.forward(torch.zeros(1, m, dtype=torch.long))
        assert not [w for w in caught if issubclass(w.category, InterpWarning)]
        qwen.forward(torch.zeros(1, m + 1, dtype=torch.long))
        qwen.forward(torch.zeros(1, m + 2, dtype=torch.long))
    (w,) = [w for w in caught if issubclass(w.category, InterpWarning)]
    assert f"max_position_embeddings {m}" in str(w.message)


def test_a_detection_inside_ablate_keeps_its_prompts_beside_the_task_prompts(tmp_path, capsys):
    """ablate --heads retrieval --prompts FILE detects on NIAH and ablates on FILE's prompts: each set of
    prompts is written to its own file (the detection's must not be overwritten by the task's)."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"The cat sat on the {w} and the", "answer": " mat"}) + "\n"
                               for w in ("mat", "box", "bed")))
    out = tmp_path / "run"
    code, _, err = run_cli(["ablate", "-m", "tiny-llama", "--heads", "retrieval", "--prompts", str(prompts),
                            "--metric", "logprob", "--lengths", "256", "--depths", "0.5", "--n-seeds", "2",
                            "--draws", "1", "--out", str(out)], capsys)
    assert code == 0, err
    task = [json.loads(x) for x in (out / "prompts.jsonl").read_text().splitlines()]
    det = [json.loads(x) for x in (out / "retrieval-prompts.jsonl").read_text().splitlines()]
    assert [t["prompt"] for t in task] == [json.loads(x)["prompt"] for x in prompts.read_text().splitlines()]
    assert len(det) == 2 and all(d not in task for d in det)
    abl = json.loads((out / "ablation.json").read_text())
    assert abl["detection"]["prompts_file"].endswith("retrieval-prompts.jsonl")
    run = json.loads((out / "run.json").read_text())
    assert {"prompts.jsonl", "retrieval-prompts.jsonl", "retrieval.json"} <= set(run["files"])
