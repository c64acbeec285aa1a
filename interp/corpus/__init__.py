"""Seeded procedural corpus: the text the bundled model organisms are trained on, and the
held-out filler, needles and NIAH prompts that tasks, stores and probes draw from.

Everything here is plain Python (``random.Random``), so a given seed yields the
same text on every platform and Python version >= 3.2.  Sentences, haystacks,
needles and seeds are in :mod:`.prose`; the training document builders (types
(a)-(d), and :func:`sample_text`) in :mod:`.documents`.  The training code
(:mod:`interp.organisms`) imports this package; nothing here imports it.

Documents are returned as a list of *pieces* ``(text, tag)``.  Every piece starts
at a pre-token boundary of the organism tokenizer (pieces begin with a space or
with punctuation), so tokenizing the pieces one by one and concatenating the ids
gives exactly the tokenization of the joined text.  Tags mark spans that matter
for training and analysis: ``"needle"``, ``"question"``, ``"answer"``,
``"distractor"``, ``"copy"`` (the repeated half of an induction passage) and
``"text"`` for everything else.

Needle convention (used by the NIAH harness)::

    needle   = " The secret code of the green lantern is Oscar."
    question = " What is the secret code of the green lantern?"
               " The secret code of the green lantern is"
    answer   = " Oscar"

The question restates the key phrase so that the answer is the direct
continuation of the prompt; recall is scored by checking that the answer word
(``answer.strip()``, one of :data:`CODE_WORDS`) appears in the greedy
continuation.  Filler text never contains " is " or digits (quantities are
number words), so in a single-needle prompt the needle is the only place that
says which of the 55 code words is the answer (names and towns do occur in filler).

Public helpers for the NIAH harness: :func:`make_haystack`, :func:`make_needle`
(:func:`make_needle_full` for the key/value too), :func:`make_niah_prompt`,
:func:`niah_pieces` (tagged pieces, for token-level spans) and :func:`heldout_seed`.
IOI prompts (indirect-object identification, with fixed train / held-out splits of names and
templates): :mod:`.ioi` (:func:`ioi_prompts`, :func:`ioi_split`, :func:`ioi_doc`).

Seeds: integer seeds in ``[HELDOUT_SEED_MIN, HELDOUT_SEED_MAX)`` are reserved
for evaluation.  Training never uses integer seeds: it draws every sequence from
``random.Random("train/<seed>/<step>/<row>")`` (a disjoint, string-keyed
namespace; see :func:`train_rng`), and the tokenizer is fitted on
``random.Random("tokenizer/<i>")`` documents.
"""

from interp.corpus.documents import (
    DOC_BUILDERS,
    filler_doc,
    induction_doc,
    list_doc,
    needle_doc,
    recall_doc,
    salad_doc,
    sample_text,
)
from interp.corpus.ioi import IOIPrompt, IOISplit, ioi_doc, ioi_prompts, ioi_split
from interp.corpus.prose import (
    ADJECTIVES,
    ANIMALS,
    CODE_WORDS,
    COLORS,
    DAYS,
    HELDOUT_SEED_MAX,
    HELDOUT_SEED_MIN,
    NAMES,
    NEEDLE_ADJECTIVES,
    NEEDLE_NOUNS,
    NOUNS,
    PLACES,
    TIMES,
    VERBS,
    Needle,
    Piece,
    RngLike,
    as_rng,
    heldout_seed,
    make_haystack,
    make_needle,
    make_needle_full,
    make_niah_prompt,
    make_sentence,
    make_sentences,
    niah_pieces,
    train_rng,
)

__all__ = [
    "ADJECTIVES", "ANIMALS", "CODE_WORDS", "COLORS", "DAYS", "DOC_BUILDERS", "HELDOUT_SEED_MAX",
    "HELDOUT_SEED_MIN", "IOIPrompt", "IOISplit", "NAMES", "NEEDLE_ADJECTIVES", "NEEDLE_NOUNS", "NOUNS", "PLACES",
    "TIMES", "VERBS", "Needle", "Piece", "RngLike", "as_rng", "filler_doc", "heldout_seed", "induction_doc",
    "ioi_doc", "ioi_prompts", "ioi_split", "list_doc", "make_haystack", "make_needle", "make_needle_full",
    "make_niah_prompt", "make_sentence", "make_sentences", "needle_doc", "niah_pieces", "recall_doc", "salad_doc",
    "sample_text", "train_rng",
]
