"""What a model is and how to get one: ModelSpec (geometry, attention, RoPE), one adapter per
architecture, the Model wrapper, the catalog of aliases, fetching real checkpoints, GGUF conversion,
tiny random configs, loading, memory estimates and RoPE frequency facts."""

from interp import package_face

_EXPORTS = {
    "load_model": "loading",
    "list_models": "loading",
    "spec_from_config": "loading",
    "Model": "model",
    "Batch": "model",
    "ModelSpec": "spec",
    "RopeSpec": "spec",
    "LoadOptions": "load_options",
}

__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS)
