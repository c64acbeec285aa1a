"""Text datasets for the activation store: the corpus generator, a text/JSONL file, a list.

Each dataset yields texts lazily (one text = one sequence, truncated by the store to its
max_length) and has a streaming fingerprint (sha256 over the texts, and their count), so a store
knows exactly which data it holds and a resumed run can check it continues the same data.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from interp.errors import InvalidInputError


class TextData:
    """Base class: subclasses implement `texts()` and `describe()`."""

    def texts(self) -> Iterator[str]:
        raise NotImplementedError

    def describe(self) -> dict:
        raise NotImplementedError

    def fingerprint(self) -> dict:
        """One streaming pass: sha256 over the texts (each followed by a NUL) and their count."""
        h = hashlib.sha256()
        n = 0
        for t in self.texts():
            h.update(t.encode("utf-8"))
            h.update(b"\0")
            n += 1
        if n == 0:
            d = self.describe()
            where = f"{d['kind']} file {d['path']}" if d.get("path") else f"dataset {d}"
            raise InvalidInputError(f"{where} holds no texts (blank lines are skipped)")
        return {**self.describe(), "sha256": h.hexdigest(), "n_sequences": n}


@dataclass
class CorpusData(TextData):
    """Filler prose from interp's corpus generator (interp.corpus), held-out seeds only.

    Text i is `n_sentences` sentences drawn from held-out seed `heldout_seed(seed * 10**6 + i)`,
    never seen in training the organisms. With the default 16 sentences a text has >= 140 tokens
    (MiniLM and organism tokenizers), so with max_length <= 128 every sequence is truncated to the
    same length (a balanced design for the position decomposition).
    """

    n_sequences: int = 512
    n_sentences: int = 16
    seed: int = 0

    def __post_init__(self):
        if self.n_sequences < 1 or self.n_sentences < 1:
            raise InvalidInputError("corpus data needs n_sequences >= 1 and n_sentences >= 1")
        if not 0 <= self.seed < 900:
            raise InvalidInputError("corpus seed must be in 0..899 (held-out seed space)")
        if self.n_sequences > 10**6:
            raise InvalidInputError("corpus data: at most 10**6 sequences per seed")

    def texts(self) -> Iterator[str]:
        """Yield the `n_sequences` texts lazily: text i is `n_sentences` sentences of its held-out seed
        (the same texts on every run)."""
        from interp.corpus import heldout_seed, make_haystack

        for i in range(self.n_sequences):
            yield make_haystack(self.n_sentences, rng=heldout_seed(self.seed * 10**6 + i))

    def describe(self) -> dict:
        """What the data is (kind "corpus", generator, n_sentences, seed, limit = n_sequences); with the
        sha256 and count from `fingerprint()` it is the store header's `dataset`."""
        return {"kind": "corpus", "generator": "interp.corpus.make_haystack (held-out seeds)",
                "n_sentences": self.n_sentences, "seed": self.seed, "limit": self.n_sequences}


@dataclass
class TextFile(TextData):
    """A `.jsonl` file (one JSON object per line, text under `key`) or plain text (one text per
    non-empty line). `limit` keeps the first texts only."""

    path: str
    key: str = "text"
    limit: int | None = None

    def __post_init__(self):
        from interp.tasks.jsonl import read_user_text

        read_user_text(self.path, "--data file")  # missing, a folder, not UTF-8: refused before any caching
        p = Path(self.path)
        if self.limit is not None and self.limit < 1:
            raise InvalidInputError("limit must be >= 1")
        self.jsonl = p.suffix.lower() in (".jsonl", ".ndjson")

    def texts(self) -> Iterator[str]:
        n = 0
        with open(self.path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if self.limit is not None and n >= self.limit:
                    return
                if not line.strip():
                    continue
                if self.jsonl:
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise InvalidInputError(f"{self.path}:{lineno}: not valid JSON ({e.msg})") from None
                    except RecursionError:
                        raise InvalidInputError(f"{self.path}:{lineno}: JSON nested too deeply to be a text "
                                                f"record") from None
                    if not isinstance(obj, dict) or not isinstance(obj.get(self.key), str):
                        raise InvalidInputError(f"{self.path}:{lineno}: expected an object with a string "
                                                f"{self.key!r} field (choose the field with --text-key)")
                    yield obj[self.key]
                else:
                    yield line.rstrip("\r\n")
                n += 1

    def describe(self) -> dict:
        return {"kind": "jsonl" if self.jsonl else "text", "path": str(Path(self.path).resolve()),
                "key": self.key if self.jsonl else None, "limit": self.limit}


@dataclass
class TextList(TextData):
    items: Sequence[str] = field(default_factory=list)

    def __post_init__(self):
        if isinstance(self.items, str) or not all(isinstance(t, str) for t in self.items):
            raise InvalidInputError("TextList needs a list of strings")

    def texts(self) -> Iterator[str]:
        yield from self.items

    def describe(self) -> dict:
        return {"kind": "list"}


def as_data(data, limit: int | None = None) -> TextData:
    """A TextData from a TextData, None/'corpus' (the generator), a file path, or a list of texts."""
    if isinstance(data, TextData):
        return data
    if data is None or data == "corpus":
        return CorpusData(n_sequences=limit or 512)
    if isinstance(data, (str, Path)):
        return TextFile(str(data), limit=limit)
    if isinstance(data, (list, tuple)):
        return TextList(list(data)[:limit] if limit else list(data))
    raise InvalidInputError(f"unsupported data {type(data).__name__}: pass 'corpus', a file path or a list of texts")
