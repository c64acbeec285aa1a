"""The tests a result is about, everywhere a reader looks: the target vs its pooled random controls and the
note that fewer distinct random sets exist than were asked in the terminal, the CSV (`to_frame()`) and the report
page; a p-value at the floor of its design said as such (rope-profile: all retrieval heads in one 8-head layer,
70 labellings, so p = 2/70 exactly); each p beside its Holm-adjusted one."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.helpers import run_cli

HEADS = "L2H4,L2H5,L2H6,L2H7"  # tiny-qwen2's retrieval heads: one key-value group of its 8-head layer 2


def test_ablate_main_test_and_controls_note_in_terminal_csv_and_page(tmp_path, capsys):
    out = tmp_path / "ab"
    code, _, err = run_cli(["ablate", "-m", "tiny-qwen2", "--heads", HEADS, "--lengths", "256", "--depths", "0.5",
                            "--n-seeds", "3", "--draws", "3", "--out", str(out)], capsys)
    assert code == 0, err
    d = json.loads((out / "ablation.json").read_text())
    tv = d["target_vs_random"]
    note = d["controls_note"]
    assert note.startswith("only 1 distinct layer-matched random head set")
    # terminal: the main test with its floor flagged and its Holm p, and the controls note
    assert "target vs random (mean of 1 set) (recall, paired): -1.00 [-1.00, -1.00], p = 0.25 (no power)" in err
    assert f"Holm-adjusted p = {tv['p_holm']:.3g}" in err and f"note: {note}" in " ".join(err.split())
    assert "p cannot fall below 0.25" in err  # 3 prompts, all differ: 2^3 sign patterns
    # d_z: -inf where every difference is -1, undefined (0/0) where every one is 0 (never 0.00), alike in the JSON
    conds = {c["name"]: c["vs_baseline"] for c in d["conditions"] if c["vs_baseline"]}
    assert conds["target"]["recall"]["nonfinite"] == {"cohens_d": "-inf"}
    assert conds["random-1"]["recall"]["cohens_d"] is None
    assert conds["random-1"]["recall"]["nonfinite"] == {"cohens_d": "nan"}
    # CSV (= to_frame()): a row of its own, the note on the pool and the test
    df = pd.read_csv(out / "ablation.csv")
    row = df[df.condition == f"target vs {tv['y']}"]
    assert len(row) == 1 and row.role.item() == "test" and row.note.item() == note
    assert row.p_value.item() == pytest.approx(tv["p_value"]) and row.p_floor.item() == pytest.approx(0.25)
    assert row.p_holm.item() == pytest.approx(tv["p_holm"])
    assert df[df.condition == tv["y"]].note.dropna().unique().tolist() == [note]
    # the report page: the tests table and the notes under it
    page = (out / "index.html").read_text()
    tests = page[page.index("<div class='table tests'>"):]
    assert "target vs random (mean of 1 set)" in tests and "0.25 (no power)" in tests
    assert "only 1 distinct layer-matched random head set(s) exist" in tests.split("<div class='table'>")[0]


def test_rope_profile_p_at_its_floor_in_terminal_and_page(tmp_path, capsys):
    out = tmp_path / "rp"
    code, _, err = run_cli(["rope-profile", "-m", "tiny-qwen2", "--heads", HEADS, "--n-texts", "2", "--n-tokens",
                            "64", "--out", str(out)], capsys)
    assert code == 0, err
    d = json.loads((out / "rope_profile.json").read_text())
    perm = d["comparison"]["layer_clustered_permutation"]
    assert perm["exact"] and perm["n_labellings"] == 70 and perm["p_floor"] == pytest.approx(2 / 70)
    if perm["at_floor"]:  # the four retrieval heads are the top four of their layer on this statistic
        assert "(exact over 70 labellings, at the floor of its design)" in err
        assert "note: p is at the floor of its design" in err
    assert "Holm-adjusted p = " in err
    page = (out / "index.html").read_text()
    tests = page[page.index("<div class='table tests'>"):page.index("<div class='table'>")]
    assert "retrieval vs other heads" in tests and "0.0286" in tests
    assert ("(at floor)" in tests) == any(c["layer_clustered_permutation"]["at_floor"]
                                          for c in d["comparisons"].values())
