"""interp: mechanistic interpretability of open-weight language models.

Importing `interp` has no side effects and imports neither torch, transformers nor any of its own modules; the
names below load on first use. The face is small on purpose: loading, the Model, sites, the interventions,
Capture / Patch / attention rows, the errors, `load_result` and the tasks' configs. Everything else lives in
its subpackage: the analyses (every config, entry function and result class) in `interp.analyses`, patching in
`interp.patching`, the activation store in `interp.store`, figures in `interp.figures`, ... Names that used to
stand here (`interp.run_ablation`, `interp.niah_pairs`, ...) still work as aliases of those homes; they are not
listed in `__all__` or `dir(interp)`.

Every package's `__init__.py` is a face of the same shape (docs/architecture.md, "Package faces"): a
`_EXPORTS = {name: module}` table and `package_face`, so importing a package imports none of its modules.
"""

from __future__ import annotations

__version__ = "0.1.0"


def package_face(package: str, path, exports: dict, aliases=None):
    """The lazy face of a package: `(__getattr__, __dir__, __all__)` for its `__init__.py`.

    `exports` maps each public name to the module that defines it: a module of this package (`"loading"`,
    `"adapters.base"`) or a dotted path from `interp.` (`"interp.patching.run"`). The module is imported when the
    name is first read, so importing the package imports none of its modules (nor torch). `aliases` (a dict of
    the same kind, or a function returning one, called on first use) are names that resolve without being
    listed: old spellings kept for users' scripts. Every module of the package is an attribute too
    (`interp.models.loading` without an import statement). `__all__` is the sorted exports; `dir()` adds the
    package's modules, so tab completion shows the face and where to go next."""
    import importlib
    import pkgutil

    listed = sorted(exports)
    found: dict = {}

    def module_of(name: str):
        if name in exports:
            return exports[name]
        if "aliases" not in found:
            found["aliases"] = (aliases() if callable(aliases) else aliases) or {}
        return found["aliases"].get(name)

    def modules() -> list[str]:
        return sorted(m.name for m in pkgutil.iter_modules(path))

    def __getattr__(name: str):
        if name.startswith("__"):  # probes such as __wrapped__ or __path__ never load anything
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if name not in exports and name in modules():
            return importlib.import_module(f"{package}.{name}")
        where = module_of(name)
        if where is not None:
            full = where if where.startswith("interp.") else f"{package}.{where}"
            return getattr(importlib.import_module(full), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(listed) | set(modules()))

    return __getattr__, __dir__, listed


def _aliases() -> dict:
    """Names the face no longer lists and still resolves: every name of `interp.analyses` (each analysis's
    config, entry function and result class, from its record) and the helpers that used to stand here."""
    import importlib

    analyses = importlib.import_module("interp.analyses")
    return {**{n: "interp.analyses" for n in analyses.__all__}, **_MOVED}


# the core: listed in __all__ and dir(interp)
_EXPORTS = {
    # loading and the model
    "load_model": "models.loading",
    "list_models": "models.loading",
    "spec_from_config": "models.loading",
    "Model": "models.model",
    "Batch": "models.model",
    "ModelSpec": "models.spec",
    "RopeSpec": "models.spec",
    # sites
    "HeadId": "sites",
    "KVHeadId": "sites",
    "Site": "sites",
    "SiteKind": "sites",
    # interventions
    "AblateHeads": "hooks.interventions",
    "ZeroRopeDims": "hooks.interventions",
    "WindowHeads": "hooks.window",
    "RemapPositions": "hooks.remap",
    "MeanPairs": "hooks.bandpatch",
    "pair_means": "hooks.bandpatch",
    # observers
    "Capture": "hooks.capture",
    "Patch": "hooks.capture",
    "AttentionRows": "hooks.rows",
    "attention_rows": "hooks.rows",
    # errors
    "InterpError": "errors",
    "InvalidInputError": "errors",
    "ModelNotFoundError": "errors",
    "UnsupportedModelError": "errors",
    "InterventionError": "errors",
    # a run folder back into its result object
    "load_result": "runtime.records",
    # the tasks' configs
    "NiahConfig": "tasks.niah",
    "RepeatedConfig": "tasks.repeated",
}

# names that stood here before the face was curated, at their homes (aliases: they resolve, unlisted)
_MOVED = {
    "from_bridge": "interop",
    "head_output_means": "hooks",
    "progress": "runtime.progress",
    "build_niah": "tasks.niah",
    "run_attribution": "patching",
    "niah_pairs": "patching",
    "ioi_pairs": "patching",
    "ioi_scores": "patching",
    "repeated_pairs": "patching",
    "read_pairs": "patching",
    "CorpusData": "store",
    "open_store": "store",
    "Variant": "organisms",
    "variant_grid": "organisms",
    "locate_build": "organisms",
    "measure_build": "organisms",
    "probes_by_layer": "figures.probes",
    "angles_by_layer": "figures.probes",
    "decomposition_by_layer": "figures.probes",
    "pos_pca_curves": "figures.probes",
}

__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS, _aliases)
