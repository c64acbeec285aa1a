"""Natural-text windows for analyses that need ordinary context (copy suppression, logit lens).

Documents come from a user's list of strings or, by default, from held-out documents of interp's
corpus generator (the text the bundled organisms were trained on; seeds never used in training).
Each document is tokenized on its own (with the tokenizer's special tokens, e.g. BOS) and cut to
exactly `seq_len` tokens; shorter documents are skipped, so a batch needs no padding.
"""

from __future__ import annotations

from typing import Sequence

import torch

from interp.errors import InvalidInputError

CORPUS_OFFSET = 700_000  # held-out seed index range used here (NIAH and the organism evals use others)


def text_windows(model, n_texts: int, seq_len: int, seed: int = 0, texts: Sequence[str] | None = None) -> torch.Tensor:
    """[n, seq_len] token ids of the first `n_texts` documents with at least `seq_len` tokens."""
    if model.tokenizer is None:
        raise InvalidInputError(f"{model.name} has no tokenizer: pass token ids [n, seq_len] instead of text")
    if n_texts < 2 or seq_len < 8:
        raise InvalidInputError("need n_texts >= 2 and seq_len >= 8")
    rows = []
    if texts is None:
        from interp import corpus

        docs = (corpus.sample_text(corpus.heldout_seed(CORPUS_OFFSET + 10_000 * seed + i), 1)[0]
                for i in range(20 * n_texts))
    else:
        docs = iter(texts)
    for doc in docs:
        ids = model.tokenizer(doc)["input_ids"]
        if len(ids) >= seq_len:
            rows.append(ids[:seq_len])
        if len(rows) == n_texts:
            break
    if len(rows) < n_texts:
        raise InvalidInputError(f"only {len(rows)} documents have {seq_len} tokens or more ({n_texts} wanted): "
                                "lower the sequence length or pass longer/more texts")
    return torch.tensor(rows, dtype=torch.long)


def read_documents(path: str) -> list[str]:
    """Documents of a plain-text file, separated by blank lines; `path` may also be a fetched text's alias
    (`interp.tasks.texts`, e.g. "sherlock-holmes": its paragraphs)."""
    from interp.tasks.jsonl import read_user_text
    from interp.tasks.texts import resolve_haystack

    docs = [d.strip() for d in read_user_text(resolve_haystack(path), "texts file").split("\n\n")]
    return [d for d in docs if d]


def corpus_passages(tokenizer, n_texts: int, n_tokens: int, key: str, text: str | None = None) -> list[list[int]]:
    """`n_texts` passages of exactly `n_tokens` ids ([BOS] + text), seeded by `key`: corpus sentences, or, with
    `text` (a file, a directory of .txt files or a fetched text's alias, e.g. "sherlock-holmes"), windows of
    that text at seeded offsets (a pretrained model's loss means something on real prose, not on the corpus)."""
    import random

    if tokenizer is None:
        raise InvalidInputError("this analysis needs a tokenizer to encode corpus text")
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    if text is not None:
        return _text_passages(tokenizer, bos, n_texts, n_tokens, key, text)
    from interp.corpus import make_sentence

    out = []
    for i in range(n_texts):
        r = random.Random(f"{key}/{i}")
        ids = list(bos)
        while len(ids) < n_tokens:
            ids += tokenizer(make_sentence(r), add_special_tokens=False)["input_ids"]
        out.append(ids[:n_tokens])
    return out


def _text_passages(tokenizer, bos: list[int], n_texts: int, n_tokens: int, key: str, text: str) -> list[list[int]]:
    """Windows of a real text: the text is cut into n_texts equal stretches and each passage starts at a seeded
    offset inside its own stretch (passages never overlap; together they span the text)."""
    import random

    from interp.tasks.niah import read_haystack
    from interp.tasks.texts import resolve_haystack

    ids = tokenizer(read_haystack(resolve_haystack(text)), add_special_tokens=False)["input_ids"]
    body = n_tokens - len(bos)
    stretch = len(ids) // n_texts
    if stretch < body:
        raise InvalidInputError(f"{text}: {len(ids)} tokens hold fewer than {n_texts} passages of {n_tokens} tokens; "
                                "ask for fewer or shorter passages, or pass a longer text")
    r = random.Random(f"{key}/text")
    return [bos + ids[i * stretch + (o := r.randrange(stretch - body + 1)): i * stretch + o + body]
            for i in range(n_texts)]
