"""Runtime plumbing every layer may use: devices and free memory, torch.distributed sweeps, progress
reporting and the provenance of a result (package versions, weights fingerprints, model identity).
Nothing here imports the models, analyses or CLI."""

from interp import package_face

_EXPORTS: dict = {}  # its modules are the face: interp.runtime.<module>

__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS)
