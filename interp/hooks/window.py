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

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch

from interp.errors import InvalidInputError
from interp.hooks.interception import AttnCall
from interp.hooks.interventions import ABLATION_MODES, AblateHeads, Intervention
from interp.hooks.keywindow import KeyWindow
from interp.hooks.remap import RemapPositions
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
        """JSON-able summary: type, rows, heads (as 'L3H1'), mode "window", window, sinks and `semantics`."""
        return {**super().describe(), "heads": [str(h) for h in self.heads], "mode": "window",
                "window": self.window, "sinks": self.sinks,
                "semantics": f"query heads read only the first {self.sinks} real tokens and the last {self.window} "
                             "keys up to and including the query"}


class WindowCells(Intervention):
    """Row r of the batch windows the query heads `heads[r]` (one index or several: a KV group) of layer
    `layers[r]`; an empty list or -1 windows nothing in that row."""

    restricts_keys = True

    def __init__(self, layers: Sequence[int], heads: Sequence[int | Sequence[int]], window: int, sinks: int = 0):
        super().__init__(None)
        _check_window(window, sinks)
        self.layers = [int(l) for l in layers]
        self.heads = [[int(h)] if isinstance(h, (int, np.integer)) else [int(x) for x in h] for h in heads]
        self.heads = [[h for h in hs if h >= 0] for hs in self.heads]
        if len(self.layers) != len(self.heads):
            raise InvalidInputError("WindowCells: one layer and one head list per row")
        self.window, self.sinks = int(window), int(sinks)

    def bind(self, model):
        super().bind(model)
        bad = [(l, hs) for l, hs in zip(self.layers, self.heads)
               if hs and not (0 <= l < self.spec.n_layers and all(h < self.spec.n_heads for h in hs))]
        if bad:
            raise InvalidInputError(f"WindowCells: heads outside the model ({self.spec.n_layers} layers, "
                                    f"{self.spec.n_heads} query heads): {bad[:3]}")

    def key_window(self, call: AttnCall, batch: int, device) -> KeyWindow | None:
        sel = torch.zeros(batch, self.spec.n_heads, dtype=torch.bool)
        hit = False
        for r in range(batch):
            g = call.batch_start + r
            if g < len(self.layers) and self.layers[g] == call.layer and self.heads[g]:
                sel[r, self.heads[g]] = True
                hit = True
        return KeyWindow(self.sinks, self.window, sel.to(device)) if hit else None

    def describe(self):
        """JSON-able summary: the (layer, heads) windowed in each row, window and sinks."""
        return {**super().describe(), "cells": [[l, hs] for l, hs in zip(self.layers, self.heads)],
                "mode": "window", "window": self.window, "sinks": self.sinks}


HEAD_MODES = ABLATION_MODES + ("window", "remap")


@dataclass(frozen=True)
class HeadMasking:
    """How an experiment masks a set of heads: an `AblateHeads` mode (zero | mean | uniform), "window"
    (`WindowHeads` with `window` recent keys and `sinks` first tokens), or "remap" (`RemapPositions`: the heads
    see RoPE at positions times `scale` plus `offset`, in the rotary pairs of `bands`, all by default)."""

    mode: str = "zero"
    window: int | None = None
    sinks: int = 0
    scale: float = 1.0
    offset: float = 0.0
    bands: str | None = None

    def __post_init__(self):
        if self.mode not in HEAD_MODES:
            raise InvalidInputError(f"unknown ablation mode {self.mode!r}; valid modes: {', '.join(HEAD_MODES)}")
        if self.mode == "window":
            if self.window is None:
                raise InvalidInputError("mode window needs a window: how many recent keys the heads keep "
                                        "(--window W; --sinks S first tokens besides)")
            _check_window(self.window, self.sinks)
        elif self.window is not None:
            raise InvalidInputError(f"a window applies with mode window only (mode is {self.mode!r}): drop the "
                                    "window or use mode window")
        if self.mode == "remap":
            RemapPositions([], self.scale, self.offset, bands=self.bands)  # a bad scale / offset / band fails here
        elif (self.scale, self.offset, self.bands) != (1.0, 0.0, None):
            raise InvalidInputError(f"scale, offset and bands apply with mode remap only (mode is {self.mode!r})")

    def intervention(self, heads, means=None, rows=None) -> Intervention:
        """The intervention that masks `heads` (in `rows`, default all) this way."""
        if self.mode == "window":
            return WindowHeads(heads, self.window, self.sinks, rows=rows)
        if self.mode == "remap":
            return RemapPositions(heads, self.scale, self.offset, bands=self.bands, rows=rows)
        return AblateHeads(heads, mode=self.mode, means=means, rows=rows)
