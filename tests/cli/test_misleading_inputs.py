"""Inputs that would mislead without a word: each is now refused, fixed or said."""

from __future__ import annotations

import json
import warnings

import pytest

from tests.helpers import run_cli

GRID = ["--lengths", "256", "--depths", "0.5", "--n-seeds", "2"]


def test_needles_fewer_than_seeds_are_refused_and_enough_give_distinct_prompts(tmp_path, tok):
    from interp.errors import InvalidInputError
    from interp.tasks.niah import NiahConfig, build_niah

    f = tmp_path / "n.jsonl"
    rows = [{"needle": f"The code of box {i} is {i}{i}.", "question": f"The code of box {i} is", "answer": f" {i}{i}"}
            for i in range(3)]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows + rows[:1]))  # 4 lines, 3 distinct
    hay = tmp_path / "hay.txt"
    hay.write_text("The river runs past the old mill. " * 30)
    with pytest.raises(InvalidInputError, match="3 distinct needles but 4 seeds"):  # same haystack: repeats
        build_niah(tok, NiahConfig(context_lengths=(128,), depths=(0.5,), n_seeds=4, needles_file=str(f),
                                   haystack_file=str(hay)))
    with warnings.catch_warnings(record=True) as caught:  # the corpus haystack differs by seed: a warning
        warnings.simplefilter("always")
        samples = build_niah(tok, NiahConfig(context_lengths=(128,), depths=(0.5,), n_seeds=4, needles_file=str(f)))
    assert len({tuple(s.input_ids) for s in samples}) == 4
    assert any("needles repeat across seeds" in str(w.message) for w in caught)
    samples = build_niah(tok, NiahConfig(context_lengths=(128,), depths=(0.5,), n_seeds=3, needles_file=str(f),
                                         haystack_file=str(hay)))
    assert len({tuple(s.input_ids) for s in samples}) == 3


def test_a_user_haystack_takes_the_needle_between_sentences_never_inside_a_word(tmp_path, tok):
    from interp.tasks.niah import NiahConfig, build_niah

    words = ["zebrafishery", "quaternionic", "hyperbolically", "counterfactual", "ultramicroscope", "whereupon"]
    text = " ".join(f"{words[i % 6]} {words[(i * 5 + 1) % 6]} {words[(i * 7 + 2) % 6]}." for i in range(40))
    (tmp_path / "hay.txt").write_text(text)
    assert any(len(tok(" " + w, add_special_tokens=False)["input_ids"]) > 1 for w in words)  # multi-token words
    cfg = NiahConfig(context_lengths=(200, 333), depths=(0.1, 0.37, 0.5, 0.83), n_seeds=1,
                     haystack_file=str(tmp_path / "hay.txt"))
    for s in build_niah(tok, cfg):
        before = tok.decode(s.input_ids[:s.needle_span[0]], skip_special_tokens=True)
        after = tok.decode(s.input_ids[s.needle_span[1]:], skip_special_tokens=True)
        assert before.strip() == "" or before.rstrip().endswith("."), before[-40:]
        hay_after = after[:after.rfind(".") + 1] if "." in after else ""
        for w in (before + " " + hay_after).replace(".", " ").split():
            assert w in words, (w, s.id)  # every haystack word is whole


def test_separator_escapes_keep_non_ascii_text(tmp_path, capsys):
    from interp.cli.options import niah_config, parse_escapes

    assert parse_escapes("→ Frage:\\n") == "→ Frage:\n"
    assert parse_escapes("a\\tb\\\\n\\u00e9") == "a\tb\\né"
    assert niah_config("256", "0.5", 1, None, None, "\\nFrage über:", None).separator == "\nFrage über:"


def test_decode_only_warns_when_some_answers_are_one_token(tok):
    from interp.errors import InterpWarning, InvalidInputError
    from interp.experiments import NiahTask
    from interp.tasks.niah import NiahConfig, build_niah

    samples = build_niah(tok, NiahConfig(context_lengths=(128,), depths=(0.5,), n_seeds=3))
    one = samples[0]
    assert len(one.answer_ids) == 1  # the organisms' corpus answers are one token: decode-only is vacuous there
    long_ = [type(s)(**{**s.__dict__, "answer_ids": s.answer_ids * 2}) for s in samples[1:]]
    with pytest.raises(InvalidInputError, match="decode-only masking cannot change"):
        NiahTask([one, one], decode_only=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        NiahTask([one] + long_, decode_only=True)
    assert any(issubclass(w.category, InterpWarning) and "1 of" in str(w.message) for w in caught)
    NiahTask([one, one], decode_only=False)  # masking prefill and decoding is fine


def test_ablate_from_a_detection_inherits_its_grid_and_says_so(tmp_path, capsys):
    det = tmp_path / "det"
    assert run_cli(["detect", "retrieval", "-m", "tiny-qwen2", "--lengths", "300", "--depths", "0.25,0.75",
                    "--n-seeds", "2", "--out", str(det)], capsys)[0] == 0
    code, _, err = run_cli(["ablate", "-m", "tiny-qwen2", "--from", str(det), "--draws", "1", "--out",
                            str(tmp_path / "a")], capsys)
    assert code == 0, err
    assert "NIAH grid from" in err and "--lengths 300" in err and "--depths 0.25,0.75" in err, err
    niah = json.loads((tmp_path / "a" / "ablation.json").read_text())["config"]["niah"]
    assert niah["context_lengths"] == [300] and niah["depths"] == [0.25, 0.75] and niah["n_seeds"] == 2
    code, _, err = run_cli(["ablate", "-m", "tiny-qwen2", "--from", str(det), "--draws", "1", "--lengths", "256",
                            "--out", str(tmp_path / "b")], capsys)
    assert code == 0 and "not the detection's grid: --lengths 256 (detected on 300)" in err, err


def test_heads_detected_inside_ablate_are_named(tmp_path, capsys):
    code, _, err = run_cli(["ablate", "-m", "tiny-qwen2", *GRID, "--draws", "1", "--out", str(tmp_path / "a")], capsys)
    assert code == 0, err
    heads = json.loads((tmp_path / "a" / "retrieval.json").read_text())["heads"]
    line = err[err.index("detected"):err.index("(saved as retrieval.json")]
    assert heads and f"detected {len(heads)} retrieval heads" in line and all(h in line for h in heads), err


def test_random_controls_are_distinct_sets_shown_with_their_heads(capsys, tmp_path):
    """`ablate --heads L2H0` on tiny-llama: layer 2 has three other heads, so three layer-matched sets exist.
    Five draws asked: each of the three is run once, printed with its heads, the shortfall said, and the
    pooled control's CI resamples the sets (it is not the per-prompt interval of their mean)."""
    import json

    from tests.helpers import run_cli

    o = tmp_path / "o"
    code, _, err = run_cli(["ablate", "--model", "tiny-llama", "--heads", "L2H0", "--lengths", "256", "--depths",
                            "0.5", "--n-seeds", "2", "--draws", "5", "--out", str(o)], capsys)
    assert code == 0, err
    res = json.loads((o / "ablation.json").read_text())
    rnd = [c for c in res["conditions"] if c["name"].startswith("random-")]
    assert sorted(c["heads"] for c in rnd) == [["L2H1"], ["L2H2"], ["L2H3"]]
    assert (res["distinct_draws"], res["requested_draws"]) == (3, 5)
    assert "only 3 distinct layer-matched random head set(s) exist for these heads (5 asked)" in err
    import re

    shown = {m.group(1): m.group(2) for m in re.finditer(r"(random-\d) │ (L2H\d)", err)}  # the heads column
    assert shown == {c["name"]: c["heads"][0] for c in rnd}
    pooled = res["random_pooled"]
    assert pooled["name"] == "random (mean of 3 sets)"
    assert pooled["estimates"]["recall"]["method"].startswith("two-level bootstrap over 3 sets")
    assert "sets held fixed" in res["target_vs_random"]["p_method"]


def test_induction_table_shows_every_head_the_text_names(capsys, tmp_path):
    """tiny-llama's previous-token heads L1H0/L1H1 rank below the top 12 by induction score; the line that names
    them must not point at rows the table left out, and the title says how many rows are shown."""
    from tests.helpers import run_cli

    code, _, err = run_cli(["detect", "induction", "--model", "tiny-llama", "--n-seqs", "8", "--draws", "1", "--out",
                            str(tmp_path / "i")], capsys)
    assert code == 0, err
    assert "previous-token heads: L1H0, L1H1" in err
    assert "│ L1H0 │" in err and "│ L1H1 │" in err
    assert "14 of 16 shown" in err


def test_messages_say_what_is_true(capsys, tmp_path):
    """An organism with --needles standard was trained on the synthetic corpus (the note must not say otherwise);
    a multi-token logit_diff answer names how this model's tokenizer splits it and offers --metric logprob."""
    from tests.helpers import run_cli

    code, _, err = run_cli(["detect", "retrieval", "--model", "tiny-qwen2", "--needles", "standard", *GRID, "--out",
                            str(tmp_path / "d")], capsys)
    assert code == 0, err
    assert "tiny-qwen2 was trained on this corpus (an organism)" in err and "was not trained" not in err
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "The capital of France is", "answer": " Parisian capital", "wrong": " Rome"}\n')
    code, _, err = run_cli(["ablate", "--model", "tiny-qwen2", "--heads", "L2H4", "--prompts", str(f), "--out",
                            str(tmp_path / "a")], capsys)
    assert code == 2
    assert "for this model's tokenizer (" in err and "['" in err and "--metric logprob" in err


def test_patching_headline_ranks_effects_over_cells_every_pair_has(capsys, tmp_path):
    """Raw noising patching on pairs of different lengths: the printed top cells (and the report's table) rank
    |patched - base| over the cells all pairs have, not raw values of end-aligned cells that only some pairs
    have (where nothing changes); the figure title says what is averaged."""
    import re

    import numpy as np

    from tests.helpers import run_cli

    f = tmp_path / "pairs.jsonl"
    rows = [("The secret code of the green lantern is {}. What is the secret code of the green lantern? It is",
             " Oscar", " Victor"),
            ("The red door has the number {} in the old town. The number of the red door is", " seven", " three"),
            ("Note: the colour of the box is {}, keep it safe. The colour of the box is", " green", " blue")]
    f.write_text("".join(json.dumps({"clean": t.format(a.strip()), "corrupt": t.format(w.strip()), "answer": a,
                                     "wrong": w}) + "\n" for t, a, w in rows))
    o = tmp_path / "p"
    code, _, err = run_cli(["patch", "--model", "tiny-llama", "--pairs", str(f), "--site", "resid_pre",
                            "--direction", "noising", "--raw", "--out", str(o)], capsys)
    assert code == 0, err
    d = json.loads((o / "patching.json").read_text())
    g = d["sites"]["resid_pre"]
    per = np.array(g["per_pair"], dtype=float) - np.array(d["base_value"])[:, None, None]  # independent: by hand
    n = (~np.isnan(per)).sum(0)
    assert n.min() < 3 == n.max()  # the end-aligned early positions exist in only some pairs
    eff = np.where(n == 3, np.nanmean(per, 0), np.nan)
    layer, pos = np.unravel_index(np.nanargmax(np.abs(eff)), eff.shape)
    flat = " ".join(err.split())  # the console wraps long lines
    first = re.search(r"resid_pre top cells by \|effect \(patched - base logit_diff\)\|, mean over 3 pairs: "
                      r"L(\d+) pos (-?\d+): ([+-][\d.]+)", flat)
    assert (int(first.group(1)), int(first.group(2))) == (layer, g["positions"][pos])
    assert float(first.group(3)) == pytest.approx(eff[layer, pos], abs=1e-3) and abs(eff[layer, pos]) > 1
    assert "cells that fewer pairs have are not ranked" in flat
    # the report's table: the same ranking; the heatmap's title says the mean is over the pairs that have each cell
    page = (o / "index.html").read_text()
    assert f"{abs(eff[layer, pos]):.3f}"[:4] in page
    fig = next(o.glob("*resid_pre*.html")).read_text()
    assert "pairs that have each cell" in fig


def test_progress_bars_know_their_totals(capsys, tmp_path):
    """patch's bar counts to the rows it evaluates (not `408/?`), atp's to its sites, and a detection inside
    ablate shows its own bar."""
    import re

    from tests.helpers import run_cli

    code, _, err = run_cli(["patch", "--model", "tiny-llama", "--task", "niah", "--lengths", "256", "--depths", "0.5",
                            "--n-seeds", "2", "--site", "resid_pre,head_out", "--positions=-1", "--out",
                            str(tmp_path / "p")], capsys)
    assert code == 0, err
    rows = json.loads((tmp_path / "p" / "patching.json").read_text())["n_rows"]
    assert re.search(rf"patching rows (\S* )?{rows}/{rows}", err), err
    code, _, err = run_cli(["patch", "--model", "tiny-llama", "--task", "niah", "--lengths", "256", "--depths", "0.5",
                            "--n-seeds", "2", "--site", "resid_pre,head_out", "--method", "atp", "--verify-top", "0",
                            "--verify-sample", "0", "--out", str(tmp_path / "a")], capsys)
    assert code == 0 and re.search(r"atp sites (\S* )?2/2", err), err
    code, _, err = run_cli(["ablate", "--model", "tiny-llama", "--heads", "retrieval", *GRID, "--draws", "1", "--out",
                            str(tmp_path / "b")], capsys)
    assert code == 0 and re.search(r"retrieval detection (\S* )?2/2", err), err
