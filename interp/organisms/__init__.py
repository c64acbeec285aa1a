"""Bundled model organisms: tiny Qwen2 / Llama / GPT-2 models trained on a procedural corpus.

The corpus and NIAH prompt helpers live in :mod:`interp.corpus`; training in
:mod:`interp.organisms.train`; evaluation in :mod:`interp.organisms.evaluate`; the rope_theta variant sweep in
:mod:`interp.organisms.sweep` and :mod:`interp.organisms.theta`. Checkpoints are in ``data/organisms/<name>/``.
Importing this package does not import torch or transformers.
"""

from interp import package_face

_EXPORTS = {
    "ORGANISM_NAMES": "bundled",
    "organism_dir": "bundled",
    "Variant": "sweep",
    "variant_grid": "sweep",
    "locate_build": "sweep",
    "measure_build": "theta",
}

# the corpus's NIAH helpers, once re-exported here; their home is interp.corpus
_CORPUS = {n: "interp.corpus" for n in ("HELDOUT_SEED_MAX", "HELDOUT_SEED_MIN", "heldout_seed", "make_haystack",
                                        "make_needle", "make_niah_prompt")}

__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS, _CORPUS)
