"""Causal head masking with matched random controls (paired samples), on any task.

Conditions, all on the same samples (default task: NIAH recall by greedy decoding; or user prompts
with logit_diff / logprob / loss, see experiments/tasks.py): the unablated baseline, the target heads
masked, and `draws` sets of matched random heads (same count per layer, drawn from the other heads;
or, with `random_pool="any"`, the same count from any layer). The comparison (experiments/comparison.py)
gives every condition its metric with a bootstrap CI and, against baseline, the paired difference
with its CI, a sign-flip permutation p-value and Cohen's d_z; the per-sample mean over the random
draws is a row of its own, and the target is tested against it directly (`target_vs_random`).

ablation.json fields: `metric` (the primary metric, e.g. recall), `task` (what was scored);
`conditions[*]`: name, role, heads, estimates {metric: mean/lo/hi/n...}, vs_baseline {metric:
diff/diff_lo/diff_hi/p_value/cohens_d...}, per_sample {metric: [...]}, head_write_rel;
`random_pooled` (same fields), `target_vs_random` (paired test), `shortfall_by_layer`,
`distinct_draws`, `head_write_norm` [layer][head].
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

from interp.errors import InvalidInputError
from interp.experiments import (Comparison, ConditionStats, NiahTask, baseline, compare, random_head_controls,
                                reference_means, run_conditions, write_norms)
from interp.experiments.conditions import Condition
from interp.hooks.interventions import AblateHeads
from interp.hooks.window import HeadMasking
from interp.runtime.progress import plan
from interp.tasks.niah import NiahConfig, resolve_niah
from interp.sites import HeadId, as_heads


@dataclass
class AblationConfig:
    """`heads`: the target heads to mask; `niah`: the NIAH grid of the default task. `mode`: zero | mean |
    uniform (see AblateHeads) | window (WindowHeads) | remap (RemapPositions with `scale`, `offset`, `bands`).
    `decode_only`: NIAH, mask during decoding only (the prefill runs unmasked).
    `draws`: sets of matched random heads; `random_pool`: "layer" (same count per layer) or "any" (same
    count, any layer). `n_boot` / `n_perm`: bootstrap resamples for the CIs / sign-flip permutations for the
    p-values. `heads_source`: how the heads were chosen, recorded in the result."""

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
    window: int | None = None  # mode window: recent keys kept (the query included)
    sinks: int = 4  # mode window: first tokens kept besides (attention sinks, Xiao et al. 2023)
    scale: float = 1.0  # mode remap: RoPE positions times scale (queries and keys; RemapPositions)
    offset: float = 0.0  # mode remap: queries' positions moved by offset
    bands: str | None = None  # mode remap: the rotary pairs that move ("lowest:N", "highest:N"; None: all)

    def __post_init__(self):
        from interp.errors import check_fields

        check_fields(self, {"draws": 0, "batch_size": 1, "n_boot": 1, "n_perm": 1})
        self.masking = HeadMasking(self.mode, self.window, self.sinks, self.scale, self.offset, self.bands)
        self.heads = as_heads(self.heads)  # "L3H1" strings and (layer, head) pairs too


@dataclass
class AblationResult:
    model: str
    heads: list[str]
    heads_source: str
    mode: str
    scope: str
    metric: str
    task: dict
    intervention: dict
    conditions: list[ConditionStats]
    random_pooled: ConditionStats | None
    target_vs_random: dict | None
    shortfall_by_layer: dict
    sample_ids: list[str]
    config: dict
    provenance: dict
    detection: dict | None = None
    distinct_draws: int = 0  # random head sets run (all distinct)
    requested_draws: int = 0  # sets asked for (more than distinct_draws when fewer distinct sets exist)
    controls_note: str | None = None  # says so
    random_pool: str = "layer"
    # [layer][head] mean ||W_O,h z_h|| over the real tokens of the first prompts (unablated): how much
    # each head writes into the residual stream, so inactive control heads are visible
    head_write_norm: list | None = None
    head_write_prompts: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> AblationResult:
        """A AblationResult from its dict (`to_dict()`, the result file), nested records rebuilt: the exact inverse of
        `to_dict`. InvalidInputError naming the field when one is missing or of the wrong shape."""
        from interp.runtime.records import from_dict

        return from_dict(cls, d)

    def condition(self, name: str) -> ConditionStats:
        for c in self.conditions + ([self.random_pooled] if self.random_pooled else []):
            if c.name == name:
                return c
        raise KeyError(name)

    def to_frame(self):
        """One row per (condition, metric): mean, CI, paired diff vs baseline, p (with the smallest p its design
        allows and the Holm-adjusted p), d_z, write norm; then the target vs the pooled random sets (role "test").
        The pool and that test carry `controls_note` (fewer distinct random sets than asked) in `note`."""
        comp = Comparison(self.metric, self.conditions, [self.random_pooled] if self.random_pooled else [],
                          [self.target_vs_random] if self.target_vs_random else [])
        notes = {}
        if self.controls_note and self.random_pooled:
            notes[self.random_pooled.name] = self.controls_note
            if self.target_vs_random:
                notes[f"target vs {self.target_vs_random['y']}"] = self.controls_note
        df = comp.to_frame(notes)
        df.insert(0, "model", self.model)
        return df


def run_ablation(model, config: AblationConfig, samples: Sequence | None = None, task=None,
                 detection: dict | None = None, progress=None) -> AblationResult:
    """Mask `config.heads` on `task` (default: NIAH from `samples` or `config.niah`) against matched controls."""
    from interp.runtime.provenance import provenance

    heads = tuple(sorted(config.heads))
    if not heads:
        raise InvalidInputError("no heads to ablate (detection found none above the threshold?); lower --threshold "
                                "or pass heads explicitly, e.g. --heads L3H1,L5H0")
    AblateHeads(heads).bind(model)  # heads outside the model: a clear error before any work
    if config.mode == "remap":
        config.masking.intervention(heads).bind(model)  # no RoPE, dynamic RoPE, a bad band: before any work
    if task is None:
        task = (NiahTask(samples, config.niah, config.decode_only) if samples is not None
                else NiahTask.build(model.tokenizer, resolve_niah(model, config.niah), config.decode_only))
    means, note = reference_means(model, task, config.batch_size) if config.mode == "mean" else (None, None)

    def ablate(hs):
        return (config.masking.intervention(hs, means=means),)

    controls = random_head_controls(heads, model.spec, ablate, config.draws, config.seed, config.random_pool)
    conditions = [baseline(), Condition("target", ablate(heads), role="target", heads=heads), *controls.conditions]
    plan(progress, len(conditions) * task.n, controls.fewer())
    outcomes = run_conditions(model, task, conditions, config.batch_size, progress)
    writes = write_norms(model, task.inputs(8), config.batch_size)
    pooled = controls.pooled_name
    pools = {pooled: controls.names} if controls.names else {}
    comp = compare(outcomes, pools=pools, direct=[("target", pooled)] if pools else [],
                   write_rel=writes.relative, n_boot=config.n_boot, n_perm=config.n_perm, seed=config.seed)

    iv = config.masking.intervention(heads).describe()
    if note:
        iv["mean_reference"] = note
    desc = task.describe()
    iv["scope"] = desc.get("scope", "the forward pass of every prompt")
    cfg = asdict(config)
    cfg["heads"] = [str(h) for h in heads]
    is_niah = isinstance(task, NiahTask)
    cfg["niah"] = {**asdict(task.config), "seeds": list(task.config.seeds)} if is_niah else None
    scope = ("decode" if task.decode_only else "prefill+decode") if is_niah else "forward"
    return AblationResult(
        model=model.name, heads=[str(h) for h in heads], heads_source=config.heads_source, mode=config.mode,
        scope=scope, metric=comp.metric, task=desc, intervention=iv, conditions=comp.rows,
        random_pooled=comp.pooled[0] if comp.pooled else None,
        target_vs_random=comp.direct[0] if comp.direct else None, shortfall_by_layer=controls.shortfall_by_layer,
        sample_ids=task.sample_ids, config=cfg, provenance=provenance(model), detection=detection,
        distinct_draws=controls.distinct_draws, random_pool=config.random_pool, head_write_norm=writes.as_list(),
        head_write_prompts=writes.n_prompts, requested_draws=controls.requested, controls_note=controls.note(),
    )
