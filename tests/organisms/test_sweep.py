"""rope_theta sweeps (interp.organisms.sweep / theta, `interp organisms sweep`): variants and where their builds
are, a real (truncated) build through the sweep's builder, a build's measures, and the analysis on measures
whose counts are known."""

from __future__ import annotations

import json

import numpy as np
import pytest

from interp.organisms.sweep import Variant, build_missing, variant_grid, locate_build
from interp.organisms.theta import BuildMeasure, analyse_sweep
from interp.organisms.train import DATA_DIR


def test_variants_are_the_base_recipe_with_theta_and_seed_only():
    from dataclasses import asdict

    from interp.organisms.train import get_config

    v = Variant("tiny-llama", 5e5, 3)
    assert v.name == "tiny-llama-theta500000-seed3"
    diff = {k for k, x in asdict(v.config()).items() if x != asdict(get_config("tiny-llama"))[k]}
    assert diff == {"rope_theta", "seed"} and v.config().rope_theta == 5e5 and v.config().seed == 3
    assert [x.name for x in variant_grid("tiny-llama", (1e3, 1e4), (2,))] == ["tiny-llama-theta1000-seed2",
                                                                      "tiny-llama-theta10000-seed2"]
    with pytest.raises(KeyError, match="unknown organism"):
        variant_grid("tiny-nope", (1e3,), (2,))


def test_the_bundled_organism_is_its_own_variant_and_other_builds_are_checked(tmp_path):
    assert locate_build(Variant("tiny-llama", 1e4, 2), tmp_path) == DATA_DIR / "tiny-llama"
    assert locate_build(Variant("tiny-llama", 1e4, 3), tmp_path) is None  # another seed: not bundled
    assert locate_build(Variant("tiny-llama", 1e3, 2), tmp_path) is None
    # a folder of the variant's name holding another config is refused, not measured as the variant
    fake = tmp_path / "tiny-llama-theta1000-seed2"
    fake.mkdir()
    (fake / "model.safetensors").write_bytes(b"")
    (fake / "organism.json").write_text(json.dumps(json.loads((DATA_DIR / "tiny-llama" / "organism.json").read_text())))
    with pytest.raises(ValueError, match="config differs"):
        locate_build(Variant("tiny-llama", 1e3, 2), tmp_path)


@pytest.fixture(scope="module")
def smoke_build(tmp_path_factory):
    """A real build of one variant through the sweep's builder, truncated to 4 steps."""
    d = tmp_path_factory.mktemp("builds")
    logs = []
    found = build_missing([Variant("tiny-llama", 1e3, 2)], d, parallel=1, log=logs.append, steps=4)
    return d, found["tiny-llama-theta1000-seed2"], logs


@pytest.mark.slow
def test_a_build_lands_under_its_name_and_a_truncated_one_is_never_taken_for_the_recipe(smoke_build):
    d, path, logs = smoke_build
    assert path == d / "tiny-llama-theta1000-seed2" and (path / "model.safetensors").is_file()
    assert not list(d.glob("*.partial")) and any("--set rope_theta=1000" in line for line in logs)
    card = json.loads((path / "organism.json").read_text())
    assert card["config"]["rope_theta"] == 1000 and card["config"]["seed"] == 2 and card["training"]["steps"] == 4
    with pytest.raises(ValueError, match="truncated build"):
        locate_build(Variant("tiny-llama", 1e3, 2), d)


@pytest.mark.slow
def test_measures_of_a_build_that_does_not_retrieve(smoke_build, one_thread):
    from interp.organisms.theta import detection_niah, measure_build

    _, path, _ = smoke_build
    m = measure_build(path, niah=detection_niah((128,), 2), doses=(0, 4))
    assert m.rope_theta == 1000 and m.seed == 2 and m.recall < 0.9 and not m.retrieves
    n = len(m.sample_seeds)
    assert n == len(m.sample_recalled) == len(m.sample_scores) == 2 * 5 and set(m.sample_seeds) == {
        m.niah["first_seed"], m.niah["first_seed"] + 1}
    assert np.array(m.sample_scores).shape == (n, 4, 4)
    assert m.n_heads == len(m.heads) == sum(m.per_layer)
    assert (m.rope_zero == []) == (m.heads == []) and (m.qk_norm is None) == (m.heads == [])


@pytest.mark.slow
def test_the_cli_refuses_a_sweep_without_two_retrieving_thetas(smoke_build, tmp_path, capsys, one_thread):
    from interp.organisms.__main__ import main

    d, _, _ = smoke_build
    assert main(["sweep", "--builds", str(d), "--thetas", "1000,10000", "--seeds", "2", "--no-build",
                 "--out", str(tmp_path / "o")]) == 2
    assert "truncated build" in capsys.readouterr().err
    assert main(["sweep", "--builds", str(tmp_path), "--thetas", "1000,10000", "--seeds", "2", "--no-build",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "not built: tiny-llama-theta1000-seed2" in err and "theta10000" not in err
    with pytest.raises(SystemExit) as e:
        main(["sweep", "--thetas", "1000,abc"])
    assert e.value.code == 2 and "comma-separated" in capsys.readouterr().err
    assert not (tmp_path / "o" / "theta.json").exists()


def _measure(theta, seed, heads, recall=1.0, n_prompts=8):
    """A BuildMeasure whose per-prompt scores put exactly `heads` above 0.1 (all prompts recalled)."""
    s = np.full((n_prompts, 4, 4), 0.01)
    for h in heads:
        s[:, int(h[1]), int(h[3])] = 0.4
    return BuildMeasure(
        name=f"t{theta:g}-s{seed}", path="-", rope_theta=theta, seed=seed, recall=recall, retrieves=recall >= 0.9,
        threshold=0.1, heads=list(heads), n_heads_total=16, per_layer=[sum(h[1] == str(l) for h in heads)
                                                                       for l in range(4)],
        sweep=[{"threshold": 0.1, "n_heads": len(heads)}, {"threshold": 0.5, "n_heads": 0}],
        scores=s.mean(0).tolist(), rope_zero=[{"dose": 0, "target": 1.0, "target_lo": 1.0, "target_hi": 1.0,
                                               "random_dims": 1.0, "matched_heads": 1.0}], qk_norm=None,
        train_seconds=100.0, measure_seconds=10.0, sha256=None, niah={}, sample_scores=s.tolist(),
        sample_recalled=[i < recall * n_prompts for i in range(n_prompts)], sample_seeds=[i % 4 for i in range(n_prompts)])


def test_analysis_counts_per_theta_leaves_out_builds_that_do_not_retrieve_and_renders(tmp_path):
    from interp.figures.sweeps import theta_dose_response, theta_sweep

    ms = [_measure(1e3, 2, ["L2H0"]), _measure(1e3, 3, ["L2H0", "L2H1"]), _measure(1e4, 2, ["L2H0", "L2H1"]),
          _measure(1e4, 3, ["L2H0", "L1H1"]), _measure(5e5, 2, ["L2H0", "L2H1", "L3H0"]),
          _measure(5e5, 3, ["L2H1"], recall=0.5)]
    res = analyse_sweep(ms, "tiny-llama", n_boot=200)
    t = res.trend
    assert [s["counts"] for s in t["settings"]] == [[1, 2], [2, 2], [3]]
    assert res.excluded == ["t500000-s3 (recall 0.50)"] and res.compute["train_seconds"] == 600.0
    assert [s["counts"] for s in res.trend_all["settings"]] == [[1, 2], [2, 2], [3, 1]]
    assert res.recall_trend["retrieving_of_built"] == {"1000": [2, 2], "10000": [2, 2], "500000": [1, 2]}
    x, y = np.log10([b.rope_theta for b in ms]), [b.recall for b in ms]
    assert res.recall_trend["slope"] == pytest.approx(np.polyfit(x, y, 1)[0]) and res.recall_trend["p_value"] > 0.1
    assert res.sweep_by_theta["500000"] == {"0.1": 3.0, "0.5": 0.0}
    df = res.to_frame()
    assert list(df["n_heads"]) == [1, 2, 2, 2, 3, 1] and df["share"].iloc[-2] == 3 / 16
    md = res.table_md()
    assert "| 1000 | 2 | 1, 2 | 1.5 [" in md and "LLaMA-3.1-8B" in md and "4.6%" in md and "t500000-s3" in md and "500000: 3, 1" in md
    assert "| t1000-s3 | 1.00 (-) | L2H0, L2H1 (0/0/2/0) | - / 2 / - / 0 | - | - |" in md
    half = _measure(1e3, 2, ["L2H0"], recall=0.5)
    half.niah = {"context_lengths": [512, 1024]}
    assert half.recall_by_length() == {512: 1.0, 1024: 0.0}
    again = type(res).from_dict(json.loads(json.dumps(res.to_dict())))
    assert again.table_md() == md
    fig = theta_sweep(res.to_dict())
    assert sum(len(tr.x) for tr in fig.data if tr.name.startswith("training seed")) == 5
    assert "Detection:" not in md  # no grid recorded: nothing claimed
    for m in ms:
        m.niah = {"context_lengths": [512], "depths": [0.0, 0.5, 1.0], "n_seeds": 8}
    graded = analyse_sweep(ms, "tiny-llama", n_boot=200)
    assert "Detection: NIAH at 512 tokens x 3 depths x 8 seeds per build" in graded.table_md()
    assert "NIAH at 512 tokens, 8 seeds" in theta_sweep(graded.to_dict()).layout.title.text
    assert len(theta_dose_response(res).data) == 10  # two lines per build that retrieves (5 of 6)


def test_the_bundled_variant_builds_are_the_variants_their_names_say():
    """Every folder of data/organisms/theta: its card's config is the variant's (base recipe + theta + seed),
    trained for the whole curriculum, and model.safetensors is the file the card's sha256 names."""
    import re

    from interp.organisms.sweep import BUILDS_DIR
    from interp.organisms.train import sha256_file

    folders = sorted(p for p in BUILDS_DIR.iterdir() if p.is_dir())
    assert folders, f"no builds in {BUILDS_DIR}"
    for p in folders:
        m = re.fullmatch(r"(tiny-[a-z0-9]+)-theta(\d+)-seed(\d+)", p.name)
        assert m, p.name
        v = Variant(m.group(1), float(m.group(2)), int(m.group(3)))
        assert locate_build(v) == p
        card = json.loads((p / "organism.json").read_text())
        assert card["sha256"] == sha256_file(p / "model.safetensors"), p.name


@pytest.mark.slow
def test_the_sweep_command_measures_bundled_builds_and_writes_a_report(tmp_path, capsys, one_thread):
    """`interp organisms sweep --no-build` on two bundled builds (theta 1e4 and 5e5, seed 2) with a small grid:
    the result, its table and a report page; a second run reuses the cached measures."""
    from interp.organisms.__main__ import main

    out = tmp_path / "sweep"
    argv = ["sweep", "--no-build", "--thetas", "10000,500000", "--seeds", "2", "--lengths", "256", "--n-seeds", "2",
            "--n-boot", "100", "--out", str(out)]
    assert main(argv) == 0
    first = capsys.readouterr().out
    res = json.loads((out / "theta.json").read_text())
    names = [b["name"] for b in res["builds"]]
    assert names == ["tiny-llama-theta10000-seed2", "tiny-llama-theta500000-seed2"]
    bundled = res["builds"][0]
    assert bundled["path"].endswith("data/organisms/tiny-llama") and set(bundled["heads"]) == {"L2H0", "L2H1"}
    assert [s["setting"] for s in res["trend"]["settings"]] == [10000, 500000]
    assert "| 10000 | 1 |" in (out / "table.md").read_text() and "measuring" in first
    for f in ("theta.csv", "run.json", "index.html", "theta_sweep.html", "theta_dose_response.html"):
        assert (out / f).is_file(), f
    c = json.loads((out / "run.json").read_text())["compute"]  # measuring two builds takes time
    assert c["wall_seconds"] > 1 and c["cpu_seconds"] > 1 and c["torch_threads"] == 1
    assert main(argv) == 0
    assert "measured already" in capsys.readouterr().out
    assert json.loads((out / "theta.json").read_text())["trend"] == res["trend"]
