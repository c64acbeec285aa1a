"""Nonsense option values are refused (exit 2, one line, no results), not read as `x or default`."""

from __future__ import annotations

import pytest

from .helpers import run_cli

CASES = [  # (args, message): one line each, so adding a case is one line
    (["detect", "retrieval", "--threshold", "nan"], "--threshold must be a finite number"),
    (["ablate", "--threshold", "inf"], "--threshold must be a finite number"),
    (["detect", "retrieval", "--sink", "-1"], "--sink and --recent must be >= 0"),
    (["detect", "retrieval", "--recent", "-5"], "--sink and --recent must be >= 0"),
    (["detect", "retrieval", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
    (["ablate", "--heads", "random", "--n-heads", "0"], "--n-heads must be >= 1"),
    (["ablate", "--heads", "L1H2,L0H0,L1H2"], "L1H2 listed more than once"),
    (["ablate", "--model", ""], "--model is empty"),
    (["probe", "--model", "  "], "--model is empty"),
    (["detect", "copy-suppression", "--k", "0"], "k must be >= 1"),
    (["patch", "--method", "atp", "--verify-top", "-1"], "--verify-top and --verify-sample must be >= 0"),
    (["patch", "--method", "bogus"], "--method 'bogus'"),
]


@pytest.mark.parametrize("args,msg", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_nonsense_values_exit_2(args, msg, capsys, tmp_path):
    o = tmp_path / "o"
    code, _, err = run_cli(args + ["--out", str(o)], capsys)
    assert code == 2, err
    assert msg in err and "Traceback" not in err and len(err.splitlines()) <= 1, err
    assert not o.exists() or not any(o.iterdir())


def test_organisms_build_of_an_unknown_name_exits_non_zero(capsys):
    code, _, err = run_cli(["organisms", "build", "nosuch"], capsys)
    assert code not in (0, None), err


@pytest.mark.parametrize("args,msg", [
    (["detect", "retrieval", "-m", "tiny-gpt2", "--lengths", "1100"], "learned positions for"),
    (["ablate", "--lengths", "99999999999"], "over the 1,048,576-token limit"),
    (["patch", "-m", "tiny-gpt2", "--task", "niah", "--lengths", "5000"], "learned positions for"),
])
def test_contexts_the_model_cannot_take_are_refused(args, msg, capsys, tmp_path):
    code, _, err = run_cli(args + ["--out", str(tmp_path / "o")], capsys)
    assert code == 2 and msg in err and "Traceback" not in err, err


def test_contexts_past_the_trained_length_of_a_rope_model_warn():
    import warnings  # noqa: F401

    import interp
    from interp.tasks.niah import NiahConfig, check_context

    spec = interp.load_model("tiny-qwen2").spec
    assert check_context(spec, NiahConfig(context_lengths=(512,))) == []
    (w,) = check_context(spec, NiahConfig(context_lengths=(spec.max_positions + 10,)))
    assert "past" in w and str(spec.max_positions) in w


def test_a_failed_run_leaves_out_as_it_was(tmp_path, capsys):
    """ablate detects heads first (and stages their files), then finds none above the threshold and
    fails: --out keeps exactly what it held, and no staging folder is left beside it."""
    o = tmp_path / "o"
    o.mkdir()
    (o / "notes.txt").write_text("mine")
    code, _, err = run_cli(["ablate", "-m", "tiny-qwen2", "--lengths", "256", "--depths", "0.5", "--seeds", "1",
                            "--threshold", "2", "--out", str(o)], capsys)
    assert code == 2 and "no heads to ablate" in err, err
    assert sorted(p.name for p in o.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]
    code, _, err = run_cli(["ablate", "-m", "tiny-qwen2", "--heads", "L2H4", "--lengths", "256", "--depths", "0.5",
                            "--seeds", "2", "--draws", "1", "--out", str(o)], capsys)
    assert code == 0, err
    assert {"notes.txt", "ablation.json", "ablation.csv", "prompts.jsonl"} <= {p.name for p in o.iterdir()}
    assert f"written to {o}/" in err and sorted(p.name for p in tmp_path.iterdir()) == ["o"]
