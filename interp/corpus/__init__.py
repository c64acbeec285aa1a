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

from interp import package_face

_EXPORTS = {
    "DOC_BUILDERS": "documents",
    "filler_doc": "documents",
    "induction_doc": "documents",
    "list_doc": "documents",
    "needle_doc": "documents",
    "recall_doc": "documents",
    "salad_doc": "documents",
    "sample_text": "documents",
    "IOIPrompt": "ioi",
    "IOISplit": "ioi",
    "ioi_doc": "ioi",
    "ioi_prompts": "ioi",
    "ioi_split": "ioi",
    "ADJECTIVES": "prose",
    "ANIMALS": "prose",
    "CODE_WORDS": "prose",
    "COLORS": "prose",
    "DAYS": "prose",
    "HELDOUT_SEED_MAX": "prose",
    "HELDOUT_SEED_MIN": "prose",
    "NAMES": "prose",
    "NEEDLE_ADJECTIVES": "prose",
    "NEEDLE_NOUNS": "prose",
    "NOUNS": "prose",
    "PLACES": "prose",
    "TIMES": "prose",
    "VERBS": "prose",
    "Needle": "prose",
    "Piece": "prose",
    "RngLike": "prose",
    "as_rng": "prose",
    "heldout_seed": "prose",
    "make_haystack": "prose",
    "make_needle": "prose",
    "make_needle_full": "prose",
    "make_niah_prompt": "prose",
    "make_sentence": "prose",
    "make_sentences": "prose",
    "niah_pieces": "prose",
    "train_rng": "prose",
}

__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS)
