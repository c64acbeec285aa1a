"""What a model is and how to get one: ModelSpec (geometry, attention, RoPE), one adapter per
architecture, the Model wrapper, the catalog of aliases, fetching real checkpoints, GGUF conversion,
tiny random configs, loading, memory estimates and RoPE frequency facts."""

from interp import submodule_getattr

__getattr__ = submodule_getattr(__name__, __path__)
