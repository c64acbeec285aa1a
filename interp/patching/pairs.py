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


def read_pairs(path: str | Path, tokenizer) -> list[PatchPair]:
    """JSONL `{"clean": ..., "corrupt": ..., "answer": " X", "wrong": " Y"}` per line -> pairs (BOS added
    when the tokenizer adds one). Errors name the line (and both token counts on a length mismatch)."""
    from interp.tasks.jsonl import jsonl_records
    from interp.tasks.niah import _bos

    if tokenizer is None:
        raise InvalidInputError("pair files need a tokenizer: this model was loaded without one")
    bos = _bos(tokenizer)
    pairs = []
    for where, obj in jsonl_records(path, "pairs file"):
        missing = [k for k in ("clean", "corrupt", "answer", "wrong")
                   if not isinstance(obj, dict) or not isinstance(obj.get(k), str) or not obj.get(k)]
        if missing:
            raise InvalidInputError(f'{where}: missing or empty string field(s) {missing}; each line needs '
                                    '{"clean": ..., "corrupt": ..., "answer": " X", "wrong": " Y"}')
        clean = bos + list(tokenizer(obj["clean"], add_special_tokens=False)["input_ids"])
        corrupt = bos + list(tokenizer(obj["corrupt"], add_special_tokens=False)["input_ids"])
        pairs.append(PatchPair(clean, corrupt, _single(tokenizer, obj["answer"], where, "answer"),
                               _single(tokenizer, obj["wrong"], where, "wrong"), where))
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


def ioi_pairs(tokenizer, n: int = 32, seed: int = 0, split: str = "heldout") -> list[PatchPair]:
    """IOI prompts (clean; `interp.corpus.ioi`, names and templates of `split`, held-out by default) and the
    same prompts with both names replaced by two other names (corrupt): same template, first-clause order
    and fill, so every other token and every position is shared. answer = the clean indirect object,
    wrong = the corrupt prompt's indirect object (the name that replaced it). The anchor is the indirect
    object's mention in the first clause; `info` records the names, order, template and the positions
    (from the end) of the IO and S mentions."""
    from interp.corpus.ioi import ioi_prompts, ioi_split, render
    from interp.tasks.niah import _bos

    if tokenizer is None:
        raise InvalidInputError("the ioi task needs a tokenizer: this model was loaded without one")
    if n < 1:
        raise InvalidInputError(f"the ioi task needs at least 1 pair, got {n}")
    sp = ioi_split()
    pool = ioi_names(tokenizer, sp.names(split))
    if len(pool) < 4:
        raise InvalidInputError(f"the ioi task needs at least 4 names of the {split} split that are one token with a "
                                f"leading space in this tokenizer; it has {len(pool)} ({', '.join(pool) or 'none'})")
    bos = _bos(tokenizer)
    rng = random.Random(f"patch-ioi/{seed}")
    pairs = []
    for i, p in enumerate(ioi_prompts(n, seed, split, names=pool)):
        c_io, c_s = rng.sample([x for x in pool if x not in (p.io, p.subject)], 2)
        q = render(p.template, c_io, c_s, p.order, p.fill)
        clean = bos + list(tokenizer(p.prompt, add_special_tokens=False)["input_ids"])
        corrupt = bos + list(tokenizer(q.prompt, add_special_tokens=False)["input_ids"])
        io, s, wrong = (_single_or_none(tokenizer, " " + x) for x in (p.io, p.subject, c_io))
        where = f"ioi:{seed}:{i}"
        io_at = [j for j, t in enumerate(clean) if t == io]
        s_at = [j for j, t in enumerate(clean) if t == s]
        if len(clean) != len(corrupt) or len(io_at) != 1 or len(s_at) != 2:
            raise InvalidInputError(f"{where}: the names of {p.prompt!r} are not one token each in context with this "
                                    "tokenizer (the ioi task needs clean and corrupt prompts of one length)")
        L = len(clean)
        pairs.append(PatchPair(clean, corrupt, io, wrong, where,
                               {"template": p.template, "order": p.order, "io": p.io, "subject": p.subject,
                                "corrupt_io": c_io, "corrupt_subject": c_s, "io_position": io_at[0] - L,
                                "s_positions": [j - L for j in s_at]}, anchor=io_at[0]))
    return pairs
