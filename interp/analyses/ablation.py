"""Causal head masking on NIAH with matched random controls (paired seeds).

Conditions run on the same `NiahSample`s: the unablated baseline, the target heads masked, and
`draws` sets of matched random heads (same count per layer, drawn from the other heads; or, with
`random_pool="any"`, the same count from any layer). Each
condition reports recall with a bootstrap CI and, against baseline, the paired difference with
its CI, a sign-flip permutation p-value and Cohen's d_z.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np

from ..errors import InvalidInputError
from ..interventions import AblateHeads
from ..tasks.niah import NiahConfig, NiahSample, build_niah
from ..types import HeadId
from .niah_run import NiahRuns


@dataclass
class AblationConfig:
    heads: tuple[HeadId, ...]
    niah: NiahConfig = field(default_factory=NiahConfig)
    mode: str = "zero"
    decode_only: bool = False
    draws: int = 3
    random_pool: str = "layer"  # "layer": same count per layer (matched); "any": same count, any layer
    seed: int = 0
    batch_size: int = 8
    n_boot: int = 10000
    n_perm: int = 10000
    heads_source: str = "explicit"  # "retrieval (detected ...)", "random", "explicit", "file ..."


@dataclass
class ConditionResult:
    name: str
    heads: list[str]
    recall: dict
    exact_prefix: dict
    vs_baseline: dict | None
    per_sample_recall: list[int]
    # mean residual write norm of the masked heads / the median head's (see head_write_norm)
    head_write_rel: float | None = None


@dataclass
class AblationResult:
    model: str
    heads: list[str]
    heads_source: str
    mode: str
    scope: str
    intervention: dict
    conditions: list[ConditionResult]
    random_pooled: ConditionResult | None
    shortfall_by_layer: dict
    sample_ids: list[str]
    config: dict
    provenance: dict
    detection: dict | None = None
    distinct_draws: int = 0  # distinct random head sets among the draws
    random_pool: str = "layer"
    # [layer][head] mean ||W_O,h z_h|| over the real tokens of the first prompts (unablated): how much
    # each head writes into the residual stream, so inactive control heads are visible
    head_write_norm: list | None = None
    head_write_prompts: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    def condition(self, name: str) -> ConditionResult:
        for c in self.conditions + ([self.random_pooled] if self.random_pooled else []):
            if c.name == name:
                return c
        raise KeyError(name)


def _reference_means(model, config: AblationConfig):
    """Mean head outputs over NIAH prompts of seeds disjoint from the evaluated ones."""
    from ..capture import head_output_means
    from .niah_run import pad_left

    ref_cfg = NiahConfig(context_lengths=config.niah.context_lengths[:1], depths=(0.5,), n_seeds=4,
                         first_seed=config.niah.first_seed + 100_000, haystack_file=config.niah.haystack_file,
                         needles_file=config.niah.needles_file, separator=config.niah.separator)
    ref = build_niah(model.tokenizer, ref_cfg)
    pad = model.tokenizer.pad_token_id or 0
    ids, mask = pad_left([s.input_ids for s in ref], pad)
    return head_output_means(model, ids.to(model.device), mask.to(model.device), batch_size=config.batch_size), ref_cfg


def run_ablation(model, config: AblationConfig, samples: Sequence[NiahSample] | None = None,
                 detection: dict | None = None, progress=None) -> AblationResult:
    from .. import stats
    from ..provenance import provenance

    spec = model.spec
    heads = tuple(sorted(config.heads))
    if not heads:
        raise InvalidInputError("no heads to ablate (detection found none above the threshold?); lower --threshold "
                                "or pass heads explicitly, e.g. --heads L3H1,L5H0")
    if config.random_pool not in ("layer", "any"):
        raise InvalidInputError(f"random head pool must be 'layer' (matched per layer) or 'any', "
                                f"got {config.random_pool!r}")
    samples = list(samples) if samples is not None else build_niah(model.tokenizer, config.niah)
    means = None
    intervention_note = {}
    if config.mode == "mean":
        means, ref_cfg = _reference_means(model, config)
        intervention_note = {"mean_reference": f"mean head outputs over {ref_cfg.n_seeds} NIAH prompts of seeds "
                                               f"{list(ref_cfg.seeds)} (disjoint from the evaluated seeds)"}

    draws = stats.matched_random_heads([(h.layer, h.head) for h in heads], spec.n_layers, spec.n_heads,
                                       n_draws=config.draws, seed=config.seed, by_layer=config.random_pool == "layer")
    plan = [("baseline", ())]
    plan.append(("target", heads))
    plan += [(f"random-{i + 1}", tuple(HeadId(l, h) for l, h in d)) for i, d in enumerate(draws.draws)]

    runs = NiahRuns(model, samples, batch_size=config.batch_size, max_new_tokens=config.niah.max_new_tokens,
                    decode_only=config.decode_only, progress=progress)
    per_cond: dict[str, np.ndarray] = {}
    prefix: dict[str, np.ndarray] = {}
    for name, hs in plan:
        ivs = (AblateHeads(hs, mode=config.mode, means=means),) if hs else ()
        outs = runs(frozenset(hs), ivs)  # coinciding random draws are decoded once
        per_cond[name] = np.array([o.recall for o in outs], dtype=float)
        prefix[name] = np.array([o.exact_prefix for o in outs], dtype=float)

    base = per_cond["baseline"]
    from ..capture import head_write_norms
    from .niah_run import pad_left

    n_write = min(8, len(samples))
    ids, mask = pad_left([s.input_ids for s in samples[:n_write]], model.tokenizer.pad_token_id or 0)
    writes = head_write_norms(model, ids.to(model.device), mask.to(model.device), batch_size=config.batch_size)
    median_write = float(np.median(writes.numpy()))

    def write_rel(hs):
        if not hs or median_write <= 0:
            return None
        return float(np.mean([float(writes[h.layer, h.head]) for h in hs]) / median_write)

    def result(name, hs, rec, pre):
        vs = None if name == "baseline" else stats.paired_diff(rec, base, n_boot=config.n_boot, n_perm=config.n_perm,
                                                               seed=config.seed).to_dict()
        return ConditionResult(name, [str(h) for h in hs],
                               stats.mean_ci(rec, n_boot=config.n_boot, seed=config.seed).to_dict(),
                               stats.mean_ci(pre, n_boot=config.n_boot, seed=config.seed).to_dict(),
                               vs, [int(x) for x in rec], write_rel(hs))

    conditions = [result(name, hs, per_cond[name], prefix[name]) for name, hs in plan]
    pooled = None
    rnd = [n for n, _ in plan if n.startswith("random-")]
    if rnd:
        pooled_rec = np.mean([per_cond[n] for n in rnd], axis=0)
        pooled_pre = np.mean([prefix[n] for n in rnd], axis=0)
        pooled = result(f"random (mean of {len(rnd)} draws)", (), pooled_rec, pooled_pre)
        pooled.per_sample_recall = [float(x) for x in pooled_rec]

    iv = AblateHeads(heads, mode=config.mode).describe()
    iv.update(intervention_note)
    iv["scope"] = "decode steps only (prefill unmasked)" if config.decode_only else "prefill and every decode step"
    cfg = asdict(config)
    cfg["heads"] = [str(h) for h in heads]
    cfg["niah"]["seeds"] = list(config.niah.seeds)
    return AblationResult(
        model=model.name, heads=[str(h) for h in heads], heads_source=config.heads_source, mode=config.mode,
        scope="decode" if config.decode_only else "prefill+decode", intervention=iv, conditions=conditions,
        random_pooled=pooled, shortfall_by_layer={str(k): v for k, v in draws.shortfall_by_layer.items()},
        sample_ids=[s.id for s in samples], config=cfg, provenance=provenance(model), detection=detection,
        distinct_draws=len({frozenset(d) for d in draws.draws}), random_pool=config.random_pool,
        head_write_norm=[[round(float(v), 6) for v in row] for row in writes], head_write_prompts=n_write,
    )
