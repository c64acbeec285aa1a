"""Retrieval-head detection (Wu et al. 2024) and a DuoAttention-style streaming score.

At every greedy decode step the recorder recomputes, for each (layer, query head), the attention
row of the current query from the real post-RoPE q and k (O(context) memory; sdpa kept) and keeps
only its top-1 key position and its mass on sink + recent tokens. A head "copies" at a step when
its top-1 key lies in the needle span and the token there equals the token just generated. Its
retrieval score on a sample is the number of distinct needle positions it copied from, divided by
(`RetrievalConfig.score_norm`, capped at 1):
- "answer" (the default): the answer's token count. A head that copies the whole answer scores 1,
  whatever the needle sentence around it.
- "needle": the needle span's token count, Wu et al.'s normalisation (they add 1/|needle| per copy
  event). Their answer IS the needle (the model is asked to repeat it), so there the two agree; with
  a needle sentence around a short answer (the corpus and standard needles) a perfect copier scores
  |answer| / |needle| (e.g. 1/10), and a threshold of 0.1 means something else.
To reproduce Wu et al.'s numbers, use needles whose answer is the whole needle (a needles file with
"answer" equal to "needle") and score_norm="needle"; for this package's needles use "answer". Either
way a position counts once however often a head copies it. Scores are averaged over samples (by
default only the samples whose answer was recalled, as in the original).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from interp.errors import InvalidInputError
from interp.hooks.interventions import Intervention
from interp.hooks.rows import compute_rows
from interp.tasks.niah import NiahConfig, NiahSample, build_niah, resolve_niah
from interp.experiments.tasks import NiahOutcome, run_niah

DEFAULT_SWEEP = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
SCORE_NORMS = ("answer", "needle")  # what a head's distinct copied positions are divided by (module docstring)


class RetrievalRecorder(Intervention):
    """Observes the last query of every call: top-1 key per head and its sink+recent mass."""

    observes_qkv = True

    def __init__(self, sink: int = 4, recent: int = 64, score_norm: str = "answer"):
        super().__init__(None)
        self.sink, self.recent = sink, recent
        self.score_norm = score_norm  # "answer" | "needle": the denominator of a sample's score
        self.sample_scores: list[np.ndarray] = []  # per sample [L, H], in decode (batch) order
        self.sample_streaming: list[np.ndarray] = []
        self.sample_ids: list[str] = []  # the sample id of each entry above

    def begin_batch(self, samples: Sequence[NiahSample], ids: torch.Tensor, mask: torch.Tensor):
        self._samples, self._ids, self._mask = samples, ids, mask
        self._mark = len(self.sample_scores)  # entries before this batch (export_batch takes the rest)
        self._pad = (mask == 0).sum(1)  # left padding per row
        self._argmax: list[torch.Tensor] = []  # per call [L, b, H]
        self._stream: list[torch.Tensor] = []
        self._cur: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def observe_qkv(self, call, q, k, v):
        b = q.shape[0]
        pos = torch.full((b, 1), call.q_len - 1, dtype=torch.long, device=q.device)
        rows = compute_rows(call, q, k, pos)[:, :, 0]  # [b, H, k_len]
        k_len = rows.shape[-1]
        kidx = torch.arange(k_len, device=rows.device)
        pad = self._pad.to(rows.device)[:, None]
        keep = (kidx[None] < pad + self.sink) | (kidx[None] >= k_len - self.recent)  # [b, k_len]
        stream = (rows * keep[:, None, :]).sum(-1)
        self._cur[call.layer] = (rows.argmax(-1).cpu(), stream.cpu())
        if len(self._cur) == self.spec.n_layers:
            self._argmax.append(torch.stack([self._cur[l][0] for l in range(self.spec.n_layers)]))
            self._stream.append(torch.stack([self._cur[l][1] for l in range(self.spec.n_layers)]))
            self._cur = {}

    def end_batch(self, generated: torch.Tensor):
        arg = torch.stack(self._argmax)  # [T, L, b, H]
        stream = torch.stack(self._stream).float()
        T = min(arg.shape[0], generated.shape[1])
        for row, s in enumerate(self._samples):
            pad = int(self._pad[row])
            lo, hi = s.needle_span[0] + pad, s.needle_span[1] + pad
            a = arg[:T, :, row]  # [T, L, H]
            in_span = (a >= lo) & (a < hi)
            tok_at = self._ids[row][a.clamp(max=self._ids.shape[1] - 1)]
            copied = in_span & (tok_at == generated[row, :T][:, None, None])
            L, H = a.shape[1], a.shape[2]
            score = np.zeros((L, H))
            for l, h in torch.nonzero(copied.any(0)).tolist():
                distinct = torch.unique(a[:, l, h][copied[:, l, h]]).numel()
                norm = hi - lo if self.score_norm == "needle" else len(s.answer_ids)
                score[l, h] = min(1.0, distinct / max(1, norm))
            self.sample_scores.append(score)
            self.sample_streaming.append(stream[:T, :, row].mean(0).numpy())
            self.sample_ids.append(s.id)

    def export_batch(self) -> dict:
        """The batch's per-sample entries (added by end_batch), taken out as plain data (a sweep unit)."""
        k = self._mark
        out = {"scores": self.sample_scores[k:], "streaming": self.sample_streaming[k:], "ids": self.sample_ids[k:]}
        del self.sample_scores[k:], self.sample_streaming[k:], self.sample_ids[k:]
        return out

    def import_batch(self, state: dict) -> None:
        """Put a batch's entries back (in batch order), from this rank, another one or a unit file."""
        self.sample_scores += [np.asarray(x, dtype=float) for x in state["scores"]]
        self.sample_streaming += [np.asarray(x) for x in state["streaming"]]
        self.sample_ids += list(state["ids"])

    def per_sample(self, samples: Sequence[NiahSample]) -> tuple[np.ndarray, np.ndarray]:
        """Scores and streaming scores ``[N, L, H]`` in the order of ``samples``.

        Decoding groups samples by context length, so the recorder sees them in batch
        order; this puts them back in the caller's order (the order of the outcomes).
        """
        where = {sid: i for i, sid in enumerate(self.sample_ids)}
        order = [where[s.id] for s in samples]
        return (np.stack([self.sample_scores[i] for i in order]),
                np.stack([self.sample_streaming[i] for i in order]))


@dataclass
class RetrievalConfig:
    """`niah`: the NIAH grid decoded. `threshold`: retrieval score above which a head is a retrieval head.
    `only_successful`: average scores over the recalled samples only. `sink_tokens` / `recent_window`: the
    first real tokens and the last keys whose attention mass makes the streaming score. `sweep`:
    thresholds at which heads are counted (the result's `sweep`). `score_norm`: a sample's distinct copied
    needle positions divided by the answer's tokens ("answer", the default) or the needle span's ("needle",
    Wu et al.'s; the module docstring says which to use). `keep_sample_scores`: also return every prompt's
    per-head scores and NIAH seed (the result's `sample_scores` / `sample_seeds`), for resampling prompts."""

    niah: NiahConfig = field(default_factory=NiahConfig)
    threshold: float = 0.1
    only_successful: bool = True
    sink_tokens: int = 4
    recent_window: int = 64
    batch_size: int = 8
    sweep: tuple[float, ...] = DEFAULT_SWEEP
    score_norm: str = "answer"
    keep_sample_scores: bool = False

    def __post_init__(self):
        from interp.errors import check_fields

        check_fields(self, {"sink_tokens": 0, "recent_window": 0, "batch_size": 1}, finite=("threshold",))
        if self.score_norm not in SCORE_NORMS:
            raise InvalidInputError(f"score_norm {self.score_norm!r}: use answer (copied positions / answer tokens) "
                                    "or needle (/ needle tokens, Wu et al.)")


@dataclass
class RetrievalResult:
    model: str
    scores: list[list[float]]  # [layer][head], mean retrieval score
    streaming: list[list[float]]  # [layer][head], mean attention mass on sink + recent window
    threshold: float
    heads: list[str]  # heads with score > threshold, sorted by score
    sweep: list[dict]
    per_layer: list[int]  # retrieval heads per layer at the threshold
    n_samples: int
    n_used: int  # samples averaged (successful ones when only_successful)
    baseline_recall: float
    config: dict
    provenance: dict
    outcomes: list[dict] = field(default_factory=list)
    sample_scores: list = field(default_factory=list)  # [prompt][layer][head] when config.keep_sample_scores
    sample_seeds: list[int] = field(default_factory=list)  # each prompt's NIAH seed, same order
    # per context length: {length, n_samples, n_used, recall, heads (score > threshold at that length alone,
    # best first), per_layer}; and the Jaccard index of every two lengths' head sets (how stable the set is)
    by_length: list[dict] = field(default_factory=list)
    jaccard_by_length: list[dict] = field(default_factory=list)
    # per (length, depth) cell: {length, depth, n_samples, n_used, recall, distance (mean tokens from the needle's
    # end to the prompt's end: how far back the first answer token's query must reach), scores [layer][head]
    # (mean over the cell's used samples)}: where a head retrieves, e.g. inside or beyond a sliding window
    by_cell: list[dict] = field(default_factory=list)
    # one prompt's attention rows of the shown heads at its last position (analyses.attention_example); None in
    # files written before it was recorded
    attention_example: dict | None = None

    def head_ids(self):
        from interp.sites import as_heads

        return as_heads(self.heads)

    def to_frame(self):
        """One row per (layer, head, quantity): the retrieval and streaming scores, `is_retrieval` marked."""
        from interp.figures.tables import head_frame

        return head_frame({"retrieval_score": self.scores, "streaming_score": self.streaming},
                          {"is_retrieval": self.heads}, model=self.model)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RetrievalResult:
        """A RetrievalResult from its dict (`to_dict()`, retrieval.json): the exact inverse of `to_dict`; keys that are
        not fields are ignored. InvalidInputError naming the field when one without a default is missing."""
        from interp.runtime.records import from_dict

        return from_dict(cls, d)


def detect_retrieval_heads(model, config: RetrievalConfig | None = None, samples: Sequence[NiahSample] | None = None,
                           progress=None) -> RetrievalResult:
    """Run NIAH with the recorder and return per-head retrieval and streaming scores."""
    from interp.runtime.provenance import provenance
    from interp.stats import threshold_sweep

    from dataclasses import replace

    from interp.models.batching import niah_batch

    config = config or RetrievalConfig()
    if samples is None:  # built here: the needles for this model (recorded in the result's config)
        config = replace(config, niah=resolve_niah(model, config.niah))
    config = replace(config, batch_size=niah_batch(model, config.batch_size, config.niah, "detect"))
    samples = list(samples) if samples is not None else build_niah(model.tokenizer, config.niah)
    rec = RetrievalRecorder(config.sink_tokens, config.recent_window, config.score_norm)
    rec.bind(model)
    outcomes: list[NiahOutcome] = run_niah(model, samples, recorder=rec, batch_size=config.batch_size,
                                           max_new_tokens=config.niah.max_new_tokens, progress=progress)
    if len({s.id for s in samples}) != len(samples):
        raise InvalidInputError("NIAH sample ids must be unique (they pair scores with outcomes)")
    scores, stream = rec.per_sample(samples)  # [N, L, H], in the order of `samples` and `outcomes`
    ok = np.array([o.recall for o in outcomes])
    use = ok if config.only_successful else np.ones_like(ok)
    if use.sum() == 0:
        warnings.warn("no NIAH sample was recalled, so every retrieval score is 0 (scores average "
                      "the recalled samples); use only_successful=False (--all-samples) or an easier "
                      "NIAH grid", stacklevel=2)
        mean, smean = np.zeros(scores.shape[1:]), stream.mean(0)
    else:
        mean, smean = scores[use].mean(0), stream[use].mean(0)
    order = _above(mean, config.threshold)
    if order and 0 < use.sum() < MIN_SCORED_SAMPLES:
        from interp.errors import InterpWarning

        warnings.warn(InterpWarning(
            f"{len(order)} retrieval head(s) declared from scores averaged over {int(use.sum())} "
            f"{'recalled ' if config.only_successful else ''}prompt(s) of {len(samples)}: each head's score rests "
            f"on that many needles (fewer than {MIN_SCORED_SAMPLES}); a larger NIAH grid (--n-seeds, --depths) "
            "gives scores worth a threshold"), stacklevel=2)
    by_length = []
    lengths = np.array([s.context_length for s in samples])
    for n_ctx in sorted(set(lengths.tolist())):
        at = lengths == n_ctx
        u = use & at
        m = scores[u].mean(0) if u.any() else np.zeros(scores.shape[1:])
        by_length.append({"length": int(n_ctx), "n_samples": int(at.sum()), "n_used": int(u.sum()),
                          "recall": float(ok[at].mean()), "heads": [f"L{l}H{h}" for _, l, h in _above(m, config.threshold)],
                          "per_layer": [int(x) for x in (m > config.threshold).sum(1)]})
    jaccard = [{"lengths": [a["length"], b["length"]], "jaccard": _jaccard(a["heads"], b["heads"])}
               for i, a in enumerate(by_length) for b in by_length[i + 1:]]
    from interp.analyses.attention_example import attention_example, shown_heads

    example = attention_example(model, samples, ok.tolist(), shown_heads(mean, order)) if samples else None
    return RetrievalResult(
        attention_example=example,
        by_cell=_by_cell(samples, scores, ok, use),
        model=model.name,
        scores=mean.round(6).tolist(),
        streaming=smean.round(6).tolist(),
        threshold=config.threshold,
        heads=[f"L{l}H{h}" for _, l, h in order],
        sweep=threshold_sweep(mean, config.sweep),
        per_layer=[int(x) for x in (mean > config.threshold).sum(1)],
        n_samples=len(samples),
        n_used=int(use.sum()),
        baseline_recall=float(ok.mean()),
        config=_config_dict(config),
        provenance=provenance(model),
        outcomes=[o.to_dict() for o in outcomes],
        **({"sample_scores": scores.round(6).tolist(), "sample_seeds": [int(s.seed) for s in samples]}
           if config.keep_sample_scores else {}),
        by_length=by_length if len(by_length) > 1 else [],
        jaccard_by_length=jaccard,
    )


def _by_cell(samples, scores: np.ndarray, ok: np.ndarray, use: np.ndarray) -> list[dict]:
    """Head scores per (context length, depth) cell of the NIAH grid, with the cell's needle distance."""
    cells = {}
    for i, smp in enumerate(samples):
        cells.setdefault((smp.context_length, smp.depth), []).append(i)
    out = []
    for (n_ctx, depth), idx in sorted(cells.items()):
        idx = np.array(idx)
        u = idx[use[idx]]
        dist = [len(samples[i].input_ids) - samples[i].needle_span[1] for i in idx]
        out.append({"length": int(n_ctx), "depth": float(depth), "n_samples": int(idx.size), "n_used": int(u.size),
                    "recall": float(ok[idx].mean()), "distance": float(np.mean(dist)),
                    "scores": (scores[u].mean(0) if u.size else np.zeros(scores.shape[1:])).round(6).tolist()})
    return out


#: fewer scored prompts than this behind a detection: the heads it declares rest on too few needles (warned)
MIN_SCORED_SAMPLES = 5


def _above(mean: np.ndarray, threshold: float) -> list[tuple]:
    """(score, layer, head) of the heads scoring above `threshold`, best first."""
    return sorted(((mean[l, h], l, h) for l, h in zip(*np.nonzero(mean > threshold))), reverse=True)


def _jaccard(a: Sequence[str], b: Sequence[str]) -> float | None:
    """|a & b| / |a | b| of two head sets; None when both are empty (nothing to compare)."""
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a | b else None


def _config_dict(config) -> dict:
    d = asdict(config)
    d["niah"]["seeds"] = list(config.niah.seeds)
    return d
