"""`interp detect streaming`: far-context necessity of every head (registered on `detect` by cli.app)."""

from __future__ import annotations

from typing import Optional

import typer

from interp.cli.options import (DEPTHS, DEVICE, DEVICE_MAP, DTYPE, HAYSTACK, JSON, LENGTHS, MAX_MEMORY, MODEL,
                                NEEDLES, OUT, OVERWRITE, REVISION, SEEDS, SEPARATOR, finite, niah_config)
from interp.cli.output import console, progress_bar
from interp.cli.runs import final_path, open_run, write_result

WINDOW = typer.Option(64, "--window", min=1, help="Recent keys a windowed head keeps, the query included.")
SINKS = typer.Option(4, "--sinks", min=0, help="First tokens a windowed head keeps besides (attention sinks).")


def detect_streaming(model: Optional[str] = MODEL, lengths: str = LENGTHS, depths: str = DEPTHS, seeds: int = SEEDS,
                     haystack: Optional[str] = HAYSTACK, needles: Optional[str] = NEEDLES,
                     separator: str = SEPARATOR, window: int = WINDOW, sinks: int = SINKS,
                     by_group: bool = typer.Option(False, "--by-group", help="Window whole KV groups (the unit whose "
                                                   "KV memory a window frees under GQA) instead of single heads."),
                     texts: int = typer.Option(4, "--texts", min=0, help="Corpus passages for the far-position loss."),
                     threshold: float = typer.Option(0.01, "--threshold", callback=finite, help="Necessity (nats of "
                                                     "answer log-prob lost) of a far-context head."),
                     loss_threshold: float = typer.Option(0.01, "--loss-threshold", callback=finite, help="Far loss "
                                                          "rise (nats per token) of a far-context head."),
                     from_dir: Optional[str] = typer.Option(None, "--from", help="A retrieval detection run (its "
                                                            "retrieval.json) to compare rankings with."),
                     batch_size: int = typer.Option(8, "--batch-size", min=1, help="Windowed rows per forward pass."),
                     seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap and sign flips."),
                     device: Optional[str] = DEVICE, revision: Optional[str] = REVISION,
                     device_map: Optional[str] = DEVICE_MAP, max_memory: Optional[str] = MAX_MEMORY,
                     model_dtype: Optional[str] = DTYPE, out: Optional[str] = OUT, overwrite: bool = OVERWRITE,
                     as_json: bool = JSON):
    """Window every head alone to --sinks first tokens and the last --window keys: the change of the NIAH answer's
    log-prob and of long-text loss, with paired CIs; far-context vs streaming heads (DuoAttention's split)."""
    from interp.analyses.heads import SavedDetection
    from interp.analyses.streaming import StreamingConfig, agreement, run_streaming_scan
    from interp.tasks.niah import build_niah, niah_for_model

    saved = SavedDetection.read(from_dir, "retrieval") if from_dir else None
    niah = niah_config(lengths, depths, seeds, haystack, needles, separator, None)
    o, m = open_run("streaming", out, overwrite, model, device, model_dtype, revision, device_map, max_memory)
    niah = niah_for_model(m, niah)
    cfg = StreamingConfig(niah=niah, window=window, sinks=sinks, by_group=by_group, texts=texts, threshold=threshold,
                          loss_threshold=loss_threshold, max_rows=batch_size, seed=seed)
    samples = build_niah(m.tokenizer, niah)
    prog, advance = progress_bar(len(samples) + texts, "streaming scan (prompts)")
    with prog:
        res = run_streaming_scan(m, cfg, samples=samples, progress=advance)
    if saved is not None:
        d = saved.data
        res.agreement = {"from": str(from_dir), **agreement(res, d["scores"], d.get("streaming"),
                                                            k=len(d["heads"]) or None)}
    write_result(res, o, "streaming", as_json)
    if not as_json:
        _print(res, o)


def _print(res, out) -> None:
    from rich.table import Table

    c = console()
    t = Table(title=f"{res.model}: far-context necessity, each {res.unit.replace('_', ' ')} alone windowed to "
                    f"{res.sinks} sinks + {res.window} recent keys ({res.n_prompts} NIAH prompts, {res.n_texts} texts)")
    for col in ("head", "necessity (nats)", "answer log-prob change [95% CI]", "p (BH)", "far loss change [95% CI]",
                "label"):
        t.add_column(col, justify="right")
    for name, _ in res.top(12):
        l, h = (int(x) for x in name[1:].split("H"))
        lp, ls = res.logprob, res.loss
        loss = "-" if ls.get("diff") is None else f"{ls['diff'][l][h]:+.4f} [{ls['lo'][l][h]:+.4f}, {ls['hi'][l][h]:+.4f}]"
        t.add_row(name, f"{res.scores[l][h]:+.4f}", f"{lp['diff'][l][h]:+.4f} [{lp['lo'][l][h]:+.4f}, "
                  f"{lp['hi'][l][h]:+.4f}]", f"{lp['p_bh'][l][h]:.3g}", loss, res.labels[l][h])
    c.print(t)
    c.print(f"baseline: answer log-prob {res.baseline['answer_logprob']:.3f}"
            + ("" if res.baseline["far_loss"] is None else f", far loss {res.baseline['far_loss']:.3f} nats/token"))
    c.print("labels: " + ", ".join(f"{k} {v}" for k, v in res.counts.items()) + f" ({res.thresholds['rule']}; "
            f"thresholds {res.thresholds['necessity_nats']} nats, {res.thresholds['loss_nats_per_token']} nats/token)")
    w = res.work
    c.print(f"work: {w['forwards']:.1f} forward-equivalents (bound {w['work_bound']:.1f}; one forward per unit would be "
            f"{w['one_forward_per_unit']}), {w['cpu_s']:.1f} CPU-s")
    if res.agreement:
        a = res.agreement
        c.print(f"vs retrieval scores ({a['from']}): top-{a['k']} overlap {a['top_k_overlap']}, Spearman "
                f"{a['spearman_retrieval']:+.2f}" + ("" if "spearman_attention_mass" not in a else
                                                      f"; vs attention mass on sinks + window: Spearman "
                                                      f"{a['spearman_attention_mass']:+.2f}"))
    c.print(f"written to {final_path(out)}/")
