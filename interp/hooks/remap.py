"""Per-head position remapping: chosen query heads compute RoPE at other positions, every other head unchanged.

The wrapper hands over post-RoPE q and k: a vector rotated by angle p*w (pair frequency w, position p) is moved
to position p' by rotating each rotary pair by (p' - p)*w more (rotations compose; a magnitude factor on
cos/sin, as YaRN's attention factor, multiplies both and is kept). Positions are those the model saw: the
token index minus the row's left padding (position_ids = mask.cumsum - 1), cached keys included.

  scale s:  the query at p goes to s*p and every key at j to s*j: each query-key distance times s
            (position interpolation when s < 1).
  offset d: the query alone goes to p + d: every distance is seen d larger (keys unmoved).
  shift D:  query and keys all move by D: distances unchanged, so the logits are too (a control).

Only the pairs of `bands` move (all rotary pairs by default); unrotated dims (partial rotary) never do. Each
layer uses its own frequencies (`spec.rope_of(layer)`: Gemma-3's per-layer theta, llama3 / YaRN scaling as
the rotary module holds them).

Exactness under GQA. Moving keys must not move them for the other query heads of the KV group, so when keys
move (scale != 1 or shift != 0) the intervention recomputes its heads' outputs after the base attention
(`recomputes_heads`, interception.py) against a private rotated copy of their KV head's keys, in query blocks
with the model's own mask, softcap and any key windows, softmax in float32 (as keywindow.py). The query is
rotated in `edit_qkv`, so the base attention and observers see the remapped query; observers still see the
KV head's shared, unmoved keys (attention rows of a scaled head are not the remapped ones). An offset alone
only rotates queries: no recomputation. scale 1, offset 0, shift 0 edits nothing (bit-identical outputs).

RoPE whose frequencies depend on the sequence length (dynamic NTK, longrope) is not shift-invariant, and
models without RoPE have nothing to rotate: both are refused.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import torch

from interp.errors import InvalidInputError
from interp.hooks.interventions import Intervention, _heads_by_layer
from interp.hooks.keywindow import allowed_keys, attend_block, real_starts
from interp.sites import HeadLike, as_heads

BAND_NAMES = ("lowest", "highest")


def band_pairs(rope, bands) -> tuple[int, ...]:
    """Rotary pair indices named by `bands`: None (every pair), explicit pair indices, or "lowest:N" /
    "highest:N" (the N lowest / highest frequencies of `rope`, as rope_zero names bands), also as a tuple."""
    if bands is None:
        return tuple(range(rope.n_pairs))
    if isinstance(bands, str):
        name, _, n = bands.partition(":")
        bands = (name, n)
    if len(bands) == 2 and isinstance(bands[0], str):
        name, n = bands
        if name not in BAND_NAMES or not str(n).isdigit():
            raise InvalidInputError(f"band {bands!r}: write lowest:N or highest:N (N pairs), or pair indices")
        n = int(n)
        if n > rope.n_pairs:
            raise InvalidInputError(f"band {name}:{n} asks for {n} pairs; the heads have {rope.n_pairs}")
        order = rope.pairs_by_frequency()
        return tuple(sorted(order[:n] if name == "lowest" else order[::-1][:n]))
    pairs = tuple(sorted({int(p) for p in bands}))
    bad = [p for p in pairs if not 0 <= p < rope.n_pairs]
    if bad:
        raise InvalidInputError(f"pair indices {bad} outside 0..{rope.n_pairs - 1}")
    return pairs


def rotate_pairs(t: torch.Tensor, delta: torch.Tensor, dims: tuple[torch.Tensor, torch.Tensor],
                 freqs: torch.Tensor) -> torch.Tensor:
    """t [..., n, d] with pair i (head dims dims[0][i], dims[1][i]) rotated by delta[..., n] * freqs[i] more, in
    the sense RoPE rotates (x_a, x_b) -> (x_a cos - x_b sin, x_a sin + x_b cos); out of place, float32 math."""
    ang = delta.double()[..., None] * freqs.double()  # [..., n, pairs]
    cos, sin = ang.cos().float(), ang.sin().float()
    a, b = dims
    x = t.float()
    xa, xb = x[..., a], x[..., b]
    x = x.clone()
    x[..., a] = xa * cos - xb * sin
    x[..., b] = xa * sin + xb * cos
    return x.to(t.dtype)


class RemapPositions(Intervention):
    """Query heads `heads` compute RoPE at remapped positions: `scale` (query and keys, every distance times s),
    `offset` (query only, every distance d larger), `shift` (query and keys by D: distances unchanged, a
    control). `bands`: the rotary pairs that move (None: all; pair indices; "lowest:N" / "highest:N"). `rows`:
    global batch rows (default all). See the module docstring for the exactness argument."""

    def __init__(self, heads: Iterable[HeadLike] | str, scale: float = 1.0, offset: float = 0, shift: float = 0,
                 bands: Sequence[int] | str | None = None, rows: Sequence[int] | None = None, block: int = 256):
        super().__init__(rows)
        self.heads = as_heads(heads)
        self.scale, self.offset, self.shift = float(scale), float(offset), float(shift)
        if not all(math.isfinite(x) for x in (self.scale, self.offset, self.shift)) or self.scale < 0:
            raise InvalidInputError(f"scale {scale} / offset {offset} / shift {shift}: need finite numbers, scale >= 0")
        if isinstance(bands, str) and (bands.partition(":")[0] not in BAND_NAMES or not bands.partition(":")[2].isdigit()):
            raise InvalidInputError(f"band {bands!r}: write lowest:N or highest:N (N pairs), or pair indices")
        self.bands = bands
        self.block = int(block)
        self.keys_move = self.scale != 1.0 or self.shift != 0.0
        self.edits_qkv = self.keys_move or self.offset != 0.0
        self.recomputes_heads = self.keys_move

    def bind(self, model):
        """Check the heads, that every layer has shift-invariant RoPE (InvalidInputError), resolve the bands."""
        super().bind(model)
        self._check_heads(self.heads)
        spec = self.spec
        if spec.rope is None:
            raise InvalidInputError(f"{spec.architecture} has no rotary position embedding ({spec.positional} "
                                    "positions): RemapPositions needs a RoPE model")
        self.by_layer = _heads_by_layer(self.heads)
        self._geom = {}
        for layer in self.by_layer:
            rope = spec.rope_of(layer)
            if rope.dynamic:
                raise InvalidInputError(f"{spec.model_type}: rope_type {rope.scaling!r} changes its frequencies with "
                                        "the sequence length, so RoPE is not a function of relative position and a "
                                        "rotation cannot remap positions exactly; RemapPositions refuses it")
            pairs = band_pairs(rope, self.bands)
            dims = [rope.pair_dims(j) for j in pairs]
            self._geom[layer] = (torch.tensor([d[0] for d in dims], dtype=torch.long),
                                 torch.tensor([d[1] for d in dims], dtype=torch.long),
                                 torch.tensor([rope.inv_freq[j] for j in pairs], dtype=torch.float64), pairs)

    def _geometry(self, layer, device):
        a, b, w, _ = self._geom[layer]
        return (a.to(device), b.to(device)), w.to(device)

    def _rows(self, call, b, device):
        r = self._row_index(call, b)
        return torch.arange(b, device=device) if r is None else r.to(device)

    def _positions(self, call, rows, k_len, device):
        """[n_rows, k_len] the position the model gave each key of `rows` (left padding: 0)."""
        start = real_starts(call, rows, k_len).to(device)
        return (torch.arange(k_len, device=device)[None, :] - start[:, None]).clamp(min=0)

    def edit_qkv(self, call, q, k, v):
        """Rotate the listed heads' queries (targeted rows) to their remapped positions; k, v unchanged."""
        heads = self.by_layer.get(call.layer)
        if not heads:
            return q, k, v
        b, _, s, _ = q.shape
        rows = self._rows(call, b, q.device)
        if len(rows) == 0:
            return q, k, v
        dims, w = self._geometry(call.layer, q.device)
        p = self._positions(call, rows, k.shape[2], q.device)[:, -s:].double()  # [n_rows, s]
        delta = (self.scale - 1.0) * p + self.offset + self.shift
        h = torch.as_tensor(heads, dtype=torch.long, device=q.device)
        sel = q[rows[:, None], h[None, :]]  # [n_rows, n_heads, s, d]
        q = q.clone()
        q[rows[:, None], h[None, :]] = rotate_pairs(sel, delta[:, None, :], dims, w)
        return q, k, v

    def recompute_out(self, call, q, k, v, out):
        """`out` [b, s, n_heads, d] with the listed heads' outputs (targeted rows) recomputed against their own
        copy of the KV head's keys, moved to the remapped key positions."""
        heads = self.by_layer.get(call.layer)
        if not heads:
            return out
        b, hq, s, d = q.shape
        k_len, g = k.shape[2], hq // k.shape[1]
        rows = self._rows(call, b, q.device)
        if len(rows) == 0:
            return out
        h = torch.as_tensor(heads, dtype=torch.long, device=q.device)
        R, H = rows.repeat_interleave(len(h)), h.repeat(len(rows))  # the (row, head) pairs, P of them
        dims, w = self._geometry(call.layer, q.device)
        pk = self._positions(call, rows, k_len, q.device).double().repeat_interleave(len(h), dim=0)  # [P, k_len]
        ks = rotate_pairs(k[R, H // g], (self.scale - 1.0) * pk + self.shift, dims, w)
        res = pair_attention(call, q[R, H], ks, v[R, H // g], R, H, self.block)
        new = out.clone()
        new[R, :, H] = res.to(out.dtype)
        return new

    def describe(self):
        """JSON-able summary: type, rows, heads, scale, offset, shift, bands and `semantics`."""
        return {**super().describe(), "heads": [str(h) for h in self.heads], "scale": self.scale,
                "offset": self.offset, "shift": self.shift,
                "bands": self.bands if self.bands is None or isinstance(self.bands, str) else list(self.bands),
                "semantics": "RoPE of the listed query heads at remapped positions: query s*p + offset + shift, "
                             "keys s*j + shift (a private copy of the KV head's keys)"}


def pair_attention(call, qs: torch.Tensor, ks: torch.Tensor, vs: torch.Tensor, rows: torch.Tensor,
                   heads: torch.Tensor, block: int = 256) -> torch.Tensor:
    """Attention output [P, s, d] (float32) of P (row, query head) pairs from their queries qs [P, s, d], keys
    ks and values vs [P, k_len, d]: the model's scaling, softcap and mask, and the key windows on the call; in
    query blocks over the keys a block can read (causal), so memory is O(P x block x k_len)."""
    if not getattr(call.module, "is_causal", True):
        raise InvalidInputError("RemapPositions recomputes causal (decoder) attention; this layer is bidirectional")
    P, s, d = qs.shape
    k_len = ks.shape[1]
    dev = qs.device
    qabs_all = torch.arange(k_len - s, k_len, device=dev)
    start = real_starts(call, rows, k_len) if call.windows else None
    res = torch.empty(P, s, vs.shape[-1], dtype=torch.float32, device=dev)
    for a in range(0, s, block):
        e = min(s, a + block)
        qabs = qabs_all[a:e]
        kidx = torch.arange(int(qabs[-1]) + 1, device=dev)
        extra = None
        for win in call.windows:  # key windows on the same heads still apply
            inside = allowed_keys(qabs.expand(P, -1), kidx, start, win.sinks, win.window)
            inside = inside | ~win.sel.to(dev)[rows, heads][:, None, None]
            extra = inside if extra is None else extra & inside
        res[:, a:e] = attend_block(call, rows, heads, qs[:, a:e], ks[:, kidx], vs[:, kidx], slice(a, e), qabs, kidx,
                                   extra)
    return res
