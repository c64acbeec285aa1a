"""`interp rope-zero` and `interp rope-profile` (`interp rope-remap`: remap_cmds.py)."""

from __future__ import annotations

from typing import Optional

import typer

from interp.cli.experiment import experiment_grid, prepare_heads, prompt_task, saved_detection, write_task_prompts
from interp.cli.options import (BATCH, CSV, DEPTHS, DEVICE, DEVICE_MAP, DTYPE, HAYSTACK, HEADS_HELP, JSON, LENGTHS,
                                MAX_MEMORY, MAX_NEW, METRIC, MODEL, NEEDLES, OUT, OVERWRITE, PROMPTS, REVISION, SEEDS,
                                SEPARATOR, THRESHOLD, load_options, niah_config, parse_ints)
from interp.cli.output import console, progress_bar
from interp.cli.runs import final_path, open_run, write_result
from interp.errors import InvalidInputError
from interp.tasks.niah import niah_for_model

HEADS = typer.Option("retrieval", "--heads", help=HEADS_HELP)
FROM = typer.Option(None, "--from", help="Reuse retrieval.json from this directory.")


def rope_zero(ctx: typer.Context, model: Optional[str] = MODEL, heads: str = HEADS,
              band: str = typer.Option("lowest", "--band", help="lowest | highest | random | explicit pairs '0,3,5'."),
              dims: str = typer.Option("0,4,8,16,32", "--dims", help="Doses: dims zeroed per head (even numbers), "
                                       "comma-separated; with --unit pairs, pairs."),
              unit: str = typer.Option("dims", "--unit", help="dims | pairs"),
              side: str = typer.Option("q", "--side", help="q (head-specific) | k (hits the whole GQA group) | both"),
              mode: str = typer.Option("zero", "--mode", help="zero (content and phase) | phase (angle fixed at "
                                       "--phase-distance, content kept) | content (mean content, position kept) "
                                       "| magnitude (mean length, angle kept)."),
              phase_distance: float = typer.Option(0.0, "--phase-distance", help="With --mode phase: the "
                                                   "query-key distance every key is seen at in the band."),
              random_draws: int = typer.Option(3, "--random-draws", min=0, help="Random-dim draws per dose."),
              random_dims: str = typer.Option("outside", "--random-dims", help="Where random dims come from: "
                                              "outside (the pairs outside the target band at that dose) | any "
                                              "(every pair; draws that share pairs with the band are named)."),
              head_draws: int = typer.Option(2, "--head-draws", min=0, help="Matched non-target head sets."),
              from_dir: Optional[str] = FROM, seed: int = typer.Option(0, "--seed"),
              lengths: str = LENGTHS, depths: str = DEPTHS, seeds: int = SEEDS, haystack: Optional[str] = HAYSTACK,
              needles: Optional[str] = NEEDLES, separator: str = SEPARATOR, max_new_tokens: Optional[int] = MAX_NEW,
              threshold: float = THRESHOLD, prompts: Optional[str] = PROMPTS, metric: str = METRIC,
              batch_size: int = BATCH, device: Optional[str] = DEVICE, revision: Optional[str] = REVISION, device_map: Optional[str] = DEVICE_MAP,
          max_memory: Optional[str] = MAX_MEMORY,
              model_dtype: Optional[str] = DTYPE, out: Optional[str] = OUT, overwrite: bool = OVERWRITE,
              as_json: bool = JSON, csv: bool = CSV):
    """Zero a RoPE frequency band in heads (or fix its phase, or its content): dose-response of NIAH recall (or
    your --prompts metric) with dim, head and task controls."""
    from interp.analyses.pipeline import rope_zero as run
    from interp.analyses.rope_zero import RopeZeroConfig
    from interp.cli.rope_print import print_rope_zero
    from interp.hooks.interventions import ZERO_SIDES
    from interp.models.rope import n_pairs_of, require_rope

    if side not in ZERO_SIDES:
        raise InvalidInputError(f"--side {side!r}: valid sides are {', '.join(ZERO_SIDES)}")
    if random_dims not in ("outside", "any"):
        raise InvalidInputError(f"--random-dims {random_dims!r}: valid are outside, any")
    doses = parse_ints(dims, "--dims")
    RopeZeroConfig(heads=(), mode=mode, side=side, phase_distance=phase_distance)  # fails before the model loads
    if band not in ("lowest", "highest", "random"):
        parse_ints(band, "--band")
        raise InvalidInputError("explicit pair bands are available from the library (interp.models.rope.resolve_dims); "
                                "the CLI dose-response takes --band lowest|highest|random")
    load = load_options(model, device, model_dtype, revision, device_map, max_memory)
    saved = saved_detection(heads, from_dir)
    niah = experiment_grid(ctx, saved, prompts, lengths, depths, seeds, haystack, needles, separator, max_new_tokens)
    o, m = open_run("rope-zero", out, overwrite, load)
    rope = require_rope(m.spec)
    for d in doses:  # every dose is checked before any detection or decoding
        n_pairs_of(d, unit, rope)
    task = prompt_task(m, prompts, metric)
    exp = prepare_heads(m, heads, niah, task, saved, threshold, batch_size, o, seed)  # --batch-size N or auto
    prog, advance = progress_bar(None, "rope-zero conditions")  # the total: the conditions the analysis plans
    with prog:
        res = run(m, experiment=exp, band=band, doses=doses, unit=unit, side=side, random_draws=random_draws,
                  head_draws=head_draws, seed=seed, batch_size=exp.batch_size, progress=advance, random_dims=random_dims,
                  mode=mode, phase_distance=phase_distance)
    d = write_result(res, o, "rope_zero", as_json, csv)
    write_task_prompts(task, exp.samples, m, o / "prompts.jsonl")
    if not (as_json or csv):
        print_rope_zero(d, o)


def rope_profile(model: Optional[str] = MODEL, heads: str = HEADS, from_dir: Optional[str] = FROM,
                 statistic: str = typer.Option("qk_norm", "--statistic", help="q_norm | k_norm | qk_norm | low_share"),
                 n_texts: int = typer.Option(8, "--n-texts", min=1,
                                             help="Passages: of --haystack's text when given, else of interp's corpus."),
                 n_tokens: int = typer.Option(256, "--n-tokens", min=2, help="Tokens per passage."),
                 decompose: bool = typer.Option(False, "--decompose", help="Also split the heads' attention logit at "
                                                "the needle by rotary band, on NIAH prompts of --lengths/--depths."),
                 seed: int = typer.Option(0, "--seed"), lengths: str = LENGTHS, depths: str = DEPTHS,
                 seeds: int = SEEDS, haystack: Optional[str] = HAYSTACK, threshold: float = THRESHOLD,
                 batch_size: int = BATCH, device: Optional[str] = DEVICE, revision: Optional[str] = REVISION,
                 device_map: Optional[str] = DEVICE_MAP, max_memory: Optional[str] = MAX_MEMORY, model_dtype: Optional[str] = DTYPE, out: Optional[str] = OUT,
                 overwrite: bool = OVERWRITE, as_json: bool = JSON):
    """Per-head, per-frequency-pair share of the q.k logit magnitude; a q/k norm statistic, retrieval vs other heads."""
    from interp.analyses.rope_profile import STATISTICS, RopeProfileConfig, run_rope_profile
    from interp.cli.rope_print import print_decomposition, print_thetas
    from interp.models.rope import require_rope

    if statistic not in STATISTICS:
        raise InvalidInputError(f"--statistic {statistic!r}: valid are {', '.join(STATISTICS)}")
    saved = saved_detection(heads, from_dir)
    niah = niah_config(lengths, depths, seeds, haystack, None, "\\n", None)
    o, m = open_run("rope-profile", out, overwrite, load_options(model, device, model_dtype, revision, device_map,
                                                                 max_memory))
    require_rope(m.spec)
    detecting = heads == "retrieval" and saved is None
    if detecting:  # detected now, on NIAH: the needles for this model
        niah = niah_for_model(m, niah)
    from interp.models.batching import niah_batch, resolve_batch_size as resolve

    batch_size = min(niah_batch(m, batch_size, niah, "detect") if detecting else 1 << 30,
                     resolve(m, batch_size, "ablate", [n_tokens], n_texts, logits="all"))
    exp = prepare_heads(m, heads, niah if detecting else None, None, saved, threshold, batch_size, o, seed,
                        prompts=False)
    target, source = exp.heads, exp.source
    cfg = RopeProfileConfig(retrieval_heads=tuple(target), heads_source=source, n_texts=n_texts, n_tokens=n_tokens,
                            seed=seed, statistic=statistic, batch_size=batch_size, text=niah.haystack_file)
    needle = None
    if decompose:
        from interp.tasks.niah import build_niah, resolve_niah

        needle = build_niah(m.tokenizer, resolve_niah(m, niah if detecting else niah_for_model(m, niah)))
    res = run_rope_profile(m, cfg, needle_samples=needle)
    d = write_result(res, o, "rope_profile", as_json)
    if as_json:
        return
    c = console()
    if d["decomposition"]:
        print_decomposition(c, d["decomposition"])
    if d["comparisons"]:
        from interp.figures.text import effect, p_note, permutation_p

        notes = []
        for name, cmp_ in sorted(d["comparisons"].items(), key=lambda kv: kv[0] != d["statistic"]):
            p = cmp_["layer_clustered_permutation"]
            lo, hi = cmp_["cohens_d_ci"]
            c.print(f"{name}{' (chosen)' if name == d['statistic'] else ''}: retrieval {cmp_['mean_retrieval']:.3f} "
                    f"(n={cmp_['n_retrieval']}) vs other {cmp_['mean_other']:.3f} (n={cmp_['n_other']}); Cohen's d = "
                    f"{effect(cmp_['cohens_d'])} [{lo:.2f}, {hi:.2f}], {permutation_p(p)}", highlight=False)
            if p_note(p) and p_note(p) not in notes:
                notes.append(p_note(p))
        for n in notes:
            c.print(f"note: {n}", highlight=False)
    else:
        c.print("no comparison: every head or no head is labelled retrieval")
    if d["pair_freqs_by_theta"]:
        print_thetas(c, d["retrieval_heads_by_theta"], "retrieval heads")
    c.print(f"written to {final_path(o)}/")
