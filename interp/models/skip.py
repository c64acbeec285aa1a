"""Layer skipping: a forward pass that starts at layer l from a given residual stream.

A patched row differs from the base run only from its first patched layer on, so layers below it
would recompute the base run. `start_at(model, l, hidden)` makes the next forward passes skip
them: the decoder layers 0..l-1 are replaced, for the body of the `with`, by stand-ins that run
nothing (the last one hands on `hidden`, the base run's residual stream entering layer l at the
positions the pass computes), so layer l receives `hidden` exactly where it would have received
the output of layer l-1. The model's own forward still builds the masks, position embeddings and
KV cache (so sliding-window layers, per-layer RoPE and learned positions keep their meaning), and
interventions on layers >= l run as usual; interventions on layers < l do not run, so the caller
must only patch layers >= l (patching's rows do).

The stand-ins are counted as attention calls that were deliberately skipped, so `Model.intervene`'s
check that every layer's attention went through interp's interception point still holds.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from interp.errors import InvalidInputError


class _Skipped(nn.Module):
    """Stands in for a decoder layer below the start layer: returns `hidden` (last stand-in) or its
    input unchanged (the others), whatever arguments the model's layer loop passes."""

    def __init__(self, state, layer: int, hidden: torch.Tensor | None):
        super().__init__()
        self.state, self.layer, self.hidden = state, layer, hidden

    def forward(self, hidden_states, *args, **kwargs):
        self.state.skipped[self.layer] += 1
        if self.hidden is None:
            return hidden_states
        if self.hidden.shape != hidden_states.shape:
            raise InvalidInputError(f"start_at: the residual stream given for layer {self.layer + 1} has shape "
                                    f"{tuple(self.hidden.shape)}, the pass computes {tuple(hidden_states.shape)}")
        return self.hidden.to(device=hidden_states.device, dtype=hidden_states.dtype)


@contextlib.contextmanager
def start_at(model, layer: int, hidden: torch.Tensor):
    """Within the `with`, forward passes of `model` run layers `layer`.. only, `hidden` [batch, seq, d_model]
    (seq: the positions the pass computes, after any KV-cache prefix) entering `layer`. layer 0: nothing
    changes."""
    n = model.spec.n_layers
    if not 0 <= layer < n:
        raise InvalidInputError(f"start layer {layer} is outside 0..{n - 1}")
    if layer == 0:
        yield model
        return
    layers = getattr(model.adapter.body(), model.adapter.layers_attr)
    kept = [layers[i] for i in range(layer)]
    try:
        for i in range(layer):
            layers[i] = _Skipped(model._state, i, hidden if i == layer - 1 else None)
        yield model
    finally:
        for i, m in enumerate(kept):
            layers[i] = m
