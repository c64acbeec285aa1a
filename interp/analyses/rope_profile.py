"""Per-head RoPE frequency usage and a per-head q/k norm statistic, retrieval heads vs the rest.

Usage: for query head h and rotary pair p (dims a, b), the pair's contribution to the q.k logit
between query i and key j <= i is c_p(i, j) = q_a(i) k_a(j) + q_b(i) k_b(j) (post-RoPE, post-QK-norm
q and k; the key head is the one h reads under GQA). The pair's share is
sum_{i, j<=i} |c_p| / sum_{p'} sum_{i, j<=i} |c_p'|; dims outside the rotary part (partial rotary)
form one extra "non-rotary" bucket. (Barbero et al. read such profiles to show Gemma's positional
heads use the highest and semantic ones the lowest frequencies.)

Norm statistics (pluggable; our reading of the paper's "norm-utility", see docs/science.md):
q_norm (mean ||q||), k_norm (mean ||k||), qk_norm (mean ||q|| * mean ||k||), low_share (usage
share of the lowest-frequency quarter of the pairs). Retrieval vs other heads: Cohen's d with a bootstrap
CI (heads resampled within each group) and a layer-clustered permutation test (labels permuted within layers),
for the chosen statistic (`comparison`) and for every other one (`comparisons`: all come from the same
forward pass, so reporting them all costs nothing and shows which the choice of statistic drives). Four
statistics are four tests of one question: each permutation p gets a Holm-adjusted one over the four
(`p_holm`). The permutation test is exact when the design allows no more labellings than `n_perm` (all
retrieval heads in one 8-head layer: 70) and says when its p sits at the floor of its design or the test
has no power (`p_floor`, `note`; stats.layer_clustered_permutation).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from interp.analyses.rope_decompose import needle_decomposition
from interp.hooks.capture import Capture
from interp.errors import InvalidInputError
from interp.models.rope import heads_by_theta, one_pair_order
from interp.sites import HeadId, Site

STATISTICS = ("q_norm", "k_norm", "qk_norm", "low_share")


@dataclass
class RopeProfileConfig:
    """`retrieval_heads`: heads compared with the rest (none: no comparison); `heads_source`: how they were
    chosen, recorded in the result. `n_texts` passages of `n_tokens` tokens each, from `text` (a file, a
    directory of .txt files or a fetched text's alias) or, without it, from interp's corpus. `statistic`: the
    per-head norm statistic, q_norm | k_norm | qk_norm | low_share. `n_perm`: permutations of the
    layer-clustered permutation test."""

    retrieval_heads: tuple[HeadId, ...] = ()
    heads_source: str = "none"
    n_texts: int = 8
    n_tokens: int = 256
    seed: int = 0
    statistic: str = "qk_norm"
    n_perm: int = 10000
    batch_size: int = 8
    text: str | None = None  # passages from this text (a file, a directory, a fetched text's alias); None: the corpus

    def __post_init__(self):
        from interp.errors import check_fields

        if self.statistic not in STATISTICS:
            raise InvalidInputError(f"unknown statistic {self.statistic!r}; valid: {', '.join(STATISTICS)}")
        check_fields(self, {"n_texts": 1, "n_tokens": 2, "batch_size": 1, "n_perm": 1})


@dataclass
class RopeProfileResult:
    model: str
    pair_freqs: list[float]  # inv_freq of each pair (pair index order)
    pair_order: list[int]  # pair indices sorted by ascending frequency
    usage: list[list[list[float]]]  # [layer][head][pair (+1 non-rotary bucket if partial)]
    statistic: str
    head_statistic: list[list[float]]  # [layer][head]
    retrieval_heads: list[str]
    heads_source: str
    comparison: dict | None  # Cohen's d (+ bootstrap CI) + layer-clustered permutation, retrieval vs other heads
    config: dict
    provenance: dict = field(default_factory=dict)
    layer_theta: list = field(default_factory=list)  # each layer's rope_theta (Gemma-3: 1e4 sliding, 1e6 full)
    pair_freqs_by_theta: dict = field(default_factory=dict)  # {theta: inv_freq per pair} when layer types differ
    retrieval_heads_by_theta: dict = field(default_factory=dict)  # {theta: the retrieval heads rotating with it}
    comparisons: dict = field(default_factory=dict)  # {statistic: comparison} for every statistic
    decomposition: dict | None = None  # rope_decompose.needle_decomposition of the retrieval heads on NIAH prompts

    def to_frame(self):
        """One row per (layer, head, quantity): the head statistic and every pair's share of |q.k|."""
        from interp.figures.tables import head_frame

        grids = {self.statistic: self.head_statistic}
        n = len(self.usage[0][0]) if self.usage and self.usage[0] else 0
        for p in range(n):
            name = f"share_pair_{p}" if p < len(self.pair_freqs) else "share_non_rotary"
            grids[name] = [[h[p] for h in layer] for layer in self.usage]
        return head_frame(grids, {"is_retrieval": self.retrieval_heads}, model=self.model)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RopeProfileResult:
        """A RopeProfileResult from its dict (`to_dict()`, the result file), nested records rebuilt: the exact inverse of
        `to_dict`. InvalidInputError naming the field when one is missing or of the wrong shape."""
        from interp.runtime.records import from_dict

        return from_dict(cls, d)


def _texts(model, config) -> list[list[int]]:
    from interp.tasks.text import corpus_passages

    return corpus_passages(model.tokenizer, config.n_texts, config.n_tokens, f"rope-profile/{config.seed}",
                           text=config.text)


def pair_usage(q: torch.Tensor, k: torch.Tensor, rope, block_bytes: int = 4 << 20) -> torch.Tensor:
    """|contribution| of each pair (plus a non-rotary bucket if partial) summed over causal (i, j): [P(+1)].
    Queries go in blocks whose [P, rows, keys] temporaries stay under `block_bytes` (small buffers the allocator
    reuses, not a fresh [P, T, T] mapping per head), each block against the keys up to its last query."""
    s = q.shape[0]
    a = torch.tensor([rope.pair_dims(j)[0] for j in range(rope.n_pairs)], device=q.device)
    b = torch.tensor([rope.pair_dims(j)[1] for j in range(rope.n_pairs)], device=q.device)
    qa, qb, ka, kb = q[:, a], q[:, b], k[:, a], k[:, b]
    partial = rope.rotary_dims < rope.head_dim
    rest = slice(rope.rotary_dims, rope.head_dim)
    out = torch.zeros(rope.n_pairs + (1 if partial else 0), dtype=q.dtype, device=q.device)
    rows = max(1, block_bytes // (q.element_size() * rope.n_pairs * s))
    for i0 in range(0, s, rows):
        i1 = min(s, i0 + rows)
        causal = torch.arange(i1, device=q.device)[None, :] <= torch.arange(i0, i1, device=q.device)[:, None]
        c = torch.einsum("ip,jp->pij", qa[i0:i1], ka[:i1]) + torch.einsum("ip,jp->pij", qb[i0:i1], kb[:i1])
        out[:rope.n_pairs] += (c.abs() * causal).sum((1, 2))
        if partial:
            out[-1] += ((q[i0:i1, rest] @ k[:i1, rest].T).abs() * causal).sum()
    return out


def compare_heads(values: np.ndarray, labels: np.ndarray, n_perm: int, seed: int, n_boot: int = 2000,
                  level: float = 0.95) -> dict:
    """Labelled vs other heads on a [layers, heads] statistic: means, Cohen's d with a percentile bootstrap CI
    (heads resampled with replacement within each group) and the layer-clustered permutation test."""
    from interp import stats

    a, b = values[labels], values[~labels]
    rng = np.random.default_rng(seed)
    boot = [stats.cohens_d(rng.choice(a, a.size), rng.choice(b, b.size)) for _ in range(n_boot)]
    lo, hi = np.nanpercentile(boot, [50 * (1 - level), 50 * (1 + level)])
    perm = stats.layer_clustered_permutation(values, labels, n_perm=n_perm, seed=seed)
    return {"cohens_d": stats.cohens_d(a, b), "cohens_d_ci": [float(lo), float(hi)], "ci_level": level,
            "mean_retrieval": float(a.mean()), "mean_other": float(b.mean()), "n_retrieval": int(a.size),
            "n_other": int(b.size), "layer_clustered_permutation": perm.to_dict()}


def run_rope_profile(model, config: RopeProfileConfig, needle_samples=None) -> RopeProfileResult:
    """Per-head share of |q.k| carried by each rotary pair and the per-head norm statistic on corpus passages,
    retrieval heads vs the rest (see module docstring). Raises InvalidInputError for a model without RoPE
    or retrieval heads outside the model. `needle_samples` (NIAH prompts): also split the retrieval heads'
    attention logit at the needle by rotary band (`decomposition`, rope_decompose.needle_decomposition)."""
    from interp.runtime.provenance import provenance
    from interp.models.model import pad_left

    rope = one_pair_order(model.spec)  # pair order shared by every layer type; frequencies per layer below
    spec = model.spec
    texts = _texts(model, config)
    ids, _ = pad_left(texts, 0)  # equal lengths: no padding
    L, H = spec.n_layers, spec.n_heads
    sites = [Site(l, kind) for l in range(L) for kind in ("q", "k")]
    cap = Capture(sites)
    with model.intervene(cap):
        model.forward(ids.to(model.device), batch_size=config.batch_size, logits=False)
    n_b = len(texts)
    n_buckets = rope.n_pairs + (1 if rope.rotary_dims < rope.head_dim else 0)
    usage = np.zeros((L, H, n_buckets))
    qn = np.zeros((L, H))
    kn = np.zeros((L, H))
    for l in range(L):
        q_all = cap[Site(l, "q")].float()  # [b, s, H, d]
        k_all = cap[Site(l, "k")].float()  # [b, s, Hkv, d]
        for h in range(H):
            g = spec.kv_head_of(h)
            tot = sum(pair_usage(q_all[b, :, h], k_all[b, :, g], rope) for b in range(n_b))
            usage[l, h] = (tot / tot.sum()).cpu().numpy()
            qn[l, h] = q_all[:, :, h].norm(dim=-1).mean().item()
            kn[l, h] = k_all[:, :, g].norm(dim=-1).mean().item()
    order = sorted(range(rope.n_pairs), key=lambda j: rope.inv_freq[j])
    low = order[: max(1, rope.n_pairs // 4)]
    by_stat = {"q_norm": qn, "k_norm": kn, "qk_norm": qn * kn, "low_share": usage[:, :, low].sum(-1)}
    stat = by_stat[config.statistic]
    labels = np.zeros((L, H), dtype=bool)
    for hd in config.retrieval_heads:
        if not (0 <= hd.layer < L and 0 <= hd.head < H):
            raise InvalidInputError(f"head {hd} is outside the model ({L} layers, {H} heads)")
        labels[hd.layer, hd.head] = True
    comparisons = {}
    if 0 < labels.sum() < labels.size:
        comparisons = {name: compare_heads(v, labels, config.n_perm, config.seed) for name, v in by_stat.items()}
        from interp import stats

        perms = [c["layer_clustered_permutation"] for c in comparisons.values()]
        for perm, adj in zip(perms, stats.holm([pm["p_value"] for pm in perms])):  # four statistics, one question
            perm["p_holm"], perm["p_holm_family"] = float(adj), len(perms)
    cfg = asdict(config)
    cfg["retrieval_heads"] = [str(h) for h in config.retrieval_heads]
    return RopeProfileResult(
        model=model.name, pair_freqs=list(rope.inv_freq), pair_order=order, usage=usage.round(6).tolist(),
        layer_theta=[spec.theta_of(l) for l in range(L)],
        pair_freqs_by_theta={f"{r.theta:g}": list(r.inv_freq) for r in spec.layer_ropes.values()},
        retrieval_heads_by_theta={f"{t:g}": hs for t, hs in heads_by_theta(spec, config.retrieval_heads).items()},
        statistic=config.statistic, head_statistic=stat.round(6).tolist(), comparisons=comparisons,
        retrieval_heads=[str(h) for h in config.retrieval_heads], heads_source=config.heads_source,
        comparison=comparisons.get(config.statistic), config=cfg, provenance=provenance(model),
        decomposition=None if needle_samples is None else needle_decomposition(model, needle_samples,
                                                                               config.retrieval_heads, seed=config.seed))
