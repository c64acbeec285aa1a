"""`interp detect induction` and `interp detect copy-suppression` (registered on `detect` by cli.app)."""

from __future__ import annotations

from typing import Optional

import typer

from interp.errors import InvalidInputError
from interp.cli.options import finite, load_options, parse_ints, unit_interval
from interp.cli.output import progress_bar
from interp.cli.runs import write_result, write_table
from interp.cli.options import BATCH, DEVICE, DEVICE_MAP, DTYPE, JSON, MAX_MEMORY, MODEL, OUT, OVERWRITE, REVISION
from interp.cli.runs import open_run
from interp.cli.head_print import _print_copy_suppression, _print_induction

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
