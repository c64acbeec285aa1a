"""The shared BPE tokenizer of the model organisms.

Byte-level BPE fitted with the ``tokenizers`` library on the procedural corpus.
Pre-tokenization (the Qwen2 split) isolates every digit, so a 4-digit value is
always four tokens and can be copied digit by digit (a space before a number is
its own token: ``" 4821"`` -> ``" ", "4", "8", "2", "1"``); words keep their
leading space (GPT-2 style).  Special tokens:
``<s>`` (BOS, id 0), ``</s>`` (EOS, id 1), ``<pad>`` (id 2).  Encoding with
``add_special_tokens=True`` (the default) prepends ``<s>``.

Saved in Hugging Face format (``tokenizer.json`` + ``tokenizer_config.json`` +
``special_tokens_map.json``) so ``transformers.AutoTokenizer.from_pretrained``
loads it as a ``PreTrainedTokenizerFast``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from tokenizers import (
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from interp.corpus import sample_text

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
SPECIAL_TOKENS = [BOS, EOS, PAD]
DEFAULT_VOCAB_SIZE = 1024
TOKENIZER_DOCS = 4000
# Same split as the Qwen2 tokenizer family (transformers rebuilds this pipeline for
# model_type "qwen2", so it must be ours too): digits are isolated, a space before
# a digit is its own pre-token, words keep their leading space.
PRETOKEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

PathLike = str | Path


def _corpus(n_docs: int) -> Iterator[str]:
    for i in range(n_docs):
        yield from sample_text(f"tokenizer/{i}", 1)


def build_tokenizer(vocab_size: int = DEFAULT_VOCAB_SIZE, n_docs: int = TOKENIZER_DOCS) -> Tokenizer:
    """Fit the BPE tokenizer on ``n_docs`` corpus documents (deterministic)."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKEN_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(n_docs), trainer=trainer)
    bos = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos)]
    )
    return tok


def to_hf(tok: Tokenizer):
    """Wrap a ``tokenizers.Tokenizer`` as a ``PreTrainedTokenizerFast``."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        model_max_length=2048, clean_up_tokenization_spaces=False,
    )


def save_tokenizer(tok: Tokenizer, out_dir: PathLike) -> Path:
    """Write the tokenizer in HF format into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    to_hf(tok).save_pretrained(str(out))
    return out


def load_tokenizer(path: PathLike) -> Tokenizer:
    """Load the raw ``tokenizers.Tokenizer`` from a directory (or a tokenizer.json)."""
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    return Tokenizer.from_file(str(p))


def token_counter(tok: Tokenizer):
    """``count(text) -> n tokens`` without special tokens (for the corpus builders)."""

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    return count


def encode_pieces(tok: Tokenizer, pieces) -> tuple[list[int], list[str]]:
    """Encode ``(text, tag)`` pieces; returns ids and a per-token tag list (no BOS)."""
    texts = [p for p, _ in pieces]
    if not texts:
        return [], []
    encs = tok.encode_batch(texts, add_special_tokens=False)
    ids: list[int] = []
    tags: list[str] = []
    for enc, (_, tag) in zip(encs, pieces):
        ids.extend(enc.ids)
        tags.extend([tag] * len(enc.ids))
    return ids, tags


def describe(tok: Tokenizer) -> dict:
    return {
        "vocab_size": tok.get_vocab_size(),
        "special_tokens": {t: tok.token_to_id(t) for t in SPECIAL_TOKENS},
        "pretokenizer_pattern": PRETOKEN_PATTERN,
    }


def write_tokenizer_info(tok: Tokenizer, out_dir: PathLike) -> None:
    Path(out_dir, "tokenizer_info.json").write_text(json.dumps(describe(tok), indent=2) + "\n")
