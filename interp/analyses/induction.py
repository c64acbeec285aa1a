"""Induction, previous-token and duplicate-token heads on repeated random tokens (Olsson et al.).

Attention scores. For a sequence and a detection pattern D (TransformerLens's head-detector
patterns, built from the token ids: previous token D[i, i-1]; duplicate D[i, j] = t_j == t_i, j < i;
induction D[i, j] = t_{j-1} == t_i, j <= i), a head's mass at query i is sum_j A[i, j] D[i, j].
* `scores[name]`: mean mass over the queries where D has an entry (second-copy tokens for
  induction and duplicate, every token after the first for previous-token), in [0, 1]: 1 is a
  perfect head.
* `tl_scores[name]`: TransformerLens's `detect_head(..., error_measure="mul")`: the summed mass over
  ALL queries divided by the summed attention (the number of queries). On [BOS] R R with distinct
  tokens, tl = scores * L / (2L + 1) for induction/duplicate and scores * (n - 1) / n for
  previous-token. Per-sequence values are averaged over sequences, as TL does for a list.
Attention rows are recomputed layer by layer from the model's own q and k (no eager attention).

OV copying (circuits.py): `copying` (eigenvalue score of the OV circuit on a token sample) and
`copy_top_k` (fraction of tokens whose own logit is among the k highest the head writes).
An induction head is a head whose induction score exceeds `threshold` AND whose copying score
exceeds `min_copying` (default 0): the attention pattern alone does not make one, since
copy-suppression and anti-induction heads attend to the same keys and write the opposite.

Tokens: by default ("auto") drawn from the ids that occur in held-out corpus text when the model
has a tokenizer (tokens it has seen), else from the whole vocabulary minus special tokens; the OV
copying scores use the same pool.

Losses. Per-token next-token loss; early = targets in the first copy, late = second copy, both
without the copy's first token (which is not predictable). `icl_score` = late - early (negative
when the model learns in context). Causal check: the same sequences with the induction heads
ablated, and with `draws` sets of matched random heads (same count per layer), paired per sequence. A head
whose induction score passes the threshold but that is not ablated (its OV circuit does not copy, or it is past
`max_heads`) is near the target: by default (`control_exclude="near"`) no random set contains it
(`causal.excluded_from_controls`); with "none" it may be drawn, and `causal.controls_overlap` names it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from interp.errors import InvalidInputError
from interp.experiments import (RepeatedTask, baseline, compare, head_ablation, random_head_controls, reference_means,
                           run_conditions)
from interp.hooks.interventions import ABLATION_MODES, AblateHeads, Intervention
from interp.hooks.rows import compute_rows
from interp.tasks.repeated import (RepeatedConfig, bos_id, build_repeated_batches, resolve_source,
                              token_pool)
from interp.runtime.progress import plan
from interp.sites import HeadId, as_heads

PATTERNS = ("prev_token", "duplicate", "induction")
CONTROL_EXCLUDE = ("near", "none")


def detection_patterns(ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """TransformerLens's head-detector patterns for token ids [b, s]: {name: bool [b, s, s]}."""
    b, s = ids.shape
    causal = torch.ones(s, s, dtype=torch.bool, device=ids.device).tril(-1)  # j < i
    dup = (ids[:, :, None] == ids[:, None, :]) & causal
    ind = torch.zeros_like(dup)
    ind[:, :, 1:] = dup[:, :, :-1]  # key j holds the token after an earlier occurrence of t_i
    prev = torch.zeros_like(dup)
    idx = torch.arange(1, s, device=ids.device)
    prev[:, idx, idx - 1] = True
    return {"prev_token": prev, "duplicate": dup, "induction": ind}


def pattern_scores(rows: torch.Tensor, pattern: torch.Tensor, exclude_bos: bool = False,
                   exclude_current: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(scores, tl_scores) per sequence and head from rows [b, H, s, s] and a pattern [b, s, s].

    scores: mean over queries that have a pattern entry of the mass on pattern keys (0 where none).
    tl_scores: TransformerLens's "mul" score: sum(A' * D) / sum(A'), with A' the rows after zeroing
    key 0 (exclude_bos) and/or the diagonal (exclude_current), as its `detect_head` computes.
    """
    a = rows.float()
    if exclude_bos or exclude_current:
        a = a.clone()
        if exclude_bos:
            a[..., 0] = 0.0
        if exclude_current:
            a = a * (1 - torch.eye(a.shape[-1], device=a.device))
    d = pattern[:, None].float()
    mass = (a * d).sum(-1)  # [b, H, s]
    has = pattern.any(-1)[:, None].float()  # [b, 1, s]
    scores = (mass * has).sum(-1) / has.sum(-1).clamp(min=1)
    tl = mass.sum(-1) / a.sum((-1, -2)).clamp(min=1e-30)
    return scores, tl


class PatternRecorder(Intervention):
    """Observes every layer's full attention (recomputed from q, k) and keeps per-head pattern scores."""

    observes_qkv = True

    def __init__(self):
        super().__init__(None)
        self.scores: dict[str, list[torch.Tensor]] = {n: [] for n in PATTERNS}
        self.tl: dict[str, list[torch.Tensor]] = {n: [] for n in PATTERNS}

    def begin(self, ids: torch.Tensor):
        self._patterns = detection_patterns(ids)
        self._cur: dict[str, dict[int, tuple]] = {n: {} for n in PATTERNS}

    def observe_qkv(self, call, q, k, v):
        b, _, s, _ = q.shape
        pos = torch.arange(s, device=q.device).expand(b, s)
        rows = compute_rows(call, q, k, pos)  # [b, H, s, s]
        for name, pat in self._patterns.items():
            self._cur[name][call.layer] = pattern_scores(rows, pat.to(rows.device))

    def end(self):
        for name in PATTERNS:
            layers = self._cur[name]
            self.scores[name].append(torch.stack([layers[l][0] for l in sorted(layers)], 1).cpu())  # [b, L, H]
            self.tl[name].append(torch.stack([layers[l][1] for l in sorted(layers)], 1).cpu())

    def result(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Per-sequence [n, L, H] arrays for every pattern: (scores, tl_scores)."""
        return ({n: torch.cat(v).numpy() for n, v in self.scores.items()},
                {n: torch.cat(v).numpy() for n, v in self.tl.items()})


@dataclass
class InductionConfig:
    """`repeated`: the repeated random-token sequences; `tokens`: their token pool. A head is an induction head
    when its induction score > `threshold` and its OV copying score > `min_copying` (None: attention only),
    at most `max_heads` of them; previous-token heads: score > `prev_threshold`. The causal check ablates them
    (or `heads`) with `mode` against `draws` matched random sets. `copy_tokens` / `copy_k` / `embedding`: token
    sample, k and effective embedding of the OV copying scores. `n_boot` / `n_perm`: bootstrap resamples /
    permutations."""

    repeated: RepeatedConfig = field(default_factory=RepeatedConfig)
    tokens: str | tuple[int, ...] = "auto"  # token pool (sequences and circuits): auto | vocab | corpus | ids
    bos_id: int | None = None  # default: the tokenizer's BOS
    threshold: float = 0.4  # induction score above which a head is an induction head ...
    min_copying: float | None = 0.0  # ... if its OV copying score is also above this (None: attention only)
    prev_threshold: float = 0.4
    max_heads: int | None = None  # keep at most this many induction heads (highest scores)
    heads: tuple | None = None  # ablate these heads instead of the detected ones
    mode: str = "zero"  # ablation: zero | mean | uniform
    draws: int = 5
    seed: int = 0
    batch_size: int = 8
    copy_tokens: int | None = 2048  # token sample for the OV copying scores (None: whole vocabulary)
    copy_k: int = 5
    embedding: str = "layer0"
    n_boot: int = 10000
    n_perm: int = 10000
    sweep: bool = False  # also ablate every head alone: change of the second-copy loss per head
    causal: bool = True  # ablate the induction heads vs matched random heads (False: detection only)
    # "near": heads whose induction score exceeds `threshold` but are not ablated (OV copying too low, past
    # max_heads) are kept out of the random control sets; "none": they may be drawn (the overlap is recorded)
    control_exclude: str = "near"

    def __post_init__(self):
        if self.mode not in ABLATION_MODES:
            raise InvalidInputError(f"unknown ablation mode {self.mode!r}; valid: {', '.join(ABLATION_MODES)}")
        from interp.errors import check_fields

        from interp.analyses.circuits import EMBEDDINGS

        if self.embedding not in EMBEDDINGS:
            raise InvalidInputError(f"unknown embedding mode {self.embedding!r}; valid: {', '.join(EMBEDDINGS)}")
        if self.control_exclude not in CONTROL_EXCLUDE:
            raise InvalidInputError(f"control_exclude {self.control_exclude!r}: valid are {', '.join(CONTROL_EXCLUDE)}")
        check_fields(self, {"draws": 0, "batch_size": 1, "max_heads": 1, "copy_tokens": 2, "copy_k": 1, "n_boot": 1,
                            "n_perm": 1}, finite=("threshold", "min_copying", "prev_threshold"))


@dataclass
class InductionResult:
    model: str
    scores: dict  # name -> [layer][head]: induction, prev_token, duplicate, copying, copy_top_k
    tl_scores: dict  # TransformerLens-convention pattern scores, [layer][head]
    induction_heads: list[str]
    prev_token_heads: list[str]
    threshold: float
    ranked: list[dict]  # every head, by induction score
    losses: list[dict]  # per copy length: early / late loss and ICL score (clean)
    causal: dict | None  # conditions with CIs; None when no heads to ablate
    n_seqs: int
    config: dict
    provenance: dict
    # with sweep: {"late_loss": [layer][head], "early_loss": ...} changes, and per head the sign-flip p of the
    # late-loss change (late_loss_p), its Benjamini-Hochberg p over every head (late_loss_p_bh) and its floor
    single_head_effects: dict | None = None

    def to_frame(self):
        """One row per (layer, head, quantity): pattern and OV scores (and with the sweep single-head ablation
        effects, their sign-flip p and Benjamini-Hochberg p over the heads), `is_induction` marked; causal
        conditions are in `causal_frame()`."""
        from interp.figures.tables import head_frame

        grids = {**self.scores, **{f"tl_{k}": v for k, v in self.tl_scores.items()}}
        sweep = self.single_head_effects or {}
        names = {"late_loss": "ablation_delta_late_loss", "early_loss": "ablation_delta_early_loss",
                 "late_loss_p": "ablation_p_late_loss", "late_loss_p_bh": "ablation_p_bh_late_loss",
                 "late_loss_p_floor": "ablation_p_floor_late_loss"}
        grids.update({names[k]: v for k, v in sweep.items() if k in names})
        return head_frame(grids, {"is_induction": self.induction_heads, "is_prev_token": self.prev_token_heads},
                          model=self.model)

    def causal_frame(self):
        """The causal check as a long table: one row per (condition, metric), then the target vs the pooled
        random sets per metric (role "test"; `note`: fewer distinct random sets than asked)."""
        import pandas as pd

        if not self.causal:
            return pd.DataFrame()
        from interp.experiments.comparison import Comparison, ConditionStats

        rows = [ConditionStats(**c) for c in self.causal["conditions"]]
        pooled = [ConditionStats(**self.causal["random_pooled"])] if self.causal["random_pooled"] else []
        note = self.causal.get("controls_note")
        notes = {} if not note or not pooled else {pooled[0].name: note, **{
            f"target vs {t['y']}": note for t in self.causal["target_vs_random"]}}
        return Comparison("late_loss", rows, pooled, self.causal["target_vs_random"]).to_frame(notes)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> InductionResult:
        """A InductionResult from its dict (`to_dict()`, the result file), nested records rebuilt: the exact inverse of
        `to_dict`. InvalidInputError naming the field when one is missing or of the wrong shape."""
        from interp.runtime.records import from_dict

        return from_dict(cls, d)


def _resolved_batch(model, config: InductionConfig) -> InductionConfig:
    """`config` with its batch size resolved (`batch_size="auto"`, or checked against `model.max_memory`): repeated
    sequences of 2 x the longest copy + BOS, every position's logits."""
    from dataclasses import replace

    from interp.models.batching import resolve_batch_size

    bs = resolve_batch_size(model, config.batch_size, "ablate", [2 * max(config.repeated.lengths) + 1],
                            config.repeated.n_seqs, logits="all")
    return replace(config, batch_size=bs)


def detect_induction_heads(model, config: InductionConfig | None = None, progress=None) -> InductionResult:
    """Scores every query head, finds induction heads and checks them causally (see module docstring)."""
    from interp.runtime.provenance import provenance
    from interp.analyses.circuits import ov_scores, token_sample

    config = config or InductionConfig()
    config = _resolved_batch(model, config)
    spec = model.spec
    if config.heads:
        AblateHeads(config.heads).bind(model)  # heads outside the model: InvalidInputError before any work
    pool = token_pool(model, config.tokens)
    bos = config.bos_id if config.bos_id is not None else bos_id(model)
    batches = build_repeated_batches(pool, config.repeated, bos)
    n_sweep = 1 + spec.n_layers * spec.n_heads if config.sweep else 0

    def planned(causal: int, why: str | None = None) -> None:  # steps: lengths, OV scores, conditions run
        plan(progress, len(batches) + 1 + causal + n_sweep, why)

    planned(2 + config.draws if config.causal else 0)  # until the heads are known: as if some are found
    rec = PatternRecorder()
    rec.bind(model)
    task = RepeatedTask(batches, reference=_reference_batches(config, pool, bos) if config.mode == "mean" else None)
    per_length = []
    clean = task.evaluate(model, batch_size=config.batch_size, recorder=rec, per_length=per_length)
    losses = [{"length": b.length, "early_loss": float(e.mean()), "late_loss": float(l_.mean()),
               "icl_score": float((l_ - e).mean()), "n_seqs": int(len(e))} for b, e, l_ in per_length]
    if progress:
        progress(len(batches))
    per_seq, per_seq_tl = rec.result()
    scores = {n: per_seq[n].mean(0) for n in PATTERNS}
    tl_scores = {n: per_seq_tl[n].mean(0).round(6).tolist() for n in PATTERNS}

    special = set(getattr(model.tokenizer, "all_special_ids", None) or []) if model.tokenizer is not None else set()
    if bos is not None:
        special.add(bos)
    toks = token_sample(model, config.copy_tokens, config.seed, exclude=special, pool=pool)
    ov = ov_scores(model, toks, config.embedding, config.copy_k, batch_size=max(64, config.batch_size))
    scores["copying"] = np.array(ov["copying"])
    scores["copy_top_k"] = np.array(ov["copy_top_k"])
    if progress:
        progress(1)

    ind = scores["induction"]
    ok = ind > config.threshold
    if config.min_copying is not None:
        ok &= scores["copying"] > config.min_copying
    found = sorted(((ind[l, h], l, h) for l, h in zip(*np.nonzero(ok))), reverse=True)
    if config.max_heads is not None:
        found = found[:config.max_heads]
    ind_heads = [HeadId(int(l), int(h)) for _, l, h in found]
    prev = scores["prev_token"]
    prev_heads = [f"L{l}H{h}" for _, l, h in
                  sorted(((prev[l, h], l, h) for l, h in zip(*np.nonzero(prev > config.prev_threshold))), reverse=True)]
    ranked = sorted(({"head": f"L{l}H{h}", **{n: round(float(scores[n][l, h]), 6) for n in scores}}
                     for l in range(spec.n_layers) for h in range(spec.n_heads)),
                    key=lambda r: -r["induction"])

    target = as_heads(config.heads) if config.heads else tuple(ind_heads)
    source = "explicit" if config.heads else (
        f"detected (induction score > {config.threshold}" +
        ("" if config.min_copying is None else f", OV copying score > {config.min_copying}") + ")")
    means, note = (reference_means(model, task, config.batch_size) if config.mode == "mean"
                   and ((target and config.causal) or config.sweep) else (None, None))
    causal = None
    if config.causal and not target:
        planned(0, f"no head's induction score is above {config.threshold}: no causal check")
    if target and config.causal:
        near = {f"L{l}H{h}": round(float(ind[l, h]), 6) for l, h in zip(*np.nonzero(ind > config.threshold))
                if HeadId(int(l), int(h)) not in set(target)}
        causal = _causal_check(model, task, clean, target, source, config, means, note, progress, near, planned)
    sweep = _sweep(model, task, clean, config, means, progress) if config.sweep else None
    cfg = asdict(config)
    cfg["heads"] = None if config.heads is None else [str(h) for h in as_heads(config.heads)]
    cfg["n_token_pool"] = len(pool)
    cfg["token_source"] = resolve_source(model, config.tokens)
    cfg["bos_id"] = bos
    return InductionResult(
        model=model.name, scores={n: np.asarray(v).round(6).tolist() for n, v in scores.items()},
        tl_scores=tl_scores, induction_heads=[str(h) for h in ind_heads], prev_token_heads=prev_heads,
        threshold=config.threshold, ranked=ranked, losses=losses, causal=causal, n_seqs=task.n,
        config=cfg, provenance=provenance(model), single_head_effects=sweep)


def _ablate(heads, config, means):
    return (AblateHeads(heads, mode=config.mode, means=means),)


def _sweep(model, task, clean, config, means, progress) -> dict:
    """Mean change of the early / late (second-copy) loss when each head alone is ablated."""
    spec = model.spec
    heads = [HeadId(l, h) for l in range(spec.n_layers) for h in range(spec.n_heads)]
    conds = [baseline()] + [head_ablation(str(h), [h], config.mode, means) for h in heads]
    out = run_conditions(model, task, conds, config.batch_size, known={"baseline": clean},
                         progress=_by_condition(progress, task.n))
    late = np.zeros((spec.n_layers, spec.n_heads))
    early = np.zeros_like(late)
    for h in heads:
        late[h.layer, h.head] = (out[str(h)]["late_loss"] - clean["late_loss"]).mean()
        early[h.layer, h.head] = (out[str(h)]["early_loss"] - clean["early_loss"]).mean()
    from interp import stats

    # one test per head: the sign-flip p of its second-copy loss change over sequences, and Benjamini-Hochberg
    # over every head (which heads matter is a screen of many heads: a false discovery rate, not one test)
    d = np.stack([out[str(h)]["late_loss"] - clean["late_loss"] for h in heads], axis=1)
    t = stats.column_sign_flip(d, n_perm=config.n_perm, seed=config.seed)
    shape = (spec.n_layers, spec.n_heads)
    return {"late_loss": late.round(6).tolist(), "early_loss": early.round(6).tolist(), "mode": config.mode,
            "late_loss_p": t.p_value.reshape(shape).round(8).tolist(),
            "late_loss_p_bh": t.p_bh.reshape(shape).round(8).tolist(),
            "late_loss_p_floor": t.p_floor.reshape(shape).round(8).tolist(),
            "p_method": (f"sign-flip over {d.shape[0]} sequences per head ("
                         + ("every sign pattern" if t.exact else f"{t.n_perm} sign patterns drawn, +1") + "); "
                         f"p_bh: Benjamini-Hochberg over the {len(heads)} heads")}


def _reference_batches(config: InductionConfig, pool, bos):
    """Repeated sequences of seeds disjoint from the evaluated ones (mean-ablation reference)."""
    ref_cfg = RepeatedConfig(lengths=config.repeated.lengths, n_seqs=max(2, config.repeated.n_seqs // 2),
                             seed=config.repeated.seed + 100_000, repeats=config.repeated.repeats,
                             distinct=config.repeated.distinct, bos=config.repeated.bos)
    return build_repeated_batches(pool, ref_cfg, bos)


def _by_condition(progress, n: int):
    """`progress` advanced by whole conditions, from the runner's steps (`n` samples per condition)."""
    if not progress:
        return None
    done = [0]

    def advance(k: int) -> None:
        before = done[0] // n
        done[0] += k
        if done[0] // n > before:
            progress(done[0] // n - before)

    return advance


def _causal_check(model, task, clean, target, source, config, means, note, progress, near: dict, planned) -> dict:
    """The induction heads ablated vs matched random heads, paired per sequence (second-copy loss, ICL). `near`:
    {head: induction score} of the heads above the threshold that are not ablated: kept out of the random sets
    (control_exclude "near"), else any drawn into a set is named (`controls_overlap`)."""
    exclude = sorted(near) if config.control_exclude == "near" else []
    controls = random_head_controls(target, model.spec, lambda hs: _ablate(hs, config, means), config.draws,
                                    config.seed, exclude=exclude)
    overlap = {c.name: [str(h) for h in c.heads if str(h) in near] for c in controls.conditions}
    overlap = {k: v for k, v in overlap.items() if v}
    overlap_note = None
    if overlap:
        overlap_note = ("random head sets contain heads whose induction score passes the threshold "
                        f"({config.threshold}) but that are not ablated: " + "; ".join(
                            f"{k}: " + ", ".join(f"{h} ({near[h]:.3f})" for h in v) for k, v in overlap.items())
                        + " (control_exclude='near' keeps them out)")
    conds = [baseline(), head_ablation("target", target, config.mode, means, role="target"), *controls.conditions]
    planned(len(conds), controls.fewer())
    out = run_conditions(model, task, conds, config.batch_size, known={"baseline": clean},
                         progress=_by_condition(progress, task.n))
    pooled = controls.pooled_name
    pools = {pooled: controls.names} if controls.names else {}
    comp = compare(out, metrics=("late_loss", "icl"), tested=("late_loss", "icl"), pools=pools,
                   direct=[("target", pooled)] if pools else [], n_boot=config.n_boot, n_perm=config.n_perm,
                   seed=config.seed)
    iv = AblateHeads(target, mode=config.mode).describe()
    if note:
        iv["mean_reference"] = note
    by_metric = {d["metric"]: d for d in comp.direct}
    return {"heads": [str(h) for h in target], "heads_source": source, "mode": config.mode, "intervention": iv,
            "metric": "late_loss: mean next-token loss on the second copy (nats), per sequence; icl = late - early",
            "conditions": [asdict(r) for r in comp.rows],
            "random_pooled": asdict(comp.pooled[0]) if comp.pooled else None,
            "target_vs_random": comp.direct, "target_vs_random_late_loss": by_metric.get("late_loss"),
            "shortfall_by_layer": controls.shortfall_by_layer, "distinct_draws": controls.distinct_draws,
            "requested_draws": controls.requested, "controls_note": controls.note(),
            "control_exclude": config.control_exclude, "near_target_heads": near,
            "excluded_from_controls": exclude, "controls_overlap": overlap, "controls_overlap_note": overlap_note}
