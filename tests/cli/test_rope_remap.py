"""`interp rope-remap`: scale 1 is the baseline exactly (the acceptance check of issue #47); a large scale on
tiny-llama's middle layers breaks retrieval; a model without RoPE is refused before any work."""

import json

from tests.helpers import run_cli

NIAH = ["--lengths", "256", "--depths", "0.25,0.75", "--n-seeds", "2", "--draws", "1"]
MIDDLE = "L1H0,L1H1,L1H2,L1H3,L2H0,L2H1,L2H2,L2H3"


def _run(args, capsys, tmp_path):
    code, out, err = run_cli(["rope-remap", "-m", "tiny-llama", *args, *NIAH, "--json", "--out", str(tmp_path / "o")],
                             capsys)
    assert code == 0, err
    d = json.loads(out)
    return d, {c["name"]: c["per_sample"][d["metric"]] for c in d["conditions"]}


def test_scale_one_gives_the_baseline_exactly(capsys, tmp_path):
    d, per = _run(["--heads", "L2H0,L2H1", "--scale", "1"], capsys, tmp_path)
    assert d["mode"] == "remap" and d["intervention"]["scale"] == 1.0
    assert per["target"] == per["baseline"] and per["random-1"] == per["baseline"]


def test_a_large_scale_breaks_retrieval(capsys, tmp_path):
    d, per = _run(["--heads", MIDDLE, "--scale", "8"], capsys, tmp_path)
    assert sum(per["baseline"]) == len(per["baseline"]) and sum(per["target"]) == 0
    assert d["intervention"]["type"] == "RemapPositions"


def test_refusals(capsys, tmp_path):
    code, _, err = run_cli(["rope-remap", "-m", "tiny-gpt2", "--heads", "L0H0", "--scale", "2", *NIAH, "--out",
                            str(tmp_path / "o")], capsys)
    assert code != 0 and "rotary" in err
    code, _, err = run_cli(["rope-remap", "--heads", "L0H0", "--bands", "middle:3", "--out", str(tmp_path / "p")],
                           capsys)
    assert code != 0 and "lowest:N" in err
