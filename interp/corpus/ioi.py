"""Indirect-object identification (IOI) prompts, after Wang et al. (2022), "Interpretability in the
Wild": ``" When Mary and John walked to the market, John gave the lantern to"`` -> ``" Mary"``.

A prompt names two people in a first clause, repeats one of them (the subject, S) as the giver of
the second clause, and ends right before the receiver: the expected continuation is the other name,
the indirect object (IO). The two orders of the first clause are both generated: ``ABBA`` (IO first:
"When Mary and John ..., John gave ... to" -> Mary) and ``BABA`` (S first: "When John and Mary ...,
John gave ... to" -> Mary).

Names come from the corpus's own list (:data:`interp.corpus.NAMES`; each is one token of the organism
tokenizer with its leading space, which ``tests/organisms/test_v2.py`` checks), templates are this
module's :data:`TEMPLATES` (written for this package, in the corpus's vocabulary). Both are split once,
by a fixed seed, into a train part and a held-out part (:func:`ioi_split`): the held-out names and
templates are for evaluation only, so a future organisms build can add IOI documents
(:func:`ioi_doc`, train split only) to its mix and still be measured on prompts it never saw.
Every name occurrence in a template follows a space (prompts start with one, like every corpus
piece), so each name is one token wherever it appears and a prompt with other names has the same
token length.

Plain Python (``random.Random``), like the rest of :mod:`interp.corpus`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from interp.errors import InvalidInputError
from interp.corpus.prose import NAMES, PLACES, TIMES, Piece, as_rng

# {A} and {B}: the first clause's two names in order; {S}: the subject, repeated as the giver.
# Fill slots: {obj} an object, {place} a place noun, {P} a town, {T} a time phrase.
TEMPLATES = (
    " When {A} and {B} walked to the {place}, {S} gave the {obj} to",
    " After {A} and {B} came home {T}, {S} gave the {obj} to",
    " In {P}, {A} and {B} found the {obj}. {S} gave it to",
    " When {A} and {B} visited {P}, {S} sold the {obj} to",
    " {A} and {B} walked to the {place} {T}. {S} handed the {obj} to",
    " After the storm, {A} and {B} repaired the {obj}. Then {S} gave it to",
    " While {A} and {B} were in {P}, {S} wrote a letter to",
    " {A} and {B} bought the {obj} at the market. Later, {S} gave it to",
    " When {A} and {B} sat near the {place}, {S} showed the {obj} to",
)
OBJECTS = ("lantern", "book", "key", "map", "bottle", "coin", "ring", "shell", "cup", "hat", "candle", "basket",
           "bell", "drum", "feather", "kettle", "blanket", "compass")
PLACE_NOUNS = ("market", "bridge", "garden", "river", "tower", "castle", "forest", "lake", "cabin", "barn",
               "village", "hill")
ORDERS = ("ABBA", "BABA")
SPLITS = ("train", "heldout")
SPLIT_SEED = "ioi-split/v1"
N_HELDOUT_NAMES = 12
N_HELDOUT_TEMPLATES = 3


@dataclass(frozen=True)
class IOISplit:
    """Names and template indices, each split into a train and a held-out part (disjoint)."""

    train_names: tuple[str, ...]
    heldout_names: tuple[str, ...]
    train_templates: tuple[int, ...]
    heldout_templates: tuple[int, ...]

    def names(self, split: str) -> tuple[str, ...]:
        return self.train_names if _check_split(split) == "train" else self.heldout_names

    def templates(self, split: str) -> tuple[int, ...]:
        return self.train_templates if _check_split(split) == "train" else self.heldout_templates


def _check_split(split: str) -> str:
    if split not in SPLITS:
        raise InvalidInputError(f"IOI split {split!r}: valid splits are {', '.join(SPLITS)}")
    return split


@lru_cache(maxsize=1)
def ioi_split() -> IOISplit:
    """The fixed split (seed :data:`SPLIT_SEED`): 12 of the 40 corpus names and 3 of the 9 templates
    are held out. It depends on nothing but this module and :data:`NAMES`."""
    r = random.Random(SPLIT_SEED)
    names = list(NAMES)
    r.shuffle(names)
    tpls = list(range(len(TEMPLATES)))
    r.shuffle(tpls)
    return IOISplit(tuple(sorted(names[N_HELDOUT_NAMES:])), tuple(sorted(names[:N_HELDOUT_NAMES])),
                    tuple(sorted(tpls[N_HELDOUT_TEMPLATES:])), tuple(sorted(tpls[:N_HELDOUT_TEMPLATES])))


@dataclass(frozen=True)
class IOIPrompt:
    """One IOI prompt. Unpacks as ``prompt, io, subject = item``; ``answer`` / ``wrong`` are the IO and
    S names with their leading space (the tokens the logit difference compares)."""

    prompt: str  # " When Mary and John walked to the market, John gave the lantern to"
    io: str  # "Mary"
    subject: str  # "John"
    template: int  # index into TEMPLATES
    order: str  # "ABBA" (IO named first) | "BABA" (S named first)
    fill: dict = field(default_factory=dict, compare=False)  # the other slots: obj, place, P, T

    def __iter__(self):
        return iter((self.prompt, self.io, self.subject))

    @property
    def answer(self) -> str:
        return " " + self.io

    @property
    def wrong(self) -> str:
        return " " + self.subject


def render(template: int, io: str, subject: str, order: str, fill: dict) -> IOIPrompt:
    """The prompt of `template` with these names, first-clause order and fill slots."""
    if order not in ORDERS:
        raise InvalidInputError(f"IOI order {order!r}: valid orders are {', '.join(ORDERS)}")
    if not 0 <= template < len(TEMPLATES):
        raise InvalidInputError(f"IOI template {template}: valid templates are 0..{len(TEMPLATES) - 1}")
    if io == subject:
        raise InvalidInputError(f"IOI prompt: the indirect object and the subject are the same name ({io!r})")
    a, b = (io, subject) if order == "ABBA" else (subject, io)
    text = TEMPLATES[template].format(A=a, B=b, S=subject, **fill)
    return IOIPrompt(text, io, subject, template, order, dict(fill))


def random_fill(r: random.Random) -> dict:
    return {"obj": r.choice(OBJECTS), "place": r.choice(PLACE_NOUNS), "P": r.choice(PLACES), "T": r.choice(TIMES)}


def ioi_prompts(n: int, seed: int = 0, split: str = "heldout", names: Sequence[str] | None = None,
                templates: Sequence[int] | None = None) -> list[IOIPrompt]:
    """`n` prompts from `split`'s names and templates (or the `names` / `templates` given), seeded.

    Prompt i uses the (template, order) combination i mod (2 x templates), so templates and both orders
    are balanced; the two names are drawn without replacement, the fill slots at random. The same
    arguments give the same prompts on every platform."""
    sp = ioi_split()
    pool = tuple(sp.names(split) if names is None else names)
    tpls = tuple(sp.templates(split) if templates is None else templates)
    if n < 1:
        raise InvalidInputError(f"the number of IOI prompts must be >= 1, got {n}")
    if len(set(pool)) < 2:
        raise InvalidInputError(f"IOI prompts need at least 2 distinct names, got {len(set(pool))}")
    if not tpls:
        raise InvalidInputError("IOI prompts need at least one template")
    r = random.Random(f"ioi/{split}/{seed}")
    combos = [(t, o) for t in tpls for o in ORDERS]
    out = []
    for i in range(n):
        t, order = combos[i % len(combos)]
        io, s = r.sample(pool, 2)
        out.append(render(t, io, s, order, random_fill(r)))
    return out


# Composed TRAIN templates (recipe option ioi_kind="composed"): an opening that names {A} and {B} and a
# closing in which {S} gives something to the answer, in every combination. Written apart from TEMPLATES and
# checked against them (`composed_templates`), so the held-out templates stay unseen; with 14 x 12 frames
# the model cannot memorise where the answer sits in each one, which six fixed frames let it do.
OPENINGS = (
    " When {A} and {B} went to the {place},",
    " Yesterday {A} and {B} met near the {place}.",
    " {A} and {B} spent the day in {P}.",
    " {A} and {B} were cooking {T}.",
    " As {A} and {B} left the {place},",
    " Then {A} met {B} at the {place}.",
    " {A} and {B} found a {obj} {T}.",
    " Before {A} and {B} reached {P},",
    " At the {place}, {A} and {B} talked {T}.",
    " {A} and {B} both lived in {P}.",
    " Once {A} and {B} had cleaned the {obj},",
    " {A} visited {B} in {P} {T}.",
    " During the fair, {A} and {B} looked at the {obj}.",
    " {A} and {B} waited by the {place}.",
)
CLOSINGS = (
    " {S} gave the {obj} to",
    " {S} passed the {obj} to",
    " {S} threw a {obj} to",
    " {S} offered the {obj} to",
    " later {S} lent the {obj} to",
    " {S} sent a note to",
    " {S} brought a {obj} to",
    " {S} said goodbye to",
    " {S} read a story to",
    " {S} mailed the {obj} to",
    " then {S} sold a {obj} to",
    " {S} waved to",
)


@lru_cache(maxsize=1)
def composed_templates() -> tuple[str, ...]:
    """Every opening x closing (14 x 12 = 168 frames), minus any that equals one of :data:`TEMPLATES`."""
    fixed = set(TEMPLATES)
    return tuple(o + c for o in OPENINGS for c in CLOSINGS if o + c not in fixed)


def ioi_composed_doc(rng, budget: int, count: Callable[[str], int]) -> list[Piece]:
    """Like :func:`ioi_doc` (TRAIN names only, both orders, the IO as the answer) on a composed frame
    (:func:`composed_templates`) instead of one of the six fixed train templates."""
    return _train_doc(rng, budget, count, _composed_frame, frame_first=False)


def word_people(words: Sequence[str]) -> tuple[str, ...]:
    """The stand-ins for people of :func:`ioi_words_doc`: vocabulary words (``" lantern"``, given with their
    leading space) of at least three letters that are neither a corpus name nor the start of one, so no name
    of either split (the held-out ones above all) is ever an IOI answer through them; and neither a word of
    any frame or fill slot nor the start of one (in any case), so the answer's token never shows up a second
    time in its prompt."""
    frame_text = " ".join(TEMPLATES + OPENINGS + CLOSINGS + OBJECTS + PLACE_NOUNS + tuple(PLACES) + tuple(TIMES))
    taken = {w.lower() for w in NAMES} | set(frame_text.lower().replace(".", " ").replace(",", " ").split())
    out = tuple(sorted({w.strip() for w in words if len(w.strip()) >= 3
                        and not any(t.startswith(w.strip().lower()) for t in taken)}))
    if len(out) < 2:
        raise InvalidInputError(f"IOI word people need at least 2 vocabulary words that are not names, "
                                f"got {len(out)}")
    return out


def ioi_words_doc(words: Sequence[str], composed: bool) -> Callable[[random.Random, int, Callable[[str], int]],
                                                                     list[Piece]]:
    """A builder of IOI training documents whose two people are random vocabulary words (:func:`word_people`
    of `words`) instead of names ("When lantern and river went to the market, river gave the cup to" ->
    " lantern"), on the composed frames (`composed`) or the six fixed train templates. Only the repeat
    tells the answer apart, so a circuit trained on them cannot lean on which names tend to be answers."""
    people = word_people(words)
    frame = _composed_frame if composed else _fixed_frame
    return lambda rng, budget, count: _train_doc(rng, budget, count, frame, frame_first=not composed,
                                                 people=people)


def _composed_frame(r: random.Random) -> str:
    return r.choice(composed_templates())


def _fixed_frame(r: random.Random) -> str:
    return TEMPLATES[r.choice(ioi_split().train_templates)]


def ioi_doc(rng, budget: int, count: Callable[[str], int]) -> list[Piece]:
    """A training document from the TRAIN split only: one IOI prompt and its answer (tagged "answer").

    Not in :data:`interp.corpus.DOC_BUILDERS` (adding a key there would change `sample_text`, the
    tokenizer fit and the copy eval's token pool); a build adds it to its own builders and mix."""
    return _train_doc(rng, budget, count, _fixed_frame)


def ioi_episodes(builder: Callable[[random.Random, int, Callable[[str], int]], list[Piece]],
                 tokens_per_episode: int) -> Callable[[random.Random, int, Callable[[str], int]], list[Piece]]:
    """A builder of documents of several IOI prompts in a row, each with its answer and two people of its own:
    one per `tokens_per_episode` tokens of the document's budget (at least one), as many as fit. A one-prompt
    document gets rarer per token the longer the training sequences (a row packs one or two), so a long
    curriculum phase would all but stop training IOI; this keeps the IOI answers per token about constant."""
    if tokens_per_episode < 1:
        raise InvalidInputError(f"tokens per IOI episode must be >= 1, got {tokens_per_episode}")

    def build(rng, budget: int, count: Callable[[str], int]) -> list[Piece]:
        r = as_rng(rng)
        pieces = builder(r, budget, count)
        used = sum(count(x) for x, _ in pieces)
        for _ in range(budget // tokens_per_episode - 1):
            more = builder(r, budget - used, count)
            if not any(tag == "answer" for _, tag in more):  # did not fit: filler instead
                break
            pieces += more
            used += sum(count(x) for x, _ in more)
        return pieces

    return build


def _train_doc(rng, budget: int, count: Callable[[str], int], frame: Callable[[random.Random], str],
               frame_first: bool = True, people: Sequence[str] | None = None) -> list[Piece]:
    """One IOI training document: two TRAIN names (or two of `people`), a random order, the frame `frame(r)`
    filled, the indirect object as the answer; filler instead when it does not fit in `budget` tokens.
    `frame_first`: the frame is drawn before the order (fixed templates) or after it (composed frames), as the
    shipped builds drew them, so their training documents are unchanged."""
    r = as_rng(rng)
    io, s = r.sample(ioi_split().train_names if people is None else people, 2)
    template = frame(r) if frame_first else None
    order = r.choice(ORDERS)
    template = template if frame_first else frame(r)
    a, b = (io, s) if order == "ABBA" else (s, io)
    text = template.format(A=a, B=b, S=s, **random_fill(r))
    pieces: list[Piece] = [(text, "text"), (" " + io, "answer"), (".", "text")]
    if sum(count(x) for x, _ in pieces) > budget:
        from interp.corpus.documents import filler_doc

        return filler_doc(r, budget, count)
    return pieces
