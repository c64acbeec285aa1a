"""Positional vs semantic subspaces of the residual stream, from an activation store.

    res = interp.probes.run_probes("runs/store", interp.probes.ProbeConfig(), model=model)

Per site: held-out R^2 of a linear position probe, held-out accuracy of word-category and
token-identity probes (each with a shuffled-label and a majority baseline), principal angles
between the positional and semantic subspaces (with random-subspace baselines), the decomposition
h = mean + pos[t] + ctx[seq] + rest with each part's share of variance, and the principal
components of pos[t]. With a model: per-head structure (fixed offsets, sinks) vs semantic (content
match) classification. Everything is streamed from the store (see layer.py).
"""

from interp import package_face

_EXPORTS = {
    "HeadConfig": "heads",
    "HeadResult": "heads",
    "classify_heads": "heads",
    "ProbeConfig": "run",
    "ProbeResult": "run",
    "probe_sites": "run",
    "probe_steps": "run",
    "run_probes": "run",
}

__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS)
