"""Patching metrics: the number read off a run's last-position logits per row, and the donor-base gap check.

`logit_diff` (logit(answer) - logit(wrong), the default), `logprob` (log p(answer)), `prob` (p(answer)), `kl`
(KL(donor || run) of the next-token distributions, exact patching only: `kl_to_donor` makes it concrete from the
donor run) or a callable `fn(last_logits [rows, vocab], pairs) -> [rows]`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from interp.errors import InvalidInputError
from interp.patching.pairs import PatchPair

METRICS = ("logit_diff", "logprob", "prob", "kl")
#: the smallest median |donor - base| worth normalising by, per metric (nats; a probability for prob)
WEAK_GAPS = {"prob": 0.02}
WEAK_GAP = 0.1  # nats: a median |donor - base| below this makes normalised patching values noise


def metric_values(config, logits: torch.Tensor, pairs: Sequence[PatchPair]) -> np.ndarray:
    """Raw metric per row from last-position logits [rows, vocab]."""
    logits = logits.float()
    if callable(config.metric):
        v = np.asarray(torch.as_tensor(config.metric(logits, list(pairs))).detach().cpu().float(), dtype=float)
        if v.shape != (len(pairs),):
            raise InvalidInputError(f"the metric callable must return one number per row ({len(pairs)}), "
                                    f"got shape {v.shape}")
        return v
    if config.metric == "kl":
        raise InvalidInputError("metric 'kl' needs the donor run's distribution: exact patching (run_patching) "
                                "computes it; attribution and path patching take logit_diff, logprob or prob")
    a = torch.tensor([p.answer for p in pairs], device=logits.device)
    if config.metric == "logprob":
        return torch.log_softmax(logits, -1).gather(1, a[:, None])[:, 0].cpu().numpy().astype(float)
    if config.metric == "prob":
        return torch.softmax(logits, -1).gather(1, a[:, None])[:, 0].cpu().numpy().astype(float)
    w = torch.tensor([p.wrong for p in pairs], device=logits.device)
    return (logits.gather(1, a[:, None]) - logits.gather(1, w[:, None]))[:, 0].cpu().numpy().astype(float)


def kl_to_donor(config, donor_last: torch.Tensor, pairs: Sequence[PatchPair]):
    """`config` with metric 'kl' made concrete: KL(donor || run) in nats between the pair's donor-run next-token
    distribution and a row's, per row (rows name their pairs by identity)."""
    from dataclasses import replace

    ref = torch.log_softmax(donor_last.float(), -1)  # [P, V]
    index = {id(p): i for i, p in enumerate(pairs)}

    def kl(logits, rows):
        r = ref[[index[id(p)] for p in rows]].to(logits.device)
        return (r.exp() * (r - torch.log_softmax(logits.float(), -1))).sum(-1).clamp(min=0.0)

    kl.__name__ = "kl"
    return replace(config, metric=kl)


def check_gap(gap: np.ndarray, metric: str) -> None:
    """An InterpWarning when the donor and base runs barely differ in the metric (median |gap| < WEAK_GAP):
    every normalised value divides by that gap, so the grid is noise (e.g. a task the model cannot do)."""
    import warnings

    from interp.errors import InterpWarning

    med = float(np.median(np.abs(gap)))
    weak = WEAK_GAPS.get(metric, WEAK_GAP)
    if med < weak:
        warnings.warn(InterpWarning(
            f"the clean and corrupt runs barely differ: median |{metric}(donor) - {metric}(base)| = {med:.3g} over "
            f"{len(gap)} pairs (< {weak}); normalised patching values divide by it and are noise. Check that "
            "the model does the task (e.g. `interp organisms eval`), or use --raw (normalize=False)"), stacklevel=3)


def metric_name(metric) -> str:
    return metric if isinstance(metric, str) else getattr(metric, "__name__", "callable")
