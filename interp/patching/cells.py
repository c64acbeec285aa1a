"""Patching grids and the batched cell patch: many (pair, cell) rows in one forward pass.

A grid site names an activation kind and the axes of its cells:

| grid site        | activation | cell                      | patched                                |
|------------------|------------|---------------------------|----------------------------------------|
| resid_pre        | resid_pre  | (layer, position)         | the residual stream entering the layer |
| resid_post       | resid_post | (layer, position)         | the residual stream leaving the layer  |
| attn_out         | attn_out   | (layer, position)         | the attention block's output           |
| mlp_out          | mlp_out    | (layer, position)         | the MLP block's output                 |
| head_out         | head_out   | (layer, head)             | the head's output (o_proj input), every position |
| head_out_by_pos  | head_out   | (layer, position, head)   | the head's output at one position      |
| q                | q          | (layer, head)             | the query head (post-RoPE), every position |
| k, v             | k, v       | (layer, kv_head)          | the KEY-VALUE head, every position: under GQA it feeds `group_size` query heads (recorded) |

Positions are aligned at the end: position -1 is the last prompt token of every pair, so pairs of
different lengths share the axis (a pair only has the positions it is long enough for). In a
batch of left-padded rows, position -k is padded index T - k for every row, and the donor run's
activation at -k is read at the same end-aligned index of its own cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from interp.errors import InvalidInputError
from interp.hooks.interception import SiteHook
from interp.hooks.interventions import Intervention
from interp.sites import Site, SiteKind

# grid site -> (activation kind, cell axes)
GRID_SITES = {
    "resid_pre": (SiteKind.RESID_PRE, ("layer", "position")),
    "resid_post": (SiteKind.RESID_POST, ("layer", "position")),
    "attn_out": (SiteKind.ATTN_OUT, ("layer", "position")),
    "mlp_out": (SiteKind.MLP_OUT, ("layer", "position")),
    "head_out": (SiteKind.HEAD_OUT, ("layer", "head")),
    "head_out_by_pos": (SiteKind.HEAD_OUT, ("layer", "position", "head")),
    "q": (SiteKind.Q, ("layer", "head")),
    "k": (SiteKind.K, ("layer", "kv_head")),
    "v": (SiteKind.V, ("layer", "kv_head")),
}


def check_sites(sites) -> tuple[str, ...]:
    out = []
    for s in sites:
        s = s.strip()
        if s not in GRID_SITES:
            hint = " (resid_mid is not available yet: patch attn_out, or resid_post of the layer)" \
                if s == "resid_mid" else ""
            raise InvalidInputError(f"unknown patching site {s!r}{hint}; valid sites: {', '.join(GRID_SITES)}")
        out.append(s)
    if not out:
        raise InvalidInputError("no patching site given; e.g. --site resid_pre,head_out")
    return tuple(dict.fromkeys(out))


@dataclass
class Cells:
    """Rows of one forward chunk for one grid site: local batch row, layer, end-aligned position k
    (position -k; 0 = every position) and head (-1 = none), and the pair whose donor cache feeds it."""

    row: torch.Tensor
    layer: torch.Tensor
    k: torch.Tensor
    head: torch.Tensor
    pair: torch.Tensor


class CellPatch(Intervention):
    """Editor: row r of the batch gets the donor activation of its pair at its cell.

    `donor[layer]` is the donor run's activation of every pair, end-aligned and left-padded:
    residual kinds [n_pairs, T, d_model]; head kinds [n_pairs, T, heads, head_dim] (q: query heads,
    k/v: key-value heads). The batch it edits is left-padded to its own length t <= T, so its
    index i holds the donor's index i + T - t. Full forward passes only (no KV cache)."""

    def __init__(self, kind: SiteKind, cells: Cells, donor: dict[int, torch.Tensor]):
        super().__init__(None)
        self.kind, self.cells, self.donor = SiteKind(kind), cells, donor
        self.by_layer = {int(l): (cells.layer == l).nonzero().reshape(-1) for l in cells.layer.unique()}
        self.edits_qkv = self.kind in (SiteKind.Q, SiteKind.K, SiteKind.V)
        self.edits_out = self.kind == SiteKind.HEAD_OUT

    def site_hooks(self, model):
        if not self.kind.on_module:
            return []
        from interp.hooks.capture import module_for

        return [SiteHook(module_for(model, Site(l, self.kind.value)), self.kind.hook, self._module_fn(l), edits=True)
                for l in self.by_layer]

    def _apply(self, layer: int, t: torch.Tensor) -> torch.Tensor:
        """t [b, s, d] or [b, s, heads, d] with the cells of `layer` set from the donor, out of place."""
        sel = self.by_layer.get(layer)
        if sel is None:
            return t
        c = self.cells
        dev = t.device
        donor = self.donor[layer]
        off = donor.shape[1] - t.shape[1]
        rows, ks, heads, pairs = (x[sel] for x in (c.row, c.k, c.head, c.pair))
        t = t.clone()
        per_pos = ks > 0
        if bool(per_pos.any()):
            i = per_pos.nonzero().reshape(-1)
            pos = t.shape[1] - ks[i]
            idx_t = (rows[i].to(dev), pos.to(dev))
            idx_d = (pairs[i].to(donor.device), (pos + off).to(donor.device))
            if t.ndim == 4:
                idx_t += (heads[i].to(dev),)
                idx_d += (heads[i].to(donor.device),)
            t[idx_t] = donor[idx_d].to(device=dev, dtype=t.dtype)
        if not bool(per_pos.all()):  # every position of one head
            i = (~per_pos).nonzero().reshape(-1)
            src = donor[pairs[i].to(donor.device), off:, heads[i].to(donor.device)]  # [n, s, d]
            t[rows[i].to(dev), :, heads[i].to(dev)] = src.to(device=dev, dtype=t.dtype)
        return t

    def _module_fn(self, layer):
        def edit(t, batch_start):
            return self._apply(layer, t)
        return edit

    def edit_qkv(self, call, q, k, v):
        if call.layer not in self.by_layer:
            return q, k, v
        if call.q_len != call.k_len:
            raise InvalidInputError("q/k/v patching needs full forward passes (no KV cache)")
        if self.kind == SiteKind.Q:
            q = self._apply(call.layer, q.transpose(1, 2)).transpose(1, 2)
        elif self.kind == SiteKind.K:
            k = self._apply(call.layer, k.transpose(1, 2)).transpose(1, 2)
        else:
            v = self._apply(call.layer, v.transpose(1, 2)).transpose(1, 2)
        return q, k, v

    def edit_out(self, call, out):
        return self._apply(call.layer, out)

    def describe(self):
        return {"type": "CellPatch", "kind": self.kind.value, "cells": int(self.cells.row.numel())}
