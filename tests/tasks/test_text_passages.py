"""Passages of plain text for the loss control of rope-zero and the statistics of rope-profile: from interp's
corpus by default, from a real text when one is given (windows of it, seeded, never overlapping)."""

from __future__ import annotations

from pathlib import Path

import pytest

from interp.errors import InvalidInputError
from interp.tasks.text import corpus_passages

TOKENIZER = Path(__file__).resolve().parents[2] / "data" / "organisms" / "tokenizer"


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TOKENIZER)


def _book(tmp_path) -> Path:
    f = tmp_path / "book.txt"
    f.write_text(" ".join(f"word{i}" for i in range(3000)) + "\n")
    return f


def _sub(seq: list[int], whole: list[int]) -> int:
    """The offset of `seq` inside `whole` (-1: not a contiguous slice of it)."""
    n = len(seq)
    return next((i for i in range(len(whole) - n + 1) if whole[i:i + n] == seq), -1)


def test_text_passages_are_disjoint_windows_of_the_text_and_seeded(tok, tmp_path):
    book = _book(tmp_path)
    ids = tok(book.read_text(), add_special_tokens=False)["input_ids"]
    bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
    ps = corpus_passages(tok, 5, 64, "k", text=str(book))
    assert len(ps) == 5 and all(len(p) == 64 for p in ps)
    starts = [_sub(p[len(bos):], ids) for p in ps]
    assert all(s >= 0 for s in starts), "every passage is a contiguous window of the text"
    assert all(a + 64 - len(bos) <= b for a, b in zip(starts, starts[1:])), "windows in order, never overlapping"
    assert all(p[:len(bos)] == bos for p in ps)
    assert ps == corpus_passages(tok, 5, 64, "k", text=str(book))
    assert ps != corpus_passages(tok, 5, 64, "other", text=str(book))
    assert ps != corpus_passages(tok, 5, 64, "k"), "the text, not the corpus"


def test_a_text_too_short_for_the_passages_is_refused(tok, tmp_path):
    with pytest.raises(InvalidInputError, match="fewer than 500 passages"):
        corpus_passages(tok, 500, 128, "k", text=str(_book(tmp_path)))


def test_rope_profile_reads_its_passages_from_the_haystack_text(tmp_path, capsys):
    """`interp rope-profile --haystack FILE` computes its statistics on that text (recorded in the result), and
    another text gives other numbers."""
    import json

    from tests.helpers import run_cli

    book = _book(tmp_path)
    other = tmp_path / "other.txt"
    other.write_text(" ".join(f"thing{i % 97} and more" for i in range(3000)) + "\n")
    stats = []
    for i, text in enumerate((book, other)):
        out = tmp_path / f"run{i}"
        code, _, err = run_cli(["rope-profile", "--model", "tiny-llama", "--heads", "L0H0,L1H1", "--n-texts", "2",
                                "--n-tokens", "32", "--haystack", str(text), "--device", "cpu", "--out", str(out)], capsys)
        assert code == 0, err
        d = json.loads((out / "rope_profile.json").read_text())
        assert d["config"]["text"] == str(text)
        stats.append(d["head_statistic"])
    assert stats[0] != stats[1]
