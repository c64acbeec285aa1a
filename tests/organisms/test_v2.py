"""Issue 17 ("Organisms v2") measurements that need no retraining: random-id copying, IOI (prompts,
eval, `interp patch --task ioi`) and the strength of the layer-matched random controls.

Each metric is checked against an independent recomputation; the `test_shipped_*` tests assert the levels
of the SHIPPED (v2) organisms: a rebuild must update them (and data/organisms/README.md)."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil

import numpy as np
import pytest
import torch

from interp import corpus
from interp.corpus import ioi
from interp.organisms.evaluate import ioi_eval, load_organism, random_id_eval
from interp.organisms.train import DATA_DIR

from tests.helpers import run_cli

ORGANISMS = ("tiny-qwen2", "tiny-llama", "tiny-gpt2")


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py: torch on one thread here


@pytest.fixture(scope="module")
def organisms():
    return {name: load_organism(DATA_DIR / name) for name in ORGANISMS}


@pytest.fixture(scope="module")
def random_id(organisms):
    return {name: random_id_eval(m, tok) for name, (m, tok) in organisms.items()}


def _one(tok, name):
    ids = tok.encode(" " + name, add_special_tokens=False).ids
    assert len(ids) == 1, name
    return ids[0]


# --- random-id copying ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ORGANISMS)
def test_random_id_metric_equals_a_teacher_forced_recomputation(name, organisms, random_id):
    from transformers import AutoModelForCausalLM

    _, tok = organisms[name]
    got = random_id[name]
    V = tok.get_vocab_size()
    L, n = 40, 16
    # the sequences: 16 x 40 ids uniform in 10..V-11, from the eval's seeded generator
    g = torch.Generator().manual_seed(corpus.heldout_seed(960_000))
    r = 10 + torch.randint(V - 20, (n, L), generator=g)
    x = torch.cat([torch.zeros(n, 1, dtype=torch.long), r, r], 1)  # <s> = 0, then R R
    assert tok.token_to_id("<s>") == 0
    hf = AutoModelForCausalLM.from_pretrained(str(DATA_DIR / name), attn_implementation="eager").eval()
    with torch.no_grad():
        logp = hf(input_ids=x).logits.log_softmax(-1)
    first, second = [], []
    for i in range(n):
        # the token at position p is predicted by the logits at p - 1; skip each copy's first token
        first.append(np.mean([-logp[i, 1 + t - 1, r[i, t]].item() for t in range(1, L)]))
        second.append(np.mean([-logp[i, 1 + L + t - 1, r[i, t]].item() for t in range(1, L)]))
    assert got["first_copy_loss"] == pytest.approx(np.mean(first), abs=1e-4)
    assert got["second_copy_loss"] == pytest.approx(np.mean(second), abs=1e-4)
    assert got["gap_nats"] == pytest.approx(np.mean(first) - np.mean(second), abs=1e-4)
    assert got["uniform_loss"] == pytest.approx(math.log(V - 20))
    assert got["first_minus_uniform"] == pytest.approx(got["first_copy_loss"] - math.log(V - 20))
    assert got["id_range"] == [10, V - 11] and (got["n_seqs"], got["seq_len"]) == (16, 40)


def test_shipped_random_id_levels(random_id):
    """The shipped v2 organisms (recipe v2: random-id repeat documents in the mix) meet both random-id targets
    of the v2 recipe: second copy >= 3 nats below the first, first copy within 1.5 nats of uniform (measured: gaps
    6.74 / 6.39 / 6.72 for tiny-qwen2 / tiny-llama / tiny-gpt2, first copy +0.04-0.07 above uniform; the v1
    builds had gaps 0.46 / 1.17 / 1.12 and first copies ~5 nats above uniform). Without `<s>`: first copy 13.19 /
    9.70 / 13.70, gaps 10.88 / 9.32 / 13.30."""
    r = random_id
    for name in ORGANISMS:
        assert r[name]["gap_nats"] >= 6, name
        assert abs(r[name]["first_minus_uniform"]) < 0.5, name
        # without <s> (never seen in training) the first copy is far off uniform, and copying still works
        assert r[name]["without_bos"]["first_copy_loss"] > r[name]["first_copy_loss"] + 2, name
        assert r[name]["without_bos"]["gap_nats"] > 9, name


# --- IOI prompts ---------------------------------------------------------------------------------

def test_ioi_split_is_fixed_disjoint_and_covers_the_corpus_names():
    sp = ioi.ioi_split()
    assert not set(sp.train_names) & set(sp.heldout_names)
    assert set(sp.train_names) | set(sp.heldout_names) == set(corpus.NAMES)
    assert not set(sp.train_templates) & set(sp.heldout_templates)
    assert set(sp.train_templates) | set(sp.heldout_templates) == set(range(len(ioi.TEMPLATES)))
    assert len(ioi.TEMPLATES) >= 6 and len(sp.heldout_templates) == 3 and len(sp.heldout_names) == 12
    # pinned: a future build trains on the train split, so the split must never move silently
    assert sp.heldout_names == ("Emma", "George", "Grace", "Hannah", "Helen", "Irene", "Ivan", "Kevin", "Quinn",
                                "Uma", "Victor", "Wendy")
    assert sp.heldout_templates == (2, 6, 7)


def test_ioi_names_are_single_tokens_of_the_organism_tokenizer(organisms):
    _, tok = organisms["tiny-qwen2"]
    for name in corpus.NAMES:
        assert tok.encode(" " + name, add_special_tokens=False).tokens == ["Ġ" + name]


def _words(text):
    return re.findall(r"[A-Za-z]+", text)


@pytest.mark.parametrize("split", ["heldout", "train"])
def test_ioi_prompts_orders_answers_and_splits(split, organisms):
    _, tok = organisms["tiny-qwen2"]
    sp = ioi.ioi_split()
    items = ioi.ioi_prompts(60, seed=3, split=split)
    assert items == ioi.ioi_prompts(60, seed=3, split=split)
    assert items != ioi.ioi_prompts(60, seed=4, split=split)
    assert {p.order for p in items} == {"ABBA", "BABA"}
    assert {p.template for p in items} == set(sp.templates(split))
    for p in items:
        text, io, s = p  # unpacks as (prompt, indirect object, subject)
        assert {io, s} <= set(sp.names(split)) and io != s
        names = [w for w in _words(text) if w in corpus.NAMES]
        # the first clause names both, the subject comes back as the giver, nobody else is named
        assert names == ([io, s, s] if p.order == "ABBA" else [s, io, s]), text
        assert text.startswith(" ") and text.endswith(" to")
        ids = tok.encode(text).ids
        assert ids.count(_one(tok, io)) == 1 and ids.count(_one(tok, s)) == 2
        assert p.answer == " " + io and p.wrong == " " + s


def test_ioi_training_documents_use_the_train_split_only(organisms):
    from interp.organisms.tokenizer import token_counter

    _, tok = organisms["tiny-qwen2"]
    count = token_counter(tok)
    sp = ioi.ioi_split()
    train_re = [re.compile(re.escape(ioi.TEMPLATES[t]).replace(r"\{A\}", "(?P<A>\\w+)").replace(
        r"\{B\}", "(?P<B>\\w+)").replace(r"\{S\}", "(?P<S>\\w+)")
        .replace(r"\{obj\}", ".+").replace(r"\{place\}", ".+").replace(r"\{P\}", ".+").replace(r"\{T\}", ".+") + "$")
        for t in sp.train_templates]
    for i in range(100):
        pieces = ioi.ioi_doc(f"test-ioi/{i}", 64, count)
        (prompt, tag0), (answer, tag1), (dot, _) = pieces
        assert (tag0, tag1, dot) == ("text", "answer", ".")
        assert not set(_words(prompt + answer)) & set(sp.heldout_names)
        m = next(filter(None, (r.match(prompt) for r in train_re)), None)
        assert m, prompt
        io = m["A"] if m["S"] == m["B"] else m["B"]
        assert answer == " " + io and m["S"] in (m["A"], m["B"])


# --- IOI eval ------------------------------------------------------------------------------------

def test_ioi_eval_equals_an_independent_recomputation(bundled, organisms):

    m, tok = organisms["tiny-llama"]
    got = ioi_eval(m, tok, n=12, seed=5)
    items = ioi.ioi_prompts(12, seed=5, split="heldout")
    model = bundled("tiny-llama")
    batch = model.tokenize([p.prompt for p in items])  # left-padded, BOS added: another forward path
    logits = model.forward(batch)[:, -1].float()
    ht = model.tokenizer
    diffs = [(logits[i, ht(p.answer, add_special_tokens=False)["input_ids"][0]]
              - logits[i, ht(p.wrong, add_special_tokens=False)["input_ids"][0]]).item() for i, p in enumerate(items)]
    assert got["logit_diff"]["n"] == got["n_prompts"] == 12
    assert got["logit_diff"]["mean"] == pytest.approx(np.mean(diffs), abs=1e-4)
    assert got["logit_diff"]["std"] == pytest.approx(np.std(diffs, ddof=1), abs=1e-4)
    assert got["accuracy"] == np.mean([d > 0 for d in diffs])
    abba = [d for d, p in zip(diffs, items) if p.order == "ABBA"]
    assert got["by_order"]["ABBA"]["logit_diff"]["mean"] == pytest.approx(np.mean(abba), abs=1e-4)
    assert got["names"] == list(ioi.ioi_split().heldout_names)


def test_shipped_ioi_levels(organisms):
    """IOI on the shipped v2 organisms (the v2 target: held-out logit diff >= 2 and accuracy >= 0.9 on
    one organism). tiny-qwen2 meets it (composed frames, half of them with random vocabulary words for
    people, IOI weight 2.0, lasso for the first 800 steps only): on held-out names x held-out templates it
    beats the "second name of the first clause" heuristic on both orders (96 prompts: logit diff +3.88,
    accuracy 0.94; ABBA 0.92, BABA 0.96; 192 prompts in the card: +4.25 / 0.93). tiny-gpt2 (composed frames,
    train names only, the lasso for its first 1300 steps) is above chance but leans on the heuristic: 96
    prompts +1.86 / 0.69, BABA 0.875, ABBA 0.50 (the build without the lasso had +2.45 / 0.65, ABBA 0.34).
    tiny-llama is not trained on IOI (with IOI documents three more heads joined its copy circuit): chance on
    both splits, with almost no preference between the two names (|logit diff| < 0.1; 192 prompts in the card:
    -0.007 / 0.505)."""
    got = {name: ioi_eval(m, tok, n=96) for name, (m, tok) in organisms.items()}
    g, ll, q = got["tiny-gpt2"], got["tiny-llama"], got["tiny-qwen2"]
    assert q["logit_diff"]["mean"] >= 3 and q["accuracy"] >= 0.9, q["logit_diff"]
    assert min(q["by_order"][o]["accuracy"] for o in ("ABBA", "BABA")) >= 0.85  # not a positional heuristic
    assert q["train_split"]["accuracy"] >= 0.9 and q["train_split"]["logit_diff"]["mean"] >= 8
    assert g["logit_diff"]["mean"] >= 1 and 0.6 <= g["accuracy"] < 0.9, g["logit_diff"]
    assert g["by_order"]["BABA"]["accuracy"] >= 0.8 and g["by_order"]["ABBA"]["accuracy"] <= 0.6
    for split in (ll, ll["train_split"]):
        assert 0.35 <= split["accuracy"] <= 0.65 and abs(split["logit_diff"]["mean"]) < 0.3, split["logit_diff"]


# --- interp patch --task ioi ---------------------------------------------------------------------

def test_patch_task_ioi_writes_pairs_with_the_io_tokens(tmp_path, capsys, organisms):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "p"
    code, _, err = run_cli(["patch", "-m", "tiny-qwen2", "--task", "ioi", "--n-pairs", "6", "--seed", "2",
                            "--site", "resid_pre", "--positions=-1", "--out", str(out)], capsys)
    assert code == 0, err
    res = json.loads((out / "patching.json").read_text())
    assert res["n_pairs"] == 6 and res["sources"] == [f"ioi:2:{i}" for i in range(6)]
    pairs = [json.loads(x) for x in (out / "pairs.jsonl").read_text().splitlines()]
    _, tok = organisms["tiny-qwen2"]
    sp = ioi.ioi_split()
    items = ioi.ioi_prompts(6, seed=2, split="heldout")
    hf = AutoModelForCausalLM.from_pretrained(str(DATA_DIR / "tiny-qwen2"), attn_implementation="eager").eval()
    for p, item, donor, base in zip(pairs, items, res["donor_value"], res["base_value"]):
        info = p["info"]
        assert (info["io"], info["subject"], info["order"], info["template"]) == (
            item.io, item.subject, item.order, item.template)
        assert p["clean_ids"] == tok.encode(item.prompt).ids
        c_io, c_s = info["corrupt_io"], info["corrupt_subject"]
        assert {c_io, c_s} <= set(sp.heldout_names) and not {c_io, c_s} & {item.io, item.subject}
        assert p["corrupt_ids"] == tok.encode(ioi.render(item.template, c_io, c_s, item.order, item.fill).prompt).ids
        assert p["answer"] == _one(tok, item.io) and p["wrong"] == _one(tok, c_io)
        assert p["clean_ids"][p["anchor"]] == p["answer"] == p["clean_ids"][info["io_position"]]
        # the names are the only difference, at the same positions
        diff = [j for j, (a, b) in enumerate(zip(p["clean_ids"], p["corrupt_ids"])) if a != b]
        assert len(diff) == 3 and len(p["clean_ids"]) == len(p["corrupt_ids"])
        # patching.json's unpatched metrics use exactly these tokens (denoising: donor = clean, base = corrupt)
        with torch.no_grad():
            for ids, want in ((p["clean_ids"], donor), (p["corrupt_ids"], base)):
                lg = hf(input_ids=torch.tensor([ids])).logits[0, -1]
                assert want == pytest.approx((lg[p["answer"]] - lg[p["wrong"]]).item(), abs=1e-3)


def test_ioi_pairs_refuse_a_tokenizer_without_enough_one_token_names():
    from interp.errors import InvalidInputError
    from interp.patching import ioi_pairs

    class Chars:  # every name is several tokens
        bos_token_id = None

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in text]}

    with pytest.raises(InvalidInputError, match="at least 4 names"):
        ioi_pairs(Chars(), n=2)
    with pytest.raises(InvalidInputError, match="needs a tokenizer"):
        ioi_pairs(None)


# --- control strength ----------------------------------------------------------------------------

@pytest.mark.parametrize("name,heads,lengths,distinct,strong", [
    # layer 2's other four heads are the only layer-matched set; with the lasso stopped at step 800 they write
    # 0.80x the median head (the v2 build with the lasso to the end left them at 0.36x)
    ("tiny-qwen2", "L2H4,L2H5,L2H6,L2H7", (512, 1024), 1, 1),
    # the same shape as qwen2's: two retrieval heads in a four-head layer leave one set, L2H2+L2H3, 0.95x
    ("tiny-llama", "L2H0,L2H1", (512, 1024), 1, 1),
    # with the lasso through its 128-token phase, L1H2 stays out of the copy circuit; every draw holds it
    # (the one layer-matched head left) and two of the 8 heads of layers 0 and 2 (28 such sets): 10 distinct
    # draws, all writing >= 0.5x the median head
    ("tiny-gpt2", "L1H0,L1H1,L1H3", (512, 1016), 10, 10),
])
def test_shipped_control_strength(bundled, name, heads, lengths, distinct, strong):
    """The layer-matched controls `interp ablate` draws for the shipped organisms' retrieval heads (as the
    eval detects them): distinct sets, and how many write >= 0.5x the median head."""
    from interp import experiments as ex
    from interp.tasks.niah import NiahConfig, resolve_niah
    from interp.sites import as_heads

    model = bundled(name)
    niah = resolve_niah(model, NiahConfig(context_lengths=lengths, n_seeds=8))
    writes = ex.write_norms(model, ex.NiahTask.build(model.tokenizer, niah).inputs(8))
    target = as_heads(heads)
    ctl = ex.random_head_controls(target, model.spec, lambda hs: (), draws=10, seed=0)
    got = ex.control_write_strength(ctl, writes)
    assert (got["n_draws"], got["distinct_sets"], got["strong_sets"]) == (10, distinct, strong)
    # independent: the distinct sets and their mean write norm over the median head, by hand
    norms = np.asarray(writes.norms)
    sets = []
    for c in ctl.conditions:
        if sorted(c.heads) not in sets:
            sets.append(sorted(c.heads))
    assert [s["heads"] for s in got["sets"]] == [[str(h) for h in s] for s in sets]
    for s, hs in zip(got["sets"], sets):
        want = np.mean([norms[h.layer, h.head] for h in hs]) / np.median(norms)
        assert s["head_write_rel"] == pytest.approx(want, rel=1e-6)
        assert not set(hs) & set(target) and len(hs) == len(target)
    assert all(s["draws"] == 1 for s in got["sets"])  # every control set is distinct, run once
    assert sum(s["head_write_rel"] >= 0.5 for s in got["sets"]) == strong


@pytest.mark.slow
def test_organisms_eval_writes_the_new_metrics_to_a_copy_only(tmp_path, capsys):
    """`interp organisms eval DIR` on a copy: organism.json and the card get the v2 metrics; the shipped
    files are not touched."""
    def digest(d):
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if p.is_file()}

    shipped = digest(DATA_DIR / "tiny-gpt2"), (DATA_DIR / "README.md").read_bytes()
    d = tmp_path / "tiny-gpt2"
    shutil.copytree(DATA_DIR / "tiny-gpt2", d)
    code, out, err = run_cli(["organisms", "eval", str(d), "--lengths", "64", "--n-per-cell", "1",
                              "--ioi-prompts", "8", "--control-draws", "3"], capsys)
    assert code == 0, err
    ev = json.loads((d / "organism.json").read_text())["eval"]
    m, tok = load_organism(d)
    want = random_id_eval(m, tok)
    assert ev["random_id_copy"].keys() == want.keys()
    for k in ("first_copy_loss", "second_copy_loss", "gap_nats", "uniform_loss"):
        assert ev["random_id_copy"][k] == pytest.approx(want[k], abs=1e-5)
    assert ev["random_id_copy"]["without_bos"] == pytest.approx(want["without_bos"], abs=1e-5)
    assert ev["ioi"]["logit_diff"] == pytest.approx(ioi_eval(m, tok, 8)["logit_diff"], abs=1e-5)
    c = ev["controls"]
    assert c["n_draws"] == 3 and c["pool"] == "layer" and c["detection"]["context_lengths"] == [512, 1016]
    assert 1 <= c["distinct_sets"] <= 3 and 0 <= c["strong_sets"] <= c["distinct_sets"]
    assert set(ev["met"]) >= {"random_id_gap_nats", "random_id_first_vs_uniform_nats"}
    card = (d / "README.md").read_text()
    assert "Random-id copying (16 sequences of 40 ids" in card and "IOI (8 prompts" in card
    assert "Control strength: retrieval heads" in card
    assert "random-id copy first" in out
    assert (digest(DATA_DIR / "tiny-gpt2"), (DATA_DIR / "README.md").read_bytes()) == shipped


def test_random_id_repeat_documents_cover_the_vocabulary():
    """The recipe option id_repeats: "ids" documents are runs of ids uniform over 10..V-11 repeated 2-4 times,
    the repeats tagged "copy"; without the option the v1 mix has no such kind."""
    import random

    from interp.organisms.batches import DEFAULT_MIX, Packer
    from interp.organisms.train import config_with, get_tokenizer

    tok = get_tokenizer()
    v = tok.get_vocab_size()
    p = Packer(tok, {**DEFAULT_MIX, "ids": 1.0})
    r = random.Random(0)
    seen = set()
    for _ in range(200):
        ids, tags = p.ids_doc(r, 60)
        n = tags.count("text")
        reps = len(ids) // n
        assert 2 <= reps <= 4 and len(ids) == n * reps and ids == ids[:n] * reps
        assert tags == ["text"] * n + ["copy"] * (n * (reps - 1))
        assert all(10 <= i < v - 10 for i in ids)
        seen.update(ids)
    assert len(seen) > 0.9 * (v - 20)  # rare ids too, not only familiar tokens
    assert "ids" not in Packer(tok, DEFAULT_MIX).kinds
    assert config_with("tiny-qwen2", ["id_repeats=0.15", "id_repeats_from=800"]).id_repeats_from == 800
