"""Training documents of the procedural corpus (types (a)-(d)); see :mod:`interp.corpus`.

Each builder takes ``(rng, budget, count)`` and returns ``(text, tag)`` pieces
whose token count (``count`` is a per-piece token counter) stays within ``budget``.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from interp.corpus.prose import (
    ADJECTIVES,
    ANIMALS,
    COLORS,
    NAMES,
    NOUNS,
    PLACES,
    VERBS,
    Piece,
    RngLike,
    _approx_tokens,
    _haystack_sentences,
    as_rng,
    make_needle_full,
    make_sentences,
    niah_pieces,
)

# Each builder returns pieces.  ``count`` is a per-piece token counter and
# ``budget`` a token budget the document must not exceed (the caller packs).


def needle_doc(r: random.Random, budget: int, count: Callable[[str], int]) -> list[Piece]:
    """(a) 0-3 distractor needles plus one target needle at a random depth, then the Q/A.

    Some documents go on to ask about (some of) the distractors too, each
    question followed by its answer.
    """
    n_distractors = r.choice((0, 0, 1, 1, 2, 3))
    distractors = []
    for _ in range(n_distractors):
        distractors.append(make_needle_full(r, [d.key for d in distractors]))
    target = make_needle_full(r, [d.key for d in distractors])
    extra = r.sample(distractors, r.randint(0, n_distractors))
    qa_len = sum(count(n.question) + count(n.answer) + 1 for n in extra)
    answer_len = count(target.answer) + 1
    pieces, _ = niah_pieces(
        r, r.random(), n_tokens=budget - answer_len - qa_len, count_tokens=count,
        needle=target, distractors=distractors,
    )
    pieces += [(target.answer, "answer"), (".", "text")]
    for n in extra:
        pieces += [(n.question, "question"), (n.answer, "answer"), (".", "text")]
    return pieces


def recall_doc(r: random.Random, budget: int, count: Callable[[str], int]) -> list[Piece]:
    """(a') 2-8 needles scattered through filler, then questions about most of them.

    A multi-query associative-recall document (after the MQAR task of Arora et al. 2023,
    "Zoology"): many answers per document give a dense retrieval signal, and several
    needles sharing digits force the lookup to go through the key, not the digits alone.
    """
    n = r.randint(2, 8)
    needles: list = []
    for _ in range(n):
        needles.append(make_needle_full(r, [d.key for d in needles]))
    asked = r.sample(needles, r.randint(max(1, n // 2), n))

    def size(ns, qs):
        return sum(count(x.sentence) for x in ns) + sum(
            count(q.question) + count(q.answer) + 1 for q in qs)

    while len(needles) > 1 and size(needles, asked) > budget * 0.6:
        drop = needles.pop()
        asked = [q for q in asked if q is not drop] or [needles[0]]
    if size(needles, asked) > budget:
        return filler_doc(r, budget, count)
    hay = _haystack_sentences(None, r, budget - size(needles, asked), count)
    pieces: list[Piece] = [(x, "text") for x in hay]
    for nd in needles:
        pieces.insert(r.randint(0, len(pieces)), (nd.sentence, "needle"))
    for q in asked:
        pieces += [(q.question, "question"), (q.answer, "answer"), (".", "text")]
    return pieces


def _word_salad(r: random.Random, n: int) -> str:
    pools = (NOUNS, ADJECTIVES, NAMES, VERBS, PLACES)
    words = []
    for _ in range(n):
        u = r.random()
        if u < 0.03:
            words.append(str(r.randint(0, 9999)))
        elif u < 0.08:
            words.append(r.choice(",.;:!?"))
        else:
            words.append(r.choice(r.choice(pools)))
    return "".join(w if w in ",.;:!?" else " " + w for w in words)


def salad_doc(r: random.Random, budget: int, count: Callable[[str], int]) -> list[Piece]:
    """(b) a word-salad passage repeated verbatim 2-4 times (pure in-context copying)."""
    reps = r.choice((2, 2, 3, 4))
    n = max(2, int(budget / reps / 1.3))
    passage = _word_salad(r, n)
    while count(passage) * reps > budget and n > 2:
        n = int(n * 0.85)
        passage = _word_salad(r, n)
    if count(passage) * reps > budget:
        return filler_doc(r, budget, count)
    return [(passage, "text")] + [(passage, "copy")] * (reps - 1)


def induction_doc(r: random.Random, budget: int, count: Callable[[str], int],
                  salad: bool | None = None) -> list[Piece]:
    """(b) a passage (prose or word salad), an optional gap, then the passage verbatim."""
    gap = make_sentences(r, r.choice((0, 0, 1, 3))) if budget > 64 else []
    gap_len = sum(count(s) for s in gap)
    half = max(4, (budget - gap_len) // 2)
    if salad is None:
        salad = r.random() < 0.5
    if not salad:
        sents = _haystack_sentences(None, r, half, count)
        if not sents:
            return filler_doc(r, budget, count)
        passage = "".join(sents)
    else:
        n = max(2, int(half / 1.4))
        passage = _word_salad(r, n)
        while count(passage) > half and n > 2:
            n = int(n * 0.85)
            passage = _word_salad(r, n)
    if 2 * count(passage) + gap_len > budget:
        gap = []
    return [(passage, "text")] + [(s, "text") for s in gap] + [(passage, "copy")]


_LIST_HEADS = (
    ("Guests arriving", NAMES),
    ("Colors on the flag", COLORS),
    ("Animals in the barn", ANIMALS),
    ("Towns on the route", PLACES),
)


def list_doc(r: random.Random, budget: int, count: Callable[[str], int]) -> list[Piece]:
    """(c) lists drawn without replacement (copy suppression), sometimes from an invitation list."""
    head, pool = r.choice(_LIST_HEADS)
    pieces: list[Piece] = []
    if r.random() < 0.5:
        pool = r.sample(pool, r.randint(4, min(12, len(pool))))
        pieces.append((f" Invited: {', '.join(pool)}.", "text"))
        head = "Arrived"
    items = r.sample(pool, r.randint(2, len(pool)))
    pieces.append((f" {head}: {items[0]}", "text"))
    pieces += [(f", {x}", "text") for x in items[1:]]
    pieces.append((".", "text"))
    out, total = [], 0
    for p in pieces:
        c = count(p[0])
        if total + c > budget:
            break
        out.append(p)
        total += c
    return out


def filler_doc(r: random.Random, budget: int, count: Callable[[str], int]) -> list[Piece]:
    """(d) plain filler prose."""
    return [(s, "text") for s in _haystack_sentences(None, r, budget, count)]


DOC_BUILDERS = {
    "needle": needle_doc,
    "recall": recall_doc,
    "induction": induction_doc,
    "salad": salad_doc,
    "list": list_doc,
    "filler": filler_doc,
}


def sample_text(rng: RngLike, n_docs: int = 1) -> list[str]:
    """Plain-text documents of all types (used to fit the tokenizer)."""
    r = as_rng(rng)
    out = []
    for _ in range(n_docs):
        kind = r.choice(sorted(DOC_BUILDERS))
        pieces = DOC_BUILDERS[kind](r, r.choice((64, 128, 256)), _approx_tokens)
        out.append("".join(p for p, _ in pieces))
    return out
