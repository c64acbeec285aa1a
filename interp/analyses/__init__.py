"""Analyses: one entry function per analysis, taking a Model and a config dataclass and returning a result
dataclass that serialises to JSON with its provenance.

The canonical home of every analysis's names: each record of `interp.runtime.records` (the one list of
analyses) puts its config class, entry function and result class here (`interp.analyses.RetrievalConfig`,
`interp.analyses.detect_retrieval_heads`, `interp.analyses.RetrievalResult`, also for the analyses whose code
lives in `interp.patching`, `interp.probes`, `interp.store` and `interp.organisms`), beside the helpers below.
"""

from interp import package_face
from interp.runtime.records import exports

_EXPORTS = {
    **exports(),  # from the records: every analysis's config class, entry function and result class
    "prepare_experiment": "pipeline",
    "HeadExperiment": "pipeline",
    "logit_by_pair": "rope_decompose",
    "PairLogits": "rope_decompose",
    "needle_decomposition": "rope_decompose",
    "logit_lens": "lens",
    "direct_logit_attribution": "lens",
}

__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS)
