"""The causal-experiments layer: tasks x conditions x metrics, one runner, one comparison.

Every analysis moved onto the layer is checked against an independent recomputation in the same
test run (the old per-analysis loop written out by hand: decode / forward each condition, then the
stats functions), and `interp ablate --prompts` against a hand computation with a plain forward
hook on a hand-built model whose heads are known (tests/planted.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import interp
from interp import stats
from interp.analyses.heads import resolve_heads
from interp.experiments import (PromptItem, PromptTask, baseline, compare, head_ablation, random_head_controls,
                                run_conditions, run_niah)
from interp.hooks.interventions import AblateHeads, ZeroRopeDims
from interp.models.loading import bundled_models
from interp.tasks.niah import NiahConfig, build_niah

from tests.helpers import run_cli
from tests.planted import BOS, CONTENT, HD, planted_hf, planted_model

ROOT = Path(__file__).resolve().parents[2]


def _no_holm(d: dict) -> dict:
    """A test dict without the Holm adjustment compare() adds over its table (checked on its own)."""
    return {k: v for k, v in d.items() if k not in ("p_holm", "p_holm_family")}


def _holm_by_hand(ps):
    """Holm's step-down adjustment written out: the i-th smallest p times (m - i), running max, capped at 1."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out, run = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        run = max(run, min(1.0, (m - rank) * ps[i]))
        out[i] = run
    return out


def _require(name):
    if name not in bundled_models():
        pytest.fail(f"bundled organism {name} is missing from data/organisms (build it: interp organisms build {name})")


# ---- the analyses equal an independent recomputation ------------------------------------------
def test_run_ablation_equals_hand_loop_on_tiny_llama(bundled):
    from interp.analyses.ablation import AblationConfig, run_ablation

    _require("tiny-llama")
    model = bundled("tiny-llama")
    niah = NiahConfig(context_lengths=(256,), depths=(0.25, 1.0), n_seeds=3)
    samples = build_niah(model.tokenizer, niah)
    heads = (interp.HeadId(2, 0), interp.HeadId(2, 1))
    cfg = AblationConfig(heads=heads, niah=niah, draws=3, random_pool="any", seed=1, n_boot=300, n_perm=300)
    res = run_ablation(model, cfg, samples=samples)

    draws = stats.matched_random_heads([(h.layer, h.head) for h in heads], 4, 4, n_draws=3, seed=1, by_layer=False)
    plan = [("baseline", ())] + [("target", heads)] + [(f"random-{i + 1}", tuple(interp.HeadId(*x) for x in d))
                                                       for i, d in enumerate(draws.draws)]
    rec = {}
    for name, hs in plan:
        ivs = (AblateHeads(hs),) if hs else ()
        rec[name] = np.array([o.recall for o in run_niah(model, samples, ivs)], dtype=float)
    kw = dict(n_boot=300, seed=1)
    for name, _ in plan:
        row = res.condition(name)
        assert row.per_sample["recall"] == [int(x) for x in rec[name]]
        assert row.estimates["recall"] == stats.mean_ci(rec[name], **kw).to_dict()
        if name != "baseline":
            assert _no_holm(row.vs_baseline["recall"]) == stats.paired_diff(rec[name], rec["baseline"], n_perm=300,
                                                                            **kw).to_dict()
    sets = np.stack([rec[f"random-{i}"] for i in (1, 2, 3)])
    pooled = sets.mean(axis=0)
    est = res.random_pooled.estimates["recall"]  # the pooled control's CI resamples the sets and the prompts
    assert est["mean"] == pytest.approx(pooled.mean())
    assert (est["lo"], est["hi"], est["method"]) == stats.sets_mean_ci(sets, **kw)[1:]
    want = stats.paired_diff(rec["target"], pooled, n_perm=300, **kw).to_dict()
    want["diff_lo"], want["diff_hi"], want["ci_method"] = stats.sets_mean_ci(rec["target"][None] - sets, **kw)[1:]
    want["p_method"] += " over samples of the pooled per-sample mean (sets held fixed)"
    assert _no_holm({k: v for k, v in res.target_vs_random.items() if k not in ("x", "y", "metric")}) == want
    assert res.condition("target").estimates["recall"]["mean"] < res.condition("baseline").estimates["recall"]["mean"]
    # Holm over every test of the table: 4 conditions and the pool vs baseline, the target vs the pool
    family = [res.condition(n).vs_baseline["recall"] for n in
              ("target", "random-1", "random-2", "random-3", "random (mean of 3 sets)")] + [res.target_vs_random]
    for t, adj in zip(family, _holm_by_hand([t["p_value"] for t in family])):
        assert t["p_holm"] == pytest.approx(adj) and t["p_holm_family"] == 6
    df = res.to_frame()
    assert set(df.condition) >= {"baseline", "target", "random-1", "random (mean of 3 sets)"}
    assert df.loc[(df.condition == "target") & (df.metric == "recall"), "mean"].item() == pytest.approx(rec["target"].mean())
    # the main test is a row of the table (and so of the CSV and the report page), with its Holm p and floor
    main = df[df.condition == "target vs random (mean of 3 sets)"]
    assert len(main) == 1 and main.role.item() == "test"
    assert main.p_value.item() == res.target_vs_random["p_value"] and main["diff"].item() == res.target_vs_random["diff"]
    assert main.p_holm.item() == res.target_vs_random["p_holm"] and main.p_floor.item() == res.target_vs_random["p_floor"]


def test_rope_zero_equals_hand_loop_on_tiny_llama(bundled):
    from interp.analyses.rope_zero import RopeZeroConfig, run_rope_zero
    from interp.models.rope import resolve_dims
    from interp.tasks.text import corpus_passages

    _require("tiny-llama")
    model = bundled("tiny-llama")
    niah = NiahConfig(context_lengths=(256,), depths=(0.5,), n_seeds=3)
    samples = build_niah(model.tokenizer, niah)
    heads = (interp.HeadId(2, 0), interp.HeadId(2, 1))
    cfg = RopeZeroConfig(heads=heads, niah=niah, doses=(0, 8), random_draws=2, head_draws=1, task_texts=3,
                         task_tokens=64, n_boot=200, n_perm=200)
    res = run_rope_zero(model, cfg, samples=samples)

    rope = model.spec.rope
    band = resolve_dims(rope, "lowest", 8, "dims").dims
    # random dims come from outside the target band (its 4 lowest pairs)
    rnd_dims = [resolve_dims(rope, "random", 8, "dims", seed=i, exclude=resolve_dims(rope, "lowest", 8).pairs).dims
                for i in range(2)]
    matched = stats.matched_random_heads([(2, 0), (2, 1)], 4, 4, n_draws=1, seed=0).draws[0]

    def recall(hs, dims):
        ivs = (ZeroRopeDims(hs, dims),) if hs else ()
        return np.array([o.recall for o in run_niah(model, samples, ivs)], dtype=float)

    base, target = recall((), ()), recall(heads, band)
    rnd = [recall(heads, d) for d in rnd_dims]
    mh = recall([interp.HeadId(*x) for x in matched], band)
    kw = dict(n_boot=200, seed=0)
    dose = res.doses[1]
    assert res.baseline["metric"] == stats.mean_ci(base, **kw).to_dict()
    assert _no_holm(dose.target["vs_baseline"]) == stats.paired_diff(target, base, n_perm=200, **kw).to_dict()
    assert [r["metric"] for r in dose.random_dims] == [stats.mean_ci(x, **kw).to_dict() for x in rnd]
    # pools: their CIs resample the member sets (of dims, of heads) and the prompts
    pooled = dose.random_pooled["metric"]
    assert pooled["mean"] == pytest.approx(np.mean(rnd)) and \
        (pooled["lo"], pooled["hi"], pooled["method"]) == stats.sets_mean_ci(np.stack(rnd), **kw)[1:]
    fixed = " over samples of the pooled per-sample mean (sets held fixed)"
    mvb = stats.paired_diff(mh, base, n_perm=200, **kw).to_dict()
    mvb["diff_lo"], mvb["diff_hi"], mvb["ci_method"] = stats.sets_mean_ci(mh[None], minus=base, **kw)[1:]
    mvb["p_method"] += fixed
    assert _no_holm(dose.matched_pooled["vs_baseline"]) == mvb
    tv = stats.paired_diff(target, np.mean(rnd, 0), n_perm=200, **kw).to_dict()
    tv["diff_lo"], tv["diff_hi"], tv["ci_method"] = stats.sets_mean_ci(target[None] - np.stack(rnd), **kw)[1:]
    tv["p_method"] += fixed
    assert {k: dose.target_vs_random_dims[k] for k in tv} == tv
    assert dose.target_vs_matched_heads["y"] == "matched-heads-8"
    assert dose.random_dims_from == "outside the target band" and dose.random_dims_overlap == [0, 0]
    assert not set(band) & {d for r in dose.random_dims for d in r["dims"]["dims"]} and res.controls_note is None

    # task control: next-token loss on corpus passages, computed here from plain logits
    texts = corpus_passages(model.tokenizer, 3, 64, f"rope-task/{niah.first_seed}")
    ids = torch.tensor(texts)

    def loss(ivs):
        with model.intervene(*ivs):
            lg = model.forward(ids).float()
        lp = torch.log_softmax(lg[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
        return (-lp.mean(1)).numpy()

    l0, l8 = loss(()), loss((ZeroRopeDims(heads, band),))
    assert res.baseline["task_loss"] == pytest.approx(l0.mean(), abs=1e-5)
    assert dose.task["loss"] == pytest.approx(l8.mean(), abs=1e-5)
    assert dose.task["vs_baseline"]["diff"] == pytest.approx((l8 - l0).mean(), abs=1e-5)
    df = res.to_frame()  # dose 0: target, task; dose 8: target, 2 pools, 2 + 1 draws, 2 tests vs the pools, task
    assert len(df) == 2 + 9
    main = df[(df.dose == 8) & (df.condition == "target vs random dims (pooled)")]
    assert main.p_value.item() == dose.target_vs_random_dims["p_value"]
    assert main["diff"].item() == dose.target_vs_random_dims["diff"]


@pytest.mark.parametrize("mode", ["phase", "content", "magnitude"])
def test_rope_zero_modes_equal_their_interventions_on_tiny_llama(bundled, mode):
    """--mode phase | content | magnitude: the target and the loss control are the band's pairs patched by
    RemapPositions(scale 0, offset d) / MeanPairs (means over the loss-control passages), recomputed here."""
    from interp.analyses.rope_zero import RopeZeroConfig, run_rope_zero
    from interp.hooks.bandpatch import MeanPairs, pair_means
    from interp.hooks.remap import RemapPositions
    from interp.models.rope import resolve_dims
    from interp.tasks.text import corpus_passages

    _require("tiny-llama")
    model = bundled("tiny-llama")
    niah = NiahConfig(context_lengths=(256,), depths=(0.5,), n_seeds=3)
    samples = build_niah(model.tokenizer, niah)
    heads = (interp.HeadId(2, 0), interp.HeadId(2, 1))
    d = 40.0 if mode == "phase" else 0.0
    cfg = RopeZeroConfig(heads=heads, niah=niah, doses=(0, 8), random_draws=1, head_draws=1, task_texts=3,
                         task_tokens=64, n_boot=200, n_perm=200, mode=mode, phase_distance=d)
    res = run_rope_zero(model, cfg, samples=samples)
    texts = corpus_passages(model.tokenizer, 3, 64, f"rope-task/{niah.first_seed}")
    pairs = resolve_dims(model.spec.rope, "lowest", 8, "dims").pairs
    iv = (RemapPositions(heads, scale=0.0, offset=d, bands=pairs) if mode == "phase"
          else MeanPairs(heads, pairs, pair_means(model, texts), mode=mode))
    ids = torch.tensor(texts)

    def loss(ivs):
        with model.intervene(*ivs):
            lg = model.forward(ids).float()
        return (-torch.log_softmax(lg[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0].mean(1)).numpy()

    target = np.array([o.recall for o in run_niah(model, samples, (iv,))], dtype=float)
    dose = res.doses[1]
    assert res.mode == mode and res.to_dict()["mode"] == mode
    assert (res.phase_distance, res.reference_tokens) == ((d, None) if mode == "phase" else (None, 3 * 64))
    assert dose.target["metric"]["mean"] == pytest.approx(target.mean())
    assert dose.task["loss"] == pytest.approx(loss((iv,)).mean(), abs=1e-5)
    assert abs(dose.task["loss"] - res.baseline["task_loss"]) > 1e-6  # the patch does something (phase: little)


def test_induction_causal_check_equals_hand_loop():
    from interp.analyses.induction import InductionConfig, detect_induction_heads
    from interp.tasks.repeated import RepeatedConfig, build_repeated_batches

    model = planted_model("llama")
    rc = RepeatedConfig(lengths=(8,), n_seqs=6, seed=5)
    cfg = InductionConfig(repeated=rc, tokens=CONTENT, bos_id=BOS, draws=2, n_boot=300, n_perm=300, copy_k=3)
    d = detect_induction_heads(model, cfg).to_dict()
    (b,) = build_repeated_batches(list(CONTENT), rc, BOS)
    s0, s1 = b.copy_span(1)
    f0, f1 = b.copy_span(0)

    def losses(heads):
        with model.intervene(*((AblateHeads(heads),) if heads else ())):
            lg = model.forward(b.ids).float()
        nll = -torch.log_softmax(lg[:, :-1], -1).gather(-1, b.ids[:, 1:, None])[..., 0]
        return nll[:, f0:f1 - 1].mean(1).numpy(), nll[:, s0:s1 - 1].mean(1).numpy()

    cz = d["causal"]
    draws = stats.matched_random_heads([(1, 1)], 3, 4, n_draws=2, seed=0).draws
    want = {"baseline": losses(()), "target": losses([interp.HeadId(1, 1)])}
    want.update({f"random-{i + 1}": losses([interp.HeadId(*x) for x in dr]) for i, dr in enumerate(draws)})
    kw = dict(n_boot=300, seed=0)
    for c in cz["conditions"]:
        e, l_ = want[c["name"]]
        np.testing.assert_allclose(c["per_sample"]["late_loss"], l_, atol=1e-5)
        np.testing.assert_allclose(c["per_sample"]["icl"], l_ - e, atol=1e-5)
    late_t, late_b = np.array(cz["conditions"][1]["per_sample"]["late_loss"]), np.array(
        cz["conditions"][0]["per_sample"]["late_loss"])
    assert _no_holm(cz["conditions"][1]["vs_baseline"]["late_loss"]) == stats.paired_diff(late_t, late_b, n_perm=300,
                                                                                         **kw).to_dict()
    pooled = np.mean([want["random-1"][1], want["random-2"][1]], axis=0)
    assert cz["target_vs_random_late_loss"]["diff"] == pytest.approx((want["target"][1] - pooled).mean(), abs=1e-5)
    assert cz["target_vs_random_late_loss"]["diff_lo"] > 1.0  # the planted induction head matters, random ones not


def test_mean_ablation_reference_means_in_one_place():
    """Weighted over batches by real tokens == one masked mean over all reference prompts."""
    from interp.hooks.capture import head_output_means
    from interp.experiments import mean_head_outputs

    model = interp.load_model("tiny-random-llama")
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(3, 100, (n,), generator=g).tolist() for n in (9, 5, 7, 3)]
    one = model.pad(seqs)
    parts = [model.pad(seqs[:2]), model.pad(seqs[2:])]
    a = mean_head_outputs(model, [(p.input_ids, p.attention_mask) for p in parts])
    b = head_output_means(model, one.input_ids, one.attention_mask)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


# ---- user prompts: a hand-built model with known heads -----------------------------------------
NAMES = [chr(ord("a") + i) for i in range(len(CONTENT))]  # token CONTENT[i] is the word NAMES[i]


@pytest.fixture(scope="module")
def planted_dir(tmp_path_factory):
    """The planted Llama (L1H1 induction head, L0H0 previous-token head) saved with a word-level tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    d = tmp_path_factory.mktemp("planted")
    planted_hf("llama").save_pretrained(d)
    vocab = {"<pad>": 0, "<bos>": BOS, **{w: t for w, t in zip(NAMES, CONTENT)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<bos>", pad_token="<pad>").save_pretrained(d)
    return d


def _induction_prompts(path: Path, n: int = 6):
    """'<bos> w1 .. wk w1 .. wj' -> answer w(j+1) (the induction target), wrong another earlier word."""
    rng = np.random.default_rng(0)
    lines = []
    for i in range(n):
        k = 5 + i % 3  # different lengths: a left-padded batch
        words = list(rng.choice(NAMES, size=k, replace=False))
        j = 2 + i % 2
        prompt = "<bos> " + " ".join(words + words[:j])
        lines.append({"prompt": prompt, "answer": " " + words[j], "wrong": " " + words[j + 1]})
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return lines


def _hand_logit_diff(hf, tok, lines, ablate=()):
    """Plain HF forward, one prompt at a time; heads ablated by a pre-hook zeroing their o_proj input slice."""
    handles = []
    for layer, head in ablate:
        def hook(mod, args, head=head):
            x = args[0].clone()
            x[..., head * HD:(head + 1) * HD] = 0.0
            return (x,)
        handles.append(hf.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(hook))
    out = []
    try:
        for ln in lines:
            ids = tok(ln["prompt"], return_tensors="pt")["input_ids"]
            with torch.no_grad():
                last = hf(input_ids=ids).logits[0, -1]
            a, w = tok.convert_tokens_to_ids([ln["answer"].strip(), ln["wrong"].strip()])
            out.append(float(last[a] - last[w]))
    finally:
        for h in handles:
            h.remove()
    return np.array(out)


def test_ablate_prompts_logit_diff_equals_hand_computation(planted_dir, tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lines = _induction_prompts(tmp_path / "p.jsonl")
    o = tmp_path / "out"
    code, out, err = run_cli(["ablate", "-m", str(planted_dir), "--prompts", str(tmp_path / "p.jsonl"),
                              "--metric", "logit_diff", "--heads", "L1H1", "--draws", "2", "--out", str(o),
                              "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["metric"] == "logit_diff" and d["scope"] == "forward" and d["task"]["n"] == len(lines)
    hf = AutoModelForCausalLM.from_pretrained(planted_dir).eval()
    tok = AutoTokenizer.from_pretrained(planted_dir)
    base = _hand_logit_diff(hf, tok, lines)
    conds = {c["name"]: c for c in d["conditions"]}
    np.testing.assert_allclose(conds["baseline"]["per_sample"]["logit_diff"], base, atol=1e-4)
    np.testing.assert_allclose(conds["target"]["per_sample"]["logit_diff"], _hand_logit_diff(hf, tok, lines, [(1, 1)]),
                               atol=1e-4)
    for name in ("random-1", "random-2"):
        hs = [tuple(map(int, re.match(r"L(\d+)H(\d+)", h).groups())) for h in conds[name]["heads"]]
        np.testing.assert_allclose(conds[name]["per_sample"]["logit_diff"], _hand_logit_diff(hf, tok, lines, hs),
                                   atol=1e-4)
    assert base.min() > 2.0  # the induction circuit predicts the answer ...
    assert conds["target"]["vs_baseline"]["logit_diff"]["diff"] < -2.0  # ... and masking L1H1 removes it
    assert d["target_vs_random"]["diff"] < -2.0
    csv = (o / "ablation.csv").read_text().splitlines()
    # baseline, target, 2 draws, pool, and the main test: target vs the pool
    assert csv[0].startswith("model,condition,role") and len(csv) == 1 + 6
    assert csv[-1].split(",")[1:3] == [f"target vs {d['target_vs_random']['y']}", "test"]
    assert (o / "metric_by_condition.html").stat().st_size > 1000
    assert [json.loads(x)["answer"] for x in (o / "prompts.jsonl").read_text().splitlines()] == \
        [ln["answer"] for ln in lines]


@pytest.mark.parametrize("line,metric,msg", [
    ({"prompt": "<bos> a b", "answer": " c"}, "logit_diff", "p.jsonl:2: metric logit_diff needs a non-empty 'wrong'"),
    ({"prompt": "<bos> a b", "answer": " c d", "wrong": " e"}, "logit_diff", "is 2 tokens"),
    ({"answer": " c"}, "logprob", 'p.jsonl:2: needs a non-empty string field "prompt"'),
    ({"prompt": "<bos> a b", "answer": " c"}, "accuracy", "--metric 'accuracy'"),
])
def test_ablate_prompts_bad_input_exits_2(planted_dir, tmp_path, capsys, line, metric, msg):
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({"prompt": "<bos> a b", "answer": " c", "wrong": " d"}) + "\n" + json.dumps(line) + "\n")
    code, _, err = run_cli(["ablate", "-m", str(planted_dir), "--prompts", str(p), "--metric", metric, "--heads",
                            "L1H1", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and msg in err and "Traceback" not in err, err
    assert not (tmp_path / "o" / "ablation.json").exists()


def test_prompt_metrics_logprob_and_loss_by_hand():
    """Multi-token answers are teacher-forced; loss without an answer is over the whole prompt."""
    model = planted_model("llama")
    p = [BOS, 2, 3, 4, 5, 2, 3]
    ans = [4, 5]
    task_lp = PromptTask([PromptItem(p, answer_ids=ans)], "logprob")
    task_loss = PromptTask([PromptItem(p)], "loss")
    lp_full = torch.log_softmax(model.forward(torch.tensor([p + ans])).float()[0], -1)
    want_lp = float(lp_full[len(p) - 1, 4] + lp_full[len(p), 5])
    assert task_lp.evaluate(model)["logprob"][0] == pytest.approx(want_lp, abs=1e-5)
    want_loss = -float(np.mean([float(lp_full[t, p[t + 1]]) for t in range(len(p) - 1)]))
    assert task_loss.evaluate(model)["loss"][0] == pytest.approx(want_loss, abs=1e-5)

    def last_logit_of_answer(logits, items):
        return logits[:, -1, 4]

    cal = PromptTask([PromptItem(p), PromptItem(p[:5])], last_logit_of_answer)
    v = cal.evaluate(model, batch_size=1)["last_logit_of_answer"]
    assert v[0] == pytest.approx(float(model.forward(torch.tensor([p]))[0, -1, 4]), abs=1e-5)


def test_notebook_level_ablation_in_a_few_lines():
    """The README's notebook recipe: the layer's pieces give run_ablation's numbers."""
    from interp.analyses.ablation import AblationConfig, run_ablation

    model = planted_model("llama")
    items = [PromptItem([BOS, 2, 3, 4, 5, 6, 2, 3], [4], [5]), PromptItem([BOS, 7, 8, 9, 10, 7], [8], [9]),
             PromptItem([BOS, 11, 12, 13, 11, 12], [13], [11])]
    task = PromptTask(items, "logit_diff")
    heads = resolve_heads("L1H1", model).heads
    ctl = random_head_controls(heads, model.spec, lambda hs: (AblateHeads(hs),), draws=2)
    out = run_conditions(model, task, [baseline(), head_ablation("target", heads, role="target"), *ctl.conditions])
    comp = compare(out, pools={"random": ctl.names}, direct=[("target", "random")], n_boot=200, n_perm=200)
    res = run_ablation(model, AblationConfig(heads=heads, draws=2, n_boot=200, n_perm=200), task=task)
    for name in ("baseline", "target", "random-1", "random-2"):
        assert comp.row(name).per_sample == res.condition(name).per_sample
    assert comp.direct[0]["diff"] == res.target_vs_random["diff"] < -2.0


def test_resolve_heads_sources(tmp_path):
    from interp.analyses.induction import InductionConfig
    from interp.tasks.repeated import RepeatedConfig

    model = planted_model("llama")
    cfg = InductionConfig(repeated=RepeatedConfig(lengths=(8,), n_seqs=4), tokens=CONTENT, bos_id=BOS, copy_k=3)
    sel = resolve_heads("induction", model, induction=cfg)
    assert [str(h) for h in sel.heads] == ["L1H1"] and sel.source.startswith("induction (detected")
    (tmp_path / "induction.json").write_text(json.dumps({"model": model.name, "induction_heads": ["L1H1", "L2H0"]}))
    sel = resolve_heads("induction", model, from_dir=str(tmp_path))
    assert [str(h) for h in sel.heads] == ["L1H1", "L2H0"] and sel.detection["n_heads"] == 2
    (tmp_path / "heads.txt").write_text("L0H0\nL2H3")
    assert [str(h) for h in resolve_heads(str(tmp_path / "heads.txt"), model).heads] == ["L0H0", "L2H3"]
    assert len(resolve_heads("random", model, n_heads=3, seed=1).heads) == 3
    long_list = ",".join(f"L{l}H{h}" for l in range(3) for h in range(4)) * 40  # too long for a file name
    with pytest.raises(interp.InvalidInputError, match="outside the model|bad head"):
        resolve_heads(long_list + ",L9H9", model)
    with pytest.raises(interp.InvalidInputError, match="no retrieval.json"):
        resolve_heads("retrieval", model, from_dir=str(tmp_path))


# ---- structure ---------------------------------------------------------------------------------
def test_one_condition_loop_and_no_training_imports():
    """No analysis module keeps its own condition -> CI -> pooled-random loop, and the input packages
    do not import the training package."""
    for f in (ROOT / "interp" / "analyses").glob("*.py"):
        src = f.read_text()
        assert "paired_diff(" not in src and "matched_random_heads(" not in src, f"{f.name} re-implements the loop"
    for pkg in ("tasks", "store", "probes"):
        for f in (ROOT / "interp" / pkg).glob("*.py"):
            imports = [ln for ln in f.read_text().splitlines() if re.match(r"\s*(from|import)\s", ln)]
            assert not [ln for ln in imports if "organisms" in ln], f"{f} imports the training package"


def test_every_cli_result_writes_a_tidy_csv(tmp_path, capsys):
    """detect induction writes induction.csv (one row per head and score) and the causal table."""
    import pandas as pd

    o = tmp_path / "ind"
    code, _, err = run_cli(["detect", "induction", "-m", "tiny-random-gpt2", "--copy-lengths", "6", "--n-seqs", "3",
                            "--heads", "L1H1", "--draws", "1", "--copy-tokens", "40", "--n-boot", "100",
                            "--out", str(o)], capsys)
    assert code == 0, err
    d = json.loads((o / "induction.json").read_text())
    df = pd.read_csv(o / "induction.csv")
    ind = df[df.quantity == "induction"].sort_values(["layer", "head"])
    np.testing.assert_allclose(ind.value.to_numpy(), np.array(d["scores"]["induction"]).ravel(), atol=1e-9)
    causal = pd.read_csv(o / "induction_causal.csv")
    t = causal[(causal.condition == "target") & (causal.metric == "late_loss")]
    assert t["mean"].item() == pytest.approx(d["causal"]["conditions"][1]["estimates"]["late_loss"]["mean"])
