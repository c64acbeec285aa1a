"""The v2 organism recipe: extra document kinds that join the mix at a given step (random-id
repeats, IOI documents), random position offsets for learned absolute positions, the `--recipe` switch,
and that the v1 recipes are unchanged by any of it (a v2 build equals v1 up to the step its extras start).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest
import torch

from interp.corpus import ioi
from interp.organisms.batches import DEFAULT_MIX, Packer
from interp.organisms.train import (
    ORGANISMS,
    ORGANISMS_V2,
    OrganismConfig,
    _extras,
    _packer,
    _position_ids,
    config_with,
    train,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py: torch on one thread here

TINY = {"name": "tiny-test", "hidden": 64, "layers": 1, "heads": 2, "kv_heads": 2, "head_dim": 32,
        "intermediate": 64, "max_positions": 128, "curriculum": [(32, 4)], "tokens_per_step": 128,
        "warmup": 1, "lr": 3e-3, "seed": 0, "warm_steps": 1}


@pytest.mark.parametrize("kind", ["ioi", "ioi_composed"])
def test_ioi_documents_are_train_split_prompts_with_the_indirect_object_as_answer(raw_tok, kind):
    """Packed "ioi" / "ioi_composed" documents: the answer token is the name of the first clause that is
    not repeated, drawn from the train names only, and the prompt is a train template (fixed or composed),
    never a held-out one."""
    p = Packer(raw_tok, {kind: 1.0})
    sp = ioi.ioi_split()
    frames = ([ioi.TEMPLATES[t] for t in sp.train_templates] if kind == "ioi" else list(ioi.composed_templates()))
    heldout = [ioi.TEMPLATES[t] for t in sp.heldout_templates]
    used = set()
    decode = raw_tok.decode
    answers, orders = Counter(), Counter()
    for row in range(40):
        ids, tags = p.sequence(random.Random(f"t/{row}"), 128)
        starts = [i for i, t in enumerate(tags) if t == "answer"]
        assert starts, "an all-IOI mix packs IOI answers"
        for i in starts:
            name = decode([ids[i]]).strip()
            # the prompt is the text since the previous EOS
            j = max(k for k in range(i) if ids[k] in (p.eos, p.bos))
            prompt = decode(ids[j + 1:i])
            matches = [t for t in frames if _fits(t, prompt)]
            assert matches and not any(_fits(t, prompt) for t in heldout), prompt
            used.update(matches)
            words = [w.strip(",.") for w in prompt.split()]
            names = [w for w in words if w in ioi.NAMES]
            assert name in sp.train_names and name not in sp.heldout_names
            assert names.count(name) == 1 and len(set(names)) == 2, (prompt, name)
            other = next(n for n in names if n != name)
            assert names.count(other) == 2  # the subject is repeated, the answer is not
            answers[name] += 1
            orders["ABBA" if names[0] == name else "BABA"] += 1
    assert len(answers) > 10 and min(orders.values()) > 0.3 * sum(orders.values())
    assert len(used) > (5 if kind == "ioi" else 30)  # many frames, not one


@pytest.mark.parametrize("kind", ["ioi_words", "ioi_composed_words"])
def test_ioi_word_documents_have_word_people_and_the_unrepeated_one_as_answer(raw_tok, kind):
    """"_words" IOI documents (recipe option `ioi_words`): the two people are one-token vocabulary words that
    are no corpus name, nor the start of one, nor a word of any frame; the answer is the one not repeated;
    the frames are the train ones (fixed or composed), never a held-out template."""
    from interp.organisms.batches import vocab_words

    p = Packer(raw_tok, {kind: 1.0})
    people = set(ioi.word_people(vocab_words(raw_tok)))
    assert len(people) > 100 and not people & set(ioi.NAMES)
    assert not any(n.startswith(w) for w in people for n in ioi.NAMES)
    frames = ([ioi.TEMPLATES[t] for t in ioi.ioi_split().train_templates] if kind == "ioi_words"
              else list(ioi.composed_templates()))
    heldout = [ioi.TEMPLATES[t] for t in ioi.ioi_split().heldout_templates]
    answers, orders, n = Counter(), Counter(), 0
    for row in range(40):
        ids, tags = p.sequence(random.Random(f"w/{row}"), 128)
        for i in [i for i, t in enumerate(tags) if t == "answer"]:
            answer = raw_tok.decode([ids[i]])
            assert answer.startswith(" ") and answer.strip() in people
            j = max(k for k in range(i) if ids[k] in (p.eos, p.bos))
            prompt_ids = ids[j + 1:i]
            prompt = raw_tok.decode(prompt_ids)
            assert any(_fits(t, prompt) for t in frames) and not any(_fits(t, prompt) for t in heldout), prompt
            assert ids[i] in prompt_ids and prompt_ids.count(ids[i]) == 1  # one token, named once
            named = [raw_tok.decode([t]).strip() for t in prompt_ids if raw_tok.decode([t]).strip() in people]
            assert len(named) == 3 and len(set(named)) == 2, prompt  # A, B and the repeated subject S
            subject = next(w for w in named if w != answer.strip())
            assert named.count(subject) == 2 and named[-1] == subject
            answers[answer] += 1
            orders["ABBA" if named[0] == answer.strip() else "BABA"] += 1
            n += 1
    assert n > 50 and len(answers) > 30 and min(orders.values()) > 0.3 * n


def test_ioi_words_splits_the_ioi_weight():
    cfg = OrganismConfig(**TINY, arch="llama", ioi=0.4, ioi_from=1, ioi_kind="ioi_composed")
    assert _extras(cfg, 1) == {"ioi_composed": 0.4}  # ioi_words=0: the builds without it are unchanged
    assert _extras(replace(cfg, ioi_words=0.25), 1) == {"ioi_composed": 0.4 * 0.75, "ioi_composed_words": 0.1}
    assert _extras(replace(cfg, ioi_words=1.0), 1) == {"ioi_composed_words": 0.4}
    assert _extras(replace(cfg, ioi_words=0.5, ioi_kind="ioi"), 0) == {}
    with pytest.raises(ValueError, match="ioi_words"):
        train(replace(cfg, ioi_words=1.5), "/nonexistent/never-written", log=lambda s: None)
    assert config_with("tiny-gpt2", ["ioi_words=0.5"]).ioi_words == 0.5


def test_ioi_episodes_pack_one_prompt_per_n_tokens_of_budget(raw_tok):
    """Recipe option `ioi_episode_tokens`: an IOI document holds one prompt per N tokens of its budget, each
    with its own answer, within the budget; 0 keeps one prompt per document; and the IOI answers per
    training token stay about the same from 64- to 1024-token rows (without it they fall several-fold)."""
    from interp.organisms.tokenizer import token_counter

    count = token_counter(raw_tok)
    one = ioi.ioi_composed_doc
    many = ioi.ioi_episodes(one, 64)
    for seed, budget in [(0, 64), (1, 200), (2, 640), (3, 1000)]:
        a, b = one(random.Random(seed), budget, count), many(random.Random(seed), budget, count)
        answers = [x for x, tag in b if tag == "answer"]
        assert b[:len(a)] == a  # the first prompt is the one-prompt document
        assert len(answers) == max(1, budget // 64) and sum(count(x) for x, _ in b) <= budget
    assert [tag for _, tag in many(random.Random(0), 8, count)].count("answer") == 0  # filler when nothing fits
    with pytest.raises(Exception, match=">= 1"):
        ioi.ioi_episodes(one, 0)

    def per_token(length: int, episode_tokens: int) -> float:
        p = Packer(raw_tok, {**DEFAULT_MIX, "ioi_composed": 0.5}, ioi_episode_tokens=episode_tokens)
        rows = [p.sequence(random.Random(f"e/{length}/{i}"), length) for i in range(max(2, 2048 // length))]
        n = sum(1 for ids, tags in rows for j, t in enumerate(tags) if t == "answer" and raw_tok.decode([ids[j - 1]]) == " to")
        return n / (len(rows) * length)

    short, long_plain, long_dense = per_token(64, 128), per_token(1024, 0), per_token(1024, 128)
    assert long_plain < short / 3  # one prompt per document: IOI gets rare in long rows
    assert short / 2 < long_dense < short * 2


def test_composed_templates_are_many_and_none_is_a_fixed_template():
    frames = ioi.composed_templates()
    assert len(frames) == len(ioi.OPENINGS) * len(ioi.CLOSINGS) == 168
    assert not set(frames) & set(ioi.TEMPLATES)
    for f in frames:  # every frame names A and B once, repeats S once, and ends before the receiver
        assert f.count("{A}") == f.count("{B}") == f.count("{S}") == 1 and f.endswith(" to")


def _fits(template: str, prompt: str) -> bool:
    """Whether `prompt` is `template` with its slots filled (fixed text between the slots in order)."""
    import re

    parts = re.split(r"\{[A-Za-z]+\}", template.strip())
    pattern = ".+?".join(re.escape(x) for x in parts)
    return re.fullmatch(pattern, prompt.strip()) is not None


def test_extras_join_the_mix_at_their_start_steps(raw_tok):
    cfg = OrganismConfig(**TINY, arch="llama", id_repeats=0.15, id_repeats_from=2, ioi=0.2, ioi_from=3)
    assert [_extras(cfg, s) for s in range(4)] == [{}, {}, {"ids": 0.15}, {"ids": 0.15, "ioi": 0.2}]
    assert _extras(replace(cfg, ioi_kind="ioi_composed"), 3) == {"ids": 0.15, "ioi_composed": 0.2}
    with pytest.raises(ValueError, match="valid kinds"):
        train(replace(cfg, ioi_kind="ioi_free"), "/nonexistent/never-written", log=lambda s: None)
    cache: dict = {}
    kinds = [tuple(_packer(cache, raw_tok, cfg, s).kinds) for s in range(4)]
    assert kinds[0] == tuple(sorted(cfg.warm_mix))  # step 0 is a warm step
    assert kinds[1] == tuple(sorted(DEFAULT_MIX))
    assert "ids" in kinds[2] and "ioi" not in kinds[2] and {"ids", "ioi"} <= set(kinds[3])
    assert len(cache) == 4 and _packer(cache, raw_tok, cfg, 3) is _packer(cache, raw_tok, cfg, 3)
    v1 = OrganismConfig(**TINY, arch="llama")
    assert all(_extras(v1, s) == {} for s in range(10))


def test_position_offsets_are_seeded_in_range_and_only_for_learned_positions():
    cfg = OrganismConfig(**TINY, arch="gpt2", position_offsets=0.5, position_offsets_from=2)
    assert _position_ids(cfg, 1, 32, 8) is None  # before the start step
    pos = _position_ids(cfg, 5, 32, 64)
    assert pos.shape == (64, 32) and torch.equal(pos, _position_ids(cfg, 5, 32, 64))
    assert torch.equal(pos - pos[:, :1], torch.arange(32).expand(64, 32))  # consecutive from a start
    starts = pos[:, 0]
    assert starts.min() >= 0 and starts.max() <= cfg.max_positions - 32
    shifted = (starts > 0).float().mean().item()
    assert 0.3 < shifted < 0.7  # about half the rows, as configured
    assert not torch.equal(pos, _position_ids(cfg, 6, 32, 64))
    assert _position_ids(replace(cfg, position_offsets=0.0), 5, 32, 8) is None
    right = _position_ids(replace(cfg, position_offsets=1.0, position_offsets_right=0.5), 5, 32, 400)[:, 0]
    at_end = (right == cfg.max_positions - 32).float().mean().item()
    assert 0.4 < at_end < 0.6  # half of the shifted rows end at the last position
    assert _position_ids(cfg, 5, 128, 8) is None  # a full-length batch has no room to shift
    with pytest.raises(ValueError, match="learned absolute positions"):
        train(OrganismConfig(**TINY, arch="llama", position_offsets=0.5), "/nonexistent/never-written",
              log=lambda s: None)


def test_position_offsets_change_training_only_through_the_position_ids(tmp_path):
    """An offset build trains on the same tokens as a plain one (same losses before the offsets start),
    then diverges; and the offsets reach the model (the trained position rows past the batch length move)."""
    from safetensors.torch import load_file

    base = OrganismConfig(**{**TINY, "curriculum": [(32, 3)]}, arch="gpt2")
    shifted = replace(base, position_offsets=1.0, position_offsets_from=1)
    a = train(base, tmp_path / "a", log=lambda s: None, log_every=1)
    b = train(shifted, tmp_path / "b", log=lambda s: None, log_every=1)
    la = [c["lm_loss"] for c in a["training"]["loss_curve"]]
    lb = [c["lm_loss"] for c in b["training"]["loss_curve"]]
    assert la[0] == lb[0] and la[1:] != lb[1:]
    init = train(base, tmp_path / "init", steps=1, log=lambda s: None)
    wa, wb, w0 = (load_file(str(tmp_path / d / "model.safetensors"))["transformer.wpe.weight"]
                  for d in ("a", "b", "init"))
    assert init["sha256"] != a["sha256"]
    # rows 32.. are never used without offsets, so after step 1 they only move with them
    assert torch.equal(wa[32:], w0[32:]) and not torch.equal(wb[32:], w0[32:])


def test_v2_recipes_extend_v1_and_leave_it_unchanged():
    for name, v1 in ORGANISMS.items():
        v2 = ORGANISMS_V2[name]
        assert (v1.id_repeats, v1.ioi, v1.position_offsets) == (0.0, 0.0, 0.0)  # the shipped v1 recipes
        assert v2.id_repeats > 0 and v2.id_repeats_from > 0  # after the copy circuit has formed
        # IOI documents on tiny-qwen2 and tiny-gpt2, after the copy circuit has formed; none on tiny-llama (they
        # pulled three more heads into its copy circuit)
        assert (v2.ioi > 0 and v2.ioi_from > 0) == (name != "tiny-llama")
        same = {f: getattr(v1, f) for f in ("arch", "hidden", "layers", "heads", "kv_heads", "seed")}
        assert same == {f: getattr(v2, f) for f in same}
    # the lasso: qwen2 keeps v1's weight but only for the first 800 steps; gpt2 gains one for its first 1300
    # steps (its 128-token phase), which keeps one layer-1 head out of the copy circuit; llama has none
    lasso = {n: (c.head_lasso, c.head_lasso_from, c.head_lasso_steps) for n, c in ORGANISMS_V2.items()}
    assert lasso == {"tiny-qwen2": (3e-3, 0, 800), "tiny-llama": (0.0, 0, 0), "tiny-gpt2": (3e-3, 0, 1300)}
    assert ORGANISMS["tiny-qwen2"].head_lasso == 3e-3 and ORGANISMS["tiny-gpt2"].head_lasso == 0.0
    assert ORGANISMS_V2["tiny-gpt2"].max_trained_length == 1024
    assert config_with("tiny-llama", []) == ORGANISMS_V2["tiny-llama"]  # v2 is the default recipe
    assert config_with("tiny-llama", [], "v1") == ORGANISMS["tiny-llama"]
    with pytest.raises(KeyError, match="unknown recipe"):
        config_with("tiny-llama", [], "v3")


def test_v2_build_equals_v1_until_its_extras_start(tmp_path):
    """The same seed and data until the first extra starts: identical weights after those steps."""
    base = OrganismConfig(**{**TINY, "curriculum": [(32, 3)]}, arch="qwen2")
    v2 = replace(base, id_repeats=0.15, id_repeats_from=2, ioi=0.2, ioi_from=2)
    assert train(base, tmp_path / "a", steps=2, log=lambda s: None)["sha256"] == \
        train(v2, tmp_path / "b", steps=2, log=lambda s: None)["sha256"]
    assert train(base, tmp_path / "c", log=lambda s: None)["sha256"] != \
        train(v2, tmp_path / "d", log=lambda s: None)["sha256"]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_v2_training_is_deterministic(tmp_path, arch):
    """Two builds of a config using every v2 option give the same checkpoint, byte for byte."""
    cfg = OrganismConfig(**TINY, arch=arch, id_repeats=0.15, id_repeats_from=1, ioi=0.2, ioi_from=1, ioi_words=0.5,
                         **({"position_offsets": 0.5, "position_offsets_from": 1} if arch == "gpt2" else {}))
    a = train(cfg, tmp_path / "a", log=lambda s: None)
    b = train(cfg, tmp_path / "b", log=lambda s: None)
    assert a["sha256"] == b["sha256"]


def test_build_cli_takes_the_recipe(tmp_path, capsys):
    from interp.organisms.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["build", "tiny-qwen2", "--recipe", "v9", "--out", str(tmp_path / "x")])
    assert exc.value.code == 2 and "v9" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
