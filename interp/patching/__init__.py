"""Activation patching: batched grids of (pair, cell) rows, equal to one forward pass per cell.

    from interp.patching import PatchingConfig, read_pairs, run_patching
    res = run_patching(model, read_pairs("pairs.jsonl", model.tokenizer), PatchingConfig(sites=("resid_pre", "head_out")))
    res.sites["head_out"].mean   # [layer][head], normalised: 0 = no effect, 1 = the clean value restored
"""

from interp.patching.attribution import grid_agreement, run_attribution
from interp.patching.cells import GRID_SITES, CellPatch, Cells
from interp.patching.ioi import ioi_scores
from interp.patching.pairs import IOI_CORRUPTIONS, PatchPair, ioi_pairs, niah_pairs, read_pairs, repeated_pairs
from interp.patching.config import DIRECTIONS, PatchingConfig
from interp.patching.metrics import METRICS
from interp.patching.result import PatchingResult, SiteGrid
from interp.patching.run import run_patching

__all__ = ["CellPatch", "Cells", "DIRECTIONS", "GRID_SITES", "IOI_CORRUPTIONS", "METRICS", "PatchPair",
           "PatchingConfig", "PatchingResult", "SiteGrid", "grid_agreement", "ioi_pairs", "ioi_scores", "niah_pairs",
           "read_pairs", "repeated_pairs", "run_attribution", "run_patching"]
