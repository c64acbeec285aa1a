"""Run NIAH samples through greedy decoding, batched, under interventions; score the answers."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from ..tasks.niah import NiahSample, score_answer


@dataclass
class NiahOutcome:
    id: str
    continuation: str
    generated_ids: list[int]
    recall: bool
    exact_prefix: bool

    def to_dict(self) -> dict:
        return asdict(self)


def pad_left(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, n - len(s):] = torch.tensor(list(s), dtype=torch.long)
        mask[i, n - len(s):] = 1
    return ids, mask


def batches(samples: Sequence[NiahSample], batch_size: int) -> list[list[int]]:
    """Indices grouped by context length (little padding), chunked to batch_size."""
    by_len: dict[int, list[int]] = {}
    for i, s in enumerate(samples):
        by_len.setdefault(s.context_length, []).append(i)
    out = []
    for idx in by_len.values():
        out += [idx[k:k + batch_size] for k in range(0, len(idx), batch_size)]
    return out


def run_niah(model, samples: Sequence[NiahSample], interventions: Sequence = (), decode_only: bool = False,
             batch_size: int = 8, recorder=None, max_new_tokens: int | None = None,
             progress: Callable[[int], None] | None = None) -> list[NiahOutcome]:
    """Greedy-decode every sample; `interventions` apply to prefill and decode, or decode only.

    `recorder` (optional) is an intervention with begin_batch(samples, ids, mask) and
    end_batch(generated) that observes the decode (e.g. the retrieval-score recorder).
    """
    tok = model.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    outcomes: list[NiahOutcome | None] = [None] * len(samples)
    for idx in batches(samples, batch_size):
        group = [samples[i] for i in idx]
        ids, mask = pad_left([s.input_ids for s in group], pad)
        n_new = max_new_tokens or max(len(s.answer_ids) for s in group) + 2
        observers = (recorder,) if recorder is not None else ()
        if recorder is not None:
            recorder.begin_batch(group, ids, mask)
        if decode_only:
            with model.intervene(*observers):
                gen = model.greedy_decode(ids, n_new, attention_mask=mask, decode_interventions=tuple(interventions))
        else:
            with model.intervene(*interventions, *observers):
                gen = model.greedy_decode(ids, n_new, attention_mask=mask)
        gen = gen.cpu()
        if recorder is not None:
            recorder.end_batch(gen)
        for row, (i, s) in enumerate(zip(idx, group)):
            text = tok.decode(gen[row].tolist(), skip_special_tokens=True)
            rec, pre = score_answer(text, s.answer)
            outcomes[i] = NiahOutcome(s.id, text, gen[row].tolist(), rec, pre)
        if progress is not None:
            progress(len(idx))
    return outcomes  # type: ignore[return-value]


class NiahRuns:
    """Runs NIAH conditions on one sample set, each distinct condition once.

    Random controls can repeat (e.g. layer-matched head draws when a layer has few spare heads);
    decoding is deterministic, so a repeated ``key`` returns the stored outcomes (the progress
    callback still advances, so bars stay in step with the planned number of conditions).
    """

    def __init__(self, model, samples: Sequence[NiahSample], *, batch_size: int = 8,
                 max_new_tokens: int | None = None, decode_only: bool = False,
                 progress: Callable[[int], None] | None = None):
        self.model, self.samples = model, list(samples)
        self.batch_size, self.max_new_tokens, self.decode_only = batch_size, max_new_tokens, decode_only
        self.progress = progress
        self._done: dict = {}

    def __call__(self, key, interventions: Sequence = ()) -> list[NiahOutcome]:
        if key in self._done:
            if self.progress is not None:
                self.progress(len(self.samples))
        else:
            self._done[key] = run_niah(self.model, self.samples, interventions=interventions,
                                       decode_only=self.decode_only, batch_size=self.batch_size,
                                       max_new_tokens=self.max_new_tokens, progress=self.progress)
        return self._done[key]

    def recall(self, key, interventions: Sequence = ()) -> np.ndarray:
        return np.array([o.recall for o in self(key, interventions)], dtype=float)

