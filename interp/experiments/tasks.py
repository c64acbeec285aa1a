"""Tasks: prompts with exact token spans + how they are scored, one number per prompt and metric.

A task evaluates itself under a tuple of interventions and returns per-sample metric arrays
(`{metric: np.ndarray[n]}`, the same sample order in every condition: paired designs). Built-ins:

* `NiahTask`: NIAH recall by greedy decoding (metrics `recall`, `exact_prefix`).
* `PromptTask`: teacher-forced prompts, one forward pass per batch, scored on the logits:
  `logprob` (sum of log p over the answer tokens, teacher-forced), `logit_diff` (logit of the
  answer minus the wrong answer at the last prompt token; both single tokens), `loss` (mean
  next-token loss over the answer tokens, or over the whole prompt when there is no answer), or
  any callable `fn(logits, items) -> array[b]` on the left-padded logits [b, seq, vocab] of a
  batch (position -1 = the last token) and its `PromptItem`s.
* `RepeatedTask`: repeated random tokens (induction): `early_loss` / `late_loss` on the first /
  second copy (each without its unpredictable first token) and `icl` = late - early.

Every task also names reference prompts disjoint from the evaluated ones (`reference_batches`),
the inputs of mean ablation (see means.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from interp.errors import InvalidInputError
from interp.models.model import pad_left

PROMPT_METRICS = ("logit_diff", "logprob", "loss")


class Task:
    """Base class: `metrics` (the first is the primary one), `n`, `evaluate`, `reference_batches`."""

    metrics: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        raise NotImplementedError

    @property
    def sample_ids(self) -> list[str]:
        return [str(i) for i in range(self.n)]

    def evaluate(self, model, interventions: Sequence = (), batch_size: int = 8,
                 progress: Callable[[int], None] | None = None) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def reference_batches(self, model) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(ids, mask) batches of prompts disjoint from the evaluated ones (for mean ablation)."""
        raise InvalidInputError(f"{type(self).__name__} has no reference prompts for mean ablation; use mode zero")

    def describe(self) -> dict:
        return {"task": type(self).__name__, "metrics": list(self.metrics), "n": self.n}


# ---- NIAH: greedy decoding ------------------------------------------------------------------
@dataclass
class NiahOutcome:
    id: str
    continuation: str
    generated_ids: list[int]
    recall: bool
    exact_prefix: bool

    def to_dict(self) -> dict:
        return asdict(self)


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped by length (little padding), chunked to batch_size, in first-seen order."""
    by_len: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        by_len.setdefault(n, []).append(i)
    out = []
    for idx in by_len.values():
        out += [idx[k:k + batch_size] for k in range(0, len(idx), batch_size)]
    return out


def _units_key(interventions, items, **extra) -> str:
    """What a sweep's units compute (interventions, prompts, options), as text: unit files of other work are
    never read back."""
    import json

    from interp.runtime.distributed import fingerprint

    prompts = fingerprint([getattr(it, "input_ids", None) or getattr(it, "ids", []) for it in items])
    return json.dumps({"interventions": [iv.describe() for iv in interventions], "prompts": prompts, **extra},
                      sort_keys=True, default=str)


def run_niah(model, samples, interventions: Sequence = (), decode_only: bool = False, batch_size: int = 8,
             recorder=None, max_new_tokens: int | None = None,
             progress: Callable[[int], None] | None = None) -> list[NiahOutcome]:
    """Greedy-decode every sample; `interventions` apply to prefill and decode, or decode only.

    `recorder` (optional) is an intervention with begin_batch(samples, ids, mask) and
    end_batch(generated) that observes the decode (e.g. the retrieval-score recorder), and
    export_batch() / import_batch(state): a batch's observations taken out as plain data and put back
    in batch order (each batch is a sweep unit: it may run on another rank or come from a unit file).
    """
    from interp.runtime.distributed import map_units
    from interp.tasks.niah import score_answer

    tok = model.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    batches = length_batches([s.context_length for s in samples], batch_size)

    def unit(j: int) -> dict:  # one batch: a sweep unit (sharded over ranks, kept for resume)
        group = [samples[i] for i in batches[j]]
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
        state = None
        if recorder is not None:
            recorder.end_batch(gen)
            state = recorder.export_batch()
        if progress is not None:
            progress(len(group))
        return {"generated": gen.tolist(), "recorder": state}

    results = map_units("niah", len(batches), unit, key=_units_key(interventions, samples, decode_only=decode_only,
                                                                    recorder=type(recorder).__name__,
                                                                    max_new_tokens=max_new_tokens),
                        progress=progress, sizes=[len(b) for b in batches])
    outcomes: list[NiahOutcome | None] = [None] * len(samples)
    for idx, r in zip(batches, results):
        if recorder is not None:
            recorder.import_batch(r["recorder"])
        for i, row in zip(idx, r["generated"]):
            text = tok.decode(row, skip_special_tokens=True)
            rec, pre = score_answer(text, samples[i].answer)
            outcomes[i] = NiahOutcome(samples[i].id, text, list(row), rec, pre)
    return outcomes  # type: ignore[return-value]


def _check_decode_only(samples) -> None:
    """Masking during decoding only never touches the answer's first token (it comes from the unmasked
    prefill): with one-token answers the masked steps cannot change recall. Refused when every answer is
    one token; an InterpWarning when some are."""
    short = sum(len(s.answer_ids) <= 1 for s in samples)
    if short == len(samples):
        raise InvalidInputError("decode-only masking cannot change one-token answers (the first answer token "
                                "comes from the unmasked prefill), and every answer here is one token: mask "
                                "prefill and decoding (drop --decode-only), or use longer answers")
    if short:
        import warnings

        from interp.errors import InterpWarning

        warnings.warn(InterpWarning(f"{short} of {len(samples)} answers are one token: decode-only masking cannot "
                                    "change them (their token comes from the unmasked prefill)"), stacklevel=3)


class NiahTask(Task):
    """NIAH recall by greedy decoding: `recall` (answer in the continuation), `exact_prefix`."""

    metrics = ("recall", "exact_prefix")

    def __init__(self, samples, config=None, decode_only: bool = False):
        from interp.tasks.niah import NiahConfig

        self.samples = list(samples)
        if not self.samples:
            raise InvalidInputError("the NIAH task has no prompts")
        self.config = config or NiahConfig()
        self.decode_only = decode_only
        if decode_only:
            _check_decode_only(self.samples)

    @classmethod
    def build(cls, tokenizer, config, decode_only: bool = False) -> "NiahTask":
        from interp.tasks.niah import build_niah

        return cls(build_niah(tokenizer, config), config, decode_only)

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def sample_ids(self) -> list[str]:
        return [s.id for s in self.samples]

    def evaluate(self, model, interventions=(), batch_size=8, progress=None):
        outs = run_niah(model, self.samples, interventions=interventions, decode_only=self.decode_only,
                        batch_size=batch_size, max_new_tokens=self.config.max_new_tokens, progress=progress)
        return {"recall": np.array([o.recall for o in outs], dtype=float),
                "exact_prefix": np.array([o.exact_prefix for o in outs], dtype=float)}

    def reference_batches(self, model):
        """4 prompts at the first length, depth 0.5, seeds 100000 past the evaluated ones."""
        from interp.tasks.niah import NiahConfig, build_niah

        c = self.config
        ref_cfg = NiahConfig(context_lengths=c.context_lengths[:1], depths=(0.5,), n_seeds=4,
                             first_seed=c.first_seed + 100_000, haystack_file=c.haystack_file,
                             needles_file=c.needles_file, separator=c.separator,
                             needle_source=c.needle_source)
        self.reference_note = (f"mean head outputs over {ref_cfg.n_seeds} NIAH prompts of seeds {list(ref_cfg.seeds)} "
                               "(disjoint from the evaluated seeds)")
        b = model.pad([s.input_ids for s in build_niah(model.tokenizer, ref_cfg)])
        return [(b.input_ids, b.attention_mask)]

    def inputs(self, k: int | None = None) -> list[list[int]]:
        return [s.input_ids for s in self.samples[:k]]

    def describe(self):
        return {**super().describe(), "scoring": "greedy decoding; recall = the answer appears in the continuation",
                "scope": "decode steps only (prefill unmasked)" if self.decode_only else
                "prefill and every decode step"}


# ---- teacher-forced prompts ---------------------------------------------------------------
@dataclass
class PromptItem:
    """One teacher-forced prompt: `ids` (prompt tokens), optional answer / wrong-answer tokens."""

    ids: list[int]
    answer_ids: list[int] | None = None
    wrong_ids: list[int] | None = None
    text: str | None = None
    answer: str | None = None
    wrong: str | None = None
    source: str = ""  # "file:line" for error messages


class PromptTask(Task):
    """Teacher-forced prompts scored on the logits by `metric` (see the module docstring)."""

    def __init__(self, items: Sequence[PromptItem], metric: str | Callable = "logit_diff",
                 reference: Sequence[PromptItem] | None = None, name: str = "prompts"):
        self.items = list(items)
        if not self.items:
            raise InvalidInputError("the prompt task has no prompts")
        self.metric = metric
        self.reference = list(reference) if reference else None
        self.name = name
        if isinstance(metric, str):
            if metric not in PROMPT_METRICS:
                raise InvalidInputError(f"unknown metric {metric!r}; valid metrics: {', '.join(PROMPT_METRICS)} "
                                        "(or a callable on logits from Python)")
            self.metrics = (metric,)
            for it in self.items:
                _check_item(it, metric)
        elif callable(metric):
            self.metrics = (getattr(metric, "__name__", "metric"),)
        else:
            raise InvalidInputError(f"metric must be one of {', '.join(PROMPT_METRICS)} or a callable")

    @property
    def n(self) -> int:
        return len(self.items)

    @property
    def sample_ids(self) -> list[str]:
        return [it.source or str(i) for i, it in enumerate(self.items)]

    def _sequences(self) -> list[list[int]]:
        """What is fed: prompt + answer[:-1] for multi-token logprob/loss, else the prompt."""
        if self.metric in ("logprob", "loss"):
            return [it.ids + (it.answer_ids or [])[:-1] if it.answer_ids else it.ids for it in self.items]
        return [it.ids for it in self.items]

    def evaluate(self, model, interventions=(), batch_size=8, progress=None):
        from interp.runtime.distributed import map_units

        seqs = self._sequences()
        batches = length_batches([len(s) for s in seqs], batch_size)

        def unit(j: int) -> np.ndarray:  # one batch: a sweep unit (sharded over ranks, kept for resume)
            idx = batches[j]
            b = model.pad([seqs[i] for i in idx])
            with model.intervene(*interventions):
                logits = model.forward(b).float()
            v = self._score(logits, b.attention_mask, [self.items[i] for i in idx])
            if progress is not None:
                progress(len(idx))
            return np.asarray(v, dtype=float)

        key = _units_key(interventions, [PromptItem(ids=list(x)) for x in seqs], metric=self.metrics[0],
                         answers=[(it.answer_ids, it.wrong_ids) for it in self.items])
        out = np.zeros(len(seqs))
        for idx, v in zip(batches, map_units("prompts", len(batches), unit, key, progress,
                                             sizes=[len(b) for b in batches])):
            out[idx] = v
        return {self.metrics[0]: out}

    def _score(self, logits: torch.Tensor, mask: torch.Tensor, items: list[PromptItem]) -> np.ndarray:
        if callable(self.metric):
            v = np.asarray(torch.as_tensor(self.metric(logits, items)).detach().cpu().float(), dtype=float)
            if v.shape != (len(items),):
                raise InvalidInputError(f"the metric callable must return one number per prompt ({len(items)}), "
                                        f"got shape {v.shape}")
            return v
        if self.metric == "logit_diff":
            last = logits[:, -1]
            a = torch.tensor([it.answer_ids[0] for it in items], device=last.device)
            w = torch.tensor([it.wrong_ids[0] for it in items], device=last.device)
            return (last.gather(1, a[:, None]) - last.gather(1, w[:, None]))[:, 0].cpu().numpy().astype(float)
        lp = torch.log_softmax(logits, -1)
        seq = logits.shape[1]
        res = []
        for r, it in enumerate(items):
            if it.answer_ids:  # the answer tokens are predicted at the last len(answer) positions
                k = len(it.answer_ids)
                pos = torch.arange(seq - k, seq, device=lp.device)
                tgt = torch.tensor(it.answer_ids, device=lp.device)
            else:  # the whole prompt: token t+1 predicted at t, over real tokens
                n_real = int(mask[r].sum())
                pos = torch.arange(seq - n_real, seq - 1, device=lp.device)
                tgt = torch.tensor(it.ids[1:], device=lp.device)
            v = lp[r, pos, tgt]
            res.append(float(v.sum()) if self.metric == "logprob" else float(-v.mean()))
        return np.array(res)

    def reference_batches(self, model):
        if not self.reference:
            raise InvalidInputError("mean ablation on user prompts needs reference prompts disjoint from the "
                                    "evaluated ones (pass reference=...), or use mode zero")
        self.reference_note = f"mean head outputs over {len(self.reference)} reference prompts"
        b = model.pad([it.ids for it in self.reference])
        return [(b.input_ids, b.attention_mask)]

    def inputs(self, k: int | None = None) -> list[list[int]]:
        return [it.ids for it in self.items[:k]]

    def describe(self):
        sem = {"logit_diff": "logit(answer) - logit(wrong) at the last prompt token",
               "logprob": "sum of log p(answer tokens), teacher-forced",
               "loss": "mean next-token loss over the answer tokens (or the whole prompt without an answer)"}
        return {**super().describe(), "name": self.name,
                "scoring": sem.get(self.metric, "user callable on logits") if isinstance(self.metric, str)
                else "user callable on logits"}


def token_split(tokenizer, ids) -> str:
    """"this model's tokenizer (NAME): ['▁Par', 'is']": how a tokenizer splits an answer, for error messages."""
    if tokenizer is None:
        return "this model's tokenizer"
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    try:
        pieces = tokenizer.convert_ids_to_tokens(list(ids))
    except Exception:
        pieces = list(ids)
    return f"this model's tokenizer ({name}): {pieces}"


def _check_item(it: PromptItem, metric: str, tokenizer=None) -> None:
    where = f"{it.source}: " if it.source else ""
    if metric == "logit_diff":
        for field, ids in (("answer", it.answer_ids), ("wrong", it.wrong_ids)):
            if not ids:
                raise InvalidInputError(f"{where}metric logit_diff needs a non-empty {field!r} field")
            if len(ids) != 1:
                raise InvalidInputError(f"{where}{field} {getattr(it, field)!r} is {len(ids)} tokens for "
                                        f"{token_split(tokenizer, ids)}; logit_diff compares one answer token with "
                                        "one wrong token: give one-token answers, or use --metric logprob (the "
                                        "log-probability of every answer token)")
    if metric == "logprob" and not it.answer_ids:
        raise InvalidInputError(f"{where}metric logprob needs a non-empty 'answer' field")
    if metric == "loss" and not it.answer_ids and len(it.ids) < 2:
        raise InvalidInputError(f"{where}metric loss without an answer needs a prompt of >= 2 tokens")


def _encode(tok, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


def read_prompts(path: str | Path, tokenizer, metric: str = "logit_diff") -> list[PromptItem]:
    """JSONL `{"prompt": ..., "answer": " Paris", "wrong": " Rome"}` per line (answer/wrong as the metric
    needs) -> PromptItems. The prompt gets the tokenizer's BOS when it adds one; errors name the line."""
    from interp.tasks.jsonl import jsonl_records
    from interp.tasks.niah import bos_prefix

    if tokenizer is None:
        raise InvalidInputError("prompt files need a tokenizer: this model was loaded without one")
    bos = bos_prefix(tokenizer)
    items = []
    for where, obj in jsonl_records(path, "prompts file"):
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str) or not obj["prompt"]:
            raise InvalidInputError(f'{where}: needs a non-empty string field "prompt" '
                                    '(e.g. {"prompt": "The capital of France is", "answer": " Paris", '
                                    '"wrong": " Rome"})')
        for k in ("answer", "wrong"):
            if k in obj and not isinstance(obj[k], str):
                raise InvalidInputError(f"{where}: field {k!r} must be a string")
        ans, wrong = obj.get("answer"), obj.get("wrong")
        items.append(PromptItem(ids=bos + _encode(tokenizer, obj["prompt"]),
                                answer_ids=_encode(tokenizer, ans) if ans else None,
                                wrong_ids=_encode(tokenizer, wrong) if wrong else None,
                                text=obj["prompt"], answer=ans, wrong=wrong, source=where))
    if not items:
        raise InvalidInputError(f"prompts file {path} has no prompts")
    for it in items:
        _check_item(it, metric, tokenizer)
    return items


def text_items(texts_ids: Sequence[Sequence[int]], source: str = "text") -> list[PromptItem]:
    """Plain token sequences as PromptItems (for the `loss` metric over the whole text)."""
    return [PromptItem(ids=list(t), source=f"{source}[{i}]") for i, t in enumerate(texts_ids)]


# ---- repeated random tokens (induction) ---------------------------------------------------------
class RepeatedTask(Task):
    """Per-sequence first- and second-copy next-token loss on repeated random tokens."""

    metrics = ("late_loss", "early_loss", "icl")

    def __init__(self, batches, reference=None):
        self.batches = list(batches)
        self.reference = reference  # RepeatedBatches of disjoint seeds (mean ablation)

    @property
    def n(self) -> int:
        return sum(b.ids.shape[0] for b in self.batches)

    def per_token_nll(self, model, ids: torch.Tensor, batch_size: int, interventions=(), recorder=None):
        """Per-token next-token loss [n, s - 1] (float32, cpu); feeds `recorder` batch by batch."""
        out = []
        for start in range(0, ids.shape[0], batch_size):
            x = ids[start:start + batch_size].to(model.device)
            ivs = list(interventions)
            if recorder is not None:
                recorder.begin(x)
                ivs.append(recorder)
            with model.intervene(*ivs):
                logits = model.forward(x)
            if recorder is not None:
                recorder.end()
            lp = torch.log_softmax(logits[:, :-1].float(), -1)
            out.append(-lp.gather(-1, x[:, 1:, None])[..., 0].cpu())
        return torch.cat(out)

    @staticmethod
    def copy_losses(nll: torch.Tensor, batch) -> tuple[np.ndarray, np.ndarray]:
        """(early, late) per sequence: mean loss on copy-1 and copy-2 targets, each without its first token."""
        f0, f1 = batch.copy_span(0)
        s0, s1 = batch.copy_span(1)
        # nll[:, p - 1] is the loss of predicting the token at position p
        early = nll[:, f0:f1 - 1].mean(1)  # targets f0+1 .. f1-1
        late = nll[:, s0:s1 - 1].mean(1)  # targets s0+1 .. s1-1
        return early.numpy().astype(float), late.numpy().astype(float)

    def evaluate(self, model, interventions=(), batch_size=8, progress=None, recorder=None, per_length=None):
        early, late = [], []
        for b in self.batches:
            e, l_ = self.copy_losses(self.per_token_nll(model, b.ids, batch_size, interventions, recorder), b)
            early.append(e)
            late.append(l_)
            if per_length is not None:
                per_length.append((b, e, l_))
        early, late = np.concatenate(early), np.concatenate(late)
        if progress is not None:
            progress(self.n)
        return {"late_loss": late, "early_loss": early, "icl": late - early}

    def reference_batches(self, model):
        if not self.reference:
            raise InvalidInputError("mean ablation needs reference sequences (RepeatedTask(reference=...))")
        self.reference_note = f"mean head outputs over repeated sequences of seed {self.reference[0].seed} (disjoint)"
        return [(b.ids.to(model.device), torch.ones_like(b.ids).to(model.device)) for b in self.reference]

    def describe(self):
        return {**super().describe(), "scoring": "late_loss: mean next-token loss on the second copy (nats), "
                                                 "per sequence; early_loss: the first copy; icl = late - early"}
