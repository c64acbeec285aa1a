"""RoPE frequency-band zeroing: dose-response of NIAH recall with head, dim and task controls.

At each dose (number of dims zeroed per head) on the same paired-seed prompts:
- target: the band (e.g. lowest frequencies) zeroed in the target heads;
- random dims: the same number of randomly drawn pairs in the same heads (several draws);
- matched heads: the band in matched non-target heads (same per-layer counts) — head specificity;
- task: next-token loss on plain corpus text under the target patch vs unpatched — task specificity.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np
import torch

from ..errors import InvalidInputError
from ..interventions import ZeroRopeDims
from ..rope import require_rope, resolve_dims
from ..tasks.niah import NiahConfig, NiahSample, build_niah
from ..types import HeadId
from .niah_run import NiahRuns, pad_left


@dataclass
class RopeZeroConfig:
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


@dataclass
class DoseResult:
    dose: int
    target: dict  # recall Estimate + vs baseline
    target_dims: dict
    random_dims: list[dict]
    random_pooled: dict
    matched_heads: list[dict]
    matched_pooled: dict
    task: dict  # next-token loss under the target patch vs baseline


@dataclass
class RopeZeroResult:
    model: str
    heads: list[str]
    heads_source: str
    band: str
    side: str
    unit: str
    baseline: dict
    doses: list[DoseResult]
    matched_head_sets: list[list[str]]
    sample_ids: list[str]
    config: dict
    provenance: dict

    def to_dict(self) -> dict:
        return asdict(self)


def corpus_loss_per_text(model, texts_ids: list[list[int]], interventions=(), batch_size: int = 8) -> np.ndarray:
    """Mean next-token loss per text (nats), under the interventions."""
    pad = model.tokenizer.pad_token_id or 0
    ids, mask = pad_left(texts_ids, pad)
    ids, mask = ids.to(model.device), mask.to(model.device)
    with model.intervene(*interventions):
        logits = model.forward(ids, attention_mask=mask, batch_size=batch_size).float()
    lp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    m = (mask[:, 1:] * mask[:, :-1]).float()
    return (-(lp * m).sum(1) / m.sum(1)).cpu().numpy()


def _task_texts(model, config: RopeZeroConfig) -> list[list[int]]:
    from ..tasks.text import corpus_passages

    return corpus_passages(model.tokenizer, config.task_texts, config.task_tokens,
                           f"rope-task/{config.niah.first_seed}")


def run_rope_zero(model, config: RopeZeroConfig, samples: Sequence[NiahSample] | None = None,
                  progress=None) -> RopeZeroResult:
    from .. import stats
    from ..provenance import provenance

    rope = require_rope(model.spec)
    spec = model.spec
    heads = tuple(sorted(config.heads))
    if not heads:
        raise InvalidInputError("no target heads: pass --heads retrieval|L3H1,...|FILE")
    for d in config.doses:
        resolve_dims(rope, config.band, d, config.unit)  # validate every dose up front
    samples = list(samples) if samples is not None else build_niah(model.tokenizer, config.niah)
    texts = _task_texts(model, config)

    runs = NiahRuns(model, samples, batch_size=config.batch_size, max_new_tokens=config.niah.max_new_tokens,
                    progress=progress)

    def recall(hs=(), dims=()):  # each distinct (heads, dims) patch decoded once
        ivs = (ZeroRopeDims(hs, dims, side=config.side),) if hs else ()
        return runs.recall((frozenset(hs), tuple(sorted(dims))), ivs)

    def summary(x, base):
        d = {"recall": stats.mean_ci(x, n_boot=config.n_boot, seed=config.seed).to_dict()}
        d["vs_baseline"] = stats.paired_diff(x, base, n_boot=config.n_boot, n_perm=config.n_perm,
                                             seed=config.seed).to_dict()
        return d

    base = recall()
    base_loss = corpus_loss_per_text(model, texts, batch_size=config.batch_size)
    draws = stats.matched_random_heads([(h.layer, h.head) for h in heads], spec.n_layers, spec.n_heads,
                                       n_draws=config.head_draws, seed=config.seed)
    matched_sets = [tuple(HeadId(l, h) for l, h in d) for d in draws.draws]
    doses = []
    for dose in config.doses:
        band = resolve_dims(rope, config.band, dose, config.unit)
        if dose == 0:
            zero = {"recall": stats.mean_ci(base, n_boot=config.n_boot, seed=config.seed).to_dict(),
                    "vs_baseline": None}
            doses.append(DoseResult(0, zero, band.to_dict(), [], zero, [], zero,
                                    {"loss": float(base_loss.mean()), "vs_baseline": None}))
            continue
        x = recall(heads, band.dims)
        rnd = []
        rnd_x = []
        for i in range(config.random_draws):
            rd = resolve_dims(rope, "random", dose, config.unit, seed=config.seed * 1000 + i)
            xr = recall(heads, rd.dims)
            rnd_x.append(xr)
            rnd.append({**summary(xr, base), "dims": rd.to_dict()})
        mh = []
        mh_x = []
        for hs in matched_sets:
            xm = recall(hs, band.dims)
            mh_x.append(xm)
            mh.append({**summary(xm, base), "heads": [str(h) for h in hs]})
        loss = corpus_loss_per_text(model, texts, (ZeroRopeDims(heads, band.dims, side=config.side),),
                                    batch_size=config.batch_size)
        task = {"loss": float(loss.mean()),
                "vs_baseline": stats.paired_diff(loss, base_loss, n_boot=config.n_boot, n_perm=config.n_perm,
                                                 seed=config.seed).to_dict()}
        doses.append(DoseResult(
            dose, summary(x, base), band.to_dict(), rnd,
            summary(np.mean(rnd_x, 0), base) if rnd_x else {}, mh,
            summary(np.mean(mh_x, 0), base) if mh_x else {}, task))
    cfg = asdict(config)
    cfg["heads"] = [str(h) for h in heads]
    cfg["niah"]["seeds"] = list(config.niah.seeds)
    return RopeZeroResult(
        model=model.name, heads=[str(h) for h in heads], heads_source=config.heads_source, band=config.band,
        side=config.side, unit=config.unit,
        baseline={"recall": stats.mean_ci(base, n_boot=config.n_boot, seed=config.seed).to_dict(),
                  "task_loss": float(base_loss.mean()),
                  "rope": {"theta": rope.theta, "scaling": rope.scaling, "rotary_dims": rope.rotary_dims,
                           "head_dim": rope.head_dim, "layout": rope.layout}},
        doses=doses, matched_head_sets=[[str(h) for h in hs] for hs in matched_sets],
        sample_ids=[s.id for s in samples], config=cfg, provenance=provenance(model))
