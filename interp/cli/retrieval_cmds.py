"""`interp detect retrieval` and `interp ablate`."""

from __future__ import annotations

from typing import Optional

import typer

from interp.cli.budget import experiment_batch, niah_batch
from interp.cli.experiment import (experiment_grid, prepare_heads, prompt_task, saved_detection, write_detection,
                                   write_task_prompts)
from interp.cli.options import (BATCH, CSV, DEPTHS, DEVICE, DEVICE_MAP, DTYPE, HAYSTACK, HEADS_HELP, JSON, LENGTHS,
                                MAX_MEMORY, MAX_NEW, METRIC, MODEL, NEEDLES, OUT, OVERWRITE, PROMPTS, RANDOM_POOL, REVISION,
                                SEEDS, SEPARATOR, THRESHOLD, check_random_pool, given, niah_config)
from interp.cli.output import console, heads_cell, note_niah, progress_bar
from interp.runtime.jsonio import dumps
from interp.cli.runs import final_path, open_run, write_result
from interp.errors import InvalidInputError
from interp.tasks.niah import niah_for_model


def _detect(model, niah, threshold, all_samples, batch_size, sink, recent, score_norm="answer"):
    from interp.analyses.retrieval import RetrievalConfig, detect_retrieval_heads
    from interp.tasks.niah import build_niah

    cfg = RetrievalConfig(niah=niah, threshold=threshold, only_successful=not all_samples, batch_size=batch_size,
                          sink_tokens=sink, recent_window=recent, score_norm=score_norm)
    samples = build_niah(model.tokenizer, niah)
    note_niah(model, niah)
    prog, advance = progress_bar(len(samples), "retrieval scores")
    with prog:
        res = detect_retrieval_heads(model, cfg, samples=samples, progress=advance)
    return res, samples


def _print_detection(res, out):
    c = console()
    n_total = len(res.scores) * len(res.scores[0])
    niah = res.config.get("niah") or {}
    c.print(f"[bold]{res.model}[/]: baseline recall {res.baseline_recall:.2f} on {res.n_samples} prompts "
            f"(needles: {niah.get('needles', 'corpus')}, haystack: {niah.get('haystack', 'corpus')}); "
            f"scores averaged over {res.n_used}, normalised by the {res.config.get('score_norm', 'answer')} length")
    c.print(f"retrieval heads (score > {res.threshold}): {len(res.heads)} of {n_total} "
            f"({100 * len(res.heads) / n_total:.1f}%): {', '.join(res.heads[:20])}{' ...' if len(res.heads) > 20 else ''}")
    c.print("per layer: " + " ".join(f"L{l}:{n}" for l, n in enumerate(res.per_layer)))
    c.print("sweep: " + "  ".join(f">{s['threshold']}:{s['n_heads']}" for s in res.sweep))
    if res.by_length:
        c.print("by length: " + "  ".join(f"{b['length']}: {len(b['heads'])} heads, recall {b['recall']:.2f}"
                                          for b in res.by_length) + "; Jaccard of the head sets: "
                + "  ".join(f"{j['lengths'][0]}-{j['lengths'][1]} " + ("-" if j["jaccard"] is None else f"{j['jaccard']:.2f}")
                            for j in res.jaccard_by_length), highlight=False)
    c.print(f"written to {final_path(out)}/")


def detect_retrieval(model: Optional[str] = MODEL, lengths: str = LENGTHS, depths: str = DEPTHS, seeds: int = SEEDS,
                     haystack: Optional[str] = HAYSTACK, needles: Optional[str] = NEEDLES, separator: str = SEPARATOR,
                     max_new_tokens: Optional[int] = MAX_NEW, threshold: float = THRESHOLD,
                     all_samples: bool = typer.Option(False, "--all-samples", help="Average over every sample, not "
                                                      "only those answered correctly (the original's choice)."),
                     sinks: int = typer.Option(4, "--sinks", min=0, help="Streaming score: the first tokens counted "
                                              "as sinks (as ablate --mode window --sinks)."),
                     window: int = typer.Option(64, "--window", min=1, help="Streaming score: the recent keys counted, "
                                                "the query included (as ablate --mode window --window)."),
                     score_norm: str = typer.Option("answer", "--score-norm", help="A head's distinct copied needle "
                                                    "positions / the answer's tokens (answer) or / the needle's "
                                                    "tokens (needle: Wu et al.'s; with needles whose answer is the "
                                                    "whole needle it reproduces their scores)."),
                     batch_size: int = BATCH, device: Optional[str] = DEVICE, revision: Optional[str] = REVISION, device_map: Optional[str] = DEVICE_MAP,
          max_memory: Optional[str] = MAX_MEMORY, model_dtype: Optional[str] = DTYPE,
                     out: Optional[str] = OUT, overwrite: bool = OVERWRITE, as_json: bool = JSON):
    """Wu et al. retrieval scores per query head from NIAH decoding (plus a streaming score)."""
    from interp.analyses.retrieval import SCORE_NORMS

    if score_norm not in SCORE_NORMS:
        raise InvalidInputError(f"--score-norm {score_norm!r}: use answer (copied positions / answer tokens) or "
                                "needle (/ needle tokens, Wu et al.)")
    niah = niah_config(lengths, depths, seeds, haystack, needles, separator, max_new_tokens)
    o, m = open_run("retrieval", out, overwrite, model, device, model_dtype, revision, device_map, max_memory)
    niah = niah_for_model(m, niah)
    batch_size = niah_batch(m, batch_size, niah, "detect")
    res, samples = _detect(m, niah, threshold, all_samples, batch_size, sinks, window, score_norm)
    write_detection(res, samples, m, o)
    if as_json:
        typer.echo(dumps(res.to_dict()))
    else:
        _print_detection(res, o)


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
    from interp.analyses.pipeline import ablate as run
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
    saved = saved_detection(heads, from_dir)
    niah = experiment_grid(ctx, saved, prompts, lengths, depths, seeds, haystack, needles, separator, max_new_tokens)
    o, m = open_run("ablate", out, overwrite, model, device, model_dtype, revision, device_map, max_memory)
    task = prompt_task(m, prompts, metric)
    detecting = heads == "retrieval" and saved is None
    # the NIAH grid: the task without --prompts, and the prompts of a retrieval detection run now
    niah = niah_for_model(m, niah) if task is None or detecting else None
    batch_size = experiment_batch(m, batch_size, niah, task, detecting=detecting)
    exp = prepare_heads(m, heads, niah, task, saved, threshold, batch_size, o, seed, n_heads)
    if k_list is not None:
        from interp.analyses.pipeline import head_curve

        if decode_only:
            raise InvalidInputError("--decode-only applies to a single ablation, not to --curve")
        prog, advance = progress_bar(None, f"{curve} curve conditions")  # the total: planned by the analysis
        with prog:
            res = head_curve(m, kind=curve, ks=k_list, mode=mode, window=window, sinks=sinks, rank_by=rank_by,
                             draws=draws, random_pool=random_pool, seed=seed,
                             batch_size=batch_size, experiment=exp, progress=advance)
        write_result(res, o, "head_curve", as_json, csv)
        write_task_prompts(task, exp.samples, m, o / "prompts.jsonl")
        if not (as_json or csv):
            _print_curve(res, o)
        return
    prog, advance = progress_bar(None, "ablation conditions")  # the total: planned by the analysis
    with prog:
        res = run(m, experiment=exp, mode=mode, window=window, sinks=sinks, decode_only=decode_only, draws=draws, random_pool=random_pool,
                  seed=seed, batch_size=batch_size, progress=advance)
    write_result(res, o, "ablation", as_json, csv)
    write_task_prompts(task, exp.samples, m, o / "prompts.jsonl")
    if not (as_json or csv):
        _print_ablation(res, o)


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


def _print_curve(res, out) -> None:
    from rich.table import Table

    from interp.cli.output import print_tests
    from interp.figures.text import adjusted, p_cell

    done = "windowed" if res.mode == "window" else "masked"
    what = f"every head {done} but the top k" if res.kind == "keep" else f"the top k heads {done}"
    t = Table(title=f"{res.model}: {what} ({res.mode}; ranked by {res.ranking_source}); baseline {res.metric} "
                    f"{res.baseline['mean']:.2f} [{res.baseline['lo']:.2f}, {res.baseline['hi']:.2f}]")
    kv = any(p.kv_kept for p in res.points)  # mode window: the KV memory each point keeps
    for col in ("k", "top-k heads", f"{res.metric}, top k [95% CI]", "k random heads [95% CI]",
                "top - random [95% CI]", "p (sign-flip)", "p (Holm)") + (("KV kept, top k / random",) if kv else ()):
        t.add_column(col)
    for p in res.points:
        e, r, d = p.target["metric"], (p.random_pooled or {}).get("metric"), p.target_vs_random
        kv_cell = () if not kv else (f"{p.kv_kept['target']:.1%} / " + ("-" if p.kv_kept["random_mean"] is None
                                                                        else f"{p.kv_kept['random_mean']:.1%}"),)
        t.add_row(str(p.k), heads_cell(p.heads), f"{e['mean']:.2f} [{e['lo']:.2f}, {e['hi']:.2f}]",
                  "-" if r is None else f"{r['mean']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]",
                  "-" if d is None else f"{d['diff']:+.2f} [{d['diff_lo']:+.2f}, {d['diff_hi']:+.2f}]",
                  p_cell(d), adjusted(d), *kv_cell)
    c = console()
    c.print(t)
    print_tests("head_curve", res.to_dict(), lines=False)
    r = res.reach
    if res.kind == "keep":
        c.print(f"{r['frac']:.0%} of baseline ({r['goal']:.2f}) reached keeping the top k = {_k(r['target_k'])} "
                f"(CI lower bound: k = {_k(r['target_k_ci'])}); keeping k random heads: k = {_k(r['random_k'])}",
                highlight=False)
    if res.kind == "keep" and r.get("kv_kept") is not None:
        ci = "not on these ks" if r.get("kv_kept_ci") is None else f"{r['kv_kept_ci']:.1%}"
        rnd = "not on these ks" if r.get("kv_kept_random") is None else f"{r['kv_kept_random']:.1%}"
        c.print(f"KV memory kept there: {r['kv_kept']:.1%} of the full cache (at the CI lower bound's k: {ci}; "
                f"random heads: {rnd})", highlight=False)
    c.print(f"top k and random k first differ (95% CI excludes 0) at k = {_k(r['separated_k'])}", highlight=False)
    c.print(f"written to {final_path(out)}/")


def _k(k) -> str:
    return "not on these ks" if k is None else str(k)


def _print_ablation(res, out):
    import numpy as np
    from interp.cli.output import console, print_tests
    from interp.figures.text import adjusted, effect, p_cell
    from rich.table import Table

    t = Table(title=f"{res.model}: {res.mode} ablation of {len(res.heads)} heads ({res.heads_source}), {res.scope}")
    for col in ("condition", "heads", f"{res.metric} [95% CI]", "diff vs baseline [95% CI]", "p (sign-flip)",
                "p (Holm)", "d_z", "writes (x median head)"):
        t.add_column(col)
    rows = res.conditions + ([res.random_pooled] if res.random_pooled else [])
    for c in rows:
        r = c.estimates[res.metric]
        v = (c.vs_baseline or {}).get(res.metric)
        t.add_row(c.name, heads_cell(c.heads), f"{r['mean']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]",
                  "-" if v is None else f"{v['diff']:+.2f} [{v['diff_lo']:+.2f}, {v['diff_hi']:+.2f}]",
                  p_cell(v), adjusted(v), "-" if v is None else effect(v["cohens_d"]),
                  "-" if c.head_write_rel is None else f"{c.head_write_rel:.2f}")
    c = console()
    c.print(t)
    print_tests("ablation", res.to_dict())
    target = next((x for x in res.conditions if x.name == "target"), None)
    rnd = [x.head_write_rel for x in res.conditions if x.name.startswith("random-") and x.head_write_rel is not None]
    if target is not None and target.head_write_rel and rnd and np.mean(rnd) < 0.5 * target.head_write_rel:
        c.print(f"note: the random control heads write {target.head_write_rel / np.mean(rnd):.1f}x less into the "
                "residual stream than the target heads (ablation.json head_write_norm); masking heads that "
                "write little is a weak control")
    c.print(f"written to {final_path(out)}/")
