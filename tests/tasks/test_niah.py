"""NIAH prompts: exact needle spans, paired seeds, user files, clear errors; retrieval-score logic."""

import json

import numpy as np
import pytest

import interp
import torch

from interp.analyses.retrieval import RetrievalRecorder
from interp.errors import InvalidInputError
from interp.tasks.niah import NiahConfig, build_niah, score_answer


def test_default_prompts_have_exact_spans_and_lengths(tok):
    cfg = NiahConfig(context_lengths=(128, 256), depths=(0.0, 0.5, 1.0), n_seeds=3)
    samples = build_niah(tok, cfg)
    assert len(samples) == 2 * 3 * 3
    for s in samples:
        assert len(s.input_ids) <= s.context_length
        assert len(s.input_ids) > s.context_length - 40  # filled up to about the budget
        a, b = s.needle_span
        assert tok.decode(s.input_ids[a:b]).strip() == s.needle.strip()
        assert s.input_ids[0] == tok.bos_token_id
        # the prompt ends with the question; the answer is its continuation
        assert tok.decode(s.input_ids).endswith(s.question.strip())
        assert s.answer.strip() not in tok.decode(s.input_ids[b:])
    by = {(s.context_length, s.depth, s.seed): s for s in samples}
    # depth 0: needle right after BOS; depth 1: needle right before the question
    s0, s1 = by[(256, 0.0, cfg.seeds[0])], by[(256, 1.0, cfg.seeds[0])]
    assert s0.needle_span[0] == 1
    q_len = len(tok(s1.question, add_special_tokens=False)["input_ids"])
    assert s1.needle_span[1] == len(s1.input_ids) - q_len
    # paired: same seed -> same needle at every length and depth; different seeds differ
    assert s0.needle == s1.needle == by[(128, 0.5, cfg.seeds[0])].needle
    assert len({by[(128, 0.5, sd)].needle for sd in cfg.seeds}) == 3
    # deterministic
    assert [s.input_ids for s in build_niah(tok, cfg)] == [s.input_ids for s in samples]


def test_user_files_insert_needle_and_question_verbatim(tok, tmp_path):
    hay = tmp_path / "hay.txt"
    hay.write_text("Plain words about the river and the town. " * 5)
    needles = tmp_path / "needles.jsonl"
    needles.write_text(json.dumps({"needle": " The best fruit is a mango.", "question": "Which fruit is best? It is",
                                   "answer": " a mango"}) + "\n")
    cfg = NiahConfig(context_lengths=(200,), depths=(0.5,), n_seeds=1, haystack_file=str(hay),
                     needles_file=str(needles), separator=" ||")
    from interp.errors import InterpWarning

    with pytest.warns(InterpWarning, match="repeats"):  # 45 tokens of haystack in a 200-token context
        samples = build_niah(tok, cfg)
    for s in samples:
        assert 196 <= len(s.input_ids) <= 200  # the haystack is cycled to fill the context, up to a whole word
        a, b = s.needle_span
        assert tok.decode(s.input_ids[a:b]) == tok.decode(tok(" The best fruit is a mango.",
                                                            add_special_tokens=False)["input_ids"])
        tail = tok(" ||", add_special_tokens=False)["input_ids"] + tok("Which fruit is best? It is",
                                                                        add_special_tokens=False)["input_ids"]
        assert s.input_ids[-len(tail):] == tail
        assert abs(a - 100) < 20


@pytest.mark.parametrize("content,msg", [
    ("{not json\n", "not valid JSON"),
    (json.dumps({"needle": "x", "question": "y"}) + "\n", "missing or empty"),
    ("\n", "has no needles"),
])
def test_bad_needles_file(tok, tmp_path, content, msg):
    f = tmp_path / "n.jsonl"
    f.write_text(content)
    with pytest.raises(InvalidInputError, match=msg):
        build_niah(tok, NiahConfig(context_lengths=(64,), depths=(0.5,), n_seeds=1, needles_file=str(f)))


def test_bad_config():
    with pytest.raises(InvalidInputError, match="depths"):
        NiahConfig(depths=(1.5,))
    with pytest.raises(InvalidInputError, match=">= 16"):
        NiahConfig(context_lengths=(4,))


def test_too_short_context(tok):
    with pytest.raises(InvalidInputError, match="too short"):
        build_niah(tok, NiahConfig(context_lengths=(20,), depths=(0.5,), n_seeds=1))


def test_score_answer():
    assert score_answer(" 4821.", " 4821") == (True, True)
    assert score_answer(" it is 4821", " 4821") == (True, False)
    assert score_answer(" 4812", " 4821") == (False, False)


class _Spec:
    n_layers, n_heads = 2, 2


def test_retrieval_score_counts_distinct_copied_needle_positions():
    """Hand-built top-1 positions: only in-span positions holding the generated token count."""
    class S:  # a minimal sample
        id = "s0"
        needle_span = (2, 6)
        answer_ids = [7, 8]

    rec = RetrievalRecorder()
    rec.spec = _Spec()
    ids = torch.tensor([[0, 0, 5, 6, 7, 8, 9, 9]])  # one row, 1 pad token
    mask = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1]])
    rec.begin_batch([S()], ids, mask)
    gen = torch.tensor([[7, 8, 9]])
    # per call [L, b, H]: layer0 head0 copies 7 then 8 (positions 4, 5: span is [3, 7) after the pad)
    # layer0 head1 attends to position 4 at every step (copies once); layer1 head0 looks at 6 (9 is outside the
    # span at index 7; index 6 is in span but holds 9 when 9 is generated at step 2 -> copies); layer1 head1 never.
    steps = [
        [[4, 4], [6, 0]],
        [[5, 4], [6, 0]],
        [[7, 4], [6, 0]],
    ]
    for st in steps:
        rec._argmax.append(torch.tensor(st)[:, None, :])  # [L, b=1, H]
        rec._stream.append(torch.zeros(2, 1, 2))
    rec.end_batch(gen)
    score = rec.sample_scores[0]
    np.testing.assert_allclose(score, [[1.0, 0.5], [0.5, 0.0]])


def test_recorder_returns_scores_in_the_callers_sample_order():
    """Decoding groups samples by context length; per_sample must undo that grouping."""
    class S:
        def __init__(self, sid, span):
            self.id, self.needle_span, self.answer_ids = sid, span, [7]

    a, b = S("a", (0, 2)), S("b", (2, 4))
    rec = RetrievalRecorder()
    rec.spec = _Spec()
    ids = torch.tensor([[7, 1, 2, 3], [1, 2, 7, 3]])
    rec.begin_batch([b, a], ids[[1, 0]], torch.ones(2, 4, dtype=torch.long))  # decoded as (b, a)
    # one step: every head of row 0 (b) looks at 2 (b's copy), row 1 (a) at 3 (not a copy)
    rec._argmax.append(torch.tensor([[[2, 2], [3, 3]], [[2, 2], [3, 3]]]))  # [L, b, H]
    rec._stream.append(torch.zeros(2, 2, 2))
    rec.end_batch(torch.tensor([[7], [7]]))
    scores, _ = rec.per_sample([a, b])
    np.testing.assert_allclose(scores[0], 0.0)  # a copied nothing
    np.testing.assert_allclose(scores[1], 1.0)  # b copied its one answer token with every head


def test_runner_evaluates_each_distinct_condition_once():
    """Conditions with the same interventions (e.g. coinciding random draws) are evaluated once; every
    condition gets the arrays, and progress advances for every planned condition."""
    from interp.experiments import Condition, Task, run_conditions
    from interp.hooks.interventions import AblateHeads

    calls, ticks = [], []

    class Fake(Task):
        metrics = ("m",)
        n = 2

        def evaluate(self, model, interventions=(), batch_size=8, progress=None):
            calls.append(tuple(iv.describe()["heads"] for iv in interventions))
            progress(self.n)
            return {"m": np.full(2, float(len(calls)))}

    conds = [Condition("a", (AblateHeads(["L1H2", "L0H0"]),)), Condition("b", (AblateHeads(["L0H0", "L1H2"]),)),
             Condition("c", (AblateHeads(["L3H0"]),))]
    out = run_conditions(None, Fake(), conds, progress=ticks.append)
    assert calls == [(["L0H0", "L1H2"],), (["L3H0"],)]  # a and b are one experiment
    assert out["a"]["m"].tolist() == out["b"]["m"].tolist() == [1.0, 1.0] and out["c"]["m"].tolist() == [2.0, 2.0]
    assert out.n_evaluated == 2 and ticks == [2, 2, 2]
    with pytest.raises(interp.InvalidInputError, match="unique"):
        run_conditions(None, Fake(), [conds[0], conds[0]])


# Natsume Soseki, "Wagahai wa neko de aru" (1905, public domain): its opening, as one line without whitespace
SOSEKI = ("吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。何でも薄暗いじめじめした所でニャーニャー泣いて"
          "いた事だけは記憶している。吾輩はここで始めて人間というものを見た。しかもあとで聞くとそれは書生という人間中で"
          "一番獰悪な種族であったそうだ。")


def test_haystack_units_split_cjk_text_at_full_stops_and_keep_every_character():
    from interp.tasks.niah import HAYSTACK_UNIT_CHARS, _haystack_units

    long = "我" * (2 * HAYSTACK_UNIT_CHARS + 5)  # a "sentence" without any stop: cut into pieces
    units = _haystack_units(SOSEKI + "\n" + long + "\nThe red lantern stood near the old bridge. Hi.")
    cjk = [u for u, spaced in units if not spaced]
    assert cjk[:3] == ["吾輩は猫である。", "名前はまだ無い。", "どこで生れたかとんと見当がつかぬ。"]
    assert "".join(cjk) == SOSEKI + long and max(len(u) for u in cjk) == HAYSTACK_UNIT_CHARS
    assert [u for u, spaced in units if spaced] == ["The red lantern stood near the old bridge.", "Hi."]


@pytest.mark.parametrize("n_ctx", [128, 256, 512])
def test_a_haystack_without_spaces_fills_the_context_without_inserting_any(tmp_path, tok, n_ctx):
    """A one-line Japanese haystack (no whitespace: a single "word" to a whitespace splitter) builds prompts
    that fill n_ctx up to the last whole character (a CJK character is at most 3 byte-level tokens here); the
    text around the needle is the haystack's own text, whole characters, no space added."""
    hay = tmp_path / "neko.txt"
    hay.write_text(SOSEKI * 8, encoding="utf-8")
    cfg = NiahConfig(context_lengths=(n_ctx,), depths=(0.0, 0.5, 1.0), n_seeds=2, haystack_file=str(hay),
                     needle_source="standard")
    samples = build_niah(tok, cfg)
    assert len(samples) == 6
    for s in samples:
        assert n_ctx - 2 <= len(s.input_ids) <= n_ctx
        a, b = s.needle_span
        assert tok.decode(s.input_ids[a:b]).strip() == s.needle.strip()
        after = tok.decode(s.input_ids[b:len(s.input_ids) - len(tok(cfg.separator + s.question,
                                                                       add_special_tokens=False).input_ids)])
        before = tok.decode(s.input_ids[1:a])  # after <s>
        for part in (before, after):
            assert "\ufffd" not in part and " " not in part.strip() and part.strip() in SOSEKI * 8


def test_a_haystack_shorter_than_the_context_is_cycled_with_a_warning_saying_how_often(tok, tmp_path):
    """Issue 43: a haystack far shorter than the context was cycled without a word. The prompts are still built
    (a user may mean it), with an InterpWarning naming the file, its length and the repeats; a haystack long
    enough for every context builds without one."""
    import warnings

    from interp.errors import InterpWarning

    hay = tmp_path / "short.txt"
    hay.write_text("Plain words about the river and the town. " * 3)
    cfg = NiahConfig(context_lengths=(128, 512), depths=(0.5,), n_seeds=2, haystack_file=str(hay),
                     needle_source="standard")
    with pytest.warns(InterpWarning, match=r"short\.txt is \d+ tokens, shorter than the 512-token contexts: it "
                                           r"repeats \d+\.\d times in the longest prompts"):
        assert len(build_niah(tok, cfg)) == 4
    hay.write_text("Plain words about the river and the town. " * 200)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InterpWarning)
        build_niah(tok, cfg)
