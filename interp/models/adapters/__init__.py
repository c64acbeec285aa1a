"""Architecture adapters, one file per family: each `Adapter` subclass registers its `model_types` as it is
defined, and the registry (registry.py) imports every module of this package, so adding an architecture is
adding a file (docs/adding-an-architecture.md). `adapter_for(hf_model)` picks by config.model_type."""

from interp import package_face

_EXPORTS = {
    "Adapter": "base",
    "ADAPTERS": "registry",
    "adapter_for": "registry",
    "adapter_class": "registry",
    "supported_model_types": "registry",
    "tiny_families": "registry",
}

__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS)
