"""`interp detect retrieval` and `interp ablate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..errors import InvalidInputError
from .common import niah_config, out_dir, progress_bar, write_json

detect_app = typer.Typer(no_args_is_help=True, help="Detect head types.")

MODEL = typer.Option(None, "--model", "-m", help="Alias, checkpoint dir or Hub id (default: bundled default model).")
LENGTHS = typer.Option("512", "--lengths", help="NIAH context lengths in tokens, comma-separated.")
DEPTHS = typer.Option("0,0.25,0.5,0.75,1", "--depths", help="Needle depths (fraction of the haystack before it).")
SEEDS = typer.Option(4, "--seeds", help="Paired seeds per (length, depth).")
HAYSTACK = typer.Option(None, "--haystack", help="Plain-text haystack file (default: interp's corpus generator).")
NEEDLES = typer.Option(None, "--needles", help='JSONL file: {"needle", "question", "answer"} per line.')
SEPARATOR = typer.Option("\\n", "--separator", help="Inserted between haystack and question with user files.")
MAX_NEW = typer.Option(None, "--max-new-tokens", help="Greedy tokens to decode (default: answer length + 2).")
BATCH = typer.Option(8, "--batch-size", help="Prompts per forward pass.")
DEVICE = typer.Option(None, "--device", help="cpu, cuda, cuda:1, ... (default: cuda if available).")
DTYPE = typer.Option(None, "--dtype", help="float32, bfloat16, float16 (default: float32 on CPU, bf16 on CUDA).")
OUT = typer.Option(None, "--out", "-o", help="Output directory (default: runs/<command>-<model>-<time>).")
JSON = typer.Option(False, "--json", help="Print the result JSON on stdout.")
THRESHOLD = typer.Option(0.1, "--threshold", help="Retrieval-score threshold for a retrieval head.")


def _model(name, device, dtype):
    from ..loading import load_model
    from .app import _default_model

    return load_model(name or _default_model(), device=device, dtype=dtype)


def _detect(model, niah, threshold, all_samples, batch_size, sink, recent):
    from ..analyses.retrieval import RetrievalConfig, detect_retrieval_heads
    from ..tasks.niah import build_niah

    cfg = RetrievalConfig(niah=niah, threshold=threshold, only_successful=not all_samples, batch_size=batch_size,
                          sink_tokens=sink, recent_window=recent)
    samples = build_niah(model.tokenizer, niah)
    prog, advance = progress_bar(len(samples), "retrieval scores")
    with prog:
        res = detect_retrieval_heads(model, cfg, samples=samples, progress=advance)
    return res, samples


def _write_detection(res, samples, model, out: Path):
    from .. import plotting
    from ..tasks.niah import write_prompts

    write_json(res.to_dict(), out / "retrieval.json")
    write_prompts(samples, model.tokenizer, out / "prompts.jsonl")
    d = res.to_dict()
    plotting.write_html(plotting.retrieval_heatmap(d), out / "retrieval_heatmap.html")
    plotting.write_html(plotting.streaming_heatmap(d), out / "streaming_heatmap.html")
    plotting.write_html(plotting.threshold_sweep(d), out / "threshold_sweep.html")


def _print_detection(res, out):
    from rich.console import Console

    c = Console(stderr=True)
    n_total = len(res.scores) * len(res.scores[0])
    c.print(f"[bold]{res.model}[/]: baseline recall {res.baseline_recall:.2f} on {res.n_samples} prompts; "
            f"scores averaged over {res.n_used}")
    c.print(f"retrieval heads (score > {res.threshold}): {len(res.heads)} of {n_total} "
            f"({100 * len(res.heads) / n_total:.1f}%): {', '.join(res.heads[:20])}{' ...' if len(res.heads) > 20 else ''}")
    c.print("per layer: " + " ".join(f"L{l}:{n}" for l, n in enumerate(res.per_layer)))
    c.print("sweep: " + "  ".join(f">{s['threshold']}:{s['n_heads']}" for s in res.sweep))
    c.print(f"written to {out}/")


@detect_app.command("retrieval")
def detect_retrieval(model: Optional[str] = MODEL, lengths: str = LENGTHS, depths: str = DEPTHS, seeds: int = SEEDS,
                     haystack: Optional[str] = HAYSTACK, needles: Optional[str] = NEEDLES, separator: str = SEPARATOR,
                     max_new_tokens: Optional[int] = MAX_NEW, threshold: float = THRESHOLD,
                     all_samples: bool = typer.Option(False, "--all-samples", help="Average over every sample, not "
                                                      "only those answered correctly (the original's choice)."),
                     sink: int = typer.Option(4, "--sink", help="Sink tokens for the streaming score."),
                     recent: int = typer.Option(64, "--recent", help="Recent window for the streaming score."),
                     batch_size: int = BATCH, device: Optional[str] = DEVICE, dtype: Optional[str] = DTYPE,
                     out: Optional[str] = OUT, as_json: bool = JSON):
    """Wu et al. retrieval scores per query head from NIAH decoding (plus a streaming score)."""
    niah = niah_config(lengths, depths, seeds, haystack, needles, separator, max_new_tokens)
    m = _model(model, device, dtype)
    res, samples = _detect(m, niah, threshold, all_samples, batch_size, sink, recent)
    o = out_dir(out, "retrieval", m.name)
    _write_detection(res, samples, m, o)
    if as_json:
        typer.echo(json.dumps(res.to_dict()))
    else:
        _print_detection(res, o)


def _heads_from(spec_text: str, model, from_dir: Optional[str]):
    """Resolve --heads: explicit ids, a file of ids, or a retrieval.json."""
    from ..types import as_heads

    p = Path(spec_text)
    if p.is_file():
        text = p.read_text()
        if p.suffix == ".json":
            try:
                return as_heads(json.loads(text)["heads"]), f"file {p}"
            except (KeyError, json.JSONDecodeError, TypeError):
                raise InvalidInputError(f"{p} is not a retrieval.json (needs a 'heads' list)") from None
        return as_heads(text.replace("\n", ",").replace(" ", ",")), f"file {p}"
    return as_heads(spec_text), "explicit"


def resolve_target_heads(heads: str, m, niah, threshold: float, from_dir, batch_size: int, o: Path, seed: int,
                         n_heads=None):
    """--heads retrieval (detected now, or read from --from DIR) | random | ids | FILE -> (heads, source, detection)."""
    import random

    from ..stats.heads import _as_pair
    from ..types import HeadId, as_heads

    if heads == "retrieval":
        if from_dir:
            f = Path(from_dir) / "retrieval.json"
            if not f.is_file():
                raise InvalidInputError(f"--from {from_dir}: no retrieval.json there; run `interp detect retrieval`")
            d = json.loads(f.read_text())
            if d.get("model") != m.name:
                raise InvalidInputError(f"{f} was computed on {d.get('model')!r}, not {m.name!r}")
            return as_heads(d["heads"]), f"retrieval (from {f})", {"from": str(f), "threshold": d["threshold"],
                                                                    "n_heads": len(d["heads"])}
        res, dsamples = _detect(m, niah, threshold, False, batch_size, 4, 64)
        _write_detection(res, dsamples, m, o)
        return res.head_ids(), f"retrieval (detected, threshold {threshold})", {
            "threshold": threshold, "n_heads": len(res.heads), "baseline_recall": res.baseline_recall,
            "file": str(o / "retrieval.json")}
    if heads == "random":
        total = m.spec.n_layers * m.spec.n_heads
        k = n_heads or max(1, total // 10)
        if not 1 <= k <= total:
            raise InvalidInputError(f"--n-heads must be in 1..{total}")
        rng = random.Random(seed)
        target = tuple(sorted(HeadId(*divmod(i, m.spec.n_heads)) for i in rng.sample(range(total), k)))
        return target, f"random ({k} heads, seed {seed})", None
    target, source = _heads_from(heads, m, from_dir)
    for h in target:  # fail before any decoding, with the model's bounds in the message
        _as_pair(h, m.spec.n_layers, m.spec.n_heads, "selected")
    return target, source, None


def ablate(model: Optional[str] = MODEL,
           heads: str = typer.Option("retrieval", "--heads", help="retrieval | random | L3H1,L5H0 | FILE (ids or a "
                                     "retrieval.json)."),
           mode: str = typer.Option("zero", "--mode", help="zero | mean | uniform (query zeroed, as Wu et al.)."),
           decode_only: bool = typer.Option(False, "--decode-only", help="Mask during decoding only, like the "
                                            "original (default: prefill and decode)."),
           draws: int = typer.Option(3, "--draws", help="Matched random-head draws."),
           random_pool: str = typer.Option("layer", "--random-pool", help="layer: random heads with the same "
                                           "count per layer (matched); any: the same count from any layer."),
           n_heads: Optional[int] = typer.Option(None, "--n-heads", help="With --heads random: how many heads."),
           from_dir: Optional[str] = typer.Option(None, "--from", help="Reuse retrieval.json from this directory."),
           seed: int = typer.Option(0, "--seed", help="Seed of the random draws and bootstrap."),
           lengths: str = LENGTHS, depths: str = DEPTHS, seeds: int = SEEDS, haystack: Optional[str] = HAYSTACK,
           needles: Optional[str] = NEEDLES, separator: str = SEPARATOR, max_new_tokens: Optional[int] = MAX_NEW,
           threshold: float = THRESHOLD, batch_size: int = BATCH, device: Optional[str] = DEVICE,
           dtype: Optional[str] = DTYPE, out: Optional[str] = OUT, as_json: bool = JSON):
    """Mask heads on NIAH; compare with baseline and matched random heads (paired CIs, permutation tests)."""
    from .. import plotting
    from ..analyses.ablation import AblationConfig, run_ablation
    from ..interventions import ABLATION_MODES
    from ..tasks.niah import build_niah, write_prompts

    if mode not in ABLATION_MODES:
        raise InvalidInputError(f"--mode {mode!r}: valid modes are {', '.join(ABLATION_MODES)}")
    if draws < 0:
        raise InvalidInputError("--draws must be >= 0")
    if random_pool not in ("layer", "any"):
        raise InvalidInputError(f"--random-pool {random_pool!r}: use layer (same count per layer) or any")
    niah = niah_config(lengths, depths, seeds, haystack, needles, separator, max_new_tokens)
    m = _model(model, device, dtype)
    o = out_dir(out, "ablate", m.name)
    target, source, detection = resolve_target_heads(heads, m, niah, threshold, from_dir, batch_size, o, seed,
                                                     n_heads)
    cfg = AblationConfig(heads=tuple(target), niah=niah, mode=mode, decode_only=decode_only, draws=draws, seed=seed,
                         random_pool=random_pool, batch_size=batch_size, heads_source=source)
    samples = build_niah(m.tokenizer, niah)
    prog, advance = progress_bar(len(samples) * (2 + draws), "ablation conditions")
    with prog:
        res = run_ablation(m, cfg, samples=samples, detection=detection, progress=advance)
    d = res.to_dict()
    write_json(d, o / "ablation.json")
    write_prompts(samples, m.tokenizer, o / "prompts.jsonl")
    plotting.write_html(plotting.recall_by_condition(d), o / "recall_by_condition.html")
    if as_json:
        typer.echo(json.dumps(d))
    else:
        _print_ablation(res, o)


def _print_ablation(res, out):
    import numpy as np
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{res.model}: {res.mode} ablation of {len(res.heads)} heads ({res.heads_source}), {res.scope}")
    for col in ("condition", "heads", "recall [95% CI]", "diff vs baseline [95% CI]", "p (sign-flip)", "d_z",
                "writes (x median head)"):
        t.add_column(col)
    rows = res.conditions + ([res.random_pooled] if res.random_pooled else [])
    for c in rows:
        r = c.recall
        v = c.vs_baseline
        t.add_row(c.name, str(len(c.heads)) if c.heads else "-", f"{r['mean']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]",
                  "-" if v is None else f"{v['diff']:+.2f} [{v['diff_lo']:+.2f}, {v['diff_hi']:+.2f}]",
                  "-" if v is None else f"{v['p_value']:.3g}", "-" if v is None else f"{v['cohens_d']:.2f}",
                  "-" if c.head_write_rel is None else f"{c.head_write_rel:.2f}")
    c = Console(stderr=True)
    c.print(t)
    n_draws = len(res.conditions) - 2
    if n_draws > 1 and res.distinct_draws < n_draws:
        kind = "layer-matched " if res.random_pool == "layer" else ""
        why = "few non-target heads in those layers" if kind else "drawn twice by chance"
        c.print(f"note: only {res.distinct_draws} distinct {kind}random head set(s) among the {n_draws} "
                f"draws ({why}); identical draws were run once"
                + ("; --random-pool any draws the same count from every layer" if kind else ""))
    target = next((x for x in res.conditions if x.name == "target"), None)
    rnd = [x.head_write_rel for x in res.conditions if x.name.startswith("random-") and x.head_write_rel is not None]
    if target is not None and target.head_write_rel and rnd and np.mean(rnd) < 0.5 * target.head_write_rel:
        c.print(f"note: the random control heads write {target.head_write_rel / np.mean(rnd):.1f}x less into the "
                "residual stream than the target heads (ablation.json head_write_norm); masking heads that "
                "write little is a weak control")
    c.print(f"written to {out}/")
