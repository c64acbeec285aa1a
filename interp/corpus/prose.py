"""Word lists, filler sentences, haystacks, needles and NIAH prompts; seeds.

The building blocks of the procedural corpus (see :mod:`interp.corpus` for the piece/tag,
needle and seed conventions); the training document builders are in :mod:`.documents`.
Plain Python (``random.Random``) only.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Piece = tuple[str, str]
RngLike = int | str | random.Random

HELDOUT_SEED_MIN = 1_000_000_000
HELDOUT_SEED_MAX = 2_000_000_000

NAMES = ["Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry", "Irene", "Jack", "Karen", "Leo", "Maria", "Nathan", "Olivia", "Peter", "Quinn", "Rosa", "Samuel", "Tina", "Victor", "Wendy", "Xavier", "Yara", "Zoe", "Oscar", "Hannah", "Ivan", "Julia", "Kevin", "Laura", "Martin", "Nora", "Paul", "Ruth", "Simon", "Uma", "Walter", "Helen", "George"]
ADJECTIVES = ["red", "blue", "green", "yellow", "silver", "golden", "purple", "orange", "black", "white", "old", "new", "tiny", "huge", "quiet", "loud", "bright", "dark", "warm", "cold", "heavy", "light", "soft", "shiny", "dusty", "wooden", "broken", "hidden", "ancient", "narrow", "wide", "gentle", "brave", "clever", "lazy", "happy", "sad", "strange", "famous", "small"]
NOUNS = ["lantern", "door", "window", "table", "chair", "book", "river", "garden", "bridge", "tower", "ship", "wagon", "basket", "candle", "mirror", "clock", "key", "map", "bottle", "coin", "ring", "shell", "stone", "feather", "drum", "bell", "kettle", "ladder", "blanket", "cup", "hat", "boot", "road", "forest", "hill", "lake", "island", "castle", "market", "cabin", "barn", "horse", "bird", "cat", "dog", "rabbit", "tiger", "dragon", "robot", "engine", "rocket", "piano", "violin", "painting", "letter", "statue", "compass", "anchor", "helmet", "shield", "lamp", "mountain", "village"]
PLACES = ["Riverton", "Oakvale", "Stonebridge", "Maplewood", "Ashford", "Brookside", "Clearwater", "Dunmore", "Elmstead", "Fairhaven", "Greystone", "Highmoor", "Lakeshore", "Millbrook", "Northwick"]
VERBS = ["found", "painted", "carried", "opened", "closed", "cleaned", "repaired", "sold", "bought", "watched", "visited", "moved", "dropped", "lifted", "borrowed", "hid", "built", "followed", "counted", "drew"]
TIMES = (
    "in the morning", "at noon", "in the evening", "at night", "on Monday", "on Friday",
    "last winter", "last summer", "before dinner", "after lunch", "at dawn", "yesterday",
)
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "morning", "evening"]
COLORS = ["red", "blue", "green", "yellow", "silver", "golden", "purple", "orange", "black", "white", "pink", "brown"]
ANIMALS = ["horse", "bird", "cat", "dog", "rabbit", "tiger", "dragon", "fox", "owl", "goat", "sheep", "mouse", "bear", "wolf", "deer"]
# Needle key phrases are (adjective, noun) pairs drawn from these lists.
NEEDLE_ADJECTIVES = COLORS + ["wooden", "hidden", "ancient", "shiny", "dusty", "broken", "famous", "strange"]
NEEDLE_NOUNS = ["lantern", "door", "window", "table", "chair", "book", "bridge", "tower", "ship", "wagon", "basket", "candle", "mirror", "clock", "key", "map", "bottle", "coin", "ring", "shell", "stone", "feather", "drum", "bell", "kettle", "ladder", "blanket", "cup", "hat", "boot", "castle", "cabin", "piano", "violin", "painting", "statue", "compass", "anchor", "helmet", "shield", "lamp"]

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


def make_sentences(rng: RngLike, n: int) -> list[str]:
    r = as_rng(rng)
    return [make_sentence(r) for _ in range(n)]


def make_haystack(
    n_sentences: int | None = None,
    rng: RngLike = 0,
    *,
    n_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
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


def _haystack_sentences(n_sentences, rng, n_tokens, count_tokens) -> list[str]:
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
    sentence: str  # " The secret code of the green lantern is Oscar."
    question: str  # " What is the secret code of the green lantern? The secret code of the green lantern is"
    answer: str  # " Oscar"
    key: str  # "green lantern"
    value: str  # "Oscar"


# Needle values: one capitalised word (a name or a town), a single token of the organism
# tokenizer, so that an answer is one lookup.  The first organisms used 4-digit codes: trained
# for up to 25 min they retrieved the first digit of a far needle (96-100% at every depth) but
# never learned to copy the following digits in order (recall 0.05 below depth 1.0); see
# docs/organisms.md.
CODE_WORDS = NAMES + PLACES


def make_needle_full(rng: RngLike, exclude_keys: Sequence[str] = ()) -> Needle:
    r = as_rng(rng)
    while True:
        key = f"{r.choice(NEEDLE_ADJECTIVES)} {r.choice(NEEDLE_NOUNS)}"
        if key not in exclude_keys:
            break
    value = r.choice(CODE_WORDS)
    stem = f" The secret code of the {key} is"
    return Needle(
        sentence=f"{stem} {value}.",
        question=f" What is the secret code of the {key}?{stem}",
        answer=f" {value}",
        key=key,
        value=value,
    )


def make_needle(rng: RngLike) -> tuple[str, str, str]:
    """``(needle_sentence, question, answer)``; ``question + answer`` is a true continuation."""
    n = make_needle_full(rng)
    return n.sentence, n.question, n.answer


def niah_pieces(
    rng: RngLike,
    depth: float,
    *,
    n_sentences: int | None = None,
    n_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    n_distractors: int = 0,
    needle: Needle | None = None,
    distractors: Sequence[Needle] | None = None,
) -> tuple[list[Piece], Needle]:
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
    pieces: list[Piece] = [(s, "text") for s in hay]
    for d in distractors:
        pieces.insert(r.randint(0, len(pieces)), (d.sentence, "distractor"))
    # depth counts haystack sentences (distractors included) before the needle
    pos = round(depth * len(pieces))
    pieces.insert(pos, (target.sentence, "needle"))
    pieces.append((target.question, "question"))
    return pieces, target


def make_niah_prompt(
    depth: float,
    rng: RngLike,
    *,
    n_sentences: int | None = None,
    n_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    n_distractors: int = 0,
) -> dict:
    """A full NIAH prompt.

    Returns ``{"prompt", "answer", "needle", "question", "key", "value", "depth",
    "needle_char_span"}``; ``prompt`` ends with the question stem, so the answer
    (``" Oscar"``) is the expected continuation.  The tokenizer adds ``<s>``.
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
