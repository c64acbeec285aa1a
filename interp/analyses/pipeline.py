"""The detect -> select -> experiment pipeline as one library call.

`prepare_experiment` turns a model, a head specification (`"retrieval"`, `"induction"`, `"random"`, a
file, `"L3H1,L5H0"`) and a task (the NIAH grid, or a `PromptTask`) into a `HeadExperiment`: the prompts,
built once, and the heads with where they came from (a saved detection, or one run now on the same
prompts). `ablate`, `rope_zero` and `head_curve` (keep or mask the top k heads by retrieval score) run the experiments on it; `interp ablate` / `interp rope-zero` and
notebooks call the same functions:

    import interp
    from interp.analyses import pipeline

    model = interp.load_model("tiny-llama")
    res = pipeline.ablate(model, "retrieval", niah=interp.NiahConfig(context_lengths=(512,), n_seeds=2))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from interp.analyses.heads import HeadSelection, SavedDetection, resolve_heads


@dataclass
class HeadExperiment:
    """What a head experiment runs on: `samples` (NIAH prompts, built once) or `task` (a PromptTask), and
    the heads (`selection`: heads, source, the detection's summary; the detector's result and prompts when
    it ran now)."""

    model_name: str
    niah: object | None  # the NiahConfig resolved for the model (None with a PromptTask)
    samples: list | None
    task: object | None
    selection: HeadSelection
    notes: list[str] = field(default_factory=list)
    batch_size: int | str = 8  # resolved for the model and this work (models.batching.experiment_batch)

    @property
    def heads(self):
        return self.selection.heads

    @property
    def source(self) -> str:
        return self.selection.source

    @property
    def detection(self) -> dict | None:
        return self.selection.detection

    @property
    def detected_now(self) -> bool:
        """A retrieval detection ran in this call (its result and prompts are `selection.detector_*`)."""
        return self.selection.detector_samples is not None

    @property
    def n_prompts(self) -> int:
        return len(self.samples) if self.task is None else self.task.n


def prepare_experiment(model, heads="retrieval", *, niah=None, task=None,
                       from_dir: str | SavedDetection | None = None, threshold: float = 0.1, seed: int = 0,
                       n_heads: int | None = None, batch_size: int | str = 8, progress: Callable[[int], None] | None = None,
                       on_prompts: Callable[[str | None], None] | None = None, prompts: bool = True) -> HeadExperiment:
    """The prompts and heads of an experiment, in the order that fails cheapest first.

    `niah` (a NiahConfig, default grid) is the task unless `task` (a PromptTask) is given; NIAH prompts are
    checked against the model (`tasks.niah.niah_for_model`) and built once: a retrieval detection run now
    (`heads="retrieval"` without `from_dir`) scores the same prompts. `on_prompts(note)` is called once
    they are built, with the haystack note or None (the CLI prints it there); `progress(n)` advances per detection prompt.
    `prompts=False`: the experiment brings its own inputs (rope-profile's corpus passages); NIAH prompts are
    built only for a detection run now. `batch_size`: N or "auto", resolved for the model and this work before
    anything runs (`models.batching.experiment_batch`: a batch fitting the detection and the experiment) and
    kept as the experiment's `batch_size`.
    """
    from interp.models.batching import experiment_batch, niah_batch
    from interp.tasks.niah import build_niah, fallback_note, niah_for_model

    samples, notes = None, []
    detecting = heads == "retrieval" and not from_dir
    if task is None and (prompts or detecting):
        niah = niah_for_model(model, niah)
        batch_size = (experiment_batch(model, batch_size, niah, task, detecting) if prompts
                      else niah_batch(model, batch_size, niah, "detect"))  # its own inputs: the caller sizes those
        samples = build_niah(model.tokenizer, niah)  # refused prompts fail before a detection
        note = fallback_note(model, niah)
        notes += [note] if note else []
        if on_prompts is not None:
            on_prompts(note)
    elif detecting:  # a PromptTask experiment whose heads are detected on NIAH (prompts built by the detector)
        niah = niah_for_model(model, niah)
        batch_size = experiment_batch(model, batch_size, niah, task, detecting)
    elif task is not None:  # a PromptTask with saved or given heads: no NIAH grid
        niah = None
        batch_size = experiment_batch(model, batch_size, None, task, False)
    sel = resolve_heads(heads, model, niah=niah, samples=samples if detecting else None, threshold=threshold,
                        from_dir=from_dir, batch_size=batch_size, seed=seed, n_heads=n_heads,
                        progress=progress if detecting else None)
    return HeadExperiment(model.name, niah, samples, task, sel, notes, batch_size)


def ablate(model, heads="retrieval", *, niah=None, task=None, from_dir=None, threshold: float = 0.1,
           mode: str = "zero", decode_only: bool = False, draws: int = 3, random_pool: str = "layer",
           seed: int = 0, batch_size: int | str = 8, experiment: HeadExperiment | None = None, progress=None,
           window: int | None = None, sinks: int = 4, scale: float = 1.0, offset: float = 0.0,
           bands: str | None = None):
    """Mask the selected heads against matched random heads (interp.analyses.ablation) on NIAH or `task`.
    `experiment`: a HeadExperiment prepared already (else `prepare_experiment` with these arguments). mode
    "remap": the heads see RoPE at remapped positions (`scale`, `offset`, `bands`; RemapPositions)."""
    from interp.analyses.ablation import AblationConfig, run_ablation

    exp = experiment or prepare_experiment(model, heads, niah=niah, task=task, from_dir=from_dir, threshold=threshold,
                                           seed=seed, batch_size=batch_size)
    batch_size = exp.batch_size if batch_size == "auto" else batch_size
    kw = {} if exp.niah is None else {"niah": exp.niah}
    cfg = AblationConfig(heads=tuple(exp.heads), mode=mode, decode_only=decode_only, draws=draws, seed=seed,
                         window=window, sinks=sinks, scale=scale, offset=offset, bands=bands, random_pool=random_pool, batch_size=batch_size, heads_source=exp.source, **kw)
    return run_ablation(model, cfg, samples=exp.samples, task=exp.task, detection=exp.detection, progress=progress)


def rope_zero(model, heads="retrieval", *, niah=None, task=None, from_dir=None, threshold: float = 0.1,
              band: str = "lowest", doses=(0, 4, 8, 16, 32), unit: str = "dims", side: str = "q",
              random_draws: int = 3, head_draws: int = 2, seed: int = 0, batch_size: int | str = 8,
              experiment: HeadExperiment | None = None, progress=None, random_dims: str = "outside",
              mode: str = "zero", phase_distance: float = 0.0):
    """Zero a RoPE frequency band in the selected heads: dose-response with dim, head and task controls
    (interp.analyses.rope_zero). `experiment` as in `ablate`; `random_dims`: outside (the target band) | any;
    `mode`: zero | phase (angle fixed at `phase_distance`) | content | magnitude (RopeZeroConfig)."""
    from interp.analyses.rope_zero import RopeZeroConfig, run_rope_zero

    exp = experiment or prepare_experiment(model, heads, niah=niah, task=task, from_dir=from_dir, threshold=threshold,
                                           seed=seed, batch_size=batch_size)
    batch_size = exp.batch_size if batch_size == "auto" else batch_size
    kw = {} if exp.niah is None else {"niah": exp.niah}
    cfg = RopeZeroConfig(heads=tuple(exp.heads), band=band, doses=tuple(doses), unit=unit, side=side,
                         random_draws=random_draws, head_draws=head_draws, seed=seed, batch_size=batch_size,
                         heads_source=exp.source, random_dims=random_dims, mode=mode,
                         phase_distance=phase_distance, **kw)
    return run_rope_zero(model, cfg, samples=exp.samples, task=exp.task, progress=progress)


RANKINGS = ("retrieval", "attention-mass")  # or a folder holding a streaming.json (far-context necessity)


def detection_ranking(exp: HeadExperiment, rank_by: str = "retrieval") -> tuple[tuple, str]:
    """(every head ranked best first, what ranked them). `rank_by`: "retrieval" (the experiment's retrieval
    detection: the one run now, or the saved retrieval.json it was read from), "attention-mass" (the same
    detection's attention mass on sinks + recent keys, lowest first: the heads that read far context most), or a
    folder holding a streaming.json of the same model (far-context necessity, highest first)."""
    import json
    from pathlib import Path

    from interp.analyses.head_curve import rank_heads
    from interp.errors import InvalidInputError

    if rank_by not in RANKINGS:
        f = Path(rank_by) / "streaming.json"
        if not f.is_file():
            raise InvalidInputError(f"--rank-by {rank_by!r}: use retrieval, attention-mass or a folder holding a "
                                    "streaming.json (`interp detect streaming`)")
        from interp.runtime.jsonio import read_json

        d = read_json(f, "--rank-by file", "rerun `interp detect streaming` into that folder")
        if d.get("model") != exp.model_name:
            raise InvalidInputError(f"{f} was computed on {d.get('model')!r}, not {exp.model_name!r}")
        try:
            grid = [[-1e9 if v is None else float(v) for v in row] for row in d["scores"]]
        except (KeyError, TypeError, ValueError):
            raise InvalidInputError(f"{f} is not a streaming.json written by interp (needs a 'scores' grid "
                                    "[layer][head]); rerun `interp detect streaming` into that folder") from None
        return rank_heads(grid), f"far-context necessity (from {f})"
    sel = exp.selection
    if sel.source.startswith("retrieval"):
        key = "scores" if rank_by == "retrieval" else "streaming"
        what = "retrieval score" if rank_by == "retrieval" else "attention mass on sinks + recent keys, lowest first"
        sign = 1.0 if rank_by == "retrieval" else -1.0
        if sel.detector_result is not None:
            grid, where = getattr(sel.detector_result, key), "detected on this run's NIAH grid"
        elif (sel.detection or {}).get("from"):
            f = sel.detection["from"]
            grid, where = json.loads(Path(f).read_text(encoding="utf-8"))[key], f"from {f}"
        else:
            grid = None
        if grid is not None:
            return rank_heads([[sign * v for v in row] for row in grid]), f"{what} ({where})"
    raise InvalidInputError("a head curve ranks every head by a retrieval detection: use --heads retrieval (detected "
                            "now, or --from DIR with a saved detection)")


def head_curve(model, heads="retrieval", *, kind: str = "keep", ks=(1, 2, 4, 8, 16), niah=None, task=None,
               from_dir=None, threshold: float = 0.1, mode: str = "zero", draws: int = 3, random_pool: str = "any",
               reach_frac: float = 0.95, seed: int = 0, batch_size: int | str = 8,
               experiment: HeadExperiment | None = None, progress=None, window: int | None = None, sinks: int = 4,
               rank_by: str = "retrieval"):
    """Keep only (kind="keep") or mask (kind="mask") the top k heads by a ranking (`rank_by`, see
    `detection_ranking`) at each k, against k random heads (interp.analyses.head_curve). `experiment` as in
    `ablate`."""
    from interp.analyses.head_curve import HeadCurveConfig, run_head_curve

    exp = experiment or prepare_experiment(model, heads, niah=niah, task=task, from_dir=from_dir, threshold=threshold,
                                           seed=seed, batch_size=batch_size)
    batch_size = exp.batch_size if batch_size == "auto" else batch_size
    ranked, source = detection_ranking(exp, rank_by)
    kw = {} if exp.niah is None else {"niah": exp.niah}
    cfg = HeadCurveConfig(ranked=ranked, ks=tuple(ks), kind=kind, mode=mode, draws=draws, random_pool=random_pool,
                          reach_frac=reach_frac, seed=seed, batch_size=batch_size, ranking_source=source,
                          window=window, sinks=sinks, **kw)
    return run_head_curve(model, cfg, samples=exp.samples, task=exp.task, progress=progress)
