"""Far-context necessity per head: what restricting one head to sinks + a recent window costs.

DuoAttention (Xiao et al. 2024) splits heads into retrieval heads, which need the whole context, and streaming
heads, which read only the first tokens (attention sinks) and the recent ones and so can keep a constant-length
KV cache. Here each head (or each KV group, `by_group`: the unit whose KV memory a window actually frees) is
windowed ALONE (`WindowHeads`: `sinks` first tokens + the last `window` keys, the query included) and two paired
differences against the unwindowed model are measured on the same prompts:

- `logprob`: the change in the NIAH answer's log-probability (teacher-forced, summed over its tokens). Log-prob,
  not recall: retrieval heads are often redundant, so windowing one keeps recall but lowers the answer's log-prob.
- `loss`: the change in mean next-token loss on long corpus passages, over the positions a window can change
  (from `window + sinks` on: earlier queries see every key anyway).

Necessity (the `scores` grid, [layer][head], like retrieval.json's) is minus the mean log-prob change: positive
when the head needs far context. Each cell has a bootstrap CI over prompts and a sign-flip p (Benjamini-Hochberg
over cells). Labels, with the thresholds stated in the result: "far-context" when the necessity CI lies above 0
and its mean reaches `threshold` (or the loss rises by `loss_threshold` with its CI above 0); "streaming" when
both CIs' upper ends stay below their thresholds; "mixed" otherwise (the data do not decide).

Cost. Windowing a head at layer l leaves layers below l as in the unwindowed run, so every row starts at layer l
from the captured residual stream (`models.skip.start_at`): the scan's work bound is the sum over units of
(L - l) / L forwards per prompt, against one full forward per unit without skipping (`skip_layers=False`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np
import torch

from interp.errors import InvalidInputError
from interp.hooks.capture import Capture
from interp.hooks.window import WindowCells
from interp.models.skip import start_at
from interp.runtime import interrupt
from interp.sites import Site
from interp.tasks.niah import NiahConfig, resolve_niah

LABELS = ("far-context", "streaming", "mixed")
MIN_PROMPTS = 5  # fewer NIAH prompts: a warning that the labels' CIs say little


@dataclass
class StreamingConfig:
    """`window` / `sinks`: the key window each unit gets; `by_group`: units are KV groups (every query head of a
    key-value head windowed together); `texts` corpus passages of `text_tokens` tokens (default: the longest NIAH
    context) for the loss; `threshold` (nats of answer log-prob) and `loss_threshold` (nats per token) for the
    labels; `max_rows`: windowed rows per forward pass; `skip_layers`: start rows at their unit's layer."""

    niah: NiahConfig = field(default_factory=NiahConfig)
    window: int = 64
    sinks: int = 4
    by_group: bool = False
    texts: int = 4
    text_tokens: int | None = None
    threshold: float = 0.01
    loss_threshold: float = 0.01
    max_rows: int = 8
    skip_layers: bool = True
    n_boot: int = 2000
    n_perm: int = 2000
    seed: int = 0

    def __post_init__(self):
        from interp.errors import check_fields

        check_fields(self, {"window": 1, "sinks": 0, "texts": 0, "max_rows": 1, "n_boot": 1, "n_perm": 1},
                     finite=("threshold", "loss_threshold"))


@dataclass
class StreamingResult:
    model: str
    window: int
    sinks: int
    unit: str  # "head" | "kv_group"
    scores: list  # [layer][head] necessity: minus the mean change of the answer's log-prob when windowed
    logprob: dict  # {"diff", "lo", "hi", "p", "p_bh"}: [layer][head] grids of the answer log-prob change
    loss: dict  # the same for the far-position corpus loss (None grids without texts)
    labels: list  # [layer][head] far-context | streaming | mixed
    thresholds: dict
    baseline: dict  # mean answer log-prob and far loss, unwindowed
    counts: dict  # labels -> number of query heads
    work: dict  # work bound, forwards run, passes, CPU/wall seconds
    n_prompts: int
    n_texts: int
    sample_ids: list
    config: dict
    provenance: dict
    agreement: dict | None = None  # with a retrieval detection (set by the caller that has one)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> StreamingResult:
        """A StreamingResult from its dict (`to_dict()`, the result file), nested records rebuilt: the exact inverse of
        `to_dict`. InvalidInputError naming the field when one is missing or of the wrong shape."""
        from interp.runtime.records import from_dict

        return from_dict(cls, d)

    def to_frame(self):
        """One row per query head: necessity, log-prob and loss changes with CIs and p, label."""
        import pandas as pd

        recs = []
        for l, row in enumerate(self.scores):
            for h, s in enumerate(row):
                rec = {"model": self.model, "layer": l, "head": h, "unit": self.unit, "necessity": s,
                       "label": self.labels[l][h]}
                for name, g in (("logprob", self.logprob), ("loss", self.loss)):
                    for k in ("diff", "lo", "hi", "p", "p_bh"):
                        rec[f"{name}_{k}"] = None if g.get(k) is None else g[k][l][h]
                recs.append(rec)
        return pd.DataFrame.from_records(recs)

    def top(self, k: int = 10) -> list[tuple[str, float]]:
        cells = [(-s, l, h) for l, row in enumerate(self.scores) for h, s in enumerate(row) if s is not None]
        return [(f"L{l}H{h}", -s) for s, l, h in sorted(cells)[:k]]


def _units(spec, by_group: bool) -> list[tuple[int, tuple[int, ...]]]:
    """(layer, query heads windowed together) for every unit, layer by layer."""
    g = spec.n_heads // spec.n_kv_heads
    if by_group:
        return [(l, tuple(range(kv * g, (kv + 1) * g))) for l in range(spec.n_layers) for kv in range(spec.n_kv_heads)]
    return [(l, (h,)) for l in range(spec.n_layers) for h in range(spec.n_heads)]


def _head_logits(model, h: torch.Tensor) -> torch.Tensor:
    """Logits (float32) from the body's final hidden states `h` through the model's own output head and final
    logit softcap (Gemma-2), for the positions given only."""
    logits = model.hf.get_output_embeddings()(h).float()
    cfg = getattr(model.hf.config, "get_text_config", lambda: model.hf.config)()
    cap = getattr(cfg, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


def _score(hidden: torch.Tensor, model, ids: list[int], kind: str, n_answer: int, far_from: int,
           block: int = 128) -> torch.Tensor:
    """Per row of the body's output `hidden` [rows, seq, d]: the answer's summed log-prob (kind "logprob", the
    last `n_answer` tokens of `ids`) or the mean next-token loss over positions >= far_from (kind "loss"). The
    output head runs on the scored positions only, `block` at a time."""
    n = len(ids)
    tgt = torch.as_tensor(ids[1:], device=hidden.device)
    pos = torch.arange(n - 1 - n_answer, n - 1) if kind == "logprob" else torch.arange(far_from, n - 1)
    total = torch.zeros(hidden.shape[0], dtype=torch.float64, device=hidden.device)
    for a in range(0, len(pos), block):
        p = pos[a:a + block].to(hidden.device)
        lp = torch.log_softmax(_head_logits(model, hidden[:, p]), -1)
        total += lp.gather(-1, tgt[p][None, :, None].expand(hidden.shape[0], -1, 1))[..., 0].sum(-1).double()
    return total if kind == "logprob" else -total / len(pos)


def _scan_one(model, ids: list[int], kind: str, n_answer: int, far_from: int, units, config: StreamingConfig,
              work: dict) -> tuple[np.ndarray, float]:
    """([n_units] change of the metric when each unit alone is windowed, the unwindowed metric), one sequence."""
    L = model.spec.n_layers
    x = torch.tensor([ids], device=model.device)
    cap = Capture([Site(l, "resid_pre") for l in range(L)]) if config.skip_layers else None
    with torch.no_grad():
        if cap is not None:
            with model.intervene(cap):
                base_h = model.forward(x, logits=False)
        else:
            base_h = model.forward(x, logits=False)
        base = float(_score(base_h, model, ids, kind, n_answer, far_from)[0])
    out = np.full(len(units), np.nan)
    by_layer: dict[int, list[int]] = {}
    for i, (l, _) in enumerate(units):
        by_layer.setdefault(l, []).append(i)
    for l, idx in by_layer.items():
        l0 = l if config.skip_layers else 0
        for c in range(0, len(idx), config.max_rows):
            interrupt.check()  # a Ctrl-C / SIGTERM swallowed inside torch stops the scan here
            chunk = idx[c:c + config.max_rows]
            n = len(chunk)
            heads = [list(units[i][1]) for i in chunk]
            cells = WindowCells([l] * n, heads, config.window, config.sinks)
            hidden = cap[Site(l0, "resid_pre")].expand(n, -1, -1) if (cap is not None and l0 > 0) else None
            with torch.no_grad(), model.intervene(cells), start_at(model, l0, hidden):
                h = model.forward(x.repeat(n, 1), logits=False)
                out[chunk] = _score(h, model, ids, kind, n_answer, far_from).cpu().numpy() - base
            work["passes"] += 1
            work["forwards"] += n * (L - l0) / L
    return out, base


def run_streaming_scan(model, config: StreamingConfig | None = None, samples: Sequence | None = None,
                       progress=None) -> StreamingResult:
    """Window every unit alone on NIAH prompts (answer log-prob) and corpus passages (far loss); see the module
    docstring."""
    from interp.runtime.provenance import provenance
    from interp.tasks.niah import build_niah
    from interp.tasks.text import corpus_passages

    config = config or StreamingConfig()
    spec = model.spec
    if not spec.causal:
        raise InvalidInputError(f"{spec.architecture} is an encoder: key windows apply to causal attention")
    if samples is None:
        samples = build_niah(model.tokenizer, resolve_niah(model, config.niah))
    samples = list(samples)
    if not samples:
        raise InvalidInputError("no NIAH prompts to scan")
    far_from = config.window + config.sinks
    longest = max(len(s.input_ids) for s in samples)
    if longest <= far_from:
        raise InvalidInputError(f"the NIAH prompts ({longest} tokens at most) fit inside the window + sinks "
                                f"({far_from}): windowing changes nothing; use longer --lengths or a smaller --window")
    n_tok = config.text_tokens or longest
    texts = corpus_passages(model.tokenizer, config.texts, n_tok, f"streaming/{config.niah.first_seed}",
                            text=config.niah.haystack_file) if config.texts else []
    if texts and n_tok <= far_from + 1:
        raise InvalidInputError(f"--text-tokens {n_tok} leaves no position past the window + sinks ({far_from})")
    units = _units(spec, config.by_group)
    work = {"passes": 0, "forwards": 0.0}
    t0, c0 = time.perf_counter(), time.process_time()
    lp_rows, lp_base = [], []
    for s in samples:
        if not s.answer_ids:
            raise InvalidInputError(f"NIAH sample {s.id} has no answer tokens to score")
        ids = list(s.input_ids) + list(s.answer_ids)
        d, b = _scan_one(model, ids, "logprob", len(s.answer_ids), far_from, units, config, work)
        lp_rows.append(d)
        lp_base.append(b)
        if progress is not None:
            progress(1)
    loss_rows, loss_base = [], []
    for t in texts:
        d, b = _scan_one(model, list(t), "loss", 0, far_from, units, config, work)
        loss_rows.append(d)
        loss_base.append(b)
        if progress is not None:
            progress(1)
    seconds = {"wall_s": round(time.perf_counter() - t0, 3), "cpu_s": round(time.process_time() - c0, 3)}
    n_seq = len(samples) + len(texts)
    bound = n_seq * sum((spec.n_layers - l) / spec.n_layers for l, _ in units)
    work.update(seconds, work_bound=round(bound, 4), one_forward_per_unit=n_seq * len(units),
                forwards=round(work["forwards"], 4))

    if len(samples) < MIN_PROMPTS:
        import warnings

        from interp.errors import InterpWarning

        warnings.warn(InterpWarning(
            f"far-context labels rest on {len(samples)} NIAH prompt(s) (fewer than {MIN_PROMPTS}): their CIs "
            "say little" + ("; with one prompt every head is labelled mixed" if len(samples) == 1 else "")
            + "; a larger grid (--n-seeds, --depths) gives labels worth a threshold"), stacklevel=2)
    lp = _grids(np.array(lp_rows), units, spec, config)
    loss = _grids(np.array(loss_rows), units, spec, config) if loss_rows else {k: None for k in lp}
    scores = [[None if v is None else -v for v in row] for row in lp["diff"]]
    labels = [[_label(lp, loss, l, h, config, len(samples)) for h in range(spec.n_heads)]
              for l in range(spec.n_layers)]
    counts = {lab: sum(row.count(lab) for row in labels) for lab in LABELS}
    cfg = asdict(config)
    cfg["niah"] = {**asdict(config.niah), "seeds": list(config.niah.seeds)}
    return StreamingResult(
        model=model.name, window=config.window, sinks=config.sinks, unit="kv_group" if config.by_group else "head",
        scores=scores, logprob=lp, loss=loss, labels=labels,
        thresholds={"necessity_nats": config.threshold, "loss_nats_per_token": config.loss_threshold,
                    "rule": "far-context: necessity CI above 0 and mean >= threshold, or far loss CI above 0 and mean "
                            ">= loss threshold; streaming: both CI upper ends below their thresholds; else mixed"},
        baseline={"answer_logprob": float(np.mean(lp_base)),
                  "far_loss": float(np.mean(loss_base)) if loss_base else None},
        counts=counts, work=work, n_prompts=len(samples), n_texts=len(texts),
        sample_ids=[s.id for s in samples] + [f"text[{i}]" for i in range(len(texts))], config=cfg,
        provenance=provenance(model))


def _grids(rows: np.ndarray, units, spec, config: StreamingConfig) -> dict:
    """[n_seq, n_units] differences -> [layer][head] grids of mean, CI, p, BH-adjusted p (a KV group's value
    repeated for each of its query heads)."""
    from interp.stats.grid import column_mean_ci, column_sign_flip

    est = column_mean_ci(rows, n_boot=config.n_boot, seed=config.seed)
    test = column_sign_flip(rows, n_perm=config.n_perm, seed=config.seed)
    out = {k: [[None] * spec.n_heads for _ in range(spec.n_layers)] for k in ("diff", "lo", "hi", "p", "p_bh")}
    for i, (l, heads) in enumerate(units):
        for h in heads:
            for k, v in (("diff", est.mean), ("lo", est.lo), ("hi", est.hi), ("p", test.p_value), ("p_bh", test.p_bh)):
                out[k][l][h] = float(v[i])
    return out


def _label(lp: dict, loss: dict, l: int, h: int, config: StreamingConfig, n_prompts: int = 2) -> str:
    if n_prompts < 2:
        return "mixed"  # one prompt: no CI, nothing decided
    nec_lo, nec_mean, nec_hi = -lp["hi"][l][h], -lp["diff"][l][h], -lp["lo"][l][h]
    has_loss = loss.get("diff") is not None
    far = nec_lo > 0 and nec_mean >= config.threshold
    if has_loss:
        far = far or (loss["lo"][l][h] > 0 and loss["diff"][l][h] >= config.loss_threshold)
    if far:
        return "far-context"
    stream = nec_hi < config.threshold and (not has_loss or loss["hi"][l][h] < config.loss_threshold)
    return "streaming" if stream else "mixed"


def agreement(result: StreamingResult, retrieval_scores, streaming_mass=None, k: int | None = None) -> dict:
    """How the necessity ranking agrees with a retrieval detection's [layer][head] scores (Spearman rho over every
    head, overlap of the top k: k is the detection's head count when the caller passes it, else the heads labelled
    far-context, at least 1) and, given, with the
    attention-mass heuristic (`streaming_mass` [layer][head]: mass on sinks + recent keys; a streaming head has a
    high mass, so agreement is a negative correlation with necessity)."""
    from scipy.stats import spearmanr

    nec = np.array(result.scores, dtype=float).ravel()
    ret = np.array(retrieval_scores, dtype=float).ravel()
    if ret.shape != nec.shape:
        raise InvalidInputError(f"retrieval scores cover {ret.size} heads, the scan {nec.size}: not the same model")
    k = k or max(1, result.counts.get("far-context", 0))
    top_n = set(np.argsort(-nec, kind="stable")[:k])
    top_r = set(np.argsort(-ret, kind="stable")[:k])
    out = {"k": int(k), "top_k_overlap": len(top_n & top_r), "spearman_retrieval": float(spearmanr(nec, ret)[0])}
    if streaming_mass is not None:
        mass = np.array(streaming_mass, dtype=float).ravel()
        out["spearman_attention_mass"] = float(spearmanr(nec, mass)[0])
    return out
