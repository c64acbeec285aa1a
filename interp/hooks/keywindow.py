"""Per-head key windows: which keys a restricted query head may read, and its attention recomputed.

A key window (S sinks, window W) lets a query at absolute position i read key j only if the model's own
mask allows it AND (j is among the first S real tokens of its row, or i - W < j <= i). The query counts
inside its window, as in transformers' `sliding_window` (Gemma-2/3, Mistral): a window of W sees W keys
including the query itself, so on a sliding-window layer a key window of the layer's own size with no
sinks changes nothing. "Real tokens" skip left padding (read off the model's 4D mask).

The attention wrapper runs the model's own attention for every head, then recomputes the output of the
(row, head) pairs a window selects and puts it in their place. The recomputation runs in query blocks
over only the keys a block can read (its sinks, then the span from W before its first query to its last),
so memory is O(block x (S + W + block)) per pair, never a full attention matrix; the softmax is float32.
Observers (attention rows) apply the same restriction through `allowed_keys`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from interp.errors import InvalidInputError


@dataclass(frozen=True, eq=False)
class KeyWindow:
    """One restriction in one attention call: `sel` [batch, n_heads] bool, the (row, query head) pairs
    restricted to `sinks` first tokens plus a `window` of recent keys (the query included)."""

    sinks: int
    window: int
    sel: torch.Tensor


def allowed_keys(qabs: torch.Tensor, kidx: torch.Tensor, start: torch.Tensor, sinks: int, window: int
                 ) -> torch.Tensor:
    """[..., n_q, n_k] bool: key `kidx` readable under the window by a query at absolute position `qabs`
    ([..., n_q]), `start` ([...]) the row's first real token. Causality and padding are the model mask's job."""
    q = qabs[..., :, None]
    k = kidx[None, :] if kidx.ndim == 1 else kidx[..., None, :]
    return (k < start[..., None, None] + sinks) | (k > q - window)


def real_starts(call, rows: torch.Tensor, k_len: int) -> torch.Tensor:
    """Index of the first real key of each of `rows` (left padding skipped): what interp.Model recorded for
    the running forward (`call.pads`), else the first key any query of the call may read in the model's 4D
    mask (bool: True = visible; additive float: 0 = visible); 0 without either."""
    if call.pads is not None and len(call.pads) > int(rows.max()):
        return call.pads.to(rows.device)[rows]
    if call.mask is None:
        return torch.zeros(len(rows), dtype=torch.long, device=rows.device)
    m = call.mask[rows.to(call.mask.device), 0, :, :k_len]
    vis = (m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2).any(dim=-2)
    return vis.to(torch.int8).argmax(dim=-1).to(rows.device)


def _model_mask(call, rows, heads, q_sel: slice, kidx, qabs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The model's own mask for pairs (rows, heads), queries `q_sel`, keys `kidx`: (bool allowed, additive)."""
    mask = call.mask
    if mask is None:
        allowed = kidx[None, None, :] <= qabs[None, :, None]
        if call.sliding_window is not None:
            allowed = allowed & (kidx[None, None, :] > qabs[None, :, None] - call.sliding_window)
        return allowed.expand(len(rows), -1, -1), None
    if mask.ndim != 4:
        raise InvalidInputError("key windows need a 4D attention mask or none (sdpa/eager); load the model with "
                                "attn_implementation='sdpa'")
    hsel = heads if mask.shape[1] > 1 else torch.zeros_like(heads)
    m = mask[rows.to(mask.device), hsel.to(mask.device)][:, q_sel][:, :, kidx.to(mask.device)].to(kidx.device)
    if m.dtype == torch.bool:
        return m, None
    return m > torch.finfo(m.dtype).min / 2, m.float()


def attend_block(call, rows, heads, qs, ks, vs, q_sel: slice, qabs, kidx, allowed_extra=None) -> torch.Tensor:
    """Float32 attention output [P, n_q, d] of the queries `qs` [P, n_q, d] (the call's queries `q_sel`, absolute
    positions `qabs`) of pairs (rows, heads) over the keys `ks`, `vs` [P, n_k, d] at indices `kidx`: the model's
    scaling, softcap and mask, then `allowed_extra` [P, n_q, n_k] (bool) when given; a query with no key left
    gets 0."""
    scores = torch.matmul(qs.float(), ks.float().transpose(-1, -2)) * call.scaling
    if call.softcap is not None:
        scores = torch.tanh(scores / call.softcap) * call.softcap
    allowed, additive = _model_mask(call, rows, heads, q_sel, kidx, qabs)
    if additive is not None:
        scores = scores + additive
    if allowed_extra is not None:
        allowed = allowed & allowed_extra
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return torch.matmul(probs, vs.float())


def windowed_out(call, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 windows: tuple[KeyWindow, ...], block: int = 256) -> torch.Tensor:
    """`out` [b, q_len, n_heads, d] with every windowed (row, head) pair's output recomputed under its
    window (out of place; `out` is returned as is when no pair is selected)."""
    if not getattr(call.module, "is_causal", True):
        raise InvalidInputError("key windows apply to causal (decoder) attention; this layer is bidirectional")
    b, hq, s, d = q.shape
    hkv, k_len = k.shape[1], k.shape[2]
    g = hq // hkv
    new = None
    for w in windows:
        rows, heads = w.sel.nonzero(as_tuple=True)
        if len(rows) == 0:
            continue
        rows, heads = rows.to(q.device), heads.to(q.device)
        if k_len <= w.window:
            continue  # every key lies within the window of every query: nothing changes
        qabs_all = torch.arange(k_len - s, k_len, device=q.device)
        start = real_starts(call, rows, k_len)
        qs, ks, vs = q[rows, heads], k[rows, heads // g], v[rows, heads // g]  # [P, s | k_len, d]
        res = torch.empty(len(rows), s, d, dtype=torch.float32, device=q.device)
        for a in range(0, s, block):
            e = min(s, a + block)
            qabs = qabs_all[a:e]
            lo = max(0, int(qabs[0]) - w.window + 1)
            hi = int(qabs[-1]) + 1
            n_sink = int(start.max()) + w.sinks
            kidx = torch.cat([torch.arange(0, min(n_sink, lo), device=q.device),
                              torch.arange(lo, hi, device=q.device)])
            inside = allowed_keys(qabs.expand(len(rows), -1), kidx, start, w.sinks, w.window)
            res[:, a:e] = attend_block(call, rows, heads, qs[:, a:e], ks[:, kidx], vs[:, kidx], slice(a, e), qabs, kidx,
                                       inside)
        if new is None:
            new = out.clone()
        new[rows, :, heads] = res.to(out.dtype)
    return out if new is None else new
