"""`interp detect induction` and `interp detect copy-suppression` (registered on `detect` by cli.app)."""

from __future__ import annotations

from typing import Optional

import typer

from interp.errors import InvalidInputError
from interp.cli.options import finite, load_options, parse_ints, unit_interval
from interp.cli.output import heads_cell, progress_bar
from interp.cli.runs import final_path, write_result, write_table
from interp.cli.options import BATCH, DEVICE, DEVICE_MAP, DTYPE, JSON, MAX_MEMORY, MODEL, OUT, OVERWRITE, REVISION
from interp.cli.runs import open_run

SEED = typer.Option(0, "--seed", help="Seed of the random tokens / texts, token samples, control draws, bootstrap.")
MODE = typer.Option("zero", "--mode", help="Ablation: zero | mean | uniform.")
HEADS = typer.Option(None, "--heads", help="Heads to ablate instead of the detected ones, e.g. L1H3,L2H0.")
EMBEDDING = typer.Option("layer0", "--embedding", help="Effective embedding for OV/QK circuits: layer0 | embed.")
N_BOOT = typer.Option(10000, "--n-boot", min=1, help="Bootstrap resamples for the CIs.")


def _heads(text):
    from interp.sites import as_heads

    return None if not text else tuple(as_heads(text))


def _run(load, out, overwrite: bool, command: str, steps, analyse, printer, as_json: bool) -> None:
    """Load (`load`: the LoadOptions), run `analyse(model, advance)` under a progress bar of `steps(model)` steps,
    write <command>.json and its table (the figures and index.html come from them when the run is committed),
    report. The analysis resolves --batch-size (N or auto) itself, for its sequences."""
    o, m = open_run(command, out, overwrite, load)
    prog, advance = progress_bar(steps(m), command)
    with prog:
        res = analyse(m, advance)
    stem = command.replace('-', '_')
    d = write_result(res, o, stem, as_json)
    if getattr(res, "causal", None):
        write_table(res.causal_frame(), o / f"{stem}_causal.csv")
    if not as_json:
        printer(d, o)


def _fmt(v, spec=".3f"):
    return "-" if v is None else format(v, spec)


def detect_induction(model: Optional[str] = MODEL,
                     lengths: str = typer.Option("50", "--copy-lengths", help="Tokens per copy, comma-separated."),
                     seqs: int = typer.Option(32, "--n-seqs", min=2, help="Repeated sequences per length."),
                     tokens: str = typer.Option("auto", "--tokens", help="Token pool (random sequences, OV circuit): "
                                                "corpus (ids seen in held-out corpus text) | vocab (all but special "
                                                "tokens) | auto (corpus when the model has a tokenizer)."),
                     threshold: float = typer.Option(0.4, "--threshold", callback=finite, help="Induction score of an induction head."),
                     min_copying: float = typer.Option(0.0, "--min-copying", callback=finite, help="... and OV copying score above this."),
                     max_heads: Optional[int] = typer.Option(None, "--max-heads", min=1, help="At most this many heads."),
                     heads: Optional[str] = HEADS, mode: str = MODE,
                     draws: int = typer.Option(5, "--draws", min=0, help="Matched random-head draws."),
                     control_exclude: str = typer.Option("near", "--control-exclude", help="near: heads whose "
                                                         "induction score passes --threshold but are not ablated "
                                                         "(OV copying too low, past --max-heads) are kept out of "
                                                         "the random sets | none: they may be drawn (named)."),
                     copy_tokens: int = typer.Option(2048, "--copy-tokens", min=2, help="Token sample for OV copying."),
                     sweep: bool = typer.Option(False, "--sweep", help="Also ablate every head alone (one pass per "
                                                "head): per-head change of the second-copy loss."),
                     embedding: str = EMBEDDING, seed: int = SEED, n_boot: int = N_BOOT, batch_size: int = BATCH,
                     device: Optional[str] = DEVICE, revision: Optional[str] = REVISION, device_map: Optional[str] = DEVICE_MAP,
          max_memory: Optional[str] = MAX_MEMORY, model_dtype: Optional[str] = DTYPE, out: Optional[str] = OUT,
                     overwrite: bool = OVERWRITE,
                     as_json: bool = JSON):
    """Induction, previous-token and duplicate-token scores on repeated random tokens; OV copying; ablation of
    the induction heads vs matched random heads (second-copy loss, ICL score, paired CIs)."""
    from interp.analyses.induction import InductionConfig, detect_induction_heads
    from interp.tasks.repeated import RepeatedConfig

    if tokens not in ("auto", "vocab", "corpus"):
        raise InvalidInputError(f"--tokens {tokens!r}: valid are auto, vocab, corpus")
    cfg = InductionConfig(repeated=RepeatedConfig(lengths=parse_ints(lengths, "--lengths"), n_seqs=seqs, seed=seed),
                          tokens=tokens, threshold=threshold, min_copying=min_copying, max_heads=max_heads,
                          heads=_heads(heads), mode=mode, draws=draws, seed=seed,
                          batch_size=batch_size,
                          copy_tokens=copy_tokens, embedding=embedding, n_boot=n_boot, n_perm=n_boot, sweep=sweep,
                          control_exclude=control_exclude)
    load = load_options(model, device, model_dtype, revision, device_map, max_memory)
    _run(load, out, overwrite, "induction",
         lambda m: None,  # the total: planned by the analysis (the heads it finds, the distinct random sets)
         lambda m, advance: detect_induction_heads(m, cfg, progress=advance), _print_induction, as_json)


def _print_induction(d: dict, out) -> None:
    from interp.cli.output import console, print_tests
    from interp.figures.text import adjusted, p_cell
    from rich.table import Table

    c = console()
    named = set(d["induction_heads"]) | set(d["prev_token_heads"])  # every head the lines below name is shown
    rows = [r for i, r in enumerate(d["ranked"]) if i < 12 or r["head"] in named]
    n_all = len(d["ranked"])
    shown = f"; {len(rows)} of {n_all} shown: the top 12 and every head named below" if len(rows) < n_all else ""
    t = Table(title=f"{d['model']}: heads by induction score ({d['n_seqs']} repeated sequences{shown})")
    for col in ("head", "induction", "prev_token", "duplicate", "copying", f"copy_top_{d['config']['copy_k']}"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(r["head"], *(_fmt(r[k]) for k in ("induction", "prev_token", "duplicate", "copying", "copy_top_k")))
    c.print(t)
    for ls in d["losses"]:
        c.print(f"length {ls['length']}: first-copy loss {ls['early_loss']:.3f}, second-copy {ls['late_loss']:.3f}, "
                f"ICL score {ls['icl_score']:+.3f} nats")
    c.print(f"induction heads: {', '.join(d['induction_heads']) or 'none'}; previous-token heads: "
            f"{', '.join(d['prev_token_heads']) or 'none'}")
    cz = d["causal"]
    if cz:
        t = Table(title=f"{cz['mode']} ablation of {', '.join(cz['heads'])} ({cz['heads_source']})")
        for col in ("condition", "heads", "second-copy loss [95% CI]", "diff vs baseline [95% CI]", "p (sign-flip)",
                    "p (Holm)", "ICL score"):
            t.add_column(col)
        for cond in cz["conditions"] + ([cz["random_pooled"]] if cz["random_pooled"] else []):
            ll, v = cond["estimates"]["late_loss"], (cond["vs_baseline"] or {}).get("late_loss")
            t.add_row(cond["name"], heads_cell(cond["heads"]), f"{ll['mean']:.3f} [{ll['lo']:.3f}, {ll['hi']:.3f}]",
                      "-" if v is None else f"{v['diff']:+.3f} [{v['diff_lo']:+.3f}, {v['diff_hi']:+.3f}]",
                      p_cell(v), adjusted(v), f"{cond['estimates']['icl']['mean']:+.3f}")
        c.print(t)
        if cz.get("excluded_from_controls"):
            near = cz["near_target_heads"]
            c.print("kept out of the random sets (induction score above the threshold, not ablated): "
                    + ", ".join(f"{h} ({near[h]:.3f})" for h in cz["excluded_from_controls"]), highlight=False,
                    soft_wrap=True)
        print_tests("induction", d, digits=3)
    sw = d.get("single_head_effects")
    if sw and sw.get("late_loss_p_bh") is not None:
        late, bh = sw["late_loss"], sw["late_loss_p_bh"]
        hits = sorted(((abs(late[l][h]), l, h) for l in range(len(bh)) for h in range(len(bh[l]))
                       if bh[l][h] is not None and bh[l][h] < 0.05), reverse=True)
        n = sum(len(r) for r in bh)
        c.print(f"single-head sweep: {len(hits)} of {n} heads change the second-copy loss at Benjamini-Hochberg "
                f"p < 0.05 (false discovery rate over the {n} heads; raw p in induction.json"
                + ("" if not hits else "): " + ", ".join(f"L{l}H{h} {late[l][h]:+.3f}" for _, l, h in hits[:12])
                   + (" ..." if len(hits) > 12 else "")) + ("" if hits else ")"), highlight=False, soft_wrap=True)
    c.print(f"written to {final_path(out)}/")


def detect_copy_suppression_cmd(model: Optional[str] = MODEL,
                                texts: Optional[str] = typer.Option(None, "--texts", help="Plain-text file, documents "
                                                                    "separated by blank lines, or a fetched text "
                                                                    "(`interp texts`, e.g. sherlock-holmes: its "
                                                                    "paragraphs); default: held-out corpus "
                                                                    "documents."),
                                n_texts: int = typer.Option(64, "--n-texts", min=2, help="Documents to use."),
                                seq_len: int = typer.Option(128, "--seq-len", min=8, help="Tokens per document window."),
                                circuit_tokens: int = typer.Option(2048, "--circuit-tokens", min=2, help="Token sample for the "
                                                                   "OV/QK circuits."),
                                tokens: str = typer.Option("auto", "--tokens", help="Pool of that sample: auto | "
                                                                 "corpus | vocab (as for `detect induction`)."),
                                k: int = typer.Option(10, "--k", min=1, help="Top/bottom-k for the OV and QK circuit scores."),
                                min_attention: float = typer.Option(0.2, "--min-attention", callback=unit_interval, help="Top non-sink key "
                                                                    "weight at which a position counts as attended."),
                                heads: Optional[str] = typer.Option(None, "--heads", help="Heads to ablate (default: "
                                                                    "the best candidates by OV suppression)."),
                                candidates: int = typer.Option(3, "--candidates", min=0, help="Candidates to ablate."),
                                mode: str = MODE, embedding: str = EMBEDDING, seed: int = SEED, n_boot: int = N_BOOT,
                                batch_size: int = BATCH, device: Optional[str] = DEVICE, revision: Optional[str] = REVISION, device_map: Optional[str] = DEVICE_MAP,
          max_memory: Optional[str] = MAX_MEMORY,
                                model_dtype: Optional[str] = DTYPE, out: Optional[str] = OUT,
                                overwrite: bool = OVERWRITE, as_json: bool = JSON):
    """Copy-suppression heads: OV self-suppression, QK matching of predicted tokens, direct logit effect on attended
    tokens, and ablation of the candidates (copied-token probability; direct vs total effect = self-repair)."""
    from interp.analyses.copy_suppression import CopySuppressionConfig, detect_copy_suppression
    from interp.tasks.text import read_documents

    docs = tuple(read_documents(texts)) if texts else None
    cfg = CopySuppressionConfig(n_texts=n_texts, seq_len=seq_len, texts=docs, seed=seed,
                                batch_size=batch_size,
                                tokens=circuit_tokens, token_source=tokens, k=k, embedding=embedding,
                                min_attention=min_attention,
                                heads=_heads(heads), n_candidates=candidates, mode=mode, n_boot=n_boot)
    load = load_options(model, device, model_dtype, revision, device_map, max_memory)
    _run(load, out, overwrite, "copy-suppression", lambda m: 1 + n_texts,
         lambda m, advance: detect_copy_suppression(m, cfg, progress=advance), _print_copy_suppression, as_json)


def _print_copy_suppression(d: dict, out) -> None:
    from interp.cli.output import console
    from rich.table import Table

    c = console()
    t = Table(title=f"{d['model']}: heads by OV self-suppression ({d['n_texts']} texts x {d['seq_len']} tokens)")
    cols = ("ov_suppression", "ov_self_z", "qk_circuit", "qk_lift", "dla_attended")
    t.add_column("head")
    for col in cols:
        t.add_column(col, justify="right")
    for r in d["ranked"][:12]:
        t.add_row(r["head"], *(_fmt(r[k]) for k in cols))
    c.print(t)
    if d["candidates"]:
        t = Table(title=f"ablation of candidates ({d['config']['mode']}); copied token = token at the top key")
        for col in ("head", "delta p(copied)", "direct", "total", "self-repair", "repair frac", "copy suppression?"):
            t.add_column(col, justify="right")
        for cand in d["candidates"]:
            a = cand["ablation"]

            def ci(e, fmt="+.3f"):
                return "-" if e is None else f"{e['mean']:{fmt}} [{e['lo']:{fmt}}, {e['hi']:{fmt}}]"
            t.add_row(cand["head"], ci(a["delta_prob"]), ci(a["direct"]), ci(a["total"]), ci(a["self_repair"]),
                      _fmt(cand["self_repair_fraction"], ".2f"), "yes" if cand["is_copy_suppression"] else "no")
        c.print(t)
    c.print(d["summary"])
    c.print(f"written to {final_path(out)}/")
