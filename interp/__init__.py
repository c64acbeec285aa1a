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
    "InterpError": "errors",
    "InvalidInputError": "errors",
    "ModelNotFoundError": "errors",
    "UnsupportedModelError": "errors",
    "InterventionError": "errors",
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
