"""The attention logit of one head, split exactly over its rotary pairs.

The pre-softmax logit of query i and key j is scaling * q_i . k_j over the head's post-RoPE (post-QK-norm)
vectors; a dot product is a sum over dims, so grouping the dims by rotary pair gives one term per pair (its
rotation angle (i - j) * w_j is all RoPE contributes to that term) plus one term for the dims that do not
rotate (partial rotary, GPT-NeoX; 0 otherwise). The terms sum to the logit up to float rounding. A softcap
(Gemma-2) is applied after the sum and is not split: `softcapped` is what the softmax sees.

q and k are read by an observer inside the attention wrapper, so they are what the model used after every
edit active around the call (any family, any scaling).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from interp.errors import InvalidInputError
from interp.hooks.interventions import Intervention
from interp.models.rope import require_rope


@dataclass
class PairLogits:
    """One head's logits of query `query_pos` against `key_positions` (indices into the padded input), split by
    rotary pair. `contributions` [batch, n_keys, n_pairs + 1]: entry j < n_pairs is pair j's term (pair j
    rotates with `freqs[j]`), the last entry the unrotated dims'. `logit` [batch, n_keys]: scaling * q . k, which
    the terms sum to; `softcapped`: the logit after the model's softcap (None without one)."""

    layer: int
    head: int
    query_pos: int
    key_positions: tuple[int, ...]
    freqs: tuple[float, ...]
    scaling: float
    contributions: torch.Tensor
    logit: torch.Tensor
    softcapped: torch.Tensor | None

    def by_pair(self) -> torch.Tensor:
        """[batch, n_keys, n_pairs]: the rotary pairs' terms (the unrotated entry left out)."""
        return self.contributions[..., :-1]


class _QK(Intervention):
    """Observer: one layer's post-RoPE q of one query head and k of its KV head, with the call's scaling."""

    observes_qkv = True

    def __init__(self, layer: int, head: int):
        super().__init__(None)
        self.layer, self.head = layer, head
        self.parts: list[tuple[int, torch.Tensor, torch.Tensor]] = []

    def observe_qkv(self, call, q, k, v):
        """Keep q [b, s, d] of the head and k [b, k_len, d] of its KV head (float32), the scaling and softcap."""
        if call.layer != self.layer:
            return
        kv = self.head // (q.shape[1] // k.shape[1])
        self.parts.append((call.batch_start, q[:, self.head].detach().float(), k[:, kv].detach().float()))
        self.scaling, self.softcap = call.scaling, call.softcap


def _index(p: int, n: int, what: str) -> int:
    if not -n <= p < n:
        raise InvalidInputError(f"{what} {p} outside the sequence of length {n}")
    return p % n


def logit_by_pair(model, input_ids, layer: int, head: int, query_pos: int, key_positions: Sequence[int],
                  attention_mask=None) -> PairLogits:
    """Split head (`layer`, `head`)'s pre-softmax logits of query `query_pos` against each of `key_positions`
    (indices into the left-padded input; negatives from the end) into one term per rotary pair plus one for the
    unrotated dims, on one forward of `input_ids` ([batch, seq] or [seq] token ids, or a Batch). Needs a RoPE
    model."""
    spec = model.spec
    require_rope(spec)
    if not (0 <= layer < spec.n_layers and 0 <= head < spec.n_heads):
        raise InvalidInputError(f"head L{layer}H{head} outside the model: {spec.n_layers} layers, {spec.n_heads} heads")
    if hasattr(input_ids, "input_ids"):  # a Batch from model.tokenize
        input_ids, attention_mask = input_ids.input_ids, input_ids.attention_mask
    ids = torch.as_tensor(input_ids)
    ids = ids[None] if ids.ndim == 1 else ids
    s = ids.shape[1]
    qp = _index(int(query_pos), s, "query position")
    kps = tuple(_index(int(p), s, "key position") for p in key_positions)
    if any(p > qp for p in kps) and spec.causal:
        raise InvalidInputError(f"key positions {[p for p in kps if p > qp]} come after the query {qp}: a causal "
                                "head never reads them")
    obs = _QK(layer, head)
    with model.intervene(obs):
        model.forward(ids, attention_mask=attention_mask, logits=False)
    parts = sorted(obs.parts, key=lambda t: t[0])
    q = torch.cat([p[1] for p in parts])[:, qp]  # [b, d]
    k = torch.cat([p[2] for p in parts])[:, list(kps)]  # [b, n_keys, d]
    prod = q[:, None, :] * k * obs.scaling  # [b, n_keys, d]: the logit's terms, dim by dim
    rope = spec.rope_of(layer)
    pairs = [rope.pair_dims(j) for j in range(rope.n_pairs)]
    rotated = {d for pr in pairs for d in pr}
    rest = [d for d in range(q.shape[-1]) if d not in rotated]
    terms = [prod[..., list(pr)].sum(-1) for pr in pairs] + [prod[..., rest].sum(-1)]
    contributions = torch.stack(terms, dim=-1)
    logit = (q[:, None, :] * k).sum(-1) * obs.scaling
    softcapped = None if obs.softcap is None else torch.tanh(logit / obs.softcap) * obs.softcap
    return PairLogits(layer=layer, head=head, query_pos=qp, key_positions=kps, freqs=tuple(rope.inv_freq),
                      scaling=float(obs.scaling), contributions=contributions, logit=logit, softcapped=softcapped)
