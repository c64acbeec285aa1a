"""`interp detect retrieval` and `interp ablate`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import InvalidInputError
from .budget import experiment_batch, niah_batch
from .budget import option as batch_option
from .common import (dumps, final_path, finite, heads_cell, niah_config, niah_for_model, note_niah, out_dir,
                     progress_bar, write_result)



detect_app = typer.Typer(no_args_is_help=True, help="Detect head types.",
                         context_settings={"help_option_names": ["-h", "--help"]})

MODEL = typer.Option(None, "--model", "-m", help="Alias, checkpoint dir, .gguf file or Hub id (default: bundled "
                     "default model).")
LENGTHS = typer.Option("512", "--lengths", help="NIAH context lengths in tokens, comma-separated.")
DEPTHS = typer.Option("0,0.25,0.5,0.75,1", "--depths", help="Needle depths (fraction of the haystack before it).")
SEEDS = typer.Option(4, "--n-seeds", min=1, help="Paired seeds per (length, depth).")
HAYSTACK = typer.Option(None, "--haystack", help="Plain-text haystack: a file, or a directory of .txt files (sorted "
                        "by name, joined by blank lines). Default: interp's corpus generator (for models other than "
                        "the organisms an offline fallback; the run says so).")
NEEDLES = typer.Option(None, "--needles", help='corpus | standard | a JSONL file of {"needle", "question", "answer"} '
                       "per line. Default: corpus for the bundled organisms (what they were trained on), standard "
                       "(facts with multi-token answers, after Kamradt 2023) for every other model.")
SEPARATOR = typer.Option("\\n", "--separator", help="Inserted between haystack and question (with anything but the corpus "
                         "needles and haystack).")
MAX_NEW = typer.Option(None, "--max-new-tokens", min=1, help="Greedy tokens to decode (default: answer length + 2).")
BATCH = batch_option(8, "Prompts")
REVISION = typer.Option(None, "--revision", help="Hub revision (branch, tag or commit) of a Hub id or alias.")
DEVICE_MAP = typer.Option(None, "--device-map", help="Spread the model over devices with accelerate: auto | "
                          "balanced | balanced_low_0 | sequential (instead of --device; layers may go to CPU/disk).")
MAX_MEMORY = typer.Option(None, "--max-memory", help="Memory per device, e.g. 0=20GiB,1=20GiB,cpu=60GiB: with "
                          "--device-map accelerate's placement limits; the budget of --batch-size auto (a given "
                          "batch size is checked against it).")
DEVICE = typer.Option(None, "--device", help="cpu, cuda, cuda:1, ... (default: cuda if available).")
DTYPE = typer.Option(None, "--model-dtype", help="float32, bfloat16, float16 (default: float32 on CPU, bf16 on CUDA).")
OUT = typer.Option(None, "--out", "-o", help="Output directory (default: runs/<command>-<model>-<time>).")
JSON = typer.Option(False, "--json", help="Print the result JSON on stdout.")
OVERWRITE = typer.Option(False, "--overwrite", help="Replace the run already in --out (its files go; others stay).")
THRESHOLD = typer.Option(0.1, "--threshold", callback=finite, help="Retrieval-score threshold for a retrieval head.")


def open_run(command: str, out, overwrite: bool, name, device, dtype, revision=None, device_map=None,
             max_memory=None):
    """(run folder, model) of a command: the folder is made (staged) first, so a bad --out fails before the
    model loads."""
    from ..loading import load_model
    from .common import parse_max_memory

    from .budget import RUN

    o = out_dir(out, command, model_label(name), overwrite=overwrite)
    mm = parse_max_memory(max_memory)
    RUN.update(max_memory=mm, device_map=device_map)  # without a device map: --batch-size's budget only
    return o, load_model(model_label(name), device=device, dtype=dtype, revision=revision, device_map=device_map,
                         max_memory=mm if device_map is not None else None)


def model_label(name) -> str:
    """--model, or the default model's name (what the run folder and results are named after)."""
    from .app import _default_model

    return _model_name(name, _default_model)


def _model_name(name, default) -> str:
    """--model as given, the default when it is not given; an empty or blank name is an error."""
    if name is None:
        return default()
    if not name.strip():
        raise InvalidInputError("--model is empty; give an alias (see `interp models`), a directory or a Hub id")
    return name


def _detect(model, niah, threshold, all_samples, batch_size, sink, recent, score_norm="answer"):
    from ..analyses.retrieval import RetrievalConfig, detect_retrieval_heads
    from ..tasks.niah import build_niah

    cfg = RetrievalConfig(niah=niah, threshold=threshold, only_successful=not all_samples, batch_size=batch_size,
                          sink_tokens=sink, recent_window=recent, score_norm=score_norm)
    samples = build_niah(model.tokenizer, niah)
    note_niah(model, niah)
    prog, advance = progress_bar(len(samples), "retrieval scores")
    with prog:
        res = detect_retrieval_heads(model, cfg, samples=samples, progress=advance)
    return res, samples


def _write_detection(res, samples, model, out: Path):
    """retrieval.json, its table and the prompts (figures and index.html come from them at the end)."""
    from ..tasks.niah import write_prompts

    write_result(res, out, "retrieval")
    write_prompts(samples, model.tokenizer, out / "prompts.jsonl")


def _print_detection(res, out):
    from .common import console

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
    c.print(f"written to {final_path(out)}/")


@detect_app.command("retrieval")
def detect_retrieval(model: Optional[str] = MODEL, lengths: str = LENGTHS, depths: str = DEPTHS, seeds: int = SEEDS,
                     haystack: Optional[str] = HAYSTACK, needles: Optional[str] = NEEDLES, separator: str = SEPARATOR,
                     max_new_tokens: Optional[int] = MAX_NEW, threshold: float = THRESHOLD,
                     all_samples: bool = typer.Option(False, "--all-samples", help="Average over every sample, not "
                                                      "only those answered correctly (the original's choice)."),
                     sink: int = typer.Option(4, "--sink", min=0, help="Sink tokens for the streaming score."),
                     recent: int = typer.Option(64, "--recent", min=0, help="Recent window for the streaming score."),
                     score_norm: str = typer.Option("answer", "--score-norm", help="A head's distinct copied needle "
                                                    "positions / the answer's tokens (answer) or / the needle's "
                                                    "tokens (needle: Wu et al.'s; with needles whose answer is the "
                                                    "whole needle it reproduces their scores)."),
                     batch_size: int = BATCH, device: Optional[str] = DEVICE, revision: Optional[str] = REVISION, device_map: Optional[str] = DEVICE_MAP,
          max_memory: Optional[str] = MAX_MEMORY, model_dtype: Optional[str] = DTYPE,
                     out: Optional[str] = OUT, overwrite: bool = OVERWRITE, as_json: bool = JSON):
    """Wu et al. retrieval scores per query head from NIAH decoding (plus a streaming score)."""
    from ..analyses.retrieval import SCORE_NORMS

    if score_norm not in SCORE_NORMS:
        raise InvalidInputError(f"--score-norm {score_norm!r}: use answer (copied positions / answer tokens) or "
                                "needle (/ needle tokens, Wu et al.)")
    niah = niah_config(lengths, depths, seeds, haystack, needles, separator, max_new_tokens)
    o, m = open_run("retrieval", out, overwrite, model, device, model_dtype, revision, device_map, max_memory)
    niah = niah_for_model(m, niah)
    batch_size = niah_batch(m, batch_size, niah, "detect")
    res, samples = _detect(m, niah, threshold, all_samples, batch_size, sink, recent, score_norm)
    _write_detection(res, samples, m, o)
    if as_json:
        typer.echo(dumps(res.to_dict()))
    else:
        _print_detection(res, o)


def given(ctx, name: str) -> bool:
    """Whether the user passed option `name` (not its default)."""
    src = ctx.get_parameter_source(name) if ctx is not None else None
    return src is not None and src.name not in ("DEFAULT", "DEFAULT_MAP")


def inherit_grid(ctx, heads: str, from_dir, lengths: str, depths: str, seeds: int):
    """With --heads retrieval --from DIR, the NIAH grid options not given are the detection's own (from
    DIR/retrieval.json), and a note says so; the options given and differing from it are noted too.
    (lengths, depths, seeds) to use."""
    import json

    from .common import console

    if heads != "retrieval" or not from_dir:
        return lengths, depths, seeds
    try:
        g = json.loads((Path(from_dir) / "retrieval.json").read_text(encoding="utf-8"))["config"]["niah"]
        det = {"lengths": ",".join(map(str, g["context_lengths"])), "depths": ",".join(f"{d:g}" for d in g["depths"]),
               "seeds": int(g["n_seeds"])}
    except (OSError, ValueError, KeyError, TypeError):
        return lengths, depths, seeds  # resolve_heads reports a missing or broken retrieval.json
    now = {"lengths": lengths, "depths": depths, "seeds": seeds}
    flag = {"lengths": "--lengths", "depths": "--depths", "seeds": "--n-seeds"}
    taken = [k for k in now if not given(ctx, k)]
    for k in taken:
        now[k] = det[k]
    differ = [f"{flag[k]} {now[k]} (detected on {det[k]})" for k in now if k not in taken and str(now[k]) != str(det[k])]
    c = console()
    if taken:
        c.print(f"note: NIAH grid from {from_dir}/retrieval.json: " + ", ".join(f"{flag[k]} {now[k]}" for k in taken)
                + " (the detection's prompts: heads are selected and tested on the same seeds)", highlight=False,
                soft_wrap=True)
    if differ:
        c.print("note: not the detection's grid: " + "; ".join(differ), highlight=False, soft_wrap=True)
    return now["lengths"], now["depths"], now["seeds"]


def experiment_grid(ctx, heads, from_dir, prompts, lengths, depths, seeds, haystack, needles, separator,
                    max_new_tokens):
    """The NIAH grid of a paired experiment (ablate, rope-zero): the detection's own options where not given
    (inherit_grid), and >= 2 prompts unless --prompts replaces NIAH."""
    if prompts is None:
        lengths, depths, seeds = inherit_grid(ctx, heads, from_dir, lengths, depths, seeds)
    return niah_config(lengths, depths, seeds, haystack, needles, separator, max_new_tokens, paired=prompts is None)


def resolve_target_heads(heads: str, m, niah, threshold: float, from_dir, batch_size: int, o: Path, seed: int,
                         n_heads=None):
    """--heads through the library's resolve_heads; a retrieval detection run now is written into `o`."""
    from ..experiments import resolve_heads

    detecting = heads == "retrieval" and not from_dir
    total = len(niah.context_lengths) * len(niah.depths) * niah.n_seeds if detecting else None
    prog, advance = progress_bar(total, "retrieval detection")  # shown only when a detection runs
    with prog:
        sel = resolve_heads(heads, m, niah=niah, threshold=threshold, from_dir=from_dir, batch_size=batch_size,
                            seed=seed, n_heads=n_heads, progress=advance if detecting else None)
    if sel.detector_samples is not None:
        from .common import console

        _write_detection(sel.detector_result, sel.detector_samples, m, o)
        sel.detection["file"] = str(final_path(o) / "retrieval.json")
        names = [str(h) for h in sel.heads]
        console().print(
            f"detected {len(names)} retrieval heads (score > {threshold}) on this run's NIAH grid: "
            f"{', '.join(names[:30])}{' ...' if len(names) > 30 else ''} (saved as retrieval.json; "
            "--from DIR reuses a detection)", highlight=False, soft_wrap=True)
    return sel.heads, sel.source, sel.detection


HEADS_HELP = ("retrieval (detected now, or from --from DIR) | induction (likewise, induction.json) | random | "
              "L3H1,L5H0 | L2H* (every head of layer 2) | FILE (ids, a retrieval.json or an induction.json).")
PROMPTS = typer.Option(None, "--prompts", help='Teacher-forced prompts instead of NIAH: JSONL, one '
                       '{"prompt": ..., "answer": " Paris", "wrong": " Rome"} per line (wrong for logit_diff only).')
METRIC = typer.Option(None, "--metric", help="With --prompts (default logit_diff): logit_diff (answer - wrong at the last token) "
                      "| logprob (sum of log p(answer tokens)) | loss (mean loss on the answer, or the whole prompt).")
CSV = typer.Option(False, "--csv", help="Also print the tidy table (CSV) on stdout; it is always written beside "
                   "the JSON.")


def prompt_task(m, prompts: Optional[str], metric: str):
    """The --prompts task, or None for NIAH."""
    from ..experiments import PromptTask, read_prompts
    from ..experiments.tasks import PROMPT_METRICS

    if prompts is None:
        if metric is not None:
            raise InvalidInputError(f"--metric {metric} applies to --prompts only; NIAH runs measure recall")
        return None
    metric = metric or "logit_diff"
    if metric not in PROMPT_METRICS:
        raise InvalidInputError(f"--metric {metric!r}: valid metrics are {', '.join(PROMPT_METRICS)}")
    return PromptTask(read_prompts(prompts, m.tokenizer, metric), metric, name=str(prompts))


def write_task_prompts(task, samples, m, path: Path) -> None:
    from ..tasks.niah import write_prompts

    if task is None:
        write_prompts(samples, m.tokenizer, path)
        return
    with open(path, "w") as f:
        for it in task.items:
            f.write(dumps({"source": it.source, "prompt": it.text, "answer": it.answer, "wrong": it.wrong,
                                "input_ids": it.ids, "answer_ids": it.answer_ids, "wrong_ids": it.wrong_ids}) + "\n")


def ablate(ctx: typer.Context, model: Optional[str] = MODEL,
           heads: str = typer.Option("retrieval", "--heads", help=HEADS_HELP),
           mode: str = typer.Option("zero", "--mode", help="zero | mean | uniform (query zeroed, as Wu et al.)."),
           decode_only: bool = typer.Option(False, "--decode-only", help="Mask during decoding only, like the "
                                            "original (default: prefill and decode)."),
           draws: int = typer.Option(3, "--draws", min=0, help="Matched random-head draws."),
           random_pool: str = typer.Option("layer", "--random-pool", help="layer: random heads with the same "
                                           "count per layer (matched); any: the same count from any layer."),
           n_heads: Optional[int] = typer.Option(None, "--n-heads", min=1, help="With --heads random: how many heads."),
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
    from ..analyses.ablation import AblationConfig, run_ablation
    from ..hooks.interventions import ABLATION_MODES
    from ..tasks.niah import build_niah

    if mode not in ABLATION_MODES:
        raise InvalidInputError(f"--mode {mode!r}: valid modes are {', '.join(ABLATION_MODES)}")
    if random_pool not in ("layer", "any"):
        raise InvalidInputError(f"--random-pool {random_pool!r}: use layer (same count per layer) or any")
    niah = experiment_grid(ctx, heads, from_dir, prompts, lengths, depths, seeds, haystack, needles, separator,
                           max_new_tokens)
    o, m = open_run("ablate", out, overwrite, model, device, model_dtype, revision, device_map, max_memory)
    task = prompt_task(m, prompts, metric)
    if task is None:  # the NIAH grid is only built when no --prompts are given
        niah = niah_for_model(m, niah)
    samples = build_niah(m.tokenizer, niah) if task is None else None  # refused prompts fail before a detection
    if task is None:
        note_niah(m, niah)
    batch_size = experiment_batch(m, batch_size, niah, task, detecting=heads == "retrieval" and not from_dir)
    target, source, detection = resolve_target_heads(heads, m, niah, threshold, from_dir, batch_size, o, seed,
                                                     n_heads)
    cfg = AblationConfig(heads=tuple(target), niah=niah, mode=mode, decode_only=decode_only, draws=draws, seed=seed,
                         random_pool=random_pool, batch_size=batch_size, heads_source=source)
    n = len(samples) if task is None else task.n
    prog, advance = progress_bar(n * (2 + draws), "ablation conditions")
    with prog:
        res = run_ablation(m, cfg, samples=samples, task=task, detection=detection, progress=advance)
    write_result(res, o, "ablation", as_json, csv)
    write_task_prompts(task, samples, m, o / "prompts.jsonl")
    if not (as_json or csv):
        _print_ablation(res, o)


def _print_ablation(res, out):
    import numpy as np
    from .common import console
    from rich.table import Table

    t = Table(title=f"{res.model}: {res.mode} ablation of {len(res.heads)} heads ({res.heads_source}), {res.scope}")
    for col in ("condition", "heads", f"{res.metric} [95% CI]", "diff vs baseline [95% CI]", "p (sign-flip)", "d_z",
                "writes (x median head)"):
        t.add_column(col)
    rows = res.conditions + ([res.random_pooled] if res.random_pooled else [])
    for c in rows:
        r = c.estimates[res.metric]
        v = (c.vs_baseline or {}).get(res.metric)
        t.add_row(c.name, heads_cell(c.heads), f"{r['mean']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]",
                  "-" if v is None else f"{v['diff']:+.2f} [{v['diff_lo']:+.2f}, {v['diff_hi']:+.2f}]",
                  "-" if v is None else f"{v['p_value']:.3g}", "-" if v is None else f"{v['cohens_d']:.2f}",
                  "-" if c.head_write_rel is None else f"{c.head_write_rel:.2f}")
    c = console()
    c.print(t)
    tv = res.target_vs_random
    if tv:
        c.print(f"target vs pooled random heads ({res.metric}, paired): {tv['diff']:+.2f} "
                f"[{tv['diff_lo']:+.2f}, {tv['diff_hi']:+.2f}], p = {tv['p_value']:.3g}")
    if res.controls_note:
        c.print(f"note: {res.controls_note}", highlight=False)
    target = next((x for x in res.conditions if x.name == "target"), None)
    rnd = [x.head_write_rel for x in res.conditions if x.name.startswith("random-") and x.head_write_rel is not None]
    if target is not None and target.head_write_rel and rnd and np.mean(rnd) < 0.5 * target.head_write_rel:
        c.print(f"note: the random control heads write {target.head_write_rel / np.mean(rnd):.1f}x less into the "
                "residual stream than the target heads (ablation.json head_write_norm); masking heads that "
                "write little is a weak control")
    c.print(f"written to {final_path(out)}/")
