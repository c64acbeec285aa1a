"""`interp atlas`: every cell read from the run folders it was given (checked against the result files
themselves), one column per model (and dtype), "no run given" where a model lacks an analysis, clear errors for
folders that are not runs, and the README's headline table equal to the committed atlas rendered again."""

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def atlas_run(cli_runs, tmp_path_factory):
    root = tmp_path_factory.mktemp("atlas")
    runs = root / "runs"
    for name in ("retrieval", "ablate", "rope-zero", "rope-profile", "induction", "copy-suppression", "patch"):
        shutil.copytree(cli_runs[name][0], runs / name)
    return root, runs


def _atlas(runs: Path, out: Path, capsys, *extra):
    code, stdout, err = run_cli(["atlas", str(runs), "--out", str(out), *extra], capsys)
    return code, stdout, err


def test_atlas_cells_are_the_results_numbers(atlas_run, capsys):
    root, runs = atlas_run
    code, out, err = _atlas(runs, root / "atlas", capsys)
    assert code == 0, err
    d = json.loads((root / "atlas" / "atlas.json").read_text())
    cols = {m["label"]: m for m in d["models"]}
    assert set(cols) == {"tiny-qwen2", "tiny-llama", "tiny-random-gpt2"}, set(cols)  # patch ran on tiny-llama
    q = cols["tiny-qwen2"]
    ret = json.loads((runs / "retrieval" / "retrieval.json").read_text())
    above = sorted(f"L{i}H{j}" for i, row in enumerate(ret["scores"]) for j, s in enumerate(row) if s > 0.1)
    assert sorted(q["retrieval"]["answer"]["heads"]) == above
    assert q["retrieval"]["answer"]["n_total"] == 32 and q["geometry"]["n_layers"] == 4
    assert q["thetas"] and all(v > 0 for v in q["thetas"].values())
    assert "needle" not in q["retrieval"]  # only an answer-normalised detection was given
    assert [x["length"] for x in q["niah"]] == [256] and q["niah"][0]["recall"] == ret["baseline_recall"]
    abl = json.loads((runs / "ablate" / "ablation.json").read_text())
    assert q["masking"]["test"]["diff"] == pytest.approx(abl["target_vs_random"]["diff"])
    assert q["masking"]["n_heads"] == 4 and q["masking"]["grid"].startswith("2 prompts at 256")
    rz = json.loads((runs / "rope-zero" / "rope_zero.json").read_text())
    assert [x["dims"] for x in q["rope_zero"]["doses"]] == [len(x["target_dims"]["dims"]) for x in rz["doses"]]
    assert [x["target"] for x in q["rope_zero"]["doses"]] == [x["target"]["metric"]["mean"] for x in rz["doses"]]
    rp = json.loads((runs / "rope-profile" / "rope_profile.json").read_text())
    assert set(q["norms"]["stats"]) == set(rp["comparisons"])
    assert q["norms"]["stats"]["low_share"]["d"] == pytest.approx(rp["comparisons"]["low_share"]["cohens_d"])
    cs = json.loads((runs / "copy-suppression" / "copy_suppression.json").read_text())
    assert q["copy_suppression"]["found"] == cs["found"]
    g = cols["tiny-random-gpt2"]
    ind = json.loads((runs / "induction" / "induction.json").read_text())
    assert g["induction"]["heads"] == ind["induction_heads"] and g["thetas"] == {}  # GPT-2: no RoPE
    assert g["retrieval"] == {} and g["masking"] is None
    # the table: a row per quantity, a column per model plus the published one; "no run given" where no run of it was given
    md = (root / "atlas" / "atlas.md").read_text().strip().splitlines()
    assert len(md) == 2 + 13 and all(line.count(" | ") == len(cols) + 1 for line in md[2:]), md
    row = next(line for line in md if line.startswith("| (i) masking"))
    assert "no run given" in row and f"{abl['target_vs_random']['diff']:+.2f}" in row
    assert md[0].count("`") == 2 * len(cols)
    page = (root / "atlas" / "index.html").read_text()
    assert "interp atlas" in page and "(iv) lowest-band RoPE zeroing" in page and "fig-atlas_theta" in page
    assert json.loads((root / "atlas" / "run.json").read_text())["command"].startswith("interp atlas")
    assert "| RoPE theta |" in out  # the table on stdout


def test_atlas_of_an_atlas_and_dtype_columns(atlas_run, capsys):
    """An atlas folder among the runs is not read as a model's run; runs of one model in two dtypes are two
    columns, each labelled with its dtype."""
    root, runs = atlas_run
    two = root / "two"
    shutil.copytree(runs / "retrieval", two / "a")
    shutil.copytree(runs / "retrieval", two / "b")
    rj = json.loads((two / "b" / "run.json").read_text())
    rj["dtype"] = {"asked": "bfloat16", "used": "bfloat16", "reason": "asked for"}
    (two / "b" / "run.json").write_text(json.dumps(rj))
    code, _, err = _atlas(two, root / "two-atlas", capsys)
    assert code == 0, err
    code, _, err = _atlas(root / "two-atlas", root / "again", capsys)
    assert code == 2 and "none of the run folders" in err
    d = json.loads((root / "two-atlas" / "atlas.json").read_text())
    assert sorted(m["label"] for m in d["models"]) == ["tiny-qwen2 (bfloat16)", "tiny-qwen2 (float32)"]
    # different analyses in different dtypes: one column, the odd entry marked with its dtype
    mixed = root / "mixed"
    shutil.copytree(runs / "retrieval", mixed / "retrieval")
    shutil.copytree(runs / "ablate", mixed / "ablate")
    (mixed / "ablate" / "run.json").write_text(json.dumps(rj | {"command": "interp ablate"}))
    code, out, err = _atlas(mixed, root / "mixed-atlas", capsys)
    assert code == 0, err
    d = json.loads((root / "mixed-atlas" / "atlas.json").read_text())
    (m,) = d["models"]
    assert m["label"] == "tiny-qwen2" and m["masking"]["dtype"] == "bfloat16" and m["retrieval"]["answer"]["dtype"] == m["dtype"]
    row = next(line for line in out.splitlines() if line.startswith("| (i) masking"))
    assert "(bfloat16)" in row
    assert "(bfloat16)" not in next(line for line in out.splitlines() if line.startswith("| retrieval heads (score"))


def test_atlas_picks_the_detection_the_masking_used():
    from interp.analyses.atlas import ModelAtlas, _retrieval

    def ret(lengths, heads_row):
        return {"scores": [heads_row], "config": {"niah": {"context_lengths": lengths, "depths": [0.5], "n_seeds": 2}},
                "by_length": [{"length": x, "recall": 1.0, "n_samples": 2} for x in lengths]}

    short, long_ = ret([128], [0.5, 0.0]), ret([256, 512], [0.0, 0.5])
    col = ModelAtlas(label="m", model="m", dtype="float32")
    _retrieval(col, [(Path("r/short"), short), (Path("r/long"), long_)], [])
    assert col.retrieval["answer"]["heads"] == ["L0H0"]  # no masking run: the grid that starts shortest
    _retrieval(col, [(Path("r/short"), short), (Path("r/long"), long_)],
               [(Path("r/abl"), {"detection": {"from": "r/long/retrieval.json"}})])
    assert col.retrieval["answer"]["heads"] == ["L0H1"]  # the detection the masking drew its heads from
    assert [x["length"] for x in col.niah] == [128, 256, 512]


def test_atlas_bad_inputs(tmp_path, capsys):
    code, _, err = run_cli(["atlas", str(tmp_path / "nope")], capsys)
    assert code == 2 and "no such folder" in err
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli(["atlas", str(tmp_path / "empty")], capsys)
    assert code == 2 and "holds no run folder" in err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "run.json").write_text("{}")
    (bad / "retrieval.json").write_text('{"model": "m", "scores": "x"}')
    code, _, err = run_cli(["atlas", str(bad), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "retrieval.json" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_atlas_from_dict_refuses_other_json():
    from interp.analyses.atlas import Atlas
    from interp.errors import InvalidInputError

    for bad in ([], {"models": []}, {"format": "interp-atlas", "models": [{"label": "x"}]}):
        with pytest.raises(InvalidInputError):
            Atlas.from_dict(bad)


def test_readme_headline_table_is_the_committed_atlas():
    """The README's headline table is docs/atlas.json rendered by atlas_markdown (`make atlas` writes both)."""
    from interp.analyses.atlas import Atlas
    from interp.figures.atlas import atlas_markdown

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- atlas-table -->\n(.*?)\n<!-- /atlas-table -->", readme, re.S)
    assert m, "README.md lacks the <!-- atlas-table --> block"
    atlas = Atlas.from_dict(json.loads((ROOT / "docs" / "atlas.json").read_text(encoding="utf-8")))
    assert m.group(1).strip() == atlas_markdown(atlas.to_dict()).strip()
