"""Bundled model organisms: checkpoints, corpus generator, tokenizer, training smoke test."""

from __future__ import annotations

import json
import math
import random
import re

import pytest
import torch

from interp import corpus
from interp.organisms.batches import Packer
from interp.organisms.tokenizer import BOS, encode_pieces, load_tokenizer, token_counter
from interp.organisms.train import (
    DATA_DIR,
    OrganismConfig,
    config_with,
    get_config,
    sha256_file,
    train,
)

MODEL_DIRS = sorted(p.parent for p in DATA_DIR.glob("*/config.json"))
SAMPLE = " What is the secret code of the green lantern? The secret code of the green lantern is 4821."


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py: torch on one thread here


def test_bundled_organisms_exist():
    names = {p.name for p in MODEL_DIRS}
    assert {"tiny-qwen2", "tiny-llama", "tiny-gpt2"} <= names


@pytest.mark.parametrize("model_dir", MODEL_DIRS, ids=[p.name for p in MODEL_DIRS])
def test_bundled_organism_loads_and_matches_card(model_dir, raw_tok):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    card = (model_dir / "README.md").read_text()
    found = re.findall(r"sha256 of model.safetensors: `([0-9a-f]{64})`", card)
    assert found, "model card has no sha256 line"
    assert found[0] == sha256_file(model_dir / "model.safetensors")
    info = json.loads((model_dir / "organism.json").read_text())
    assert info["sha256"] == found[0]

    hf_tok = AutoTokenizer.from_pretrained(str(model_dir))
    ids = hf_tok(SAMPLE)["input_ids"]
    assert ids == raw_tok.encode(SAMPLE).ids
    assert ids[0] == hf_tok.bos_token_id == raw_tok.token_to_id(BOS)

    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    model.eval()
    assert model.config.vocab_size == raw_tok.get_vocab_size()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), raw_tok.get_vocab_size())
    assert torch.isfinite(logits).all()
    arch = {"tiny-qwen2": "Qwen2ForCausalLM", "tiny-llama": "LlamaForCausalLM",
            "tiny-gpt2": "GPT2LMHeadModel"}.get(model_dir.name)
    if arch:
        assert type(model).__name__ == arch


def test_shared_tokenizer_isolates_digits(raw_tok):
    enc = raw_tok.encode(" The code is 4821.", add_special_tokens=False)
    assert enc.tokens[-5:] == ["4", "8", "2", "1", "."]
    assert raw_tok.encode("x").ids[0] == raw_tok.token_to_id(BOS)
    for t in ("<s>", "</s>", "<pad>"):
        assert raw_tok.token_to_id(t) is not None


def test_corpus_is_deterministic():
    assert corpus.make_haystack(n_sentences=30, rng=5) == corpus.make_haystack(n_sentences=30, rng=5)
    assert corpus.make_haystack(n_sentences=30, rng=5) != corpus.make_haystack(n_sentences=30, rng=6)
    assert corpus.make_needle(7) == corpus.make_needle(7)
    a = corpus.make_niah_prompt(0.5, corpus.heldout_seed(3), n_sentences=20)
    b = corpus.make_niah_prompt(0.5, corpus.heldout_seed(3), n_sentences=20)
    assert a == b
    r1, r2 = corpus.train_rng(1, 2, 3), corpus.train_rng(1, 2, 3)
    assert corpus.sample_text(r1, 3) == corpus.sample_text(r2, 3)


def test_haystack_has_no_needles_or_is():
    text = corpus.make_haystack(n_sentences=200, rng=1)
    assert " is " not in text and "secret code" not in text
    assert not re.search(r"\d{4}", text)


@pytest.mark.parametrize("depth", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_niah_prompt_consistency(depth, raw_tok):
    count = token_counter(raw_tok)
    for i in range(5):
        p = corpus.make_niah_prompt(depth, corpus.heldout_seed(i), n_tokens=300, count_tokens=count)
        s, e = p["needle_char_span"]
        assert p["prompt"][s:e] == p["needle"]
        assert p["needle"] == f" The secret code of the {p['key']} is {p['value']}."
        assert p["question"].endswith(f"The secret code of the {p['key']} is")
        assert p["prompt"].endswith(p["question"])
        assert p["answer"] == " " + p["value"] and p["value"] in corpus.CODE_WORDS
        assert len(raw_tok.encode(p["answer"], add_special_tokens=False).ids) == 1  # one lookup
        assert p["prompt"].count(" is " + p["value"]) == 1  # only the needle says which word it is
        assert len(raw_tok.encode(p["prompt"], add_special_tokens=False).ids) <= 300
        if depth == 0.0:
            assert s == 0
        if depth == 1.0:
            assert e + len(p["question"]) == len(p["prompt"])
        assert raw_tok.encode(p["answer"], add_special_tokens=False).tokens == ["Ġ" + p["value"]]


def test_make_needle_tuple():
    needle, question, answer = corpus.make_needle(random.Random(11))
    assert (question + answer).endswith(needle.rstrip("."))


def test_heldout_seeds_are_disjoint_from_training():
    assert corpus.heldout_seed(0) == corpus.HELDOUT_SEED_MIN
    with pytest.raises(ValueError):
        corpus.heldout_seed(corpus.HELDOUT_SEED_MAX)
    # training uses string-keyed generators only
    assert corpus.train_rng(0, 0, 0).random() != random.Random(0).random()


def test_training_documents_tag_answers(raw_tok):
    count = token_counter(raw_tok)
    for i in range(20):
        r = random.Random(f"test/{i}")
        pieces = corpus.needle_doc(r, 200, count)
        ids, tags = encode_pieces(raw_tok, pieces)
        assert len(ids) <= 200
        assert ids == raw_tok.encode("".join(p for p, _ in pieces), add_special_tokens=False).ids
        answer = raw_tok.decode([t for t, g in zip(ids, tags) if g == "answer"])
        answers = [p for p, g in pieces if g == "answer"]
        assert answer == "".join(answers)
        needle = next(p for p, g in pieces if g == "needle")
        assert needle.endswith(f" is{answers[0]}.")
        facts = {p for p, g in pieces if g in ("needle", "distractor")}
        for j, (p, g) in enumerate(pieces):
            if g == "answer":
                question, tag = pieces[j - 1]
                assert tag == "question"
                assert " " + question.split("? ")[1] + p + "." in facts
        lst = corpus.list_doc(r, 200, count)
        items = [p.strip(" ,") for p, _ in lst[1:-1]] if lst[0][0].startswith(" Invited") else None
        if items:
            assert len(set(items)) == len(items)


def test_packer_sequences(raw_tok):
    packer = Packer(raw_tok)
    x, y, w, amask, _cmask = packer.batch(seed=0, step=0, length=128, batch_size=4)
    assert x.shape == y.shape == w.shape == (4, 128)
    assert (x[:, 0] == raw_tok.token_to_id(BOS)).all()
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert (w[amask] == packer.answer_weight).all() and (w[~amask] == 1).all()
    x2, *_ = packer.batch(seed=0, step=0, length=128, batch_size=4)
    assert torch.equal(x, x2)


TINY = {"name": "tiny-test", "arch": "llama", "hidden": 64, "layers": 1, "heads": 2, "kv_heads": 1,
            "head_dim": 32, "intermediate": 64, "max_positions": 128, "curriculum": [(32, 3)],
            "tokens_per_step": 128, "warmup": 1, "lr": 3e-3, "seed": 0}


@pytest.mark.parametrize("arch", ["qwen2", "llama", "gpt2"])
def test_train_few_steps_writes_checkpoint(tmp_path, arch):
    from transformers import AutoModelForCausalLM

    cfg = OrganismConfig(**{**TINY, "arch": arch, "kv_heads": 2 if arch == "gpt2" else 1})
    out = tmp_path / arch
    info = train(cfg, out, steps=3, log=lambda s: None, log_every=1)
    losses = [c["lm_loss"] for c in info["training"]["loss_curve"]]
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0]
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
              "README.md", "organism.json"):
        assert (out / f).exists(), f
    assert info["sha256"] == sha256_file(out / "model.safetensors")
    assert info["sha256"] in (out / "README.md").read_text()
    model = AutoModelForCausalLM.from_pretrained(str(out))
    assert model.config.model_type == arch
    load_tokenizer(out)


def test_training_is_deterministic(tmp_path):
    a = train(OrganismConfig(**TINY), tmp_path / "a", steps=2, log=lambda s: None)
    b = train(OrganismConfig(**TINY), tmp_path / "b", steps=2, log=lambda s: None)
    assert a["sha256"] == b["sha256"]


def test_snapshot_equals_the_truncated_build(tmp_path):
    """A phase-end snapshot is exactly the model a build truncated there produces."""
    from safetensors.torch import load_file

    cfg = OrganismConfig(**{**TINY, "curriculum": [(16, 2), (32, 1)]})
    train(cfg, tmp_path / "full", snapshots=True, log=lambda s: None)
    snaps = sorted(p.name for p in (tmp_path / "full" / "snapshots").iterdir())
    assert snaps == ["step-2"]
    train(cfg, tmp_path / "prefix", steps=2, log=lambda s: None)
    a = load_file(str(tmp_path / "full" / "snapshots" / "step-2" / "model.safetensors"))
    b = load_file(str(tmp_path / "prefix" / "model.safetensors"))
    c = load_file(str(tmp_path / "full" / "model.safetensors"))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)  # the last step changed the weights


def test_config_overrides_parse_and_reject_bad_input():
    cfg = config_with("tiny-qwen2", ["heads=16", "kv_heads=4", "lr=0.001", "curriculum=64:10,128:5"])
    assert (cfg.heads, cfg.kv_heads, cfg.lr, cfg.curriculum) == (16, 4, 0.001, [(64, 10), (128, 5)])
    assert get_config("tiny-qwen2").lr != 0.001  # the registry entry is not modified
    for bad, msg in [("nope=1", "FIELD one of"), ("heads=many", "field heads"),
                     ("curriculum=64", "field curriculum"), ("heads", "FIELD=VALUE")]:
        with pytest.raises(ValueError, match=msg):
            config_with("tiny-qwen2", [bad])


def test_build_cli_bad_override_exits_2(tmp_path, capsys):
    from interp.organisms.__main__ import main

    assert main(["build", "tiny-qwen2", "--set", "heads=lots", "--out", str(tmp_path / "x")]) == 2
    assert "field heads" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("arch", ["qwen2", "gpt2"])
def test_head_lasso_penalty_is_the_sum_of_per_head_output_norms(arch):
    from interp.organisms.train import build_model, head_lasso_penalty

    cfg = OrganismConfig(**{**TINY, "arch": arch, "layers": 2, "heads": 2, "kv_heads": 2, "hidden": 64})
    model = build_model(cfg, 300)
    want = 0.0
    for layer in range(2):
        if arch == "gpt2":
            w = model.transformer.h[layer].attn.c_proj.weight  # rows = inputs (head-major)
            slices = [w[h * 32:(h + 1) * 32, :] for h in range(2)]
        else:
            w = model.model.layers[layer].self_attn.o_proj.weight  # columns = inputs (head-major)
            slices = [w[:, h * 32:(h + 1) * 32] for h in range(2)]
        want += sum(float(torch.linalg.matrix_norm(s.detach())) for s in slices)
    assert abs(float(head_lasso_penalty(model).detach()) - want) < 1e-4 * want


def test_head_lasso_shrinks_head_outputs(tmp_path):
    base = train(OrganismConfig(**TINY), tmp_path / "a", steps=3, log=lambda s: None)
    lasso = train(OrganismConfig(**{**TINY, "head_lasso": 1.0}), tmp_path / "b", steps=3, log=lambda s: None)
    assert "head_norm_sum" not in base["training"]["loss_curve"][-1]
    from transformers import AutoModelForCausalLM

    from interp.organisms.train import head_lasso_penalty

    norms = [float(head_lasso_penalty(AutoModelForCausalLM.from_pretrained(str(tmp_path / d))).detach()) for d in "ab"]
    assert norms[1] < norms[0]
    assert lasso["training"]["loss_curve"][-1]["head_norm_sum"] > 0


def test_head_lasso_steps_limits_the_penalty_to_the_first_steps(tmp_path):
    from safetensors.torch import load_file

    def run(name, **kw):
        info = train(OrganismConfig(**{**TINY, "head_lasso": 1.0, **kw}), tmp_path / name, steps=3,
                     log=lambda s: None, log_every=1)
        return info, load_file(str(tmp_path / name / "model.safetensors"))

    full, w_full = run("full")
    same, w_same = run("same", head_lasso_steps=3)  # covers every step: the same build
    early, w_early = run("early", head_lasso_steps=1)
    assert all(torch.equal(w_full[k], w_same[k]) for k in w_full)
    assert not all(torch.equal(w_full[k], w_early[k]) for k in w_full)
    logged = ["head_norm_sum" in c for c in early["training"]["loss_curve"]]
    assert logged == [True, False, False]
    late, w_late = run("late", head_lasso_from=2)  # the lasso only on the last step
    plain, w_plain = run("plain", head_lasso=0.0)
    assert ["head_norm_sum" in c for c in late["training"]["loss_curve"]] == [False, False, True]
    assert not all(torch.equal(w_late[k], w_plain[k]) for k in w_late)
    window, _ = run("window", head_lasso_from=1, head_lasso_steps=2)
    assert ["head_norm_sum" in c for c in window["training"]["loss_curve"]] == [False, True, False]
