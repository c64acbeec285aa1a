"""Needle-in-a-haystack prompts: contexts x depths x paired seeds, token spans recorded exactly.

Every condition of an analysis runs on the same `NiahSample`s (paired seeds). A prompt is built
from token ids piece by piece: [BOS] + haystack[:i] + needle + haystack[i:] + [separator] +
question, so the needle's token span is known exactly whatever the tokenizer.

Needles (`needles_file`, else `needle_source`):
- "corpus": the needles of interp's own corpus generator (`interp.corpus`: " The secret code of
  the green lantern is Oscar.", one-token answers), what the bundled organisms were trained on.
- "standard": natural-language facts with multi-token answers (`interp.tasks.needles`, after
  Kamradt 2023, "Needle In A Haystack - Pressure Testing LLMs"), for every other model (Hub ids,
  local checkpoints, tiny random models). Seed s uses needle s mod 24.
- a JSONL file (`needles_file`: {"needle", "question", "answer"} per line; sample k uses line
  k mod n).
`resolve_niah(model, config)` picks corpus or standard from the model when `needle_source` is None
(`build_niah` alone then uses the corpus needles). Haystack (`haystack_file`):
- None: the corpus generator's sentences; seed s fixes the sentence stream, so a longer context
  of the same seed contains the shorter one's sentences. With the standard needles this is an
  offline fallback for real text, and the config says so (`haystack_fallback`).
- a text file, or a directory of .txt files (read in sorted name order, joined by blank lines);
  cycled if shorter than the context, with an InterpWarning saying how many times it repeats.
The needle and question are inserted exactly as given; with anything but the corpus needles and
haystack `separator` (default "\n") goes between the haystack and the question. Every config
records what ran: `needles` ("corpus" | "standard" | the file), `haystack` ("corpus" | the file or
directory) and `haystack_fallback`.
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from interp.errors import InvalidInputError

DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
NEEDLE_SOURCES = ("corpus", "standard")  # the built-in needle sets (module docstring)
FIRST_SEED = 1_000_000  # held-out seed range of the organisms' corpus (never used in training)


@dataclass
class NiahConfig:
    """The NIAH grid: one prompt per (context length, depth, seed). `context_lengths`: prompt lengths in
    tokens (at most; whole sentences fill them); `depths`: fraction of the haystack before the needle;
    `n_seeds` seeds from `first_seed` (held-out corpus seeds). `haystack_file` (a text file, a directory of
    .txt files, or a fetched text's alias: `interp.tasks.texts`, e.g. "sherlock-holmes"), `needles_file`, `separator`: user haystack and needles; `needle_source`: the built-in needles
    without a needles file, "corpus" | "standard" (None: corpus; `resolve_niah` picks by model). See the
    module docstring. `max_new_tokens`: decode length (default answer + 2). Recorded, not set: `needles`,
    `haystack` (what ran) and `haystack_fallback` (standard needles in the corpus haystack)."""

    context_lengths: tuple[int, ...] = (512,)
    depths: tuple[float, ...] = DEFAULT_DEPTHS
    n_seeds: int = 4
    first_seed: int = FIRST_SEED
    haystack_file: str | None = None
    needles_file: str | None = None
    separator: str = "\n"
    max_new_tokens: int | None = None  # default: answer tokens + 2
    needle_source: str | None = None  # "corpus" | "standard" without needles_file; None: corpus (resolve_niah)
    needles: str = field(init=False)  # what ran: "corpus" | "standard" | the needles file
    haystack: str = field(init=False)  # what ran: "corpus" | a fetched text's alias | the haystack file or directory
    haystack_text: dict | None = field(init=False)  # a fetched text (interp.tasks.texts): package, sha256, licence
    haystack_fallback: bool = field(init=False)  # the corpus haystack stands in for real text (standard needles)

    def __post_init__(self):
        self.context_lengths = tuple(int(c) for c in self.context_lengths)
        self.depths = tuple(float(d) for d in self.depths)
        if not self.context_lengths or min(self.context_lengths) < 16:
            raise InvalidInputError("context lengths must be >= 16 tokens")
        if not self.depths or any(not 0.0 <= d <= 1.0 for d in self.depths):
            raise InvalidInputError("depths must lie in [0, 1] (fractions of the haystack before the needle)")
        if self.n_seeds < 1:
            raise InvalidInputError("n_seeds must be >= 1")
        if self.needle_source is not None and self.needle_source not in NEEDLE_SOURCES:
            raise InvalidInputError(f"needle_source {self.needle_source!r}: valid are {', '.join(NEEDLE_SOURCES)} "
                                    "(or a needles file)")
        self.needles = str(self.needles_file) if self.needles_file else (self.needle_source or "corpus")
        self.haystack = str(self.haystack_file) if self.haystack_file else "corpus"
        self.haystack_text = None
        if self.haystack_file is not None:
            from interp.tasks.texts import TEXTS, alias_of, resolve_haystack, text_record

            path = resolve_haystack(self.haystack_file)
            # the alias, or its cached file (a config copied with dataclasses.replace holds the path already)
            alias = str(self.haystack_file) if path != str(self.haystack_file) and str(self.haystack_file) in TEXTS \
                else alias_of(path)
            if alias is not None:
                rec = text_record(alias)
                self.haystack_text = {k: rec[k] for k in ("alias", "title", "package", "member", "sha256", "lines",
                                                          "licence")}
                self.haystack, self.haystack_file = alias, path
        self.haystack_fallback = not self.haystack_file and self.needle_source == "standard"

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(range(self.first_seed, self.first_seed + self.n_seeds))


@dataclass
class NiahSample:
    id: str
    seed: int
    context_length: int
    depth: float
    input_ids: list[int]
    needle_span: tuple[int, int]  # [start, end) token indices into input_ids
    needle: str
    question: str
    answer: str
    answer_ids: list[int] = field(default_factory=list)

    def to_dict(self, tokenizer=None) -> dict:
        d = asdict(self)
        if tokenizer is not None:
            d["prompt_text"] = tokenizer.decode(self.input_ids)
        return d


def _encode(tok, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


def bos_prefix(tok) -> list[int]:
    """[BOS] when the tokenizer adds one to a plain encoding, else []."""
    with_special = tok("x", add_special_tokens=True)["input_ids"]
    bos = tok.bos_token_id
    return [bos] if bos is not None and with_special and with_special[0] == bos else []


_bos = bos_prefix  # its former name, which tests/patching/test_ioi.py still imports


def _load_needles(path: str) -> list[dict]:
    from interp.tasks.jsonl import jsonl_records

    out = []
    for where, obj in jsonl_records(path, "needles file"):
        missing = [k for k in ("needle", "question", "answer")
                   if not isinstance(obj, dict) or not isinstance(obj.get(k), str) or not obj.get(k)]
        if missing:
            raise InvalidInputError(f"{where}: missing or empty string field(s) {missing}; each line needs "
                                    '{"needle": ..., "question": ..., "answer": ...}')
        out.append(obj)
    if not out:
        raise InvalidInputError(f"needles file {path} has no needles")
    return out


HAYSTACK_UNIT_WORDS = 40  # a sentence longer than this is split at whitespace into pieces of this many words
HAYSTACK_UNIT_CHARS = 80  # ... or, in text without whitespace (Chinese, Japanese), into pieces of this many characters
# Han, kana, CJK punctuation and full-width forms: a whitespace-free run holding these is unspaced text
CJK = "[\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]"


def _haystack_units(text: str) -> list[tuple[str, bool]]:
    """A haystack text as (unit, spaced) pairs: sentences, split after . ! ? (followed by whitespace), after the
    full-width 。！？ and at line breaks. A sentence with whitespace is split into pieces of at most
    HAYSTACK_UNIT_WORDS words (spaced: units and words are joined by a space); a whitespace-free one holding CJK
    characters (Chinese, Japanese) into pieces of HAYSTACK_UNIT_CHARS characters (not spaced: joined directly, cut at token boundaries). The
    needle goes between two units, never inside a word."""
    import re

    units = []
    for sent in re.split(r"(?<=[.!?])\s+|(?<=[。！？])|\n+", text):
        words = sent.split()
        if len(words) > 1:
            units += [(" ".join(words[i:i + HAYSTACK_UNIT_WORDS]), True)
                      for i in range(0, len(words), HAYSTACK_UNIT_WORDS)]
        elif words:
            w = words[0]
            spaced = not re.search(CJK, w)  # a one-word sentence of a spaced language, or unspaced text
            units += [(w, True)] if spaced else [(w[i:i + HAYSTACK_UNIT_CHARS], False)
                                                 for i in range(0, len(w), HAYSTACK_UNIT_CHARS)]
    return units


def haystack_files(path: str | Path) -> list[Path]:
    """The files of a haystack: `path` itself, or a directory's .txt files in sorted name order (not
    recursive). A directory without .txt files is an InvalidInputError; a missing or unreadable file is
    reported when it is read (`read_haystack`)."""
    p = Path(path)
    if not p.is_dir():
        return [p]
    try:
        entries = sorted(p.iterdir(), key=lambda f: f.name)
    except OSError as e:
        raise InvalidInputError(f"haystack directory {path} cannot be read: {e.strerror or e}") from None
    files = [f for f in entries if f.suffix.lower() == ".txt" and f.is_file()]
    if not files:
        n = len(entries)
        held = f"it holds {n} other {'entry' if n == 1 else 'entries'}" if n else "it is empty"
        raise InvalidInputError(f"haystack directory {path} has no .txt files ({held}); --haystack takes a text "
                                "file or a directory of .txt files")
    return files


def read_haystack(path: str | Path) -> str:
    """A haystack's text: the file, or a directory's .txt files (`haystack_files`) joined by blank lines.
    Every file is read with `read_user_text` (missing, a folder, not UTF-8: an error naming the file)."""
    from interp.tasks.jsonl import read_user_text

    return "\n\n".join(read_user_text(f, "haystack file") for f in haystack_files(path))


def _load_haystack_units(path: str, tok) -> list[tuple[list[int], tuple[str, bool]]]:
    """(token ids, (text, spaced)) of every unit of a user haystack, encoded once. Spaced units get a leading
    space, as they follow one another; unspaced ones (Chinese, Japanese) are encoded as they are."""
    units = [(_encode(tok, " " + u if spaced else u), (u, spaced)) for u, spaced in _haystack_units(read_haystack(path))]
    units = [u for u in units if u[0]]
    if sum(len(ids) for ids, _ in units) < 8:
        kind = "directory" if Path(path).is_dir() else "file"
        raise InvalidInputError(f"haystack {kind} {path} has fewer than 8 tokens")
    return units


def _check_needles(needles: list[dict], config: "NiahConfig", label: str) -> None:
    """Every seed of a (length, depth) cell should have its own needle. With a user haystack (the same for
    every seed) fewer needles than seeds repeat whole prompts (n=20 that is n=10): refused. With the
    corpus haystack the prompts still differ, but needles repeat: an InterpWarning."""
    distinct = len({(n["needle"], n["question"], n["answer"]) for n in needles})
    if distinct >= config.n_seeds:
        return
    msg = (f"{label} has {distinct} distinct needles but {config.n_seeds} seeds per (length, depth) "
           "were asked")
    if config.haystack_file:
        raise InvalidInputError(f"{msg}: with the same --haystack, {config.n_seeds - distinct} prompts per cell "
                                f"would repeat others; pass --n-seeds <= {distinct} or "
                                + ("a --needles file with more" if label.startswith("the standard") else
                                   "add needles"))
    import warnings

    from interp.errors import InterpWarning

    warnings.warn(InterpWarning(f"{msg}: needles repeat across seeds (the prompts differ only in the corpus "
                                "haystack)"), stacklevel=3)


def _check_distinct(samples: list["NiahSample"]) -> None:
    """Identical prompts in one (length, depth) cell would count one prompt twice in every statistic."""
    cells: dict = {}
    for s in samples:
        cells.setdefault((s.context_length, s.depth), set()).add(tuple(s.input_ids))
    for (n_ctx, depth), ids in cells.items():
        n = sum(1 for s in samples if (s.context_length, s.depth) == (n_ctx, depth))
        if len(ids) < n:
            raise InvalidInputError(f"the NIAH cell (length {n_ctx}, depth {depth:g}) has {n} prompts but only "
                                    f"{len(ids)} distinct: use fewer seeds or more varied needles")


def _fill_words(tok, unit: tuple[str, bool], room: int) -> list[int]:
    """The longest run of whole leading words of a haystack unit (text, spaced) that fits in `room` tokens:
    the haystack's last, partial sentence, cut at a word boundary (spaced text) or a character boundary
    (unspaced text: each character encoded alone, so no byte-level token is split), so the prompt fills its
    context length."""
    text, spaced = unit
    out: list[int] = []
    for piece in (text.split() if spaced else text):
        ids = _encode(tok, " " + piece if spaced else piece)
        if len(out) + len(ids) > room:
            break
        out += ids
    return out


def _corpus_needle(seed: int) -> dict:
    from interp.corpus import make_needle_full

    n = make_needle_full(random.Random(seed))
    return {"needle": n.sentence, "question": n.question, "answer": n.answer}


def trained_on_corpus(model) -> bool:
    """Whether `model` was trained on interp's corpus: a bundled organism, or any checkpoint folder an organism
    build wrote (it holds organism.json). Those get the corpus needles; every other model (Hub ids, local
    checkpoints, tiny random models, wrapped bridges) the standard ones."""
    src = getattr(model, "source", None)
    if not src:
        return False
    from interp.models.loading import bundled_models

    try:
        p = Path(src)
        if (p / "organism.json").is_file():
            return True
        return p.is_dir() and p.resolve() in {b.resolve() for b in bundled_models().values()}
    except (OSError, ValueError):
        return False


def resolve_niah(model, config: NiahConfig | None = None) -> NiahConfig:
    """`config` (default: the default grid) for `model`: with `needle_source` None, "corpus" for a model trained
    on interp's corpus (`trained_on_corpus`), else "standard" (a new config; an explicit source is kept). The
    library's analyses call this when they build NIAH prompts for a model themselves; so does the CLI."""
    from dataclasses import replace

    config = config or NiahConfig()
    if config.needle_source is not None:
        return config
    return replace(config, needle_source="corpus" if trained_on_corpus(model) else "standard")


def _corpus_sentences(seed: int):
    from interp.corpus import make_sentence

    r = random.Random(f"niah-haystack/{seed}")
    while True:
        yield make_sentence(r)


DECODE_ROOM = 8  # tokens a context check leaves for the decoded answer when max_new_tokens is unset
MAX_CONTEXT = 1 << 20  # no NIAH prompt longer than this is built (a typo like 99999999999 would never finish)


def check_context(spec, config: NiahConfig) -> list[str]:
    """Refuse contexts a model cannot take; return warnings for those past its trained length.

    Learned absolute positions (GPT-2) have no embedding past `max_positions`: refused. RoPE models
    run past it but were not trained there: a warning (callers record it). Anything over
    MAX_CONTEXT tokens is refused outright."""
    longest = max(config.context_lengths)
    if longest > MAX_CONTEXT:
        raise InvalidInputError(f"context length {longest} is over the {MAX_CONTEXT:,}-token limit of NIAH prompts")
    limit = getattr(spec, "max_positions", None)
    need = longest + (config.max_new_tokens or DECODE_ROOM)  # the answer is decoded after the prompt
    if limit is None or need <= limit:
        return []
    if spec.positional == "learned":
        raise InvalidInputError(f"{spec.architecture} has learned positions for {limit} tokens; context length "
                                f"{longest} plus the decoded answer needs {need}: use --lengths <= "
                                f"{limit - (config.max_new_tokens or DECODE_ROOM)}")
    return [f"context length {longest} (+ answer) is past {spec.architecture}'s max_position_embeddings {limit}: "
            "the model was not trained there"]


def niah_for_model(m, niah, decode: bool = True):
    """The NIAH grid for the model, checked before any decoding: the needles picked from the model when
    --needles is not given (`tasks.niah.resolve_niah`: the corpus's for the organisms, the standard ones for
    every other model); refused (an encoder, no tokenizer, or past learned positions, with the NIAH --lengths
    that would fit; an encoder only where the prompts are decoded), or warned once past a RoPE model's trained length (the model's own check: an
    InterpWarning, printed and recorded in run.json). Returns the grid to use; `fallback_note` says when the
    corpus haystack stands in for real text."""
    if m.tokenizer is None:
        raise InvalidInputError("NIAH needs a tokenizer: this model was loaded without one")
    if decode and not m.spec.causal:
        raise InvalidInputError(f"{m.spec.architecture} is an encoder; it cannot decode")
    niah = resolve_niah(m, niah)
    if check_context(m.spec, niah):  # past the trained length: say it now, not at the first forward pass
        m.check_positions(max(niah.context_lengths) + (niah.max_new_tokens or 8))
    return niah


def fallback_note(model, niah) -> str | None:
    """When the corpus haystack stands in for real text (standard needles, no haystack file): what the
    model has to do with that corpus, and how to pass real text; None otherwise."""
    if not niah.haystack_fallback:
        return None
    seen = (f"{model.name} was trained on this corpus (an organism), with the standard needles in it" if
            trained_on_corpus(model) else f"{model.name} was not trained on it; needles: {niah.needles}")
    return (f"the NIAH haystack is interp's synthetic corpus, an offline fallback ({seen}): pass --haystack FILE "
            "or a directory of .txt files for real long text")


def build_niah(tokenizer, config: NiahConfig) -> list[NiahSample]:
    """All samples of a NIAH grid, ordered by (context_length, depth, seed)."""
    if tokenizer is None:
        raise InvalidInputError("NIAH needs a tokenizer: this model was loaded without one")
    from interp.tasks.needles import STANDARD_NEEDLES, standard_needle

    tok = tokenizer
    bos = bos_prefix(tok)
    standard = not config.needles_file and config.needle_source == "standard"
    needles = (_load_needles(config.needles_file) if config.needles_file
               else list(STANDARD_NEEDLES) if standard else None)
    if needles:
        _check_needles(needles, config, f"needles file {config.needles_file}" if config.needles_file
                       else "the standard needle set")
    hay_units = _load_haystack_units(config.haystack_file, tok) if config.haystack_file else None
    sep_ids = _encode(tok, config.separator) if (needles or hay_units) and config.separator else []
    samples = []
    hay_tokens = sum(len(ids) for ids, _ in hay_units) if hay_units is not None else 0
    most = 0  # the most haystack tokens one prompt holds (more than hay_tokens: the haystack repeats in it)
    for n_ctx in config.context_lengths:
        for depth in config.depths:
            for k, seed in enumerate(config.seeds):
                nd = (standard_needle(seed) if standard else needles[k % len(needles)] if needles
                      else _corpus_needle(seed))
                needle_ids = _encode(tok, nd["needle"])
                q_ids = sep_ids + _encode(tok, nd["question"])
                budget = n_ctx - len(bos) - len(needle_ids) - len(q_ids)
                if budget < 1:
                    raise InvalidInputError(f"context length {n_ctx} is too short for the needle and question "
                                            f"({n_ctx - budget} tokens)")
                # whole sentences (the user's haystack, cycled, or the corpus's) up to the budget; the
                # needle goes between two of them, at the depth's fraction of the sentences
                units = (itertools.cycle(hay_units) if hay_units is not None
                         else ((_encode(tok, s), None) for s in _corpus_sentences(seed)))
                sents = []
                used = 0
                for ids, words in units:
                    if used + len(ids) > budget:
                        break
                    sents.append(ids)
                    used += len(ids)
                cut = int(round(depth * len(sents)))
                before = [t for s in sents[:cut] for t in s]
                after = [t for s in sents[cut:] for t in s]
                if hay_units is not None:  # a user's haystack fills the context: whole words of the next sentence
                    after += _fill_words(tok, words, budget - used)
                    most = max(most, len(before) + len(after))
                if hay_units is not None and not before + after:
                    raise InvalidInputError(f"context length {n_ctx} leaves {budget} tokens for the haystack, less "
                                            f"than its first word: use longer --lengths")
                start = len(bos) + len(before)
                ids = bos + before + needle_ids + after + q_ids
                samples.append(NiahSample(
                    id=f"L{n_ctx}-d{depth:g}-s{seed}", seed=seed, context_length=n_ctx, depth=depth,
                    input_ids=ids, needle_span=(start, start + len(needle_ids)), needle=nd["needle"],
                    question=nd["question"], answer=nd["answer"], answer_ids=_encode(tok, nd["answer"]),
                ))
    _check_distinct(samples)
    if hay_units is not None and most > hay_tokens:
        _warn_cycled(config, hay_tokens, most)
    return samples


def _warn_cycled(config: "NiahConfig", hay_tokens: int, most: int) -> None:
    """An InterpWarning (printed and recorded in run.json) when a user haystack is shorter than the contexts and
    repeats inside a prompt: a context that holds the same text twice is not a long document (the model can
    attend to the earlier copy), so recall there measures something else."""
    import warnings

    from interp.errors import InterpWarning

    warnings.warn(InterpWarning(
        f"haystack {config.haystack_file} is {hay_tokens:,} tokens, shorter than the {max(config.context_lengths):,}"
        f"-token contexts: it repeats {most / hay_tokens:.1f} times in the longest prompts (recall on a repeated text "
        f"is not recall on a long document); give a haystack of at least {most:,} tokens"), stacklevel=3)


def score_answer(continuation: str, answer: str) -> tuple[bool, bool]:
    """(recall, exact_prefix): the answer appears in the continuation / the continuation starts with it."""
    a = answer.strip()
    return a in continuation, continuation.strip().startswith(a)


def write_prompts(samples: Sequence[NiahSample], tokenizer, path: str | Path) -> None:
    """Exact prompts, needle spans and answers of a run, one JSON object per line."""
    with open(path, "w") as f:
        for s in samples:
            f.write(json.dumps(s.to_dict(tokenizer)) + "\n")
