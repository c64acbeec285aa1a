"""RoPE frequency-band zeroing: dose-response of a task metric with head, dim and task controls.

At each dose (number of dims zeroed per head) on the same paired samples (default task: NIAH
recall; or user prompts with logit_diff / logprob / loss):
- target: the band (e.g. lowest frequencies) zeroed in the target heads;
- random dims: the same number of randomly drawn pairs in the same heads (several distinct draws), pooled
  per sample, and the target tested against that pool directly (`target_vs_random_dims`). They are drawn
  outside the target band at that dose by default (a random set that zeroes part of the band is part target;
  `random_dims="any"` draws from every pair), and each dose records where they came from
  (`random_dims_from`), how many pairs each draw shares with the band (`random_dims_overlap`) and a note when
  fewer distinct draws exist, the band leaves too few pairs outside it, or draws share pairs
  (`random_dims_note`, all of them in `controls_note`);
- matched heads: the band in matched non-target heads (same per-layer counts) — head specificity,
  pooled likewise (`target_vs_matched_heads`);
- task: next-token loss on plain text under the target patch vs unpatched — task specificity. The text is the
  NIAH haystack's when it is a real one (a file or a fetched text), else interp's corpus.
Every condition of every dose is one `Condition` of one `run_conditions` call (each distinct
(heads, dims) patch evaluated once); the numbers come from `experiments.compare`.

`mode` sets what "zeroing" a band means (the same doses, controls and result): zero (content and phase gone),
phase (the band's RoPE angle fixed at one query-key distance, content kept), content (its pre-rotation vector
set to the mean over the loss-control passages, position kept) or magnitude (its length set to that mean, angle
kept). Set against each other on one band they say whether a head needs the band's position or its content.

rope_zero.json: `metric`; `baseline` {metric Estimate, task_loss, rope (theta, layout, ..., heads_by_theta:
which target heads rotate with which theta, freqs_by_theta: the zeroed pairs' frequencies under each theta when
layer types differ, as on Gemma-3)}; `doses[*]`: dose,
target {metric, vs_baseline}, target_dims, random_dims [...], random_pooled, matched_heads [...],
matched_pooled, target_vs_random_dims, target_vs_matched_heads, task {loss, vs_baseline}.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

from interp.errors import InvalidInputError
from interp.experiments import (Comparison, Condition, NiahTask, PromptTask, baseline, compare, random_head_controls,
                           run_conditions, text_items)
from interp.runtime.progress import plan
from interp.hooks.bandpatch import MEAN_MODES, MeanPairs, pair_means
from interp.hooks.interventions import ZeroRopeDims
from interp.hooks.remap import RemapPositions
from interp.models.rope import heads_by_theta, one_pair_order, resolve_dims
from interp.tasks.niah import NiahConfig, resolve_niah
from interp.sites import HeadId, as_heads

RANDOM_DIMS = ("outside", "any")
MODES = ("zero", "phase", "content", "magnitude")


def mode_verb(mode: str, phase_distance: float = 0.0) -> str:
    """What a mode does to the band, as the result, tables and figures say it ("zeroed", ...)."""
    return {"zero": "zeroed", "phase": f"with phase fixed at distance {phase_distance:g}",
            "content": "with content set to its mean", "magnitude": "with length set to its mean"}[mode]


@dataclass
class RopeZeroConfig:
    """`heads`: the target heads; `niah`: the NIAH grid of the default task. `band`: which rotary pairs are
    zeroed (lowest | highest | random frequencies); `doses`: how many per head, counted in `unit` (dims |
    pairs); `side`: q | k | both (see ZeroRopeDims). `random_draws` random-dim sets and `head_draws` matched
    head sets per dose; `task_texts` corpus passages of `task_tokens` tokens for the loss control.
    `n_boot` / `n_perm`: bootstrap resamples / permutations; `heads_source`: recorded in the result.
    `random_dims`: where the random dims come from, outside the target band (default) or any pair.
    `mode`: what happens to the band's pairs: zero (ZeroRopeDims: content and phase gone), phase (their RoPE
    angle fixed at `phase_distance` for every query-key pair, content kept: RemapPositions scale 0 on those
    pairs), content (their pre-rotation vector set to its mean over the loss-control passages, rotated to the
    token's position: position kept) or magnitude (their length set to its mean, angle kept; MeanPairs)."""

    heads: tuple[HeadId, ...]
    niah: NiahConfig = field(default_factory=NiahConfig)
    band: str = "lowest"
    doses: tuple[int, ...] = (0, 4, 8, 16, 32)
    unit: str = "dims"
    side: str = "q"
    random_draws: int = 3
    head_draws: int = 2
    seed: int = 0
    batch_size: int = 8
    task_texts: int = 8  # plain corpus passages for the task-specificity control
    task_tokens: int = 256
    n_boot: int = 5000
    n_perm: int = 5000
    heads_source: str = "explicit"
    # "outside": random dims are drawn from the pairs outside the target band at that dose (where at least as
    # many lie outside as the band holds; else from every pair, and the result says so); "any": from every pair,
    # the band included (each draw's shared pairs recorded)
    random_dims: str = "outside"
    mode: str = "zero"
    phase_distance: float = 0.0

    def __post_init__(self):
        from interp.errors import check_fields

        self.heads = as_heads(self.heads)  # "L3H1" strings and (layer, head) pairs too
        if self.random_dims not in RANDOM_DIMS:
            raise InvalidInputError(f"random dims from {self.random_dims!r}: valid are {', '.join(RANDOM_DIMS)}")
        if self.mode not in MODES:
            raise InvalidInputError(f"mode {self.mode!r}: valid are {', '.join(MODES)}")
        if self.mode == "phase" and self.side != "q":
            raise InvalidInputError("mode phase sets the angle between a head's query and its keys (its own copy of "
                                    "them under GQA): it has no side; leave side at its default")
        if self.mode != "phase" and self.phase_distance != 0:
            raise InvalidInputError("phase_distance (--phase-distance) applies with mode phase (--mode phase) only")

        check_fields(self, {"random_draws": 0, "head_draws": 0, "batch_size": 1, "task_texts": 1, "task_tokens": 2,
                            "n_boot": 1, "n_perm": 1})


@dataclass
class DoseResult:
    dose: int
    target: dict  # {"metric": Estimate, "vs_baseline": PairedComparison}
    target_dims: dict
    random_dims: list[dict]
    random_pooled: dict
    matched_heads: list[dict]
    matched_pooled: dict
    task: dict  # next-token loss under the target patch vs baseline
    target_vs_random_dims: dict | None = None
    target_vs_matched_heads: dict | None = None
    random_dims_from: str = ""  # "outside the target band" | "every pair" (and why)
    random_dims_overlap: list = field(default_factory=list)  # per random draw: pairs it shares with the band
    random_dims_note: str | None = None  # fewer distinct draws than asked, a fallback, or draws sharing pairs


@dataclass
class RopeZeroResult:
    model: str
    heads: list[str]
    heads_source: str
    band: str
    side: str
    unit: str
    metric: str
    task: dict
    baseline: dict
    doses: list[DoseResult]
    matched_head_sets: list[list[str]]
    sample_ids: list[str]
    config: dict
    provenance: dict
    controls_note: str | None = None  # every dose's random_dims_note, joined
    mode: str = "zero"  # zero | phase | content | magnitude (RopeZeroConfig)
    phase_distance: float | None = None  # mode phase: the distance every key is seen at
    reference_tokens: int | None = None  # content / magnitude: tokens the means were taken over
    patch: str = "zeroed"  # mode_verb: what was done to the band, in words

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RopeZeroResult:
        """A RopeZeroResult from its dict (`to_dict()`, the result file), nested records rebuilt: the exact inverse of
        `to_dict`. InvalidInputError naming the field when one is missing or of the wrong shape."""
        from interp.runtime.records import from_dict

        return from_dict(cls, d)

    def to_frame(self):
        """One row per (dose, condition): the metric with CI and the paired diff vs baseline (p, the smallest p its
        design allows, the Holm-adjusted p); then per dose the target vs the pooled random dims and vs the pooled
        matched heads (condition "target vs ... (pooled)", the difference in the diff columns)."""
        import pandas as pd

        recs = []
        for d in self.doses:
            blocks = [("target", d.target, d.target_dims.get("dims"))]
            if d.dose > 0:
                blocks += [("random dims (pooled)", d.random_pooled, None), ("matched heads (pooled)", d.matched_pooled, None)]
            blocks += [(f"random dims {i + 1}", r, r["dims"].get("dims")) for i, r in enumerate(d.random_dims)]
            blocks += [(f"matched heads {i + 1}", r, None) for i, r in enumerate(d.matched_heads)]
            blocks += [(f"target vs {what} (pooled)", {"vs_baseline": t}, None)
                       for what, t in (("random dims", d.target_vs_random_dims),
                                       ("matched heads", d.target_vs_matched_heads)) if t]
            for name, b, dims in blocks:
                if not b:
                    continue
                e, v = b.get("metric") or {}, b.get("vs_baseline") or {}
                recs.append({"model": self.model, "dose": d.dose, "condition": name, "metric": self.metric,
                             "mean": e.get("mean"), "lo": e.get("lo"), "hi": e.get("hi"),
                             **{c: v.get(c) for c in ("diff", "diff_lo", "diff_hi", "p_value", "p_floor", "p_holm",
                                                      "p_note")},
                             "dims": None if dims is None else ",".join(map(str, dims)),
                             "heads": ",".join(b.get("heads", self.heads if name == "target" else []))})
            recs.append({"model": self.model, "dose": d.dose, "condition": "task: corpus loss", "metric": "loss",
                         "mean": d.task["loss"], **{k: (d.task["vs_baseline"] or {}).get(k)
                                                    for k in ("diff", "diff_lo", "diff_hi", "p_value")}})
        return pd.DataFrame.from_records(recs)


def _task_texts(model, config: RopeZeroConfig) -> list[list[int]]:
    from interp.tasks.text import corpus_passages

    return corpus_passages(model.tokenizer, config.task_texts, config.task_tokens,
                           f"rope-task/{config.niah.first_seed}", text=config.niah.haystack_file)


def _block(row, metric: str, **extra) -> dict:
    return {"metric": row.estimates[metric], "vs_baseline": (row.vs_baseline or {}).get(metric), **extra}


def run_rope_zero(model, config: RopeZeroConfig, samples: Sequence | None = None, task=None,
                  progress=None) -> RopeZeroResult:
    """Zero `config.band` of the target heads' rotary dims at every dose on `task` (default: NIAH from `samples`
    or `config.niah`), against random-dim, matched-head and corpus-loss controls (see module docstring).
    Raises InvalidInputError for a model without RoPE, no target heads, an unknown band or a dose it cannot
    give (an odd number of dims, more pairs than the heads have)."""
    from interp.runtime.provenance import provenance

    rope = one_pair_order(model.spec)  # the same pairs per band on every layer type (Gemma-3: two thetas)
    heads = tuple(sorted(config.heads))
    if not heads:
        raise InvalidInputError("no target heads: pass --heads retrieval|L3H1,...|FILE")
    bands = {d: resolve_dims(rope, config.band, d, config.unit) for d in config.doses}  # validate every dose first
    if task is None:
        task = (NiahTask(samples, config.niah) if samples is not None
                else NiahTask.build(model.tokenizer, resolve_niah(model, config.niah)))

    means = pair_means(model, _task_texts(model, config), config.batch_size) if config.mode in MEAN_MODES else None

    def zero(hs, band):
        if config.mode == "zero":
            return (ZeroRopeDims(hs, band.dims, side=config.side),)
        if config.mode == "phase":
            return (RemapPositions(hs, scale=0.0, offset=config.phase_distance, bands=band.pairs),)
        return (MeanPairs(hs, band.pairs, means, mode=config.mode, side=config.side),)

    controls = random_head_controls(heads, model.spec, lambda hs: (), config.head_draws, config.seed)
    matched_sets = [c.heads for c in controls.conditions]
    conds, pools, direct, loss_conds = [baseline()], {}, [], [baseline()]
    dims_from, notes = {0: ""}, {}
    for dose in (d for d in config.doses if d > 0):
        conds.append(Condition(f"target-{dose}", zero(heads, bands[dose]), "target", heads, {"dose": dose}))
        loss_conds.append(conds[-1])
        draws_, dims_from[dose], notes[dose] = _random_dims(rope, config, dose, bands[dose])
        rnd = [Condition(f"random-dims-{dose}-{i + 1}", zero(heads, rd), "control", heads,
                       {"dose": dose, "dims": rd.to_dict()}) for i, rd in enumerate(draws_)]
        mh = [Condition(f"matched-heads-{dose}-{i + 1}", zero(hs, bands[dose]), "control", hs, {"dose": dose})
              for i, hs in enumerate(matched_sets)]
        conds += rnd + mh
        for kind, group in (("random-dims", rnd), ("matched-heads", mh)):
            if group:
                pools[f"{kind}-{dose}"] = [c.name for c in group]
                direct.append((f"target-{dose}", f"{kind}-{dose}"))
    kw = dict(n_boot=config.n_boot, n_perm=config.n_perm, seed=config.seed)
    plan(progress, len(conds) * task.n)
    comp = compare(run_conditions(model, task, conds, config.batch_size, progress), pools=pools, direct=direct, **kw)
    texts = PromptTask(text_items(_task_texts(model, config), "corpus"), "loss",
                       name=f"{config.niah.haystack} passages" if config.niah.haystack_file else "corpus passages")
    loss = compare(run_conditions(model, texts, loss_conds, config.batch_size), **kw)
    doses = [_dose(comp, loss, dose, bands[dose], dims_from.get(dose, ""), notes.get(dose)) for dose in config.doses]
    m = comp.metric
    cfg = asdict(config)
    cfg["heads"] = [str(h) for h in heads]
    cfg["niah"] = {**asdict(task.config), "seeds": list(task.config.seeds)} if isinstance(task, NiahTask) else None
    return RopeZeroResult(
        model=model.name, heads=[str(h) for h in heads], heads_source=config.heads_source, band=config.band,
        side=config.side, unit=config.unit, metric=m, task=task.describe(),
        baseline={"metric": comp.row("baseline").estimates[m], "task_loss": loss.row("baseline").estimates["loss"]["mean"],
                  "rope": {"theta": rope.theta, "scaling": rope.scaling, "rotary_dims": rope.rotary_dims,
                           "head_dim": rope.head_dim, "layout": rope.layout,
                           "heads_by_theta": {f"{t:g}": hs for t, hs in heads_by_theta(model.spec, heads).items()},
                           "freqs_by_theta": _band_freqs_by_theta(model.spec, bands)}},
        doses=doses, matched_head_sets=[[str(h) for h in hs] for hs in matched_sets],
        sample_ids=task.sample_ids, config=cfg, provenance=provenance(model),
        mode=config.mode, phase_distance=config.phase_distance if config.mode == "phase" else None,
        reference_tokens=None if means is None else means.n_tokens,
        patch=mode_verb(config.mode, config.phase_distance),
        controls_note="; ".join(f"{d.dose} {config.unit}: {d.random_dims_note}" for d in doses
                                if d.random_dims_note) or None)


def _random_dims(rope, config: RopeZeroConfig, dose: int, band) -> tuple[list, str, str | None]:
    """The random-dims draws of a dose: up to `random_draws` distinct pair sets of the band's size (seeds
    seed * 1000 + i), from the pairs outside the band when `random_dims` is "outside" and enough lie outside,
    else from every pair. (draws, where they come from, a note or None)."""
    import math

    k = len(band.pairs)
    outside = config.random_dims == "outside" and rope.n_pairs - k >= k
    exclude = band.pairs if outside else ()
    where = ("outside the target band" if outside else "every pair" + (
        f" (only {rope.n_pairs - k} of {rope.n_pairs} pairs lie outside the {k}-pair band)"
        if config.random_dims == "outside" else ", the target band included"))
    n_pool = rope.n_pairs - (k if outside else 0)
    possible = math.comb(n_pool, k)
    draws, seen, i = [], set(), 0
    while len(draws) < min(config.random_draws, possible) and i < 100 * max(1, config.random_draws):
        rd = resolve_dims(rope, "random", dose, config.unit, seed=config.seed * 1000 + i, exclude=exclude)
        i += 1
        if rd.pairs not in seen:
            seen.add(rd.pairs)
            draws.append(rd)
    notes = []
    if len(draws) < config.random_draws:
        notes.append(f"only {len(draws)} distinct random-dim set(s) of {k} pairs "
                     f"{'lie outside the target band' if outside else 'exist'} ({config.random_draws} asked)")
    if not outside:
        shared = [len(set(rd.pairs) & set(band.pairs)) for rd in draws]
        if any(shared):
            notes.append(f"random dims from {where}: the draws share {', '.join(map(str, shared))} of their {k} "
                         "pairs with the target band")
    return draws, where, "; ".join(notes) or None


def _band_freqs_by_theta(spec, bands) -> dict:
    """{theta: {dose: the zeroed pairs' frequencies}} when layer types rotate with different thetas (the same
    pairs, other frequencies); {} when every layer shares one RoPE (the doses' own `freqs` say it)."""
    if not spec.layer_ropes:
        return {}
    return {f"{r.theta:g}": {str(d): [r.inv_freq[j] for j in b.pairs] for d, b in bands.items()}
            for r in spec.layer_ropes.values()}


def _dose(comp: Comparison, loss: Comparison, dose: int, band, dims_from: str = "", note: str | None = None
          ) -> DoseResult:
    m = comp.metric
    if dose == 0:
        zero = _block(comp.row("baseline"), m)
        return DoseResult(0, zero, band.to_dict(), [], zero, [], zero,
                          {"loss": loss.row("baseline").estimates["loss"]["mean"], "vs_baseline": None})
    rows = [r for r in comp.rows if r.info.get("dose") == dose]
    rnd = [_block(r, m, dims=r.info["dims"]) for r in rows if r.name.startswith("random-dims-")]
    mh = [_block(r, m, heads=r.heads) for r in rows if r.name.startswith("matched-heads-")]

    def pooled(kind):
        return _block(comp.row(f"{kind}-{dose}"), m) if any(p.name == f"{kind}-{dose}" for p in comp.pooled) else {}

    def vs(kind):
        return next((d for d in comp.direct if d["y"] == f"{kind}-{dose}"), None)

    t = loss.row(f"target-{dose}")
    overlap = [len(set(r["dims"]["pairs"]) & set(band.pairs)) for r in rnd]
    return DoseResult(dose, _block(comp.row(f"target-{dose}"), m), band.to_dict(), rnd, pooled("random-dims"), mh,
                      pooled("matched-heads"),
                      {"loss": t.estimates["loss"]["mean"], "vs_baseline": t.vs_baseline["loss"]},
                      vs("random-dims"), vs("matched-heads"), dims_from, overlap, note)
