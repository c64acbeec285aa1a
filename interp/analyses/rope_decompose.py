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

import numpy as np
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


class _LastQuery(Intervention):
    """Observer: for every listed layer, the last position's q of its listed heads and every k of their KV heads."""

    observes_qkv = True

    def __init__(self, heads_by_layer: dict[int, list[int]]):
        super().__init__(None)
        self.heads_by_layer = heads_by_layer
        self.seen: dict[int, tuple] = {}

    def observe_qkv(self, call, q, k, v):
        """Keep q [b, n_heads, d] at the last position and k [b, n_kv, k_len, d] (float32), with the scaling."""
        if call.layer in self.heads_by_layer:
            self.seen[call.layer] = (q[:, :, -1].detach().float(), k.detach().float(), call.scaling)


def _band_edges(n_pairs: int, n_bands: int = 4) -> list[tuple[int, int]]:
    """[start, stop) slices of the frequency order (lowest first) cutting the pairs into `n_bands` bands."""
    cuts = [round(i * n_pairs / n_bands) for i in range(n_bands + 1)]
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


BAND_NAMES = ("lowest quarter", "second quarter", "third quarter", "highest quarter")


def needle_decomposition(model, samples, heads, n_boot: int = 2000, seed: int = 0) -> dict:
    """Which rotary bands raise the needle's attention logit: for every head of `heads` and NIAH sample (prompts
    with `needle_span`), the logit of the last prompt position split by pair (logit_by_pair's terms), averaged
    over the needle's keys minus averaged over the other keys (the first token, an attention sink, left out).
    Per pair (frequency order, lowest first) and per head the mean over prompts; per band (quarters of the pairs
    by frequency, and the unrotated dims) the per-prompt mean over heads with a bootstrap CI over prompts and
    its share of the whole gap; the same by needle depth (distance to the question). One forward per prompt."""
    from interp import stats
    from interp.sites import as_heads

    spec = model.spec
    require_rope(spec)
    heads = sorted(as_heads(heads))
    if not heads or not samples:
        raise InvalidInputError("the decomposition needs target heads and NIAH prompts")
    by_layer: dict[int, list[int]] = {}
    for h in heads:
        by_layer.setdefault(h.layer, []).append(h.head)
    rope = spec.rope_of(heads[0].layer)
    order = list(rope.pairs_by_frequency())
    n_p = rope.n_pairs
    diffs = np.zeros((len(samples), len(heads), n_p + 1))
    for i, s in enumerate(samples):
        obs = _LastQuery(by_layer)
        with model.intervene(obs):
            model.forward(torch.tensor([s.input_ids]), logits=False)
        a, b = s.needle_span
        n = len(s.input_ids)
        rest = torch.ones(n, dtype=torch.bool)
        rest[a:b] = False
        rest[0] = False
        for j, h in enumerate(heads):
            q, k, scaling = obs.seen[h.layer]
            lr = spec.rope_of(h.layer)
            kv = spec.kv_head_of(h.head)
            prod = q[0, h.head][None, :] * k[0, kv] * scaling  # [n, d]
            pairs = [lr.pair_dims(p) for p in range(lr.n_pairs)]
            rotated = {d for pr in pairs for d in pr}
            other = [d for d in range(prod.shape[-1]) if d not in rotated]
            terms = torch.stack([prod[:, list(pr)].sum(-1) for pr in pairs] + [prod[:, other].sum(-1)], -1)
            diffs[i, j] = (terms[a:b].mean(0) - terms[rest].mean(0)).double().numpy()
    by_freq = np.concatenate([diffs[..., order], diffs[..., -1:]], axis=-1)  # pairs lowest first, then unrotated
    gap = by_freq.sum(-1).mean(1)  # [prompts]: the needle's logit minus the rest's, mean over heads
    bands = []
    for (lo, hi), name in zip(_band_edges(n_p), BAND_NAMES):
        v = by_freq[..., lo:hi].sum(-1).mean(1)
        e = stats.mean_ci(v, n_boot=n_boot, seed=seed)
        bands.append({"band": name, "pairs": [order[p] for p in range(lo, hi)], "estimate": e.to_dict(),
                      "share_of_gap": float(v.mean() / gap.mean()) if gap.mean() else None})
    if rope.rotary_dims < rope.head_dim:
        v = by_freq[..., -1].mean(1)
        bands.append({"band": "unrotated dims", "pairs": [], "estimate": stats.mean_ci(v, n_boot=n_boot,
                                                                                        seed=seed).to_dict(),
                      "share_of_gap": float(v.mean() / gap.mean()) if gap.mean() else None})
    by_depth = []
    for depth in sorted({s.depth for s in samples}):
        idx = [i for i, s in enumerate(samples) if s.depth == depth]
        dist = float(np.mean([len(samples[i].input_ids) - 1 - samples[i].needle_span[0] for i in idx]))
        by_depth.append({"depth": depth, "distance": dist, "n": len(idx), "gap": float(gap[idx].mean()),
                         "bands": [float(by_freq[idx][..., lo:hi].sum(-1).mean()) for lo, hi in _band_edges(n_p)]})
    return {"heads": [str(h) for h in heads], "pair_order": order, "n_prompts": len(samples),
            "gap": stats.mean_ci(gap, n_boot=n_boot, seed=seed).to_dict(), "bands": bands, "by_depth": by_depth,
            "by_head": {str(h): [float(x) for x in by_freq[:, j].mean(0)] for j, h in enumerate(heads)},
            "semantics": "attention logit of the last prompt position: mean over the needle's keys minus mean over "
                         "the other keys (the first token left out), split by rotary pair; bands are quarters of "
                         "the pairs by frequency (lowest first); by_head lists pairs lowest first, then the "
                         "unrotated dims"}
