"""The CLI's progress: plain lines when stderr is not a terminal, a rich bar when it is, and bars that end at their
total: the total is the work the analysis planned (distinct random sets, heads found), not a guess that
overestimates it (`ablation conditions 60/100`)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from interp.cli.output import _LazyProgress
from interp.runtime.progress import plan
from tests.helpers import run_cli


def _run(con, steps=3, total=3):
    p = _LazyProgress(total, "ablation conditions", con=con)
    with p:
        for _ in range(steps):
            p(1)
    return p


def test_not_a_terminal_prints_plain_lines_at_interval_zero(monkeypatch):
    monkeypatch.setenv("INTERP_PROGRESS_EVERY", "0")
    buf = io.StringIO()
    p = _run(Console(file=buf, force_terminal=False, width=200))
    assert p.bar is None and p.lines is not None
    lines = buf.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == [f"ablation conditions {i}/3" for i in (1, 2, 3)]
    assert all(line.endswith(" s)") for line in lines)


def test_not_a_terminal_long_interval_prints_the_end_line_only(monkeypatch):
    monkeypatch.setenv("INTERP_PROGRESS_EVERY", "3600")
    buf = io.StringIO()
    _run(Console(file=buf, force_terminal=False, width=200))
    assert [line.split(" (")[0] for line in buf.getvalue().splitlines()] == ["ablation conditions 3/3"]


def test_a_terminal_gets_the_rich_bar(monkeypatch):
    monkeypatch.setenv("INTERP_PROGRESS_EVERY", "0")
    buf = io.StringIO()
    p = _run(Console(file=buf, force_terminal=True, width=100))
    assert p.bar is not None and p.lines is None
    assert "━" in buf.getvalue() and "3/3" in buf.getvalue()


def test_the_plan_sets_the_total_and_says_why(monkeypatch):
    monkeypatch.setenv("INTERP_PROGRESS_EVERY", "3600")
    buf = io.StringIO()
    p = _LazyProgress(None, "induction", con=Console(file=buf, force_terminal=False, width=200))
    with p:
        plan(p, 5)
        p(2)
        plan(p, 2, "no causal check")
    assert (p.completed, p.total, p.why) == (2, 2, "no causal check")
    assert buf.getvalue().startswith("induction 2/2 (0 s; no causal check)")


NIAH = ["--lengths", "256", "--depths", "0.5", "--n-seeds", "2"]
# runs whose planned work used to be overestimated: tiny-qwen2's retrieval heads leave 1 distinct layer-matched
# random set of 3 (6/10), keeping all 32 heads draws no random sets, a threshold no head reaches skips the causal
# check (2/7); the single-head sweep advanced by fractions
RUNS = {
    "ablate": ["ablate", "-m", "tiny-qwen2", "--heads", "retrieval", *NIAH],
    "ablate-curve": ["ablate", "-m", "tiny-qwen2", "--heads", "retrieval", "--curve", "keep", "--ks", "4,32", *NIAH,
                     "--draws", "1"],
    "rope-zero": ["rope-zero", "-m", "tiny-qwen2", "--heads", "retrieval", *NIAH, "--dims", "0,8"],
    "induction": ["detect", "induction", "-m", "tiny-random-gpt2", "--copy-lengths", "6,8", "--n-seqs", "3", "--heads",
                  "L1H1", "--draws", "3", "--copy-tokens", "40", "--n-boot", "100", "--sweep"],
    "induction-no-heads": ["detect", "induction", "-m", "tiny-llama", "--n-seqs", "3", "--threshold", "0.99",
                           "--copy-tokens", "40"],
}


@pytest.mark.parametrize("name", RUNS)
def test_every_bar_ends_at_its_total(name, tmp_path, capsys, monkeypatch):
    import interp.cli.output as output

    bars = []

    class Recorded(_LazyProgress):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            bars.append(self)

    monkeypatch.setattr(output, "_LazyProgress", Recorded)
    code, _, err = run_cli(RUNS[name] + ["--out", str(tmp_path / "run")], capsys)
    assert code == 0, err
    shown = [b for b in bars if b.completed]
    assert shown, "no progress was reported"
    assert [(b.description, b.completed) for b in shown] == [(b.description, b.total) for b in shown]
    if name == "induction-no-heads":
        assert shown[-1].why == "no head's induction score is above 0.99: no causal check"
