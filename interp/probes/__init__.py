"""Positional vs semantic subspaces of the residual stream, from an activation store.

    res = interp.probes.run_probes("runs/store", interp.probes.ProbeConfig(), model=model)

Per site: held-out R^2 of a linear position probe, held-out accuracy of word-category and
token-identity probes (each with a shuffled-label and a majority baseline), principal angles
between the positional and semantic subspaces (with random-subspace baselines), the decomposition
h = mean + pos[t] + ctx[seq] + rest with each part's share of variance, and the principal
components of pos[t]. With a model: per-head structure (fixed offsets, sinks) vs semantic (content
match) classification. Everything is streamed from the store (see layer.py).
"""

from interp.probes.heads import HeadConfig, HeadResult, classify_heads
from interp.probes.run import ProbeConfig, ProbeResult, probe_sites, probe_steps, run_probes

__all__ = ["HeadConfig", "HeadResult", "ProbeConfig", "ProbeResult", "classify_heads", "probe_sites", "probe_steps",
           "run_probes"]
