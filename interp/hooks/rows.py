"""Attention rows for chosen query positions, recomputed from the real post-RoPE q and k.

Memory is O(batch * heads * n_query * key_len) per layer: it grows with the context, not its
square, so long contexts keep sdpa/flash for the forward pass. The softmax reproduces the
model's own: scaling, logit softcap (Gemma-2), the 4D mask the model built (padding, causal,
sliding window), or, when the base implementation skipped the mask (pure causal), a causal
mask built here; heads under a key window (keywindow.py) are restricted as in the forward pass.
"""

from __future__ import annotations

from typing import Sequence

import torch

from interp.errors import InvalidInputError
from interp.hooks.interception import AttnCall
from interp.hooks.interventions import Intervention
from interp.hooks.keywindow import allowed_keys, real_starts


def _positions_tensor(positions, batch: int, q_len: int, device) -> torch.Tensor:
    """[batch, n] long tensor of indices into this call's query chunk (negatives from the end)."""
    p = torch.as_tensor(positions, dtype=torch.long, device=device)
    if p.ndim == 1:
        p = p.unsqueeze(0).expand(batch, -1)
    p = torch.where(p < 0, p + q_len, p)
    if (p < 0).any() or (p >= q_len).any():
        raise InvalidInputError(f"query positions {positions} are outside the sequence of length {q_len}")
    return p


def compute_rows(call: AttnCall, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor, rows=None) -> torch.Tensor:
    """Softmax attention of queries `pos` [b, n] over all keys: returns [b, n_heads, n, k_len] (fp32)."""
    b, hq, s, d = q.shape
    hkv, k_len = k.shape[1], k.shape[2]
    g = hq // hkv
    n = pos.shape[1]
    qs = torch.gather(q, 2, pos[:, None, :, None].expand(b, hq, n, d))  # [b, hq, n, d]
    qs = qs.float().reshape(b, hkv, g * n, d)
    scores = torch.matmul(qs, k.float().transpose(-1, -2)).reshape(b, hq, n, k_len) * call.scaling
    if call.softcap is not None:
        scores = torch.tanh(scores / call.softcap) * call.softcap
    mask = call.mask
    if mask is None and not getattr(call.module, "is_causal", True):
        pass  # encoder without padding: every key visible
    elif mask is None:
        # base skipped the mask: pure causal (bottom-right aligned with the cache)
        qabs = (k_len - s) + pos  # [b, n]
        kidx = torch.arange(k_len, device=q.device)
        allowed = kidx[None, None, :] <= qabs[:, :, None]
        if call.sliding_window is not None:
            allowed &= kidx[None, None, :] > qabs[:, :, None] - call.sliding_window
        scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    elif mask.ndim == 4:
        m = mask[..., :k_len].expand(b, -1, -1, -1)
        m = torch.gather(m, 2, pos[:, None, :, None].expand(b, m.shape[1], n, k_len))
        if m.dtype == torch.bool:
            scores = scores.masked_fill(~m, float("-inf"))
        else:
            scores = scores + m.float()
    else:
        raise InvalidInputError(
            "attention rows need a 4D mask or none (sdpa/eager); this model runs an attention implementation "
            f"that passes a {mask.ndim}D mask. Load it with attn_implementation='sdpa'"
        )
    for w in call.windows:  # key windows (keywindow.py): the restricted heads' rows see only their window
        qabs = (k_len - s) + pos
        start = real_starts(call, torch.arange(b, device=q.device), k_len)
        out_win = ~allowed_keys(qabs, torch.arange(k_len, device=q.device), start, w.sinks, w.window)  # [b, n, k]
        scores = scores.masked_fill(out_win[:, None] & w.sel.to(q.device)[:, :, None, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.nan_to_num(probs, nan=0.0)  # fully masked rows (padding queries) -> 0


class AttentionRows(Intervention):
    """Record attention rows of `positions` (indices into each call's queries; [-1] = last).

    `positions` is a list (same for every batch row) or a [batch, n] tensor. During cached decoding
    each call is one step; `steps` holds one [batch, n_layers, n_heads, n, key_len] tensor per call.
    `layers` limits which layers are recorded (default: all).
    """

    observes_qkv = True

    def __init__(self, positions: Sequence[int] | torch.Tensor = (-1,), layers: Sequence[int] | None = None,
                 to_cpu: bool = False):
        super().__init__(None)
        self.positions = positions
        self.layers = None if layers is None else tuple(layers)
        self.to_cpu = to_cpu
        self._calls: list[dict[int, torch.Tensor]] = []
        self._starts: list[int] = []

    def bind(self, model):
        """Called once by `model.intervene(...)` on entry: check `layers` against the model
        (InvalidInputError) and drop earlier records, so a reused recorder starts a new record."""
        super().bind(model)
        self._calls, self._starts = [], []  # reusing the recorder starts a new record
        if self.layers is not None:
            bad = [l for l in self.layers if not 0 <= l < self.spec.n_layers]
            if bad:
                raise InvalidInputError(f"layers {bad} outside 0..{self.spec.n_layers - 1}")

    def observe_qkv(self, call, q, k, v):
        """Called by the attention wrapper after every edit, with the final post-RoPE q and k of one attention
        call: for a recorded layer, recomputes the softmax rows of `positions` ([batch, n_heads, n, key_len],
        fp32) and keeps them; the first recorded layer starts a new step. Changes nothing."""
        if self.layers is not None and call.layer not in self.layers:
            return
        first_layer = self.layers[0] if self.layers is not None else 0
        if call.layer == first_layer:
            self._calls.append({})
            self._starts.append(call.batch_start)
        pos = _positions_tensor(self.positions if not isinstance(self.positions, torch.Tensor)
                                else self.positions[call.batch_start:call.batch_start + q.shape[0]],
                                q.shape[0], call.q_len, q.device)
        r = compute_rows(call, q, k, pos)
        self._calls[-1][call.layer] = r.cpu() if self.to_cpu else r

    def _stack(self, i: int) -> torch.Tensor:
        per_layer = self._calls[i]
        return torch.stack([per_layer[l] for l in sorted(per_layer)], dim=1)

    @property
    def steps(self) -> list[torch.Tensor]:
        """One tensor per forward call, in order (batch chunks of one pass come as separate calls)."""
        return [self._stack(i) for i in range(len(self._calls))]

    def result(self) -> torch.Tensor:
        """Rows of a single (possibly chunked) forward pass: [batch, n_layers, n_heads, n, key_len]."""
        if not self._calls:
            raise InvalidInputError("no attention rows recorded: run a forward pass inside model.intervene()")
        return torch.cat(self.steps, dim=0)


def attention_rows(model, input_ids, query_positions, attention_mask=None, layers=None,
                   batch_size: int | None = None) -> torch.Tensor:
    """Softmax attention rows [batch, n_layers, n_heads, n_query, key_len] at `query_positions`.

    Positions index the (left-padded) input; negatives count from the end. Recomputed from the
    model's own post-RoPE q and k during a normal sdpa/flash forward.
    """
    rec = AttentionRows(query_positions, layers=layers)
    with model.intervene(rec):
        model.forward(input_ids, attention_mask=attention_mask, batch_size=batch_size, logits=False)
    return rec.result()
