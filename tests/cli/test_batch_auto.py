"""--batch-size auto: the memory planner picks the largest batch that fits the budget a run is given
(--max-memory, x 0.9), refuses before any work when batch 1 does not fit, checks a given batch size
against the budget; and the picked batch's measured peak stays under the budget."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from interp.models import memory
from interp.runtime import devices

from tests.helpers import run_cli

NIAH = ["--lengths", "1024", "--depths", "0,0.25,0.5,0.75,1", "--n-seeds", "8"]


def _largest_fitting(config, budget, length, cap, **kw):
    """Independent of pick_batch_size's formula: count up until the planned peak passes the budget."""
    b = 0
    while b < cap and memory.estimate(config, length, b + 1, "float32", **kw).peak <= budget:
        b += 1
    return b


@pytest.mark.slow
@pytest.mark.parametrize("mib", [40, 80, 160])
def test_auto_picks_the_largest_batch_within_the_budget(bundled, mib, tmp_path, capsys):

    code, _, err = run_cli(["detect", "retrieval", *NIAH, "--batch-size", "auto", "--max-memory", f"cpu={mib}MiB",
                            "--out", str(tmp_path / "o")], capsys)
    assert code == 0, err
    got = json.loads((tmp_path / "o" / "retrieval.json").read_text())["config"]["batch_size"]
    config = bundled("tiny-qwen2").hf.config
    want = _largest_fitting(config, int(mib * 2 ** 20 * devices.SAFETY), 1024, 40, analysis="detect", new_tokens=16)
    assert got == want and 1 < got < 40  # within the budget and not capped: the budget decided
    assert f"batch size auto: {got}" in err


def test_auto_is_capped_by_the_prompts_of_a_length(tmp_path, capsys):
    code, _, err = run_cli(["ablate", "--heads", "L2H4", "--draws", "1", "--lengths", "256", "--depths", "0,1",
                            "--n-seeds", "2", "--batch-size", "auto", "--max-memory", "cpu=4GiB",
                            "--out", str(tmp_path / "o")], capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "o" / "ablation.json").read_text())["config"]["batch_size"] == 4


def test_refusals_come_before_any_work(tmp_path, capsys):
    code, _, err = run_cli(["detect", "retrieval", *NIAH, "--batch-size", "auto", "--max-memory", "cpu=2MiB",
                            "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "at batch size 1" in err and "retrieval scores" not in err
    code, _, err = run_cli(["detect", "retrieval", *NIAH, "--batch-size", "40", "--max-memory", "cpu=80MiB",
                            "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "--batch-size 40 needs" in err
    fits = int(err.split("use --batch-size ")[1].split()[0])
    assert fits == _largest_fitting("tiny-qwen2", int(80 * 2 ** 20 * devices.SAFETY), 1024, 10 ** 6,
                                    analysis="detect", new_tokens=16)
    code, _, err = run_cli(["ablate", "--heads", "L2H4", *NIAH, "--batch-size", "auto", "--device-map", "auto",
                            "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "with --device-map" in err
    assert not (tmp_path / "o").exists()


CHILD = textwrap.dedent("""
    import json, sys, gc
    from pathlib import Path
    import torch
    torch.set_num_threads(1)
    import interp
    from interp import stats
    from interp.analyses.retrieval import RetrievalConfig, detect_retrieval_heads
    from interp.models.batching import batch_for
    from interp.runtime.provenance import provenance
    from interp.tasks.niah import NiahConfig, build_niah

    def status(field):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

    mib = int(sys.argv[1])
    m = interp.load_model("tiny-qwen2")
    niah = NiahConfig(context_lengths=(1024,), depths=(0, 0.25, 0.5, 0.75, 1), n_seeds=8)
    samples = build_niah(m.tokenizer, niah)
    b = batch_for(m, "auto", "detect", [1024], n_rows=40, max_memory={"cpu": f"{mib}MiB"}, new_tokens=16)
    with torch.no_grad():
        m.forward(torch.tensor([samples[0].input_ids[:16]]))  # lazy imports and kernels before the measurement
    provenance(m)
    import warnings
    with warnings.catch_warnings():  # the lazily imported modules a detection uses, loaded before the measurement
        warnings.simplefilter("ignore")
        detect_retrieval_heads(m, RetrievalConfig(niah=NiahConfig(context_lengths=(64,), depths=(0.5,), n_seeds=1),
                                                  batch_size=1))
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    before = status("VmRSS")
    detect_retrieval_heads(m, RetrievalConfig(niah=niah, batch_size=b), samples=samples)
    weights = sum(p.numel() * p.element_size() for p in m.hf.parameters())
    print(json.dumps({"batch": b, "rise": status("VmHWM") - before, "weights": weights}))
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc to measure peak RSS")
@pytest.mark.slow
@pytest.mark.parametrize("mib", [40, 160])
def test_measured_peak_of_the_auto_batch_stays_under_the_budget(mib):
    """A fresh process: detection over 40 prompts of 1024 tokens at the auto batch; the peak RSS rise over the
    resident weights (glibc malloc pinned to mmap, as in bench/memory_plan.py) plus the weights <= the budget
    (measured: 35 of 40 MiB at batch 2, 124 of 160 MiB at batch 9)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    p = subprocess.run([sys.executable, "-c", CHILD, str(mib)], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["batch"] > 1
    assert r["rise"] + r["weights"] <= mib * 2 ** 20, r
