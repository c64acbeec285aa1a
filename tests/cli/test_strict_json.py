"""Every JSON the CLI writes parses with a strict parser: no NaN / Infinity literals. Non-finite
numbers become null, and the dict that held them names them in "nonfinite"."""

from __future__ import annotations

import json
import math

import pytest

from interp.runtime.jsonio import dumps, strict

from tests.cli.conftest import RUNS
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


@pytest.mark.parametrize("name", list(RUNS))
def test_every_result_json_is_strict(name, cli_runs):
    o, out = cli_runs[name]
    args = RUNS[name]
    _strict_load(out)
    files = sorted(o.rglob("*.json"))  # results, run.json, a store's manifest
    assert files and (args[0] == "cache" or (o / "run.json") in files)
    for f in files:
        _strict_load(f.read_text())
    if args[0] == "ablate" and "--curve" not in args:
        target = _strict_load((o / "ablation.json").read_text())["conditions"][1]["vs_baseline"]["recall"]
        assert target["cohens_d"] is None and target["nonfinite"] == {"cohens_d": "-inf"}


@pytest.mark.parametrize("args", [["models", "--json"], ["info", "-m", "tiny-qwen2", "--json"],
                                  ["info", "-m", "tiny-qwen2", "--config-only", "--json"]])
def test_json_on_stdout_is_strict(args, capsys):
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    _strict_load(out)
