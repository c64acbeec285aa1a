"""Path patching (Wang et al. 2022, IOI; Goldowsky-Dill et al. 2023): the effect of sender heads on the
metric THROUGH chosen receivers only.

Two passes over the base prompts (denoising: base = corrupt, donor = clean; noising swaps them), one
batch row per (pair, sender), plus a row per pair with all senders together:
1. The sender heads' outputs (o_proj inputs) take their donor-run values at every position; every
   OTHER head's output is frozen at its base-run value (the freezing rule: attention heads frozen,
   MLPs and norms recomputed, as in Wang et al.). So a sender's change reaches a later layer only
   through the residual stream directly (and the MLPs on the way). The receivers' inputs are
   recorded: their post-RoPE queries (via q), their key-value heads' keys or values (via k / v;
   under GQA that input is shared by the receiver's whole group and is patched for all of it), or
   nothing (via logits: the metric of pass 1 itself is the direct effect of the senders on the logits,
   through no other head).
2. The base prompts run again, unfrozen, with only the receivers' inputs replaced by pass 1's. The
   metric is read there.
A receiver set is patched together in pass 2; several receivers are one path set, and a sender gets
one number per requested `via`. Normalised like activation patching: (patched - base) / (donor - base).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np
import torch

from interp.errors import InvalidInputError
from interp.hooks.capture import Capture
from interp.hooks.interventions import Intervention
from interp.sites import Site, as_heads
from interp.patching.pairs import PatchPair
from interp.patching.config import PatchingConfig
from interp.patching.metrics import check_gap, metric_name, metric_values
from interp.patching.plan import check_pairs, sides

VIAS = ("q", "k", "v", "logits")


class _Freeze(Intervention):
    """Pass 1: per row, sender heads from the donor run, every other head from the base run."""

    edits_out = True

    def __init__(self, base_out, donor_out, sender_mask: torch.Tensor, pair: torch.Tensor):
        super().__init__(None)
        self.base, self.donor, self.mask, self.pair = base_out, donor_out, sender_mask, pair  # mask [rows, L, H]

    def edit_out(self, call, out):
        l = call.layer
        idx = self.pair.to(self.base[l].device)
        b, d = self.base[l][idx], self.donor[l][idx]  # [rows, T, H, hd]
        m = self.mask[:, l].to(out.device)[:, None, :, None]
        return torch.where(m, d.to(out.device, out.dtype), b.to(out.device, out.dtype))


class _Inputs(Intervention):
    """Pass 2: the receivers' q (query heads) or k / v (their key-value heads) replaced by pass 1's."""

    edits_qkv = True

    def __init__(self, via: str, values: dict[int, torch.Tensor], heads: dict[int, list[int]]):
        super().__init__(None)
        self.via, self.values, self.heads = via, values, heads  # values[layer]: [rows, T, heads, hd]

    def edit_qkv(self, call, q, k, v):
        l = call.layer
        if l not in self.heads:
            return q, k, v
        t = {"q": q, "k": k, "v": v}[self.via].transpose(1, 2).clone()  # [rows, T, heads, hd]
        hs = torch.as_tensor(self.heads[l], device=t.device)
        t[:, :, hs] = self.values[l][:, :, hs].to(t.device, t.dtype)
        t = t.transpose(1, 2)
        return (t, k, v) if self.via == "q" else (q, t, v) if self.via == "k" else (q, k, t)


@dataclass
class PathResult:
    model: str
    senders: list[str]
    receivers: list[str]
    via: str
    direction: str
    metric: str
    normalized: bool
    effects: dict  # sender (or "all") -> {"mean", "lo", "hi", "n", "per_pair"}
    base_value: list[float]
    donor_value: list[float]
    receiver_inputs: list[str]  # what pass 2 patched, e.g. L1KV0 (feeds L1H0, L1H1) for via k under GQA
    freezing_rule: str
    config: dict
    provenance: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> PathResult:
        """A PathResult from its dict (`to_dict()`, the result file), nested records rebuilt: the exact inverse of
        `to_dict`. InvalidInputError naming the field when one is missing or of the wrong shape."""
        from interp.runtime.records import from_dict

        return from_dict(cls, d)

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame.from_records([{"model": self.model, "sender": s, "via": self.via,
                                           "receivers": ",".join(self.receivers), **{k: e[k] for k in
                                                                                   ("mean", "lo", "hi", "n")}}
                                          for s, e in self.effects.items()])


def run_path_patching(model, pairs: Sequence[PatchPair], senders, receivers=(), via: str = "k",
                      config: PatchingConfig | None = None) -> PathResult:
    """Effect of each sender (and of all together) through `receivers` via q/k/v, or directly on the logits."""
    from interp import stats
    from interp.runtime.provenance import provenance

    config = config or PatchingConfig()
    pairs = list(pairs)
    check_pairs(model, pairs)
    spec = model.spec
    if via not in VIAS:
        raise InvalidInputError(f"unknown path {via!r}; valid: {', '.join(VIAS)}")
    senders, receivers = as_heads(senders), as_heads(receivers)
    for h in senders + receivers:
        if not (0 <= h.layer < spec.n_layers and 0 <= h.head < spec.n_heads):
            raise InvalidInputError(f"head {h} is outside the model: layers 0..{spec.n_layers - 1}, heads "
                                    f"0..{spec.n_heads - 1}")
    if not senders:
        raise InvalidInputError("path patching needs sender heads, e.g. --senders L0H0")
    if via == "logits" and receivers:
        raise InvalidInputError("path patching via logits is the senders' direct effect, through no receiver: "
                                "pass no receivers, or via q, k or v to go through them")
    if via != "logits":
        if not receivers:
            raise InvalidInputError("path patching via q/k/v needs receiver heads, e.g. --receivers L1H1")
        bad = [f"{r} (sender {s})" for r in receivers for s in senders if r.layer <= s.layer]
        if bad:
            raise InvalidInputError(f"receivers must sit in later layers than every sender: {', '.join(bad)}")
    base_seqs, donor_seqs, _, _ = sides(pairs, config.direction)
    L, P = spec.n_layers, len(pairs)
    outs = [Site(l, "head_out") for l in range(L)]
    with torch.no_grad():
        cap_d, cap_b = Capture(outs), Capture(outs)
        with model.intervene(cap_d):
            donor_last = model.forward(model.pad(donor_seqs), last_only=True)[:, -1]
        base_batch = model.pad(base_seqs)
        with model.intervene(cap_b):
            base_last = model.forward(base_batch, last_only=True)[:, -1]
    donor_out = {l: cap_d[Site(l, "head_out")] for l in range(L)}
    base_out = {l: cap_b[Site(l, "head_out")] for l in range(L)}
    donor_value, base_value = metric_values(config, donor_last, pairs), metric_values(config, base_last, pairs)

    groups = [[s] for s in senders] + ([list(senders)] if len(senders) > 1 else [])
    names = [str(s) for s in senders] + (["all"] if len(senders) > 1 else [])
    rows_pair = torch.arange(P).repeat(len(groups))  # row = group-major: [g0 p0..pP-1, g1 p0..]
    mask = torch.zeros(len(groups) * P, L, spec.n_heads, dtype=torch.bool)
    for gi, g in enumerate(groups):
        for h in g:
            mask[gi * P:(gi + 1) * P, h.layer, h.head] = True
    kind = {"q": "q", "k": "k", "v": "v"}.get(via)
    by_layer: dict[int, list[int]] = {}
    for r in receivers:
        idx = r.head if kind == "q" else spec.kv_head_of(r.head)
        by_layer.setdefault(r.layer, [])
        if idx not in by_layer[r.layer]:
            by_layer[r.layer].append(idx)
    # rows in chunks of about `budget` tokens (or config.max_batch rows): both passes of a chunk run before the
    # next, so memory stays bounded on a many-sender, many-layer run (each row is a whole base prompt)
    budget = 16384 if model.device.type == "cuda" else 2048
    step = config.max_batch or max(1, budget // base_batch.input_ids.shape[1])
    lasts = []
    for a in range(0, len(rows_pair), step):
        rp = rows_pair[a:a + step]
        ids, att = base_batch.input_ids[rp], base_batch.attention_mask[rp]
        with torch.no_grad():
            freeze = _Freeze(base_out, donor_out, mask[a:a + step], rp)
            rec = Capture([Site(l, kind) for l in by_layer]) if kind else None
            with model.intervene(freeze, *((rec,) if rec else ())):
                last = model.forward(ids, attention_mask=att, last_only=True)[:, -1]
            if kind:
                patch = _Inputs(kind, {l: rec[Site(l, kind)] for l in by_layer}, by_layer)
                with model.intervene(patch):
                    last = model.forward(ids, attention_mask=att, last_only=True)[:, -1]
        lasts.append(last)
    last = torch.cat(lasts)
    raw = metric_values(config, last, [pairs[int(i)] for i in rows_pair]).reshape(len(groups), P)
    gap = donor_value - base_value
    if config.normalize:
        check_gap(gap, metric_name(config.metric))
    val = (raw - base_value) / np.where(np.abs(gap) < config.min_gap, np.nan, gap) if config.normalize else raw
    effects = {}
    for name, v in zip(names, val):
        ok = v[np.isfinite(v)]
        est = stats.mean_ci(ok, n_boot=config.n_boot, seed=config.seed) if len(ok) > 1 else None
        effects[name] = {"mean": float(np.mean(ok)) if len(ok) else None, "lo": est.lo if est else None,
                         "hi": est.hi if est else None, "n": int(len(ok)), "per_pair": [float(x) for x in v]}
    inputs = [f"L{l}H{i}" if kind == "q" else
              f"L{l}KV{i} (feeds {', '.join(f'L{l}H{h}' for h in range(spec.n_heads) if spec.kv_head_of(h) == i)})"
              for l, hs in sorted(by_layer.items()) for i in hs]
    cfg = asdict(config)
    cfg["metric"] = metric_name(config.metric)
    return PathResult(
        model=model.name, senders=[str(s) for s in senders], receivers=[str(r) for r in receivers], via=via,
        direction=config.direction, metric=cfg["metric"], normalized=config.normalize, effects=effects,
        base_value=base_value.tolist(), donor_value=donor_value.tolist(), receiver_inputs=inputs,
        freezing_rule="pass 1: senders from the donor run, every other attention head's output frozen at its base-run "
                      "value, MLPs and norms recomputed; pass 2: only the receivers' inputs from pass 1",
        config=cfg, provenance=provenance(model))
