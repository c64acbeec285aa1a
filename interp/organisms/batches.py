"""Packing corpus documents into fixed-length training sequences."""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch
from tokenizers import Tokenizer

from interp.corpus import DOC_BUILDERS, ioi_doc, train_rng
from interp.corpus.ioi import ioi_composed_doc, ioi_episodes, ioi_words_doc
from interp.organisms.tokenizer import BOS, EOS, encode_pieces, token_counter

# Fraction of documents of each type (the first document of each sequence is
# drawn from this mix; the space left after it is packed from the same mix).
DEFAULT_MIX: dict[str, float] = {
    "needle": 0.25, "recall": 0.25, "induction": 0.15, "salad": 0.05, "tokens": 0.1, "list": 0.1,
    "filler": 0.1,
}
# Mix of the first ``warm_steps`` steps: mostly verbatim repeats of strings of random
# vocabulary words ("tokens" documents), which makes induction heads form early (the
# corpus mix alone, even with 75% word-salad repeats, left them unformed after 250 steps).
WARM_MIX: dict[str, float] = {"tokens": 0.5, "salad": 0.2, "needle": 0.3}
ANSWER_WEIGHT = 5.0
NUMBER_RATE = 0.25


def vocab_words(tok: Tokenizer) -> list[str]:
    """Every vocabulary entry that is a space plus letters (e.g. ``" lantern"``, ``" lan"``)."""
    out = []
    for t in sorted(tok.get_vocab(), key=tok.token_to_id):
        text = tok.decode([tok.token_to_id(t)])
        if len(text) > 1 and text[0] == " " and text[1:].isalpha() and text[1:].isascii():
            out.append(text)
    return out


def tokens_doc(words: Sequence[str]):
    """(b) a string of random vocabulary words and numbers repeated verbatim 2-4 times.

    Numbers (a quarter of the items) train digit-by-digit copying, which the needle
    answers need (a first run without them retrieved the first digit of far needles
    but not the rest).
    """

    def build(r: random.Random, budget: int, count) -> list[tuple[str, str]]:
        reps = r.choice((2, 3, 4))
        chosen = [
            r.choice(words) if r.random() > NUMBER_RATE else " " + str(r.randint(0, 9999))
            for _ in range(max(1, budget // reps))
        ]
        passage = "".join(chosen)
        while count(passage) * reps > budget and len(chosen) > 1:
            chosen = chosen[: max(1, min(len(chosen) - 1, int(len(chosen) * 0.85)))]
            passage = "".join(chosen)
        if count(passage) * reps > budget:
            return []
        return [(passage, "text")] + [(passage, "copy")] * (reps - 1)

    return build


class Packer:
    """Builds ``(input_ids, labels, weights)`` for one optimisation step."""

    def __init__(self, tok: Tokenizer, mix: dict[str, float] | None = None,
                 answer_weight: float = ANSWER_WEIGHT, ioi_episode_tokens: int = 0):
        self.tok = tok
        self.mix = dict(mix or DEFAULT_MIX)
        self.kinds = sorted(self.mix)
        self.probs = [self.mix[k] for k in self.kinds]
        self.answer_weight = answer_weight
        self.bos = tok.token_to_id(BOS)
        self.eos = tok.token_to_id(EOS)
        self._count = token_counter(tok)
        self._cache: dict[str, int] = {}
        # IOI documents are only drawn when a mix names them (recipe options `ioi`, `ioi_kind`, `ioi_words`);
        # the "_words" kinds have vocabulary words for people
        words = vocab_words(tok)
        self.builders = dict(DOC_BUILDERS, tokens=tokens_doc(words), ioi=ioi_doc, ioi_composed=ioi_composed_doc)
        for kind in [k for k in self.mix if k.endswith("_words")]:
            self.builders[kind] = ioi_words_doc(words, composed=kind == "ioi_composed_words")
        if ioi_episode_tokens:  # recipe option `ioi_episode_tokens`: one IOI prompt per that many tokens of budget
            for kind in [k for k in self.builders if k.startswith("ioi")]:
                self.builders[kind] = ioi_episodes(self.builders[kind], ioi_episode_tokens)

    def count(self, text: str) -> int:
        c = self._cache.get(text)
        if c is None:
            c = self._count(text)
            if len(self._cache) < 200_000:
                self._cache[text] = c
        return c

    def ids_doc(self, r: random.Random, budget: int) -> tuple[list[int], list[str]]:
        """(c) ids drawn uniformly from the whole vocabulary (10 .. V-10, the random-id copy evaluation's
        range) repeated verbatim 2-4 times: copying that does not depend on familiar tokens, and a calibrated
        first copy (the next id of a random string is uniform)."""
        reps = r.choice((2, 3, 4))
        n = max(1, budget // reps)
        v = self.tok.get_vocab_size()
        run = [r.randrange(10, v - 10) for _ in range(n)]
        return run * reps, ["text"] * n + ["copy"] * (n * (reps - 1))

    def sequence(self, r: random.Random, length: int) -> tuple[list[int], list[str]]:
        """``length + 1`` token ids (starting with BOS) and their tags."""
        ids, tags = [self.bos], ["text"]
        first = True
        while len(ids) < length + 1:
            rem = length + 1 - len(ids) - 1  # keep one slot for EOS
            if rem < 8:
                break
            kind = r.choices(self.kinds, self.probs)[0]
            if kind == "ids":
                frac = max(r.random(), r.random()) if first else r.random()
                d_ids, d_tags = self.ids_doc(r, max(8, int(rem * frac)) if rem > 48 else rem)
                first = False
                ids += d_ids[:rem] + [self.eos]
                tags += d_tags[:rem] + ["text"]
                continue
            if kind in ("needle", "induction", "salad", "tokens"):
                frac = max(r.random(), r.random()) if first else r.random()
                budget = max(8, int(rem * frac)) if rem > 48 else rem
            else:
                budget = rem
            pieces = self.builders[kind](r, budget, self.count)
            first = False
            d_ids, d_tags = encode_pieces(self.tok, pieces)
            if not d_ids:
                continue
            ids += d_ids[:rem] + [self.eos]
            tags += d_tags[:rem] + ["text"]
        while len(ids) < length + 1:  # top up with filler, truncated
            d_ids, d_tags = encode_pieces(self.tok, DOC_BUILDERS["filler"](r, 32, self.count))
            ids += d_ids or [self.eos]
            tags += d_tags or ["text"]
        return ids[: length + 1], tags[: length + 1]

    def batch(self, seed: int, step: int, length: int, batch_size: int):
        rows = [self.sequence(train_rng(seed, step, i), length) for i in range(batch_size)]
        ids = torch.tensor([r[0] for r in rows], dtype=torch.long)
        w = torch.tensor(
            [[self.answer_weight if t == "answer" else 1.0 for t in r[1][1:]] for r in rows]
        )
        return ids[:, :-1], ids[:, 1:], w, _mask(rows, "answer"), _mask(rows, "copy")


def _mask(rows: Sequence[tuple[list[int], list[str]]], tag: str) -> torch.Tensor:
    return torch.tensor([[t == tag for t in r[1][1:]] for r in rows], dtype=torch.bool)
