"""`interp detect retrieval` (and, for cli.app, `interp ablate` from cli.ablate_cmds)."""

from __future__ import annotations

from typing import Optional

import typer

from interp.cli.ablate_cmds import ablate
from interp.cli.ablate_print import _print_ablation
from interp.cli.experiment import write_detection
from interp.cli.options import (BATCH, DEPTHS, DEVICE, DEVICE_MAP, DTYPE, HAYSTACK, JSON, LENGTHS, MAX_MEMORY, MAX_NEW,
                                MODEL, NEEDLES, OUT, OVERWRITE, REVISION, SEEDS, SEPARATOR, THRESHOLD, load_options,
                                niah_config)
from interp.cli.output import console, note_niah, progress_bar
from interp.runtime.jsonio import dumps
from interp.cli.runs import final_path, open_run
from interp.errors import InvalidInputError
from interp.tasks.niah import niah_for_model

__all__ = ["ablate", "detect_retrieval", "_print_ablation"]  # ablate and its table: where cli.app and rope-remap look


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
    load = load_options(model, device, model_dtype, revision, device_map, max_memory)
    o, m = open_run("retrieval", out, overwrite, load)
    niah = niah_for_model(m, niah)  # --batch-size (N or auto) is resolved by the detector for this grid
    res, samples = _detect(m, niah, threshold, all_samples, batch_size, sinks, window, score_norm)
    write_detection(res, samples, m, o)
    if as_json:
        typer.echo(dumps(res.to_dict()))
    else:
        _print_detection(res, o)
