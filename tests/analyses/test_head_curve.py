"""Head-count curves (interp.analyses.head_curve, `interp ablate --curve`): a curve point equals masking its heads
directly, keep-all is the baseline and keep-none masks everything, random sets are distinct and drawn as said,
masking tiny-llama's two retrieval heads breaks NIAH where random pairs do not, and bad curves fail before a
model loads."""

import numpy as np
import pytest

from interp.analyses.head_curve import HeadCurveConfig, random_sets, rank_heads, run_head_curve
from interp.errors import InvalidInputError
from interp.experiments.tasks import run_niah
from interp.hooks.interventions import AblateHeads
from interp.sites import HeadId
from interp.tasks.niah import NiahConfig, build_niah

from tests.helpers import run_cli

NIAH = NiahConfig(context_lengths=(256,), depths=(0.0, 0.25, 0.5, 0.75, 1.0), n_seeds=4)


def test_rank_heads_orders_by_score_then_layer_then_head():
    assert rank_heads([[0.1, 0.5], [0.5, 0.0]]) == (HeadId(0, 1), HeadId(1, 0), HeadId(0, 0), HeadId(1, 1))
    with pytest.raises(InvalidInputError, match="no head scores"):
        rank_heads([])


def test_random_sets_are_distinct_from_every_head_and_layer_matched(bundled):
    spec = bundled("tiny-llama").spec
    top = (HeadId(2, 0), HeadId(2, 1), HeadId(0, 3))
    anyl = random_sets(top, spec, 20, seed=1, pool="any")
    assert len(anyl) == 20 and len(set(anyl)) == 20 and tuple(sorted(top)) not in anyl
    assert all(len(s) == 3 and len(set(s)) == 3 for s in anyl)
    assert any(h in top for s in anyl for h in s)  # drawn from every head, the top ones included
    assert len({h.layer for s in anyl for h in s}) == spec.n_layers
    lay = random_sets(top, spec, 5, seed=1, pool="layer")
    assert all(sorted(h.layer for h in s) == [0, 2, 2] for s in lay) and len(set(lay)) == 5
    every = tuple(HeadId(layer, h) for layer in range(spec.n_layers) for h in range(spec.n_heads))
    assert random_sets(every, spec, 3, seed=0) == []  # k = every head: no other set exists
    assert random_sets(top, spec, 4, seed=7) == random_sets(top, spec, 4, seed=7)


def test_a_keep_point_equals_masking_every_other_head_directly(bundled, one_thread):
    model = bundled("tiny-llama")
    samples = build_niah(model.tokenizer, NIAH)
    ranked = rank_heads(np.arange(16, dtype=float).reshape(4, 4)[::-1].tolist())  # L0H3 L0H2 ... L3H0 by score
    res = run_head_curve(model, HeadCurveConfig(ranked=ranked, ks=(0, 5, 16), kind="keep", niah=NIAH, draws=2,
                                                n_boot=200, n_perm=200), samples=samples)
    kept = set(ranked[:5])
    others = [HeadId(layer, h) for layer in range(4) for h in range(4) if HeadId(layer, h) not in kept]
    direct = run_niah(model, samples, (AblateHeads(others),))
    p5 = next(p for p in res.points if p.k == 5)
    assert p5.heads == [str(h) for h in ranked[:5]] and len(p5.random_sets) == 2
    assert p5.target["metric"]["mean"] == pytest.approx(np.mean([o.recall for o in direct]))
    base = np.mean([o.recall for o in run_niah(model, samples, ())])
    assert res.baseline["mean"] == pytest.approx(base) and base >= 0.9
    p16 = next(p for p in res.points if p.k == 16)  # keep every head: nothing masked
    assert p16.target["metric"]["mean"] == pytest.approx(base) and p16.random_pooled is None
    p0 = next(p for p in res.points if p.k == 0)  # keep none: every head masked, recall gone
    assert p0.target["metric"]["mean"] == 0.0
    assert res.reach["target_k"] == 16 and res.reach["goal"] == pytest.approx(0.95 * base)


def test_masking_the_two_retrieval_heads_breaks_niah_where_random_pairs_do_not(bundled, one_thread):
    model = bundled("tiny-llama")
    ranked = (HeadId(2, 1), HeadId(2, 0)) + tuple(HeadId(layer, h) for layer in (0, 1, 3) for h in range(4))
    res = run_head_curve(model, HeadCurveConfig(ranked=ranked, ks=(2,), kind="mask", niah=NIAH, draws=5,
                                                random_pool="any", n_boot=1000, n_perm=1000))
    p = res.points[0]
    assert p.target["metric"]["mean"] <= 0.1 and p.random_pooled["metric"]["mean"] >= 0.3  # measured: 0.00 vs 0.49
    assert p.target_vs_random["diff_hi"] < 0 and res.reach["separated_k"] == 2
    # the main test is a row of the table (CSV, report page), with the floor of its design and its Holm p
    df = res.to_frame()
    main = df[df.condition == "target vs random (pooled)"]
    assert len(main) == 1 and main.p_value.item() == p.target_vs_random["p_value"]
    assert main.p_floor.item() == p.target_vs_random["p_floor"] and main.p_holm.item() == p.target_vs_random["p_holm"]
    assert main["diff"].item() == p.target_vs_random["diff"]


def test_bad_curves_are_refused(bundled):
    model = bundled("tiny-llama")
    ranked = (HeadId(2, 1), HeadId(2, 0))
    with pytest.raises(InvalidInputError, match="out of range"):
        run_head_curve(model, HeadCurveConfig(ranked=ranked, ks=(3,), kind="mask", niah=NIAH))
    with pytest.raises(InvalidInputError, match="needs that many ranked heads"):
        run_head_curve(model, HeadCurveConfig(ranked=ranked, ks=(4,), kind="keep", niah=NIAH))
    with pytest.raises(InvalidInputError, match="curve kind"):
        HeadCurveConfig(ranked=ranked, kind="drop")
    with pytest.raises(InvalidInputError, match="distinct head counts"):
        HeadCurveConfig(ranked=ranked, ks=(1, 1))


@pytest.mark.parametrize("args,msg", [
    (["--curve", "drop"], "--curve 'drop': use keep"),
    (["--curve", "keep", "--heads", "L0H0"], "use --heads retrieval"),
    (["--curve", "keep", "--ks", "1,x"], "--ks '1,x': give head counts"),
])
def test_cli_refuses_a_bad_curve_before_loading(tmp_path, capsys, args, msg):
    code, out, err = run_cli(["ablate", "--model", "no/such-model", *args, "--out", str(tmp_path / "c")], capsys)
    assert code == 2 and msg in err and not (tmp_path / "c").exists()


def test_cli_curve_writes_its_result_figure_and_page(tmp_path, capsys, one_thread):
    o = tmp_path / "curve"
    code, out, err = run_cli(["ablate", "--model", "tiny-llama", "--curve", "mask", "--ks", "1,2", "--lengths", "256",
                              "--depths", "0.25,0.75", "--n-seeds", "2", "--draws", "2", "--out", str(o)], capsys)
    assert code == 0, err  # the table printed (rich's console: not captured here)
    import json

    d = json.loads((o / "head_curve.json").read_text())
    assert d["kind"] == "mask" and [p["k"] for p in d["points"]] == [1, 2] and d["ranked"][:2] == ["L2H0", "L2H1"]
    assert (o / "head_curve.html").is_file() and "head_curve.html" in (o / "index.html").read_text()
