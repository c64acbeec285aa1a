"""Head-count curves: a metric as the top-k ranked heads are masked, or as every head but the top k is.

Heads come ranked best first (`rank_heads`: a detection's [layer][head] scores, e.g. the retrieval score). At each
k of the curve:
- kind "keep": every head of the model is masked except the first k (are the top heads enough?);
- kind "mask": the first k heads are masked (how much do they matter?).
Controls: `draws` distinct random sets of k heads drawn from every head of the model, the top ones included
(`random_sets`; `random_pool` "any": from every layer; "layer": the same count per layer as the first k), kept or
masked the same way. Every condition runs on the same samples (paired; default task NIAH
recall), so each k gets the target's and the pooled random sets' means with CIs (experiments.compare: the pool's
CI resamples its sets and the samples) and a direct paired test target vs pooled random.

Summaries (`HeadCurveResult.reach`): for "keep", the smallest k whose target mean reaches `reach_frac` of the
baseline mean (and the smallest whose CI lower bound does), the same for the random sets; for both kinds the
smallest k at which the target-vs-random CI excludes 0. A k that never gets there is None, said as such.

head_curve.json fields: `kind`, `metric`, `ranked` (the ranking used, best first), `baseline` (Estimate),
`points[*]`: k, heads (the first k), target / random_pooled ({"metric": Estimate, "vs_baseline": ...}),
random_sets (heads of each draw), target_vs_random (paired test); `reach`; `config`; `provenance`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

from interp.errors import InvalidInputError
from interp.experiments import NiahTask, baseline, compare, run_conditions
from interp.experiments.conditions import Condition
from interp.hooks.interventions import AblateHeads
from interp.hooks.window import HeadMasking, kv_memory
from interp.runtime.progress import plan
from interp.sites import HeadId, as_head
from interp.tasks.niah import NiahConfig, resolve_niah

KINDS = ("keep", "mask")


def rank_heads(scores: Sequence[Sequence[float]]) -> tuple[HeadId, ...]:
    """Every head of a [layer][head] score grid, best first (ties: lower layer, then lower head first)."""
    cells = [(-float(s), layer, head) for layer, row in enumerate(scores) for head, s in enumerate(row)]
    if not cells:
        raise InvalidInputError("no head scores to rank")
    return tuple(HeadId(layer, head) for _, layer, head in sorted(cells))


@dataclass
class HeadCurveConfig:
    """`ranked`: heads best first; `ks`: the curve's head counts; `kind`: keep | mask (module docstring); `mode`:
    zero | mean | uniform (AblateHeads) | window (WindowHeads: `window` recent keys and `sinks` first tokens; a
    keep curve is then the KV-memory frontier, each point with the share of KV memory kept); `draws` random sets per k from `random_pool` (any | layer); `reach_frac`:
    the share of the baseline a keep curve must reach; `niah`: the default task's grid."""

    ranked: tuple[HeadId, ...]
    ks: tuple[int, ...] = (1, 2, 4, 8, 16)
    kind: str = "keep"
    niah: NiahConfig = field(default_factory=NiahConfig)
    mode: str = "zero"
    draws: int = 3
    random_pool: str = "any"
    reach_frac: float = 0.95
    seed: int = 0
    batch_size: int = 8
    n_boot: int = 10000
    n_perm: int = 10000
    ranking_source: str = "explicit"
    window: int | None = None  # mode window: recent keys the masked heads keep (the query included)
    sinks: int = 4  # mode window: first tokens kept besides

    def __post_init__(self):
        from interp.errors import check_fields

        check_fields(self, {"draws": 0, "batch_size": 1, "n_boot": 1, "n_perm": 1})
        ranked = self.ranked.split(",") if isinstance(self.ranked, str) else self.ranked
        self.ranked = tuple(as_head(h) for h in ranked)  # in rank order; "L3H1" strings and (layer, head) pairs too
        self.ks = tuple(int(k) for k in self.ks)
        if self.kind not in KINDS:
            raise InvalidInputError(f"curve kind {self.kind!r}: use keep (mask all but the top k) or mask (the top k)")
        self.masking = HeadMasking(self.mode, self.window, self.sinks)
        if not self.ks or len(set(self.ks)) != len(self.ks):
            raise InvalidInputError(f"--ks {','.join(map(str, self.ks))}: give distinct head counts")
        if len(set(self.ranked)) != len(self.ranked):
            raise InvalidInputError("the ranking lists a head more than once")
        if not 0 < self.reach_frac <= 1:
            raise InvalidInputError(f"reach_frac {self.reach_frac}: must lie in (0, 1]")


@dataclass
class CurvePoint:
    k: int
    heads: list[str]  # the first k of the ranking
    target: dict  # {"metric": Estimate, "vs_baseline": PairedComparison}
    random_pooled: dict | None
    random_sets: list[list[str]]
    target_vs_random: dict | None
    # mode window: the share of KV-cache memory kept at the task's mean prompt length (kv_memory; a KV head is
    # freed only when all its query heads are windowed), for the target and the mean over the random sets
    kv_kept: dict | None = None


@dataclass
class HeadCurveResult:
    model: str
    kind: str
    mode: str
    metric: str
    ranking_source: str
    ranked: list[str]
    baseline: dict  # Estimate of the metric, nothing masked
    points: list[CurvePoint]
    reach: dict
    task: dict
    sample_ids: list[str]
    config: dict
    provenance: dict

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> HeadCurveResult:
        """A HeadCurveResult from its dict (`to_dict()`, the result file), nested records rebuilt: the exact inverse of
        `to_dict`. InvalidInputError naming the field when one is missing or of the wrong shape."""
        from interp.runtime.records import from_dict

        return from_dict(cls, d)

    def to_frame(self):
        """One row per (k, condition): the metric with its CI and the paired difference vs baseline (p, the
        smallest p its design allows, the Holm-adjusted p); then per k the top k vs the pooled random sets
        (condition "target vs random (pooled)", the difference in the diff columns)."""
        import pandas as pd

        recs = []
        for p in self.points:
            blocks = [("target", p.target), ("random (pooled)", p.random_pooled),
                      ("target vs random (pooled)", {"vs_baseline": p.target_vs_random} if p.target_vs_random
                       else None)]
            for name, b in blocks:
                if not b:
                    continue
                e, v = b.get("metric") or {}, b.get("vs_baseline") or {}
                recs.append({"model": self.model, "kind": self.kind, "k": p.k, "condition": name,
                             "metric": self.metric, "mean": e.get("mean"), "lo": e.get("lo"), "hi": e.get("hi"),
                             **{c: v.get(c) for c in ("diff", "diff_lo", "diff_hi", "p_value", "p_floor", "p_holm",
                                                      "p_note")},
                             "heads": ",".join(p.heads) if name == "target" else None})
        return pd.DataFrame.from_records(recs)


def random_sets(top: Sequence[HeadId], spec, draws: int, seed: int, pool: str = "any") -> list[tuple[HeadId, ...]]:
    """Up to `draws` distinct random sets of len(top) heads drawn from EVERY head of the model (the top ones
    included, as "k random heads" means), none equal to `top` itself: pool "any" from all heads, pool "layer" with
    top's count per layer. Fewer when fewer distinct sets exist (k = every head: none)."""
    import random

    if pool not in ("any", "layer"):
        raise InvalidInputError(f"random head pool must be 'any' or 'layer', got {pool!r}")
    rng = random.Random(seed)
    every = [HeadId(layer, head) for layer in range(spec.n_layers) for head in range(spec.n_heads)]
    per_layer: dict[int, int] = {}
    for h in top:
        per_layer[h.layer] = per_layer.get(h.layer, 0) + 1
    found, seen = [], {tuple(sorted(top))}
    for _ in range(50 * max(draws, 1)):
        if len(found) == draws:
            break
        if pool == "any":
            hs = rng.sample(every, len(top))
        else:
            hs = [HeadId(layer, head) for layer, n in sorted(per_layer.items())
                  for head in rng.sample(range(spec.n_heads), n)]
        key = tuple(sorted(hs))
        if key not in seen:
            seen.add(key)
            found.append(key)
    return found


def _check_ks(config: HeadCurveConfig, total: int) -> None:
    hi = total if config.kind == "keep" else len(config.ranked)
    lo = 0 if config.kind == "keep" else 1
    bad = [k for k in config.ks if not lo <= k <= hi]
    if bad:
        raise InvalidInputError(f"--ks {','.join(map(str, bad))} out of range: a {config.kind} curve takes {lo}..{hi} "
                                f"heads here ({len(config.ranked)} ranked of the model's {total})")
    if config.kind == "keep" and max(config.ks) > len(config.ranked):
        raise InvalidInputError(f"a keep curve to k = {max(config.ks)} needs that many ranked heads; the ranking has "
                                f"{len(config.ranked)}")


def run_head_curve(model, config: HeadCurveConfig, samples: Sequence | None = None, task=None,
                   progress=None) -> HeadCurveResult:
    """The curve of `config` on `task` (default: NIAH from `samples` or `config.niah`); see the module docstring."""
    from interp.runtime.provenance import provenance

    spec = model.spec
    every = tuple(HeadId(layer, head) for layer in range(spec.n_layers) for head in range(spec.n_heads))
    if not config.ranked:
        raise InvalidInputError("no ranked heads: a curve needs a ranking (e.g. --heads retrieval)")
    AblateHeads(config.ranked).bind(model)  # heads outside the model: a clear error before any work
    _check_ks(config, len(every))
    if task is None:
        task = (NiahTask(samples, config.niah) if samples is not None
                else NiahTask.build(model.tokenizer, resolve_niah(model, config.niah)))
    means = None
    if config.mode == "mean":
        from interp.experiments import reference_means

        means, _ = reference_means(model, task, config.batch_size)

    def acted(hs):  # the heads a condition masks, given the heads it is about
        if config.kind == "mask":
            return tuple(hs)
        kept = set(hs)
        return tuple(h for h in every if h not in kept)

    def make(hs):
        masked = acted(hs)
        return (config.masking.intervention(masked, means=means),) if masked else ()

    conds, pools, direct, sets = [baseline()], {}, [], {}
    for k in config.ks:
        top = config.ranked[:k]
        conds.append(Condition(f"target-{k}", make(top), "target", top, {"k": k}))
        if k == 0 or (config.kind == "keep" and k == len(every)):
            sets[k] = []  # nothing to draw: keep none / keep all
            continue
        drawn = random_sets(top, spec, config.draws, config.seed * 1000 + k, config.random_pool)
        ctl = [Condition(f"random-{k}-{i + 1}", make(hs), "control", hs, {"k": k}) for i, hs in enumerate(drawn)]
        conds += ctl
        sets[k] = [[str(h) for h in hs] for hs in drawn]
        if ctl:
            pools[f"random-{k}"] = [c.name for c in ctl]
            direct.append((f"target-{k}", f"random-{k}"))
    plan(progress, len(conds) * task.n)
    outcomes = run_conditions(model, task, conds, config.batch_size, progress)
    comp = compare(outcomes, pools=pools, direct=direct, n_boot=config.n_boot, n_perm=config.n_perm, seed=config.seed)
    m = comp.metric

    def block(name):
        r = comp.row(name)
        return {"metric": r.estimates[m], "vs_baseline": (r.vs_baseline or {}).get(m)}

    kv_kept = _kv_counter(model, task, config, acted)
    points = [CurvePoint(k, [str(h) for h in config.ranked[:k]], block(f"target-{k}"),
                         block(f"random-{k}") if f"random-{k}" in pools else None, sets[k],
                         next((d for d in comp.direct if d["x"] == f"target-{k}"), None),
                         kv_kept(k, sets[k])) for k in config.ks]
    base = comp.row("baseline").estimates[m]
    cfg = asdict(config)
    cfg["ranked"] = [str(h) for h in config.ranked]
    cfg["niah"] = {**asdict(task.config), "seeds": list(task.config.seeds)} if isinstance(task, NiahTask) else None
    return HeadCurveResult(
        model=model.name, kind=config.kind, mode=config.mode, metric=m, ranking_source=config.ranking_source,
        ranked=[str(h) for h in config.ranked], baseline=base, points=points,
        reach=_with_kv(_reach(points, base, config), points), task=task.describe(), sample_ids=task.sample_ids, config=cfg,
        provenance=provenance(model))


def _kv_counter(model, task, config: HeadCurveConfig, acted):
    """Mode window: a function (k, random sets drawn) -> the KV-memory share kept with the top k (and, on average,
    the random sets) treated as the curve treats them, at the task's mean prompt length (measured once); for the
    other modes a function returning None."""
    if config.mode != "window":
        return lambda k, drawn: None
    import numpy as np
    import torch

    context = int(round(float(np.mean([len(x) for x in task.inputs()]))))
    dtype = next(model.hf.parameters()).dtype
    width = torch.finfo(dtype).bits // 8 if dtype.is_floating_point else 4

    def frac(hs):
        return kv_memory(model.spec, acted(hs), context, config.window, config.sinks, width)

    def kept(k: int, drawn: list[list[str]]) -> dict:
        top = frac(config.ranked[:k])
        rand = [frac([HeadId.parse(h) for h in hs])["fraction"] for hs in drawn]
        return {"context": context, "bytes_per_value": width, "target": top["fraction"],
                "target_windowed_kv_heads": top["windowed_kv_heads"], "n_kv_heads": top["n_kv_heads"],
                "random_mean": float(np.mean(rand)) if rand else None}

    return kept


def _with_kv(reach: dict, points: list[CurvePoint]) -> dict:
    """Mode window: the KV-memory share kept at the k where the ranking reaches its goal (`kv_kept`), at the k
    where its CI lower bound does (`kv_kept_ci`: the budget with 95% confidence) and at the random sets' k
    (`kv_kept_random`); None where that k is not on the curve."""
    if not any(p.kv_kept for p in points):
        return reach
    at = {p.k: p.kv_kept for p in points}

    def kv(k, key="target"):
        return None if k is None or at.get(k) is None else at[k][key]

    return {**reach, "kv_kept": kv(reach.get("target_k")), "kv_kept_ci": kv(reach.get("target_k_ci")),
            "kv_kept_random": kv(reach.get("random_k"), "random_mean")}


def _reach(points: list[CurvePoint], base: dict, config: HeadCurveConfig) -> dict:
    """Where the curve gets somewhere (module docstring); None where it never does on these ks."""
    pts = sorted(points, key=lambda p: p.k)
    goal = config.reach_frac * base["mean"]

    def first(pred):
        return next((p.k for p in pts if pred(p)), None)

    out = {"separated_k": first(lambda p: p.target_vs_random is not None and (
        p.target_vs_random["diff_lo"] > 0 or p.target_vs_random["diff_hi"] < 0))}
    if config.kind == "keep":
        out.update({"frac": config.reach_frac, "goal": goal,
                    "target_k": first(lambda p: p.target["metric"]["mean"] >= goal),
                    "target_k_ci": first(lambda p: p.target["metric"]["lo"] >= goal),
                    "random_k": first(lambda p: p.random_pooled is not None
                                      and p.random_pooled["metric"]["mean"] >= goal)})
    return out
