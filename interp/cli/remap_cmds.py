"""`interp rope-remap`: heads see RoPE at remapped positions, against matched random heads remapped alike."""

from __future__ import annotations

from typing import Optional

import typer

from interp.cli.experiment import experiment_grid, prepare_heads, prompt_task, saved_detection, write_task_prompts
from interp.cli.options import (BATCH, CSV, DEPTHS, DEVICE, DEVICE_MAP, DTYPE, HAYSTACK, JSON, LENGTHS, MAX_MEMORY,
                                MAX_NEW, METRIC, MODEL, NEEDLES, OUT, OVERWRITE, PROMPTS, RANDOM_POOL, REVISION, SEEDS,
                                SEPARATOR, THRESHOLD, check_random_pool, load_options)
from interp.cli.output import progress_bar
from interp.cli.rope_cmds import FROM, HEADS
from interp.cli.runs import open_run, write_result


def rope_remap(ctx: typer.Context, model: Optional[str] = MODEL, heads: str = HEADS,
               scale: float = typer.Option(1.0, "--scale", min=0.0, help="RoPE positions of the heads' queries and "
                                           "keys times S: every query-key distance scaled by S (S < 1: position "
                                           "interpolation)."),
               offset: float = typer.Option(0.0, "--offset", help="The heads' query positions moved by D: every "
                                            "distance seen D larger."),
               bands: Optional[str] = typer.Option(None, "--bands", help="Move only these rotary pairs: lowest:N | "
                                                   "highest:N (default: every pair)."),
               draws: int = typer.Option(3, "--draws", min=0, help="Matched random-head draws."),
               random_pool: str = RANDOM_POOL, from_dir: Optional[str] = FROM, seed: int = typer.Option(0, "--seed"),
               lengths: str = LENGTHS, depths: str = DEPTHS, seeds: int = SEEDS, haystack: Optional[str] = HAYSTACK,
               needles: Optional[str] = NEEDLES, separator: str = SEPARATOR, max_new_tokens: Optional[int] = MAX_NEW,
               threshold: float = THRESHOLD, prompts: Optional[str] = PROMPTS, metric: str = METRIC,
               batch_size: int = BATCH, device: Optional[str] = DEVICE, revision: Optional[str] = REVISION,
               device_map: Optional[str] = DEVICE_MAP, max_memory: Optional[str] = MAX_MEMORY,
               model_dtype: Optional[str] = DTYPE, out: Optional[str] = OUT, overwrite: bool = OVERWRITE,
               as_json: bool = JSON, csv: bool = CSV):
    """Heads see RoPE at remapped positions (distances scaled by --scale, queries moved by --offset): NIAH recall
    (or your --prompts metric) against the baseline and matched random heads remapped alike."""
    from interp.analyses.pipeline import ablate as run
    from interp.cli.retrieval_cmds import _print_ablation
    from interp.hooks.window import HeadMasking
    from interp.models.rope import require_rope

    HeadMasking("remap", scale=scale, offset=offset, bands=bands)  # bad values fail before the model loads
    check_random_pool(random_pool)
    load = load_options(model, device, model_dtype, revision, device_map, max_memory)
    saved = saved_detection(heads, from_dir)
    niah = experiment_grid(ctx, saved, prompts, lengths, depths, seeds, haystack, needles, separator, max_new_tokens)
    o, m = open_run("rope-remap", out, overwrite, load)
    require_rope(m.spec)
    task = prompt_task(m, prompts, metric)
    exp = prepare_heads(m, heads, niah, task, saved, threshold, batch_size, o, seed)  # --batch-size N or auto
    prog, advance = progress_bar(None, "rope-remap conditions")
    with prog:
        res = run(m, experiment=exp, mode="remap", scale=scale, offset=offset, bands=bands, draws=draws, random_pool=random_pool,
                  seed=seed,
                  batch_size=batch_size, progress=advance)
    write_result(res, o, "ablation", as_json, csv)
    write_task_prompts(task, exp.samples, m, o / "prompts.jsonl")
    if not (as_json or csv):
        _print_ablation(res, o)
