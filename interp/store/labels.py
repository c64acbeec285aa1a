"""Word-category labels per token, from the corpus generator's word lists.

A token gets the category of the word that holds its first non-space character (sub-word pieces
share their word's label). Words are matched case-insensitively, plurals through their singular.
"""

from __future__ import annotations

import re

import numpy as np

CATEGORIES = ("other", "name", "adjective", "noun", "verb", "place", "number", "punct")
OTHER, NAME, ADJECTIVE, NOUN, VERB, PLACE, NUMBER, PUNCT = range(len(CATEGORIES))
_WORD_RE = re.compile(r"[A-Za-z]+|[0-9]+|[^\sA-Za-z0-9]")


def _lexicon() -> dict[str, int]:
    from interp import corpus as c

    lex: dict[str, int] = {}
    for words, cat in ((c.NAMES, NAME), (c.ADJECTIVES, ADJECTIVE), (c.NOUNS, NOUN), (c.VERBS, VERB),
                       (c.PLACES, PLACE)):
        for w in words:
            lex.setdefault(w.lower(), cat)
    return lex


_LEX: dict[str, int] | None = None


def word_category(word: str) -> int:
    global _LEX
    if _LEX is None:
        _LEX = _lexicon()
    if word.isdigit():
        return NUMBER
    if not word[:1].isalnum():
        return PUNCT
    w = word.lower()
    if w in _LEX:
        return _LEX[w]
    for suffix in ("es", "s"):
        if w.endswith(suffix) and _LEX.get(w[: -len(suffix)]) == NOUN:
            return NOUN
    return OTHER


def token_categories(text: str, offsets) -> np.ndarray:
    """Category id of each token of `text`, given the tokenizer's (start, end) character offsets."""
    spans = [(m.start(), m.end(), word_category(m.group())) for m in _WORD_RE.finditer(text)]
    starts = np.array([s for s, _, _ in spans] or [0])
    out = np.zeros(len(offsets), dtype=np.int8)
    for i, (a, b) in enumerate(offsets):
        if b <= a:
            continue  # special token
        first = a
        while first < b and text[first].isspace():
            first += 1
        if first >= b or not spans:
            continue  # a whitespace-only token
        j = int(np.searchsorted(starts, first, side="right")) - 1
        if j >= 0 and spans[j][0] <= first < spans[j][1]:
            out[i] = spans[j][2]
    return out
