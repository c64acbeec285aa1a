"""Activation patching: batched grids of (pair, cell) rows, equal to one forward pass per cell.

    from interp.patching import PatchingConfig, read_pairs, run_patching
    res = run_patching(model, read_pairs("pairs.jsonl", model.tokenizer), PatchingConfig(sites=("resid_pre", "head_out")))
    res.sites["head_out"].mean   # [layer][head], normalised: 0 = no effect, 1 = the clean value restored
"""

from interp import package_face

_EXPORTS = {
    "grid_agreement": "attribution",
    "run_attribution": "attribution",
    "GRID_SITES": "cells",
    "CellPatch": "cells",
    "Cells": "cells",
    "ioi_scores": "ioi",
    "IOI_CORRUPTIONS": "pairs",
    "PatchPair": "pairs",
    "ioi_pairs": "pairs",
    "niah_pairs": "pairs",
    "read_pairs": "pairs",
    "repeated_pairs": "pairs",
    "DIRECTIONS": "config",
    "PatchingConfig": "config",
    "METRICS": "metrics",
    "PatchingResult": "result",
    "SiteGrid": "result",
    "run_patching": "run",
}

__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS)
