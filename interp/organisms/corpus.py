"""Seeded procedural corpus for the bundled model organisms.

Everything here is plain Python (``random.Random``), so a given seed yields the
same text on every platform and Python version >= 3.2.

Documents are returned as a list of *pieces* ``(text, tag)``.  Every piece starts
at a pre-token boundary of the organism tokenizer (pieces begin with a space or
with punctuation), so tokenizing the pieces one by one and concatenating the ids
gives exactly the tokenization of the joined text.  Tags mark spans that matter
for training and analysis: ``"needle"``, ``"question"``, ``"answer"``,
``"distractor"``, ``"copy"`` (the repeated half of an induction passage) and
``"text"`` for everything else.

Needle convention (used by the NIAH harness)::

    needle   = " The secret code of the green lantern is 4821."
    question = " What is the secret code of the green lantern?"
               " The secret code of the green lantern is"
    answer   = " 4821"

The question restates the key phrase so that the answer is the direct
continuation of the prompt; recall is scored by checking that the answer's
digits (``answer.strip()``) appear in the greedy continuation.

Seeds: integer seeds in ``[HELDOUT_SEED_MIN, HELDOUT_SEED_MAX)`` are reserved
for evaluation.  Training never uses integer seeds: it draws every sequence from
``random.Random("train/<seed>/<step>/<row>")`` (a disjoint, string-keyed
namespace; see :func:`train_rng`), and the tokenizer is fitted on
``random.Random("tokenizer/<i>")`` documents.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple, Union

Piece = Tuple[str, str]
RngLike = Union[int, str, random.Random]

HELDOUT_SEED_MIN = 1_000_000_000
HELDOUT_SEED_MAX = 2_000_000_000

NAMES = (
    "Alice Bob Carol David Emma Frank Grace Henry Irene Jack Karen Leo Maria Nathan "
    "Olivia Peter Quinn Rosa Samuel Tina Victor Wendy Xavier Yara Zoe Oscar Hannah Ivan "
    "Julia Kevin Laura Martin Nora Paul Ruth Simon Uma Walter Helen George"
).split()
ADJECTIVES = (
    "red blue green yellow silver golden purple orange black white old new tiny huge "
    "quiet loud bright dark warm cold heavy light soft shiny dusty wooden broken hidden "
    "ancient narrow wide gentle brave clever lazy happy sad strange famous small"
).split()
NOUNS = (
    "lantern door window table chair book river garden bridge tower ship wagon basket "
    "candle mirror clock key map bottle coin ring shell stone feather drum bell kettle "
    "ladder blanket cup hat boot road forest hill lake island castle market cabin barn "
    "horse bird cat dog rabbit tiger dragon robot engine rocket piano violin painting "
    "letter statue compass anchor helmet shield lamp mountain village"
).split()
PLACES = (
    "Riverton Oakvale Stonebridge Maplewood Ashford Brookside Clearwater Dunmore Elmstead "
    "Fairhaven Greystone Highmoor Lakeshore Millbrook Northwick"
).split()
VERBS = (
    "found painted carried opened closed cleaned repaired sold bought watched visited "
    "moved dropped lifted borrowed hid built followed counted drew"
).split()
TIMES = (
    "in the morning", "at noon", "in the evening", "at night", "on Monday", "on Friday",
    "last winter", "last summer", "before dinner", "after lunch", "at dawn", "yesterday",
)
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday morning evening".split()
COLORS = "red blue green yellow silver golden purple orange black white pink brown".split()
ANIMALS = "horse bird cat dog rabbit tiger dragon fox owl goat sheep mouse bear wolf deer".split()
# Needle key phrases are (adjective, noun) pairs drawn from these lists.
NEEDLE_ADJECTIVES = COLORS + "wooden hidden ancient shiny dusty broken famous strange".split()
NEEDLE_NOUNS = (
    "lantern door window table chair book bridge tower ship wagon basket candle mirror "
    "clock key map bottle coin ring shell stone feather drum bell kettle ladder blanket "
    "cup hat boot castle cabin piano violin painting statue compass anchor helmet shield lamp"
).split()

_FILLER_TEMPLATES = (
    "{N} {V} the {a} {n} {T}.",
    "The {a} {n} was near the {n2} in {P}.",
    "There were {k} {ns} beside the {a} {n2}.",
    "{N} and {N2} walked to the {n} {T}.",
    "In {P}, {N} {V} {an} {n}.",
    "The {n} of {N} was {a} and {a2}.",
    "{N} said that the {n} looked {a}.",
    "Every {D}, {N} {V} {k} {ns}.",
    "{An} {n} stood next to the {a2} {n2}.",
    "{N} wrote a letter about the {a} {n}.",
    "Nobody knew why the {n} was so {a}.",
    "The {a} {ns} of {P} were {a2}.",
    "After the storm, {N} found {k} {a} {ns}.",
    "{N} gave the {n} to {N2} {T}.",
    "It was a {a} day in {P}.",
    "{N} could not find the {a} {n} anywhere.",
    "The road to {P} passed {k} {a} {ns}.",
    "When {N} came home, the {n} had become {a}.",
)


def as_rng(rng: RngLike) -> random.Random:
    """Return ``rng`` itself if it is a ``random.Random``, else a new one seeded with it."""
    return rng if isinstance(rng, random.Random) else random.Random(rng)


def train_rng(seed: int, step: int, row: int) -> random.Random:
    """The generator for training sequence ``row`` of optimisation ``step``."""
    return random.Random(f"train/{seed}/{step}/{row}")


def heldout_seed(i: int) -> int:
    """The ``i``-th held-out (evaluation-only) integer seed."""
    seed = HELDOUT_SEED_MIN + int(i)
    if not HELDOUT_SEED_MIN <= seed < HELDOUT_SEED_MAX:
        raise ValueError(f"held-out index out of range: {i}")
    return seed


_COUNT_WORDS = (
    "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "twenty", "thirty", "forty", "fifty", "many", "several", "a few", "a dozen",
)


def _count_word(r: random.Random) -> str:
    return r.choice(_COUNT_WORDS)


def _plural(word: str) -> str:
    return word + ("es" if word.endswith(("s", "x", "ch", "sh")) else "s")


def _article(word: str) -> str:
    return "an" if word[0].lower() in "aeiou" else "a"


def make_sentence(rng: RngLike) -> str:
    """One filler sentence, with a leading space (never contains ' is ')."""
    r = as_rng(rng)
    n, n2 = r.sample(NOUNS, 2)
    a, a2 = r.sample(ADJECTIVES, 2)
    N, N2 = r.sample(NAMES, 2)
    tpl = r.choice(_FILLER_TEMPLATES)
    text = tpl.format(
        N=N, N2=N2, n=n, n2=n2, ns=_plural(n), n2s=_plural(n2), a=a, a2=a2, V=r.choice(VERBS), T=r.choice(TIMES),
        P=r.choice(PLACES), D=r.choice(DAYS), k=_count_word(r),
        an=f"{_article(a)} {a}", An=f"{_article(a).capitalize()} {a}",
    )
    return " " + text


def make_sentences(rng: RngLike, n: int) -> List[str]:
    r = as_rng(rng)
    return [make_sentence(r) for _ in range(n)]


def make_haystack(
    n_sentences: Optional[int] = None,
    rng: RngLike = 0,
    *,
    n_tokens: Optional[int] = None,
    count_tokens: Optional[Callable[[str], int]] = None,
) -> str:
    """Filler text (a haystack) with a leading space.

    Give either ``n_sentences`` or ``n_tokens``.  With ``n_tokens``, sentences are
    added while the total stays ``<= n_tokens``; ``count_tokens(text)`` counts the
    tokens of one sentence (e.g. ``lambda s: len(tok(s, add_special_tokens=False)
    ["input_ids"])``).  Without a counter, 1.25 tokens per word is assumed (about
    right for the organism tokenizer).
    """
    return "".join(_haystack_sentences(n_sentences, rng, n_tokens, count_tokens))


def _approx_tokens(text: str) -> int:
    return max(1, round(1.25 * len(text.split()) + text.count(",") + text.count(".")))


def _haystack_sentences(n_sentences, rng, n_tokens, count_tokens) -> List[str]:
    r = as_rng(rng)
    if (n_sentences is None) == (n_tokens is None):
        raise ValueError("give exactly one of n_sentences / n_tokens")
    if n_sentences is not None:
        return make_sentences(r, n_sentences)
    count = count_tokens or _approx_tokens
    out, total = [], 0
    while True:
        s = make_sentence(r)
        c = count(s)
        if total + c > n_tokens:
            return out
        out.append(s)
        total += c


@dataclass(frozen=True)
class Needle:
    sentence: str  # " The secret code of the green lantern is 4821."
    question: str  # " What is the secret code of the green lantern? The secret code of the green lantern is"
    answer: str  # " 4821"
    key: str  # "green lantern"
    value: str  # "4821"


def make_needle_full(rng: RngLike, exclude_keys: Sequence[str] = ()) -> Needle:
    r = as_rng(rng)
    while True:
        key = f"{r.choice(NEEDLE_ADJECTIVES)} {r.choice(NEEDLE_NOUNS)}"
        if key not in exclude_keys:
            break
    value = str(r.randint(1000, 9999))
    stem = f" The secret code of the {key} is"
    return Needle(
        sentence=f"{stem} {value}.",
        question=f" What is the secret code of the {key}?{stem}",
        answer=f" {value}",
        key=key,
        value=value,
    )


def make_needle(rng: RngLike) -> Tuple[str, str, str]:
    """``(needle_sentence, question, answer)``; ``question + answer`` is a true continuation."""
    n = make_needle_full(rng)
    return n.sentence, n.question, n.answer


def niah_pieces(
    rng: RngLike,
    depth: float,
    *,
    n_sentences: Optional[int] = None,
    n_tokens: Optional[int] = None,
    count_tokens: Optional[Callable[[str], int]] = None,
    n_distractors: int = 0,
    needle: Optional[Needle] = None,
    distractors: Optional[Sequence[Needle]] = None,
) -> Tuple[List[Piece], Needle]:
    """Pieces of a NIAH prompt: haystack with the needle at ``depth`` then the question.

    ``depth`` in [0, 1] is the fraction of haystack sentences placed before the
    needle (0: needle first, 1: needle right before the question).  With
    ``n_tokens`` the haystack is sized so the whole prompt (without BOS and
    without the answer) has at most ``n_tokens`` tokens.  ``n_distractors``
    other needles (different keys) are placed at random depths (or pass
    ``needle`` / ``distractors`` explicitly).
    """
    if not 0.0 <= depth <= 1.0:
        raise ValueError("depth must be in [0, 1]")
    r = as_rng(rng)
    target = needle or make_needle_full(r)
    if distractors is None:
        distractors = []
        for _ in range(n_distractors):
            distractors.append(make_needle_full(r, [target.key] + [d.key for d in distractors]))
    budget = n_tokens
    if n_tokens is not None:
        count = count_tokens or _approx_tokens
        fixed = count(target.sentence) + count(target.question)
        fixed += sum(count(d.sentence) for d in distractors)
        budget = max(0, n_tokens - fixed)
    hay = _haystack_sentences(n_sentences, r, budget, count_tokens)
    pieces: List[Piece] = [(s, "text") for s in hay]
    for d in distractors:
        pieces.insert(r.randint(0, len(pieces)), (d.sentence, "distractor"))
    # depth counts haystack sentences (distractors included) before the needle
    pos = int(round(depth * len(pieces)))
    pieces.insert(pos, (target.sentence, "needle"))
    pieces.append((target.question, "question"))
    return pieces, target


def make_niah_prompt(
    depth: float,
    rng: RngLike,
    *,
    n_sentences: Optional[int] = None,
    n_tokens: Optional[int] = None,
    count_tokens: Optional[Callable[[str], int]] = None,
    n_distractors: int = 0,
) -> dict:
    """A full NIAH prompt.

    Returns ``{"prompt", "answer", "needle", "question", "key", "value", "depth",
    "needle_char_span"}``; ``prompt`` ends with the question stem, so the answer
    (``" 4821"``) is the expected continuation.  The tokenizer adds ``<s>``.
    """
    pieces, needle = niah_pieces(
        rng, depth, n_sentences=n_sentences, n_tokens=n_tokens,
        count_tokens=count_tokens, n_distractors=n_distractors,
    )
    text, start = "", -1
    for piece, tag in pieces:
        if tag == "needle":
            start = len(text)
        text += piece
    return {
        "prompt": text,
        "answer": needle.answer,
        "needle": needle.sentence,
        "question": needle.question,
        "key": needle.key,
        "value": needle.value,
        "depth": depth,
        "needle_char_span": (start, start + len(needle.sentence)),
    }


# ----------------------------------------------------------------------------- documents
# Each builder returns pieces.  ``count`` is a per-piece token counter and
# ``budget`` a token budget the document must not exceed (the caller packs).


def needle_doc(r: random.Random, budget: int, count: Callable[[str], int]) -> List[Piece]:
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


def salad_doc(r: random.Random, budget: int, count: Callable[[str], int]) -> List[Piece]:
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
                  salad: Optional[bool] = None) -> List[Piece]:
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


def list_doc(r: random.Random, budget: int, count: Callable[[str], int]) -> List[Piece]:
    """(c) lists drawn without replacement (copy suppression), sometimes from an invitation list."""
    head, pool = r.choice(_LIST_HEADS)
    pieces: List[Piece] = []
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


def filler_doc(r: random.Random, budget: int, count: Callable[[str], int]) -> List[Piece]:
    """(d) plain filler prose."""
    return [(s, "text") for s in _haystack_sentences(None, r, budget, count)]


DOC_BUILDERS = {
    "needle": needle_doc,
    "induction": induction_doc,
    "salad": salad_doc,
    "list": list_doc,
    "filler": filler_doc,
}


def sample_text(rng: RngLike, n_docs: int = 1) -> List[str]:
    """Plain-text documents of all types (used to fit the tokenizer)."""
    r = as_rng(rng)
    out = []
    for _ in range(n_docs):
        kind = r.choice(sorted(DOC_BUILDERS))
        pieces = DOC_BUILDERS[kind](r, r.choice((64, 128, 256)), _approx_tokens)
        out.append("".join(p for p, _ in pieces))
    return out
