"""Key-window interventions: chosen query heads read only S sink tokens and the W most recent keys.

`WindowHeads(heads, window, sinks)` restricts the same heads in every targeted row (a streaming head in
DuoAttention's sense); `WindowCells(layers, heads, window, sinks)` restricts one head per batch row, so a
batch holds many single-head windowings at once (the far-context necessity scan). The restriction is
exact (keywindow.py): the query counts inside its window as in transformers' `sliding_window`, a window
covering the whole context changes nothing (no recomputation at all), and attention rows observed in the
same pass see the restricted attention.

Memory. A KV cache stores keys and values per KEY-VALUE head: under GQA a windowed query head frees nothing
unless every query head of its group is windowed. `kv_memory` counts what a set of windowed heads keeps
(bytes, per layer and KV head) at a given context; `by_group=True` widens a head set to whole KV groups.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch

from interp.errors import InvalidInputError
from interp.hooks.interception import AttnCall
from interp.hooks.interventions import Intervention
from interp.hooks.keywindow import KeyWindow
from interp.sites import HeadId, HeadLike, as_heads


def _check_window(window: int, sinks: int) -> None:
    if int(window) < 1:
        raise InvalidInputError(f"window must be >= 1 token (the query itself counts), got {window}")
    if int(sinks) < 0:
        raise InvalidInputError(f"sinks must be >= 0, got {sinks}")


def whole_groups(heads: Iterable[HeadLike], spec) -> tuple[HeadId, ...]:
    """`heads` widened to every query head of each KV group they touch (what frees KV memory under GQA)."""
    g = spec.n_heads // spec.n_kv_heads
    out = {HeadId(h.layer, (h.head // g) * g + i) for h in as_heads(heads) for i in range(g)}
    return tuple(sorted(out))


def kv_memory(spec, windowed: Iterable[HeadLike], context: int, window: int, sinks: int,
              bytes_per_value: int = 2) -> dict:
    """KV-cache bytes kept when `windowed` query heads keep only sinks + window keys, at `context` tokens.

    A KV head is windowed only when every query head of its group is; the others keep `context` keys.
    Returns {"full_bytes", "kept_bytes", "fraction", "windowed_kv_heads", "n_kv_heads"}.
    """
    g = spec.n_heads // spec.n_kv_heads
    per_key = 2 * spec.head_dim * bytes_per_value  # key + value
    by_group: dict[tuple[int, int], int] = {}
    for h in as_heads(windowed):
        by_group[(h.layer, h.head // g)] = by_group.get((h.layer, h.head // g), 0) + 1
    n_win = sum(1 for n in by_group.values() if n == g)
    n_kv = spec.n_layers * spec.n_kv_heads
    short = min(context, window + sinks)
    full = n_kv * context * per_key
    kept = (n_kv - n_win) * context * per_key + n_win * short * per_key
    return {"full_bytes": full, "kept_bytes": kept, "fraction": kept / full if full else 1.0,
            "windowed_kv_heads": n_win, "n_kv_heads": n_kv}


class WindowHeads(Intervention):
    """The listed query heads read only the first `sinks` real tokens and the last `window` keys up to and
    including the query (see keywindow.py); every other head, and rows outside `rows`, unchanged."""

    restricts_keys = True

    def __init__(self, heads: Iterable[HeadLike] | str, window: int, sinks: int = 0,
                 rows: Sequence[int] | None = None):
        super().__init__(rows)
        _check_window(window, sinks)
        self.heads = as_heads(heads)
        self.window, self.sinks = int(window), int(sinks)
        self.by_layer: dict[int, list[int]] = {}
        for h in self.heads:
            self.by_layer.setdefault(h.layer, []).append(h.head)

    def bind(self, model):
        """Check that every head lies in the model (InvalidInputError)."""
        super().bind(model)
        self._check_heads(self.heads)

    def key_window(self, call: AttnCall, batch: int, device) -> KeyWindow | None:
        """Called by the attention wrapper after the editors: the [batch, n_heads] pairs restricted in this call."""
        heads = self.by_layer.get(call.layer)
        if not heads:
            return None
        sel = torch.zeros(batch, self.spec.n_heads, dtype=torch.bool, device=device)
        rows = self._row_index(call, batch)
        h = torch.as_tensor(heads, dtype=torch.long, device=device)
        if rows is None:
            sel[:, h] = True
        else:
            sel[rows.to(device)[:, None], h[None, :]] = True
        return KeyWindow(self.sinks, self.window, sel)

    def describe(self):
        return {**super().describe(), "heads": [str(h) for h in self.heads], "mode": "window",
                "window": self.window, "sinks": self.sinks,
                "semantics": f"query heads read only the first {self.sinks} real tokens and the last {self.window} "
                             "keys up to and including the query"}


class WindowCells(Intervention):
    """Row r of the batch windows one head, (`layers[r]`, `heads[r]`); a head of -1 windows nothing."""

    restricts_keys = True

    def __init__(self, layers: Sequence[int], heads: Sequence[int], window: int, sinks: int = 0):
        super().__init__(None)
        _check_window(window, sinks)
        self.layers = torch.as_tensor(list(layers), dtype=torch.long)
        self.heads = torch.as_tensor(list(heads), dtype=torch.long)
        if self.layers.shape != self.heads.shape:
            raise InvalidInputError("WindowCells: one layer and one head per row")
        self.window, self.sinks = int(window), int(sinks)

    def bind(self, model):
        super().bind(model)
        ok = (self.heads < 0) | ((self.layers >= 0) & (self.layers < self.spec.n_layers)
                                 & (self.heads < self.spec.n_heads))
        if not bool(ok.all()):
            raise InvalidInputError(f"WindowCells: heads outside the model ({self.spec.n_layers} layers, "
                                    f"{self.spec.n_heads} query heads)")

    def key_window(self, call: AttnCall, batch: int, device) -> KeyWindow | None:
        lay = self.layers[call.batch_start:call.batch_start + batch]
        hd = self.heads[call.batch_start:call.batch_start + batch]
        hit = (lay == call.layer) & (hd >= 0)
        if not bool(hit.any()):
            return None
        sel = torch.zeros(batch, self.spec.n_heads, dtype=torch.bool)
        r = hit.nonzero().reshape(-1)
        sel[r, hd[r]] = True
        return KeyWindow(self.sinks, self.window, sel.to(device))

    def describe(self):
        return {**super().describe(), "cells": [[int(l), int(h)] for l, h in zip(self.layers, self.heads)],
                "mode": "window", "window": self.window, "sinks": self.sinks}
