"""`interp ablate`: mask heads (or keep / mask the top k of a ranking, --curve) against matched random heads."""

from __future__ import annotations

from typing import Optional

import typer

from interp.cli.ablate_print import _print_ablation, _print_curve
from interp.cli.experiment import experiment_grid, prepare_heads, prompt_task, saved_detection, write_task_prompts
from interp.cli.options import (BATCH, CSV, DEPTHS, DEVICE, DEVICE_MAP, DTYPE, HAYSTACK, HEADS_HELP, JSON, LENGTHS,
                                MAX_MEMORY, MAX_NEW, METRIC, MODEL, NEEDLES, OUT, OVERWRITE, PROMPTS, RANDOM_POOL, REVISION,
                                SEEDS, SEPARATOR, THRESHOLD, check_random_pool, given, load_options)
from interp.cli.output import progress_bar
from interp.cli.runs import open_run, write_result
from interp.errors import InvalidInputError


def ablate(ctx: typer.Context, model: Optional[str] = MODEL,
           heads: str = typer.Option("retrieval", "--heads", help=HEADS_HELP),
           mode: str = typer.Option("zero", "--mode", help="zero | mean | uniform (query zeroed, as Wu et al.) | window "
                                    "(the heads read only --sinks first tokens and the last --window keys)."),
           window: Optional[int] = typer.Option(None, "--window", help="With --mode window: recent keys each masked "
                                                "head keeps, the query included."),
           sinks: int = typer.Option(4, "--sinks", min=0, help="With --mode window: first tokens kept besides."),
           decode_only: bool = typer.Option(False, "--decode-only", help="Mask during decoding only, like the "
                                            "original (default: prefill and decode)."),
           draws: int = typer.Option(3, "--draws", min=0, help="Matched random-head draws."),
           random_pool: str = RANDOM_POOL,
           n_heads: Optional[int] = typer.Option(None, "--n-heads", min=1, help="With --heads random: how many heads."),
           curve: Optional[str] = typer.Option(None, "--curve", help="keep: mask every head but the top k by retrieval "
                                               "score; mask: mask the top k; at each --ks, against k random heads "
                                               "(head_curve.json) instead of one target set."),
           ks: str = typer.Option("1,2,4,8,16,32", "--ks", help="With --curve: the head counts k, comma-separated."),
           rank_by: str = typer.Option("retrieval", "--rank-by", help="With --curve: rank heads by retrieval score, "
                                       "attention-mass (lowest mass on sinks + recent keys first) or far-context "
                                       "necessity (a folder holding a streaming.json)."),
           from_dir: Optional[str] = typer.Option(None, "--from", help="Reuse retrieval.json from this directory."),
           seed: int = typer.Option(0, "--seed", help="Seed of the random draws and bootstrap."),
           lengths: str = LENGTHS, depths: str = DEPTHS, seeds: int = SEEDS, haystack: Optional[str] = HAYSTACK,
           needles: Optional[str] = NEEDLES, separator: str = SEPARATOR, max_new_tokens: Optional[int] = MAX_NEW,
           threshold: float = THRESHOLD, prompts: Optional[str] = PROMPTS, metric: str = METRIC,
           batch_size: int = BATCH, device: Optional[str] = DEVICE, revision: Optional[str] = REVISION, device_map: Optional[str] = DEVICE_MAP,
          max_memory: Optional[str] = MAX_MEMORY,
           model_dtype: Optional[str] = DTYPE, out: Optional[str] = OUT, overwrite: bool = OVERWRITE, as_json: bool = JSON,
           csv: bool = CSV):
    """Mask heads on NIAH (or your --prompts); compare with baseline and matched random heads (paired CIs,
    permutation tests, target vs pooled random)."""
    from interp.analyses.pipeline import ablate as run, head_curve
    from interp.hooks.window import HeadMasking

    HeadMasking(mode, window, sinks)  # a bad --mode / --window / --sinks fails before the model loads
    check_random_pool(random_pool)
    if n_heads is not None and heads != "random":
        raise InvalidInputError(f"--n-heads applies with --heads random only (how many random heads); --heads "
                                f"{heads} names its heads: drop --n-heads")
    if curve is None and given(ctx, "ks"):
        raise InvalidInputError("--ks applies with --curve only (the head counts of a curve): add --curve keep or "
                                "--curve mask, or drop --ks")
    k_list = _curve_ks(curve, ks, heads)
    _check_rank_by(ctx, curve, rank_by)
    load = load_options(model, device, model_dtype, revision, device_map, max_memory)
    saved = saved_detection(heads, from_dir)
    niah = experiment_grid(ctx, saved, prompts, lengths, depths, seeds, haystack, needles, separator, max_new_tokens)
    o, m = open_run("ablate", out, overwrite, load)
    task = prompt_task(m, prompts, metric)
    # the library resolves --batch-size (N or auto) for the detection and the experiment together
    exp = prepare_heads(m, heads, niah, task, saved, threshold, batch_size, o, seed, n_heads)
    if k_list is not None and decode_only:
        raise InvalidInputError("--decode-only applies to a single ablation, not to --curve")
    what = "ablation conditions" if k_list is None else f"{curve} curve conditions"
    prog, advance = progress_bar(None, what)  # the total: planned by the analysis
    with prog:
        if k_list is None:
            res = run(m, experiment=exp, mode=mode, window=window, sinks=sinks, decode_only=decode_only, draws=draws,
                      random_pool=random_pool, seed=seed, batch_size=exp.batch_size, progress=advance)
        else:
            res = head_curve(m, kind=curve, ks=k_list, mode=mode, window=window, sinks=sinks, rank_by=rank_by,
                             draws=draws, random_pool=random_pool, seed=seed, batch_size=exp.batch_size,
                             experiment=exp, progress=advance)
    write_result(res, o, "ablation" if k_list is None else "head_curve", as_json, csv)
    write_task_prompts(task, exp.samples, m, o / "prompts.jsonl")
    if not (as_json or csv):
        (_print_ablation if k_list is None else _print_curve)(res, o)


def _check_rank_by(ctx, curve: Optional[str], rank_by: str) -> None:
    """--rank-by checked before the model loads."""
    from pathlib import Path

    from interp.analyses.pipeline import RANKINGS

    if curve is None and given(ctx, "rank_by"):
        raise InvalidInputError("--rank-by applies with --curve only (the ranking of a curve): add --curve keep or "
                                "--curve mask, or drop --rank-by")
    if rank_by not in RANKINGS and not (Path(rank_by) / "streaming.json").is_file():
        raise InvalidInputError(f"--rank-by {rank_by!r}: use retrieval, attention-mass or a folder holding a "
                                "streaming.json (written by `interp detect streaming`)")


def _curve_ks(curve: Optional[str], ks: str, heads: str) -> list[int] | None:
    """--ks as ints when --curve is given (checked before the model loads); None without --curve."""
    from interp.analyses.head_curve import KINDS

    if curve is None:
        return None
    if curve not in KINDS:
        raise InvalidInputError(f"--curve {curve!r}: use keep (mask every head but the top k) or mask (the top k)")
    if heads != "retrieval":
        raise InvalidInputError(f"--curve ranks every head by its retrieval score: use --heads retrieval, not {heads!r}")
    try:
        out = [int(k) for k in ks.split(",") if k.strip()]
    except ValueError:
        raise InvalidInputError(f"--ks {ks!r}: give head counts, e.g. 1,2,4,8") from None
    if not out:
        raise InvalidInputError("--ks is empty: give head counts, e.g. 1,2,4,8")
    return out
