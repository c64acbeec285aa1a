"""Real-model NIAH defaults: standard (multi-token) needles for every model but the organisms, directory
haystacks, the needle-length score normalisation, and results that record which needles, haystack and
normalisation ran."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

import interp
from interp.analyses.retrieval import RetrievalConfig, RetrievalRecorder, detect_retrieval_heads
from interp.errors import InvalidInputError
from interp.models.loading import data_dir, minilm_path
from interp.tasks.needles import STANDARD_NEEDLES
from interp.tasks.niah import NiahConfig, build_niah, read_haystack, resolve_niah, trained_on_corpus

from tests.helpers import run_cli


@pytest.fixture(scope="module")
def local_ckpt(tmp_path_factory, tok):
    """A non-bundled local checkpoint (random weights, the organisms' tokenizer so NIAH can be built)."""
    import transformers as tf

    from interp.models.tiny import tiny_config

    cfg = tiny_config("qwen2")
    cfg.vocab_size = len(tok)
    torch.manual_seed(0)
    hf = tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    d = tmp_path_factory.mktemp("ckpt") / "random-qwen2"
    hf.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def _tokenizers(tok):
    out = [("organisms", tok)]
    if minilm_path() is not None:  # a real pretrained (WordPiece) tokenizer, offline
        out.append(("minilm", AutoTokenizer.from_pretrained(minilm_path())))
    return out


# ---- which needles for which model ---------------------------------------------------------------

def test_tiny_random_and_local_models_get_standard_needles_organisms_get_corpus_needles(bundled, tok, local_ckpt, tmp_path):
    from interp.models.tiny import tiny_random_hf

    rnd = interp.Model(tiny_random_hf("qwen2", False, seed=0), tokenizer=tok, name="tiny-random-qwen2",
                       source="interp.models.tiny")
    local = interp.load_model(str(local_ckpt))
    org = bundled("tiny-qwen2")
    assert not trained_on_corpus(rnd) and not trained_on_corpus(local) and trained_on_corpus(org)
    # an organism build copied elsewhere (organism.json beside the weights) is still an organism
    copy = tmp_path / "my-organism"
    shutil.copytree(data_dir() / "organisms" / "tiny-llama", copy)
    assert trained_on_corpus(interp.load_model(str(copy)))

    base = NiahConfig(context_lengths=(192,), depths=(0.5,), n_seeds=2)
    assert base.needle_source is None and base.needles == "corpus"  # build_niah alone: the corpus needles
    for m, want in ((rnd, "standard"), (local, "standard"), (org, "corpus")):
        cfg = resolve_niah(m, base)
        assert (cfg.needle_source, cfg.needles, cfg.haystack) == (want, want, "corpus")
        assert cfg.haystack_fallback == (want == "standard")
        samples = build_niah(m.tokenizer, cfg)
        standard = {n["needle"] for n in STANDARD_NEEDLES}
        assert all((s.needle in standard) == (want == "standard") for s in samples)
        assert all(("secret code" in s.needle) == (want == "corpus") for s in samples)
    # an explicit choice is kept, whatever the model
    assert resolve_niah(org, NiahConfig(needle_source="standard")).needles == "standard"
    assert resolve_niah(rnd, NiahConfig(needle_source="corpus")).needles == "corpus"
    with pytest.raises(InvalidInputError, match="needle_source 'kamradt'"):
        NiahConfig(needle_source="kamradt")


def test_standard_needles_are_distinct_facts_with_multi_token_answers_copied_from_the_needle(tok):
    assert len({n["needle"] for n in STANDARD_NEEDLES}) == len(STANDARD_NEEDLES) >= 16
    assert len({n["answer"] for n in STANDARD_NEEDLES}) == len(STANDARD_NEEDLES)
    for n in STANDARD_NEEDLES:
        stem = n["question"].split(" Answer: ", 1)[1]
        assert n["needle"] == f" {stem}{n['answer']}."  # question + answer continues the needle
        assert n["question"].startswith("Question: ") and "?" in n["question"]
    for name, t in _tokenizers(tok):
        for n in STANDARD_NEEDLES:
            a = t(n["answer"], add_special_tokens=False)["input_ids"]
            assert len(a) >= 2, (name, n["answer"], a)
    # with the tokenizer a NIAH prompt uses, the answer's tokens are a contiguous run of the needle span's
    samples = build_niah(tok, NiahConfig(context_lengths=(256,), depths=(0.5,), n_seeds=len(STANDARD_NEEDLES),
                                         needle_source="standard"))
    for s in samples:
        a, b = s.needle_span
        span, ans = s.input_ids[a:b], s.answer_ids
        assert len(ans) >= 2
        assert any(span[i:i + len(ans)] == ans for i in range(len(span) - len(ans) + 1)), s.id


def test_different_seeds_give_different_standard_prompts(tok):
    cfg = NiahConfig(context_lengths=(192,), depths=(0.0, 1.0), n_seeds=4, needle_source="standard")
    samples = build_niah(tok, cfg)
    for depth in cfg.depths:
        cell = [s for s in samples if s.depth == depth]
        assert len({s.needle for s in cell}) == 4 and len({tuple(s.input_ids) for s in cell}) == 4
    later = build_niah(tok, NiahConfig(context_lengths=(192,), depths=(0.0,), n_seeds=4, needle_source="standard",
                                       first_seed=cfg.first_seed + 4))
    assert not {s.needle for s in later} & {s.needle for s in samples if s.depth == 0.0}
    # the same seed is the same needle at every depth (paired), and the separator precedes the question
    by = {(s.depth, s.seed): s for s in samples}
    assert by[(0.0, cfg.seeds[0])].needle == by[(1.0, cfg.seeds[0])].needle
    q = tok("\n", add_special_tokens=False)["input_ids"] + tok(samples[0].question, add_special_tokens=False)["input_ids"]
    assert samples[0].input_ids[-len(q):] == q


# ---- directory haystacks -------------------------------------------------------------------------

def test_a_directory_haystack_is_its_txt_files_in_name_order_joined_by_blank_lines(tok, tmp_path):
    texts = {"b.txt": "The second essay talks about rivers and bridges.\nIt has two lines.",
             "a.txt": "The first essay is about the weather in the hills. Rain falls often.",
             "10.txt": "A tenth file sorts before the others by name."}
    d = tmp_path / "essays"
    d.mkdir()
    for name, text in texts.items():
        (d / name).write_text(text, encoding="utf-8")
    (d / "notes.md").write_text("not part of the haystack")
    (d / "sub").mkdir()
    (d / "sub" / "z.txt").write_text("not read: directories are not searched")
    joined = "\n\n".join(texts[n] for n in ("10.txt", "a.txt", "b.txt"))
    assert read_haystack(d) == joined
    one = tmp_path / "joined.txt"
    one.write_text(joined, encoding="utf-8")
    grid = dict(context_lengths=(128, 256), depths=(0.0, 0.5, 1.0), n_seeds=2, needle_source="standard")
    from_dir = build_niah(tok, NiahConfig(haystack_file=str(d), **grid))
    from_file = build_niah(tok, NiahConfig(haystack_file=str(one), **grid))
    assert [s.input_ids for s in from_dir] == [s.input_ids for s in from_file]
    assert [s.needle_span for s in from_dir] == [s.needle_span for s in from_file]
    cfg = NiahConfig(haystack_file=str(d), **grid)
    assert cfg.haystack == str(d) and not cfg.haystack_fallback


@pytest.mark.parametrize("files,msg", [
    ({}, "has no .txt files (it is empty)"),
    ({"notes.md": "text"}, "has no .txt files (it holds 1 other entry)"),
    ({"a.txt": "Fine text here.", "b.txt": b"caf\xe9 bad"}, "b.txt is not UTF-8 text (byte 3, line 1"),
])
def test_bad_haystack_directories(tok, tmp_path, files, msg):
    d = tmp_path / "hay"
    d.mkdir()
    for name, content in files.items():
        (d / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(InvalidInputError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        build_niah(tok, NiahConfig(context_lengths=(128,), depths=(0.5,), n_seeds=1, haystack_file=str(d)))


# ---- score normalisation -------------------------------------------------------------------------

class _Spec:
    n_layers, n_heads = 1, 4


def _expected(steps, generated, ids, span, answer_len, norm):
    """The score definition written out with plain Python: distinct in-span top-1 positions holding the
    generated token, over the answer's or the needle span's token count, capped at 1."""
    lo, hi = span
    out = []
    for h in range(len(steps[0])):
        hits = {steps[t][h] for t in range(len(steps))
                if lo <= steps[t][h] < hi and ids[steps[t][h]] == generated[t]}
        denom = answer_len if norm == "answer" else hi - lo
        out.append(min(1.0, len(hits) / denom))
    return np.array([out])


def test_score_norm_needle_divides_by_the_needle_span_answer_by_the_answer():
    class S:
        id = "s0"
        needle_span = (1, 6)  # 5 needle tokens (ids 10 11 12 13 14); after 1 pad token: positions 2..6
        answer_ids = [12, 13]  # a 2-token answer

    ids = torch.tensor([[0, 1, 10, 11, 12, 13, 14, 2]])
    mask = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1]])
    generated = [12, 13, 14]
    # top-1 key per step for heads 0..3: h0 copies 12 then 13 (2 positions), h1 copies 12, 13 and 14 (3),
    # h2 stays on the 12 (one copy; the later steps generate other tokens), h3 copies nothing (position 7
    # is past the span)
    steps = [[4, 4, 4, 7], [5, 5, 4, 7], [1, 6, 4, 7]]
    got = {}
    for norm in ("answer", "needle"):
        rec = RetrievalRecorder(score_norm=norm)
        rec.spec = _Spec()
        rec.begin_batch([S()], ids, mask)
        for st in steps:
            rec._argmax.append(torch.tensor([st])[:, None, :])  # [L=1, b=1, H=4]
            rec._stream.append(torch.zeros(1, 1, 4))
        rec.end_batch(torch.tensor([generated]))
        got[norm] = rec.sample_scores[0]
        want = _expected(steps, generated, ids[0].tolist(), (2, 7), 2, norm)
        np.testing.assert_allclose(got[norm], want)
    np.testing.assert_allclose(got["answer"], [[1.0, 1.0, 0.5, 0.0]])  # 2/2, min(1, 3/2), 1/2
    np.testing.assert_allclose(got["needle"], [[0.4, 0.6, 0.2, 0.0]])  # 2/5, 3/5, 1/5
    with pytest.raises(InvalidInputError, match="score_norm 'wu'"):
        RetrievalConfig(score_norm="wu")


# ---- what a result records -----------------------------------------------------------------------

def test_detection_records_needles_haystack_and_score_norm(bundled, local_ckpt, tmp_path):
    org = bundled("tiny-qwen2")
    grid = NiahConfig(context_lengths=(256,), depths=(0.5,), n_seeds=2)
    res = {n: detect_retrieval_heads(org, RetrievalConfig(niah=grid, only_successful=False, score_norm=n))
           for n in ("answer", "needle")}
    for n, r in res.items():
        assert r.config["score_norm"] == n
        niah = r.config["niah"]
        assert (niah["needles"], niah["haystack"], niah["haystack_fallback"], niah["needle_source"]) == \
            ("corpus", "corpus", False, "corpus")
    # the corpus needles are sentences around a one-token answer: the needle norm is smaller wherever a head copies
    a, nd = np.array(res["answer"].scores), np.array(res["needle"].scores)
    assert a.max() > 0 and (nd <= a + 1e-9).all() and (nd[a > 0] < a[a > 0]).all()

    local = interp.load_model(str(local_ckpt))
    r = detect_retrieval_heads(local, RetrievalConfig(niah=NiahConfig(context_lengths=(192,), depths=(0.5,),
                                                                      n_seeds=2), only_successful=False))
    niah = r.config["niah"]
    assert (niah["needles"], niah["haystack"], niah["haystack_fallback"]) == ("standard", "corpus", True)
    assert r.config["score_norm"] == "answer"


def test_cli_notes_the_fallback_and_records_a_directory_haystack(local_ckpt, tmp_path, capsys):
    grid = ["--lengths", "192", "--depths", "0.5", "--n-seeds", "2", "--all-samples"]
    out = tmp_path / "fallback"
    code, _, err = run_cli(["detect", "retrieval", "-m", str(local_ckpt), *grid, "--out", str(out)], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "offline fallback" in line]
    assert len(notes) == 1 and "--haystack" in notes[0], err
    d = json.loads((out / "retrieval.json").read_text())
    assert (d["config"]["niah"]["needles"], d["config"]["niah"]["haystack"]) == ("standard", "corpus")
    assert d["config"]["niah"]["haystack_fallback"] is True and d["config"]["score_norm"] == "answer"
    prompts = [json.loads(x) for x in (out / "prompts.jsonl").read_text().splitlines()]
    assert all(p["needle"] in {n["needle"] for n in STANDARD_NEEDLES} for p in prompts)

    hay = tmp_path / "essays"
    hay.mkdir()
    (hay / "a.txt").write_text("The valley was quiet in the early morning. Birds sang in the tall trees. " * 20)
    (hay / "b.txt").write_text("Later the market filled with traders selling bread and fish. " * 20)
    out2 = tmp_path / "dir"
    code, _, err = run_cli(["detect", "retrieval", "-m", str(local_ckpt), *grid, "--haystack", str(hay),
                            "--score-norm", "needle", "--out", str(out2)], capsys)
    assert code == 0, err
    assert "offline fallback" not in err
    d = json.loads((out2 / "retrieval.json").read_text())
    assert d["config"]["niah"]["haystack"] == str(hay) and d["config"]["niah"]["haystack_fallback"] is False
    assert d["config"]["niah"]["needles"] == "standard" and d["config"]["score_norm"] == "needle"

    out3 = tmp_path / "organism"  # the organisms: corpus needles, no note; --needles standard overrides
    code, _, err = run_cli(["detect", "retrieval", "-m", "tiny-qwen2", "--lengths", "128", "--depths", "0.5",
                            "--n-seeds", "2", "--out", str(out3)], capsys)
    assert code == 0 and "offline fallback" not in err, err
    assert json.loads((out3 / "retrieval.json").read_text())["config"]["niah"]["needles"] == "corpus"
    out4 = tmp_path / "organism-standard"
    code, _, err = run_cli(["detect", "retrieval", "-m", "tiny-qwen2", "--lengths", "192", "--depths", "0.5",
                            "--n-seeds", "2", "--needles", "standard", "--all-samples", "--out", str(out4)], capsys)
    assert code == 0, err
    assert json.loads((out4 / "retrieval.json").read_text())["config"]["niah"]["needles"] == "standard"
