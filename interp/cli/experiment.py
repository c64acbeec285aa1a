"""The steps every head experiment command shares (ablate, rope-zero, rope-profile) around the library's
(`analyses.grid`: --from read once, the NIAH grid inherited from a saved detection): --prompts as a task, the library's detect -> select step with
its progress bar and notes, and the detection and prompts written into the run folder."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from interp.cli.options import given, niah_config
from interp.cli.output import print_line, print_note, progress_bar
from interp.runtime.jsonio import dumps
from interp.cli.runs import final_path, write_result
from interp.analyses.grid import saved_detection
from interp.errors import InvalidInputError

__all__ = ["experiment_grid", "prepare_heads", "prompt_task", "saved_detection", "write_detection",
           "write_task_prompts"]


def write_detection(res, samples, model, out: Path, prompts_file: str = "prompts.jsonl"):
    """retrieval.json, its table and the prompts (figures and index.html come from them at the end)."""
    from interp.tasks.niah import write_prompts

    write_result(res, out, "retrieval")
    write_prompts(samples, model.tokenizer, out / prompts_file)


def experiment_grid(ctx, saved, prompts, lengths, depths, seeds, haystack, needles, separator, max_new_tokens):
    """The NIAH grid of a paired experiment (ablate, rope-zero) from its options: the library's
    (`analyses.grid.experiment_grid`: a saved detection's grid where not given, >= 2 prompts unless --prompts
    replaces NIAH), its notes printed."""
    from interp.analyses import grid

    niah = niah_config(lengths, depths, seeds, haystack, needles, separator, max_new_tokens)
    niah, notes = grid.experiment_grid(niah, saved, {k for k in grid.FLAGS if given(ctx, k)}, prompts is not None)
    for note in notes:
        print_line(note, "note")
    return niah


def prepare_heads(m, heads: str, niah, task, saved, threshold: float, batch_size: int, o: Path, seed: int,
                  n_heads=None, prompts: bool = True):
    """The library's detect -> select step (analyses.pipeline.prepare_experiment) with the CLI around it: the
    haystack note once the prompts are built, a progress bar while a retrieval detection runs, and that
    detection written into `o` (retrieval.json; its prompts as retrieval-prompts.jsonl when the experiment
    runs on other prompts)."""
    from interp.analyses.pipeline import prepare_experiment

    detecting = heads == "retrieval" and saved is None
    total = len(niah.context_lengths) * len(niah.depths) * niah.n_seeds if detecting and niah is not None else None
    prog, advance = progress_bar(total, "retrieval detection")  # shown only when a detection runs
    with prog:
        exp = prepare_experiment(m, heads, niah=niah, task=task, from_dir=saved, threshold=threshold, seed=seed,
                                 n_heads=n_heads, batch_size=batch_size, progress=advance,
                                 on_prompts=print_note, prompts=prompts)
    if exp.detected_now:
        sel = exp.selection
        prompts_file = "prompts.jsonl" if task is None else "retrieval-prompts.jsonl"
        write_detection(sel.detector_result, sel.detector_samples, m, o, prompts_file)
        sel.detection["file"] = str(final_path(o) / "retrieval.json")
        sel.detection["prompts_file"] = str(final_path(o) / prompts_file)
        names = [str(h) for h in sel.heads]
        print_line(f"detected {len(names)} retrieval heads (score > {threshold}) on this run's NIAH grid: "
                   f"{', '.join(names[:30])}{' ...' if len(names) > 30 else ''} (saved as retrieval.json; "
                   "--from DIR reuses a detection)")
    return exp


def prompt_task(m, prompts: Optional[str], metric: str):
    """The --prompts task, or None for NIAH."""
    from interp.experiments import PromptTask, read_prompts
    from interp.experiments.tasks import PROMPT_METRICS

    if prompts is None:
        if metric is not None:
            raise InvalidInputError(f"--metric {metric} applies to --prompts only; NIAH runs measure recall")
        return None
    metric = metric or "logit_diff"
    if metric not in PROMPT_METRICS:
        raise InvalidInputError(f"--metric {metric!r}: valid metrics are {', '.join(PROMPT_METRICS)}")
    return PromptTask(read_prompts(prompts, m.tokenizer, metric), metric, name=str(prompts))


def write_task_prompts(task, samples, m, path: Path) -> None:
    from interp.tasks.niah import write_prompts

    if task is None:
        write_prompts(samples, m.tokenizer, path)
        return
    with open(path, "w") as f:
        for it in task.items:
            f.write(dumps({"source": it.source, "prompt": it.text, "answer": it.answer, "wrong": it.wrong,
                                "input_ids": it.ids, "answer_ids": it.answer_ids, "wrong_ids": it.wrong_ids}) + "\n")
