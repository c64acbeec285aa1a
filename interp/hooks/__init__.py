"""The attention hook machinery: the one interception point, the interventions (editors), Capture /
Patch at every site, and attention rows (observers). See interception.py for the order in which
editors and observers run."""

from interp import package_face

_EXPORTS = {
    "Intervention": "interventions",
    "AblateHeads": "interventions",
    "ZeroRopeDims": "interventions",
    "WindowHeads": "window",
    "WindowCells": "window",
    "HeadMasking": "window",
    "kv_memory": "window",
    "RemapPositions": "remap",
    "MeanPairs": "bandpatch",
    "PairMeans": "bandpatch",
    "pair_means": "bandpatch",
    "Capture": "capture",
    "Patch": "capture",
    "head_output_means": "capture",
    "head_write_norms": "capture",
    "AttentionRows": "rows",
    "attention_rows": "rows",
}

__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS)
