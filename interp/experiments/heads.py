"""Which heads an experiment targets (`--heads retrieval|induction|random|FILE|L3H1,...`), and how much
every head writes into the residual stream (so weak controls are visible)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import InvalidInputError
from ..types import HeadId, as_heads

HEAD_SOURCES = ("retrieval", "induction", "random")


@dataclass
class HeadSelection:
    heads: tuple[HeadId, ...]
    source: str  # e.g. "retrieval (detected, threshold 0.1)", "explicit", "file heads.txt"
    detection: dict | None = None  # summary of the detection behind the heads, for the result JSON
    detector_result: Any = None  # the RetrievalResult / InductionResult when detected now
    detector_samples: Any = None  # the NIAH samples of a retrieval detection run now


def _check_bounds(heads, spec) -> None:
    for h in heads:
        if not (0 <= h.layer < spec.n_layers and 0 <= h.head < spec.n_heads):
            raise InvalidInputError(f"head {h} is outside the model: layers 0..{spec.n_layers - 1}, "
                                    f"query heads 0..{spec.n_heads - 1}")


def _from_file(p: Path) -> tuple[tuple[HeadId, ...], str]:
    from ..tasks.jsonl import read_user_text

    text = read_user_text(p, "--heads file")
    if p.suffix == ".json":
        try:
            d = json.loads(text)
            heads = d["heads"] if "heads" in d else d["induction_heads"]
            return as_heads(heads), f"file {p}"
        except (KeyError, json.JSONDecodeError, TypeError):
            raise InvalidInputError(f"{p} is not a retrieval.json or induction.json (needs a 'heads' or "
                                    "'induction_heads' list)") from None
    return as_heads(text.replace("\n", ",").replace(" ", ",")), f"file {p}"


def _saved(from_dir: str, name: str, key: str, model) -> tuple[dict, Path]:
    f = Path(from_dir) / name
    if not f.is_file():
        raise InvalidInputError(f"--from {from_dir}: no {name} there; run `interp detect "
                                f"{name.split('.')[0]}` first")
    from ..tasks.jsonl import read_user_text

    text = read_user_text(f, "--from file")
    try:
        d = json.loads(text)
        heads = d[key]
        if not isinstance(heads, list):
            raise TypeError
    except (json.JSONDecodeError, KeyError, TypeError):
        raise InvalidInputError(f"{f} is not a {name} written by interp (needs a {key!r} list)") from None
    if d.get("model") != model.name:
        raise InvalidInputError(f"{f} was computed on {d.get('model')!r}, not {model.name!r}")
    return {**d, key: heads}, f


def _score_norm(d: dict) -> str | None:
    """The score normalisation of a saved retrieval.json ("answer" before there was a choice)."""
    cfg = d.get("config")
    return cfg.get("score_norm", "answer") if isinstance(cfg, dict) else None


def resolve_heads(spec_text: str | Sequence, model, *, niah=None, threshold: float = 0.1, from_dir: str | None = None,
                  batch_size: int = 8, seed: int = 0, n_heads: int | None = None, induction=None,
                  progress=None) -> HeadSelection:
    """Turn a head specification into heads, with where they came from.

    "retrieval": the retrieval heads of `from_dir`/retrieval.json, or detected now on `niah`
    (a NiahConfig; default grid) with `threshold` (`progress(n)`: advanced per detection prompt).
    "induction": `from_dir`/induction.json's
    induction heads, or detected now (`induction`: an InductionConfig; default: the default
    repeated-token task, without its causal check). "random": `n_heads` heads
    (default a tenth of all) drawn with `seed`. A path: a text file of ids or a result JSON.
    Anything else: ids such as "L3H1,L5H0" or a list of HeadId / (layer, head).
    """
    spec = model.spec
    if not isinstance(spec_text, str):
        heads = as_heads(spec_text)
        _check_bounds(heads, spec)
        return HeadSelection(heads, "explicit")
    if spec_text == "retrieval":
        if from_dir:
            d, f = _saved(from_dir, "retrieval.json", "heads", model)
            return HeadSelection(as_heads(d["heads"]), f"retrieval (from {f})",
                                 {"from": str(f), "threshold": d.get("threshold"), "n_heads": len(d["heads"]),
                                  "score_norm": _score_norm(d)})
        from ..analyses.retrieval import RetrievalConfig, detect_retrieval_heads
        from ..tasks.niah import build_niah, resolve_niah

        niah = resolve_niah(model, niah)  # the default grid; the needles for this model
        samples = build_niah(model.tokenizer, niah)
        res = detect_retrieval_heads(model, RetrievalConfig(niah=niah, threshold=threshold, batch_size=batch_size),
                                     samples=samples, progress=progress)
        return HeadSelection(res.head_ids(), f"retrieval (detected, threshold {threshold})",
                             {"threshold": threshold, "n_heads": len(res.heads),
                              "baseline_recall": res.baseline_recall}, res, samples)
    if spec_text == "induction":
        if from_dir:
            d, f = _saved(from_dir, "induction.json", "induction_heads", model)
            return HeadSelection(as_heads(d["induction_heads"]), f"induction (from {f})",
                                 {"from": str(f), "n_heads": len(d["induction_heads"])})
        from ..analyses.induction import InductionConfig, detect_induction_heads

        cfg = induction or InductionConfig(seed=seed, batch_size=batch_size)
        cfg.causal = False
        res = detect_induction_heads(model, cfg)
        return HeadSelection(as_heads(res.induction_heads), f"induction (detected, score > {res.threshold})",
                             {"threshold": res.threshold, "n_heads": len(res.induction_heads)}, res)
    if spec_text == "random":
        total = spec.n_layers * spec.n_heads
        k = max(1, total // 10) if n_heads is None else n_heads
        if not 1 <= k <= total:
            raise InvalidInputError(f"--n-heads must be in 1..{total}")
        rng = random.Random(seed)
        heads = tuple(sorted(HeadId(*divmod(i, spec.n_heads)) for i in rng.sample(range(total), k)))
        return HeadSelection(heads, f"random ({k} heads, seed {seed})")
    p = Path(spec_text)
    try:
        is_file = len(spec_text) < 4096 and p.is_file()
    except OSError:  # a long head list is no file name
        is_file = False
    heads, source = _from_file(p) if is_file else (as_heads(spec_text, n_heads=spec.n_heads), "explicit")
    _check_bounds(heads, spec)  # fail before any decoding, with the model's bounds in the message
    return HeadSelection(heads, source)


@dataclass
class WriteNorms:
    """[layer][head] mean ||W_O,h z_h|| over the real tokens of the first prompts (see capture.head_write_norms)."""

    norms: np.ndarray
    n_prompts: int

    @property
    def median(self) -> float:
        return float(np.median(self.norms))

    def relative(self, heads: Sequence[HeadId]) -> float | None:
        """Mean write norm of `heads` relative to the model's median head (None for no heads)."""
        if not heads or self.median <= 0:
            return None
        return float(np.mean([self.norms[h.layer, h.head] for h in heads]) / self.median)

    def as_list(self) -> list:
        return [[round(float(v), 6) for v in row] for row in self.norms]


def write_norms(model, inputs: Sequence[Sequence[int]], batch_size: int = 8) -> WriteNorms:
    from ..hooks.capture import head_write_norms

    b = model.pad(list(inputs))
    return WriteNorms(head_write_norms(model, b, batch_size=batch_size).numpy(), len(inputs))


def control_write_strength(controls, writes: WriteNorms, min_rel: float = 0.5) -> dict:
    """How strong a set of random controls is: its head sets (distinct, in draw order), each set's mean write
    norm relative to the median head (`WriteNorms.relative`, the `head_write_rel` of `interp ablate`'s
    conditions) and how many reach `min_rel`. `controls` is a `Controls` (`random_head_controls`)."""
    rows = [{"heads": [str(h) for h in sorted(c.heads)], "head_write_rel": writes.relative(c.heads), "draws": 1}
            for c in controls.conditions]
    strong = [r for r in rows if r["head_write_rel"] is not None and r["head_write_rel"] >= min_rel]
    return {"pool": controls.pool, "n_draws": controls.requested or len(controls.conditions), "distinct_sets": len(rows),
            "strong_sets": len(strong), "min_rel": min_rel, "shortfall_by_layer": dict(controls.shortfall_by_layer),
            "median_write_norm": writes.median, "write_prompts": writes.n_prompts, "sets": rows}
