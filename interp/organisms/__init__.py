"""Bundled model organisms: tiny Qwen2 / Llama / GPT-2 models trained on a procedural corpus.

The corpus and NIAH prompt helpers live in :mod:`interp.corpus`; training in
:mod:`interp.organisms.train`; evaluation in :mod:`interp.organisms.evaluate`.
Checkpoints are in ``data/organisms/<name>/``.  Importing this package does not
import torch or transformers.
"""

from interp.corpus import (  # noqa: F401
    HELDOUT_SEED_MAX,
    HELDOUT_SEED_MIN,
    heldout_seed,
    make_haystack,
    make_needle,
    make_niah_prompt,
)

ORGANISM_NAMES = ("tiny-qwen2", "tiny-llama", "tiny-gpt2")


def organism_dir(name: str):
    """Path of a bundled organism's checkpoint directory."""
    from pathlib import Path

    return Path(__file__).resolve().parents[2] / "data" / "organisms" / name
