"""Runtime plumbing every layer may use: devices and free memory, torch.distributed sweeps, progress
reporting and the provenance of a result (package versions, weights fingerprints, model identity).
Nothing here imports the models, analyses or CLI."""

from interp import submodule_getattr

__getattr__ = submodule_getattr(__name__, __path__)
