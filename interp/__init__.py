"""interp: mechanistic interpretability of open-weight language models.

Importing `interp` has no side effects and imports neither torch nor transformers; the names
below load on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"

_EXPORTS = {
    "load_model": "models.loading",
    "list_models": "models.loading",
    "spec_from_config": "models.loading",
    "Model": "models.model",
    "Batch": "models.model",
    "from_bridge": "interop.transformer_lens",
    "HeadId": "sites",
    "KVHeadId": "sites",
    "Site": "sites",
    "SiteKind": "sites",
    "ModelSpec": "models.spec",
    "RopeSpec": "models.spec",
    "AblateHeads": "hooks.interventions",
    "ZeroRopeDims": "hooks.interventions",
    "WindowHeads": "hooks.window",
    "RemapPositions": "hooks.remap",
    "Capture": "hooks.capture",
    "Patch": "hooks.capture",
    "head_output_means": "hooks.capture",
    "AttentionRows": "hooks.rows",
    "attention_rows": "hooks.rows",
    "progress": "runtime.progress",
    "InterpError": "errors",
    "InvalidInputError": "errors",
    "ModelNotFoundError": "errors",
    "UnsupportedModelError": "errors",
    "InterventionError": "errors",
    # tasks
    "NiahConfig": "tasks.niah",
    "build_niah": "tasks.niah",
    "RepeatedConfig": "tasks.repeated",
    # analyses: one entry function and its config each, from their records (added below), and the helpers
    "prepare_experiment": "analyses.pipeline",
    "HeadExperiment": "analyses.pipeline",
    "logit_by_pair": "analyses.rope_decompose",
    "PairLogits": "analyses.rope_decompose",
    "logit_lens": "analyses.lens",
    "direct_logit_attribution": "analyses.lens",
    # activation patching
    "run_attribution": "patching",
    "niah_pairs": "patching",
    "ioi_pairs": "patching",
    "ioi_scores": "patching",
    "repeated_pairs": "patching",
    "read_pairs": "patching",
    # activation store and probes
    "CorpusData": "store",
    "open_store": "store",
    # organisms that differ only in rope_theta (finding ii as a controlled experiment)
    "Variant": "organisms.sweep",
    "variant_grid": "organisms.sweep",
    "locate_build": "organisms.sweep",
    "measure_build": "organisms.theta",
    # probe figures (every figure: interp.figures.experiments, .heads, .patching, .probes)
    "probes_by_layer": "figures.probes",
    "angles_by_layer": "figures.probes",
    "decomposition_by_layer": "figures.probes",
    "pos_pca_curves": "figures.probes",
}

_SUBMODULES = ("errors", "sites", "runtime", "models", "hooks", "corpus", "tasks", "stats", "experiments",
               "analyses", "patching", "store", "probes", "interop", "organisms", "figures", "cli")



def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        mod = importlib.import_module(f".{_EXPORTS[name]}", __name__)
        return getattr(mod, name)
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'interp' has no attribute {name!r}")


def submodule_getattr(package: str, path):
    """A package's module-level __getattr__ that imports `package.<module>` on first attribute access, so
    `interp.models.loading` works without an import statement (as `interp.models` does here)."""
    def __getattr__(name: str):
        import importlib
        import pkgutil

        if name in {m.name for m in pkgutil.iter_modules(path)}:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def _with_analyses() -> None:
    """Every analysis's config class and entry function from its record (interp.runtime.records), and
    `load_result`, which reads a run folder back into its result object."""
    import importlib

    records = importlib.import_module(".runtime.records", __name__)  # plain data: no torch, no model code
    _EXPORTS.update(records.exports())
    _EXPORTS["load_result"] = "runtime.records"


_with_analyses()
__all__ = sorted(_EXPORTS) + ["__version__"]


def __dir__():
    return __all__
