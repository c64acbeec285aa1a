"""Tasks: seeded prompts with recorded spans (NIAH, repeated random tokens, ...)."""

from interp import package_face

_EXPORTS = {
    "NiahConfig": "niah",
    "NiahSample": "niah",
    "build_niah": "niah",
    "RepeatedConfig": "repeated",
    "build_repeated": "repeated",
}

__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS)
