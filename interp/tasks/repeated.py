"""Repeated random-token sequences, the induction-head task: [BOS] R R with R random tokens.

Every sequence of one length has the same layout (no padding), so positions are exact:
with a BOS prefix (p = 1) and copy length L, the first copy sits at positions p .. p+L-1 and
the second at p+L .. p+2L-1; the token at p+L+k repeats the one at p+k.
Tokens within a copy are distinct by default, so every second-copy token has exactly one earlier
occurrence (the induction target is unambiguous). Seeded: the same config and pool give the same
ids on every platform (torch's CPU generator).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from interp.errors import InvalidInputError

TOKEN_SOURCES = ("auto", "vocab", "corpus")


@dataclass
class RepeatedConfig:
    """Repeated random-token sequences: for each copy length in `lengths`, `n_seqs` sequences of a random
    copy repeated `repeats` times (length i seeded `seed + i`); `distinct`: no token twice within a copy;
    `bos`: prefix the tokenizer's BOS (when the model has one)."""

    lengths: tuple[int, ...] = (50,)  # tokens per copy
    n_seqs: int = 32  # sequences per length
    seed: int = 0
    repeats: int = 2
    distinct: bool = True  # no token twice within one copy
    bos: bool = True  # prefix the tokenizer's BOS (when the model has one)

    def __post_init__(self):
        self.lengths = tuple(int(n) for n in self.lengths)
        if not self.lengths or min(self.lengths) < 2:
            raise InvalidInputError("repeated-sequence lengths must be >= 2 tokens per copy")
        if self.n_seqs < 2:
            raise InvalidInputError("n_seqs must be >= 2 (confidence intervals need at least two sequences)")
        if self.repeats < 2:
            raise InvalidInputError("repeats must be >= 2: induction needs a second copy")


@dataclass
class RepeatedBatch:
    ids: torch.Tensor  # [n, prefix + repeats * length]
    length: int
    prefix: int  # 1 with a BOS token, else 0
    repeats: int
    seed: int
    pool_size: int = 0
    seeds: list[int] = field(default_factory=list)

    def copy_span(self, k: int) -> tuple[int, int]:
        """[start, end) positions of copy k (0 = first)."""
        start = self.prefix + k * self.length
        return start, start + self.length

    @property
    def seq_len(self) -> int:
        return self.ids.shape[1]


def build_repeated(pool: Sequence[int], length: int, n: int, seed: int, bos_id: int | None = None,
                   repeats: int = 2, distinct: bool = True) -> RepeatedBatch:
    """`n` sequences of `length` tokens drawn from `pool`, each repeated `repeats` times."""
    pool_t = torch.as_tensor(sorted(set(int(t) for t in pool)), dtype=torch.long)
    if pool_t.numel() < 2:
        raise InvalidInputError("the token pool needs at least 2 distinct token ids")
    if distinct and length > pool_t.numel():
        raise InvalidInputError(f"cannot draw {length} distinct tokens from a pool of {pool_t.numel()}; "
                                "shorten the copies or allow repeated tokens (distinct=False)")
    g = torch.Generator().manual_seed(int(seed))
    rows = []
    for _ in range(n):
        if distinct:
            r = pool_t[torch.randperm(pool_t.numel(), generator=g)[:length]]
        else:
            r = pool_t[torch.randint(pool_t.numel(), (length,), generator=g)]
        rows.append(r.repeat(repeats))
    ids = torch.stack(rows)
    prefix = 0
    if bos_id is not None:
        ids = torch.cat([torch.full((n, 1), int(bos_id), dtype=torch.long), ids], dim=1)
        prefix = 1
    return RepeatedBatch(ids=ids, length=length, prefix=prefix, repeats=repeats, seed=int(seed),
                         pool_size=int(pool_t.numel()))


def build_repeated_batches(pool: Sequence[int], config: RepeatedConfig, bos_id: int | None) -> list[RepeatedBatch]:
    """One batch per configured length; length i uses seed `config.seed + i` (paired across conditions)."""
    return [build_repeated(pool, length, config.n_seqs, config.seed + i, bos_id if config.bos else None,
                           config.repeats, config.distinct)
            for i, length in enumerate(config.lengths)]


def resolve_source(model, source: str | Sequence[int]) -> str:
    """'auto' is 'corpus' for a model with a tokenizer, else 'vocab'; explicit ids are 'ids'."""
    if not isinstance(source, str):
        return "ids"
    if source == "auto":
        return "corpus" if model.tokenizer is not None else "vocab"
    return source


def token_pool(model, source: str | Sequence[int] = "auto", n_docs: int = 200) -> list[int]:
    """Token ids to draw from.

    "vocab": every id of the vocabulary except the tokenizer's special tokens.
    "corpus": ids that occur in `n_docs` held-out documents of interp's corpus generator, tokenized
        with the model's tokenizer: tokens the model has seen in ordinary text (a vocabulary also
        holds tokens a model never trained on, e.g. unused byte tokens of the organisms' BPE, whose
        huge losses would swamp the copy), what the bundled organisms were trained on.
    "auto": "corpus" when the model has a tokenizer, else "vocab".
    A sequence of ids is used as given (validated against the vocabulary).
    """
    vocab = model.spec.d_vocab
    special = set(getattr(model.tokenizer, "all_special_ids", None) or []) if model.tokenizer is not None else set()
    kind = resolve_source(model, source)
    if kind == "vocab":
        return [t for t in range(vocab) if t not in special]
    if kind == "corpus":
        if model.tokenizer is None:
            raise InvalidInputError("token source 'corpus' needs a tokenizer; pass token ids or use 'vocab'")
        from interp import corpus

        seen: set[int] = set()
        for i in range(n_docs):
            for text in corpus.sample_text(corpus.heldout_seed(800_000 + i), 1):
                seen.update(model.tokenizer(text, add_special_tokens=False)["input_ids"])
        return sorted(t for t in seen if t not in special and 0 <= t < vocab)
    if kind != "ids":
        raise InvalidInputError(f"unknown token source {source!r}; valid: {', '.join(TOKEN_SOURCES)} or a list of ids")
    ids = sorted({int(t) for t in source})
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise InvalidInputError(f"token ids {bad[:5]} are outside the vocabulary 0..{vocab - 1}")
    return ids


def bos_id(model) -> int | None:
    tok = model.tokenizer
    if tok is None:
        return None
    return tok.bos_token_id
