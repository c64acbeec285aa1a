"""Content or magnitude of rotary pairs replaced by their means, RoPE phase kept: the complements of a phase patch.

A rotary pair of a post-RoPE query or key at position p is x = R(p w) c: its content c (the pre-rotation 2-vector)
turned by the position's angle p w. Zeroing the pair (ZeroRopeDims) removes both; a phase patch
(RemapPositions with scale 0: every key seen at one distance) removes the position and keeps c; the patches here
remove (part of) c and keep the position:

  content:    x' = R(p w) c_mean, c_mean the mean pre-rotation vector of that (layer, head, pair) over reference
              text: the pair carries position alone.
  magnitude:  x' = x |x|_mean / |x|, |x|_mean the mean length over reference text: the pair's angle (position
              plus content's own angle) kept, its length (RoPE never changes it) set to the mean.

Means come from `pair_means(model, texts)` (prefill over reference passages, real tokens only, every head and
pair of every layer). The patch edits the listed query heads (`side="q"`), the key heads they read (`"k"`: under
GQA every query head of the group sees it) or both, out of place (cached keys are never modified; every call sees
the whole cache and the edit is a function of key and position, so cached decoding equals full forwards).
Positions are those the model used: the token index minus the row's left padding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import torch

from interp.errors import InvalidInputError
from interp.hooks.interventions import ZERO_SIDES, Intervention, _heads_by_layer
from interp.hooks.keywindow import real_starts
from interp.hooks.remap import rotate_pairs
from interp.sites import HeadLike, as_heads

MEAN_MODES = ("content", "magnitude")


@dataclass
class PairMeans:
    """Per layer: q_vec [n_heads, n_pairs, 2] mean pre-rotation vector of every query head's pairs, q_len
    [n_heads, n_pairs] their mean length; k_vec / k_len the same per key-value head; n_tokens counted."""

    q_vec: dict[int, torch.Tensor]
    q_len: dict[int, torch.Tensor]
    k_vec: dict[int, torch.Tensor]
    k_len: dict[int, torch.Tensor]
    n_tokens: int


def _layer_geometry(spec, layer, device):
    rope = spec.rope_of(layer)
    dims = [rope.pair_dims(j) for j in range(rope.n_pairs)]
    a = torch.tensor([d[0] for d in dims], dtype=torch.long, device=device)
    b = torch.tensor([d[1] for d in dims], dtype=torch.long, device=device)
    return (a, b), torch.tensor(rope.inv_freq, dtype=torch.float64, device=device)


def _positions(call, b: int, k_len: int, device) -> torch.Tensor:
    """[b, k_len] the position the model gave each key (left padding: negative)."""
    start = real_starts(call, torch.arange(b, device=device), k_len).to(device)
    return torch.arange(k_len, device=device)[None, :] - start[:, None]


class _Collect(Intervention):
    """Observer for pair_means: sums pre-rotation pair vectors and lengths over real tokens (prefill calls)."""

    observes_qkv = True

    def __init__(self):
        super().__init__(None)
        self.sums: dict = {}

    def observe_qkv(self, call, q, k, v):
        """Accumulate the call's real tokens (queries and keys of a cache-free forward)."""
        b, _, s, _ = q.shape
        if s != k.shape[2]:
            raise InvalidInputError("pair_means needs cache-free forwards (one call per prompt's prefill)")
        dims, w = _layer_geometry(self.spec, call.layer, q.device)
        pos = _positions(call, b, s, q.device)
        real = (pos >= 0).float()  # [b, s]
        for side, t in (("q", q), ("k", k)):
            c = rotate_pairs(t.float(), -pos.clamp(min=0).double()[:, None, :], dims, w)  # undo RoPE
            vec = torch.stack([c[..., dims[0]], c[..., dims[1]]], dim=-1)  # [b, h, s, pairs, 2]
            wts = real[:, None, :, None]
            acc = self.sums.setdefault((call.layer, side), [0.0, 0.0, 0.0])
            acc[0] = acc[0] + (vec * wts[..., None]).sum(dim=(0, 2))
            acc[1] = acc[1] + (vec.norm(dim=-1) * wts).sum(dim=(0, 2))
            acc[2] = acc[2] + float(real.sum())


def pair_means(model, texts: Sequence[Sequence[int]], batch_size: int = 8) -> PairMeans:
    """Mean pre-rotation vector and mean length of every rotary pair of every query and key-value head, over the
    real tokens of `texts` (token-id lists), from cache-free forwards. Raises InvalidInputError without RoPE."""
    if model.spec.rope is None:
        raise InvalidInputError(f"{model.spec.architecture} has no rotary position embedding: nothing to average")
    if not texts:
        raise InvalidInputError("pair_means needs at least one reference text")
    col = _Collect()
    with torch.no_grad(), model.intervene(col):
        n = max(len(t) for t in texts)
        ids = torch.zeros(len(texts), n, dtype=torch.long)
        mask = torch.zeros(len(texts), n, dtype=torch.long)
        for i, t in enumerate(texts):  # left padding, as the model pads
            ids[i, n - len(t):] = torch.as_tensor(list(t), dtype=torch.long)
            mask[i, n - len(t):] = 1
        model.forward(ids, attention_mask=mask, batch_size=batch_size, logits=False)
    out = {"q_vec": {}, "q_len": {}, "k_vec": {}, "k_len": {}}
    n = 0
    for (layer, side), (vec, length, count) in col.sums.items():
        out[f"{side}_vec"][layer] = (vec / count).cpu()
        out[f"{side}_len"][layer] = (length / count).cpu()
        n = int(count)
    return PairMeans(**out, n_tokens=n)


class MeanPairs(Intervention):
    """Rotary pairs `pairs` of the listed query heads (`side` q), of the key heads they read (k) or both, with
    their content (`mode="content"`: the mean pre-rotation vector, rotated to the token's position) or their
    length (`"magnitude"`: angle kept) replaced by `means` (a PairMeans). See the module docstring."""

    def __init__(self, heads: Iterable[HeadLike] | str, pairs: Sequence[int], means: PairMeans,
                 mode: str = "content", side: str = "q", rows: Sequence[int] | None = None):
        super().__init__(rows)
        if mode not in MEAN_MODES:
            raise InvalidInputError(f"mode {mode!r}: valid are {', '.join(MEAN_MODES)}")
        if side not in ZERO_SIDES:
            raise InvalidInputError(f"unknown side {side!r}; valid sides: {', '.join(ZERO_SIDES)}")
        self.heads, self.pairs = as_heads(heads), tuple(sorted({int(p) for p in pairs}))
        self.means, self.mode, self.side = means, mode, side
        self.edits_qkv = True

    def bind(self, model):
        """Check heads, RoPE, the pair indices and that `means` cover every listed layer."""
        super().bind(model)
        self._check_heads(self.heads)
        if self.spec.rope is None:
            raise InvalidInputError(f"{self.spec.architecture} has no rotary position embedding: MeanPairs needs RoPE")
        bad = [p for p in self.pairs if not 0 <= p < self.spec.rope.n_pairs]
        if bad:
            raise InvalidInputError(f"pair indices {bad} outside 0..{self.spec.rope.n_pairs - 1}")
        self.q_by_layer = _heads_by_layer(self.heads)
        self.k_by_layer = {layer: sorted({self.spec.kv_head_of(h) for h in hs}) for layer, hs in self.q_by_layer.items()}
        missing = [layer for layer in self.q_by_layer if layer not in self.means.q_vec]
        if missing:
            raise InvalidInputError(f"the pair means lack layers {missing}: compute them with pair_means on this model")

    def _patch(self, t, call, heads, side):
        b, _, n, _ = t.shape
        rows = self._row_index(call, b)
        rows = torch.arange(b, device=t.device) if rows is None else rows.to(t.device)
        if len(rows) == 0 or not self.pairs:
            return t
        dims_all, w_all = _layer_geometry(self.spec, call.layer, t.device)
        p = torch.as_tensor(self.pairs, dtype=torch.long, device=t.device)
        dims, w = (dims_all[0][p], dims_all[1][p]), w_all[p]
        h = torch.as_tensor(heads, dtype=torch.long, device=t.device)
        sel = t[rows[:, None], h[None, :]].float()  # [r, nh, n, d]
        if self.mode == "content":
            c = getattr(self.means, f"{side}_vec")[call.layer].to(t.device)[h][:, p]  # [nh, np, 2]
            pos = _positions(call, b, call.k_len, t.device)[rows][:, -n:].clamp(min=0).double()
            new = sel.clone()
            new[..., dims[0]] = c[None, :, None, :, 0].expand(len(rows), -1, n, -1)
            new[..., dims[1]] = c[None, :, None, :, 1].expand(len(rows), -1, n, -1)
            new = rotate_pairs(new, pos[:, None, :], dims, w)
        else:
            target = getattr(self.means, f"{side}_len")[call.layer].to(t.device)[h][:, p]  # [nh, np]
            xa, xb = sel[..., dims[0]], sel[..., dims[1]]
            length = torch.sqrt(xa * xa + xb * xb)
            f = torch.where(length > 0, target[None, :, None, :] / length.clamp(min=1e-30), torch.zeros_like(length))
            new = sel.clone()
            new[..., dims[0]], new[..., dims[1]] = xa * f, xb * f
        out = t.clone()
        out[rows[:, None], h[None, :]] = new.to(t.dtype)
        return out

    def edit_qkv(self, call, q, k, v):
        """The listed heads' pairs (side q) and/or their key heads' pairs (side k) replaced, out of place."""
        if call.layer not in self.q_by_layer:
            return q, k, v
        if self.side in ("q", "both"):
            q = self._patch(q, call, self.q_by_layer[call.layer], "q")
        if self.side in ("k", "both"):
            k = self._patch(k, call, self.k_by_layer[call.layer], "k")
        return q, k, v

    def describe(self):
        """JSON-able summary: type, rows, heads, pairs, mode, side and `semantics`."""
        what = ("content replaced by its mean pre-rotation vector, rotated to the token's position" if
                self.mode == "content" else "length set to its mean, angle kept")
        return {**super().describe(), "heads": [str(h) for h in self.heads], "pairs": list(self.pairs),
                "mode": self.mode, "side": self.side, "reference_tokens": self.means.n_tokens,
                "semantics": f"rotary pairs {list(self.pairs)}: {what}"}

