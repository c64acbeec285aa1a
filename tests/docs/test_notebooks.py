"""Execute every notebook on the bundled models and check the numbers it computed.

Each notebook (written by notebooks/make_notebooks.py) ends with a cell that asserts what its analysis
should show and prints a one-line JSON summary. Here that JSON is parsed and checked again, with bounds
set from measured values (CPU, torch 2.13, the bundled organisms) and a margin: they fail when an analysis
breaks (a control that stops controlling, an effect that vanishes), not when a float moves in the 4th
digit. Every notebook must also render at least one plotly figure in its outputs.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow  # the heavy tier: every notebook executed in a kernel

NB_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb"))
# notebooks on the real pretrained models: marked `real` (make test-fast leaves them out), skipped when the
# models or the haystack text are not in interp's cache (`make models` fetches them)
REAL = {"08_real_models": (("smollm2-135m", "gemma3-270m"), ("sherlock-holmes",))}

# the retrieval heads of tiny-qwen2: one key-value group (docs/organisms.md); they are
# also its induction heads
QWEN_GROUP = {"L2H4", "L2H5", "L2H6", "L2H7"}


def _check_quickstart(s):
    # measured: continuation " Oscar.</s> The secret", L2H7 puts 1.00 of the last query's attention on the
    # code word, zeroing L3H0 moves the logits by 0.96
    assert s["continuation"].startswith(" Oscar")
    assert s["top_head"] in QWEN_GROUP and s["top_attention"] > 0.9
    assert 0.05 < s["max_logit_change"] < 50


def _check_retrieval(s):
    # measured: 5 heads (L2H4-L2H7, L1H3), recall 1.00 baseline, 0.00 masked, 1.00 with matched random heads
    assert QWEN_GROUP <= set(s["heads"]) and s["n_heads"] <= 8  # few heads (the organism is trained for that)
    assert s["recall_baseline"] >= 0.9
    assert s["recall_target"] <= 0.2
    assert s["recall_random"] >= 0.8


def _check_patching(s):
    # measured: the needle value's resid_pre restores 1.000 at layer 0 and 0.000 at layer 3; every other
    # position < 1e-4; top heads at the last position L2H4 0.169, L2H6, L2H7 (none alone restores much:
    # the retrieval group shares the job)
    assert s["needle_layer0"] > 0.95
    assert s["needle_last_layer"] < 0.05
    assert s["other_positions_max"] < 0.01
    assert set(s["top_heads"]) <= QWEN_GROUP
    assert 0.05 < s["top_head_effect"] < 0.6
    assert s["n_pairs"] == 4


def _check_attribution(s):
    # measured (v2 tiny-llama, atp-qk): head_out Pearson 0.926 (v1 build: 0.999); resid_pre checked below
    assert s["head_out"]["pearson"] > 0.9 and s["head_out"]["top_k_recall"] >= 0.8
    assert s["resid_pre"]["pearson"] > 0.9 and s["resid_pre"]["spearman"] > 0.6


def _check_rope_zero(s):
    # measured (v2 tiny-qwen2): recall by dose (0, 4, 8, 12, 16 lowest-frequency dims of 32) 1, 1, 0.65, ...;
    # (v1 build: 1, 1, 1, 0.25, 0; random dims at 16 0.58, matched heads 1.00, low_share 0.316 vs 0.175, d = 1.9)
    assert QWEN_GROUP <= set(s["heads"]) and s["dose"] == 16
    by_dose = s["recall_by_dose"]
    assert s["recall_baseline"] >= 0.9 and min(by_dose[:2]) >= 0.9  # a few low frequencies are not needed
    assert all(b <= a + 0.1 for a, b in zip(by_dose, by_dose[1:]))  # dose-response: recall does not recover
    assert s["recall_target"] <= 0.2
    assert s["recall_random_dims"] >= s["recall_target"] + 0.3  # the band matters, not just the dim count
    assert s["recall_matched_heads"] >= 0.9  # ... and in these heads, not any heads
    assert abs(s["task_loss_change"]) < 0.05  # ... and for retrieval, not for language modelling
    # low_share (|q.k| share of the lowest-frequency quarter): v2 0.219 retrieval vs 0.167 other
    assert s["stat_retrieval"] > s["stat_other"] + 0.03 and s["cohens_d"] > 0.5, (s["stat_retrieval"], s["cohens_d"])


def _check_induction(s):
    # measured: induction heads L2H7, L2H6, L2H5, L2H4; loss 7.32 first copy, 2.49 second; ablating the
    # induction heads 7.20, matched random heads 2.54; no copy-suppression head (criterion 0.5); ablating each induction head lowers p(copied token) by 0.012-0.16
    assert set(s["induction_heads"]) == QWEN_GROUP
    assert s["early_loss"] - s["late_loss"] > 3.5
    assert s["late_loss_target"] - s["late_loss"] > 3.5
    assert s["late_loss_random"] - s["late_loss"] < 0.3
    # tiny-qwen2 has no copy-suppression head: one reported here would be spurious (max OV self-suppression
    # measured 0.23, L2H3; L3H3 0.20 and L3H0 0.20 are candidates, far from the criterion 0.5)
    assert s["copy_suppression_heads"] == [] and s["max_ov_suppression"] < 0.4
    assert set(s["induction_delta_prob"]) == QWEN_GROUP and max(s["induction_delta_prob"].values()) < 0


def _check_probes(s):
    # measured (shipped v2 organisms): position R^2 by depth, tiny-gpt2 0.995 0.951 0.945 0.883 0.794; tiny-qwen2
    # (RoPE) 0.003 0.086 0.572 0.487 0.369; shuffled labels <= 0.034; word category accuracy >= majority + 0.488
    assert len(s["sites"]) == 5 and s["n_tokens"] == 128 * 64
    assert s["r2_position"][0] > 0.95 and min(s["r2_position"]) > 0.6
    assert s["r2_position_rope"][0] < 0.05 and max(s["r2_position_rope"]) > 0.4
    assert s["r2_shuffled_max"] < 0.1
    assert s["category_margin_min"] > 0.4


def _check_real_models(s):
    # measured (8 sequences x 24 tokens, 2 random sets, 32 OV tokens; NIAH 1024 tokens x 2 depths x 4 needles):
    # SmolLM2 induction heads = the full run's six + L23H7 (score 0.44); second-copy loss 1.66 -> 7.50 masked
    # vs 1.73 random; Gemma-3 L5H1, L11H2, L5H2 (= the full run's), 0.82 -> 15.22 masked vs 0.94 random.
    # SmolLM2 NIAH recall 0.875 (7 of 8); 18 retrieval heads, the best seven (L20H6 0.96 ... L23H7 0.60) = its
    # seven induction heads (7 random heads all among the 18: p = 1.7e-9)
    smol, gemma, ret = s["smollm2-135m"], s["gemma3-270m"], s["retrieval"]
    assert (smol["layers"], smol["heads"], smol["kv_heads"]) == (30, 9, 3)
    assert (gemma["layers"], gemma["heads"], gemma["kv_heads"], gemma["full_attention_layers"]) == (18, 4, 1, [5, 11, 17])
    assert {"L18H6", "L17H3", "L17H4", "L18H7", "L23H2", "L20H6"} <= set(smol["induction_heads"])
    assert len(smol["induction_heads"]) <= 8
    assert set(gemma["induction_heads"]) == {"L5H1", "L11H2", "L5H2"}
    for m in (smol, gemma):
        assert m["early_loss"] - m["late_loss"] > 8  # measured 9.7 and 10.9 nats
        assert m["late_loss_target"] - m["late_loss"] > 4.5  # measured +5.8 and +14.4
        assert m["late_loss_random"] - m["late_loss"] < 0.6  # measured +0.07 and +0.13
        assert m["target_vs_random_lo"] > 3
    assert gemma["late_loss_target"] > gemma["early_loss"]  # worse than unseen tokens (as in the full run)
    assert ret["model"] == "smollm2-135m" and ret["recall"] >= 0.6
    assert 10 <= ret["n_heads"] <= 30 and set(ret["top_heads"][:6]) <= set(smol["induction_heads"])
    assert ret["top_scores"][0] > 0.8 and ret["induction_in_top_k"] >= len(smol["induction_heads"]) - 1
    assert ret["p_chance"] < 1e-5


def _check_theta(s):
    # measured (512 tokens x 5 depths x 2 NIAH seeds): seed 2 retrieves at every theta (recall 1.00; heads L1H2 /
    # L2H0,L2H1 / L2H1,L2H2,L3H1), seed 3 at none (0.50 / 0.20 / 0.20); lowest band at 16 dims: 0.00 in every
    # retrieving build vs 0.17-0.33 with random dims
    assert set(s["heads"]["tiny-llama-theta10000-seed2"]) == {"L2H0", "L2H1"}
    assert all(s["recall"][f"tiny-llama-theta{t}-seed2"] >= 0.9 for t in (1000, 10000, 500000))
    assert s["recall"]["tiny-llama-theta10000-seed3"] < 0.5
    assert set(s["counts"]) == {"1000", "10000", "500000"} and all(1 <= c <= 4 for v in s["counts"].values() for c in v)
    assert all(s["rope_zero_target"][n] < s["rope_zero_random"][n] for n in s["rope_zero_target"])


CHECKS = {
    "01_quickstart": _check_quickstart,
    "02_retrieval_heads": _check_retrieval,
    "03_activation_patching": _check_patching,
    "04_attribution_patching": _check_attribution,
    "05_rope_zeroing": _check_rope_zero,
    "06_induction_copy_suppression": _check_induction,
    "07_probes_activation_store": _check_probes,
    "08_real_models": _check_real_models,
    "09_theta_sweep": _check_theta,
}


def _summary(cell) -> dict:
    """The JSON object on the last line the cell printed."""
    text = "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.output_type == "stream" and o.get("name") == "stdout")
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "the last cell printed nothing"
    s = json.loads(lines[-1])
    assert isinstance(s, dict), lines[-1]
    return s


def _has_figure(nb) -> bool:
    for c in nb.cells:
        for o in c.get("outputs", []) if c.cell_type == "code" else []:
            data = o.get("data", {})
            if "application/vnd.plotly.v1+json" in data or "plotly" in str(data.get("text/html", "")):
                return True
    return False


def test_every_notebook_is_checked():
    assert {p.stem for p in NOTEBOOKS} == set(CHECKS)


def test_notebooks_are_the_generators_output():
    """The .ipynb files are written by make_notebooks.py (edit it and regenerate, never the files)."""
    spec = importlib.util.spec_from_file_location("make_notebooks", NB_DIR / "make_notebooks.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert set(gen.NOTEBOOKS) == set(CHECKS)
    for name, cells in gen.NOTEBOOKS.items():
        want = json.loads(nbformat.writes(gen.notebook(cells)))
        have = json.loads((NB_DIR / f"{name}.ipynb").read_text())
        assert have == want, f"{name}.ipynb differs from make_notebooks.py: run python notebooks/make_notebooks.py"
        for src in ("".join(c["source"]) for c in want["cells"] if c["cell_type"] == "code"):
            # thin: names from the top-level interp API only (interp.X, `from interp import plotting...`)
            assert not re.search(r"^\s*(from|import)\s+interp\.", src, re.M), f"{name}: deep import in\n{src}"


def _missing(stem: str) -> list[str]:
    """What a real-model notebook needs that is not in interp's cache."""
    from interp.models.fetch import fetched_path
    from interp.tasks.texts import text_path

    models, texts = REAL[stem]
    return [m for m in models if fetched_path(m) is None] + [t for t in texts if text_path(t) is None]


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.real) if p.stem in REAL else p for p in NOTEBOOKS],
                         ids=[p.name for p in NOTEBOOKS])
def test_notebook(path, tmp_path, monkeypatch):
    if path.stem in REAL and _missing(path.stem):
        pytest.skip(f"not fetched: {', '.join(_missing(path.stem))} (make models)")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # the kernel inherits these
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", []), "the first code cell holds the parameters"
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in code for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert _has_figure(nb), "no plotly figure was rendered"
    s = _summary(code[-1])
    assert all(not isinstance(v, float) or math.isfinite(v) for v in s.values())
    CHECKS[path.stem](s)
