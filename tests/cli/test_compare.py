"""`interp compare`: two runs of the same command agree bit for bit; a changed number, a changed setting or a
missing result is reported by its place; bad folders exit 2."""

from __future__ import annotations

import json
import math

import pytest

from interp.runtime.compare import compare_trees

from tests.helpers import run_cli

IND = ["detect", "induction", "--model", "tiny-llama", "--copy-lengths", "10", "--n-seqs", "4", "--draws", "2"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The same command run twice into two folders (a tree: runs/a/ind, runs/b/ind)."""
    from interp.cli import main

    root = tmp_path_factory.mktemp("runs")
    for side in ("a", "b"):
        try:
            main(IND + ["--out", str(root / side / "ind")])
        except SystemExit as e:
            assert e.code in (0, None)
    return root


def test_a_command_run_twice_agrees_bit_for_bit(two_runs, capsys):
    code, out, _ = run_cli(["compare", str(two_runs / "a" / "ind"), str(two_runs / "b" / "ind"), "--json"], capsys)
    d = json.loads(out)
    assert code == 0 and d["agree"]
    f = d["runs"]["."]["files"][0]
    assert f["name"] == "induction.json" and f["numbers"] > 200 and f["identical"] == f["numbers"]
    assert not f["settings"]  # same settings; provenance (time, commit) is not compared


def test_a_changed_number_is_found_by_its_place(two_runs, tmp_path, capsys):
    import shutil

    b = tmp_path / "b"
    shutil.copytree(two_runs / "b" / "ind", b)
    d = json.loads((b / "induction.json").read_text())
    d["scores"]["induction"][1][1] += 0.25
    d["config"]["seed"] = 7
    (b / "induction.json").write_text(json.dumps(d))
    code, out, _ = run_cli(["compare", str(two_runs / "a" / "ind"), str(b)], capsys)
    assert code == 1
    assert "scores.induction[1][1]" in out and "DIFFER (settings differ)" in out and "config.seed: 0 vs 7" in out
    # within a tolerance wide enough, the number agrees; the settings still differ and are said
    code, out, _ = run_cli(["compare", str(two_runs / "a" / "ind"), str(b), "--atol", "0.3", "--json"], capsys)
    r = json.loads(out)["runs"]["."]
    assert code == 0 and not r["same_settings"] and r["files"][0]["within"] == r["files"][0]["numbers"]
    assert r["files"][0]["identical"] == r["files"][0]["numbers"] - 1


def test_trees_of_runs_are_matched_by_relative_folder(two_runs, tmp_path, capsys):
    import shutil

    shutil.copytree(two_runs / "b", tmp_path / "b")
    shutil.copytree(two_runs / "b" / "ind", tmp_path / "b" / "extra")
    (tmp_path / "b" / "ind" / "induction.json").unlink()
    code, out, _ = run_cli(["compare", str(two_runs / "a"), str(tmp_path / "b"), "--json"], capsys)
    d = json.loads(out)
    assert code == 1 and d["only_b"] == ["extra"] and d["runs"]["ind"]["only_a"] == ["induction.json"]


def test_bad_folders_exit_2(two_runs, tmp_path, capsys):
    a = str(two_runs / "a" / "ind")
    code, _, err = run_cli(["compare", a, str(tmp_path / "nowhere")], capsys)
    assert code == 2 and "no such folder" in err
    code, _, err = run_cli(["compare", a, str(tmp_path)], capsys)
    assert code == 2 and "is a run folder and the other is not" in err
    code, _, err = run_cli(["compare", str(tmp_path), str(tmp_path)], capsys)
    assert code == 2 and "holds no run" in err
    code, _, err = run_cli(["compare", a, a, "--atol", "-1"], capsys)
    assert code == 2 and "--atol must be a finite number >= 0, got -1.0" in err


def test_leaf_rules():
    a = {"provenance": {"t": 1}, "x": [1.0, float("nan"), 2], "s": "L1H1", "n": None, "deep": {"v": 1.0}}
    b = {"provenance": {"t": 2}, "x": [1.0 + 1e-9, float("nan"), 3], "s": "L1H2", "n": None, "deep": {"v": [1.0]}}
    f = compare_trees(a, b, "r.json")
    assert (f.numbers, f.identical, f.within) == (3, 1, 2)  # 1e-9 is within; nan equals nan; 2 vs 3 is not
    assert [d.path for d in f.differences] == ["x[2]", "s"] and f.differences[0].abs_diff == 1
    assert [d.path for d in f.structure] == ["deep.v"] and not f.agree
    g = compare_trees({"x": [1.0, 2.0]}, {"x": [1.0]})
    assert [d.path for d in g.structure] == ["x"] and g.structure[0].b == "<list of 1>"
    h = compare_trees({"x": math.inf}, {"x": 1.0})
    assert not h.agree and h.worst == "x"


@pytest.mark.parametrize("atol,rtol", [(0.0, math.inf), (math.nan, 0.0), (math.inf, 0.0), (0.0, math.nan), (-1.0, 0.0)])
def test_a_tolerance_that_turns_the_check_off_is_refused(atol, rtol):
    """rtol=inf made 1.0 and 2.0 agree; nan passed the `< 0` check (issue 43)."""
    from interp.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="must be a finite number >= 0"):
        compare_trees({"x": 1.0}, {"x": 2.0}, "r.json", atol, rtol)
