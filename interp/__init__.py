"""interp: mechanistic interpretability of open-weight language models.

Importing `interp` has no side effects and imports neither torch nor transformers; the names
below load on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"

_EXPORTS = {
    "load_model": "loading",
    "list_models": "loading",
    "spec_from_config": "loading",
    "Model": "model",
    "Batch": "model",
    "HeadId": "types",
    "KVHeadId": "types",
    "Site": "types",
    "SiteKind": "types",
    "ModelSpec": "spec",
    "RopeSpec": "spec",
    "AblateHeads": "hooks.interventions",
    "ZeroRopeDims": "hooks.interventions",
    "Capture": "hooks.capture",
    "Patch": "hooks.capture",
    "head_output_means": "hooks.capture",
    "AttentionRows": "hooks.rows",
    "attention_rows": "hooks.rows",
    "progress": "progressbar",
    "InterpError": "errors",
    "InvalidInputError": "errors",
    "ModelNotFoundError": "errors",
    "UnsupportedModelError": "errors",
    "InterventionError": "errors",
    # tasks
    "NiahConfig": "tasks.niah",
    "build_niah": "tasks.niah",
    "RepeatedConfig": "tasks.repeated",
    # analyses: one entry function and its config each
    "RetrievalConfig": "analyses.retrieval",
    "detect_retrieval_heads": "analyses.retrieval",
    "AblationConfig": "analyses.ablation",
    "run_ablation": "analyses.ablation",
    "RopeZeroConfig": "analyses.rope_zero",
    "run_rope_zero": "analyses.rope_zero",
    "RopeProfileConfig": "analyses.rope_profile",
    "run_rope_profile": "analyses.rope_profile",
    "InductionConfig": "analyses.induction",
    "detect_induction_heads": "analyses.induction",
    "CopySuppressionConfig": "analyses.copy_suppression",
    "detect_copy_suppression": "analyses.copy_suppression",
    # activation patching
    "PatchingConfig": "patching",
    "run_patching": "patching",
    "run_attribution": "patching",
    "niah_pairs": "patching",
    "ioi_pairs": "patching",
    "repeated_pairs": "patching",
    "read_pairs": "patching",
    # activation store and probes
    "CacheConfig": "store",
    "CorpusData": "store",
    "cache_activations": "store",
    "open_store": "store",
    "ProbeConfig": "probes",
    "run_probes": "probes",
    # probe figures (the other figures: interp.plotting, interp.plotting_heads, interp.plotting_patching)
    "probes_by_layer": "probes.figures",
    "angles_by_layer": "probes.figures",
    "decomposition_by_layer": "probes.figures",
    "pos_pca_curves": "probes.figures",
}

_SUBMODULES = ("adapters", "hooks", "errors", "loading", "model",
               "spec", "tiny", "types", "cli", "stats", "plotting", "provenance", "analyses", "tasks",
               "store", "probes", "experiments", "corpus")

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        mod = importlib.import_module(f".{_EXPORTS[name]}", __name__)
        return getattr(mod, name)
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'interp' has no attribute {name!r}")


def __dir__():
    return __all__
