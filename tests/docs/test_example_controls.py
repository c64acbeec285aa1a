"""The examples people run first (the README's ablate line, `make demo`, the ablate --help examples) compare the
target heads with at least 3 distinct random head sets on the bundled models: a control of one set has no
spread to speak of."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
# the retrieval heads the bundled organisms' detection finds (docs/results.md): the targets of the examples
DETECTED = {"tiny-qwen2": ["L2H4", "L2H5", "L2H6", "L2H7"], "tiny-llama": ["L2H0", "L2H1"]}


def readme_lines(prefix: str) -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [shlex.split(ln)[1:] for ln in re.findall(rf"^{prefix}.*$", text, flags=re.M)]


def demo_argv() -> list[str]:
    line = re.search(r"^demo:.*\n\t(.*)$", (ROOT / "Makefile").read_text(), flags=re.M).group(1)
    return shlex.split(line)[1:]  # drop $(VENV)/bin/interp


def ablate_args(argv: list[str]) -> dict:
    """The parsed options of an `interp ablate` argv (click's parse, nothing runs)."""
    import typer.main

    from interp.cli import app

    cmd = typer.main.get_command(app).commands["ablate"]
    return cmd.make_context("ablate", list(argv[1:])).params


def example_ablates() -> list[tuple[str, list[str]]]:
    from interp.cli.examples import EXAMPLES

    out = [("README", a) for a in readme_lines("interp ablate")] + [("make demo", demo_argv())]
    out += [("ablate --help", shlex.split(x)[1:]) for x in EXAMPLES["ablate"]
            if "--heads retrieval" in x and "--curve" not in x and "qwen2.5-7b" not in x]
    return out


@pytest.mark.parametrize("where,argv", example_ablates(), ids=lambda x: x if isinstance(x, str) else None)
def test_example_ablations_have_at_least_three_distinct_random_sets(where, argv):
    """The control sets the example's options draw for the heads its model's detection finds (the same
    function the command calls: experiments.conditions.random_head_controls)."""
    from interp.experiments.conditions import random_head_controls
    from interp.models.loading import load_model

    params = ablate_args(argv)
    name = params.get("model") or "tiny-qwen2"  # the bundled default model
    spec = load_model(name).spec
    ctl = random_head_controls(DETECTED[name], spec, lambda hs: (), params["draws"], params["seed"],
                               params["random_pool"])
    assert params["draws"] >= 3 and ctl.distinct_draws >= 3, f"{where}: `interp {shlex.join(argv)}`: {ctl.note()}"


@pytest.mark.slow
def test_readme_ablate_example_runs_with_at_least_three_distinct_random_sets(tmp_path, monkeypatch, capsys):
    """The README's detect and ablate lines as written, on the bundled model: the result's distinct random sets."""
    monkeypatch.chdir(tmp_path)
    detect = [a for a in readme_lines("interp detect retrieval") if "tiny-" in " ".join(a)][0]
    ablate = readme_lines("interp ablate")[0]
    for argv in (detect, ablate + ["--out", "runs/abl"]):
        code, _, err = run_cli(argv, capsys)
        assert code == 0, err[-1500:]
    d = json.loads((tmp_path / "runs/abl/ablation.json").read_text())
    assert d["distinct_draws"] >= 3 and d["controls_note"] is None, d["controls_note"]
    assert len([c for c in d["conditions"] if c["role"] == "control"]) == d["distinct_draws"]
