"""Clean/corrupt prompt pairs for activation patching: from a JSONL file or built-in generators (niah,
repeated, ioi).

A pair is two prompts of equal token length that differ where the task's information sits, and the
two tokens the metric compares: `answer` (what the clean prompt predicts next) and `wrong` (what
the corrupt prompt predicts).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from interp.errors import InvalidInputError


@dataclass
class PatchPair:
    clean: list[int]
    corrupt: list[int]
    answer: int  # token id the metric favours (the clean prompt's next token)
    wrong: int  # token id it compares against (the corrupt prompt's next token)
    source: str = ""  # "file:line" or a generator id
    info: dict | None = None  # e.g. {"needle_value_position": -37}
    anchor: int | None = None  # a token index (0-based) positions can be aligned on, e.g. the needle value

    def __post_init__(self):
        if len(self.clean) != len(self.corrupt):
            raise InvalidInputError(f"{self.source or 'pair'}: the clean prompt is {len(self.clean)} tokens and the "
                                    f"corrupt prompt {len(self.corrupt)}; a pair must tokenise to the same length")
        if len(self.clean) < 1:
            raise InvalidInputError(f"{self.source or 'pair'}: empty prompt")
        if self.anchor is not None and not 0 <= self.anchor < len(self.clean):
            raise InvalidInputError(f"{self.source or 'pair'}: anchor {self.anchor} is outside the prompt "
                                    f"(0..{len(self.clean) - 1})")

    @property
    def n(self) -> int:
        return len(self.clean)


def _single(tok, text: str, where: str, field: str) -> int:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        from interp.experiments.tasks import token_split

        raise InvalidInputError(f"{where}: {field} {text!r} is {len(ids)} tokens for {token_split(tok, ids)}; the "
                                "patching metric (logit difference) compares one answer token with one wrong token: "
                                "give one-token answers")
    return int(ids[0])


def _anchor(obj: dict, clean: list[int], tokenizer, where: str) -> int | None:
    """The token index of a pair line's optional "anchor": an int indexes the clean prompt's tokens as interp
    tokenises them (BOS included when the tokenizer adds one; negative counts from the end, -1 = the last
    token); a string is text whose tokens must occur in the clean prompt: the anchor is the first token of
    their first occurrence."""
    a = obj.get("anchor")
    if a is None:
        return None
    n = len(clean)
    if isinstance(a, bool) or not isinstance(a, (int, str)) or (isinstance(a, str) and not a):
        raise InvalidInputError(f'{where}: "anchor" must be a token index (an integer) or a non-empty string of '
                                f"the clean prompt, got {a!r}")
    if isinstance(a, int):
        if not -n <= a < n:
            raise InvalidInputError(f'{where}: "anchor" {a} is outside the clean prompt\'s {n} tokens '
                                    f"(0..{n - 1}, or -{n}..-1 from the end)")
        return a % n
    ids = list(tokenizer(a, add_special_tokens=False)["input_ids"])
    for i in range(n - len(ids) + 1):
        if ids and clean[i:i + len(ids)] == ids:
            return i
    from interp.experiments.tasks import token_split

    raise InvalidInputError(f'{where}: "anchor" {a!r} ({token_split(tokenizer, ids)}) does not occur in the '
                            "clean prompt's tokens; give text as it is tokenised in the prompt (often with its "
                            "leading space) or a token index")


def read_pairs(path: str | Path, tokenizer) -> list[PatchPair]:
    """JSONL `{"clean": ..., "corrupt": ..., "answer": " X", "wrong": " Y"}` per line -> pairs (BOS added
    when the tokenizer adds one), with an optional "anchor" per line (a token index or text of the clean prompt,
    `_anchor`: what `align="anchor"` puts at position 0). Errors name the line (and both token counts on a
    length mismatch)."""
    from interp.tasks.jsonl import jsonl_records
    from interp.tasks.niah import bos_prefix

    if tokenizer is None:
        raise InvalidInputError("pair files need a tokenizer: this model was loaded without one")
    bos = bos_prefix(tokenizer)
    pairs = []
    for where, obj in jsonl_records(path, "pairs file"):
        missing = [k for k in ("clean", "corrupt", "answer", "wrong")
                   if not isinstance(obj, dict) or not isinstance(obj.get(k), str) or not obj.get(k)]
        if missing:
            raise InvalidInputError(f'{where}: missing or empty string field(s) {missing}; each line needs '
                                    '{"clean": ..., "corrupt": ..., "answer": " X", "wrong": " Y"}')
        clean = bos + list(tokenizer(obj["clean"], add_special_tokens=False)["input_ids"])
        corrupt = bos + list(tokenizer(obj["corrupt"], add_special_tokens=False)["input_ids"])
        answer, wrong = _single(tokenizer, obj["answer"], where, "answer"), _single(tokenizer, obj["wrong"], where, "wrong")
        if answer == wrong:
            raise InvalidInputError(f"{where}: answer {obj['answer']!r} and wrong {obj['wrong']!r} are the same token "
                                    f"(id {answer}): the metric (answer - wrong) is 0 by construction, whatever the "
                                    f"model does; give the corrupt prompt's own answer as wrong")
        pairs.append(PatchPair(clean, corrupt, answer, wrong, where, anchor=_anchor(obj, clean, tokenizer, where)))
    if not pairs:
        raise InvalidInputError(f"pairs file {path} has no pairs")
    return pairs


def niah_pairs(tokenizer, niah_config, seed: int = 0) -> list[PatchPair]:
    """NIAH prompts (clean) and the same prompts with the needle's one-token value replaced by another
    code word (corrupt): answer = the clean value, wrong = the corrupt one. Everything else, including
    every position, is shared, so patching shows where the value is carried from the needle."""
    from interp.corpus import CODE_WORDS
    from interp.tasks.niah import build_niah

    rng = random.Random(f"patch-niah/{seed}")
    pairs = []
    for s in build_niah(tokenizer, niah_config):
        if len(s.answer_ids) != 1:
            raise InvalidInputError(f"NIAH sample {s.id}: the answer {s.answer!r} is {len(s.answer_ids)} tokens; "
                                    "value patching needs one-token needle values")
        a, b = s.needle_span
        where = [i for i in range(a, b) if s.input_ids[i] == s.answer_ids[0]]
        if not where:
            raise InvalidInputError(f"NIAH sample {s.id}: the answer token is not inside the needle span")
        while True:
            other = _single_or_none(tokenizer, " " + rng.choice(CODE_WORDS))
            if other is not None and other != s.answer_ids[0]:
                break
        corrupt = list(s.input_ids)
        for i in where:
            corrupt[i] = other
        pairs.append(PatchPair(list(s.input_ids), corrupt, s.answer_ids[0], other, f"niah:{s.id}",
                               {"needle_value_position": where[-1] - len(s.input_ids),
                                "needle_span": [a - len(s.input_ids), b - len(s.input_ids)]}, anchor=where[-1]))
    return pairs


def _single_or_none(tok, text: str) -> int | None:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    return int(ids[0]) if len(ids) == 1 else None


def repeated_pairs(model, length: int = 20, n: int = 16, seed: int = 0, tokens="auto", query: int | None = None
                   ) -> list[PatchPair]:
    """[BOS] R R[:j] (clean: the next token is R[j], by induction) vs the same with the FIRST copy's R[j]
    replaced by a token X not in R (corrupt: induction now predicts X). answer = R[j], wrong = X."""
    import torch

    from interp.tasks.repeated import bos_id, build_repeated, token_pool

    pool = token_pool(model, tokens)
    bos = bos_id(model)
    j = length // 2 if query is None else int(query)
    if not 1 <= j < length:
        raise InvalidInputError(f"the query position must lie in 1..{length - 1}, got {j}")
    batch = build_repeated(pool, length, n, seed, bos)
    g = torch.Generator().manual_seed(seed + 1)
    p = batch.prefix
    pairs = []
    for r in range(n):
        ids = batch.ids[r].tolist()
        copy = set(ids[p:p + length])
        choices = [t for t in pool if t not in copy]
        x = choices[int(torch.randint(len(choices), (1,), generator=g))]
        clean = ids[:p + length + j]
        corrupt = list(clean)
        corrupt[p + j] = x
        pairs.append(PatchPair(clean, corrupt, ids[p + j], x, f"repeated:{seed}:{r}",
                               {"corrupted_position": p + j - len(clean)}, anchor=p + j))
    return pairs


def ioi_names(tokenizer, names) -> list[str]:
    """The names that are one token with a leading space in this tokenizer (the IOI metric compares single
    tokens)."""
    return [n for n in names if _single_or_none(tokenizer, " " + n) is not None]


# How the corrupt prompt of an IOI pair differs from the clean one (same template, first-clause order and
# fill, so every other token and every position is shared). The clean prompt names IO and S, then S again
# (S2); the slots below are the IO mention, S's first mention (S1) and S2.
IOI_CORRUPTIONS = {
    # both names replaced by two other names: IO' at the IO slot, S' at S1 and S2. Still an IOI prompt (S'
    # repeated at the same positions), whose answer is IO'. answer = IO, wrong = IO' (the metric asks which
    # name the patched run moves to the end).
    "both": 2,
    # Wang et al.'s ABC distribution: three fresh names X, Y, Z at the IO, S1 and S2 slots, all distinct and
    # none of them IO or S: no name is repeated, so nothing says which one is the subject, and the clean names
    # are absent. answer = IO, wrong = S (the paper's logit difference IO - S).
    "abc": 3,
    # only S2 replaced by a fresh name C: "A and B ..., C gave ... to": IO and S1 stay, but neither is
    # repeated (three distinct names), so only the repetition differs from the clean prompt, at one position.
    # answer = IO, wrong = S.
    "s2": 1,
}


def ioi_pairs(tokenizer, n: int = 32, seed: int = 0, split: str = "heldout", corrupt: str = "both"
              ) -> list[PatchPair]:
    """IOI prompts (clean; `interp.corpus.ioi`, names and templates of `split`, held-out by default, only the
    names that are one token with a leading space in `tokenizer`) and a corrupt prompt of the same template,
    order and fill per :data:`IOI_CORRUPTIONS[corrupt]`: "both" (the default) both names replaced by two other
    names (answer = the clean IO, wrong = the corrupt IO); "abc" the IO, S1 and S2 mentions replaced by three
    fresh distinct names (Wang et al.'s ABC; answer = IO, wrong = S); "s2" only S2 replaced by a fresh name
    (answer = IO, wrong = S). The replacement names come from the same split and differ from the clean IO and S.
    The clean prompts are the same for every `corrupt` (same seed). The anchor is the indirect object's mention
    in the first clause; `info` records the names, order, template, the corruption, the IO and S token ids, the
    names (and token ids) at the IO, S1 and S2 slots of the corrupt prompt and the positions (from the end) of the IO and S mentions."""
    from interp.corpus.ioi import TEMPLATES, ioi_prompts, ioi_split, render
    from interp.tasks.niah import bos_prefix

    if tokenizer is None:
        raise InvalidInputError("the ioi task needs a tokenizer: this model was loaded without one")
    if corrupt not in IOI_CORRUPTIONS:
        raise InvalidInputError(f"IOI corruption {corrupt!r}: valid are {', '.join(IOI_CORRUPTIONS)}")
    if n < 1:
        raise InvalidInputError(f"the ioi task needs at least 1 pair, got {n}")
    sp = ioi_split()
    pool = ioi_names(tokenizer, sp.names(split))
    need = 2 + IOI_CORRUPTIONS[corrupt]
    if len(pool) < need:
        raise InvalidInputError(f"the ioi task with the {corrupt!r} corruption needs at least {need} names of the "
                                f"{split} split that are one token with a leading space in this tokenizer; it has "
                                f"{len(pool)} ({', '.join(pool) or 'none'})")
    bos = bos_prefix(tokenizer)
    rng = random.Random(f"patch-ioi/{seed}")
    pairs = []
    for i, p in enumerate(ioi_prompts(n, seed, split, names=pool)):
        others = [x for x in pool if x not in (p.io, p.subject)]
        if corrupt == "both":
            c_io, c_s = rng.sample(others, 2)
            text = render(p.template, c_io, c_s, p.order, p.fill).prompt
            slots = (c_io, c_s, c_s)  # the names at the IO, S1 and S2 slots
        else:
            slots = tuple(rng.sample(others, 3)) if corrupt == "abc" else (p.io, p.subject, rng.choice(others))
            a, b = (slots[0], slots[1]) if p.order == "ABBA" else (slots[1], slots[0])
            text = TEMPLATES[p.template].format(A=a, B=b, S=slots[2], **p.fill)
        clean = bos + list(tokenizer(p.prompt, add_special_tokens=False)["input_ids"])
        corrupt_ids = bos + list(tokenizer(text, add_special_tokens=False)["input_ids"])
        io, s = (_single_or_none(tokenizer, " " + x) for x in (p.io, p.subject))
        wrong = _single_or_none(tokenizer, " " + slots[0]) if corrupt == "both" else s
        where = f"ioi:{seed}:{i}"
        io_at = [j for j, t in enumerate(clean) if t == io]
        s_at = [j for j, t in enumerate(clean) if t == s]
        ok = len(clean) == len(corrupt_ids) and len(io_at) == 1 and len(s_at) == 2
        if ok:  # the corrupt prompt differs exactly at the replaced slots, each by the replacing name's one token
            at = (io_at[0], *s_at) if (io_at[0] < s_at[0]) == (p.order == "ABBA") else None
            want = {j: _single_or_none(tokenizer, " " + x) for j, x, old in zip(at or (), slots, (p.io, p.subject,
                                                                                                   p.subject))
                    if x != old}
            diff = {j: t for j, (t, u) in enumerate(zip(corrupt_ids, clean)) if t != u}
            ok = at is not None and diff == want
        if not ok:
            raise InvalidInputError(f"{where}: the names of {p.prompt!r} are not one token each in context with this "
                                    "tokenizer (the ioi task needs clean and corrupt prompts of one length that "
                                    "differ only at the replaced names)")
        L = len(clean)
        info = {"template": p.template, "order": p.order, "io": p.io, "subject": p.subject, "corrupt": corrupt,
                "corrupt_names": list(slots),
                "corrupt_tokens": [_single_or_none(tokenizer, " " + x) for x in slots], "io_token": io, "s_token": s, "io_position": io_at[0] - L,
                "s_positions": [j - L for j in s_at]}
        if corrupt == "both":
            info.update(corrupt_io=slots[0], corrupt_subject=slots[1])
        pairs.append(PatchPair(clean, corrupt_ids, io, wrong, where, info, anchor=io_at[0]))
    return pairs
