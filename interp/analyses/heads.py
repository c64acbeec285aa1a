"""Which heads an experiment targets: `--heads retrieval|induction|random|FILE|L3H1,...`, from a saved
detection (SavedDetection) or detected now by the detectors of this package."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from interp.errors import InvalidInputError
from interp.sites import HeadId, as_heads

HEAD_SOURCES = ("retrieval", "induction", "random")


@dataclass
class HeadSelection:
    heads: tuple[HeadId, ...]
    source: str  # e.g. "retrieval (detected, threshold 0.1)", "explicit", "file heads.txt"
    detection: dict | None = None  # summary of the detection behind the heads, for the result JSON
    detector_result: Any = None  # the RetrievalResult / InductionResult when detected now
    detector_samples: Any = None  # the NIAH samples of a retrieval detection run now


def _saved(from_dir, kind: str) -> SavedDetection:
    if isinstance(from_dir, SavedDetection):
        if from_dir.kind != kind:
            raise InvalidInputError(f"--heads {kind} with a saved {from_dir.kind} detection ({from_dir.path})")
        return from_dir
    return SavedDetection.read(from_dir, kind)


def _check_bounds(heads, spec) -> None:
    for h in heads:
        if not (0 <= h.layer < spec.n_layers and 0 <= h.head < spec.n_heads):
            raise InvalidInputError(f"head {h} is outside the model: layers 0..{spec.n_layers - 1}, "
                                    f"query heads 0..{spec.n_heads - 1}")


def _from_file(p: Path, model_name: str | None = None) -> tuple[tuple[HeadId, ...], str]:
    """The heads of a --heads file: ids (text), or a retrieval.json / induction.json, which must have been
    computed on `model_name` when it names its model (as `--from` requires: head ids mean nothing on another
    model)."""
    from interp.tasks.jsonl import read_user_text

    text = read_user_text(p, "--heads file")
    if p.suffix == ".json":
        try:
            d = json.loads(text)
            heads = d["heads"] if "heads" in d else d["induction_heads"]
            heads = as_heads(heads)
        except (KeyError, json.JSONDecodeError, TypeError, RecursionError):
            raise InvalidInputError(f"{p} is not a retrieval.json or induction.json (needs a 'heads' or "
                                    "'induction_heads' list)") from None
        made_on = d.get("model")
        if model_name is not None and made_on is not None and made_on != model_name:
            raise InvalidInputError(f"--heads {p} was computed on {made_on!r}, not {model_name!r}: its head ids "
                                    f"name heads of another model; detect on {model_name!r} or pass its model")
        return heads, f"file {p}"
    return as_heads(text.replace("\n", ",").replace(" ", ",")), f"file {p}"


_SAVED = {"retrieval": ("retrieval.json", "heads"), "induction": ("induction.json", "induction_heads")}


@dataclass
class SavedDetection:
    """A detection written by `interp detect` (or inside an experiment): DIR/retrieval.json or
    DIR/induction.json, read and checked once. `read` needs no model (a missing or broken file fails
    before one loads); `selection(model)` checks it was computed on that model."""

    kind: str  # "retrieval" | "induction"
    path: Path
    data: dict

    @classmethod
    def read(cls, from_dir: str | Path, kind: str) -> "SavedDetection":
        name, key = _SAVED[kind]
        f = Path(from_dir) / name
        if not f.is_file():
            raise InvalidInputError(f"--from {from_dir}: no {name} there; run `interp detect {kind}` first")
        from interp.tasks.jsonl import read_user_text

        text = read_user_text(f, "--from file")
        try:
            d = json.loads(text)
            if not isinstance(d[key], list):
                raise TypeError
        except (json.JSONDecodeError, KeyError, TypeError, RecursionError):
            raise InvalidInputError(f"{f} is not a {name} written by interp (needs a {key!r} list)") from None
        return cls(kind, f, d)

    @property
    def heads(self) -> list:
        return self.data[_SAVED[self.kind][1]]

    def niah_grid(self) -> dict | None:
        """A retrieval detection's NIAH grid {context_lengths, depths, n_seeds} (None if it has none)."""
        try:
            g = self.data["config"]["niah"]
            return {"context_lengths": [int(x) for x in g["context_lengths"]],
                    "depths": [float(x) for x in g["depths"]], "n_seeds": int(g["n_seeds"])}
        except (KeyError, TypeError, ValueError):
            return None

    def selection(self, model) -> "HeadSelection":
        if self.data.get("model") != model.name:
            raise InvalidInputError(f"{self.path} was computed on {self.data.get('model')!r}, not {model.name!r}")
        f, d = self.path, self.data
        if self.kind == "retrieval":
            cfg = d.get("config")
            norm = cfg.get("score_norm", "answer") if isinstance(cfg, dict) else None  # "answer" before a choice
            return HeadSelection(as_heads(self.heads), f"retrieval (from {f})",
                                 {"from": str(f), "threshold": d.get("threshold"), "n_heads": len(self.heads),
                                  "score_norm": norm})
        return HeadSelection(as_heads(self.heads), f"induction (from {f})", {"from": str(f), "n_heads": len(self.heads)})


def resolve_heads(spec_text: str | Sequence, model, *, niah=None, samples=None, threshold: float = 0.1,
                  from_dir: str | Path | SavedDetection | None = None, batch_size: int = 8, seed: int = 0,
                  n_heads: int | None = None, induction=None, progress=None) -> HeadSelection:
    """Turn a head specification into heads, with where they came from.

    "retrieval": the retrieval heads of `from_dir`/retrieval.json (or a SavedDetection read already), or
    detected now on `niah` (a NiahConfig; default grid; `samples`: its prompts, when built already) with
    `threshold` (`progress(n)`: advanced per detection prompt).
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
            return _saved(from_dir, "retrieval").selection(model)
        from interp.analyses.retrieval import RetrievalConfig, detect_retrieval_heads
        from interp.tasks.niah import build_niah, resolve_niah

        niah = resolve_niah(model, niah)  # the default grid; the needles for this model
        if samples is None:
            samples = build_niah(model.tokenizer, niah)
        res = detect_retrieval_heads(model, RetrievalConfig(niah=niah, threshold=threshold, batch_size=batch_size),
                                     samples=samples, progress=progress)
        return HeadSelection(res.head_ids(), f"retrieval (detected, threshold {threshold})",
                             {"threshold": threshold, "n_heads": len(res.heads),
                              "baseline_recall": res.baseline_recall}, res, samples)
    if spec_text == "induction":
        if from_dir:
            return _saved(from_dir, "induction").selection(model)
        from interp.analyses.induction import InductionConfig, detect_induction_heads

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
    heads, source = _from_file(p, model.name) if is_file else (as_heads(spec_text, n_heads=spec.n_heads), "explicit")
    _check_bounds(heads, spec)  # fail before any decoding, with the model's bounds in the message
    return HeadSelection(heads, source)
